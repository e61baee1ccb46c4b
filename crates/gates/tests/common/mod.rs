//! Shared test helpers: edge masks, exhaustive element sets, running a gate and checking it.
#![allow(dead_code)]

use fss::ring::mask;
use fss::rng::{DealerRng, Rng, SeedableRng};
use gates::Gate;
use gates::harness::{Report, run_with_masks};

pub fn rng(seed: u64) -> DealerRng {
    DealerRng::seed_from_u64(seed)
}

/// The masks every gate is tested under: 0, 1, N−1, N/2, N/2−1, and three random ones.
pub fn edge_masks(bits: u32, r: &mut DealerRng) -> Vec<u64> {
    let n = mask(bits);
    let half = if bits == 64 { 1u64 << 63 } else { (n >> 1) + 1 };
    let mut v = vec![0, 1 & n, n, half & n, (half - 1) & n];
    v.extend((0..3).map(|_| r.next_u64() & n));
    v
}

/// Run a gate whose elements are given per-element inputs and masks; assert exactness.
pub fn check<G: Gate>(
    gate: &G,
    inputs: &[&[u64]],
    masks: &[&[u64]],
    out_mask: &[u64],
    r: &mut DealerRng,
) -> Report {
    let rep = run_with_masks(gate, inputs, masks, out_mask, r).expect("gate runs");
    if let Some((i, got, want)) = rep.first_mismatch() {
        let ins: Vec<u64> = inputs.iter().map(|v| v[i]).collect();
        let ms: Vec<u64> = masks.iter().map(|v| v[i]).collect();
        panic!("element {i}: inputs {ins:?} masks {ms:?}: secure {got:#x} != reference {want:#x}");
    }
    rep
}

/// Random words.
pub fn words(r: &mut DealerRng, count: usize, bits: u32) -> Vec<u64> {
    (0..count).map(|_| r.next_u64() & mask(bits)).collect()
}
