//! The dense runs' windows against the reference, exhaustively under edge masks.

use std::sync::Arc;

use fss::ring::mask;

use super::CompiledGate;
use super::plan::{EvalPlan, Run};
use crate::program::Program;
use crate::program::{CompileOptions, compile};
use crate::spec::{OperatorSpec, Piece};
use fss::rng::{DealerRng, Rng, SeedableRng};

/// Every input under edge masks (and two masks near the clusters), against the reference.
fn exhaustive_with_masks(program: Arc<Program>, n: u32, out_bits: u32, near: [u64; 2]) {
    let mut r = DealerRng::seed_from_u64(5);
    let nm = mask(n);
    let masks = [0u64, 1, nm, 1 << (n - 1), (1 << (n - 1)) - 1, r.next_u64() & nm, near[0], near[1]];
    let xs: Vec<u64> = masks.iter().flat_map(|_| 0..1u64 << n).collect();
    let ms: Vec<u64> = masks.iter().flat_map(|&m| std::iter::repeat_n(m, 1 << n)).collect();
    let gate = CompiledGate::new(program, xs.len());
    let out: Vec<u64> = (0..xs.len()).map(|_| r.next_u64() & mask(out_bits)).collect();
    let rep = gates::harness::run_with_masks(&gate, &[&xs], &[&ms], &out, &mut r).unwrap();
    assert_eq!(rep.first_mismatch(), None);
}

/// An unsigned `n`-bit step function into 16 bits: `value(i)` on interval `i`.
fn step_spec(name: &str, n: u32, boundaries: Vec<u64>, value: impl Fn(usize) -> i128) -> OperatorSpec {
    let pieces =
        (0..boundaries.len()).map(|i| Piece { polys: vec![vec![value(i)]], ..Piece::default() }).collect();
    OperatorSpec::of_pieces(name, n, 16, false, boundaries, pieces)
}

/// Thresholds dense just below `2^n` and just above 0 make one run that wraps past
/// `2^n − 1` (as a signed function's rows around 0 do): one window, exact on every input.
#[test]
fn a_run_across_the_top_of_the_ring_is_one_window() {
    let n = 13u32;
    let top = 1u64 << n;
    let mut boundaries: Vec<u64> = (0..300).map(|k| 5 + 3 * k).collect();
    boundaries.extend((0..250).map(|k| top - 4 - 2 * k));
    boundaries.push(0);
    boundaries.push(4000);
    boundaries.sort_unstable();
    boundaries.dedup();
    let spec = step_spec("circular", n, boundaries, |i| ((i * 53) % 257) as i128 - 128);
    let program = Arc::new(compile(&spec, CompileOptions::default()).unwrap());
    let plan = EvalPlan::new(&program);
    let runs: Vec<&Run> = plan.families.iter().flat_map(|f| &f.runs).collect();
    assert_eq!(runs.len(), 1, "{:?}", plan.families);
    assert!(runs[0].a > runs[0].b && runs[0].width > 1400, "{:?}", runs[0]);
    exhaustive_with_masks(program, n, 16, [top - 300, 600]);
}

/// Dense thresholds at a small width: the windowed path (with wrapping windows) on every
/// input under edge masks.
#[test]
fn dense_runs_use_windows_exactly() {
    let n = 14u32;
    let mut boundaries = vec![0u64];
    let mut x = 100u64;
    while x < 3000 {
        boundaries.push(x);
        x += 1 + (x * 7919) % 5;
    }
    // An isolated threshold and a second dense cluster (gaps wider than RUN_GAP).
    boundaries.push(6000);
    for k in 0..200 {
        boundaries.push(11000 + 3 * k);
    }
    let spec = step_spec("dense", n, boundaries, |i| ((i * 37) % 301) as i128 - 150);
    let program = Arc::new(compile(&spec, CompileOptions::default()).unwrap());
    let plan = EvalPlan::new(&program);
    assert!(plan.families.iter().map(|f| f.runs.len()).sum::<usize>() >= 2, "{:?}", plan.families);
    exhaustive_with_masks(program, n, 16, [150, 11100]);
}
