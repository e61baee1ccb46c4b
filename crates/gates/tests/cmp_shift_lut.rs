//! Comparisons, shifts and lookups: exhaustive over every input at small widths under edge
//! masks (including widths where the comparison key is a truth table and where it is a
//! tree), random at n = 37 and 50; secure == reference bit for bit, and the round counts.

mod common;

use std::sync::Arc;

use common::{check, edge_masks, rng, words};
use fss::ring::mask;
use fss::rng::{DealerRng, Rng};
use gates::carry_table::ArsSlackTable;
use gates::cmp::{Drelu, Interval, MaxTree, Relu, ReluDcf, RowMax};
use gates::lut::Lut;
use gates::shift::{ArsSign, ArsSlack, Extend, ShiftExact, TruncReduce};

/// Every input of `bits` bits under every edge mask: (inputs, masks).
fn all_inputs(bits: u32, r: &mut DealerRng) -> (Vec<u64>, Vec<u64>) {
    let em = edge_masks(bits, r);
    let (mut x, mut m) = (vec![], vec![]);
    for v in 0..1u64 << bits {
        for &mm in &em {
            x.push(v);
            m.push(mm);
        }
    }
    (x, m)
}

/// Inputs in the signed range |x| < 2^{bits−2} (the slack of SIGMA's truncation).
fn slack_inputs(bits: u32, r: &mut DealerRng) -> (Vec<u64>, Vec<u64>) {
    let (x, m) = all_inputs(bits, r);
    let q = 1i64 << (bits - 2);
    let ring = fss::Ring::new(bits).unwrap();
    x.into_iter().zip(m).filter(|(x, _)| (-q..q).contains(&ring.to_signed(*x))).unzip()
}

#[test]
fn drelu_relu_exhaustive_small() {
    let mut r = rng(10);
    for bits in [2, 7, 8, 9, 12] {
        let (x, m) = all_inputs(bits, &mut r);
        let len = x.len();
        let out = words(&mut r, len, 1);
        let rep = check(&Drelu { bits, len }, &[&x[..]], &[&m[..]], &out, &mut r);
        assert_eq!((rep.stats[0].rounds, rep.stats[0].bytes_sent), (1, (len as u64).div_ceil(8)));
        let out = words(&mut r, len, bits);
        let rep = check(&Relu::new(bits, len), &[&x[..]], &[&m[..]], &out, &mut r);
        assert_eq!(rep.stats[0].rounds, 2);
        let rep = check(&ReluDcf { bits, cmp_bits: bits, len }, &[&x[..]], &[&m[..]], &out, &mut r);
        assert_eq!(rep.stats[0].rounds, 1);
    }
    // A sign test narrower than the ring: every input of the narrow width, sign-extended,
    // under masks of the whole ring.
    for (cmp_bits, bits) in [(2u32, 5u32), (6, 9), (9, 11)] {
        let (from, to) = (fss::Ring::new(cmp_bits).unwrap(), fss::Ring::new(bits).unwrap());
        let (x, _) = all_inputs(cmp_bits, &mut r);
        let x: Vec<u64> = x.iter().map(|&v| to.from_signed(from.to_signed(v))).collect();
        let mut m = words(&mut r, x.len(), bits);
        for (i, e) in edge_masks(bits, &mut r).into_iter().enumerate() {
            m[i] = e;
        }
        let out = words(&mut r, x.len(), bits);
        let g = ReluDcf { bits, cmp_bits, len: x.len() };
        check(&g, &[&x[..]], &[&m[..]], &out, &mut r);
        check(&Relu { bits, cmp_bits, len: x.len() }, &[&x[..]], &[&m[..]], &out, &mut r);
    }
    assert!(gates::Gate::keygen(&ReluDcf { bits: 8, cmp_bits: 9, len: 1 }, &[&[0]], &[0], &mut r).is_err());
}

/// Max trees whose last levels take one round: ragged rows (lengths 1 to 9), every split
/// between two-round and one-round levels, round counts, and the ring narrower than the
/// inputs' (only differences on `cmp_bits` bits are read).
#[test]
fn max_tree_with_one_round_levels() {
    let mut r = rng(16);
    let (bits, cmp_bits) = (14u32, 11u32);
    let ring = fss::Ring::new(40).unwrap();
    let row_lens: Vec<usize> = (1..=9).cycle().take(60).collect();
    let total: usize = row_lens.iter().sum();
    let x: Vec<u64> = (0..total).map(|_| ring.from_signed((r.next_u64() % 1000) as i64 - 500)).collect();
    for dcf_levels in 0..=5 {
        let tree = MaxTree { bits, cmp_bits, row_lens: row_lens.clone(), dcf_levels };
        let m = words(&mut r, total, 40);
        let (k0, k1, rmax) = tree.deal(&m, None, &mut r).unwrap();
        let xh: Vec<u64> = x.iter().zip(&m).map(|(&a, &b)| a.wrapping_add(b) & mask(40)).collect();
        let (c0, c1) = (gates::Ctx::new(fss::Party::P0), gates::Ctx::new(fss::Party::P1));
        let s0 = gates::Session::new(&c0, tree.run(&c0, &k0, &xh));
        let s1 = gates::Session::new(&c1, tree.run(&c1, &k1, &xh));
        let (y0, y1) = gates::run_pair(s0, s1).unwrap();
        assert_eq!(y0, y1);
        let stats = [c0.stats()];
        let want = tree.plain(&x);
        for (row, (&y, &rm)) in y0.iter().zip(&rmax).enumerate() {
            assert_eq!(
                y.wrapping_sub(rm) & mask(bits),
                want[row] & mask(bits),
                "levels {dcf_levels} row {row}"
            );
        }
        let levels = 4u64; // rows of up to 9 entries
        let one = (dcf_levels as u64).min(levels);
        assert_eq!(stats[0].rounds, 2 * (levels - one) + one, "dcf_levels {dcf_levels}");
    }
}

#[test]
fn interval_exhaustive_small() {
    let mut r = rng(11);
    for bits in [5, 9] {
        let n = mask(bits);
        let (x, m) = all_inputs(bits, &mut r);
        let len = x.len();
        for (lo, hi) in [(0, 0), (0, n), (3, 17), (n / 2, n), (n - 1, n), (1, n - 1)] {
            let out = words(&mut r, len, 1);
            let rep = check(&Interval { bits, len, lo, hi }, &[&x[..]], &[&m[..]], &out, &mut r);
            assert_eq!(rep.stats[1].rounds, 1);
        }
    }
}

#[test]
fn row_max_small_and_wide() {
    let mut r = rng(12);
    let bits = 12;
    let ring = fss::Ring::new(bits).unwrap();
    for cols in 2..=9 {
        let rows = 40;
        let x: Vec<u64> =
            (0..rows * cols).map(|_| ring.from_signed((r.next_u64() % 1000) as i64 - 500)).collect();
        let m = words(&mut r, x.len(), bits);
        let out = words(&mut r, rows, bits);
        let rep = check(&RowMax { bits, cmp_bits: bits, rows, cols }, &[&x[..]], &[&m[..]], &out, &mut r);
        check(
            &RowMax { bits: 40, cmp_bits: 12, rows, cols },
            &[&x40(&x, bits)[..]],
            &[&words(&mut r, x.len(), 40)[..]],
            &out40(&mut r, rows),
            &mut r,
        );
        let levels = (cols as f64).log2().ceil() as u64;
        assert_eq!(rep.stats[0].rounds, 2 * levels, "cols {cols}");
    }
}

#[test]
fn shifts_exhaustive_small() {
    let mut r = rng(13);
    let bits = 8;
    let (x, m) = all_inputs(bits, &mut r);
    let len = x.len();
    for shift in 1..bits {
        let out = words(&mut r, len, bits - shift);
        let rep = check(&TruncReduce { bits, shift, len }, &[&x[..]], &[&m[..]], &out, &mut r);
        assert_eq!(rep.stats[0].rounds, 2);
        for signed in [true, false] {
            let out = words(&mut r, len, bits);
            let g = ShiftExact { bits, shift, signed, len };
            let rep = check(&g, &[&x[..]], &[&m[..]], &out, &mut r);
            assert_eq!(rep.stats[0].rounds, 4);
        }
        // The exact shift and the sign side by side: still four rounds.
        let mut out = words(&mut r, len, bits);
        out.extend(words(&mut r, len, 1));
        let rep = check(&ArsSign { bits, shift, len }, &[&x[..]], &[&m[..]], &out, &mut r);
        assert_eq!(rep.stats[0].rounds, 4);
        assert_eq!(rep.outputs.len(), 2 * len);
    }
    let (xs, ms) = slack_inputs(bits, &mut r);
    for shift in 1..=bits - 2 {
        for out_bits in [bits - shift, bits, 11] {
            let out = words(&mut r, xs.len(), out_bits);
            let g = ArsSlack { bits, shift, out_bits, len: xs.len() };
            let rep = check(&g, &[&xs[..]], &[&ms[..]], &out, &mut r);
            assert_eq!(rep.stats[0].rounds, 2);
        }
    }
    for signed in [true, false] {
        for (b, ob) in [(6, 9), (8, 8), (9, 20)] {
            let (x, m) = all_inputs(b, &mut r);
            let out = words(&mut r, x.len(), ob);
            check(
                &Extend { bits: b, out_bits: ob, signed, len: x.len() },
                &[&x[..]],
                &[&m[..]],
                &out,
                &mut r,
            );
        }
    }
}

/// The truncation whose carry comes from truth tables: every slack input under edge masks
/// for every shift it takes, with and without a high chunk, into narrower and wider rings.
#[test]
fn table_carry_truncation_exhaustive_small() {
    let mut r = rng(16);
    for bits in [9u32, 15] {
        let (xs, ms) = slack_inputs(bits, &mut r);
        for shift in 1..=(bits - 2).min(13) {
            for out_bits in [bits - shift, bits + 3] {
                let out = words(&mut r, xs.len(), out_bits);
                let g = ArsSlackTable { bits, shift, out_bits, len: xs.len() };
                let rep = check(&g, &[&xs[..]], &[&ms[..]], &out, &mut r);
                assert_eq!(rep.stats[0].rounds, 2);
            }
        }
    }
    // With a wide high chunk (shifts 14 to 16): every slack input of 16 and 18 bits.
    for bits in [16u32, 18] {
        let (xs, ms) = slack_inputs(bits, &mut r);
        for shift in 14..=bits - 2 {
            let out = words(&mut r, xs.len(), bits);
            let g = ArsSlackTable { bits, shift, out_bits: bits, len: xs.len() };
            let rep = check(&g, &[&xs[..]], &[&ms[..]], &out, &mut r);
            assert_eq!(rep.stats[0].rounds, 2);
        }
    }
    // Shifts past the tables are refused.
    let g = ArsSlackTable { bits: 37, shift: 20, out_bits: 37, len: 1 };
    assert!(gates::harness::run(&g, &[&[0u64][..]], &mut r).is_err());
}

/// A wide high chunk (shifts 14 to 17) and three chunks (18, 19): under random masks,
/// masked inputs whose high, middle and low chunks each lie below, at and above the mask's
/// (every one of the 27 ways; a two-chunk split reads the middle bits as part of the high
/// chunk), at the chunks' edges too, and random ones; into a narrower and a wider ring.
#[test]
fn table_carry_wide_and_three_chunks_every_way_the_chunks_compare() {
    let mut r = rng(18);
    for shift in [14u32, 15, 17, 18, 19] {
        let bits = shift + 6;
        let ring = fss::Ring::new(bits).unwrap();
        // (The test's own cut of the low bits into three, whatever the gate's.)
        let (lb, mb) = (7u32, (shift - 7) / 2);
        let hb = shift - lb - mb;
        let (mut x, mut m) = (vec![], vec![]);
        for _ in 0..300 {
            let mm = r.next_u64() & mask(bits);
            let low = mm & mask(shift);
            let (rh, rm, rl) = (low >> (mb + lb), (low >> lb) & mask(mb), low & mask(lb));
            // A chunk's value at `d` from the mask's, kept inside the chunk.
            let near = |v: u64, d: i64, w: u32| (v as i64 + d).clamp(0, (1i64 << w) - 1) as u64;
            for dh in -1..=1 {
                for dm in -1..=1 {
                    for dl in -1..=1 {
                        let target =
                            near(rh, dh, hb) << (mb + lb) | near(rm, dm, mb) << lb | near(rl, dl, lb);
                        // The masked input's low bits are `target`: x's low bits are
                        // `target − r` and its high bits small (a slack input).
                        let high = (r.next_u64() % 16) as i64 - 8;
                        let xv = (high << shift) + (target.wrapping_sub(low) & mask(shift)) as i64;
                        x.push(ring.from_signed(xv));
                        m.push(mm);
                    }
                }
            }
            let q = 1i64 << (bits - 3);
            x.push(ring.from_signed((r.next_u64() % (2 * q as u64)) as i64 - q));
            m.push(mm);
        }
        for out_bits in [bits - shift, bits + 3] {
            let out = words(&mut r, x.len(), out_bits);
            let g = ArsSlackTable { bits, shift, out_bits, len: x.len() };
            check(&g, &[&x[..]], &[&m[..]], &out, &mut r);
        }
    }
}

/// Every low part of the mask against every low part of the masked input, for shifts with a
/// high chunk of one and two bits: each table entry and each way the chunks compare.
#[test]
fn table_carry_every_mask_and_input_low_part() {
    let mut r = rng(17);
    let bits = 20u32;
    let ring = fss::Ring::new(bits).unwrap();
    for shift in [8u32, 9] {
        let (mut x, mut m) = (vec![], vec![]);
        for low in 0..1u64 << shift {
            let mm = (r.next_u64() & mask(bits) & !mask(shift)) | low;
            // Four consecutive rows of inputs: every masked low part four times.
            for d in -(2i64 << shift)..(2i64 << shift) {
                x.push(ring.from_signed(d));
                m.push(mm);
            }
        }
        let out = words(&mut r, x.len(), bits);
        let g = ArsSlackTable { bits, shift, out_bits: bits, len: x.len() };
        check(&g, &[&x[..]], &[&m[..]], &out, &mut r);
    }
}

#[test]
fn lut_exhaustive_small() {
    let mut r = rng(14);
    for (in_bits, out_bits) in [(3, 8), (5, 20), (7, 13), (8, 50), (10, 37)] {
        let table: Arc<[u64]> = words(&mut r, 1 << in_bits, out_bits).into();
        let (x, m) = all_inputs(in_bits, &mut r);
        let len = x.len();
        let out = words(&mut r, len, out_bits);
        let g = Lut::new(in_bits, out_bits, len, table).unwrap();
        let rep = check(&g, &[&x[..]], &[&m[..]], &out, &mut r);
        assert_eq!(rep.stats[0].rounds, 2);
        let bits_sent = len as u64 * (1 + 2 * out_bits as u64);
        assert!(rep.stats[0].bytes_sent <= bits_sent.div_ceil(8) + 2);
    }
    assert!(Lut::new(4, 8, 1, vec![0u64; 15].into()).is_err());
    assert!(Lut::new(4, 8, 1, vec![256u64; 16].into()).is_err());
}

#[test]
fn full_width_random() {
    let mut r = rng(15);
    for bits in [37u32, 50] {
        let len = 2000;
        let ring = fss::Ring::new(bits).unwrap();
        let mut x = words(&mut r, len, bits);
        let mut m = words(&mut r, len, bits);
        // Edge inputs and masks: values next to N − r, 0, ±1, ±N/2.
        for (i, mm) in edge_masks(bits, &mut r).into_iter().enumerate() {
            m[i] = mm;
            x[i] = mask(bits).wrapping_sub(mm).wrapping_add(1) & mask(bits);
            m[100 + i] = mm;
            x[100 + i] = [0, 1, mask(bits), 1 << (bits - 1), (1 << (bits - 1)) - 1, 2, 3, 4][i];
        }
        let o1 = words(&mut r, len, 1);
        let on = words(&mut r, len, bits);
        check(&Drelu { bits, len }, &[&x[..]], &[&m[..]], &o1, &mut r);
        check(&Relu::new(bits, len), &[&x[..]], &[&m[..]], &on, &mut r);
        check(&Relu { bits, cmp_bits: bits - 12, len }, &[&xs_small(&x, bits)[..]], &[&m[..]], &on, &mut r);
        let g = Interval { bits, len, lo: 1 << 20, hi: 1 << (bits - 2) };
        check(&g, &[&x[..]], &[&m[..]], &o1, &mut r);
        let shift = 12;
        let ot = words(&mut r, len, bits - shift);
        check(&TruncReduce { bits, shift, len }, &[&x[..]], &[&m[..]], &ot, &mut r);
        for signed in [true, false] {
            check(&ShiftExact { bits, shift, signed, len }, &[&x[..]], &[&m[..]], &on, &mut r);
        }
        let q = 1u64 << (bits - 3);
        let xs: Vec<u64> = x.iter().map(|&v| ring.from_signed((v % q) as i64 - (q / 2) as i64)).collect();
        check(&ArsSlack { bits, shift, out_bits: bits, len }, &[&xs[..]], &[&m[..]], &on, &mut r);
        // The table carry: the same result for well under half of SIGMA's key.
        let sigma = check(&ArsSlack { bits, shift, out_bits: bits, len }, &[&xs[..]], &[&m[..]], &on, &mut r);
        for s in [shift, 13] {
            let g = ArsSlackTable { bits, shift: s, out_bits: bits, len };
            let rep = check(&g, &[&xs[..]], &[&m[..]], &on, &mut r);
            assert_eq!(rep.stats[0].rounds, 2);
            if s == shift {
                assert!(
                    rep.key_bits[0] * 2 < sigma.key_bits[0],
                    "{:?} against {:?}",
                    rep.key_bits,
                    sigma.key_bits
                );
            }
        }
        let ext = Extend { bits: bits - shift, out_bits: bits, signed: true, len };
        let xe: Vec<u64> = x.iter().map(|&v| v & mask(bits - shift)).collect();
        let me: Vec<u64> = m.iter().map(|&v| v & mask(bits - shift)).collect();
        check(&ext, &[&xe[..]], &[&me[..]], &on, &mut r);
        let _ = ring;
    }
}

/// Values that fit `bits − 12` bits as signed numbers, in the `bits`-bit ring.
fn xs_small(x: &[u64], bits: u32) -> Vec<u64> {
    let ring = fss::Ring::new(bits).unwrap();
    let q = 1u64 << (bits - 14);
    x.iter().map(|&v| ring.from_signed((v % (2 * q)) as i64 - q as i64)).collect()
}

/// 12-bit signed values re-embedded in the 40-bit ring.
fn x40(x: &[u64], bits: u32) -> Vec<u64> {
    let (from, to) = (fss::Ring::new(bits).unwrap(), fss::Ring::new(40).unwrap());
    x.iter().map(|&v| to.from_signed(from.to_signed(v))).collect()
}

fn out40(r: &mut DealerRng, rows: usize) -> Vec<u64> {
    words(r, rows, 40)
}
