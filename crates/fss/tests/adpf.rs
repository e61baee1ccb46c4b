//! The arithmetic DPF with early termination and vector payloads: exhaustive correctness on
//! small domains, random keys on the lookup-table domains (14–16 bits), the key size, the
//! encoding and its malformed inputs, and a statistical check that one party's key does not
//! depend on the secret point.

use fss::adpf::{self, AdpfKeys, AdpfParams};
use fss::codec::{BitWriter, ENVELOPE_OVERHEAD};
use fss::dpf::{self, DpfKeys, DpfParams};
use fss::ring::mask;
use fss::rng::{DealerRng, Rng, SeedableRng};
use fss::{DecodeError, FssError, Party};
use proptest::prelude::*;

fn rng(seed: u64) -> DealerRng {
    DealerRng::seed_from_u64(seed)
}

fn add(a: &[u64], b: &[u64], bits: u32) -> Vec<u64> {
    a.iter().zip(b).map(|(&x, &y)| x.wrapping_add(y) & mask(bits)).collect()
}

/// The truth: key `g`'s table, `2^d·K` words, `β_g` at `α_g` and 0 elsewhere.
fn truth(p: AdpfParams, alpha: u64, beta: &[u64]) -> Vec<u64> {
    let kw = p.payload_words() as usize;
    let mut t = vec![0u64; kw << p.domain_bits()];
    t[alpha as usize * kw..(alpha as usize + 1) * kw].copy_from_slice(beta);
    t
}

fn random_betas(r: &mut DealerRng, count: usize, ell: u32) -> Vec<u64> {
    (0..count).map(|_| r.next_u64() & mask(ell)).collect()
}

/// Every `d ≤ 8`, every `α`, `e ≤ 3`, `K ≤ 3` and four output widths: the full domains of
/// both parties reconstruct `β` at `α` and 0 elsewhere; point evaluation (indexed, per key
/// and one at a time) agrees with the full domain.
#[test]
fn exhaustive_small_domains() {
    let mut r = rng(1);
    for d in 1..=8u32 {
        for e in (0..=3).filter(|&e| e <= d) {
            for kw in 1..=3u32 {
                for ell in [1, 13, 50, 64] {
                    // All (e, K, ℓ) shapes up to d = 6; one output width per shape above.
                    if d > 6 && ell != [1, 13, 50, 64][((e + kw) % 4) as usize] {
                        continue;
                    }
                    check_all_points(AdpfParams::new(d, ell, kw, e).unwrap(), &mut r);
                }
            }
        }
    }
}

fn check_all_points(p: AdpfParams, r: &mut DealerRng) {
    let (d, ell, kw) = (p.domain_bits(), p.out_bits(), p.payload_words() as usize);
    let ctx = format!("{p:?}");
    let alphas: Vec<u64> = (0..1u64 << d).collect();
    let betas = random_betas(r, alphas.len() * kw, ell);
    let (k0, k1) = adpf::keygen(p, &alphas, &betas, r).unwrap();
    let (f0, f1) = (k0.full_domain(0..alphas.len()).unwrap(), k1.full_domain(0..alphas.len()).unwrap());
    let per_key = kw << d;
    let y = add(&f0, &f1, ell);
    for (g, &a) in alphas.iter().enumerate() {
        let want = truth(p, a, &betas[g * kw..(g + 1) * kw]);
        assert_eq!(&y[g * per_key..(g + 1) * per_key], &want[..], "{ctx} alpha={a}");
    }
    assert!(f0.iter().chain(&f1).all(|&w| w & !mask(ell) == 0), "{ctx}: shares not reduced");
    // Indexed point evaluation of every key at every point (all of them up to d = 6, every
    // 7th key above).
    let step = if d <= 6 { 1 } else { 7 };
    let (mut idx, mut xs) = (vec![], vec![]);
    for g in (0..alphas.len()).step_by(step) {
        for x in 0..1u64 << d {
            idx.push(g as u32);
            xs.push(x);
        }
    }
    for (k, f) in [(&k0, &f0), (&k1, &f1)] {
        let mut out = vec![0u64; xs.len() * kw];
        k.eval_indexed(&idx, &xs, &mut out).unwrap();
        for (lane, (&g, &x)) in idx.iter().zip(&xs).enumerate() {
            let at = g as usize * per_key + x as usize * kw;
            assert_eq!(&out[lane * kw..(lane + 1) * kw], &f[at..at + kw], "{ctx} g={g} x={x}");
        }
        // One point per key (at α and at a neighbour), and the one-point form.
        for shift in [0, 1] {
            let pts: Vec<u64> = alphas.iter().map(|&a| (a ^ shift) & mask(d)).collect();
            let mut out = vec![0u64; pts.len() * kw];
            k.eval(&pts, &mut out).unwrap();
            for (g, &x) in pts.iter().enumerate() {
                let at = g * per_key + x as usize * kw;
                assert_eq!(&out[g * kw..(g + 1) * kw], &f[at..at + kw], "{ctx} eval g={g}");
            }
        }
        let g = alphas.len() / 2;
        let x = alphas[g];
        let at = g * per_key + x as usize * kw;
        assert_eq!(k.eval_one(g, x).unwrap(), &f[at..at + kw], "{ctx} eval_one");
    }
    // A sub-range expands to the same words.
    let mid = alphas.len() / 2;
    assert_eq!(k0.full_domain(mid..alphas.len()).unwrap(), &f0[mid * per_key..], "{ctx} sub-range");
}

/// The lookup-table domains: random `α`, `β` at `d = 14, 15, 16` with several `e`, `K`, `ℓ`;
/// the batch's full domain reconstructs, and point evaluations agree with it.
#[test]
fn random_keys_on_lookup_domains() {
    let mut r = rng(2);
    for (d, e, kw, ell) in [(14, 2, 1, 50), (15, 2, 1, 50), (16, 0, 1, 64), (14, 3, 2, 37), (15, 6, 3, 13)] {
        let p = AdpfParams::new(d, ell, kw, e).unwrap();
        let kw = kw as usize;
        let mut alphas: Vec<u64> = (0..5).map(|_| r.next_u64() & mask(d)).collect();
        alphas.extend([0, mask(d)]);
        let betas = random_betas(&mut r, alphas.len() * kw, ell);
        let (k0, k1) = adpf::keygen(p, &alphas, &betas, &mut r).unwrap();
        let (f0, f1) = (k0.full_domain(0..alphas.len()).unwrap(), k1.full_domain(0..alphas.len()).unwrap());
        let y = add(&f0, &f1, ell);
        let per_key = kw << d;
        for (g, &a) in alphas.iter().enumerate() {
            let want = truth(p, a, &betas[g * kw..(g + 1) * kw]);
            assert!(y[g * per_key..(g + 1) * per_key] == want[..], "d={d} e={e} K={kw} g={g}");
        }
        for (k, f) in [(&k0, &f0), (&k1, &f1)] {
            let g = alphas.len() - 1;
            for x in [0, 1, alphas[g], alphas[g] ^ 1, r.next_u64() & mask(d), mask(d)] {
                let at = g * per_key + x as usize * kw;
                assert_eq!(k.eval_one(g, x).unwrap(), &f[at..at + kw], "d={d} x={x}");
            }
        }
    }
}

/// Many keys split into chunks on the rayon pool give the same words as each key alone, and
/// a caller's buffer receives the same words as a fresh one.
#[test]
fn chunked_expansion_matches_single_keys() {
    let mut r = rng(3);
    for (d, e) in [(12, 0), (9, 3), (4, 2)] {
        let p = AdpfParams::new(d, 64, 2, e).unwrap();
        let keys = (3 << 16 >> p.levels()) + 5;
        let alphas: Vec<u64> = (0..keys).map(|_| r.next_u64() & mask(d)).collect();
        let betas = random_betas(&mut r, 2 * keys, 64);
        let (k0, _) = adpf::keygen(p, &alphas, &betas, &mut r).unwrap();
        let all = k0.full_domain(0..keys).unwrap();
        let per_key = 2 << d;
        for g in [0, 1, keys / 2, keys - 1] {
            assert_eq!(k0.full_domain(g..g + 1).unwrap(), &all[g * per_key..(g + 1) * per_key]);
            assert_eq!(k0.slice(g, g + 1).full_domain(0..1).unwrap(), &all[g * per_key..(g + 1) * per_key]);
        }
        let mut buf = vec![u64::MAX; all.len()];
        k0.full_domain_into(0..keys, &mut buf).unwrap();
        assert!(buf == all, "d={d}");
    }
}

#[test]
fn key_size_is_the_formula() {
    let mut r = rng(4);
    for (d, ell, kw, e) in
        [(1, 1, 1, 0), (1, 64, 8, 1), (8, 13, 3, 3), (14, 50, 1, 2), (15, 50, 1, 2), (24, 64, 8, 6)]
    {
        let p = AdpfParams::new(d, ell, kw, e).unwrap();
        let bits = 128 + (d - e) as u64 * 130 + (kw as u64) * (1 << e) * ell as u64;
        assert_eq!(p.key_bits(), bits);
        assert_eq!(p.key_bytes(), bits.div_ceil(8) as usize);
        let leaves = 1u64 << (d - e);
        assert_eq!(p.aes_full_domain(), 2 * leaves - 2 + leaves * ((kw as u64) << e).div_ceil(2));
        let alphas = [0, mask(d), 1 & mask(d)];
        let (k0, k1) = adpf::keygen(p, &alphas, &vec![1; 3 * kw as usize], &mut r).unwrap();
        for k in [&k0, &k1] {
            assert_eq!(k.key_bytes(), p.key_bytes());
            let mut w = BitWriter::new();
            k.write_material(&mut w);
            assert_eq!(w.bit_len(), 3 * bits);
            assert_eq!(k.encode().len(), (3 * bits).div_ceil(8) as usize + ENVELOPE_OVERHEAD);
        }
    }
    // The lookup shapes of the benchmark: 236 and 253 bytes per key.
    assert_eq!(AdpfParams::new(14, 50, 1, 2).unwrap().key_bytes(), 236);
    assert_eq!(AdpfParams::new(15, 50, 1, 2).unwrap().key_bytes(), 253);
    assert_eq!(AdpfParams::new(14, 50, 1, 2).unwrap().aes_full_domain(), 16382);
}

#[test]
fn parameters_and_inputs_are_validated() {
    assert_eq!(AdpfParams::new(0, 64, 1, 0), Err(FssError::InvalidWidth(0)));
    assert_eq!(AdpfParams::new(8, 0, 1, 0), Err(FssError::InvalidWidth(0)));
    assert_eq!(AdpfParams::new(8, 65, 1, 0), Err(FssError::InvalidWidth(65)));
    assert!(matches!(AdpfParams::new(25, 64, 1, 0), Err(FssError::DomainTooLarge { bits: 25, max: 24 })));
    assert!(matches!(AdpfParams::new(8, 64, 0, 0), Err(FssError::InvalidParams(_))));
    assert!(matches!(AdpfParams::new(8, 64, 9, 0), Err(FssError::InvalidParams(_))));
    assert!(matches!(AdpfParams::new(8, 64, 1, 7), Err(FssError::InvalidParams(_))));
    assert!(matches!(AdpfParams::new(3, 64, 1, 4), Err(FssError::InvalidParams(_))));
    assert!(AdpfParams::new(3, 64, 1, 3).is_ok());
    assert!(AdpfParams::new(24, 64, 8, 6).is_ok());

    let mut r = rng(5);
    let p = AdpfParams::new(10, 13, 2, 1).unwrap();
    assert!(matches!(adpf::keygen(p, &[1, 2], &[1, 2, 3], &mut r), Err(FssError::LengthMismatch { .. })));
    assert!(matches!(adpf::keygen(p, &[1024], &[1, 2], &mut r), Err(FssError::PointOutOfDomain { .. })));
    assert!(matches!(adpf::keygen(p, &[3], &[1, 1 << 13], &mut r), Err(FssError::ValueOutOfRange { .. })));
    assert!(matches!(
        adpf::keygen_with_roots(p, &[3], &[1, 2], vec![0; 3]),
        Err(FssError::LengthMismatch { .. })
    ));
    let (k0, _) = adpf::keygen(p, &[3, 4], &[1, 2, 3, 4], &mut r).unwrap();
    assert!(matches!(k0.eval(&[1], &mut [0; 2]), Err(FssError::LengthMismatch { .. })));
    assert!(matches!(k0.eval(&[1, 2], &mut [0; 2]), Err(FssError::LengthMismatch { .. })));
    assert!(matches!(k0.eval(&[1, 1024], &mut [0; 4]), Err(FssError::PointOutOfDomain { .. })));
    assert!(matches!(k0.eval_one(2, 0), Err(FssError::InvalidParams(_))));
    assert!(matches!(k0.eval_indexed(&[0, 2], &[0, 0], &mut [0; 4]), Err(FssError::InvalidParams(_))));
    assert!(matches!(k0.full_domain(1..3), Err(FssError::InvalidParams(_))));
    assert!(matches!(k0.full_domain_into(0..2, &mut [0; 10]), Err(FssError::LengthMismatch { .. })));
    assert!(k0.full_domain(1..1).unwrap().is_empty());
    // Debug shows the shape, never the material.
    let dbg = format!("{k0:?}");
    assert!(dbg.starts_with("AdpfKeys { params: AdpfParams {") && dbg.ends_with("len: 2, .. }"), "{dbg}");
    assert_eq!(k0.party(), Party::P0);
    assert_eq!(k0.params(), p);
    assert_eq!((k0.len(), k0.is_empty()), (2, false));
}

fn sample_keys() -> Vec<Vec<u8>> {
    let mut r = rng(6);
    let mut out = vec![];
    for (d, ell, kw, e) in [(1, 1, 1, 0), (1, 1, 1, 1), (5, 13, 3, 2), (14, 50, 1, 2), (9, 64, 8, 6)] {
        let p = AdpfParams::new(d, ell, kw, e).unwrap();
        let (k0, k1) = adpf::keygen(p, &[0, mask(d)], &vec![1; 2 * kw as usize], &mut r).unwrap();
        out.push(k0.encode());
        out.push(k1.encode());
    }
    out
}

#[test]
fn encoding_round_trips() {
    let mut r = rng(7);
    let p = AdpfParams::new(14, 50, 2, 2).unwrap();
    let alphas = [12345, 7, 99];
    let betas = random_betas(&mut r, 6, 50);
    let (k0, k1) = adpf::keygen(p, &alphas, &betas, &mut r).unwrap();
    for k in [&k0, &k1] {
        let back = AdpfKeys::decode(&k.encode()).unwrap();
        assert_eq!(&back, k);
        assert_eq!(back.party(), k.party());
        assert_eq!(back.eval_one(0, 12345).unwrap(), k.eval_one(0, 12345).unwrap());
        assert_eq!(back.full_domain(1..2).unwrap(), k.full_domain(1..2).unwrap());
    }
    // Material written inside another container reads back the same.
    let mut w = BitWriter::new();
    k1.write_material(&mut w);
    let bytes = w.finish();
    let mut rd = fss::codec::BitReader::new(&bytes);
    assert_eq!(AdpfKeys::read_material(p, Party::P1, 3, &mut rd).unwrap(), k1);
    rd.finish().unwrap();
    // An empty batch is valid too.
    let (e0, _) = adpf::keygen(p, &[], &[], &mut r).unwrap();
    assert!(AdpfKeys::decode(&e0.encode()).unwrap().is_empty());
}

#[test]
fn truncated_extended_and_corrupted_bytes_are_errors() {
    for bytes in sample_keys() {
        AdpfKeys::decode(&bytes).unwrap();
        for cut in 0..bytes.len() {
            assert!(AdpfKeys::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(AdpfKeys::decode(&longer).is_err(), "extended");
        for i in 0..bytes.len() {
            for bit in [0, 3, 7] {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                assert!(AdpfKeys::decode(&bad).is_err(), "byte {i} bit {bit} flipped");
            }
        }
    }
}

#[test]
fn wrong_version_kind_and_fields_are_reported() {
    let keys = sample_keys();
    let bytes = &keys[4];
    let reseal = |mut b: Vec<u8>| {
        let n = b.len() - 4;
        let c = crc(&b[..n]);
        b[n..].copy_from_slice(&c.to_le_bytes());
        b
    };
    let mut v = bytes.clone();
    v[4] = 2;
    assert_eq!(AdpfKeys::decode(&reseal(v)), Err(DecodeError::UnsupportedVersion { found: 2, supported: 1 }));
    let mut m = bytes.clone();
    m[0] = b'X';
    assert_eq!(AdpfKeys::decode(&m), Err(DecodeError::BadMagic));
    // Another kind's key, and this kind read as another.
    let mut r = rng(8);
    let (d0, _) = dpf::keygen(DpfParams::new(5, 13).unwrap(), &[1], &[1], &mut r).unwrap();
    assert_eq!(
        AdpfKeys::decode(&d0.encode()),
        Err(DecodeError::WrongKind { expected: "arithmetic DPF", found: 1 })
    );
    assert!(matches!(DpfKeys::decode(bytes), Err(DecodeError::WrongKind { found: 4, .. })));
    // Checksum-valid headers with impossible fields: d = 0, d = 25, ℓ = 65, K = 0, K = 9,
    // e > d, e = 7, party 2.
    for (at, val) in [(7, 0), (7, 25), (8, 65), (9, 0), (9, 9), (7, 1), (11, 7), (6, 2)] {
        let mut w = bytes.clone();
        w[at] = val;
        assert!(matches!(AdpfKeys::decode(&reseal(w)), Err(DecodeError::InvalidField(_))), "byte {at}={val}");
    }
    // A valid shape that does not match the material's length.
    let mut e = bytes.clone();
    e[11] = 1;
    assert!(AdpfKeys::decode(&reseal(e)).is_err());
    let mut c = bytes.clone();
    c[12] = c[12].wrapping_add(1); // one key more than the material holds
    assert!(matches!(AdpfKeys::decode(&reseal(c)), Err(DecodeError::Truncated { .. })));
    let mut huge = bytes.clone();
    huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes()); // must fail before allocating
    assert!(matches!(AdpfKeys::decode(&reseal(huge)), Err(DecodeError::Truncated { .. })));
    let mut s = bytes.clone();
    s[16] |= 1; // root seed with its control bit set
    assert!(matches!(AdpfKeys::decode(&reseal(s)), Err(DecodeError::InvalidField(_))));
}

/// CRC-32 (IEEE), to re-seal deliberately edited keys.
fn crc(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 == 1 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
        }
    }
    !c
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn shares_sum_to_the_point_function(
        d in 1u32..=24, e in 0u32..=6, kw in 1u32..=8, ell in 1u32..=64, seed: u64, a: u64, x: u64,
        hit: bool, beta in proptest::collection::vec(any::<u64>(), 8),
    ) {
        let e = e.min(d);
        let mut r = DealerRng::seed_from_u64(seed);
        let p = AdpfParams::new(d, ell, kw, e).unwrap();
        let alpha = a & mask(d);
        // Hits, near misses (same leaf, other slot) and random points.
        let x = if hit { alpha } else if x % 3 == 0 { alpha ^ (x & mask(e)) } else { x & mask(d) };
        let beta: Vec<u64> = beta[..kw as usize].iter().map(|b| b & mask(ell)).collect();
        let (k0, k1) = adpf::keygen(p, &[alpha], &beta, &mut r).unwrap();
        let y = add(&k0.eval_one(0, x).unwrap(), &k1.eval_one(0, x).unwrap(), ell);
        prop_assert_eq!(&y, &if x == alpha { beta.clone() } else { vec![0; kw as usize] });
        if d <= 12 {
            let f = add(&k0.full_domain(0..1).unwrap(), &k1.full_domain(0..1).unwrap(), ell);
            prop_assert_eq!(f, truth(p, alpha, &beta));
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1500)) {
        let _ = AdpfKeys::decode(&bytes);
    }

    #[test]
    fn random_bytes_behind_a_valid_header_never_panic(
        party in 0u8..=2, d in 0u8..=26, ell in 0u8..=66, kw in 0u16..=10, e in 0u8..=8, count in 0u32..=3,
        body in proptest::collection::vec(any::<u8>(), 0..1500),
    ) {
        let mut b = b"FSSK".to_vec();
        b.extend([1, 4, party, d, ell]);
        b.extend(kw.to_le_bytes());
        b.push(e);
        b.extend(count.to_le_bytes());
        b.extend(&body);
        let c = crc(&b);
        b.extend(c.to_le_bytes());
        let _ = AdpfKeys::decode(&b);
    }
}

/// Fraction of one-bits at every bit position, over many keys' material.
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

/// One party's key must look the same whatever the point and payload: every material bit
/// (root, seed CWs, control-bit CWs, every final word, including the slot of `β` and its
/// low bit) is a fair coin for α = 0, for α = 2^d − 1 and for random α; the control bits of
/// the root and the seed CWs are 0.
#[test]
fn one_party_key_does_not_depend_on_alpha() {
    const KEYS: usize = 4000;
    // A fair coin over 4000 samples has σ ≈ 0.0079; 6σ ≈ 0.047.
    const TOL: f64 = 0.05;
    let mut r = rng(99);
    for (d, ell, kw, e) in [(10, 64, 2, 2), (9, 13, 3, 1)] {
        let p = AdpfParams::new(d, ell, kw, e).unwrap();
        let alpha_sets: [Vec<u64>; 3] = [
            vec![0; KEYS],
            vec![mask(d); KEYS],
            (0..KEYS as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & mask(d)).collect(),
        ];
        // A fixed, odd payload: a leak of β's slot or of its low bits would show.
        let betas: Vec<u64> =
            (0..KEYS * kw as usize).map(|i| (0xdead_beef + i as u64 % 3) & mask(ell)).collect();
        for (set, alphas) in alpha_sets.iter().enumerate() {
            let (k0, _) = adpf::keygen(p, alphas, &betas, &mut r).unwrap();
            let materials: Vec<Vec<u8>> = (0..KEYS)
                .map(|i| {
                    let mut w = BitWriter::new();
                    k0.slice(i, i + 1).write_material(&mut w);
                    w.finish()
                })
                .collect();
            // The root, then the seed CWs' low halves (one 64-bit word per level), then
            // their high halves.
            let levels = p.levels() as usize;
            for (bit, &f) in bit_frequencies(&materials).iter().enumerate() {
                let seed_lsb = bit == 0 || (128..128 + 64 * levels).contains(&bit) && bit % 64 == 0;
                let padding = bit as u64 >= p.key_bits();
                if seed_lsb || padding {
                    assert_eq!(f, 0.0, "{p:?} set {set} bit {bit}");
                } else {
                    assert!((f - 0.5).abs() < TOL, "{p:?} set {set} bit {bit}: {f}");
                }
            }
        }
    }
}
