//! Spec fitting: a piecewise polynomial with `K` uniform intervals of degree `d` fitted to a
//! library function over its clamped range, with constant (or identity) tails, and its
//! error measured on every representable input of the range (`fusefss fit`).
//!
//! The error is measured against the function clamped to the range (the tails are constant
//! by definition), or the function itself where a tail is the identity.
//!
//! Degree 0 uses the minimax constant of each interval (exact over the interval's inputs).
//! Degree `d ≥ 1` interpolates at the `d + 1` Chebyshev nodes of the interval; integer
//! coefficients of `X^k` are then at scale `(d + 1)·f − k·f`, so the outputs are at scale
//! `(d + 1)·f` (the spec's `out_scale`): a later truncation brings them back to `f`.

use fss::ring::mask;

use crate::library::{Function, round_half_up};
use crate::spec::{OperatorSpec, Piece, SpecError};

/// A fitted spec and its measured error.
#[derive(Clone, Debug)]
pub struct Fitted {
    /// The spec.
    pub spec: OperatorSpec,
    /// Max |spec − f64 function| in real units over the range and sampled tails.
    pub max_abs_err: f64,
    /// The clamped range, in real units.
    pub range: (f64, f64),
    /// Inputs scanned.
    pub inputs: u64,
    /// Output scale.
    pub out_scale: u32,
}

/// What a function does outside its clamped range.
#[derive(Clone, Copy, Debug)]
enum Tail {
    Const(f64),
    Identity,
}

/// Range and tails of each function: inputs in `[lo, hi)` are fitted.
fn domain(func: Function) -> (f64, f64, Tail, Tail, bool) {
    match func {
        Function::Gelu | Function::GeluTanh => (-8.0, 8.0, Tail::Const(0.0), Tail::Identity, true),
        Function::Silu => (-16.0, 16.0, Tail::Const(0.0), Tail::Identity, true),
        Function::Sigmoid => (-16.0, 16.0, Tail::Const(0.0), Tail::Const(1.0), true),
        Function::Tanh => (-8.0, 8.0, Tail::Const(-1.0), Tail::Const(1.0), true),
        Function::NExp => (0.0, 16.0, Tail::Const(1.0), Tail::Const(0.0), true),
        Function::Reciprocal => (1.0, 128.0, Tail::Const(1.0), Tail::Const(1.0 / 128.0), false),
    }
}

/// Fit `func` on an `n`-bit input at scale `f` with `intervals` uniform pieces of degree
/// `degree`.
///
/// # Errors
/// [`SpecError`] if the parameters leave no room: the range does not fit the input, the
/// outputs at scale `(degree + 1)·f` overflow `n` bits, or the counts are out of bounds.
pub fn fit(func: Function, n: u32, f: u32, intervals: usize, degree: usize) -> Result<Fitted, SpecError> {
    let (lo, hi, below, above, signed) = domain(func);
    if !(8..=64).contains(&n) || f == 0 || f >= n {
        return Err(SpecError::Width(format!("n = {n}, f = {f}")));
    }
    if intervals == 0 || degree > crate::spec::MAX_DEGREE {
        return Err(SpecError::TooLarge(format!("{intervals} intervals of degree {degree}")));
    }
    let one = (1u64 << f) as f64;
    let s_out = if degree == 0 { f } else { (degree as u32 + 1) * f };
    let (lo_u, hi_u) = ((lo * one) as i64, (hi * one) as i64);
    let limit = if signed { 1i128 << (n - 1) } else { 1i128 << n };
    if hi_u as i128 >= limit || (signed && (lo_u as i128) < -limit) {
        return Err(SpecError::Width(format!("the range [{lo}, {hi}) does not fit {n} bits at scale {f}")));
    }
    if (hi_u - lo_u) < intervals as i64 {
        return Err(SpecError::TooLarge(format!("{intervals} intervals exceed the range's inputs")));
    }
    // Largest output magnitude (the identity tail, or the function on the range) decides the
    // output ring: at least n bits, more when the output scale needs them.
    let ymax = match above {
        Tail::Identity => limit as f64 / one,
        Tail::Const(_) => 2.0 * (lo.abs().max(hi.abs())).max(1.0),
    };
    let out_bits = ((ymax * (s_out as f64).exp2()).log2().ceil() as u32 + 1).max(n);
    if out_bits > 64 {
        return Err(SpecError::Width(format!(
            "degree {degree} puts outputs at scale {s_out}: values up to {ymax} need {out_bits} bits (at most 64)"
        )));
    }
    let bounds: Vec<i64> = (0..=intervals)
        .map(|i| lo_u + ((hi_u - lo_u) as i128 * i as i128 / intervals as i128) as i64)
        .collect();
    let mut pieces: Vec<(i64, Piece)> = vec![];
    let scale_out = (s_out as f64).exp2();
    let tail = |t: Tail| -> Piece {
        let poly = match t {
            Tail::Const(v) => vec![round_half_up(v * scale_out) as i128],
            Tail::Identity => vec![0, 1i128 << (s_out - f)],
        };
        Piece { polys: vec![poly], ..Piece::default() }
    };
    let min_start = if signed { -(1i64 << (n - 1).min(62)) } else { 0 };
    if lo_u > min_start {
        pieces.push((min_start, tail(below)));
    }
    for w in bounds.windows(2) {
        let (a, b) = (w[0], w[1] - 1);
        let poly = if degree == 0 {
            let (mut mn, mut mx) = (f64::MAX, f64::MIN);
            for x in a..=b {
                let y = func.f64(x as f64 / one);
                mn = mn.min(y);
                mx = mx.max(y);
            }
            vec![round_half_up((mn + mx) / 2.0 * scale_out) as i128]
        } else {
            chebyshev(func, a as f64 / one, b as f64 / one, degree)
                .iter()
                .enumerate()
                .map(|(k, &c)| round_half_up(c * ((s_out - k as u32 * f) as f64).exp2()) as i128)
                .collect()
        };
        pieces.push((a, Piece { polys: vec![poly], ..Piece::default() }));
    }
    pieces.push((hi_u, tail(above)));
    let spec = assemble(func, (n, out_bits), f, s_out, signed, intervals, degree, pieces);
    spec.validate()?;
    // Error: every input of the range, and samples of the tails.
    let decode = |y: u64| -> f64 {
        let v = if out_bits < 64 && y >> (out_bits - 1) & 1 == 1 {
            y as i64 - (1i64 << out_bits)
        } else {
            y as i64
        };
        v as f64 / scale_out
    };
    let nmask = mask(n);
    // Constant tails are the clamped function by definition; an identity tail is compared
    // with the function itself.
    let want = |x: i64| -> f64 {
        let clamped = (x.clamp(lo_u, hi_u - 1) as f64) / one;
        match (x < lo_u, x >= hi_u) {
            (true, _) if matches!(below, Tail::Const(_)) => func.f64(clamped),
            (_, true) if matches!(above, Tail::Const(_)) => func.f64(clamped),
            _ => func.f64(x as f64 / one),
        }
    };
    let err_at = |x: i64| (decode(spec.eval(x as u64 & nmask).arith[0]) - want(x)).abs();
    let mut err = (lo_u..hi_u).map(err_at).fold(0.0, f64::max);
    let mut inputs = (hi_u - lo_u) as u64;
    let top =
        if signed { (1i64 << (n - 1).min(62)) - 1 } else { ((1u128 << n) - 1).min(i64::MAX as u128) as i64 };
    for k in 0..62 {
        // Geometric samples outwards from both ends.
        let step = 1i64 << k;
        for x in [hi_u.saturating_add(step - 1), lo_u.saturating_sub(step)] {
            if (min_start..=top).contains(&x) {
                err = err.max(err_at(x));
                inputs += 1;
            }
        }
    }
    Ok(Fitted { spec, max_abs_err: err, range: (lo, hi), inputs, out_scale: s_out })
}

/// Coefficients (absolute, `x^k`) of the polynomial interpolating `func` at the Chebyshev
/// nodes of `[a, b]`.
fn chebyshev(func: Function, a: f64, b: f64, degree: usize) -> Vec<f64> {
    let (mid, half) = ((a + b) / 2.0, ((b - a) / 2.0).max(1e-12));
    let m = degree + 1;
    let nodes: Vec<f64> =
        (0..m).map(|i| (std::f64::consts::PI * (2 * i + 1) as f64 / (2 * m) as f64).cos()).collect();
    // Solve the Vandermonde system in the local variable t = (x − mid)/half.
    let mut rows: Vec<Vec<f64>> = nodes
        .iter()
        .map(|&t| {
            let mut r: Vec<f64> = (0..m).map(|k| t.powi(k as i32)).collect();
            r.push(func.f64(mid + half * t));
            r
        })
        .collect();
    for c in 0..m {
        let p = (c..m).max_by(|&i, &j| rows[i][c].abs().total_cmp(&rows[j][c].abs())).expect("rows");
        rows.swap(c, p);
        let pivot = rows[c].clone();
        for (i, row) in rows.iter_mut().enumerate() {
            if i != c {
                let q = row[c] / pivot[c];
                for (x, p) in row[c..].iter_mut().zip(&pivot[c..]) {
                    *x -= q * p;
                }
            }
        }
    }
    let local: Vec<f64> = (0..m).map(|k| rows[k][m] / rows[k][k]).collect();
    // Σ l_k ((x − mid)/half)^k as Σ c_j x^j.
    let mut out = vec![0.0; m];
    for (k, &l) in local.iter().enumerate() {
        let scale = l / half.powi(k as i32);
        let mut binom = 1.0;
        for (j, o) in out.iter_mut().enumerate().take(k + 1) {
            // C(k, j) x^j (−mid)^{k−j}
            *o += scale * binom * (-mid).powi((k - j) as i32);
            binom = binom * (k - j) as f64 / (j + 1) as f64;
        }
    }
    out
}

/// Pieces with signed starts, in increasing order, as a spec in unsigned interval order.
#[allow(clippy::too_many_arguments)]
fn assemble(
    func: Function,
    (n, out_bits): (u32, u32),
    f: u32,
    s_out: u32,
    signed: bool,
    intervals: usize,
    degree: usize,
    mut pieces: Vec<(i64, Piece)>,
) -> OperatorSpec {
    // Split the interval holding 0 so that no interval wraps in unsigned order.
    if let Some(i) = pieces.iter().rposition(|(s, _)| *s <= 0)
        && pieces[i].0 < 0
    {
        let p = pieces[i].1.clone();
        pieces.insert(i + 1, (0, p));
    }
    let modulus = 1i128 << n;
    let mut by_start: Vec<(u64, Piece)> =
        pieces.into_iter().map(|(s, p)| ((s as i128).rem_euclid(modulus) as u64, p)).collect();
    by_start.sort_by_key(|(s, _)| *s);
    let (mut boundaries, mut out): (Vec<u64>, Vec<Piece>) = (vec![], vec![]);
    for (s, p) in by_start {
        if out.last() != Some(&p) {
            boundaries.push(s);
            out.push(p);
        }
    }
    OperatorSpec {
        scale: Some(f),
        out_scale: (s_out != f).then_some(s_out),
        ..OperatorSpec::of_pieces(
            format!("{}-fit-{intervals}x{degree}", func.name()),
            n,
            out_bits,
            signed,
            boundaries,
            out,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_intervals_and_degree_reduce_the_error() {
        let e = |k, d| fit(Function::Gelu, 37, 12, k, d).unwrap().max_abs_err;
        let (a, b, c) = (e(16, 0), e(64, 0), e(16, 2));
        assert!(b < a, "{b} < {a}");
        assert!(c < a, "{c} < {a}");
        assert!(e(64, 1) < 4e-3);
        assert!(e(256, 1) < e(64, 1));
        let g = fit(Function::Sigmoid, 40, 12, 128, 1).unwrap();
        assert_eq!(g.out_scale, 24);
        assert_eq!(g.spec.out_scale, Some(24));
        let r = fit(Function::Reciprocal, 24, 12, 1024, 1).unwrap();
        assert!(!r.spec.signed && r.max_abs_err < 0.02, "{}", r.max_abs_err);
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert!(fit(Function::Gelu, 37, 12, 0, 1).is_err());
        assert!(fit(Function::Gelu, 37, 12, 8, 9).is_err());
        // Degree 2 at scale 12 puts GeLU's identity tail at scale 36: 75 bits.
        assert!(fit(Function::Gelu, 50, 12, 8, 2).is_err());
        assert!(fit(Function::Silu, 16, 12, 8, 0).is_err());
    }
}
