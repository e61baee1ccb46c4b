//! Shared test helpers: edge masks, exhaustive runs, random full-width runs.
#![allow(dead_code)]

pub mod random;

use std::sync::Arc;

use compiler::program::{CmpBackend, CompileOptions, LookupBackend};
use compiler::spec::OperatorSpec;
use compiler::{CompiledGate, compile};
use fss::ring::mask;
use fss::rng::{DealerRng, Rng, SeedableRng};
use gates::Gate;
use gates::harness::{Report, run_with_masks};

pub fn rng(seed: u64) -> DealerRng {
    DealerRng::seed_from_u64(seed)
}

/// 0, 1, N−1, N/2, N/2−1 and three random masks.
pub fn edge_masks(bits: u32, r: &mut DealerRng) -> Vec<u64> {
    let n = mask(bits);
    let half = if bits == 64 { 1u64 << 63 } else { (n >> 1) + 1 };
    let mut v = vec![0, 1 & n, n, half & n, (half - 1) & n];
    v.extend((0..3).map(|_| r.next_u64() & n));
    v
}

/// Run `spec` on inputs `x` under masks `m`; panic with the first mismatch.
pub fn run(spec: &OperatorSpec, options: CompileOptions, x: &[u64], m: &[u64], r: &mut DealerRng) -> Report {
    let program = Arc::new(compile(spec, options).unwrap_or_else(|e| panic!("{}: {e}", spec.name)));
    let gate = CompiledGate::new(program.clone(), x.len());
    let out: Vec<u64> = gate
        .output_wires()
        .into_iter()
        .flat_map(|(b, l)| (0..l).map(|_| r.next_u64() & mask(b)).collect::<Vec<_>>())
        .collect();
    let rep = run_with_masks(&gate, &[x], &[m], &out, r).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
    if let Some((i, got, want)) = rep.first_mismatch() {
        let e = i % x.len();
        panic!(
            "{} {:?}: output {} element x = {:#x} mask {:#x}: secure {got:#x} != reference {want:#x}",
            spec.name,
            options,
            i / x.len(),
            x[e],
            m[e]
        );
    }
    assert_eq!(rep.stats[0].rounds as u32, program.cost().rounds, "{}", spec.name);
    assert_eq!(rep.key_bits[0], rep.key_bits[1]);
    assert_eq!(rep.key_bits[0], program.cost().key_bits * x.len() as u64, "{} {options:?}", spec.name);
    rep
}

/// Every input of the domain (every one a slack spec is meant for) under every edge mask.
pub fn exhaustive(spec: &OperatorSpec, options: CompileOptions, seed: u64) {
    let mut r = rng(seed);
    let n = spec.in_bits;
    let xs: Vec<u64> = (0..1u64 << n).filter(|&x| spec.slack_holds(x)).collect();
    let masks = edge_masks(n, &mut r);
    let x: Vec<u64> = masks.iter().flat_map(|_| xs.iter().copied()).collect();
    let m: Vec<u64> = masks.iter().flat_map(|&m| std::iter::repeat_n(m, xs.len())).collect();
    run(spec, options, &x, &m, &mut r);
}

/// Random inputs and masks plus the edges: every boundary ±1 and `N − r` ±1 under the edge
/// masks, and 0, ±1, ±N/2.
pub fn full_width(spec: &OperatorSpec, options: CompileOptions, random: usize, seed: u64) {
    let mut r = rng(seed);
    let n = spec.in_bits;
    let nm = mask(n);
    let masks = edge_masks(n, &mut r);
    let (mut x, mut m) = (vec![], vec![]);
    // (A slack spec's inputs keep to its slack: the others are skipped.)
    let mut push = |v: u64, k: u64| {
        if spec.slack_holds(v) {
            x.push(v & nm);
            m.push(k & nm);
        }
    };
    let half = 1u64 << (n - 1);
    let picks: Vec<u64> =
        spec.boundaries.iter().step_by((spec.boundaries.len() / 64).max(1)).copied().collect();
    for &k in &masks {
        for &b in &picks {
            for d in [0u64, 1, nm] {
                push(b.wrapping_add(d), k);
            }
        }
        for v in [
            0,
            1,
            nm,
            half,
            half - 1,
            k.wrapping_neg(),
            k.wrapping_neg().wrapping_add(1),
            k.wrapping_neg().wrapping_sub(1),
        ] {
            push(v, k);
        }
    }
    for _ in 0..random {
        // Half of the inputs near the interesting region (small magnitudes), half anywhere.
        let v = if r.next_u64() & 1 == 0 {
            r.next_u64()
        } else {
            (r.next_u64() % (1 << 20)).wrapping_sub(1 << 19)
        };
        push(v, r.next_u64());
    }
    run(spec, options, &x, &m, &mut r);
}

/// The options worth testing for `spec`: every lookup backend that compiles, each with both
/// comparison keyings and both full-width modes.
pub fn all_options(spec: &OperatorSpec) -> Vec<CompileOptions> {
    let mut out = vec![];
    for cmp in [CmpBackend::OneKey, CmpBackend::PerThreshold] {
        for lookup in [
            LookupBackend::StepBits,
            LookupBackend::IndexLut,
            LookupBackend::Dcf,
            LookupBackend::ReducedView { shift: compiler::program::reduced_view_shift(spec).unwrap_or(1) },
        ] {
            // (Runs of a grouped split only change step functions: step bits.)
            let mut modes = vec![(false, None), (true, None)];
            if lookup == LookupBackend::StepBits {
                modes.push((true, Some(2)));
            }
            for (split, grouped) in modes {
                let options = CompileOptions {
                    cmp,
                    lookup: Some(lookup),
                    split: Some(split),
                    grouped,
                    ..CompileOptions::default()
                };
                if compile(spec, options).is_ok() {
                    out.push(options);
                }
            }
        }
    }
    out
}
