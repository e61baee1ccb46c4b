//! `fusefss bench ops`: key bytes, communication, rounds and time per element of every
//! operator, each run between two in-memory parties and checked against its plaintext
//! fixed-point reference; the reference's error against the f64 function is reported too.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use fss::Ring;
use fss::ring::mask;
use fss::rng::{DealerRng, Rng};
use gates::Gate;
use gates::arith::Mul;
use gates::cmp::{Drelu, Relu};
use gates::harness::{self, Report};
use gates::lut::Lut;
use gates::nonlinear::{Activation, NExp, Reciprocal, ReluResidual, decode};
use gates::norm::Norm;
use gates::rsqrt::Rsqrt;
use gates::select::Select;
use gates::shift::{ArsSlack, ShiftExact, TruncReduce};
use gates::softmax::Softmax;
use serde::Serialize;

use super::median;

/// Which implementation of the operators to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Impl {
    /// The SIGMA-style baseline (`crates/gates`).
    Sigma,
}

/// Arguments of `fusefss bench ops`.
#[derive(Args)]
pub struct OpsBenchArgs {
    /// Implementation to measure.
    #[arg(long = "impl", value_enum, default_value = "sigma")]
    implementation: Impl,
    /// Ring width.
    #[arg(long, default_value_t = 50)]
    n: u32,
    /// Fixed-point scale.
    #[arg(long, default_value_t = 12)]
    f: u32,
    /// Elements per operator (softmax and layernorm use their own shapes of this size).
    #[arg(long, default_value_t = 65536)]
    elements: usize,
    /// Timed runs per operator after one warm-up (fresh keys each run); medians are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Threads per party (both parties share the machine; 1 matches one core each).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Only these operators (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    ops: Option<Vec<String>>,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

/// One line of output.
#[derive(Serialize)]
struct Row {
    op: String,
    #[serde(rename = "impl")]
    implementation: &'static str,
    n: u32,
    f: u32,
    elements: usize,
    shape: String,
    key_bytes_per_elem: f64,
    comm_bytes_per_elem: f64,
    rounds: u64,
    keygen_ns_per_elem: f64,
    eval_ns_per_elem: f64,
    exact: bool,
    max_abs_err: Option<f64>,
    threads: usize,
}

/// Every operator, in output order.
const OPS: &[&str] = &[
    "mul",
    "select",
    "drelu",
    "relu",
    "tr",
    "ars_slack",
    "ars_exact",
    "lut8",
    "gelu",
    "gelu_mode0",
    "silu",
    "nexp",
    "reciprocal",
    "rsqrt",
    "softmax",
    "softmax_causal",
    "layernorm",
    "rmsnorm",
];

pub fn run(args: OpsBenchArgs) -> anyhow::Result<()> {
    let Impl::Sigma = args.implementation;
    anyhow::ensure!(
        args.reps > 0 && args.threads > 0 && args.elements > 0,
        "--reps, --threads and --elements must be positive"
    );
    anyhow::ensure!(
        (2 * args.f + 10..=64).contains(&args.n) && args.f >= 8,
        "need 8 ≤ f and 2f + 10 ≤ n ≤ 64"
    );
    if let Some(bad) = args.ops.iter().flatten().find(|o| !OPS.contains(&o.as_str())) {
        bail!("unknown operator {bad:?}; known: {}", OPS.join(", "));
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(args.threads).build()?;
    let mut rng = fss::rng::os_rng().context("the OS random number generator is unavailable")?;
    if !args.json {
        println!(
            "{:<15} {:>9} {:>10} {:>10} {:>6} {:>12} {:>12} {:>6} {:>10}  shape",
            "op",
            "elements",
            "key B/el",
            "comm B/el",
            "rounds",
            "keygen ns/el",
            "eval ns/el",
            "exact",
            "max err"
        );
    }
    for &op in OPS {
        if args.ops.as_ref().is_some_and(|o| !o.iter().any(|x| x == op)) {
            continue;
        }
        let row =
            pool.install(|| measure_op(op, &args, &mut rng)).with_context(|| format!("operator {op}"))?;
        if args.json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "{:<15} {:>9} {:>10.2} {:>10.2} {:>6} {:>12.1} {:>12.1} {:>6} {:>10}  {}",
                row.op,
                row.elements,
                row.key_bytes_per_elem,
                row.comm_bytes_per_elem,
                row.rounds,
                row.keygen_ns_per_elem,
                row.eval_ns_per_elem,
                row.exact,
                row.max_abs_err.map_or("-".into(), |e| format!("{e:.2e}")),
                row.shape
            );
        }
    }
    Ok(())
}

/// Run `gate` on `inputs` `reps` times after a warm-up; medians of the times.
fn measure<G: Gate>(
    gate: &G,
    inputs: &[Vec<u64>],
    reps: usize,
    rng: &mut DealerRng,
) -> anyhow::Result<(Report, Duration, Duration)> {
    let ins: Vec<&[u64]> = inputs.iter().map(Vec::as_slice).collect();
    let mut last = harness::run(gate, &ins, rng)?;
    let (mut kg, mut ev) = (vec![], vec![]);
    for _ in 0..reps {
        last = harness::run(gate, &ins, rng)?;
        kg.push(last.keygen.as_secs_f64());
        ev.push(last.eval[0].max(last.eval[1]).as_secs_f64());
    }
    Ok((last, Duration::from_secs_f64(median(kg)), Duration::from_secs_f64(median(ev))))
}

fn signed(ring: Ring, rng: &mut DealerRng, count: usize, lo: i64, hi: i64) -> Vec<u64> {
    let span = (hi - lo) as u64;
    (0..count).map(|_| ring.from_signed(lo + (rng.next_u64() % span) as i64)).collect()
}

fn words(rng: &mut DealerRng, count: usize, bits: u32) -> Vec<u64> {
    (0..count).map(|_| rng.next_u64() & mask(bits)).collect()
}

/// Max |f64 − fixed point| over every input of `[lo, hi)` (in ulps of the scale).
fn scan_error(
    lo: i64,
    hi: i64,
    ring: Ring,
    f: u32,
    plain: impl Fn(u64) -> u64,
    exact: impl Fn(f64) -> f64,
) -> f64 {
    (lo..hi)
        .map(|v| {
            (decode(plain(ring.from_signed(v)), ring.bits(), f) - exact(v as f64 / (1u64 << f) as f64)).abs()
        })
        .fold(0.0, f64::max)
}

fn measure_op(op: &str, a: &OpsBenchArgs, rng: &mut DealerRng) -> anyhow::Result<Row> {
    let (n, f, e) = (a.n, a.f, a.elements);
    let ring = Ring::new(n)?;
    let one = 1i64 << f;
    let m1 = n - f;
    let (rep, keygen, eval, shape, err): (Report, Duration, Duration, String, Option<f64>) = match op {
        "mul" => {
            let g = Mul { bits: n, len: e };
            let ins = vec![words(rng, e, n), words(rng, e, n)];
            let (r, k, t) = measure(&g, &ins, a.reps, rng)?;
            (r, k, t, format!("{e}"), None)
        }
        "select" => {
            let g = Select { bits: n, len: e };
            let ins = vec![words(rng, e, 1), words(rng, e, n)];
            let (r, k, t) = measure(&g, &ins, a.reps, rng)?;
            (r, k, t, format!("{e}"), None)
        }
        "drelu" => {
            let (r, k, t) = measure(&Drelu { bits: n, len: e }, &[words(rng, e, n)], a.reps, rng)?;
            (r, k, t, format!("{e}"), None)
        }
        "relu" => {
            let (r, k, t) = measure(&Relu::new(n, e), &[words(rng, e, n)], a.reps, rng)?;
            (r, k, t, format!("{e}"), None)
        }
        "tr" => {
            let (r, k, t) =
                measure(&TruncReduce { bits: n, shift: f, len: e }, &[words(rng, e, n)], a.reps, rng)?;
            (r, k, t, format!("{e}, {n} -> {} bits", n - f), None)
        }
        "ars_slack" => {
            let q = 1i64 << (n - 2);
            let g = ArsSlack { bits: n, shift: f, out_bits: n, len: e };
            let (r, k, t) = measure(&g, &[signed(ring, rng, e, -q, q)], a.reps, rng)?;
            (r, k, t, format!("{e}, |x| < 2^{}", n - 2), None)
        }
        "ars_exact" => {
            let g = ShiftExact { bits: n, shift: f, signed: true, len: e };
            let (r, k, t) = measure(&g, &[words(rng, e, n)], a.reps, rng)?;
            (r, k, t, format!("{e}"), None)
        }
        "lut8" => {
            let table: Arc<[u64]> = words(rng, 256, n).into();
            let g = Lut::new(8, n, e, table)?;
            let (r, k, t) = measure(&g, &[words(rng, e, 8)], a.reps, rng)?;
            (r, k, t, format!("{e}, 8 -> {n} bits"), None)
        }
        "gelu" | "gelu_mode0" | "silu" => {
            let act = if op == "silu" { Activation::Silu } else { Activation::Gelu };
            let in_bits = if op == "gelu" { m1 } else { n };
            let g = ReluResidual::new(act, n, in_bits, e)?;
            let mut x = signed(ring, rng, e, -16 * one, 16 * one);
            let q = 1i64 << (in_bits - 2);
            for v in x.iter_mut().step_by(16) {
                *v = signed(ring, rng, 1, -q, q)[0];
            }
            let (r, k, t) = measure(&g, &[x], a.reps, rng)?;
            let err = scan_error(-16 * one, 16 * one, ring, f, |v| g.plain(v), |v| act.f64(v));
            (r, k, t, format!("{e}, input fits {in_bits} bits"), Some(err))
        }
        "nexp" => {
            let g = NExp::new(n, m1 + 2, f, e)?;
            let x: Vec<u64> = (0..e).map(|_| rng.next_u64() % (32 << f)).collect();
            let (r, k, t) = measure(&g, &[x], a.reps, rng)?;
            let err = scan_error(0, 32 * one, ring, f, |v| g.plain(v), |v| (-v).exp());
            (r, k, t, format!("{e}, x in [0, 32), clip test on {} bits", m1 + 2), Some(err))
        }
        "reciprocal" => {
            let g = Reciprocal::new(n, f, e)?;
            let x: Vec<u64> =
                (0..e).map(|_| (one as u64) + rng.next_u64() % (127 * one as u64 + 1)).collect();
            let (r, k, t) = measure(&g, &[x], a.reps, rng)?;
            let err = scan_error(one, 128 * one + 1, ring, f, |v| g.plain(v), |v| 1.0 / v);
            (r, k, t, format!("{e}, D in [1, 128]"), Some(err))
        }
        "rsqrt" => {
            let d = 1024u64;
            let g = Rsqrt::new(n, f, d, e)?;
            // Sums of squares of 1024 values at scale 2f with σ in [0.1, 10].
            let x: Vec<u64> = (0..e)
                .map(|_| {
                    let sigma = 0.1 + (rng.next_u64() % 10_000) as f64 / 1000.0;
                    (sigma * sigma * d as f64 * (1u64 << (2 * f)) as f64) as u64
                })
                .collect();
            let err = x
                .iter()
                .map(|&v| {
                    (decode(g.plain(v), n, f) - 1.0 / (v as f64 / d as f64 / (1u64 << (2 * f)) as f64).sqrt())
                        .abs()
                })
                .fold(0.0, f64::max);
            let (r, k, t) = measure(&g, &[x], a.reps, rng)?;
            (r, k, t, format!("{e}, d = {d}, sigma in [0.1, 10]"), Some(err))
        }
        "softmax" | "softmax_causal" => {
            let causal = op == "softmax_causal";
            let cols = if causal { (e as f64).sqrt() as usize } else { 128 };
            let rows = if causal { cols } else { (e / cols).max(1) };
            let g = Softmax { bits: n, cmp_bits: m1 + 1, scale: f, rows, cols, causal };
            let x = signed(ring, rng, rows * cols, -10 * one, 10 * one);
            let err = softmax_error(&g, &x);
            let (r, k, t) = measure(&g, &[x], a.reps, rng)?;
            (r, k, t, format!("{rows}x{cols}"), Some(err))
        }
        "layernorm" | "rmsnorm" => {
            let cols = 1024;
            let rows = (e / cols).max(1);
            let gamma: Arc<[u64]> =
                (0..cols).map(|j| ring.from_signed(one + (j as i64 % 9 - 4) * one / 16)).collect();
            let g = if op == "layernorm" {
                let beta: Arc<[u64]> =
                    (0..cols).map(|j| ring.from_signed((j as i64 % 5 - 2) * one * one / 8)).collect();
                Norm::layer_norm(n, f, rows, cols, gamma, beta)?
            } else {
                Norm::rms_norm(n, f, rows, cols, gamma)?
            };
            let mut x = signed(ring, rng, rows * cols, -4 * one, 4 * one);
            for (i, v) in x.iter_mut().enumerate() {
                *v = ring.add(*v, ring.from_signed((i / cols) as i64 % 3 * one));
            }
            let err = norm_error(&g, &x);
            let (r, k, t) = measure(&g, &[x], a.reps, rng)?;
            (r, k, t, format!("{rows}x{cols}"), Some(err))
        }
        other => bail!("unknown operator {other}"),
    };
    let elements = rep.outputs.len();
    let per = |v: f64| v / elements as f64;
    Ok(Row {
        op: op.to_string(),
        implementation: "sigma",
        n,
        f,
        elements,
        shape,
        key_bytes_per_elem: per(rep.key_bits[0] as f64 / 8.0),
        comm_bytes_per_elem: per(rep.stats[0].comm_bytes() as f64),
        rounds: rep.stats[0].rounds,
        keygen_ns_per_elem: per(keygen.as_nanos() as f64),
        eval_ns_per_elem: per(eval.as_nanos() as f64),
        exact: rep.exact(),
        max_abs_err: err,
        threads: a.threads,
    })
}

/// Max |f64 softmax − fixed point| over the inputs.
fn softmax_error(g: &Softmax, x: &[u64]) -> f64 {
    let y = g.plain(x);
    let (bits, f, cols) = (g.bits, g.scale, g.cols);
    let mut worst = 0.0f64;
    for i in 0..g.rows {
        let w = if g.causal { i + 1 } else { cols };
        let row: Vec<f64> = (0..w).map(|j| decode(x[i * cols + j], bits, f)).collect();
        let max = row.iter().cloned().fold(f64::MIN, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        for (j, v) in row.iter().enumerate() {
            worst = worst.max(((v - max).exp() / sum - decode(y[i * cols + j], bits, f)).abs());
        }
    }
    worst
}

/// Max |f64 normalisation − fixed point| over the inputs.
fn norm_error(g: &Norm, x: &[u64]) -> f64 {
    let y = g.plain(x);
    let (bits, f, cols) = (g.bits, g.scale, g.cols);
    let mut worst = 0.0f64;
    for i in 0..g.rows {
        let row: Vec<f64> = (0..cols).map(|j| decode(x[i * cols + j], bits, f)).collect();
        let mu = if g.normalize { row.iter().sum::<f64>() / cols as f64 } else { 0.0 };
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / cols as f64;
        for (j, v) in row.iter().enumerate() {
            let gamma = decode(g.gamma[j], bits, f);
            let beta = if g.normalize { decode(g.beta[j], bits, 2 * f) } else { 0.0 };
            let want = (v - mu) / var.sqrt() * gamma + beta;
            worst = worst.max((want - decode(y[i * cols + j], bits, f)).abs());
        }
    }
    worst
}
