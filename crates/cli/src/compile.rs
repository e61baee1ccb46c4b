//! `fusefss compile`: a spec file validated and compiled, and the program's costs per
//! element printed, or why it is refused (the exit code is then non-zero).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, anyhow};
use clap::Args;
use compiler::{CompileOptions, Limits, OperatorSpec, Program, SpecError, compile};
use serde::Serialize;

use crate::bench::ops::{comparison_name, full_width_name, lookup_name};

/// Arguments of `fusefss compile`.
#[derive(Args)]
pub struct CompileArgs {
    /// The spec, as JSON (docs/compiler.md describes the format).
    spec: PathBuf,
    /// Print one JSON object (also for a refused spec, with `ok: false`).
    #[arg(long)]
    json: bool,
    /// Budget of the lowering, in symbolic terms (default: `compiler::Limits`'s).
    #[arg(long, value_name = "TERMS")]
    max_terms: Option<u64>,
    /// Largest key of one party per element, in bytes (default: `compiler::Limits`'s).
    #[arg(long, value_name = "BYTES")]
    max_key_bytes: Option<u64>,
}

/// What `--json` prints for a compiled spec.
#[derive(Serialize)]
struct Compiled {
    ok: bool,
    spec: String,
    name: String,
    in_bits: u32,
    out_bits: u32,
    intervals: usize,
    outputs: usize,
    key_bytes_per_elem: f64,
    comm_bytes_per_elem: f64,
    rounds: u32,
    compile_ms: f64,
    comparison: &'static str,
    lookup: String,
    full_width: String,
    comparison_keys: usize,
    comparison_points: u64,
    opened_bits: usize,
    beaver_products: usize,
    dealer_words: usize,
}

/// What `--json` prints for a refused spec.
#[derive(Serialize)]
struct Refused {
    ok: bool,
    spec: String,
    /// `io`, `json`, `invalid` or `limit`.
    kind: &'static str,
    error: String,
}

pub fn run(a: CompileArgs) -> anyhow::Result<()> {
    let path = a.spec.display().to_string();
    match compiled(&a) {
        Ok(c) => {
            if a.json {
                println!("{}", serde_json::to_string(&c)?);
            } else {
                print_text(&c);
            }
            Ok(())
        }
        Err((kind, e)) => {
            if a.json {
                let r = Refused { ok: false, spec: path.clone(), kind, error: format!("{e:#}") };
                println!("{}", serde_json::to_string(&r)?);
            }
            let what = if kind == "limit" { "refused (too large to compile)" } else { "not compiled" };
            Err(e.context(format!("spec {path}: {what}")))
        }
    }
}

/// The spec of `a` read, validated and compiled, or the kind of failure and the error.
fn compiled(a: &CompileArgs) -> Result<Compiled, (&'static str, anyhow::Error)> {
    let text = std::fs::read_to_string(&a.spec)
        .with_context(|| format!("reading {}", a.spec.display()))
        .map_err(|e| ("io", e))?;
    let spec = OperatorSpec::from_json(&text).map_err(|e| (kind(&e), anyhow!(e)))?;
    let defaults = Limits::default();
    let limits = Limits {
        terms: a.max_terms.unwrap_or(defaults.terms),
        key_bytes: a.max_key_bytes.unwrap_or(defaults.key_bytes),
        ..defaults
    };
    let start = Instant::now();
    let p = compile(&spec, CompileOptions { limits, ..CompileOptions::default() })
        .map_err(|e| (kind(&e), anyhow!(e)))?;
    Ok(summary(a, &spec, &p, start.elapsed().as_secs_f64() * 1e3))
}

fn kind(e: &SpecError) -> &'static str {
    match e {
        SpecError::Json(_) => "json",
        SpecError::Limit { .. } => "limit",
        _ => "invalid",
    }
}

fn summary(a: &CompileArgs, spec: &OperatorSpec, p: &Program, compile_ms: f64) -> Compiled {
    let c = p.cost();
    Compiled {
        ok: true,
        spec: a.spec.display().to_string(),
        name: spec.name.clone(),
        in_bits: spec.in_bits,
        out_bits: spec.out_bits,
        intervals: spec.pieces.len(),
        outputs: p.outputs.len(),
        key_bytes_per_elem: c.key_bits as f64 / 8.0,
        comm_bytes_per_elem: 2.0 * c.sent_bits as f64 / 8.0,
        rounds: c.rounds,
        compile_ms,
        comparison: comparison_name(p),
        lookup: lookup_name(p),
        full_width: full_width_name(p).unwrap_or_else(|| "whole".into()),
        comparison_keys: p.families.len(),
        comparison_points: c.queries,
        opened_bits: p.opened.len(),
        beaver_products: p.beaver_round.len() / 2,
        dealer_words: p.words.len(),
    }
}

fn print_text(c: &Compiled) {
    println!(
        "{}: {} -> {} bits, {} intervals, {} outputs; compiled in {:.1} ms",
        c.name, c.in_bits, c.out_bits, c.intervals, c.outputs, c.compile_ms
    );
    println!(
        "  per element: key {:.2} B, communication {:.2} B, {} rounds",
        c.key_bytes_per_elem, c.comm_bytes_per_elem, c.rounds
    );
    println!(
        "  backends: {} comparison ({} keys, {} points), {} lookup, full width {}",
        c.comparison, c.comparison_keys, c.comparison_points, c.lookup, c.full_width
    );
    println!(
        "  {} opened bits, {} Beaver products, {} dealer words",
        c.opened_bits, c.beaver_products, c.dealer_words
    );
}
