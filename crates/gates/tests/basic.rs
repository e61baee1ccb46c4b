//! Products, select and B2A: exhaustive at small widths under edge masks, random at the real
//! widths; secure output equals the reference bit for bit.

mod common;

use common::{check, edge_masks, rng, words};
use fss::ring::mask;
use gates::Gate;
use gates::arith::{MatMul, Mul, Square};
use gates::select::{B2A, Select};

#[test]
fn mul_and_square_exhaustive_small() {
    let mut r = rng(1);
    let bits = 5;
    let n = 1u64 << bits;
    let em = edge_masks(bits, &mut r);
    let (mut x, mut y, mut rx, mut ry) = (vec![], vec![], vec![], vec![]);
    for a in 0..n {
        for b in 0..n {
            for (i, &m1) in em.iter().enumerate() {
                x.push(a);
                y.push(b);
                rx.push(m1);
                ry.push(em[(i * 3 + a as usize) % em.len()]);
            }
        }
    }
    let len = x.len();
    let out = words(&mut r, len, bits);
    let rep = check(&Mul { bits, len }, &[&x[..], &y[..]], &[&rx[..], &ry[..]], &out, &mut r);
    assert_eq!(rep.stats[0].rounds, 1);
    check(&Square { bits, len }, &[&x[..]], &[&rx[..]], &out, &mut r);
}

#[test]
fn mul_square_matmul_full_width() {
    let mut r = rng(2);
    for bits in [37, 50, 64] {
        let len = 1000;
        let (x, y) = (words(&mut r, len, bits), words(&mut r, len, bits));
        let (rx, ry, out) = (words(&mut r, len, bits), words(&mut r, len, bits), words(&mut r, len, bits));
        let rep = check(&Mul { bits, len }, &[&x[..], &y[..]], &[&rx[..], &ry[..]], &out, &mut r);
        // 3 words per element, and one opening of `bits` bits each way.
        assert_eq!(rep.key_bits[0], 3 * len as u64 * bits as u64);
        assert_eq!(rep.stats[0].bytes_sent, (len as u64 * bits as u64).div_ceil(8));
        check(&Square { bits, len }, &[&x[..]], &[&rx[..]], &out, &mut r);
        let g = MatMul { bits, m: 7, k: 33, n: 5 };
        let a = words(&mut r, 7 * 33, bits);
        let b = words(&mut r, 33 * 5, bits);
        let (ra, rb, rc) =
            (words(&mut r, 7 * 33, bits), words(&mut r, 33 * 5, bits), words(&mut r, 35, bits));
        let rep = check(&g, &[&a[..], &b[..]], &[&ra[..], &rb[..]], &rc, &mut r);
        assert_eq!(rep.stats[1].rounds, 1);
    }
}

#[test]
fn select_and_b2a_exhaustive_small() {
    let mut r = rng(3);
    let bits = 6;
    let em = edge_masks(bits, &mut r);
    let (mut b, mut y, mut rb, mut ry) = (vec![], vec![], vec![], vec![]);
    for bit in 0..2u64 {
        for v in 0..1u64 << bits {
            for &m in &em {
                for mb in 0..2u64 {
                    b.push(bit);
                    y.push(v);
                    rb.push(mb);
                    ry.push(m);
                }
            }
        }
    }
    let len = b.len();
    let out = words(&mut r, len, bits);
    let rep = check(&Select { bits, len }, &[&b[..], &y[..]], &[&rb[..], &ry[..]], &out, &mut r);
    assert_eq!(rep.key_bits[0], 4 * len as u64 * bits as u64);
    let rep = check(&B2A { bits, len }, &[&b[..]], &[&rb[..]], &out, &mut r);
    assert_eq!(rep.stats[0].rounds, 1);
}

#[test]
fn keys_of_the_wrong_party_or_shape_are_rejected() {
    let mut r = rng(4);
    let g = Mul { bits: 16, len: 4 };
    let m = words(&mut r, 4, 16);
    let (k0, _) = g.keygen(&[&m, &m], &m, &mut r).unwrap();
    let c1 = gates::Ctx::new(fss::Party::P1);
    let ins: [&[u64]; 2] = [&m, &m];
    let fut = g.eval(&c1, &k0, &ins);
    let res = gates::run_pair(gates::Session::new(&c1, fut), gates::Session::new(&c1, async { Ok(vec![]) }));
    assert!(matches!(res, Err(gates::GateError::KeyMismatch(_))));
    assert!(g.keygen(&[&m], &m, &mut r).is_err());
    assert!(g.keygen(&[&m, &m[..3]], &m, &mut r).is_err());
    // Truncated key material is a decode error.
    use gates::GateKey;
    let bytes = k0.to_bytes();
    assert!(gates::arith::MulKey::from_bytes(&g, fss::Party::P0, &bytes[..bytes.len() - 1]).is_err());
    let _ = mask(3);
}

#[test]
fn standalone_key_encoding_is_validated() {
    use gates::GateKey;
    use gates::arith::MulKey;
    let mut r = rng(5);
    let g = Mul { bits: 20, len: 7 };
    let m = words(&mut r, 7, 20);
    let (k0, k1) = g.keygen(&[&m, &m], &m, &mut r).unwrap();
    let bytes = k1.encode(&g);
    let back = MulKey::decode(&g, &bytes).unwrap();
    assert_eq!(back, k1);
    assert_eq!(back.party(), fss::Party::P1);
    assert_ne!(k0.encode(&g), bytes);
    // Truncated, extended, corrupted, another shape, another gate type.
    for cut in [0, 5, 14, bytes.len() - 1] {
        assert!(MulKey::decode(&g, &bytes[..cut]).is_err());
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(MulKey::decode(&g, &longer).is_err());
    for i in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= 4;
        assert!(MulKey::decode(&g, &bad).is_err(), "byte {i}");
    }
    assert!(MulKey::decode(&Mul { bits: 20, len: 6 }, &bytes).is_err());
    assert!(gates::arith::SquareKey::decode(&Square { bits: 20, len: 7 }, &bytes).is_err());
}

mod malformed {
    use std::sync::Arc;

    use fss::Party;
    use gates::GateKey;
    use gates::cmp::{MaxTree, MaxTreeKey, Relu, ReluKey};
    use gates::lut::{Lut, LutKey};
    use gates::nonlinear::{Activation, ReluResidual, ReluResidualKey};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Random bytes never make a key reader panic: they decode or fail with an error.
        #[test]
        fn random_key_material_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..3000), p in 0u8..2) {
            let party = Party::from_index(p).unwrap();
            let _ = ReluKey::from_bytes(&Relu::new(20, 3), party, &bytes);
            let lut = Lut { in_bits: 6, out_bits: 9, len: 2, table: Arc::from(vec![0u64; 64]) };
            let _ = LutKey::from_bytes(&lut, party, &bytes);
            let gelu = ReluResidual::new(Activation::Gelu, 24, 20, 2).unwrap();
            let _ = ReluResidualKey::from_bytes(&gelu, party, &bytes);
            let tree = MaxTree { bits: 16, cmp_bits: 12, row_lens: vec![3, 1, 4], dcf_levels: 0 };
            let _ = MaxTreeKey::from_bytes(&tree, party, &bytes);
            let tree = MaxTree { bits: 16, cmp_bits: 12, row_lens: vec![3, 1, 4], dcf_levels: 1 };
            let _ = MaxTreeKey::from_bytes(&tree, party, &bytes);
            let _ = ReluResidualKey::decode(&gelu, &bytes);
        }
    }
}

/// The seeded bundle encoding: each party's key carries its own seed only and half of its
/// share words; decoded, the pairs still add up to the dealer's values.
#[test]
fn seeded_keys_carry_their_own_seed_and_half_the_words() {
    use fss::Party;
    use gates::GateKey;
    use gates::keyio::{KeySizes, SEEDED_HEADER_BYTES, decode_keyed, encode_pair};
    let mut r = rng(9);
    let g = Mul { bits: 50, len: 1000 };
    let (rx, ry, rz) = (words(&mut r, 1000, 50), words(&mut r, 1000, 50), words(&mut r, 1000, 50));
    let (k0, k1) = g.keygen(&[&rx, &ry], &rz, &mut r).unwrap();
    let seeds = [[3u8; 16], [4u8; 16]];
    let sizes = KeySizes::of(&k0);
    let [b0, b1] = encode_pair(&k0, &k1, &sizes, Some(seeds));
    assert_eq!([b0.len() as u64, b1.len() as u64], sizes.stored_bytes(true));
    assert_eq!((b0[0], b1[0]), (1, 1));
    assert_eq!((&b0[8..24], &b1[8..24]), (&seeds[0][..], &seeds[1][..]));
    // Three words of 50 bits per element, half of them stored by each party.
    let full = (3 * 50 * 1000) / 8;
    for b in [&b0, &b1] {
        let stored = b.len() as i64 - SEEDED_HEADER_BYTES as i64;
        assert!((stored - full as i64 / 2).abs() <= 8, "{stored} of {full}");
    }
    let shape = g.key_shape();
    let d0 = decode_keyed::<<Mul as Gate>::Key>(&shape, Party::P0, &b0).unwrap();
    let d1 = decode_keyed::<<Mul as Gate>::Key>(&shape, Party::P1, &b1).unwrap();
    let sum = |a: &<Mul as Gate>::Key, b: &<Mul as Gate>::Key| -> Vec<u64> {
        let (x, y) = (a.to_bytes(), b.to_bytes());
        let (mut ra, mut rb) = (fss::codec::BitReader::new(&x), fss::codec::BitReader::new(&y));
        (0..3000).map(|_| ra.get(50).unwrap().wrapping_add(rb.get(50).unwrap()) & mask(50)).collect()
    };
    assert_eq!(sum(&d0, &d1), sum(&k0, &k1));
    // A key decoded with the other party's header is refused or wrong, never the same.
    assert!(decode_keyed::<<Mul as Gate>::Key>(&shape, Party::P0, &b1).map_or(true, |k| k != d0));
}

/// A bundle's keys read their correction words in place: decoded from a shared buffer, the
/// keys equal the dealer's and those decoded by copying, seeded or not; the buffer lives
/// while a key reads it; a damaged side-region length is an error, not a panic.
#[test]
fn keys_read_their_correction_words_in_place() {
    use fss::Party;
    use fss::words::KeyBuffer;
    use gates::GateKey;
    use gates::cmp::Relu;
    use gates::keyio::{KeySizes, decode_keyed, decode_keyed_in_place, encode_pair};
    use std::sync::Arc;
    struct Section(Vec<u8>);
    impl KeyBuffer for Section {
        fn key_bytes(&self) -> &[u8] {
            &self.0
        }
    }
    let mut r = rng(12);
    let g = Relu::new(37, 300);
    let (rx, rz) = (words(&mut r, 300, 37), words(&mut r, 300, 37));
    let shape = g.key_shape();
    type K = <Relu as Gate>::Key;
    for seeds in [None, Some([[5u8; 16], [6u8; 16]])] {
        // (Roots drawn from the parties' root streams, as the dealer draws them.)
        let (k0, k1) = fss::rng::with_root_seeds(seeds.as_ref(), || g.keygen(&[&rx], &rz, &mut r)).unwrap();
        let sizes = KeySizes::of(&k0);
        assert!(sizes.side > 0 && sizes.side.is_multiple_of(64), "correction words in the side region");
        let pair = encode_pair(&k0, &k1, &sizes, seeds);
        assert_eq!(pair.each_ref().map(|b| b.len() as u64), sizes.stored_bytes(seeds.is_some()));
        for (party, bytes) in [Party::P0, Party::P1].into_iter().zip(pair) {
            let copied = decode_keyed::<K>(&shape, party, &bytes).unwrap();
            let buf: Arc<dyn KeyBuffer> = Arc::new(Section(bytes.clone()));
            let shared = decode_keyed_in_place::<K>(&shape, party, &buf).unwrap();
            assert!(Arc::strong_count(&buf) > 1, "the key holds the buffer");
            assert!(shared == copied);
            // Without seeds both keys hold all of their words: each is the dealer's.
            if seeds.is_none() {
                assert!(shared == if party == Party::P0 { k0.clone() } else { k1.clone() });
            }
            drop(shared);
            assert_eq!(Arc::strong_count(&buf), 1, "dropped with the key");
            // The side region's length past the end, or not whole words: refused.
            let head = if seeds.is_some() { 40 } else { 16 };
            for bad in [u64::MAX, bytes.len() as u64, 12] {
                let mut b = bytes.clone();
                b[head - 8..head].copy_from_slice(&bad.to_le_bytes());
                assert!(decode_keyed::<K>(&shape, party, &b).is_err(), "length {bad}");
            }
        }
    }
    // (A key written alone keeps its correction words in its stream.)
    let (k0, _) = g.keygen(&[&rx], &rz, &mut r).unwrap();
    let alone = K::from_bytes(&shape, Party::P0, &k0.to_bytes()).unwrap();
    assert!(alone == k0);
}
