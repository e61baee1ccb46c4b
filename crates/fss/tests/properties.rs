//! Property tests: `eval₀(x) + eval₁(x) = f(x)` for random shapes, points and payloads; and
//! a statistical check that one party's key does not depend on the secret point.

use fss::bitdpf::{self, BitDpfParams};
use fss::codec::BitWriter;
use fss::dcf::{self, DcfParams};
use fss::dpf::{self, DpfParams};
use fss::ring::mask;
use fss::rng::{DealerRng, SeedableRng};
use fss::{AddShare, XorBit};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn dpf_shares_sum_to_the_point_function(
        n in 1u32..=64, ell in 1u32..=64, seed: u64, a: u64, b: u64, x: u64, hit: bool,
    ) {
        let mut r = DealerRng::seed_from_u64(seed);
        let (alpha, beta) = (a & mask(n), b & mask(ell));
        let x = if hit { alpha } else { x & mask(n) };
        let (k0, k1) = dpf::keygen(DpfParams::new(n, ell).unwrap(), &[alpha], &[beta], &mut r).unwrap();
        let y = AddShare::reconstruct(k0.eval_one(0, x).unwrap(), k1.eval_one(0, x).unwrap(), ell);
        prop_assert_eq!(y, if x == alpha { beta } else { 0 });
    }

    #[test]
    fn bitdpf_shares_xor_to_the_comparisons(n in 1u32..=64, seed: u64, a: u64, y: u64, near in 0u64..4) {
        let mut r = DealerRng::seed_from_u64(seed);
        let alpha = a & mask(n);
        let y = if near < 3 { alpha.wrapping_add(near).wrapping_sub(1) & mask(n) } else { y & mask(n) };
        let (k0, k1) = bitdpf::keygen(BitDpfParams::new(n).unwrap(), &[alpha], &mut r).unwrap();
        let (s0, s1) = (k0.eval_one(0, y).unwrap(), k1.eval_one(0, y).unwrap());
        prop_assert_eq!(XorBit::reconstruct(s0.lt, s1.lt), y < alpha);
        prop_assert_eq!(XorBit::reconstruct(s0.eq, s1.eq), y == alpha);
    }

    #[test]
    fn dcf_shares_sum_to_the_comparison_function(
        n in 1u32..=64, ell in 1u32..=64, kw in 1u32..=6, seed: u64, a: u64, x: u64,
        beta in proptest::collection::vec(any::<u64>(), 6),
    ) {
        let mut r = DealerRng::seed_from_u64(seed);
        let alpha = a & mask(n);
        let x = x & mask(n);
        let beta: Vec<u64> = beta[..kw as usize].iter().map(|b| b & mask(ell)).collect();
        let p = DcfParams::new(n, ell, kw).unwrap();
        let (k0, k1) = dcf::keygen(p, &[alpha], &beta, &mut r).unwrap();
        let (y0, y1) = (k0.eval_one(0, x).unwrap(), k1.eval_one(0, x).unwrap());
        let y: Vec<u64> = y0.iter().zip(&y1).map(|(&u, &v)| AddShare::reconstruct(u, v, ell)).collect();
        let want = if x < alpha { beta } else { vec![0; kw as usize] };
        prop_assert_eq!(y, want);
    }
}

/// Fraction of one-bits at every bit position of party 0's key material, over many keys.
fn bit_frequencies(materials: &[Vec<u8>]) -> Vec<f64> {
    let bits = materials[0].len() * 8;
    let mut ones = vec![0u32; bits];
    for m in materials {
        for (i, o) in ones.iter_mut().enumerate() {
            *o += ((m[i / 8] >> (i % 8)) & 1) as u32;
        }
    }
    ones.iter().map(|&o| o as f64 / materials.len() as f64).collect()
}

/// One party's key must look the same whatever the point: every material bit (seeds,
/// correction words, control-bit corrections, payload corrections) is a fair coin for
/// α = 0, for α = 2^n − 1 and for random α, and the root's control bit is 0.
#[test]
fn one_party_key_does_not_depend_on_alpha() {
    const KEYS: usize = 4000;
    // A fair coin over 4000 samples has σ ≈ 0.0079; 6σ ≈ 0.047.
    const TOL: f64 = 0.05;
    let n = 20;
    let mut r = DealerRng::seed_from_u64(99);
    let alpha_sets: [Vec<u64>; 3] = [
        vec![0; KEYS],
        vec![mask(n); KEYS],
        (0..KEYS as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & mask(n)).collect(),
    ];
    let mut profiles = vec![];
    for alphas in &alpha_sets {
        // Each key's material on its own (a batch of one).
        let material = |write: &dyn Fn(&mut BitWriter)| {
            let mut w = BitWriter::new();
            write(&mut w);
            w.finish()
        };
        let betas = vec![0xdead_beef; KEYS];
        let (d0, _) = dcf::keygen(DcfParams::new(n, 64, 1).unwrap(), alphas, &betas, &mut r).unwrap();
        let (p0, _) = dpf::keygen(DpfParams::new(n, 64).unwrap(), alphas, &betas, &mut r).unwrap();
        let (e0, _) = bitdpf::keygen(BitDpfParams::new(n).unwrap(), alphas, &mut r).unwrap();
        let m_dcf: Vec<Vec<u8>> =
            (0..KEYS).map(|i| material(&|w| d0.slice(i, i + 1).write_material(w))).collect();
        let m_dpf: Vec<Vec<u8>> =
            (0..KEYS).map(|i| material(&|w| p0.slice(i, i + 1).write_material(w))).collect();
        let m_et: Vec<Vec<u8>> =
            (0..KEYS).map(|i| material(&|w| e0.slice(i, i + 1).write_material(w))).collect();
        profiles.push([bit_frequencies(&m_dcf), bit_frequencies(&m_dpf), bit_frequencies(&m_et)]);
    }
    for (set, prof) in profiles.iter().enumerate() {
        for (kind, freqs) in prof.iter().enumerate() {
            for (bit, &f) in freqs.iter().enumerate() {
                // Bit 0 of the root and of every seed correction word is the control bit,
                // always 0 by construction; padding bits at the end are 0 too. (The root,
                // then the CWs' low halves, one 64-bit word per level, then the high ones.)
                let levels = if kind == 2 { n as usize - 8 } else { n as usize };
                let seed_lsb = bit == 0 || (128..128 + 64 * levels).contains(&bit) && bit % 64 == 0;
                let padding = bit >= material_bits(kind, n);
                if seed_lsb || padding {
                    assert_eq!(f, 0.0, "set {set} kind {kind} bit {bit}");
                } else {
                    assert!((f - 0.5).abs() < TOL, "set {set} kind {kind} bit {bit}: {f}");
                }
            }
        }
    }
}

fn material_bits(kind: usize, n: u32) -> usize {
    match kind {
        0 => DcfParams::new(n, 64, 1).unwrap().key_bits() as usize,
        1 => DpfParams::new(n, 64).unwrap().key_bits() as usize,
        _ => BitDpfParams::new(n).unwrap().key_bits() as usize,
    }
}
