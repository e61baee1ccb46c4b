//! `fusefss bench ops`: key bytes, communication, rounds and time per element of every
//! operator, each run between two in-memory parties and checked against its plaintext
//! fixed-point reference; the reference's error against the f64 function is reported too.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use compiler::composite;
use compiler::library::{self, Function, GeluForm};
use compiler::{
    CmpBackend, CompileOptions, CompiledGate, LookupBackend, OperatorSpec, Program, SpecError, compile,
};
use fss::Ring;
use fss::ring::mask;
use fss::rng::{DealerRng, Rng};
use gates::Gate;
use gates::arith::Mul;
use gates::carry_table::ArsSlackTable;
use gates::cmp::{Drelu, Relu};
use gates::harness::{self, Report};
use gates::lut::Lut;
use gates::nonlinear::{Activation, NExp, Reciprocal, ReluResidual, decode};
use gates::norm::Norm;
use gates::rsqrt::Rsqrt;
use gates::select::Select;
use gates::shift::{ArsSign, ArsSlack, ShiftExact, TruncReduce};
use gates::softmax::Softmax;
use gates::unary::UnaryFamily;
use serde::Serialize;

use super::median;
use crate::model::ImplChoice;

/// Packed-comparison keying of the compiled operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CmpChoice {
    /// One key per wire, read at every threshold by prefix parity.
    OneKey,
    /// One key per threshold (the paper's artifact).
    PerThreshold,
}

/// Interval-lookup backend of the compiled operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LookupChoice {
    /// The smallest key among the backends that apply.
    Auto,
    /// Coefficient bits from the thermometer code.
    StepBits,
    /// Interval index and an arithmetic-DPF table.
    IndexLut,
    /// Reduced view: carry key and a table over the rows.
    ReducedView,
    /// DCF suffix sums (the paper's lookup).
    Dcf,
}

/// How the compiled softmax reads `e^{−x}` (`composite::SoftmaxExp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SoftmaxExpChoice {
    /// Rows of 32 ulps read as steps.
    Rows,
    /// Joined lines in rows of 128 ulps, 5 more fractional bits (the models').
    Interp,
}

/// Arguments of `fusefss bench ops`.
#[derive(Args, Clone)]
pub struct OpsBenchArgs {
    /// Implementation to measure.
    #[arg(long = "impl", value_enum, default_value = "sigma")]
    implementation: ImplChoice,
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
    /// Packed comparison of the compiled operators.
    #[arg(long, value_enum, default_value = "one-key")]
    cmp: CmpChoice,
    /// Interval lookup of the compiled operators.
    #[arg(long, value_enum, default_value = "auto")]
    lookup: LookupChoice,
    /// Also measure the compiled operator of this spec file (JSON; see `fusefss fit`), as a
    /// row named after the spec, on inputs spread over its whole domain.
    #[arg(long)]
    pub(crate) spec: Option<std::path::PathBuf>,
    /// Compiled GeLU and SiLU: round the residual to a multiple of `2^quantum` ulps (error at
    /// most `2^{quantum−1}` ulps, about `2^quantum` times fewer intervals; 0 is exact rounding).
    #[arg(long, default_value_t = 0)]
    quantum: u32,
    /// Compiled GeLU and SiLU: read the residual from rows of `2^rows` ulps instead (GeLU
    /// as the models do, `library::gelu_rows_fine`: the two rows beside 0 halved, read as
    /// a row of the input shifted by half a row; SiLU `library::silu_rows`; 0 keeps the
    /// exactly rounded or `--quantum` spec; `gelu_fine` always reads rows, 0 taking the
    /// models' `composite::GELU_ROW_BITS`, and `gelu_whole` whole rows, `library::gelu_rows`,
    /// the models' GeLU before protocol revision 20); `e^{−x}`: rows of `2^rows` ulps read
    /// as steps (`library::nexp_rows_nonneg`, with `--split true` the softmax's table before
    /// protocol revision 22; the models' `e^{−x}` is now the row `nexp_interp`). The rows
    /// `gelu_models` and `silu_models` are the models' GeLU and SiLU whatever the flags.
    #[arg(long, default_value_t = 0)]
    rows: u32,
    /// Compiled GeLU and SiLU: read the input with slack (`OperatorSpec::slack`: it stays
    /// below a quarter of the ring, as a truncation with slack leaves it), as the models'
    /// GeLU does (with `--rows 7 --split true`).
    #[arg(long)]
    slack: bool,
    /// Split full-width comparisons into a high key and a low carry (`true`), keep one key
    /// (`false`), or let the compiler pick the smaller key (unset).
    #[arg(long)]
    split: Option<bool>,
    /// With a split, cut a step function's boundaries into runs of at most `2^W` high
    /// positions, each split at its own alignment (LayerNorm's `1/σ` uses 15; unset or 0
    /// keeps one split).
    #[arg(long, value_name = "W")]
    grouped: Option<u32>,
    /// The compiled softmax's `e^{−x}`: joined lines at 5 more fractional bits (the models',
    /// `library::nexp_interp`; a wider ring and final truncation), or rows of 32 ulps read as
    /// steps (the models' before protocol revision 22).
    #[arg(long, value_enum, default_value = "interp")]
    softmax_exp: SoftmaxExpChoice,
    /// Key memory per party a compiled row may use; rows whose keys are larger run on fewer
    /// elements (the row's `elements` says how many).
    #[arg(long, default_value_t = 1 << 30)]
    key_budget: u64,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

/// One line of output.
#[derive(Serialize)]
pub struct Row {
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
    /// The dealer's seeded bundle encoding of both keys (not in `keygen_ns_per_elem`).
    encode_ns_per_elem: f64,
    /// The slower party's decoding of its bundle (not in `eval_ns_per_elem`).
    decode_ns_per_elem: f64,
    eval_ns_per_elem: f64,
    /// AES blocks one party encrypts online per element.
    aes_blocks_per_elem: f64,
    exact: bool,
    max_abs_err: Option<f64>,
    threads: usize,
    /// Compiled rows: comparison keying, lookup backend and full-width mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    backend: Option<String>,
}

/// Every operator, in output order, with the implementations that have it.
const OPS: &[(&str, bool, bool)] = &[
    // (name, sigma, fusefss)
    ("mul", true, false),
    ("select", true, false),
    ("drelu", true, false),
    ("relu", true, true),
    ("tr", true, true),
    ("ars_slack", true, true),
    ("ars_exact", true, true),
    ("ars_sign", true, true),
    ("lut8", true, false),
    ("gelu", true, true),
    ("gelu_fine", false, true),
    ("gelu_whole", false, true),
    ("gelu_mode0", true, true),
    ("gelu_tanh", false, true),
    ("gelu_models", false, true),
    ("silu", true, true),
    ("silu_models", false, true),
    ("sigmoid", false, true),
    ("tanh", false, true),
    ("clip", false, true),
    ("nexp", true, true),
    ("nexp_interp", false, true),
    ("reciprocal", true, true),
    ("rsqrt", true, true),
    ("softmax", true, true),
    ("softmax_causal", true, true),
    ("layernorm", true, true),
    ("rmsnorm", true, true),
];

pub fn run(args: OpsBenchArgs) -> anyhow::Result<()> {
    check(&args)?;
    let user_spec = match &args.spec {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Some(OperatorSpec::from_json(&text).with_context(|| format!("spec {}", path.display()))?)
        }
        None => None,
    };
    if !args.json {
        println!(
            "{:<15} {:<8} {:>9} {:>10} {:>10} {:>6} {:>12} {:>12} {:>6} {:>10}  shape",
            "op",
            "impl",
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
    let print = |row: &Row| -> anyhow::Result<()> {
        if args.json {
            println!("{}", serde_json::to_string(row)?);
        } else {
            println!(
                "{:<15} {:<8} {:>9} {:>10.2} {:>10.2} {:>6} {:>12.1} {:>12.1} {:>6} {:>10}  {}{}",
                row.op,
                row.implementation,
                row.elements,
                row.key_bytes_per_elem,
                row.comm_bytes_per_elem,
                row.rounds,
                row.keygen_ns_per_elem,
                row.eval_ns_per_elem,
                row.exact,
                row.max_abs_err.map_or("-".into(), |e| format!("{e:.2e}")),
                row.shape,
                row.backend.as_ref().map_or(String::new(), |b| format!(" [{b}]")),
            );
        }
        Ok(())
    };
    rows(&args, user_spec.as_ref(), print)
}

/// The checks on the arguments that come before any work.
fn check(args: &OpsBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.reps > 0 && args.threads > 0 && args.elements > 0,
        "--reps, --threads and --elements must be positive"
    );
    anyhow::ensure!(
        (2 * args.f + 10..=64).contains(&args.n) && args.f >= 8,
        "need 8 ≤ f and 2f + 10 ≤ n ≤ 64"
    );
    if let Some(bad) = args.ops.iter().flatten().find(|o| !OPS.iter().any(|(n, _, _)| n == o)) {
        let names: Vec<&str> = OPS.iter().map(|o| o.0).collect();
        bail!("unknown operator {bad:?}; known: {}", names.join(", "));
    }
    Ok(())
}

/// Measure every operator `args` selects (and `user_spec`'s, last), handing each row to
/// `each` as it is measured: the rows `bench ops` prints.
pub fn rows(
    args: &OpsBenchArgs,
    user_spec: Option<&OperatorSpec>,
    mut each: impl FnMut(&Row) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    check(args)?;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(args.threads).build()?;
    let mut rng = fss::rng::os_rng().context("the OS random number generator is unavailable")?;
    let (sigma, fuse) = match args.implementation {
        ImplChoice::Sigma => (true, false),
        ImplChoice::Fusefss => (false, true),
        ImplChoice::Both => (true, true),
    };
    for &(op, has_sigma, has_fuse) in OPS {
        if args.ops.as_ref().is_some_and(|o| !o.iter().any(|x| x == op)) {
            continue;
        }
        if sigma && has_sigma {
            let row = pool
                .install(|| sigma_op(op, args, &mut rng))
                .with_context(|| format!("operator {op} (sigma)"))?;
            each(&row)?;
        }
        if fuse && has_fuse {
            match pool.install(|| fusefss_op(op, args, &mut rng)) {
                Ok(row) => each(&row)?,
                // A backend chosen by flag may not apply to every operator: say so, go on.
                Err(e) if e.downcast_ref::<SpecError>().is_some() => {
                    eprintln!("{op} (fusefss): skipped: {}", e.root_cause());
                }
                Err(e) => return Err(e.context(format!("operator {op} (fusefss)"))),
            }
        }
    }
    if let Some(spec) = user_spec {
        let row = pool.install(|| user_op(spec, args, &mut rng)).map_err(|e| {
            let refused = matches!(e.downcast_ref::<SpecError>(), Some(SpecError::Limit { .. }));
            let what = if refused { " is too large to compile (`fusefss compile` shows why)" } else { "" };
            e.context(format!("spec {}{what}", spec.name))
        })?;
        each(&row)?;
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
    let (mut kg, mut ev, mut enc, mut dec) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        last = harness::run(gate, &ins, rng)?;
        kg.push(last.keygen.as_secs_f64());
        ev.push(last.eval[0].max(last.eval[1]).as_secs_f64());
        enc.push(last.encode.as_secs_f64());
        dec.push(last.decode[0].max(last.decode[1]).as_secs_f64());
    }
    // The report's encoding and decoding times are their medians too.
    last.encode = Duration::from_secs_f64(median(enc));
    last.decode = [Duration::from_secs_f64(median(dec)); 2];
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

/// Activation inputs: mostly in `[−16, 16)`, every 16th anywhere in the `in_bits` range.
fn activation_inputs(ring: Ring, rng: &mut DealerRng, e: usize, in_bits: u32, one: i64) -> Vec<u64> {
    let mut x = signed(ring, rng, e, -16 * one, 16 * one);
    let q = 1i64 << (in_bits - 2);
    for v in x.iter_mut().step_by(16) {
        *v = signed(ring, rng, 1, -q, q)[0];
    }
    x
}

fn nexp_inputs(rng: &mut DealerRng, e: usize, f: u32) -> Vec<u64> {
    (0..e).map(|_| rng.next_u64() % (32 << f)).collect()
}

fn recip_inputs(rng: &mut DealerRng, e: usize, one: i64) -> Vec<u64> {
    (0..e).map(|_| (one as u64) + rng.next_u64() % (127 * one as u64 + 1)).collect()
}

/// Sums of squares of `d` values at scale `2f` with σ in [0.1, [`sigma_max`]].
fn rsqrt_inputs(rng: &mut DealerRng, e: usize, n: u32, f: u32, d: u64) -> Vec<u64> {
    let top = sigma_max(n, f, d);
    (0..e)
        .map(|_| {
            let sigma = 0.1 + (top - 0.1) * (rng.next_u64() % 10_000) as f64 / 10_000.0;
            (sigma * sigma * d as f64 * (1u64 << (2 * f)) as f64) as u64
        })
        .collect()
}

/// The largest `σ` of the rsqrt rows: 10, or less where `d·σ²` at scale `2f` would not fit
/// below `2^{n−2}` (σ ≤ 1.4 at n = 37, f = 12, d = 1024).
fn sigma_max(n: u32, f: u32, d: u64) -> f64 {
    let room = 2f64.powi(n as i32 - 2 - 2 * f as i32) / d as f64;
    room.sqrt().min(10.0)
}

/// `v` to two decimals, for shapes (`10`, `1.41`).
fn short(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// Max |f64 − fixed point| of `1/σ` over a fixed grid of 200,001 sums of squares (σ from
/// 0.1 to [`sigma_max`], the range of [`rsqrt_inputs`]), so that the error does not depend
/// on the sampled elements.
fn rsqrt_error(n: u32, f: u32, d: u64, plain: impl Fn(u64) -> u64) -> f64 {
    const STEPS: u64 = 200_000;
    let top = sigma_max(n, f, d);
    let grid: Vec<u64> = (0..=STEPS)
        .map(|i| {
            let sigma = 0.1 + (top - 0.1) * i as f64 / STEPS as f64;
            (sigma * sigma * d as f64 * (1u64 << (2 * f)) as f64) as u64
        })
        .collect();
    grid.iter()
        .map(|&v| {
            (decode(plain(v), n, f) - 1.0 / (v as f64 / d as f64 / (1u64 << (2 * f)) as f64).sqrt()).abs()
        })
        .fold(0.0, f64::max)
}

const RSQRT_D: u64 = 1024;

fn sigma_op(op: &str, a: &OpsBenchArgs, rng: &mut DealerRng) -> anyhow::Result<Row> {
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
        "ars_sign" => {
            let g = ArsSign { bits: n, shift: f, len: e };
            let (r, k, t) = measure(&g, &[words(rng, e, n)], a.reps, rng)?;
            (r, k, t, format!("{e}, exact ARS and DReLU side by side"), None)
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
            let x = activation_inputs(ring, rng, e, in_bits, one);
            let (r, k, t) = measure(&g, &[x], a.reps, rng)?;
            let err = scan_error(-16 * one, 16 * one, ring, f, |v| g.plain(v), |v| act.f64(v));
            (r, k, t, format!("{e}, input fits {in_bits} bits"), Some(err))
        }
        "nexp" => {
            let g = NExp::new(n, m1 + 2, f, e)?;
            let (r, k, t) = measure(&g, &[nexp_inputs(rng, e, f)], a.reps, rng)?;
            let err = scan_error(0, 32 * one, ring, f, |v| g.plain(v), |v| (-v).exp());
            (r, k, t, format!("{e}, x in [0, 32), clip test on {} bits", m1 + 2), Some(err))
        }
        "reciprocal" => {
            let g = Reciprocal::new(n, f, e)?;
            let (r, k, t) = measure(&g, &[recip_inputs(rng, e, one)], a.reps, rng)?;
            let err = scan_error(one, 128 * one + 1, ring, f, |v| g.plain(v), |v| 1.0 / v);
            (r, k, t, format!("{e}, D in [1, 128]"), Some(err))
        }
        "rsqrt" => {
            let g = Rsqrt::new(n, f, RSQRT_D, e)?;
            let x = rsqrt_inputs(rng, e, n, f, RSQRT_D);
            let err = rsqrt_error(n, f, RSQRT_D, |v| g.plain(v));
            let (r, k, t) = measure(&g, &[x], a.reps, rng)?;
            (
                r,
                k,
                t,
                format!("{e}, d = {RSQRT_D}, sigma in [0.1, {}]", short(sigma_max(n, f, RSQRT_D))),
                Some(err),
            )
        }
        "softmax" | "softmax_causal" => {
            let (rows, cols, causal, x) = softmax_case(op, a, rng)?;
            let g = Softmax::sigma(n, m1 + 1, f, rows, cols, causal);
            let err = softmax_error(&g, &x);
            let (r, k, t) = measure(&g, &[x], a.reps, rng)?;
            (r, k, t, format!("{rows}x{cols}"), Some(err))
        }
        "layernorm" | "rmsnorm" => {
            let c = norm_case(a, rng)?;
            let g = if op == "layernorm" {
                Norm::layer_norm(n, f, c.rows, c.cols, c.gamma, c.beta)?
            } else {
                Norm::rms_norm(n, f, c.rows, c.cols, c.gamma)?
            };
            let err = norm_error(&g, &c.x);
            let (r, k, t) = measure(&g, &[c.x], a.reps, rng)?;
            (r, k, t, format!("{}x{}", c.rows, c.cols), Some(err))
        }
        other => bail!("no SIGMA operator {other}"),
    };
    Ok(row(op, "sigma", a, rep, keygen, eval, shape, err, None))
}

#[allow(clippy::too_many_arguments)]
fn row(
    op: &str,
    implementation: &'static str,
    a: &OpsBenchArgs,
    rep: Report,
    keygen: Duration,
    eval: Duration,
    shape: String,
    err: Option<f64>,
    backend: Option<String>,
) -> Row {
    // Elements: the input length (a gate with several outputs has more output words).
    let elements = rep.outputs.len() / outputs_per_element(op);
    let per = |v: f64| v / elements as f64;
    Row {
        op: op.to_string(),
        implementation,
        n: a.n,
        f: a.f,
        elements,
        shape,
        key_bytes_per_elem: per(rep.key_bits[0] as f64 / 8.0),
        comm_bytes_per_elem: per(rep.stats[0].comm_bytes() as f64),
        rounds: rep.stats[0].rounds,
        keygen_ns_per_elem: per(keygen.as_nanos() as f64),
        encode_ns_per_elem: per(rep.encode.as_nanos() as f64),
        decode_ns_per_elem: per(rep.decode[0].max(rep.decode[1]).as_nanos() as f64),
        eval_ns_per_elem: per(eval.as_nanos() as f64),
        aes_blocks_per_elem: per(rep.aes_blocks as f64),
        exact: rep.exact(),
        max_abs_err: err,
        threads: a.threads,
        backend,
    }
}

fn outputs_per_element(op: &str) -> usize {
    if op == "ars_sign" { 2 } else { 1 }
}

fn options(a: &OpsBenchArgs) -> CompileOptions {
    CompileOptions {
        cmp: match a.cmp {
            CmpChoice::OneKey => CmpBackend::OneKey,
            CmpChoice::PerThreshold => CmpBackend::PerThreshold,
        },
        lookup: match a.lookup {
            LookupChoice::Auto => None,
            LookupChoice::StepBits => Some(LookupBackend::StepBits),
            LookupChoice::IndexLut => Some(LookupBackend::IndexLut),
            LookupChoice::ReducedView => Some(LookupBackend::ReducedView { shift: 0 }),
            LookupChoice::Dcf => Some(LookupBackend::Dcf),
        },
        split: a.split,
        grouped: a.grouped.filter(|&w| w > 0),
        ..CompileOptions::default()
    }
}

/// Compile `spec` with the command's backends (a reduced view takes the spec's row shift).
pub fn compile_for(spec: &OperatorSpec, a: &OpsBenchArgs) -> anyhow::Result<Arc<Program>> {
    let mut o = options(a);
    if let Some(LookupBackend::ReducedView { .. }) = o.lookup {
        let shift = compiler::program::reduced_view_shift(spec).ok_or_else(|| {
            SpecError::Boundaries(format!(
                "{} has no reduced view (boundaries not on rows of a table)",
                spec.name
            ))
        })?;
        o.lookup = Some(LookupBackend::ReducedView { shift });
    }
    Ok(Arc::new(compile(spec, o)?))
}

/// The comparison keying, lookup backend and full-width mode of a compiled program.
pub fn backend_name(p: &Program) -> String {
    let split = full_width_name(p).map_or(String::new(), |w| format!("+{w}"));
    format!("{}+{}{split}", comparison_name(p), lookup_name(p))
}

/// The program's comparison keying: `one-key` or `per-threshold`.
pub fn comparison_name(p: &Program) -> &'static str {
    match p.cmp {
        CmpBackend::OneKey => "one-key",
        CmpBackend::PerThreshold => "per-threshold",
    }
}

/// The program's interval lookup: `step-bits`, `index-lut`, `reduced-view/S` or `dcf`.
pub fn lookup_name(p: &Program) -> String {
    match p.lookup_backend {
        LookupBackend::StepBits => "step-bits".to_string(),
        LookupBackend::IndexLut => "index-lut".to_string(),
        LookupBackend::ReducedView { shift } => format!("reduced-view/{shift}"),
        LookupBackend::Dcf => "dcf".to_string(),
    }
}

/// How the full-width comparisons are cut (`split/F` or `grouped/F/W`); `None` when whole.
pub fn full_width_name(p: &Program) -> Option<String> {
    match p.full_width {
        compiler::predicate::FullWidth::Whole => None,
        compiler::predicate::FullWidth::Split(f) => Some(format!("split/{f}")),
        compiler::predicate::FullWidth::Grouped(f, w) => Some(format!("grouped/{f}/{w}")),
    }
}

/// Elements a compiled row runs on: all of them, or as many as the key budget allows.
fn budgeted(p: &Program, a: &OpsBenchArgs) -> usize {
    let per = p.cost().key_bits.div_ceil(8).max(1);
    a.elements.min((a.key_budget / per).max(16) as usize)
}

fn run_compiled(
    op: &str,
    spec: &OperatorSpec,
    x: Vec<u64>,
    shape: String,
    err: Option<f64>,
    a: &OpsBenchArgs,
    rng: &mut DealerRng,
) -> anyhow::Result<Row> {
    let p = compile_for(spec, a)?;
    let e = budgeted(&p, a).min(x.len());
    let gate = CompiledGate::new(p.clone(), e);
    let (r, k, t) = measure(&gate, &[x[..e].to_vec()], a.reps, rng)?;
    Ok(row(op, "fusefss", a, r, k, t, shape, err, Some(backend_name(&p))))
}

fn fusefss_op(op: &str, a: &OpsBenchArgs, rng: &mut DealerRng) -> anyhow::Result<Row> {
    let (n, f, e) = (a.n, a.f, a.elements);
    let ring = Ring::new(n)?;
    let one = 1i64 << f;
    let m1 = n - f;
    let eval = |s: &OperatorSpec| {
        let s = s.clone();
        move |v: u64| s.eval(v).arith[0]
    };
    match op {
        "relu" => run_compiled(op, &library::relu(n, n), words(rng, e, n), format!("{e}"), None, a, rng),
        "ars_slack" => {
            // The models' FuseFSS truncation: its carry from truth tables (`gates::carry_table`).
            let q = 1i64 << (n - 2);
            let g = ArsSlackTable { bits: n, shift: f, out_bits: n, len: e };
            let (r, k, t) = measure(&g, &[signed(ring, rng, e, -q, q)], a.reps, rng)?;
            let shape = format!("{e}, |x| < 2^{}", n - 2);
            Ok(row(op, "fusefss", a, r, k, t, shape, None, Some("table-carry".into())))
        }
        "tr" => run_compiled(
            op,
            &library::truncate(n, f),
            words(rng, e, n),
            format!("{e}, {n} -> {} bits", n - f),
            None,
            a,
            rng,
        ),
        "ars_exact" => {
            run_compiled(op, &library::ars(n, f, false), words(rng, e, n), format!("{e}"), None, a, rng)
        }
        "ars_sign" => run_compiled(
            op,
            &library::ars(n, f, true),
            words(rng, e, n),
            format!("{e}, exact ARS and the sign from one opening"),
            None,
            a,
            rng,
        ),
        "gelu_models" | "silu_models" => {
            // The compiled GeLU and SiLU exactly as the models run them
            // (`composite::gelu`, `composite::silu`): the residual from rows of
            // `2^GELU_ROW_BITS` ulps on inputs of `n − f` bits, read with slack, the
            // comparison split at the rows (`--rows`, `--slack` and `--split` do not apply).
            // Against SIGMA's `gelu` and `silu` rows: the same functions in SIGMA's error class.
            let rows = composite::GELU_ROW_BITS;
            let (spec, func) = if op == "gelu_models" {
                (library::gelu_rows_fine(m1, n, f, GeluForm::Erf, rows), Function::Gelu)
            } else {
                (library::silu_rows(m1, n, f, rows), Function::Silu)
            };
            let spec = OperatorSpec { slack: true, ..spec };
            let x = activation_inputs(ring, rng, e, m1, one);
            let err = scan_error(-16 * one, 16 * one, ring, f, eval(&spec), |v| func.f64(v));
            let shape = format!(
                "{e}, the models': input fits {m1} bits, rows of 2^{rows}, split, with slack, {} intervals",
                spec.pieces.len()
            );
            let a = OpsBenchArgs { split: Some(true), ..a.clone() };
            run_compiled(op, &spec, x, shape, Some(err), &a, rng)
        }
        "gelu" | "gelu_fine" | "gelu_whole" | "gelu_mode0" | "gelu_tanh" | "silu" => {
            let in_bits = if matches!(op, "gelu" | "gelu_fine" | "gelu_whole") { m1 } else { n };
            let (spec, func) = match op {
                "silu" if a.rows > 0 => (library::silu_rows(in_bits, n, f, a.rows), Function::Silu),
                "silu" => (library::silu_coarse(in_bits, n, f, a.quantum), Function::Silu),
                "gelu_tanh" if a.rows > 0 => {
                    (library::gelu_rows_fine(in_bits, n, f, GeluForm::Tanh, a.rows), Function::GeluTanh)
                }
                "gelu_tanh" => {
                    (library::gelu_coarse(in_bits, n, f, GeluForm::Tanh, a.quantum), Function::GeluTanh)
                }
                // The models' rows unless `--rows` says otherwise.
                "gelu_fine" => {
                    let rows = if a.rows > 0 { a.rows } else { composite::GELU_ROW_BITS };
                    (library::gelu_rows_fine(in_bits, n, f, GeluForm::Erf, rows), Function::Gelu)
                }
                // Whole rows, the two beside 0 not halved (the models' GeLU before revision 20).
                "gelu_whole" => {
                    let rows = if a.rows > 0 { a.rows } else { composite::GELU_ROW_BITS };
                    (library::gelu_rows(in_bits, n, f, GeluForm::Erf, rows), Function::Gelu)
                }
                _ if a.rows > 0 => {
                    (library::gelu_rows_fine(in_bits, n, f, GeluForm::Erf, a.rows), Function::Gelu)
                }
                _ => (library::gelu_coarse(in_bits, n, f, GeluForm::Erf, a.quantum), Function::Gelu),
            };
            let spec = OperatorSpec { slack: a.slack, ..spec };
            let x = activation_inputs(ring, rng, e, in_bits, one);
            let err = scan_error(-16 * one, 16 * one, ring, f, eval(&spec), |v| func.f64(v));
            let shape = format!("{e}, input fits {in_bits} bits, {} intervals", spec.pieces.len());
            run_compiled(op, &spec, x, shape, Some(err), a, rng)
        }
        "sigmoid" | "tanh" => {
            let (spec, func) = if op == "sigmoid" {
                (library::sigmoid(n, n, f), Function::Sigmoid)
            } else {
                (library::tanh(n, n, f), Function::Tanh)
            };
            let x = activation_inputs(ring, rng, e, n, one);
            let err = scan_error(-16 * one, 16 * one, ring, f, eval(&spec), |v| func.f64(v));
            let shape = format!("{e}, {} intervals", spec.pieces.len());
            run_compiled(op, &spec, x, shape, Some(err), a, rng)
        }
        "clip" => {
            let spec = library::clip(n, -8 * one, 8 * one);
            let x = activation_inputs(ring, rng, e, n, one);
            run_compiled(op, &spec, x, format!("{e}, to [-8, 8]"), None, a, rng)
        }
        "nexp" => {
            // With `--rows`, the softmax's table: rows of `2^rows` ulps, `x ≥ 0`.
            let spec = match a.rows {
                0 => library::nexp(m1 + 2, n, f),
                rows => library::nexp_rows_nonneg(m1 + 2, n, f, rows),
            };
            let err = scan_error(0, 32 * one, ring, f, eval(&spec), |v| (-v).exp());
            let shape =
                format!("{e}, x in [0, 32), input fits {} bits, {} intervals", m1 + 2, spec.pieces.len());
            run_compiled(op, &spec, nexp_inputs(rng, e, f), shape, Some(err), a, rng)
        }
        "nexp_interp" => {
            // `e^{−x}` linear in rows (`library::nexp_interp`), at scale f + t, read with
            // slack on the width `nexp` reads and, unless `--split` says otherwise, split
            // at its rows.
            let (s, t) = (composite::NEXP_INTERP_ROW_BITS, composite::NEXP_INTERP_EXTRA_BITS);
            let spec = library::nexp_interp(m1 + 2, n, f, s, t);
            let plain = eval(&spec);
            let err = (0..32 * one)
                .map(|v| (decode(plain(v as u64), n, f + t) - (-(v as f64) / one as f64).exp()).abs())
                .fold(0.0, f64::max);
            let shape = format!(
                "{e}, x in [0, 32), rows of 2^{s}, out at scale f + {t}, {} intervals",
                spec.pieces.len()
            );
            let a = OpsBenchArgs { split: a.split.or(Some(true)), ..a.clone() };
            run_compiled(op, &spec, nexp_inputs(rng, e, f), shape, Some(err), &a, rng)
        }
        "reciprocal" => {
            let spec = library::reciprocal(f, 128, n);
            let err = scan_error(one, 128 * one + 1, ring, f, eval(&spec), |v| 1.0 / v);
            let shape = format!("{e}, D in [1, 128], input read on {} bits", spec.in_bits);
            run_compiled(op, &spec, recip_inputs(rng, e, one), shape, Some(err), a, rng)
        }
        "rsqrt" => {
            let spec = library::rsqrt(n, n, f, RSQRT_D);
            let x = rsqrt_inputs(rng, e, n, f, RSQRT_D);
            let err = rsqrt_error(n, f, RSQRT_D, eval(&spec));
            let shape = format!(
                "{e}, d = {RSQRT_D}, sigma in [0.1, {}], {} intervals",
                short(sigma_max(n, f, RSQRT_D)),
                spec.pieces.len()
            );
            // Unless `--split` says otherwise, split at the floor as LayerNorm does; in one run
            // (the smallest key) unless `--grouped W` asks for LayerNorm's runs.
            let split = a.split.or(composite::rsqrt_options(n, f, RSQRT_D, 7).split);
            run_compiled(op, &spec, x, shape, Some(err), &OpsBenchArgs { split, ..a.clone() }, rng)
        }
        "softmax" | "softmax_causal" => {
            let (rows, cols, causal, x) = softmax_case(op, a, rng)?;
            let exp = match a.softmax_exp {
                SoftmaxExpChoice::Rows => composite::SoftmaxExp::Rows,
                SoftmaxExpChoice::Interp => composite::SoftmaxExp::Interp,
            };
            let g = composite::softmax_with(n, m1 + 1, f, rows, cols, causal, exp)?;
            let err = softmax_error(&g, &x);
            let (r, k, t) = measure(&g, &[x], a.reps, rng)?;
            let backend = match exp {
                composite::SoftmaxExp::Rows => "composite",
                composite::SoftmaxExp::Interp => "composite+exp-interp",
            };
            Ok(row(op, "fusefss", a, r, k, t, format!("{rows}x{cols}"), Some(err), Some(backend.into())))
        }
        "layernorm" | "rmsnorm" => {
            let c = norm_case(a, rng)?;
            let g = composite::norm(n, f, c.rows, c.cols, op == "layernorm", c.gamma, c.beta)?;
            let err = norm_error(&g, &c.x);
            let (r, k, t) = measure(&g, &[c.x], a.reps, rng)?;
            let shape = format!("{}x{}", c.rows, c.cols);
            Ok(row(op, "fusefss", a, r, k, t, shape, Some(err), Some("composite".into())))
        }
        other => bail!("no compiled operator {other}"),
    }
}

/// Softmax shapes: 128 columns (or a square causal matrix) holding `elements` entries.
fn softmax_case(
    op: &str,
    a: &OpsBenchArgs,
    rng: &mut DealerRng,
) -> anyhow::Result<(usize, usize, bool, Vec<u64>)> {
    let (ring, one) = (Ring::new(a.n)?, 1i64 << a.f);
    let causal = op == "softmax_causal";
    let cols = if causal { (a.elements as f64).sqrt() as usize } else { 128 };
    let rows = if causal { cols } else { (a.elements / cols).max(1) };
    Ok((rows, cols, causal, signed(ring, rng, rows * cols, -10 * one, 10 * one)))
}

struct NormCase {
    rows: usize,
    cols: usize,
    gamma: Arc<[u64]>,
    beta: Arc<[u64]>,
    x: Vec<u64>,
}

/// Normalisation shapes: rows of up to 1024 with varied gains, biases and row offsets. A
/// row's sum of squares at scale `2f` (deviations below 8, so squares below `2^6`) must stay
/// below `2^{n−2}`: narrower rings get shorter rows (32 at n = 37, f = 12).
fn norm_case(a: &OpsBenchArgs, rng: &mut DealerRng) -> anyhow::Result<NormCase> {
    let (ring, one) = (Ring::new(a.n)?, 1i64 << a.f);
    let room = (a.n as i64 - 2 - 2 * a.f as i64 - 6).clamp(0, 10);
    anyhow::ensure!(room >= 3, "normalisation needs n ≥ 2f + 11 (rows of at least 8 values at this scale)");
    let cols = 1usize << room;
    let rows = (a.elements / cols).max(1);
    let gamma: Arc<[u64]> =
        (0..cols).map(|j| ring.from_signed(one + (j as i64 % 9 - 4) * one / 16)).collect();
    let beta: Arc<[u64]> = (0..cols).map(|j| ring.from_signed((j as i64 % 5 - 2) * one * one / 8)).collect();
    let mut x = signed(ring, rng, rows * cols, -4 * one, 4 * one);
    for (i, v) in x.iter_mut().enumerate() {
        *v = ring.add(*v, ring.from_signed((i / cols) as i64 % 3 * one));
    }
    Ok(NormCase { rows, cols, gamma, beta, x })
}

/// A user's spec on inputs spread over its whole domain: half uniform, half small signed
/// values around 0 (where activations change).
fn user_op(spec: &OperatorSpec, a: &OpsBenchArgs, rng: &mut DealerRng) -> anyhow::Result<Row> {
    let n = spec.in_bits;
    let e = a.elements;
    let x: Vec<u64> = (0..e)
        .map(|i| if i % 2 == 0 { rng.next_u64() } else { (rng.next_u64() % (1 << 20)).wrapping_sub(1 << 19) } & mask(n))
        .collect();
    let shape = format!("{e}, {} intervals, {} bits -> {} bits", spec.pieces.len(), n, spec.out_bits);
    run_compiled(&spec.name, spec, x, shape, None, a, rng)
}

/// Max |f64 softmax − fixed point| over the inputs.
fn softmax_error<E: UnaryFamily, Q: UnaryFamily>(g: &Softmax<E, Q>, x: &[u64]) -> f64 {
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
fn norm_error<M: UnaryFamily, Q: UnaryFamily>(g: &Norm<M, Q>, x: &[u64]) -> f64 {
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
