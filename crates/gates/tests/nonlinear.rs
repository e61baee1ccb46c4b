//! SIGMA's nonlinear operators: exhaustive over every input of a small meaningful width under
//! edge masks, random and edge inputs at n = 37 and 50, rounds as SIGMA's CPU build, and the
//! fixed-point functions against f64.

mod common;

use common::{check, edge_masks, rng, words};
use fss::Ring;
use fss::ring::mask;
use fss::rng::{DealerRng, Rng};
use gates::nonlinear::{Activation, Clip, NExp, Reciprocal, ReluResidual, TruncReduceDcf, decode};

/// `count` copies of each value with the edge masks cycled through.
fn with_masks(values: &[u64], bits: u32, per: usize, r: &mut DealerRng) -> (Vec<u64>, Vec<u64>) {
    let em = edge_masks(bits, r);
    let (mut x, mut m) = (vec![], vec![]);
    for (i, &v) in values.iter().enumerate() {
        for j in 0..per {
            x.push(v);
            m.push(em[(i + j) % em.len()]);
        }
    }
    (x, m)
}

#[test]
fn clip_and_dcf_truncation_exhaustive_small() {
    let mut r = rng(20);
    let g = |len| Clip { in_bits: 12, cmp_bits: 9, max_bits: 5, out_bits: 7, len };
    let values: Vec<u64> = (0..256).collect();
    let (x, m) = with_masks(&values, 12, 8, &mut r);
    let out = words(&mut r, x.len(), 7);
    let rep = check(&g(x.len()), &[&x[..]], &[&m[..]], &out, &mut r);
    assert_eq!(rep.stats[0].rounds, 2);
    for shift in 1..8 {
        let values: Vec<u64> = (0..256).collect();
        let (x, m) = with_masks(&values, 8, 8, &mut r);
        let out = words(&mut r, x.len(), 8 - shift);
        let rep = check(&TruncReduceDcf { bits: 8, shift, len: x.len() }, &[&x[..]], &[&m[..]], &out, &mut r);
        assert_eq!(rep.stats[0].rounds, 1);
    }
}

#[test]
fn gelu_silu_every_input_of_a_small_width() {
    let mut r = rng(21);
    for (act, in_bits) in [(Activation::Gelu, 16), (Activation::Silu, 18)] {
        let bits = in_bits + 4;
        let ring = Ring::new(bits).unwrap();
        let half = 1i64 << (in_bits - 1);
        let values: Vec<u64> = (-half..half).map(|v| ring.from_signed(v)).collect();
        let (x, m) = with_masks(&values, bits, 2, &mut r);
        let g = ReluResidual::new(act, bits, in_bits, x.len()).unwrap();
        let out = words(&mut r, x.len(), bits);
        let rep = check(&g, &[&x[..]], &[&m[..]], &out, &mut r);
        assert_eq!(rep.stats[0].rounds, 8, "{act:?}");
    }
}

#[test]
fn gelu_silu_full_width() {
    let mut r = rng(22);
    for bits in [37u32, 50] {
        for (act, mode1) in [(Activation::Gelu, false), (Activation::Gelu, true), (Activation::Silu, false)] {
            let in_bits = if mode1 { bits - 12 } else { bits };
            let ring = Ring::new(bits).unwrap();
            let len = 3000;
            let q = 1i64 << (in_bits - 2);
            let mut x: Vec<u64> = (0..len)
                .map(|i| {
                    let v = if i % 2 == 0 {
                        (r.next_u64() % 40_000) as i64 - 20_000
                    } else {
                        (r.next_u64() as i64) % q
                    };
                    ring.from_signed(v)
                })
                .collect();
            x[0] = ring.from_signed(-(1i64 << (in_bits - 1)));
            x[1] = ring.from_signed((1i64 << (in_bits - 1)) - 1);
            let m = words(&mut r, len, bits);
            let out = words(&mut r, len, bits);
            let g = ReluResidual::new(act, bits, in_bits, len).unwrap();
            check(&g, &[&x[..]], &[&m[..]], &out, &mut r);
        }
    }
}

#[test]
fn activations_against_f64() {
    // Max error over every input in [−8, 8) at scale 12 (and the tails are exact ReLU).
    for (act, bound) in [(Activation::Gelu, 1e-2), (Activation::Silu, 1e-2)] {
        let g = ReluResidual::new(act, 50, 50, 1).unwrap();
        let ring = Ring::new(50).unwrap();
        let worst = (-(8i64 << 12)..(8i64 << 12))
            .map(|v| {
                let y = decode(g.plain(ring.from_signed(v)), 50, 12);
                (y - act.f64(v as f64 / 4096.0)).abs()
            })
            .fold(0.0, f64::max);
        assert!(worst < bound, "{act:?}: max error {worst}");
    }
}

#[test]
fn nexp_exhaustive_near_the_clip_and_full_width() {
    let mut r = rng(23);
    let g = |len| NExp::new(30, 20, 12, len).unwrap();
    let mut values: Vec<u64> = (0..1 << 12).map(|i| i * 17).collect();
    values.extend((65_500..65_600).chain([0, 1, 255, 256, 257, 65_535, 65_536, (1 << 19) - 1]));
    let (x, m) = with_masks(&values, 30, 2, &mut r);
    let out = words(&mut r, x.len(), 30);
    let rep = check(&g(x.len()), &[&x[..]], &[&m[..]], &out, &mut r);
    assert_eq!(rep.stats[0].rounds, 10);
    for bits in [37u32, 50] {
        let len = 2000;
        let x: Vec<u64> = (0..len).map(|_| r.next_u64() % (1 << 20)).collect();
        let (m, out) = (words(&mut r, len, bits), words(&mut r, len, bits));
        check(&NExp::new(bits, bits - 10, 12, len).unwrap(), &[&x[..]], &[&m[..]], &out, &mut r);
    }
    // Against e^{−x}: SIGMA's two floored tables lose a few ulps.
    let e = NExp::new(50, 40, 12, 1).unwrap();
    let worst = (0..1u64 << 17)
        .map(|v| (decode(e.plain(v), 50, 12) - (-(v as f64) / 4096.0).exp()).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-3, "nExp max error {worst}");
}

#[test]
fn reciprocal_exact_and_accurate() {
    let mut r = rng(24);
    let bits = 50;
    let g = |len| Reciprocal::new(bits, 12, len).unwrap();
    let mut values: Vec<u64> = (1u64 << 12..(1u64 << 12) + 3000).collect();
    values.extend((0..2000).map(|_| (1u64 << 12) + r.next_u64() % ((1 << 22) - (1 << 12))));
    values.extend([(1 << 22) - 1, 1 << 12, 1 << 13]);
    let (x, m) = with_masks(&values, bits, 1, &mut r);
    let out = words(&mut r, x.len(), bits);
    let rep = check(&g(x.len()), &[&x[..]], &[&m[..]], &out, &mut r);
    assert_eq!(rep.stats[0].rounds, 3);
    let one = g(1);
    let worst = (1u64 << 12..1u64 << 19)
        .step_by(7)
        .map(|d| (decode(one.plain(d), bits, 12) - 4096.0 / d as f64).abs())
        .fold(0.0, f64::max);
    assert!(worst < 2e-2, "reciprocal max error {worst}");
    let _ = mask(1);
}

/// The one-round shift with slack: every input of the contract `|x| < 2^{n−2}` under the edge
/// masks at n = 8 and 9, every shift, one round, and random contracted inputs at 37 and 50.
#[test]
fn ars_slack_dcf_exhaustive_small_and_random_large() {
    use gates::nonlinear::ArsSlackDcf;
    let mut r = rng(23);
    for bits in [8u32, 9] {
        let ring = Ring::new(bits).unwrap();
        let q = 1i64 << (bits - 2);
        let values: Vec<u64> = (-q..q).map(|v| ring.from_signed(v)).collect();
        for shift in 1..=bits - 2 {
            // The output in the whole ring, and in the narrowest ones a consumer may read.
            for out_bits in [bits, bits - shift, bits - shift + 1] {
                let (x, m) = with_masks(&values, bits, 6, &mut r);
                let out = words(&mut r, x.len(), out_bits);
                let g = ArsSlackDcf { bits, shift, out_bits, len: x.len() };
                let rep = check(&g, &[&x[..]], &[&m[..]], &out, &mut r);
                assert_eq!(rep.stats[0].rounds, 1);
                // The reference is the floor of the signed value, in the output ring.
                for &v in &values {
                    let want = ring.from_signed(ring.to_signed(v).div_euclid(1 << shift)) & mask(g.out_bits);
                    assert_eq!(gates::Gate::reference(&g, &[&[v]])[0], want);
                }
            }
        }
    }
    for (bits, shift) in [(37u32, 7u32), (37, 12), (50, 12), (50, 24)] {
        let ring = Ring::new(bits).unwrap();
        let q = 1i64 << (bits - 2);
        let mut values: Vec<u64> =
            (0..3000).map(|_| ring.from_signed((r.next_u64() % (2 * q as u64)) as i64 - q)).collect();
        values.extend([ring.from_signed(-q), ring.from_signed(q - 1), 0, 1, mask(bits)]);
        let (x, m) = with_masks(&values, bits, 1, &mut r);
        let out = words(&mut r, x.len(), bits);
        check(&ArsSlackDcf { bits, shift, out_bits: bits, len: x.len() }, &[&x[..]], &[&m[..]], &out, &mut r);
        let narrow = ArsSlackDcf { bits, shift, out_bits: bits - shift, len: x.len() };
        let out = words(&mut r, x.len(), bits - shift);
        check(&narrow, &[&x[..]], &[&m[..]], &out, &mut r);
    }
    let bad = |shift, out_bits| ArsSlackDcf { bits: 8, shift, out_bits, len: 1 };
    for g in [bad(7, 8), bad(3, 4), bad(3, 9)] {
        assert!(gates::Gate::keygen(&g, &[&[0]], &[0], &mut r).is_err());
    }
}
