//! The compiled words, the polynomial shift and the alignment runs.

use super::{CompileOptions, Src, alignment_runs, compile, shift_poly};
use crate::sym::valuation;

/// After compilation, an arithmetic form reads at most one dealer word per public
/// monomial, and every word a form reads exists and is as wide as its uses need.
#[test]
fn one_dealer_word_per_public_monomial() {
    let specs = [
        crate::library::gelu_rows(25, 37, 12, crate::library::GeluForm::Erf, 7),
        crate::library::nexp_rows_nonneg(26, 37, 12, 5),
    ];
    for spec in &specs {
        let p = compile(spec, CompileOptions { split: Some(true), ..CompileOptions::default() }).unwrap();
        let mut need = vec![0u32; p.words.len()];
        for e in &p.exchanges {
            for f in e.forms() {
                let mut seen = std::collections::HashSet::new();
                for t in &f.terms {
                    let Src::Word(id) = t.src else { continue };
                    let id = id as usize;
                    assert!(id < p.words.len(), "{}: word {id} missing", spec.name);
                    need[id] = need[id].max(f.bits - valuation(t.coef, f.bits));
                    if f.bits > 1 && p.words[id].out_mask.is_none() && t.pmono.is_some() {
                        assert!(seen.insert(t.pmono), "{}: two words on one monomial", spec.name);
                    }
                }
            }
        }
        for (w, &n) in p.words.iter().zip(&need) {
            assert!(n > 0, "{}: a word no form reads", spec.name);
            assert!(w.width >= n, "{}: word narrower than its uses", spec.name);
        }
    }
}

#[test]
fn shifted_polynomials() {
    // (X + 3)^2 = X^2 + 6X + 9
    assert_eq!(shift_poly(&[0, 0, 1], 3, 16), vec![9, 6, 1]);
    // 2 + 5X at X − 1: 5X − 3
    assert_eq!(shift_poly(&[2, 5], u64::MAX, 8), vec![253, 5]);
}

#[test]
fn alignment_runs_cover_the_boundaries_in_order() {
    // Octaves of 4 cells above 16, uniform cells of 4 below, 10-bit input.
    let mut starts: Vec<u64> = (0..4).map(|j| j * 4).collect();
    for e in 4..9 {
        starts.extend((0..4).map(|j| (1u64 << e) + (j << (e - 2))));
    }
    starts.push(512);
    for w in [2u64, 8, 16, 64, 1 << 12] {
        let runs = alignment_runs(10, &starts, w);
        assert_eq!(runs.first().map(|r| r.1.start), Some(0));
        assert_eq!(runs.last().map(|r| r.1.end), Some(starts.len()));
        for (a, b) in runs.iter().zip(runs.iter().skip(1)) {
            assert_eq!(a.1.end, b.1.start);
        }
        for (g, r) in &runs {
            let s = &starts[r.clone()];
            assert!(s.iter().all(|&b| b % (1 << g) == 0), "w {w}: {s:?} at {g}");
            assert!((s[s.len() - 1] - s[0]) >> g < w, "w {w}: {s:?} at {g}");
            assert!(*g < 10);
        }
    }
    // The whole grid in one run at its finest alignment; one run per octave at w = 8.
    assert_eq!(alignment_runs(10, &starts, 1 << 12), vec![(2, 0..starts.len())]);
    assert_eq!(alignment_runs(10, &starts, 8).len(), 5);
}
