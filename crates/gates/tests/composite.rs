//! Reciprocal square root, sum of squares, softmax and the normalisations: secure == reference
//! bit for bit under random and edge masks at n = 37 and 50, with SIGMA's round counts.

mod common;

use std::sync::Arc;

use common::{check, edge_masks, rng, words};
use fss::Ring;
use fss::rng::{DealerRng, Rng};
use gates::nonlinear::decode;
use gates::norm::{Norm, SumSq};
use gates::rsqrt::Rsqrt;
use gates::softmax::Softmax;

fn signed_words(r: &mut DealerRng, count: usize, bits: u32, bound: i64) -> Vec<u64> {
    let ring = Ring::new(bits).unwrap();
    (0..count).map(|_| ring.from_signed((r.next_u64() % (2 * bound as u64)) as i64 - bound)).collect()
}

#[test]
fn rsqrt_small_width_and_full_width() {
    let mut r = rng(30);
    let bits = 20;
    let em = edge_masks(bits, &mut r);
    let mut x: Vec<u64> = (0..1u64 << 14).collect();
    x.extend((0..4000).map(|_| r.next_u64() % (1 << 19)));
    x.extend([(1 << 19) - 1, 1 << 18, (1 << 18) - 1]);
    let m: Vec<u64> = (0..x.len()).map(|i| em[i % em.len()]).collect();
    let g = Rsqrt::new(bits, 4, 3, x.len()).unwrap();
    let out = words(&mut r, x.len(), bits);
    let rep = check(&g, &[&x[..]], &[&m[..]], &out, &mut r);
    assert_eq!(rep.stats[0].rounds, 5);
    for bits in [37u32, 50] {
        let len = 300;
        let x: Vec<u64> = (0..len).map(|i| (r.next_u64() >> (64 - bits + 1)) >> (i % 30)).collect();
        let (m, out) = (words(&mut r, len, bits), words(&mut r, len, bits));
        check(&Rsqrt::new(bits, 12, 768, len).unwrap(), &[&x[..]], &[&m[..]], &out, &mut r);
    }
    // Relative error of the 7-bit pseudo-float table against 1/sqrt (SIGMA: ~4e-3).
    let g = Rsqrt::new(50, 12, 64, 1).unwrap();
    let worst = (1u64..1 << 20)
        .step_by(97)
        .map(|v| {
            let want = 4096.0 / (v as f64 / 64.0 / 16_777_216.0).sqrt() / 4096.0;
            let got = decode(g.plain(v), 50, 12);
            if want > 0.25 { (got - want).abs() / want } else { 0.0 }
        })
        .fold(0.0, f64::max);
    assert!(worst < 1e-2, "rsqrt relative error {worst}");
}

#[test]
fn sum_of_squares() {
    let mut r = rng(31);
    for bits in [37u32, 50] {
        let g = SumSq { bits, rows: 9, cols: 33 };
        let x = signed_words(&mut r, 9 * 33, bits, 1 << 15);
        let (m, out) = (words(&mut r, x.len(), bits), words(&mut r, 9, bits));
        let rep = check(&g, &[&x[..]], &[&m[..]], &out, &mut r);
        assert_eq!(rep.stats[0].rounds, 1);
    }
}

#[test]
fn softmax_plain_and_causal() {
    let mut r = rng(32);
    for bits in [37u32, 50] {
        for (rows, cols, causal) in [(6, 16, false), (16, 16, true), (2, 128, false), (5, 5, true)] {
            let g = Softmax::sigma(bits, bits - 12 + 1, 12, rows, cols, causal);
            let x = signed_words(&mut r, rows * cols, bits, 10 << 12);
            let (m, out) = (words(&mut r, x.len(), bits), words(&mut r, x.len(), bits));
            let rep = check(&g, &[&x[..]], &[&m[..]], &out, &mut r);
            let levels = (cols as f64).log2().ceil() as u64;
            assert_eq!(rep.stats[0].rounds, 2 * levels + 16, "{rows}x{cols} causal={causal}");
            // Rows sum to about 1.0, masked entries are 0.
            let y = rep.outputs;
            for i in 0..rows {
                let s: f64 = (0..cols).map(|j| decode(y[i * cols + j], bits, 12)).sum();
                assert!((s - 1.0).abs() < 0.05, "row {i} sums to {s}");
                if causal {
                    assert!((i + 1..cols).all(|j| y[i * cols + j] == 0));
                }
            }
        }
    }
}

/// Varied gains around 1.0 (scale 12) and biases of a few units (scale 24), per column.
fn gains(ring: Ring, cols: usize) -> (Arc<[u64]>, Arc<[u64]>) {
    let gamma = (0..cols).map(|j| ring.from_signed(4096 + (j as i64 % 7) * 300 - 900)).collect();
    let beta = (0..cols).map(|j| ring.from_signed(((j as i64 % 5) - 2) << 20)).collect();
    (gamma, beta)
}

#[test]
fn layer_norm_and_rms_norm() {
    let mut r = rng(33);
    let (bits, s) = (50u32, 12u32);
    let ring = Ring::new(bits).unwrap();
    for (rows, cols) in [(4, 64), (3, 48), (2, 1)] {
        let (gamma, beta) = gains(ring, cols);
        let x = signed_words(&mut r, rows * cols, bits, 6 << 12);
        let m = words(&mut r, x.len(), bits);
        let out = words(&mut r, x.len(), bits);
        let ln = Norm::layer_norm(bits, s, rows, cols, gamma.clone(), beta).unwrap();
        let rep = check(&ln, &[&x[..]], &[&m[..]], &out, &mut r);
        assert_eq!(rep.stats[0].rounds, 15);
        if cols > 1 {
            // Normalised rows: mean ≈ 0 (before gain and bias).
            let y: Vec<f64> = rep.outputs.iter().map(|&v| decode(v, bits, s)).collect();
            assert!(y.iter().all(|v| v.abs() < 10.0));
        }
        let rms = Norm::rms_norm(bits, s, rows, cols, gamma).unwrap();
        let rep = check(&rms, &[&x[..]], &[&m[..]], &out, &mut r);
        assert_eq!(rep.stats[0].rounds, 11);
    }
    assert!(Norm::rms_norm(50, 12, 2, 3, vec![0u64; 2].into()).is_err());
}

/// The pre-norm seam `[RMSNorm(h + ⌊y/2^s⌋); h + ⌊y/2^s⌋]`, SIGMA's separate gates and
/// FuseFSS's deferred carry, equal the reference under edge masks on both inputs, over the
/// whole slack range of `y` (with `h` cancelling most of the truncated block output, so the
/// sum stays in the norm's range): one round more than RMSNorm alone against two.
#[test]
fn residual_norms_with_and_without_a_deferred_carry() {
    use gates::Gate;
    use gates::keyio::KeySizes;
    use gates::residual::{DeferredResidualNorm, ResidualNorm};
    let mut r = rng(34);
    for (bits, s) in [(50u32, 12u32), (56, 12), (40, 10)] {
        let ring = Ring::new(bits).unwrap();
        let em = edge_masks(bits, &mut r);
        for (rows, cols) in [(1, 64), (3, 48), (2, 1)] {
            let len = rows * cols;
            let gamma: Arc<[u64]> =
                (0..cols).map(|j| ring.from_signed(4096 + (j as i64 % 7) * 300 - 900)).collect();
            // Block outputs across the slack range, edges included.
            let edge = (1i64 << (bits - 2)) - 1;
            let mut y = signed_words(&mut r, len, bits, edge);
            for (i, v) in [edge, -edge, 0, -1, 1 << s, (1 << s) - 1, -(1 << s)].into_iter().enumerate() {
                y[(i * 5) % len] = ring.from_signed(v);
            }
            let small = signed_words(&mut r, len, bits, 6 << s);
            let h: Vec<u64> = y
                .iter()
                .zip(&small)
                .map(|(&y, &x)| ring.sub(x, ring.from_signed(ring.to_signed(y) >> s)))
                .collect();
            for round in 0..em.len() {
                let my: Vec<u64> = (0..len).map(|i| em[(i + round) % em.len()]).collect();
                let mh: Vec<u64> = (0..len).map(|i| em[(i * 3 + round) % em.len()]).collect();
                let out = words(&mut r, 2 * len, bits);
                let norm = Norm::rms_norm(bits, s, rows, cols, gamma.clone()).unwrap();
                let sigma = ResidualNorm { shift: s, norm: norm.clone() };
                let rep = check(&sigma, &[&h[..], &y[..]], &[&mh[..], &my[..]], &out, &mut r);
                assert_eq!(rep.stats[0].rounds, 13);
                let fused = DeferredResidualNorm::new(s, norm).unwrap();
                let rep = check(&fused, &[&h[..], &y[..]], &[&mh[..], &my[..]], &out, &mut r);
                assert_eq!(rep.stats[0].rounds, 12);
                if round == 0 && rows == 1 {
                    // The deferred carry: a masked bit and words, far below a one-round DCF carry.
                    let (k0, _) = fused.keygen(&[&mh, &my], &out, &mut r).unwrap();
                    let (n0, _) = fused.norm.keygen(&[&mh], &out[..len], &mut r).unwrap();
                    let extra = KeySizes::of(&k0).bits - KeySizes::of(&n0).bits;
                    assert!(extra < 180 * 8 * len as u64, "{extra} bits for {len} elements");
                }
            }
        }
    }
    // LayerNorm has its mean shift first: no deferred carry.
    let ln = Norm::layer_norm(50, 12, 1, 4, vec![0u64; 4].into(), vec![0u64; 4].into()).unwrap();
    assert!(DeferredResidualNorm::new(12, ln).is_err());
}

/// The gain between a normalisation's two truncations with the first's carry deferred
/// (FuseFSS): `⌊(γ_j·⌊z/2^{s1}⌋ + β_j)/2^{s2}⌋` equals the reference for every input in the
/// slack range of small rings (both shifts, `n − s1 = s2` at the edge; a second shift of
/// one chunk and of two; an input ring narrower than the output's), under every edge mask,
/// with negative, zero and positive gains; at n = 37 and 50 on random inputs. Two rounds
/// against the separate truncations' four; the normalisations that use it keep their
/// reference and take two rounds less.
#[test]
fn gain_between_truncations_with_a_deferred_carry() {
    use gates::Gate;
    use gates::gain::DeferredGain;
    use gates::keyio::KeySizes;
    use gates::shift::ArsSlack;
    let mut r = rng(35);
    for (bits, in_bits, s1, s2, gammas, betas) in [
        (
            12u32,
            12u32,
            3u32,
            4u32,
            vec![-7i64, -3, -1, 0, 1, 2, 5, 7],
            vec![-100i64, 0, 37, 100, -1, 1, 64, -64],
        ),
        (10, 10, 5, 5, vec![-15, -2, 0, 1, 9, 15], vec![-100, 3, 0, 100, -7, 55]),
        // A second shift past the low chunk: the carry's `a, e, b` from both tables.
        (14, 14, 4, 10, vec![-15, -6, 0, 1, 9, 15], vec![-200, 3, 0, 250, -7, 55]),
        // The input in a narrower ring than the output (a normalisation's bounded product).
        (16, 14, 4, 9, vec![-60, -6, 0, 1, 33, 60], vec![-255, 3, 0, 255, -7, 55]),
    ] {
        let (ring, input) = (Ring::new(bits).unwrap(), Ring::new(in_bits).unwrap());
        let cols = gammas.len();
        let gamma: Arc<[u64]> = gammas.iter().map(|&g| ring.from_signed(g)).collect();
        let beta: Arc<[u64]> = betas.iter().map(|&b| ring.from_signed(b)).collect();
        let edge = (1i64 << (in_bits - 2)) - 1;
        let z: Vec<u64> =
            (-edge..=edge).flat_map(|v| std::iter::repeat_n(input.from_signed(v), cols)).collect();
        let g =
            DeferredGain { bits, in_bits, s1, s2, len: z.len(), gamma: gamma.clone(), beta: beta.clone() };
        for (k, &m) in edge_masks(in_bits, &mut r).iter().enumerate() {
            let masks: Vec<u64> =
                (0..z.len()).map(|i| if i % 3 == 0 { m } else { input.add(m, i as u64) }).collect();
            let out = words(&mut r, z.len(), bits);
            let rep = check(&g, &[&z[..]], &[&masks[..]], &out, &mut r);
            assert_eq!(rep.stats[0].rounds, 2, "mask {k}");
        }
    }
    for bits in [37u32, 50] {
        let ring = Ring::new(bits).unwrap();
        let cols = 48;
        let gamma: Arc<[u64]> =
            (0..cols).map(|j| ring.from_signed(4096 + (j as i64 % 7) * 600 - 1800)).collect();
        let beta: Arc<[u64]> = (0..cols).map(|j| ring.from_signed(((j as i64 % 5) - 2) << 20)).collect();
        let len = 20 * cols;
        let z = signed_words(&mut r, len, bits, 1 << (bits - 4));
        let g = DeferredGain { bits, in_bits: bits, s1: 12, s2: 12, len, gamma, beta };
        let em = edge_masks(bits, &mut r);
        let masks: Vec<u64> = (0..len).map(|i| em[i % em.len()]).collect();
        let out = words(&mut r, len, bits);
        let rep = check(&g, &[&z[..]], &[&masks[..]], &out, &mut r);
        assert_eq!(rep.stats[0].rounds, 2);
        // The first carry's DPF, the second's two candidate tables and eight words per
        // element: below SIGMA's two separate truncations (a DPF each).
        let (k0, _) = g.keygen(&[&masks], &out, &mut r).unwrap();
        let ars = ArsSlack { bits, shift: 12, out_bits: bits, len };
        let (a0, _) = ars.keygen(&[&masks], &out, &mut r).unwrap();
        let (gain, two) =
            (KeySizes::of(&k0).bits as f64 / len as f64, 2.0 * KeySizes::of(&a0).bits as f64 / len as f64);
        eprintln!("n = {bits}: deferred gain {gain} bits per element, two truncations {two}");
        assert!(gain < two, "{gain} against {two} bits per element");
    }
    // `n − s1 < s2`: the second carry would depend on the first truncation's wrap.
    let g = DeferredGain {
        bits: 20,
        in_bits: 20,
        s1: 12,
        s2: 9,
        len: 1,
        gamma: vec![1].into(),
        beta: vec![0].into(),
    };
    assert!(g.check().is_err());
    // The normalisations with the deferral: the same reference, one round less.
    for (bits, s) in [(50u32, 12u32), (37, 12)] {
        let ring = Ring::new(bits).unwrap();
        for (rows, cols) in [(4, 64), (3, 48), (2, 1)] {
            let (gamma, beta) = gains(ring, cols);
            let x = signed_words(&mut r, rows * cols, bits, 6 << 12);
            let em = edge_masks(bits, &mut r);
            let ln = Norm::layer_norm(bits, s, rows, cols, gamma.clone(), beta).unwrap();
            let rms = Norm::rms_norm(bits, s, rows, cols, gamma).unwrap().with_deferred_gain(true).unwrap();
            for round in 0..em.len() {
                let m: Vec<u64> = (0..x.len()).map(|i| em[(i + round) % em.len()]).collect();
                let out = words(&mut r, x.len(), bits);
                let deferred = ln.clone().with_deferred_gain(true).unwrap();
                let rep = check(&deferred, &[&x[..]], &[&m[..]], &out, &mut r);
                assert_eq!(rep.stats[0].rounds, 13);
                assert_eq!(rep.outputs, ln.reference(&[&x]));
                let rep = check(&rms, &[&x[..]], &[&m[..]], &out, &mut r);
                assert_eq!(rep.stats[0].rounds, 9);
            }
        }
    }
}

/// LayerNorm's mean and the centred rows' sums of squares in one round (FuseFSS): the
/// same reference as the separate mean shift and sum of squares, under edge masks, with
/// power-of-two rows, rows of 48 (a factor before the shift) and one-column rows (a
/// doubled sum), a row whose sum is near the mean's slack bound, and with the deferred gain
/// after it. SIGMA's LayerNorm (a 4-round mean shift, then the sum of squares) takes 15
/// rounds; with the one round 11, and 9 with the deferred gain too.
#[test]
fn layer_norm_with_its_mean_and_sum_of_squares_in_one_round() {
    use gates::Gate;
    let mut r = rng(36);
    for (bits, s) in [(50u32, 12u32), (37, 12)] {
        let ring = Ring::new(bits).unwrap();
        for (rows, cols) in [(4, 64), (3, 48), (2, 1), (1, 128)] {
            let (gamma, beta) = gains(ring, cols);
            let mut x = signed_words(&mut r, rows * cols, bits, 6 << 12);
            // Row 0 near the slack bound of its scaled sum (`2^{n−2}`), and of its sum of
            // squares (`2^{n−1}`), one sign throughout.
            let factor = if cols.is_power_of_two() { 1 } else { (1i64 << s) / cols as i64 };
            let by_sum = ((1i64 << (bits - 2)) - 1) / (cols as i64 * factor);
            let by_squares = (((1i64 << (bits - 1)) / cols as i64) as f64).sqrt() as i64;
            let near = by_sum.min(by_squares) - 4;
            (0..cols).for_each(|j| x[j] = ring.from_signed(if j % 2 == 0 { near } else { near - 3 }));
            let em = edge_masks(bits, &mut r);
            let ln = Norm::layer_norm(bits, s, rows, cols, gamma, beta).unwrap();
            let want = ln.reference(&[&x]);
            for round in 0..em.len() {
                let m: Vec<u64> = (0..x.len()).map(|i| em[(i * 7 + round) % em.len()]).collect();
                let out = words(&mut r, x.len(), bits);
                let centred = ln.clone().with_centred_sum_sq(true);
                let rep = check(&centred, &[&x[..]], &[&m[..]], &out, &mut r);
                assert_eq!(rep.stats[0].rounds, 11);
                assert_eq!(rep.outputs, want);
                let both = centred.with_deferred_gain(true).unwrap();
                let rep = check(&both, &[&x[..]], &[&m[..]], &out, &mut r);
                assert_eq!(rep.stats[0].rounds, 9);
            }
        }
    }
    // RMSNorm has no mean: the option changes nothing.
    let rms = Norm::rms_norm(50, 12, 2, 8, vec![4096u64; 8].into()).unwrap();
    let x = [5u64; 16];
    assert_eq!(rms.clone().with_centred_sum_sq(true).reference(&[&x]), rms.reference(&[&x]));
}
