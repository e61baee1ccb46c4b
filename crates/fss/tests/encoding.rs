//! Key encoding: round trips, and every malformed input (truncated, extended, corrupted,
//! wrong version or kind, random bytes) is a typed error, never a panic.

use fss::bitdpf::{self, BitDpfKeys, BitDpfParams};
use fss::codec::ENVELOPE_OVERHEAD;
use fss::dcf::{self, DcfKeys, DcfParams};
use fss::dpf::{self, DpfKeys, DpfParams};
use fss::rng::{DealerRng, SeedableRng};
use fss::{DecodeError, Party};
use proptest::prelude::*;

fn rng() -> DealerRng {
    DealerRng::seed_from_u64(42)
}

fn sample_keys() -> Vec<(Vec<u8>, &'static str)> {
    let mut r = rng();
    let mut out = vec![];
    for (n, ell) in [(1, 1), (8, 64), (37, 37), (50, 64), (64, 64)] {
        let (k0, k1) = dpf::keygen(DpfParams::new(n, ell).unwrap(), &[1, 0], &[1, 1], &mut r).unwrap();
        out.push((k0.encode(), "dpf"));
        out.push((k1.encode(), "dpf"));
    }
    for n in [1, 3, 7, 8, 9, 37, 50, 64] {
        let (k0, k1) = bitdpf::keygen(BitDpfParams::new(n).unwrap(), &[0, 1, 0], &mut r).unwrap();
        out.push((k0.encode(), "bitdpf"));
        out.push((k1.encode(), "bitdpf"));
    }
    for (n, ell, kw) in [(1, 1, 1), (50, 64, 1), (37, 37, 3), (20, 12, 9)] {
        let beta = vec![1; kw as usize];
        let (k0, k1) = dcf::keygen(DcfParams::new(n, ell, kw).unwrap(), &[0], &beta, &mut r).unwrap();
        out.push((k0.encode(), "dcf"));
        out.push((k1.encode(), "dcf"));
    }
    out
}

fn decode_any(bytes: &[u8], kind: &str) -> Result<(), DecodeError> {
    match kind {
        "dpf" => DpfKeys::decode(bytes).map(|_| ()),
        "bitdpf" => BitDpfKeys::decode(bytes).map(|_| ()),
        _ => DcfKeys::decode(bytes).map(|_| ()),
    }
}

#[test]
fn round_trips_preserve_keys_and_sizes() {
    let mut r = rng();
    let p = DcfParams::new(50, 64, 1).unwrap();
    let (k0, k1) = dcf::keygen(p, &[12345, 7, 99], &[77, 1, 2], &mut r).unwrap();
    for k in [&k0, &k1] {
        let bytes = k.encode();
        assert_eq!(bytes.len(), (3 * p.key_bits()).div_ceil(8) as usize + ENVELOPE_OVERHEAD);
        let back = DcfKeys::decode(&bytes).unwrap();
        assert_eq!(&back, k);
        assert_eq!(back.eval_one(2, 12344).unwrap(), k.eval_one(2, 12344).unwrap());
    }
    assert_eq!(DcfKeys::decode(&k1.encode()).unwrap().party(), Party::P1);
    let (d0, _) = dpf::keygen(DpfParams::new(37, 37).unwrap(), &[5, 9], &[6, 1], &mut r).unwrap();
    assert_eq!(DpfKeys::decode(&d0.encode()).unwrap(), d0);
    // Tables (n ≤ 7, up to 128 bits a key) and trees; few keys, and a run of them.
    for n in [1, 5, 6, 7, 50] {
        for keys in [3, 300] {
            let alphas: Vec<u64> = (0..keys).map(|i| (i * 37 + 3) & ((1 << n) - 1)).collect();
            let (b0, b1) = bitdpf::keygen(BitDpfParams::new(n).unwrap(), &alphas, &mut r).unwrap();
            assert_eq!(BitDpfKeys::decode(&b0.encode()).unwrap(), b0, "n {n} keys {keys}");
            assert_eq!(BitDpfKeys::decode(&b1.encode()).unwrap(), b1, "n {n} keys {keys}");
        }
    }
    // An empty batch is valid too.
    let (e0, _) = bitdpf::keygen(BitDpfParams::new(20).unwrap(), &[], &mut r).unwrap();
    assert!(BitDpfKeys::decode(&e0.encode()).unwrap().is_empty());
}

#[test]
fn truncation_extension_and_corruption_are_errors() {
    for (bytes, kind) in sample_keys() {
        decode_any(&bytes, kind).unwrap();
        for cut in [0, 1, 4, 11, 12, 16, 19, bytes.len() / 2, bytes.len() - 1] {
            assert!(decode_any(&bytes[..cut], kind).is_err(), "{kind} cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_any(&longer, kind).is_err(), "{kind} extended");
        for i in (0..bytes.len()).step_by(7).chain([bytes.len() - 1]) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(decode_any(&bad, kind).is_err(), "{kind} byte {i} flipped");
        }
    }
}

#[test]
fn wrong_version_magic_and_kind_are_reported() {
    let keys = sample_keys();
    let (bytes, _) = &keys[2];
    let reseal = |mut b: Vec<u8>| {
        let n = b.len() - 4;
        let crc = crc(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let mut v = bytes.clone();
    v[4] = 2;
    assert_eq!(DpfKeys::decode(&reseal(v)), Err(DecodeError::UnsupportedVersion { found: 2, supported: 1 }));
    let mut m = bytes.clone();
    m[0] = b'X';
    assert_eq!(DpfKeys::decode(&m), Err(DecodeError::BadMagic));
    assert!(matches!(DcfKeys::decode(bytes), Err(DecodeError::WrongKind { .. })));
    assert!(matches!(BitDpfKeys::decode(bytes), Err(DecodeError::WrongKind { .. })));
    // A checksum-valid header with impossible fields.
    let mut w = bytes.clone();
    w[7] = 0; // n = 0
    assert!(matches!(DpfKeys::decode(&reseal(w)), Err(DecodeError::InvalidField(_))));
    let mut p = bytes.clone();
    p[6] = 2; // party 2
    assert!(matches!(DpfKeys::decode(&reseal(p)), Err(DecodeError::InvalidField(_))));
    let mut c = bytes.clone();
    c[12] = c[12].wrapping_add(1); // one key more than the material holds
    assert!(matches!(DpfKeys::decode(&reseal(c)), Err(DecodeError::Truncated { .. })));
    let mut huge = bytes.clone();
    huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes()); // must fail before allocating
    assert!(matches!(DpfKeys::decode(&reseal(huge)), Err(DecodeError::Truncated { .. })));
    let mut s = bytes.clone();
    s[16] |= 1; // root seed with its control bit set
    assert!(matches!(DpfKeys::decode(&reseal(s)), Err(DecodeError::InvalidField(_))));
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
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let _ = DpfKeys::decode(&bytes);
        let _ = BitDpfKeys::decode(&bytes);
        let _ = DcfKeys::decode(&bytes);
    }

    #[test]
    fn random_bytes_behind_a_valid_header_never_panic(
        kind in 1u8..=3, party in 0u8..=2, n in 0u8..=70, ell in 0u8..=70, kw in 0u16..=4,
        variant in 0u8..=2, count in 0u32..=3,
        body in proptest::collection::vec(any::<u8>(), 0..1500),
    ) {
        let mut b = b"FSSK".to_vec();
        b.extend([1, kind, party, n, ell]);
        b.extend(kw.to_le_bytes());
        b.push(variant);
        b.extend(count.to_le_bytes());
        b.extend(&body);
        let c = crc(&b);
        b.extend(c.to_le_bytes());
        let _ = DpfKeys::decode(&b);
        let _ = BitDpfKeys::decode(&b);
        let _ = DcfKeys::decode(&b);
    }
}

/// Vector DCF keys carry their value-hash construction as variant 1; a key that claims
/// another construction is refused instead of silently evaluating to wrong shares.
#[test]
fn dcf_variant_names_the_value_construction() {
    let mut r = rng();
    let reseal = |mut b: Vec<u8>| {
        let n = b.len() - 4;
        let crc = crc(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let (k0, _) = dcf::keygen(DcfParams::new(20, 32, 3).unwrap(), &[5], &[1, 2, 3], &mut r).unwrap();
    let bytes = k0.encode();
    assert_eq!(bytes[11], 1);
    assert_eq!(DcfKeys::decode(&bytes).unwrap(), k0);
    let mut old = bytes.clone();
    old[11] = 0;
    assert!(matches!(DcfKeys::decode(&reseal(old)), Err(DecodeError::InvalidField(_))));
    let (s0, _) = dcf::keygen(DcfParams::new(20, 32, 1).unwrap(), &[5], &[1], &mut r).unwrap();
    let scalar = s0.encode();
    assert_eq!(scalar[11], 0);
    let mut other = scalar.clone();
    other[11] = 1;
    assert!(matches!(DcfKeys::decode(&reseal(other)), Err(DecodeError::InvalidField(_))));
}
