//! The spec made ready for lowering: polynomials in the unsigned lift, a slack spec
//! rotated, and the choices that depend on the spec alone (the shift of a split, the row
//! shift of a reduced view, runs of aligned boundaries).

use fss::ring::mask;

use super::ir::MAX_TABLE_BITS;
use crate::spec::{Node, OperatorSpec, word};

/// The row shift of a reduced view: all boundaries are multiples of `2^s` and the
/// `2^{n−s}` rows fit a table.
pub fn reduced_view_shift(spec: &OperatorSpec) -> Option<u32> {
    let n = spec.in_bits;
    let s = spec.boundaries.iter().skip(1).map(|b| b.trailing_zeros()).min().unwrap_or(n).min(n);
    (n - s <= MAX_TABLE_BITS && n > s && spec.bool_count() == 0 && spec.phi.is_none()).then_some(s)
}

/// For a spec without shifts whose boundaries are all multiples of `2^s` (`s ≥ 1`): `s`.
/// Its full-width comparisons can then be split into a key on the high `n − s` bits and
/// an `s`-bit carry key, like a shift's (docs/design/compiled-gates.md §4.1): a uniform table of rows
/// reads a few hundred high positions instead of a window over every low position.
pub(super) fn aligned_shift(spec: &OperatorSpec) -> Option<u32> {
    let n = spec.in_bits;
    let s = spec.boundaries.iter().skip(1).map(|b| b.trailing_zeros()).min()?.min(n);
    (s >= 1 && s < n).then_some(s)
}

/// Most rows of the input shifted by half a row that a split reads ([`half_rows`]): each
/// costs a few opened bits and dealer words per element.
pub const MAX_HALF_ROWS: u64 = 4;

/// A step function's intervals merged where its value does not change: the starts where
/// it does (and the first), with their values.
pub(super) fn merge_steps(starts: &[u64], vals: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let (mut s, mut v) = (vec![], vec![]);
    for (k, (&b, &x)) in starts.iter().zip(vals).enumerate() {
        if k == 0 || v.last() != Some(&x) {
            s.push(b);
            v.push(x);
        }
    }
    (s, v)
}

/// A step function read by a split at `f` whose steps are at multiples of `2^{f−1}`: the
/// steps at multiples of `2^f` ([`HalfRows::starts`], [`HalfRows::vals`]) plus a sum over
/// rows of the input shifted by half a row, `w_K·1[(u + 2^{f−1}) >> f = K]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct HalfRows {
    /// Starts of the aligned part, every one a multiple of `2^f`.
    pub starts: Vec<u64>,
    /// Its values.
    pub vals: Vec<u64>,
    /// The first shifted row `K` of the weights.
    pub first_row: u64,
    /// `w_K` for `K = first_row..`.
    pub weights: Vec<u64>,
}

/// The step function `vals` on the intervals from `starts` (of an `n`-bit input, values in
/// `Z_{2^l}`) as [`HalfRows`] for a split at `f`, if it is one: every step at a multiple of
/// `2^{f−1}`, and the steps at odd multiples (the half rows' edges) sum to 0 within at most
/// [`MAX_HALF_ROWS`] shifted rows, so that their part vanishes outside them. (Its edges are
/// then the shifted input's row edges, which the split's key and carry answer read at one
/// more point each: `Lower::half_row`.)
pub(super) fn half_rows(n: u32, f: u32, starts: &[u64], vals: &[u64], l: u32) -> Option<HalfRows> {
    if f < 1 || f >= n {
        return None;
    }
    let (m, d) = (mask(l), 1u64 << (f - 1));
    let (starts, vals) = merge_steps(starts, vals);
    if starts.iter().any(|&b| b & mask(f - 1) != 0) {
        return None;
    }
    let half: Vec<usize> = (1..starts.len()).filter(|&k| starts[k] & mask(f) == d).collect();
    if half.is_empty() {
        return Some(HalfRows { starts, vals, first_row: 0, weights: vec![] });
    }
    let jump = |k: usize| vals[k].wrapping_sub(vals[k - 1]);
    if half.iter().fold(0u64, |a, &k| a.wrapping_add(jump(k))) & m != 0 {
        return None;
    }
    // Shifted row `K` is `[K·2^f − d, (K + 1)·2^f − d)`; a half row's edge `p` starts row
    // `(p + d) >> f` (at least 1, and below `2^{n−f}`: no shifted row wraps).
    let row = |p: u64| (p + d) >> f;
    let (first, end) = (row(starts[half[0]]), row(starts[*half.last().expect("a half row")]));
    if end - first > MAX_HALF_ROWS {
        return None;
    }
    let mut weights = vec![];
    let (mut acc, mut next) = (0u64, 0);
    for k in first..end {
        while next < half.len() && row(starts[half[next]]) == k {
            acc = acc.wrapping_add(jump(half[next])) & m;
            next += 1;
        }
        weights.push(acc);
    }
    let shifted = |u: u64| {
        let k = row(u);
        if (first..end).contains(&k) { weights[(k - first) as usize] } else { 0 }
    };
    let aligned: Vec<u64> = starts.iter().zip(&vals).map(|(&b, &v)| v.wrapping_sub(shifted(b)) & m).collect();
    let (starts, vals) = merge_steps(&starts, &aligned);
    debug_assert!(starts.iter().all(|&b| b & mask(f) == 0), "the half rows' steps cancel");
    Some(HalfRows { starts, vals, first_row: first, weights })
}

/// Coefficients polynomial `j` has in its longest piece.
pub(super) fn poly_len(spec: &OperatorSpec, j: usize) -> usize {
    spec.pieces.iter().map(|p| p.polys[j].len()).max().unwrap_or(1)
}

/// Coefficient `k` of polynomial `j` on every interval, in `Z_{2^ℓ}` (0 past a piece's degree).
pub(super) fn coefficient(spec: &OperatorSpec, j: usize, k: usize) -> Vec<u64> {
    spec.pieces.iter().map(|p| word(p.polys[j].get(k).copied().unwrap_or(0), spec.out_bits)).collect()
}

/// Constant `j` on every interval, in `Z_{2^ℓ}`.
pub(super) fn constant(spec: &OperatorSpec, j: usize) -> Vec<u64> {
    spec.pieces.iter().map(|p| word(p.consts[j], spec.out_bits)).collect()
}

/// Whether the rows of `2^f` of an interpolated table (`Interp`: value `v_k − s_k·(x mod
/// 2^f)` on interval `k`, in `Z_{2^ℓ}`) join up where a split reads them: each interval's
/// value is where the row before it ends (`v_k = v_{k−1} − 2^f·s_{k−1}`) and an interval of
/// several rows has `2^f·s_k = 0`. Then the value at a row's start, read at the high part
/// before its carry, is the value the carry would have picked (no carry term). Every row
/// counts, the first after the last (`slack` false); a slack input (`u < 2^{n−1}`) never
/// borrows from its first row and reads no row past `2^{n−1}`.
pub(super) fn rows_join(starts: &[u64], v: &[u64], s: &[u64], n: u32, f: u32, l: u32, slack: bool) -> bool {
    let (m, row) = (mask(l), (1u64 << f) & mask(l));
    let t = starts.len();
    let read = |b: u64| !slack || b as u128 <= 1u128 << (n - 1);
    (0..t).filter(|&k| read(starts[k])).all(|k| {
        let end = starts.get(k + 1).map_or(1u128 << n, |&b| b as u128);
        let one_row = end - starts[k] as u128 <= 1u128 << f;
        let prev = (k + t - 1) % t;
        let joins = (slack && k == 0) || v[k] == v[prev].wrapping_sub(row.wrapping_mul(s[prev])) & m;
        starts[k] & mask(f) == 0 && joins && (one_row || row.wrapping_mul(s[k]) & m == 0)
    })
}

/// A split one bit coarser than the boundaries' alignment, reading the few boundaries at
/// odd multiples of `2^{f−1}` as rows of the input shifted by half a row ([`half_rows`]):
/// `f` if every coefficient and constant of `spec` decomposes so and one of them needs it.
/// (GeLU's rows with the two beside its kink halved: a window of rows of `2^f`, not of
/// `2^{f−1}`.) Specs with Boolean outputs keep [`aligned_shift`].
pub(super) fn half_row_shift(spec: &OperatorSpec) -> Option<u32> {
    let (n, l) = (spec.in_bits, spec.out_bits);
    let f = aligned_shift(spec)? + 1;
    if f >= n || spec.bool_count() > 0 {
        return None;
    }
    let mut series: Vec<Vec<u64>> = vec![];
    for j in 0..spec.poly_count() {
        series.extend((0..poly_len(spec, j)).map(|k| coefficient(spec, j, k)));
    }
    series.extend((0..spec.const_count()).map(|j| constant(spec, j)));
    let mut any = false;
    for vals in &series {
        any |= !half_rows(n, f, &spec.boundaries, vals, l)?.weights.is_empty();
    }
    any.then_some(f)
}

/// Cut ascending boundaries (the first is 0) of an `n`-bit input into runs of consecutive
/// boundaries `(g, range)`: greedily from the first, a run grows while its boundaries, all
/// multiples of `2^g` (`g < n` the smallest alignment among them), span at most
/// `max_window` multiples of `2^g`.
pub fn alignment_runs(n: u32, starts: &[u64], max_window: u64) -> Vec<(u32, std::ops::Range<usize>)> {
    let align = |b: u64| b.trailing_zeros().min(n - 1);
    let mut runs = vec![];
    let mut i = 0;
    while i < starts.len() {
        let mut g = align(starts[i]);
        let mut j = i + 1;
        while j < starts.len() {
            let h = g.min(align(starts[j]));
            if (starts[j] - starts[i]) >> h >= max_window {
                break;
            }
            g = h;
            j += 1;
        }
        runs.push((g, i..j));
        i = j;
    }
    runs
}

/// The shift of the spec's `Shr`, `Low` and `Interp` nodes, if they all use one amount (they read the
/// carry of a split there).
pub(super) fn shift_amount(spec: &OperatorSpec) -> Option<u32> {
    let shifts: Vec<u32> = spec
        .phi
        .iter()
        .flat_map(|p| p.nodes.iter())
        .filter_map(|n| match n {
            Node::Shr { bits } | Node::Low { bits } | Node::Interp { bits, .. } => Some(*bits),
            _ => None,
        })
        .collect();
    match shifts.first() {
        Some(&f) if shifts.iter().all(|&g| g == f) => Some(f),
        _ => None,
    }
}

/// Coefficients of `P(X + d)` from those of `P(X)`, mod `2^bits`.
pub fn shift_poly(c: &[u64], d: u64, bits: u32) -> Vec<u64> {
    let m = mask(bits);
    let mut out = vec![0u64; c.len()];
    for (j, &cj) in c.iter().enumerate() {
        // cj·(X + d)^j = Σ_k cj·C(j,k)·d^{j−k}·X^k
        let mut binom = 1u64;
        for k in (0..=j).rev() {
            // k from j down: C(j, k) · d^{j−k}
            let pow = d.wrapping_pow((j - k) as u32);
            out[k] = out[k].wrapping_add(cj.wrapping_mul(binom).wrapping_mul(pow)) & m;
            binom = binom * k as u64 / (j - k + 1) as u64;
        }
    }
    out
}

/// Make the pieces' polynomials functions of the *unsigned* lift `X_u`: for a signed spec
/// whose outputs are wider than its input, the sign boundary `2^{n−1}` becomes an interval
/// boundary and the negative pieces are re-expanded at `X_u − 2^n`.
pub(super) fn normalise(spec: &OperatorSpec) -> OperatorSpec {
    if spec.slack {
        return rotate_slack(spec);
    }
    let mut s = spec.clone();
    let (n, l) = (s.in_bits, s.out_bits);
    if !(s.signed && l > n && s.degree() > 0) {
        return s;
    }
    let h = 1u64 << (n - 1);
    let i = s.piece_of(h);
    if s.boundaries[i] != h {
        s.boundaries.insert(i + 1, h);
        let p = s.pieces[i].clone();
        s.pieces.insert(i + 1, p);
    }
    let shift = (1u64 << n).wrapping_neg();
    for (b, p) in s.boundaries.iter().zip(s.pieces.iter_mut()) {
        if *b >= h {
            for c in &mut p.polys {
                let w: Vec<u64> = c.iter().map(|&v| word(v, l)).collect();
                *c = shift_poly(&w, shift, l).into_iter().map(|v| v as i128).collect();
            }
        }
    }
    s
}

/// A slack spec ([`OperatorSpec::slack`]) read at `u = x + 2^{n−2} < 2^{n−1}`: unsigned,
/// with polynomials in `X_u = u` (`X = u − 2^{n−2}`), its intervals rotated by `2^{n−2}`, and
/// `[2^{n−1}, 2^n)`, which no input reaches, added to the interval below it (no boundary
/// there). It keeps `slack`, now meaning `u < 2^{n−1}`; the gate adds
/// [`Program::input_offset`] to `x̂`.
fn rotate_slack(spec: &OperatorSpec) -> OperatorSpec {
    let (n, l) = (spec.in_bits, spec.out_bits);
    let q = 1u64 << (n - 2);
    // `x = −q` as an unsigned `n`-bit value: where `u = 0` is.
    let neg_q = (1u64 << n) - q;
    let shift = q.wrapping_neg() & mask(l);
    let moved = |i: usize| {
        let mut p = spec.pieces[i].clone();
        for c in &mut p.polys {
            let w: Vec<u64> = c.iter().map(|&v| word(v, l)).collect();
            *c = shift_poly(&w, shift, l).into_iter().map(|v| v as i128).collect();
        }
        p
    };
    // `u` from 0 up: `x` from `−q` (unsigned `2^n − q`) to the top of the ring, then from 0
    // up to `q − 1`.
    let first = spec.piece_of(neg_q);
    let (mut boundaries, mut pieces) = (vec![0u64], vec![moved(first)]);
    for (i, &b) in spec.boundaries.iter().enumerate() {
        if b > neg_q {
            boundaries.push(b - neg_q);
            pieces.push(moved(i));
        }
    }
    for (i, &b) in spec.boundaries.iter().enumerate() {
        if b < q {
            boundaries.push(b + q);
            pieces.push(moved(i));
        }
    }
    OperatorSpec { signed: false, boundaries, pieces, ..spec.clone() }
}
