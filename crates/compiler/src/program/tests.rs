//! The compiled words, the polynomial shift, the alignment runs and the half rows.

use super::prep::{MAX_HALF_ROWS, half_rows, rows_join};
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

/// A step function with steps at odd multiples of `2^{f−1}` summing to zero is its aligned
/// part plus weighted rows of the input shifted by half a row, on every input; steps that do
/// not sum to zero, a step off the half grid, or a span past [`MAX_HALF_ROWS`] are refused.
#[test]
fn half_rows_decompose_step_functions() {
    let (n, f, l) = (9u32, 3u32, 12u32);
    let d = 1u64 << (f - 1);
    let value = |starts: &[u64], vals: &[u64], u: u64| vals[starts.iter().rposition(|&b| b <= u).unwrap()];
    // Rows of 8 with values, plus steps at odd multiples of 4.
    let cases: [(&[u64], &[i64], bool); 5] = [
        (&[100, 108], &[5, -5], true),
        (&[100, 124], &[-7, 7], true),
        (&[44, 52, 76], &[3, 4, -7], true),
        (&[100], &[5], false),
        (&[100, 100 + 8 * (MAX_HALF_ROWS + 1)], &[1, -1], false),
    ];
    for (half, jumps, ok) in cases {
        let mut starts: Vec<u64> = (0..1u64 << (n - f)).map(|k| k << f).collect();
        let mut vals: Vec<u64> = starts.iter().map(|&b| (b.wrapping_mul(0x9e37) >> 3) & 0xff).collect();
        for (&p, &j) in half.iter().zip(jumps) {
            assert_eq!(p % (2 * d), d);
            let k = starts.partition_point(|&b| b < p);
            starts.insert(k, p);
            vals.insert(k, vals[k - 1]);
            for v in &mut vals[k..] {
                *v = v.wrapping_add(j as u64) & fss::ring::mask(l);
            }
        }
        // (The steps are added to every later interval, so a bump returns to the rows.)
        let h = half_rows(n, f, &starts, &vals, l);
        assert_eq!(h.is_some(), ok, "{half:?}");
        let Some(h) = h else { continue };
        assert!(h.starts.iter().all(|&b| b % (1 << f) == 0));
        for u in 0..1u64 << n {
            let k = (u + d) >> f;
            let shifted = match k.checked_sub(h.first_row) {
                Some(i) if (i as usize) < h.weights.len() => h.weights[i as usize],
                _ => 0,
            };
            let sum = value(&h.starts, &h.vals, u).wrapping_add(shifted) & fss::ring::mask(l);
            assert_eq!(sum, value(&starts, &vals, u), "{half:?} at {u}");
        }
    }
    // A step between the half rows' grid points is no half row.
    assert!(half_rows(n, f, &[0, 8, 13], &[1, 2, 3], l).is_none());
}

/// Rows of an interpolated table join up when each interval starts where the row before it
/// ends (cyclically, unless slack) and an interval of several rows is flat.
#[test]
fn rows_join_up() {
    let (n, f, l) = (6u32, 3u32, 8u32);
    let m = (1u64 << l) - 1;
    // Rows 0..8 of 8: values 100, 100 − 8·2, …; the last slope closes the loop.
    let s: Vec<u64> = vec![2, 1, 0, 0, 3, 1, 0];
    let mut v = vec![100u64];
    for &x in &s {
        v.push(v.last().unwrap().wrapping_sub(8 * x) & m);
    }
    let mut s = s;
    s.push((s.iter().sum::<u64>()).wrapping_neg() & m);
    let starts: Vec<u64> = (0..8).map(|k| k * 8).collect();
    assert!(rows_join(&starts, &v, &s, n, f, l, false));
    // One value off breaks the joins into and out of its row; slack reads rows up to
    // 2^{n−1} = 32 only (starts 0..=32, rows 0..=4).
    for k in 0..8 {
        let mut w = v.clone();
        w[k] = (w[k] + 1) & m;
        assert!(!rows_join(&starts, &w, &s, n, f, l, false), "row {k}");
        assert_eq!(rows_join(&starts, &w, &s, n, f, l, true), k > 4, "row {k} with slack");
    }
    // The last slope closes the loop: slack never borrows from row 0.
    let mut open = s.clone();
    open[7] = (open[7] + 1) & m;
    assert!(!rows_join(&starts, &v, &open, n, f, l, false));
    assert!(rows_join(&starts, &v, &open, n, f, l, true));
    // Rows 2 and 3 are flat: one interval of two rows joins, and must stay flat.
    let merged: Vec<u64> = starts.iter().copied().filter(|&b| b != 24).collect();
    let drop3 =
        |x: &[u64]| -> Vec<u64> { x.iter().enumerate().filter(|&(k, _)| k != 3).map(|(_, &y)| y).collect() };
    assert!(rows_join(&merged, &drop3(&v), &drop3(&s), n, f, l, false));
    let mut s2 = drop3(&s);
    s2[2] = 1;
    assert!(!rows_join(&merged, &drop3(&v), &s2, n, f, l, false));
    // A start off the rows never joins.
    let mut off = starts.clone();
    off[3] = 25;
    assert!(!rows_join(&off, &v, &s, n, f, l, false));
}
