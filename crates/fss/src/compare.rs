//! Comparisons of a masked wire against public thresholds, all from one 1-bit DPF key at
//! the wire's mask (docs/design/fss-building-blocks.md §6.1 rule 1).
//!
//! With `x̂ = x + r mod 2^n` public and a key at `α = r`, for every public `c`:
//!
//! ```text
//! 1{x < c} = LT(x̂ − c mod 2^n) ⊕ LT(x̂) ⊕ 1{x̂ < c}
//! ```
//!
//! where `LT(y)` is the key's share of `1{y < r}`. The public term is added by party 0. So
//! one key per wire answers any number of thresholds; the points of one wire are walked
//! together down the tree ([`BitDpfKeys::eval_sorted`]).

use crate::bitdpf::{BitDpfKeys, CmpShares};
use crate::error::FssError;
use crate::ring::mask;
use crate::share::{Party, XorBit};
use crate::walk::check_len;

/// For every element `e` (key `e` of `keys`, dealt at that element's mask; public masked
/// value `masked[e]`) and every public threshold `c_j`: `out[e·T + j]` is this party's share
/// of `1{x_e < c_j}` (unsigned `n`-bit order), `T = thresholds.len()`.
///
/// # Errors
/// [`FssError::LengthMismatch`] or [`FssError::PointOutOfDomain`] (a masked value or a
/// threshold does not fit `n` bits).
pub fn less_than_public(
    keys: &BitDpfKeys,
    masked: &[u64],
    thresholds: &[u64],
    out: &mut [XorBit],
) -> Result<(), FssError> {
    check_len(keys.len(), masked.len())?;
    let tn = thresholds.len();
    check_len(keys.len() * tn, out.len())?;
    let party = keys.party();
    let n = keys.params().domain_bits();
    let nmask = mask(n);
    for &v in thresholds.iter().chain(masked) {
        if v & !nmask != 0 {
            return Err(FssError::PointOutOfDomain { point: v, bits: n });
        }
    }
    // Per element: the points x̂ − c_j (slot j) and x̂ (slot T), sorted.
    let per = tn + 1;
    let mut pairs: Vec<(u64, u32)> = Vec::with_capacity(keys.len() * per);
    for &xh in masked {
        let start = pairs.len();
        pairs.extend(thresholds.iter().enumerate().map(|(j, &c)| (xh.wrapping_sub(c) & nmask, j as u32)));
        pairs.push((xh, tn as u32));
        pairs[start..].sort_unstable();
    }
    let points: Vec<u64> = pairs.iter().map(|p| p.0).collect();
    let offsets: Vec<usize> = (0..=keys.len()).map(|e| e * per).collect();
    let mut shares = vec![CmpShares::default(); points.len()];
    keys.eval_sorted_shares(&points, &offsets, &mut shares)?;
    let mut lt = vec![XorBit::default(); per];
    for (e, &xh) in masked.iter().enumerate() {
        for i in e * per..(e + 1) * per {
            lt[pairs[i].1 as usize] = shares[i].lt;
        }
        let base = lt[tn];
        for (j, &c) in thresholds.iter().enumerate() {
            let public = party == Party::P0 && xh < c;
            out[e * tn + j] = lt[j] ^ base ^ XorBit(public);
        }
    }
    Ok(())
}
