//! `fusefss fit`: a spec fitted to a library function, written as JSON, with its error over
//! every representable input of the clamped range and its compiled cost.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use compiler::fit::fit;
use compiler::library::Function;
use compiler::{CompileOptions, compile};
use serde::Serialize;

/// Arguments of `fusefss fit`.
#[derive(Args)]
pub struct FitArgs {
    /// Function: gelu, gelu_tanh, silu, sigmoid, tanh, nexp, reciprocal.
    #[arg(long)]
    function: String,
    /// Input ring width.
    #[arg(long, default_value_t = 50)]
    n: u32,
    /// Fixed-point scale of the input.
    #[arg(long, default_value_t = 12)]
    f: u32,
    /// Uniform intervals over the function's clamped range.
    #[arg(long, default_value_t = 64)]
    intervals: usize,
    /// Polynomial degree per interval (outputs of degree d ≥ 1 are at scale (d + 1)·f).
    #[arg(long, default_value_t = 1)]
    degree: usize,
    /// Write the spec here instead of to standard output.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Summary {
    function: String,
    spec: String,
    n: u32,
    f: u32,
    out_bits: u32,
    out_scale: u32,
    intervals: usize,
    degree: usize,
    range: (f64, f64),
    inputs_checked: u64,
    max_abs_err: f64,
    key_bytes_per_elem: f64,
    comm_bytes_per_elem: f64,
    rounds: u32,
}

pub fn run(a: FitArgs) -> anyhow::Result<()> {
    let Some(func) = Function::from_name(&a.function) else {
        bail!("unknown function {:?}; known: {}", a.function, Function::NAMES.join(", "));
    };
    let fitted = fit(func, a.n, a.f, a.intervals, a.degree).context("fitting")?;
    let program = compile(&fitted.spec, CompileOptions::default()).context("compiling the fitted spec")?;
    let cost = program.cost();
    let json = fitted.spec.to_json();
    match &a.out {
        Some(path) => {
            std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?
        }
        None => println!("{json}"),
    }
    let s = Summary {
        function: func.name().into(),
        spec: fitted.spec.name.clone(),
        n: a.n,
        f: a.f,
        out_bits: fitted.spec.out_bits,
        out_scale: fitted.out_scale,
        intervals: fitted.spec.pieces.len(),
        degree: a.degree,
        range: fitted.range,
        inputs_checked: fitted.inputs,
        max_abs_err: fitted.max_abs_err,
        key_bytes_per_elem: cost.key_bits as f64 / 8.0,
        comm_bytes_per_elem: 2.0 * cost.sent_bits as f64 / 8.0,
        rounds: cost.rounds,
    };
    let text = if a.json {
        serde_json::to_string(&s)?
    } else {
        format!(
            "{}: {} intervals (degree {}, outputs at scale {} in {} bits), max abs error {:.3e} over [{}, {}) \
             ({} inputs); compiled: {:.2} key B, {:.2} comm B, {} rounds per element{}",
            s.spec,
            s.intervals,
            s.degree,
            s.out_scale,
            s.out_bits,
            s.max_abs_err,
            s.range.0,
            s.range.1,
            s.inputs_checked,
            s.key_bytes_per_elem,
            s.comm_bytes_per_elem,
            s.rounds,
            a.out.as_ref().map_or(String::new(), |p| format!("; written to {}", p.display()))
        )
    };
    // The summary goes to standard error when the spec itself is on standard output.
    if a.out.is_some() {
        println!("{text}");
    } else {
        eprintln!("{text}");
    }
    Ok(())
}
