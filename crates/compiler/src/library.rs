//! The operator library: transformer nonlinearities as specs (docs/design/compiled-gates.md §4).
//!
//! Every function of a real variable is specified *exactly rounded*: the output is the f64
//! function rounded half up to the output scale (or, for residual forms, the input minus a
//! rounded residual, which is the same), except the row tables ([`gelu_rows`],
//! [`silu_rows`], [`nexp_rows`], [`reciprocal`], [`rsqrt`]), which hold each row's minimax
//! constant (the models' GeLU is [`gelu_rows`], `composite::gelu`; softmax's `e^{−x}` is
//! [`nexp_rows`]). The integer tables are generated here
//! once, from f64 formulas, and the spec carries them: the compiled gate and the reference
//! read the same integers (docs/design/compiled-gates.md §6, pitfall 1).
//!
//! | spec | computes | input |
//! |---|---|---|
//! | [`relu`] | `max(x, 0)` | signed |
//! | [`gelu`] | `x·Φ(x)` (erf or tanh form) as `ReLU(x) − round(δ(x))` | signed, `n_in` bits |
//! | [`silu`] | `x·σ(x)` as `ReLU(x) − round(δ(x))` | signed |
//! | [`gelu_rows`], [`silu_rows`] | `ReLU(x) − T[row]`: the residual from rows of `2^s` ulps (SIGMA-class error, split-view comparison) | signed |
//! | [`gelu_rows_fine`] | as [`gelu_rows`], the two rows at the residual's kink halved (error below SIGMA's, slower) | signed |
//! | [`of_product`] | a slack residual spec of `⌊z / 2^f⌋`, read from `z` (a truncation fused in) | signed, slack |
//! | [`sigmoid`], [`tanh`] | rounded step functions | signed |
//! | [`nexp`] | `e^{−x}` for `x ≥ 0`, `1` for negative `x` | `n_in` bits |
//! | [`nexp_rows`] | as [`nexp`], from minimax rows of `2^s` ulps (split-view comparison) | `n_in` bits |
//! | [`reciprocal`] | `1/S` for a softmax row sum `S ∈ [1, cols]` (minimax rows of `2^{−6}`) | unsigned |
//! | [`rsqrt`] | `1/√(v/d)` for a sum of squares `v` at scale `2f` (7-bit mantissa grid, uniform below σ = 2^{−6}) | unsigned |
//! | [`ars`] | `⌊x / 2^f⌋` exact, optionally with the sign `1[x ≥ 0]` | signed |
//! | [`truncate`] | `x >> f` into `n − f` bits | unsigned |
//! | [`clip`] | `min(max(x, lo), hi)` | signed |

use crate::spec::{Atom, Node, OperatorSpec, Output, Phi, Piece};

/// Round half up: `⌊v + ½⌋`, explicitly (library `round` functions differ on ties).
pub fn round_half_up(v: f64) -> i64 {
    (v + 0.5).floor() as i64
}

/// Which form of GeLU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GeluForm {
    /// `x·Φ(x)` with the error function.
    Erf,
    /// `½x(1 + tanh(√(2/π)(x + 0.044715x³)))`.
    Tanh,
}

/// The f64 functions of the library (for fitting and error reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Function {
    /// GeLU, erf form.
    Gelu,
    /// GeLU, tanh form.
    GeluTanh,
    /// `x·σ(x)`.
    Silu,
    /// `1/(1 + e^{−x})`.
    Sigmoid,
    /// `tanh x`.
    Tanh,
    /// `e^{−x}` (for `x ≥ 0`).
    NExp,
    /// `1/x`.
    Reciprocal,
}

impl Function {
    /// Parse a name (`gelu`, `gelu_tanh`, `silu`, `sigmoid`, `tanh`, `nexp`, `reciprocal`).
    pub fn from_name(s: &str) -> Option<Function> {
        Some(match s {
            "gelu" => Function::Gelu,
            "gelu_tanh" => Function::GeluTanh,
            "silu" => Function::Silu,
            "sigmoid" => Function::Sigmoid,
            "tanh" => Function::Tanh,
            "nexp" => Function::NExp,
            "reciprocal" => Function::Reciprocal,
            _ => return None,
        })
    }

    /// The function's name (as [`Function::from_name`] reads it).
    pub fn name(self) -> &'static str {
        match self {
            Function::Gelu => "gelu",
            Function::GeluTanh => "gelu_tanh",
            Function::Silu => "silu",
            Function::Sigmoid => "sigmoid",
            Function::Tanh => "tanh",
            Function::NExp => "nexp",
            Function::Reciprocal => "reciprocal",
        }
    }

    /// The names [`Function::from_name`] accepts.
    pub const NAMES: &'static [&'static str] =
        &["gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "nexp", "reciprocal"];

    /// The function.
    pub fn f64(self, x: f64) -> f64 {
        match self {
            Function::Gelu => 0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2),
            Function::GeluTanh => {
                let k = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
            }
            Function::Silu => x / (1.0 + (-x).exp()),
            Function::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Function::Tanh => x.tanh(),
            Function::NExp => (-x.max(0.0)).exp(),
            Function::Reciprocal => 1.0 / x,
        }
    }

    /// `ReLU(x) − f(x)` for the activations that are ReLU minus an even residual; computed
    /// without cancellation.
    fn residual(self, v: f64) -> f64 {
        let v = v.abs();
        match self {
            Function::Gelu => 0.5 * v * libm::erfc(v / std::f64::consts::SQRT_2),
            Function::GeluTanh => {
                let k = (2.0 / std::f64::consts::PI).sqrt();
                // ½v(1 − tanh(u)) = v / (1 + e^{2u})
                v / (1.0 + (2.0 * k * (v + 0.044715 * v * v * v)).exp())
            }
            Function::Silu => v / (1.0 + v.exp()),
            _ => unreachable!("not a residual activation"),
        }
    }
}

fn half(n: u32) -> u64 {
    1u64 << (n - 1)
}

fn modulus(n: u32) -> u128 {
    1u128 << n
}

/// Pieces from sorted distinct interval starts (the first 0) and a function giving each
/// interval's piece from its start.
fn from_starts(mut starts: Vec<u64>, piece: impl Fn(u64) -> Piece) -> (Vec<u64>, Vec<Piece>) {
    starts.sort_unstable();
    starts.dedup();
    let pieces: Vec<Piece> = starts.iter().map(|&s| piece(s)).collect();
    // Merge neighbours with equal pieces.
    let (mut b, mut p): (Vec<u64>, Vec<Piece>) = (vec![], vec![]);
    for (s, q) in starts.into_iter().zip(pieces) {
        if p.last() != Some(&q) {
            b.push(s);
            p.push(q);
        }
    }
    (b, p)
}

/// `x mod 2^n` as an `n`-bit word.
fn unsigned_of(x: i64, n: u32) -> u64 {
    ((x as i128).rem_euclid(modulus(n) as i128)) as u64
}

/// The piece `ReLU(x) − dv` at a signed input `x`.
fn relu_minus(x: i64, dv: i64) -> Piece {
    let poly = if x >= 0 { vec![-(dv as i128), 1] } else { vec![-(dv as i128)] };
    Piece { polys: vec![poly], ..Piece::default() }
}

fn signed_of(x: u64, n: u32) -> i64 {
    if n < 64 && x >= half(n) { x as i64 - (1i64 << n) } else { x as i64 }
}

fn spec(name: String, n: u32, l: u32, signed: bool, scale: u32, b: Vec<u64>, p: Vec<Piece>) -> OperatorSpec {
    OperatorSpec { scale: Some(scale), ..OperatorSpec::of_pieces(name, n, l, signed, b, p) }
}

/// `ReLU(x) − D(x)` with `D = round(residual)` an even step function that vanishes for
/// `|x| ≥ reach·2^f`: exactly the rounded activation (docs/design/compiled-gates.md §4.2).
fn relu_minus_residual(
    name: String,
    func: Function,
    n_in: u32,
    l: u32,
    f: u32,
    reach: u64,
    quantum: u32,
) -> OperatorSpec {
    let one = (1u64 << f) as f64;
    let limit = (reach << f).min(half(n_in));
    // D rounded to a multiple of 2^quantum ulps (quantum 0: the rounded residual itself).
    let q = (quantum as f64).exp2();
    let d = |v: u64| -> i64 { round_half_up(func.residual(v as f64 / one) * one / q) << quantum };
    // Changes of D on |x| ∈ [0, limit]; beyond, D = 0.
    let mut changes = vec![];
    let mut prev = d(0);
    for v in 1..=limit {
        let cur = d(v);
        if cur != prev {
            changes.push(v);
            prev = cur;
        }
    }
    assert_eq!(prev, 0, "the residual must vanish within its reach");
    let mut starts = vec![0, half(n_in)];
    for &v in &changes {
        starts.push(v);
        // x = −v + 1 is the first negative input with |x| < v.
        starts.push(unsigned_of(1 - v as i64, n_in));
    }
    let (b, p) = from_starts(starts, |s| {
        let x = signed_of(s, n_in);
        relu_minus(x, if x.unsigned_abs() > limit { 0 } else { d(x.unsigned_abs()) })
    });
    spec(name, n_in, l, true, f, b, p)
}

/// `ReLU(x) − T[row]` on `[lo, −lo)` with `lo = −L` (below), and `ReLU(x)` outside: a
/// residual read from rows of `2^s` ulps, each holding the rounded midpoint of the
/// residual's range over the row (the error is half the residual's variation over a row plus
/// ½ ulp). With `halve_kink`, the two rows beside 0, where the residual has its kink and
/// varies most, are rows of `2^{s−1}` ([`gelu_rows_fine`]). Every boundary is a multiple of the row width, so the
/// compiler answers the comparisons with a key on the high bits and a carry of the low bits
/// (a split view): a few hundred thresholds cost a few hundred positions of one small key
/// instead of a window over every input ulp. `reach` must be a power of two with
/// `reach·2^f ≤ 2^{n_in−2}`.
///
/// The rows stop at the first row boundary `L ≤ reach·2^f` from which on the residual is
/// at most the rows' own error (GeLU at `f = 12`, `s = 7`: `L = 2.78125`, 178 rows instead
/// of 256; its residual there is 7.5e-3 against the rows' 7.7e-3). The maximum error is
/// unchanged and the comparison's window is that much narrower.
#[allow(clippy::too_many_arguments)]
fn relu_minus_rows(
    name: String,
    func: Function,
    n_in: u32,
    l: u32,
    f: u32,
    reach: u64,
    s: u32,
    halve_kink: bool,
) -> OperatorSpec {
    let one = (1u64 << f) as f64;
    let full = reach << f;
    assert!(reach.is_power_of_two() && full <= half(n_in) / 2 && s >= 1 && full >> s >= 1, "bad row layout");
    // The residual's range over `[a, a + w)`, in ulps.
    let range = |a: i64, w: i64| {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for x in a..a + w {
            let v = func.residual(x as f64 / one) * one;
            lo = lo.min(v);
            hi = hi.max(v);
        }
        (lo, hi)
    };
    let error = |(lo, hi): (f64, f64), v: i64| (v as f64 - lo).max(hi - v as f64);
    // Rows `(start, width, value, error)` of `[−full, full)`, the two beside 0 halved on
    // request; each holds the rounded midpoint of its range.
    let w = 1i64 << s;
    let mut all: Vec<(i64, i64, i64, f64)> = vec![];
    for a in (-(full as i64)..full as i64).step_by(w as usize) {
        let cuts: &[(i64, i64)] =
            if halve_kink && (a == -w || a == 0) { &[(0, w / 2), (w / 2, w / 2)] } else { &[(0, w)] };
        for &(o, width) in cuts {
            let r = range(a + o, width);
            let v = round_half_up((r.0 + r.1) / 2.0);
            all.push((a + o, width, v, error(r, v)));
        }
    }
    if halve_kink {
        // The halved rows `[−w, −w/2)`, `[−w/2, 0)`, `[0, w/2)`, `[w/2, w)` hold `t₁..t₄`
        // with `t₂ − t₁ + t₄ − t₃ = 0`: the steps at `±w/2` then sum to nothing, and the
        // compiler reads them as one row of the input shifted by half a row, keeping its
        // split at the rows (`compiler::program`, half rows). Each value moves at most 3
        // ulps from its midpoint; the least maximum error wins, then the values nearest the
        // midpoints (the least bias).
        let k = all.iter().position(|r| r.0 == -w).expect("the kink rows");
        let ranges: Vec<(f64, f64)> = all[k..k + 4].iter().map(|r| range(r.0, r.1)).collect();
        let mid: Vec<i64> = all[k..k + 4].iter().map(|r| r.2).collect();
        let mut best: Option<([i64; 4], (f64, f64))> = None;
        for d0 in -3..=3 {
            for d1 in -3..=3 {
                for d2 in -3..=3 {
                    let t = [mid[0] + d0, mid[1] + d1, mid[2] + d2, mid[2] + d2 + mid[0] + d0 - mid[1] - d1];
                    let e = (0..4).map(|i| error(ranges[i], t[i])).fold(0.0, f64::max);
                    let bias: f64 =
                        (0..4).map(|i| (t[i] as f64 - (ranges[i].0 + ranges[i].1) / 2.0).abs()).sum();
                    if best.is_none_or(|(_, b)| (e, bias) < b) {
                        best = Some((t, (e, bias)));
                    }
                }
            }
        }
        let (t, _) = best.expect("candidates");
        for i in 0..4 {
            all[k + i].2 = t[i];
            all[k + i].3 = error(ranges[i], t[i]);
        }
    }
    let row_error = all.iter().map(|r| r.3).fold(0.0, f64::max);
    // (The residual is even and falls from its peak, below 2, on.)
    let mut limit = full;
    while limit - (1 << s) >= 2 << f && func.residual((limit - (1 << s)) as f64 / one) * one <= row_error {
        limit -= 1 << s;
    }
    // The kept rows are the middle ones of `all`.
    let table: Vec<(i64, i64, i64, f64)> =
        all.into_iter().filter(|r| r.0 >= -(limit as i64) && r.0 < limit as i64).collect();
    let mut starts = vec![0, half(n_in), limit];
    starts.extend(table.iter().map(|r| unsigned_of(r.0, n_in)));
    let (b, p) = from_starts(starts, |u| {
        let x = signed_of(u, n_in);
        let t = table.iter().find(|r| x >= r.0 && x < r.0 + r.1).map_or(0, |r| r.2);
        relu_minus(x, t)
    });
    spec(name, n_in, l, true, f, b, p)
}

/// GeLU with its residual read from rows of `2^s` ulps over at most `[−4, 4)`, cut where
/// the residual falls below the rows' error (see [`relu_minus_rows`]; at `f = 12`, `s = 7`:
/// `[−2.78125, 2.78125)`, error 7.67e-3, SIGMA's 8-bit table: 7.60e-3); at `s = 6` the error
/// is 3.9e-3, for a comparison on `n_in − 6` bits.
pub fn gelu_rows(n_in: u32, l: u32, f: u32, form: GeluForm, s: u32) -> OperatorSpec {
    gelu_rows_with(n_in, l, f, form, s, false)
}

/// [`gelu_rows`] with the two rows beside 0 (the residual's kink) halved: at `f = 12`,
/// `s = 7` the error is 7.23e-3 (below SIGMA's 7.60e-3; whole rows: 7.67e-3). The halved
/// rows' values keep the steps at `±2^{s−1}` summing to zero, so the compiler still splits
/// at `s` and reads those two edges as one row of the input shifted by half a row
/// (`program::half_rows`): ~23 B more key per element at n = 37 and ~5 % more evaluation
/// time than [`gelu_rows`] (before, a split at `s − 1`: 6–31 % more). The models' GeLU
/// (`composite::gelu`).
pub fn gelu_rows_fine(n_in: u32, l: u32, f: u32, form: GeluForm, s: u32) -> OperatorSpec {
    gelu_rows_with(n_in, l, f, form, s, true)
}

fn gelu_rows_with(n_in: u32, l: u32, f: u32, form: GeluForm, s: u32, halve_kink: bool) -> OperatorSpec {
    let func = match form {
        GeluForm::Erf => Function::Gelu,
        GeluForm::Tanh => Function::GeluTanh,
    };
    let fine = if halve_kink { "-fine" } else { "" };
    let name = format!("gelu{}-rows{s}{fine}-{n_in}", if form == GeluForm::Tanh { "_tanh" } else { "" });
    relu_minus_rows(name, func, n_in, l, f, 4, s, halve_kink)
}

/// SiLU with its residual read from rows of `2^s` ulps over at most `[−8, 8)` (see
/// [`relu_minus_rows`]; the residual at 8 is 2.7e-3).
pub fn silu_rows(n_in: u32, l: u32, f: u32, s: u32) -> OperatorSpec {
    relu_minus_rows(format!("silu-rows{s}-{n_in}"), Function::Silu, n_in, l, f, 8, s, false)
}

/// The function `spec` computes of `x = ⌊z / 2^shift⌋`, read from `z` (`in_bits + shift`
/// bits, slack): a truncation fused into the operator that reads its output (paper §3.6,
/// the fused shift). `spec` must be a slack spec whose pieces are each one polynomial
/// `a + b·X` of degree ≤ 1 (the residual forms, [`gelu_rows`] and [`silu_rows`]). Interval
/// `[s, t)` of `x` is `[s·2^shift, t·2^shift)` of `z`; each piece keeps `a` and `b` as
/// constants and `Φ` computes `b·⌊z/2^shift⌋ + a`, so the gate opens `z` once and takes the
/// truncation's carry with its comparisons.
///
/// # Panics
/// If `spec` is not of that form or `in_bits + shift > 63`.
pub fn of_product(spec: &OperatorSpec, shift: u32) -> OperatorSpec {
    let n = spec.in_bits;
    let wide = n + shift;
    assert!(
        spec.slack && spec.signed && spec.phi.is_none() && shift >= 1 && wide <= 63,
        "not a slack residual spec"
    );
    let pieces: Vec<Piece> = spec
        .pieces
        .iter()
        .map(|p| {
            assert!(p.polys.len() == 1 && p.polys[0].len() <= 2 && p.consts.is_empty() && p.bools.is_empty());
            let (a, b) = (p.polys[0].first().copied().unwrap_or(0), p.polys[0].get(1).copied().unwrap_or(0));
            Piece { consts: vec![a, b], ..Piece::default() }
        })
        .collect();
    let boundaries: Vec<u64> =
        spec.boundaries.iter().map(|&b| unsigned_of(signed_of(b, n) << shift, wide)).collect();
    let nodes = vec![
        Node::Shr { bits: shift },
        Node::Aux { index: 1 },
        Node::Mul { a: 1, b: 0 },
        Node::Aux { index: 0 },
        Node::Add { a: 2, b: 3 },
    ];
    OperatorSpec {
        name: format!("{}-of-product{shift}", spec.name),
        in_bits: wide,
        scale: spec.scale.map(|f| f + shift),
        out_scale: spec.out_scale.or(spec.scale),
        boundaries,
        pieces,
        phi: Some(Phi { nodes, outputs: vec![Output::Arith(4)] }),
        ..spec.clone()
    }
}

/// `max(x, 0)` for a signed `n_in`-bit input, into `Z_{2^l}`.
pub fn relu(n_in: u32, l: u32) -> OperatorSpec {
    let p = vec![
        Piece { polys: vec![vec![0, 1]], ..Piece::default() },
        Piece { polys: vec![vec![0]], ..Piece::default() },
    ];
    let mut s = spec(format!("relu{n_in}"), n_in, l, true, 0, vec![0, half(n_in)], p);
    s.scale = None;
    s
}

/// GeLU of a signed `n_in`-bit input at scale `f`, into `Z_{2^l}` (`n_in < l` reads a
/// truncated wire, SIGMA's mode 1). Error ½ ulp.
pub fn gelu(n_in: u32, l: u32, f: u32, form: GeluForm) -> OperatorSpec {
    gelu_coarse(n_in, l, f, form, 0)
}

/// GeLU with its residual rounded to a multiple of `2^quantum` ulps: error at most
/// `2^{quantum−1}` ulps (½ ulp for `quantum = 0`), and about `2^quantum` times fewer
/// intervals, which makes the comparison cheaper to evaluate.
pub fn gelu_coarse(n_in: u32, l: u32, f: u32, form: GeluForm, quantum: u32) -> OperatorSpec {
    let func = match form {
        GeluForm::Erf => Function::Gelu,
        GeluForm::Tanh => Function::GeluTanh,
    };
    relu_minus_residual(
        format!("gelu{}{}-{n_in}", if form == GeluForm::Tanh { "_tanh" } else { "" }, coarse_suffix(quantum)),
        func,
        n_in,
        l,
        f,
        8,
        quantum,
    )
}

fn coarse_suffix(quantum: u32) -> String {
    if quantum == 0 { String::new() } else { format!("-q{quantum}") }
}

/// SiLU of a signed `n_in`-bit input at scale `f`. Error ½ ulp.
pub fn silu(n_in: u32, l: u32, f: u32) -> OperatorSpec {
    silu_coarse(n_in, l, f, 0)
}

/// SiLU with its residual rounded to a multiple of `2^quantum` ulps (see [`gelu_coarse`]).
pub fn silu_coarse(n_in: u32, l: u32, f: u32, quantum: u32) -> OperatorSpec {
    relu_minus_residual(
        format!("silu{}-{n_in}", coarse_suffix(quantum)),
        Function::Silu,
        n_in,
        l,
        f,
        32,
        quantum,
    )
}

/// A rounded step function of a signed input: `round(g(x/2^f)·2^f)` for `|x| < reach·2^f`,
/// constant beyond (the value at the edge).
fn rounded_step(name: String, func: Function, n_in: u32, l: u32, f: u32, reach: u64) -> OperatorSpec {
    let one = (1u64 << f) as f64;
    let limit = (reach << f).min(half(n_in) - 1) as i64;
    let y = |x: i64| -> i64 { round_half_up(func.f64(x.clamp(-limit, limit) as f64 / one) * one) };
    let to_u = |x: i64| unsigned_of(x, n_in);
    let mut starts = vec![0, half(n_in)];
    let mut prev = y(-limit);
    for x in -limit + 1..=limit {
        let cur = y(x);
        if cur != prev {
            starts.push(to_u(x));
            prev = cur;
        }
    }
    starts.push(to_u(-limit));
    starts.push(to_u(limit));
    let (b, p) = from_starts(starts, |s| Piece {
        polys: vec![vec![y(signed_of(s, n_in)) as i128]],
        ..Piece::default()
    });
    spec(name, n_in, l, true, f, b, p)
}

/// `σ(x)` exactly rounded (½ ulp) on a signed input.
pub fn sigmoid(n_in: u32, l: u32, f: u32) -> OperatorSpec {
    rounded_step(format!("sigmoid-{n_in}"), Function::Sigmoid, n_in, l, f, 32)
}

/// `tanh x` exactly rounded (½ ulp) on a signed input.
pub fn tanh(n_in: u32, l: u32, f: u32) -> OperatorSpec {
    rounded_step(format!("tanh-{n_in}"), Function::Tanh, n_in, l, f, 16)
}

/// `e^{−x}` at scale `f` for `x ≥ 0` (read as a signed `n_in`-bit value; negative inputs give
/// `1`), exactly rounded (docs/design/compiled-gates.md §4.4).
pub fn nexp(n_in: u32, l: u32, f: u32) -> OperatorSpec {
    let one = (1u64 << f) as f64;
    let y = |x: u64| -> i64 { round_half_up((-(x as f64) / one).exp() * one) };
    let mut starts = vec![0, half(n_in)];
    let mut prev = y(0);
    let mut x = 1u64;
    while prev != 0 && x < half(n_in) {
        let cur = y(x);
        if cur != prev {
            starts.push(x);
            prev = cur;
        }
        x += 1;
    }
    let (b, p) = from_starts(starts, |s| {
        let v = if s >= half(n_in) { 1i64 << f } else { y(s) };
        Piece { polys: vec![vec![v as i128]], ..Piece::default() }
    });
    spec(format!("nexp-{n_in}"), n_in, l, false, f, b, p)
}

/// `e^{−x}` for `x ≥ 0` at scale `f` (as [`nexp`]) read from rows of `2^s` ulps, each
/// holding the rounded midpoint of `e^{−x}`'s range over the row: error at most half the
/// variation over a row plus ½ ulp (`2^{s−1}·2^{−f}` near 0, where the slope is −1). Every
/// boundary is a multiple of `2^s`, so the compiler splits the comparison there: the
/// window it reads covers `2^s` times fewer positions.
pub fn nexp_rows(n_in: u32, l: u32, f: u32, s: u32) -> OperatorSpec {
    nexp_rows_in(n_in, l, f, s, true)
}

/// [`nexp_rows`] for inputs known to be below `2^{n_in−1}` (softmax's `max − x`): inputs
/// from `2^{n_in−1}` on read the last row (0) instead of 1, so the spec has no sign boundary
/// and its comparison no lone threshold at `2^{n_in−1}` (a walk down the whole key per
/// element).
pub fn nexp_rows_nonneg(n_in: u32, l: u32, f: u32, s: u32) -> OperatorSpec {
    nexp_rows_in(n_in, l, f, s, false)
}

fn nexp_rows_in(n_in: u32, l: u32, f: u32, s: u32, signed: bool) -> OperatorSpec {
    let one = (1u64 << f) as f64;
    let e = |x: u64| (-(x as f64) / one).exp() * one;
    let row = |k: u64| -> i64 { round_half_up((e(k << s) + e(((k + 1) << s) - 1)) / 2.0) };
    let mut starts = if signed { vec![0, half(n_in)] } else { vec![0] };
    let mut prev = row(0);
    let mut k = 1u64;
    while prev != 0 && k << s < half(n_in) {
        let cur = row(k);
        if cur != prev {
            starts.push(k << s);
            prev = cur;
        }
        k += 1;
    }
    // (Unsigned, the last interval's value holds to the top of the ring.)
    let (b, p) = from_starts(starts, |x| {
        let v = if signed && x >= half(n_in) { 1i64 << f } else { row(x >> s) };
        Piece { polys: vec![vec![v as i128]], ..Piece::default() }
    });
    let name = if signed { format!("nexp-rows{s}-{n_in}") } else { format!("nexp-rows{s}-nonneg-{n_in}") };
    spec(name, n_in, l, false, f, b, p)
}

/// `e^{−x}` at scale `f + t` (`t` more fractional bits than the input at scale `f`) for a
/// slack input (`|x| < 2^{n_in−2}`; negative `x` read 1), linear in rows of `2^s` ulps that
/// join up ([`Node::Interp`]): row `k` starts at the value where row `k − 1` ends, with the
/// integer slope (at scale `f + t`, per ulp) that brings its end closest to `e^{−x}` at the
/// next row's start. The rows' starts track `e^{−x}` within `2^{s−1}` units, so the error is
/// about `2^{s−1−t}` ulps at scale `f` (with `s = 7, t = 5`: 2 ulps, where rows of 32 ulps
/// read as steps err by 16), and a split at `s` reads each row's value without its carry.
/// Needs `1 ≤ s ≤ n_in − 2` and `f + t < l`.
pub fn nexp_interp(n_in: u32, l: u32, f: u32, s: u32, t: u32) -> OperatorSpec {
    assert!((1..=n_in.saturating_sub(2)).contains(&s) && f + t < l, "bad e^-x interpolation");
    let scale = (1u64 << (f + t)) as f64;
    let y = |x: u64| (-(x as f64) / (1u64 << f) as f64).exp() * scale;
    let row = 1u64 << s;
    let top = half(n_in) >> 1;
    // Rows until the value and the function have both reached 0 (within half an ulp at
    // scale `f`), then that value up to the slack's end and beyond.
    let (mut starts, mut pieces) = (vec![], vec![]);
    let mut a = 1i64 << (f + t);
    let mut k = 0u64;
    loop {
        let next = y((k + 1) * row);
        let slope = (((a as f64 - next) / row as f64).round() as i64).max(0);
        // (A flat row that repeats the one before it extends that row's interval.)
        if slope != 0 || pieces.last() != Some(&(a, 0)) {
            starts.push(k * row);
            pieces.push((a, slope));
        }
        a -= slope * row as i64;
        k += 1;
        let flat = slope == 0 && 2 * a <= 1 << t && 2.0 * y(k * row) < (1u64 << t) as f64;
        if flat || k * row >= top {
            break;
        }
    }
    if k * row < half(n_in) && pieces.last() != Some(&(a, 0)) {
        starts.push(k * row);
        pieces.push((a, 0));
    }
    // Negative inputs: 1 (joins row 0, which a slack input reads from the row below it).
    starts.push(half(n_in));
    pieces.push((1i64 << (f + t), 0));
    let pieces = pieces
        .into_iter()
        .map(|(v, slope)| Piece { consts: vec![v as i128, slope as i128], ..Piece::default() })
        .collect();
    let mut spec =
        OperatorSpec::of_pieces(format!("nexp-interp{s}-{t}-{n_in}"), n_in, l, true, starts, pieces);
    spec.slack = true;
    spec.scale = Some(f);
    spec.out_scale = Some(f + t);
    spec.phi = Some(Phi {
        nodes: vec![Node::Interp { value: 0, slope: 1, bits: s }],
        outputs: vec![Output::Arith(0)],
    });
    spec
}

/// [`reciprocal`] on a grid of `m` mantissa bits: `2^m` cells per octave of `S ≥ 1` (cell
/// `[a, b)` holds the rounded midpoint of `1/S` over it, relative error about `2^{−m−1}`),
/// `S < 1` reads as 1, and the cell below `2^{f−m}` holds `1/cols` (`S = cols` wraps to 0).
/// Every boundary of octave `e` is a multiple of `2^{e−m}`, so a grouped split
/// ([`crate::CompileOptions::grouped`]) reads each run of octaves from one window. Needs
/// `f > m`.
pub fn reciprocal_grid(f: u32, cols: u64, l: u32, m: u32) -> OperatorSpec {
    reciprocal_grid_in(f, f, cols, l, m)
}

/// [`reciprocal_grid`] for a row sum at scale `f_in ≥ f` (a softmax whose `e^{−x}` has
/// `f_in − f` more fractional bits, [`nexp_interp`]), `1/S` still at scale `f`: the input
/// is read on `f_in + log2(cols)` bits.
pub fn reciprocal_grid_in(f_in: u32, f: u32, cols: u64, l: u32, m: u32) -> OperatorSpec {
    assert!(cols.is_power_of_two() && cols >= 2 && (1..f).contains(&m) && f_in >= f, "bad reciprocal grid");
    let n_in = f_in + cols.trailing_zeros();
    let num = (1u128 << (f_in + f)) as f64;
    let g = |v: u64| num / v.max(1 << f_in) as f64;
    // The wrap cell, 1 below the first octave, then 2^m cells per octave.
    let mut starts = vec![0, 1u64 << (f_in - m)];
    for e in f_in..n_in {
        starts.extend((0..1u64 << m).map(|j| (1u64 << e) + (j << (e - m))));
    }
    let mut ends: Vec<u64> = starts[1..].to_vec();
    ends.push(1u64 << n_in);
    let value = |s: u64| -> i64 {
        if s < 1u64 << (f_in - m) {
            return round_half_up(num / (cols << f_in) as f64);
        }
        let i = starts.partition_point(|&t| t <= s) - 1;
        round_half_up((g(starts[i]) + g(ends[i] - 1)) / 2.0)
    };
    let (b, p) =
        from_starts(starts.clone(), |s| Piece { polys: vec![vec![value(s) as i128]], ..Piece::default() });
    let name = if f_in == f {
        format!("reciprocal-{cols}-m{m}")
    } else {
        format!("reciprocal-{cols}-m{m}-in{f_in}")
    };
    let mut s = spec(name, n_in, l, false, f, b, p);
    if f_in != f {
        s.scale = Some(f_in);
        s.out_scale = Some(f);
    }
    s
}

/// `1/S` at scale `f` for a softmax row sum `S ∈ [1, cols]` at scale `f` (`cols` a power of
/// two): the input is read on `n_in = f + log2(cols)` bits, so `S = cols` wraps to 0 and
/// row 0 holds `1/cols` (docs/design/compiled-gates.md §8, the narrower contract). Rows of `2^6` ulps
/// hold the minimax constant of the row; `S < 1` reads as 1.
pub fn reciprocal(f: u32, cols: u64, l: u32) -> OperatorSpec {
    assert!(cols.is_power_of_two() && cols >= 2, "cols must be a power of two");
    let n_in = f + cols.trailing_zeros();
    let s = 6u32.min(f);
    let num = (1u128 << (2 * f)) as f64;
    let value = |row: u64| -> i64 {
        if row == 0 {
            return round_half_up(num / (cols << f) as f64);
        }
        let (a, b) = ((row << s).max(1 << f) as f64, (((row + 1) << s) - 1).max(1 << f) as f64);
        round_half_up((num / a + num / b) / 2.0)
    };
    let rows = 1u64 << (n_in - s);
    let starts: Vec<u64> = (0..rows).map(|r| r << s).collect();
    let (b, p) =
        from_starts(starts, |st| Piece { polys: vec![vec![value(st >> s) as i128]], ..Piece::default() });
    spec(format!("reciprocal-{cols}"), n_in, l, false, f, b, p)
}

/// `2^f/√(v/(d·2^{2f}))` for a non-negative sum of squares `v` at scale `2f` (`1/σ` of a
/// row of `d` at scale `f`): a floating grid with 7 mantissa bits, each cell the minimax
/// constant; `v = 0` and negative `v` read as `v = 1` (docs/design/compiled-gates.md §4.6).
///
/// Cells are at least [`rsqrt_floor`] ulps wide: below `σ = 2^{−6}` (rows whose values
/// differ by a few ulps) the grid turns uniform. All boundaries are then multiples of the
/// floor, so the comparison splits there (a key on the high bits, a window over the uniform
/// rows) and the spec has ~40 % fewer cells than a grid down to `v = 1`.
pub fn rsqrt(n: u32, l: u32, f: u32, d: u64) -> OperatorSpec {
    rsqrt_bits(n, l, f, d, 7)
}

/// [`rsqrt`] on a grid of `m` mantissa bits (`2^m` cells per octave; relative error about
/// `2^{−m−2}`), uniform below `σ = 2^{−6}` as there.
pub fn rsqrt_bits(n: u32, l: u32, f: u32, d: u64, m: u32) -> OperatorSpec {
    rsqrt_grid(n, l, f, d, m, rsqrt_floor_bits(n, f, d, m))
}

/// `log2` of [`rsqrt`]'s narrowest cell: the width of the 7-bit grid's cells at
/// `σ = 2^{−6}`, i.e. at `v = d·2^{2f−12}` (0 when that is below `2^7`).
pub fn rsqrt_floor(n: u32, f: u32, d: u64) -> u32 {
    rsqrt_floor_bits(n, f, d, 7)
}

/// [`rsqrt_floor`] for a grid of `m` mantissa bits: the width of its cells at `σ = 2^{−6}`.
pub fn rsqrt_floor_bits(n: u32, f: u32, d: u64, m: u32) -> u32 {
    let log_d = 63 - d.max(1).leading_zeros();
    (log_d + 2 * f).saturating_sub(12 + m).min(n.saturating_sub(2 + m))
}

/// [`rsqrt`] with cells at least `2^floor` ulps wide: uniform rows of `2^floor` below
/// `2^{floor+7}`, 128 cells per octave above (`floor = 0`: the grid down to `v = 1`).
pub fn rsqrt_with_floor(n: u32, l: u32, f: u32, d: u64, floor: u32) -> OperatorSpec {
    rsqrt_grid(n, l, f, d, 7, floor)
}

/// The grid of `m` mantissa bits with cells at least `2^floor` ulps wide: `2^m` uniform rows
/// of `2^floor` below `2^{floor+m}`, `2^m` cells per octave above.
pub fn rsqrt_grid(n: u32, l: u32, f: u32, d: u64, m: u32, floor: u32) -> OperatorSpec {
    rsqrt_grid_out(n, l, f, d, m, floor, 0)
}

/// [`rsqrt_grid`] with the output at scale `f + extra` instead of `f`.
pub fn rsqrt_grid_out(n: u32, l: u32, f: u32, d: u64, m: u32, floor: u32, extra: u32) -> OperatorSpec {
    assert!((1..=16).contains(&m) && floor + m + 1 < n, "the floor leaves no octave");
    let num = (1u128 << (f + extra)) as f64 * ((d as f64) * (1u128 << (2 * f)) as f64).sqrt();
    let g = |v: f64| num / v.sqrt();
    let cells = 1u64 << m;
    let mut starts: Vec<u64> = (0..cells).map(|j| j << floor).collect();
    for e in m + floor..n - 1 {
        for j in 0..cells {
            starts.push((1u64 << e) + (j << (e - m)));
        }
    }
    starts.push(half(n));
    let mut ends: Vec<u64> = starts[1..].to_vec();
    ends.push(u64::MAX);
    let value = |s: u64| -> i64 {
        if s >= half(n) {
            return round_half_up(g(1.0));
        }
        let i = starts.partition_point(|&t| t <= s) - 1;
        // A cell reads the mean of its ends' values; the first row (`v` below the floor:
        // `σ < 2^{−6}`, or `v = 0`) reads its top's, so that `√v·g` stays below `√2·g(1)`
        // on every cell, `|x_j|/σ` below `√(2d)` (a row's `x_j² ≤ v`): the bound
        // `composite::norm` opens LayerNorm's product within.
        let b = (ends[i] - 1).max(1) as f64;
        let a = if i == 0 { b } else { starts[i].max(1) as f64 };
        round_half_up((g(a) + g(b)) / 2.0)
    };
    let (b, p) =
        from_starts(starts.clone(), |s| Piece { polys: vec![vec![value(s) as i128]], ..Piece::default() });
    let mut name = if m == 7 { format!("rsqrt-{d}-{floor}") } else { format!("rsqrt-{d}-{floor}-m{m}") };
    if extra > 0 {
        name.push_str(&format!("-x{extra}"));
    }
    spec(name, n, l, false, f, b, p)
}

/// The exact arithmetic shift `⌊x / 2^f⌋` of a signed `n`-bit input; with `sign`, a second
/// (Boolean) output `1[x ≥ 0]` from the same opening (docs/design/compiled-gates.md §4.1).
pub fn ars(n: u32, f: u32, sign: bool) -> OperatorSpec {
    let mut s = spec(
        format!("ars{}-{n}-{f}", if sign { "_sign" } else { "" }),
        n,
        n,
        true,
        f,
        vec![0],
        vec![Piece::default()],
    );
    s.scale = None;
    let mut nodes = vec![Node::Shr { bits: f }];
    let mut outputs = vec![Output::Arith(0)];
    if sign {
        s.atoms = vec![Atom::Msb];
        nodes.extend([Node::Atom { index: 0 }, Node::Not { a: 1 }]);
        outputs.push(Output::Bool(2));
    }
    s.phi = Some(Phi { nodes, outputs });
    s
}

/// Truncate-reduce: `x >> f` of an `n`-bit input, into `Z_{2^{n−f}}`.
pub fn truncate(n: u32, f: u32) -> OperatorSpec {
    let mut s = spec(format!("truncate-{n}-{f}"), n, n - f, false, f, vec![0], vec![Piece::default()]);
    s.scale = None;
    s.phi = Some(Phi { nodes: vec![Node::Shr { bits: f }], outputs: vec![Output::Arith(0)] });
    s
}

/// `min(max(x, lo), hi)` for a signed `n`-bit input, `lo ≤ 0 ≤ hi`.
pub fn clip(n: u32, lo: i64, hi: i64) -> OperatorSpec {
    let to_u = |x: i64| unsigned_of(x, n);
    let starts = vec![0, to_u(hi) + 1, half(n), to_u(lo)];
    let (b, p) = from_starts(starts, |s| {
        let x = signed_of(s, n);
        let poly = if x > hi {
            vec![hi as i128]
        } else if x < lo {
            vec![lo as i128]
        } else {
            vec![0, 1]
        };
        Piece { polys: vec![poly], ..Piece::default() }
    });
    let mut s = spec(format!("clip-{n}"), n, n, true, 0, b, p);
    s.scale = None;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real(v: u64, bits: u32, f: u32) -> f64 {
        signed_of(v, bits) as f64 / (1u64 << f) as f64
    }

    #[test]
    fn activations_are_exactly_rounded() {
        let f = 12;
        for (s, func) in [
            (gelu(20, 24, f, GeluForm::Erf), Function::Gelu),
            (gelu(20, 24, f, GeluForm::Tanh), Function::GeluTanh),
            (silu(20, 24, f), Function::Silu),
            (sigmoid(20, 24, f), Function::Sigmoid),
            (tanh(20, 24, f), Function::Tanh),
        ] {
            s.validate().unwrap();
            for x in (-(1i64 << 19)..(1i64 << 19)).step_by(37) {
                let u = (x as u64) & ((1 << 20) - 1);
                let got = real(s.eval(u).arith[0], 24, f);
                let want = func.f64(x as f64 / 4096.0);
                assert!((got - want).abs() <= 0.5 / 4096.0 + 1e-12, "{} at {x}: {got} vs {want}", s.name);
            }
        }
    }

    /// The models' GeLU rows stop at 2.78125 (178 rows of 2^7 ulps at f = 12), where the
    /// residual falls below the rows' own error: ReLU beyond, and the error over the whole
    /// input range is the rows' (what the full [−4, 4) table gives).
    #[test]
    fn gelu_rows_stop_where_the_residual_is_below_their_error() {
        let (n, f, s) = (25, 12, 7);
        let spec = gelu_rows(n, 37, f, GeluForm::Erf, s);
        spec.validate().unwrap();
        assert!(spec.boundaries.iter().all(|b| b % (1 << s) == 0));
        let limit = 2.78125 * 4096.0;
        let mut worst = 0f64;
        for x in (-(6i64 << f))..(6i64 << f) {
            let got = real(spec.eval(unsigned_of(x, n)).arith[0], 37, f);
            let want = Function::Gelu.f64(x as f64 / 4096.0);
            worst = worst.max((got - want).abs());
            // (Rows cover [−L, L).)
            if x as f64 >= limit || (x as f64) < -limit {
                assert_eq!(got, (x.max(0) as f64) / 4096.0, "ReLU at {x}");
            } else if x as f64 >= limit - 128.0 || (x as f64) < 128.0 - limit {
                assert_ne!(got, (x.max(0) as f64) / 4096.0, "a row at {x}");
            }
        }
        // SIGMA's 8-bit table: 7.6e-3; the rows' own: 7.67e-3.
        assert!(worst < 7.7e-3 && worst > 7.6e-3, "worst {worst}");
    }

    #[test]
    fn nexp_reciprocal_rsqrt() {
        let s = nexp(20, 30, 12);
        s.validate().unwrap();
        assert_eq!(s.eval(0).arith[0], 4096);
        assert_eq!(s.eval(1 << 19).arith[0], 4096);
        assert!(s.pieces.len() > 4000);
        // Rows of 8 ulps: boundaries on the rows, error within 4 ulps (half the variation
        // over a row of slope ≤ 1, plus ½ ulp), the same values for negative inputs.
        let e = nexp_rows(20, 30, 12, 3);
        e.validate().unwrap();
        assert!(e.boundaries.iter().all(|b| b % 8 == 0) && e.pieces.len() < 2000);
        assert_eq!(e.eval(1 << 19).arith[0], 4096);
        for x in 0..(12u64 << 12) {
            let err = e.eval(x).arith[0] as f64 - 4096.0 * (-(x as f64) / 4096.0).exp();
            assert!(err.abs() <= 4.0, "x = {x}: {err}");
        }
        let r = reciprocal(12, 128, 50);
        r.validate().unwrap();
        assert_eq!(r.in_bits, 19);
        assert_eq!(r.eval(0).arith[0], 32); // S = 128 → 1/128
        assert_eq!(r.eval(4096).arith[0], 4065); // minimax of 1/S on [1, 1 + 63/4096]
        let q = rsqrt_with_floor(37, 37, 12, 1, 0);
        q.validate().unwrap();
        // At most 128 integers, 128 cells per octave 2^7..2^35 and the clamp; equal
        // neighbours merge (v = 0 with v = 1, and cells of large v that round alike).
        assert!((3000..=128 + 128 * 29).contains(&q.pieces.len()));
        let v = 3u64 << 24; // variance 3.0 at scale 24
        let y = q.eval(v).arith[0] as f64 / 4096.0;
        assert!((y - 1.0 / 3f64.sqrt()).abs() < 3e-3);
        // The floor: cells of the grid at σ = 2^−6 (d·2^{2f−19}), at least 1.
        assert_eq!(
            (rsqrt_floor(37, 12, 1), rsqrt_floor(37, 12, 128), rsqrt_floor(50, 12, 1024)),
            (5, 12, 15)
        );
        assert_eq!((rsqrt_floor(37, 12, 384), rsqrt_floor(14, 2, 4)), (13, 0));
        let w = rsqrt(37, 37, 12, 1);
        w.validate().unwrap();
        // Uniform rows of 2^5 below 2^12, 128 cells per octave 2^12..2^35: the same cells
        // (and values) as the full grid from σ = 2^−6 up.
        assert!(w.pieces.len() <= 128 + 128 * 24 + 1);
        assert!(w.boundaries.iter().all(|b| b % 32 == 0));
        for v in [1u64 << 12, (1 << 12) + 77, 3 << 24, (1 << 35) + 12345, (1 << 36) - 1] {
            assert_eq!(w.eval(v).arith, q.eval(v).arith, "v = {v}");
        }
        // Row 0 (v in [0, 31]) reads its top's value, so that `√v·g` stays bounded there.
        let g = |v: f64| (1u64 << 24) as f64 / v.sqrt();
        assert_eq!(w.eval(0).arith[0] as i64, round_half_up(g(31.0)));
        assert_eq!(w.eval(31).arith[0], w.eval(0).arith[0]);
    }

    #[test]
    fn shifts_and_clip() {
        let s = ars(10, 3, true);
        s.validate().unwrap();
        let v = s.eval(1024 - 20);
        assert_eq!(v.arith[0], 1024 - 3);
        assert_eq!(v.bools, vec![false]);
        let t = truncate(10, 3);
        assert_eq!(t.eval(1023).arith[0], 127);
        let c = clip(8, -5, 9);
        c.validate().unwrap();
        for x in -128i64..128 {
            assert_eq!(c.eval((x as u64) & 255).arith[0], (x.clamp(-5, 9) as u64) & 255);
        }
    }
}
