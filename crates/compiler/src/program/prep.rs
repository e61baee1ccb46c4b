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

/// The shift of the spec's `Shr` nodes, if they all use one amount.
pub(super) fn shift_amount(spec: &OperatorSpec) -> Option<u32> {
    let shifts: Vec<u32> = spec
        .phi
        .iter()
        .flat_map(|p| p.nodes.iter())
        .filter_map(|n| match n {
            Node::Shr { bits } => Some(*bits),
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
