//! Correctness of every primitive: exhaustive over all points and all `α` for `n ≤ 10`,
//! edge points at larger `n`, random keys at `n = 37, 50, 64`, vector payloads, and the
//! indexed, trie and full-domain evaluators against the truth.

use fss::bitdpf::{self, BitDpfKeys, BitDpfParams, CmpShares};
use fss::dcf::{self, DcfParams};
use fss::dpf::{self, DpfParams};
use fss::ring::mask;
use fss::rng::{DealerRng, Rng, SeedableRng};
use fss::{AddShare, FssError, Party, XorBit, compare};

/// [`BitDpfKeys::eval_sorted`] over every key, its bit-packed shares unpacked to the points'
/// positions.
fn eval_sorted(
    k: &BitDpfKeys,
    points: &[u64],
    offsets: &[usize],
    out: &mut [CmpShares],
) -> Result<(), FssError> {
    assert_eq!(points.len(), out.len());
    let words = bitdpf::sorted_words(offsets);
    let (mut lt, mut eq) = (vec![0u64; words], vec![0u64; words]);
    k.eval_sorted(0..k.len(), points, offsets, &mut lt, Some(&mut eq))?;
    bitdpf::unpack_sorted(offsets, &lt, &eq, out);
    Ok(())
}

fn rng(seed: u64) -> DealerRng {
    DealerRng::seed_from_u64(seed)
}

/// Lanes evaluating every key at every point of an `n`-bit domain: (key index, point).
fn all_lanes(keys: usize, n: u32) -> (Vec<u32>, Vec<u64>) {
    let dom = 1u64 << n;
    let idx = (0..keys as u32).flat_map(|k| std::iter::repeat_n(k, dom as usize)).collect();
    let pts = (0..keys as u64).flat_map(|_| 0..dom).collect();
    (idx, pts)
}

fn reconstruct(a: &[AddShare], b: &[AddShare], bits: u32) -> Vec<u64> {
    a.iter().zip(b).map(|(&x, &y)| AddShare::reconstruct(x, y, bits)).collect()
}

/// Edge and random points of interest for an `n`-bit domain.
fn edge_points(n: u32, r: &mut DealerRng) -> Vec<u64> {
    let m = mask(n);
    let mut v = vec![0, 1, 127, 128, 129, 255, 256, m / 2, m / 2 + 1, m - 128, m - 127, m - 1, m];
    v.extend((0..8).map(|_| r.next_u64() & m));
    v.into_iter().map(|x| x & m).collect()
}

/// Points next to `a`: `a`, `a ± 1`, `a ± 127/128/129`, `a` with its MSB or LSB flipped.
fn near(a: u64, n: u32) -> Vec<u64> {
    let m = mask(n);
    let mut v = vec![a, a ^ 1, a ^ (1 << (n - 1))];
    for d in [1u64, 2, 127, 128, 129] {
        v.extend([a.wrapping_add(d) & m, a.wrapping_sub(d) & m]);
    }
    v
}

#[test]
fn dpf_exhaustive_small_domains() {
    let mut r = rng(1);
    for n in 1..=10u32 {
        for ell in [1, 7, 64] {
            let params = DpfParams::new(n, ell).unwrap();
            let alphas: Vec<u64> = (0..1u64 << n).collect();
            let betas: Vec<u64> = alphas.iter().map(|_| r.next_u64() & mask(ell)).collect();
            let (k0, k1) = dpf::keygen(params, &alphas, &betas, &mut r).unwrap();
            let (idx, pts) = all_lanes(alphas.len(), n);
            let mut y0 = vec![AddShare::default(); pts.len()];
            let mut y1 = y0.clone();
            k0.eval_indexed(&idx, &pts, &mut y0).unwrap();
            k1.eval_indexed(&idx, &pts, &mut y1).unwrap();
            let y = reconstruct(&y0, &y1, ell);
            for (lane, &x) in pts.iter().enumerate() {
                let a = idx[lane] as u64;
                let want = if x == a { betas[a as usize] } else { 0 };
                assert_eq!(y[lane], want, "n={n} ell={ell} alpha={a} x={x}");
            }
            // Full-domain expansion of every key (expanded together) agrees with point
            // evaluation, and so do sub-ranges.
            let dom = 1usize << n;
            assert_eq!(k0.full_domain(0..alphas.len()).unwrap(), y0);
            assert_eq!(k1.full_domain(0..alphas.len()).unwrap(), y1);
            for a in [0usize, alphas.len() - 1, alphas.len() / 2] {
                assert_eq!(k0.full_domain(a..a + 1).unwrap(), &y0[a * dom..(a + 1) * dom]);
            }
        }
    }
}

#[test]
fn dpf_large_domains_edge_and_random() {
    let mut r = rng(2);
    for n in [11, 20, 37, 50, 63, 64] {
        for ell in [1, 37, 50, 64] {
            let params = DpfParams::new(n, ell).unwrap();
            let alphas = edge_points(n, &mut r);
            let betas: Vec<u64> = alphas.iter().map(|_| r.next_u64() & mask(ell)).collect();
            let (k0, k1) = dpf::keygen(params, &alphas, &betas, &mut r).unwrap();
            let (mut idx, mut xs) = (vec![], vec![]);
            for (i, &a) in alphas.iter().enumerate() {
                for x in edge_points(n, &mut r).into_iter().chain(near(a, n)) {
                    idx.push(i as u32);
                    xs.push(x);
                }
            }
            let (mut y0, mut y1) = (vec![AddShare::default(); xs.len()], vec![AddShare::default(); xs.len()]);
            k0.eval_indexed(&idx, &xs, &mut y0).unwrap();
            k1.eval_indexed(&idx, &xs, &mut y1).unwrap();
            for (lane, y) in reconstruct(&y0, &y1, ell).into_iter().enumerate() {
                let (a, x) = (alphas[idx[lane] as usize], xs[lane]);
                assert_eq!(y, if x == a { betas[idx[lane] as usize] } else { 0 }, "n={n} a={a:#x} x={x:#x}");
            }
            // The per-key form (key i at points[i]) agrees with the indexed form.
            let (mut e0, mut e1) =
                (vec![AddShare::default(); alphas.len()], vec![AddShare::default(); alphas.len()]);
            k0.eval(&alphas, &mut e0).unwrap();
            k1.eval(&alphas, &mut e1).unwrap();
            assert_eq!(reconstruct(&e0, &e1, ell), betas);
        }
    }
}

/// Check a pair of comparison shares against the truth.
fn check_cmp(s0: CmpShares, s1: CmpShares, y: u64, a: u64, ctx: &str) {
    assert_eq!(XorBit::reconstruct(s0.lt, s1.lt), y < a, "lt {ctx}");
    assert_eq!(XorBit::reconstruct(s0.eq, s1.eq), y == a, "eq {ctx}");
    let gt = XorBit::reconstruct(s0.gt(Party::P0), s1.gt(Party::P1));
    assert_eq!(gt, y > a, "gt {ctx}");
}

#[test]
fn bitdpf_exhaustive_small_domains() {
    let mut r = rng(3);
    for n in 1..=10u32 {
        let params = BitDpfParams::new(n).unwrap();
        let alphas: Vec<u64> = (0..1u64 << n).collect();
        let (k0, k1) = bitdpf::keygen(params, &alphas, &mut r).unwrap();
        let (idx, pts) = all_lanes(alphas.len(), n);
        let mut s0 = vec![CmpShares::default(); pts.len()];
        let mut s1 = s0.clone();
        k0.eval_indexed(&idx, &pts, &mut s0).unwrap();
        k1.eval_indexed(&idx, &pts, &mut s1).unwrap();
        for (lane, &y) in pts.iter().enumerate() {
            check_cmp(s0[lane], s1[lane], y, idx[lane] as u64, &format!("n={n} lane={lane}"));
        }
        // The trie walk over all points of every key equals the lane walk.
        let dom = 1usize << n;
        let offsets: Vec<usize> = (0..=alphas.len()).map(|g| g * dom).collect();
        let mut t0 = vec![CmpShares::default(); pts.len()];
        eval_sorted(&k0, &pts, &offsets, &mut t0).unwrap();
        assert_eq!(t0, s0, "trie n={n}");
        // Full domain of all keys at once: bit j of key a's table is its equality share at j.
        let (f0, f1) = (k0.full_domain(0..alphas.len()).unwrap(), k1.full_domain(0..alphas.len()).unwrap());
        let blocks = dom.div_ceil(128);
        assert_eq!(f0.len(), alphas.len() * blocks);
        for a in 0..alphas.len() {
            for j in 0..dom {
                let bit = |f: &[u128]| (f[a * blocks + (j >> 7)] >> (j & 127)) & 1 == 1;
                assert_eq!(bit(&f0), s0[a * dom + j].eq.0, "full domain n={n} a={a} j={j}");
                assert_eq!(bit(&f0) ^ bit(&f1), j == a);
            }
        }
        if alphas.len() >= 5 {
            assert_eq!(k0.full_domain(3..5).unwrap(), &f0[3 * blocks..5 * blocks]);
        }
    }
}

#[test]
fn bitdpf_large_domains_edge_and_random() {
    let mut r = rng(4);
    for n in [11, 16, 37, 49, 50, 64] {
        let params = BitDpfParams::new(n).unwrap();
        let alphas = edge_points(n, &mut r);
        let (k0, k1) = bitdpf::keygen(params, &alphas, &mut r).unwrap();
        // Sorted points per key (with duplicates), evaluated by lanes and by the trie.
        let (mut idx, mut pts, mut offsets) = (vec![], vec![], vec![0]);
        for (i, &a) in alphas.iter().enumerate() {
            let mut ys: Vec<u64> = edge_points(n, &mut r).into_iter().chain(near(a, n)).collect();
            ys.push(ys[0]);
            ys.sort_unstable();
            idx.extend(std::iter::repeat_n(i as u32, ys.len()));
            pts.extend(ys);
            offsets.push(pts.len());
        }
        let blank = vec![CmpShares::default(); pts.len()];
        let (mut l0, mut l1, mut t0, mut t1) = (blank.clone(), blank.clone(), blank.clone(), blank);
        k0.eval_indexed(&idx, &pts, &mut l0).unwrap();
        k1.eval_indexed(&idx, &pts, &mut l1).unwrap();
        eval_sorted(&k0, &pts, &offsets, &mut t0).unwrap();
        eval_sorted(&k1, &pts, &offsets, &mut t1).unwrap();
        for (j, &y) in pts.iter().enumerate() {
            let a = alphas[idx[j] as usize];
            check_cmp(l0[j], l1[j], y, a, &format!("lanes n={n} a={a:#x} y={y:#x}"));
            check_cmp(t0[j], t1[j], y, a, &format!("trie n={n} a={a:#x} y={y:#x}"));
        }
    }
}

/// Lone points that leave the trie together: many per key (they descend key by key, with
/// constant correction words) and one or two per key (lane by lane), mixed in one call.
#[test]
fn bitdpf_trie_with_many_lone_points_per_key() {
    let mut r = rng(41);
    let n = 50;
    for per_key in [[1usize, 2, 1, 2], [300, 1, 300, 2], [300, 300, 300, 300]] {
        let keys = 24;
        let alphas: Vec<u64> = (0..keys).map(|_| r.next_u64() & mask(n)).collect();
        let (k0, k1) = bitdpf::keygen(BitDpfParams::new(n).unwrap(), &alphas, &mut r).unwrap();
        let (mut idx, mut pts, mut offsets) = (vec![], vec![], vec![0]);
        for (i, &a) in alphas.iter().enumerate() {
            // Spread points (each alone below the top levels) and a few next to α.
            let mut ys: Vec<u64> = (0..per_key[i % 4]).map(|_| r.next_u64() & mask(n)).collect();
            ys.extend([a, a.wrapping_add(1) & mask(n)]);
            ys.sort_unstable();
            idx.extend(std::iter::repeat_n(i as u32, ys.len()));
            pts.extend(ys);
            offsets.push(pts.len());
        }
        let blank = vec![CmpShares::default(); pts.len()];
        let (mut l0, mut t0, mut t1) = (blank.clone(), blank.clone(), blank);
        k0.eval_indexed(&idx, &pts, &mut l0).unwrap();
        eval_sorted(&k0, &pts, &offsets, &mut t0).unwrap();
        eval_sorted(&k1, &pts, &offsets, &mut t1).unwrap();
        assert_eq!(t0, l0, "trie and lanes agree ({per_key:?})");
        for (j, &y) in pts.iter().enumerate() {
            check_cmp(t0[j], t1[j], y, alphas[idx[j] as usize], &format!("{per_key:?} point {j}"));
        }
    }
}

#[test]
fn one_key_answers_every_public_threshold() {
    // Exhaustive over (r, x, c) for n = 6 (truth-table keys) and edge masks at n = 9 (trees).
    let mut r = rng(5);
    for n in [6u32, 9] {
        let nn = 1u64 << n;
        let params = BitDpfParams::new(n).unwrap();
        let masks: Vec<u64> =
            if n == 6 { (0..nn).collect() } else { vec![0, 1, nn - 1, nn / 2, nn / 2 - 1, 77] };
        let thresholds: Vec<u64> = (0..nn).collect();
        for &rm in &masks {
            // One element per x, all under the mask rm.
            let (k0, k1) = bitdpf::keygen(params, &vec![rm; nn as usize], &mut r).unwrap();
            let masked: Vec<u64> = (0..nn).map(|x| (x + rm) & (nn - 1)).collect();
            let mut o0 = vec![XorBit::default(); (nn * nn) as usize];
            let mut o1 = o0.clone();
            compare::less_than_public(&k0, &masked, &thresholds, &mut o0).unwrap();
            compare::less_than_public(&k1, &masked, &thresholds, &mut o1).unwrap();
            for x in 0..nn {
                for c in 0..nn {
                    let i = (x * nn + c) as usize;
                    assert_eq!(o0[i].0 ^ o1[i].0, x < c, "n={n} r={rm} x={x} c={c}");
                }
            }
        }
    }
    // Full width: many elements, a few thresholds, edge masks.
    for n in [37u32, 50] {
        let m = mask(n);
        let params = BitDpfParams::new(n).unwrap();
        let thresholds = [0, 1, 4096, m / 2, m / 2 + 1, m - 4095, m];
        let mut masks = vec![0, 1, m, m / 2, m / 2 - 1];
        masks.extend((0..600).map(|_| r.next_u64() & m));
        let (k0, k1) = bitdpf::keygen(params, &masks, &mut r).unwrap();
        let xs: Vec<u64> = masks
            .iter()
            .enumerate()
            .map(|(i, &rm)| match i % 4 {
                0 => (m + 1 - rm) & m,
                1 => m / 2,
                2 => 4095,
                _ => r.next_u64() & m,
            })
            .collect();
        let masked: Vec<u64> = xs.iter().zip(&masks).map(|(&x, &rm)| (x + rm) & m).collect();
        let mut o0 = vec![XorBit::default(); xs.len() * thresholds.len()];
        let mut o1 = o0.clone();
        compare::less_than_public(&k0, &masked, &thresholds, &mut o0).unwrap();
        compare::less_than_public(&k1, &masked, &thresholds, &mut o1).unwrap();
        for (e, &x) in xs.iter().enumerate() {
            for (j, &c) in thresholds.iter().enumerate() {
                let i = e * thresholds.len() + j;
                assert_eq!(o0[i].0 ^ o1[i].0, x < c, "n={n} x={x:#x} c={c:#x}");
            }
        }
    }
}

/// Evaluating keys `0..m` in order (correction words read as slices) and through an index
/// map (gathered) give the same shares, for scalar and vector payloads, in batches that span
/// several chunks.
#[test]
fn dcf_in_order_and_indexed_lanes_agree() {
    let mut r = DealerRng::seed_from_u64(41);
    for kw in [1u32, 2, 4] {
        let params = DcfParams::new(50, 64, kw).unwrap();
        let m = 700;
        let alphas: Vec<u64> = (0..m).map(|_| r.next_u64() & mask(50)).collect();
        let betas: Vec<u64> = (0..m * kw as usize).map(|_| r.next_u64()).collect();
        let xs: Vec<u64> = (0..m).map(|_| r.next_u64() & mask(50)).collect();
        let (k0, k1) = dcf::keygen(params, &alphas, &betas, &mut r).unwrap();
        let idx: Vec<u32> = (0..m as u32).collect();
        for k in [&k0, &k1] {
            let mut a = vec![AddShare::default(); m * kw as usize];
            let mut b = a.clone();
            k.eval(&xs, &mut a).unwrap();
            k.eval_indexed(&idx, &xs, &mut b).unwrap();
            assert_eq!(a, b);
        }
        let mut y0 = vec![AddShare::default(); m * kw as usize];
        let mut y1 = y0.clone();
        k0.eval(&xs, &mut y0).unwrap();
        k1.eval(&xs, &mut y1).unwrap();
        let y = reconstruct(&y0, &y1, 64);
        for i in 0..m {
            let kw = kw as usize;
            let want = if xs[i] < alphas[i] { betas[i * kw..(i + 1) * kw].to_vec() } else { vec![0; kw] };
            assert_eq!(&y[i * kw..(i + 1) * kw], &want[..]);
        }
    }
}

/// Evaluate DCF keys (dealt at `alphas` with `betas`) at lanes `(idx, xs)` and check.
fn dcf_check(params: DcfParams, alphas: &[u64], betas: &[u64], idx: &[u32], xs: &[u64], r: &mut DealerRng) {
    let kw = params.payload_words() as usize;
    let ell = params.out_bits();
    let (k0, k1) = dcf::keygen(params, alphas, betas, r).unwrap();
    let mut y0 = vec![AddShare::default(); xs.len() * kw];
    let mut y1 = y0.clone();
    k0.eval_indexed(idx, xs, &mut y0).unwrap();
    k1.eval_indexed(idx, xs, &mut y1).unwrap();
    let y = reconstruct(&y0, &y1, ell);
    for (lane, &x) in xs.iter().enumerate() {
        let i = idx[lane] as usize;
        let want = if x < alphas[i] { betas[i * kw..(i + 1) * kw].to_vec() } else { vec![0; kw] };
        assert_eq!(&y[lane * kw..(lane + 1) * kw], &want[..], "{params:?} alpha={:#x} x={x:#x}", alphas[i]);
    }
}

#[test]
fn dcf_exhaustive_small_domains() {
    let mut r = rng(6);
    for n in 1..=10u32 {
        for (ell, kw) in [(64, 1), (1, 1), (16, 3), (64, 2), (37, 5)] {
            let params = DcfParams::new(n, ell, kw).unwrap();
            let alphas: Vec<u64> = (0..1u64 << n).collect();
            let betas: Vec<u64> = (0..alphas.len() * kw as usize).map(|_| r.next_u64() & mask(ell)).collect();
            let (idx, xs) = all_lanes(alphas.len(), n);
            dcf_check(params, &alphas, &betas, &idx, &xs, &mut r);
        }
    }
}

#[test]
fn dcf_large_domains_edge_random_and_vectors() {
    let mut r = rng(7);
    for n in [11, 37, 50, 64] {
        for (ell, kw) in [(64, 1), (50, 1), (37, 1), (26, 2), (64, 4), (50, 7), (12, 20)] {
            let params = DcfParams::new(n, ell, kw).unwrap();
            let alphas = edge_points(n, &mut r);
            let betas: Vec<u64> = (0..alphas.len() * kw as usize).map(|_| r.next_u64() & mask(ell)).collect();
            let (mut idx, mut xs) = (vec![], vec![]);
            for (i, &a) in alphas.iter().enumerate() {
                for x in edge_points(n, &mut r).into_iter().chain(near(a, n)) {
                    idx.push(i as u32);
                    xs.push(x);
                }
            }
            dcf_check(params, &alphas, &betas, &idx, &xs, &mut r);
        }
    }
}

#[test]
fn big_batches_use_every_chunk_path() {
    // More lanes than one chunk (rayon path), per-key and indexed.
    let mut r = rng(8);
    let n = 50;
    let alphas: Vec<u64> = (0..3000).map(|_| r.next_u64() & mask(n)).collect();
    let params = DcfParams::new(n, 64, 2).unwrap();
    let betas: Vec<u64> = (0..alphas.len() * 2).map(|_| r.next_u64()).collect();
    let idx: Vec<u32> = (0..9000).map(|j| (j / 3) as u32).collect();
    let xs: Vec<u64> = idx
        .iter()
        .enumerate()
        .map(|(j, &i)| match j % 3 {
            0 => alphas[i as usize],
            1 => alphas[i as usize].saturating_sub(1),
            _ => r.next_u64() & mask(n),
        })
        .collect();
    dcf_check(params, &alphas, &betas, &idx, &xs, &mut r);

    let (k0, k1) = dcf::keygen(DcfParams::new(n, 64, 1).unwrap(), &alphas, &alphas, &mut r).unwrap();
    let ys: Vec<u64> = alphas.iter().map(|&a| a ^ (r.next_u64() & 0xff)).collect();
    let (mut y0, mut y1) = (vec![AddShare::default(); ys.len()], vec![AddShare::default(); ys.len()]);
    k0.eval(&ys, &mut y0).unwrap();
    k1.eval(&ys, &mut y1).unwrap();
    for (i, y) in reconstruct(&y0, &y1, 64).into_iter().enumerate() {
        assert_eq!(y, if ys[i] < alphas[i] { alphas[i] } else { 0 });
    }

    let (b0, b1) = bitdpf::keygen(BitDpfParams::new(n).unwrap(), &alphas, &mut r).unwrap();
    let mut s = [vec![CmpShares::default(); ys.len()], vec![CmpShares::default(); ys.len()]];
    b0.eval(&ys, &mut s[0]).unwrap();
    b1.eval(&ys, &mut s[1]).unwrap();
    for i in 0..ys.len() {
        check_cmp(s[0][i], s[1][i], ys[i], alphas[i], "big batch");
    }
    // One of two candidate keys per element, picked at random (lanes read scattered keys).
    let pick: Vec<u32> = (0..ys.len() / 2).map(|j| (2 * j as u64 + (r.next_u64() & 1)) as u32).collect();
    let at: Vec<u64> = pick.iter().map(|&k| ys[k as usize]).collect();
    let mut p = [vec![CmpShares::default(); at.len()], vec![CmpShares::default(); at.len()]];
    b0.eval_indexed(&pick, &at, &mut p[0]).unwrap();
    b1.eval_indexed(&pick, &at, &mut p[1]).unwrap();
    for (j, &k) in pick.iter().enumerate() {
        assert_eq!((p[0][j], p[1][j]), (s[0][k as usize], s[1][k as usize]), "candidate lane {j}");
    }
    // Slices keep keys intact.
    let (h0, h1) = (b0.slice(1000, 1300), b1.slice(1000, 1300));
    let mut t = [vec![CmpShares::default(); 300], vec![CmpShares::default(); 300]];
    h0.eval(&ys[1000..1300], &mut t[0]).unwrap();
    h1.eval(&ys[1000..1300], &mut t[1]).unwrap();
    assert_eq!(t[0], s[0][1000..1300]);
    let (d0, d1) = (k0.slice(2990, 3000), k1.slice(2990, 3000));
    let (mut z0, mut z1) = (vec![AddShare::default(); 10], vec![AddShare::default(); 10]);
    d0.eval(&ys[2990..], &mut z0).unwrap();
    d1.eval(&ys[2990..], &mut z1).unwrap();
    assert_eq!(z0, y0[2990..]);
    assert_eq!(z1, y1[2990..]);
}

#[test]
fn misuse_is_a_typed_error() {
    let mut r = rng(9);
    let p = DpfParams::new(10, 64).unwrap();
    assert_eq!(
        dpf::keygen(p, &[1024], &[1], &mut r).unwrap_err(),
        FssError::PointOutOfDomain { point: 1024, bits: 10 }
    );
    let p8 = DpfParams::new(10, 8).unwrap();
    assert_eq!(
        dpf::keygen(p8, &[3], &[256], &mut r).unwrap_err(),
        FssError::ValueOutOfRange { value: 256, bits: 8 }
    );
    assert!(matches!(dpf::keygen(p, &[3, 4], &[1], &mut r), Err(FssError::LengthMismatch { .. })));
    let (k0, _) = dpf::keygen(p, &[3], &[1], &mut r).unwrap();
    assert!(matches!(k0.eval_one(0, 1 << 10), Err(FssError::PointOutOfDomain { .. })));
    assert!(matches!(k0.eval_one(1, 0), Err(FssError::InvalidParams(_))));
    let mut out = [AddShare::default(); 2];
    assert!(matches!(k0.eval(&[1, 2], &mut out), Err(FssError::LengthMismatch { .. })));
    assert!(matches!(k0.eval_indexed(&[0, 1], &[1, 2], &mut out), Err(FssError::InvalidParams(_))));
    assert_eq!(DpfParams::new(0, 64), Err(FssError::InvalidWidth(0)));
    assert_eq!(DcfParams::new(8, 65, 1), Err(FssError::InvalidWidth(65)));
    assert!(DcfParams::new(8, 64, 0).is_err());
    let bp = BitDpfParams::new(20).unwrap();
    let (b0, _) = bitdpf::keygen(bp, &[5], &mut r).unwrap();
    let mut s = [CmpShares::default(); 2];
    assert_eq!(eval_sorted(&b0, &[9, 3], &[0, 2], &mut s), Err(FssError::Unsorted));
    assert!(eval_sorted(&b0, &[3, 9], &[0, 1], &mut s).is_err());
    let big = DpfParams::new(30, 8).unwrap();
    let (kb, _) = dpf::keygen(big, &[0], &[0], &mut r).unwrap();
    assert!(matches!(kb.full_domain(0..1), Err(FssError::DomainTooLarge { .. })));
    assert!(matches!(k0.full_domain(0..2), Err(FssError::InvalidParams(_))));
    let dp = DcfParams::new(8, 8, 2).unwrap();
    assert!(matches!(dcf::keygen(dp, &[3], &[1], &mut r), Err(FssError::LengthMismatch { .. })));
    let (kd, _) = dcf::keygen(dp, &[3], &[1, 2], &mut r).unwrap();
    let mut out = vec![AddShare::default(); 3];
    assert!(kd.eval(&[1], &mut out).is_err());
    let mut o = vec![XorBit::default(); 1];
    assert!(compare::less_than_public(&b0, &[1 << 20], &[1], &mut o).is_err());
    assert!(compare::less_than_public(&b0, &[1], &[1 << 20], &mut o).is_err());
}

#[test]
fn key_sizes_match_the_formulas() {
    // docs/design/fss-building-blocks.md §8 and the targets.
    let dcf = DcfParams::new(50, 64, 1).unwrap();
    assert_eq!(dcf.key_bits(), 128 + 50 * (128 + 64 + 2) + 64);
    assert!(dcf.key_bits().div_ceil(8) <= 1250);
    let et = BitDpfParams::new(50).unwrap();
    assert_eq!(et.key_bits(), 130 * 50 - 656);
    assert!(et.key_bits().div_ceil(8) <= 750);
    assert_eq!(DpfParams::new(50, 64).unwrap().key_bits(), 128 + 50 * 130 + 64);
    assert_eq!(BitDpfParams::new(7).unwrap().key_bits(), 128);
    let mut r = rng(10);
    let (k, _) =
        dcf::keygen(DcfParams::new(50, 64, 4).unwrap(), &[9, 10], &[1, 2, 3, 4, 5, 6, 7, 8], &mut r).unwrap();
    let mut w = fss::codec::BitWriter::new();
    k.write_material(&mut w);
    assert_eq!(w.bit_len(), 2 * k.params().key_bits());
}

/// Equality shares over windows (wrapping or not, table keys too) agree with the truth.
#[test]
fn bitdpf_windows() {
    let mut r = rng(77);
    for (n, widths) in [
        (5u32, vec![1usize, 7, 32]),
        (7, vec![1, 100, 128]),
        (8, vec![3, 129, 256]),
        (9, vec![1, 129]),
        (10, vec![1, 100, 129, 300]),
        (12, vec![1, 300, 4096]),
        (19, vec![258, 514, 1921, 1922, 3969, 3970]),
        (37, vec![1, 64, 1000, 5000]),
        (64, vec![200]),
    ] {
        let keys = 70;
        let alphas: Vec<u64> = (0..keys).map(|_| r.next_u64() & mask(n)).collect();
        let (k0, k1) = bitdpf::keygen(BitDpfParams::new(n).unwrap(), &alphas, &mut r).unwrap();
        for &width in &widths {
            // Windows that start anywhere, at α, just past α, across the middle of the domain
            // (the first and last blocks' paths part at the root) and wrap over 2^n.
            let starts: Vec<u64> = (0..keys)
                .map(|i| match i % 5 {
                    0 => r.next_u64() & mask(n),
                    1 => alphas[i],
                    2 => alphas[i].wrapping_sub(width as u64 / 2) & mask(n),
                    3 => (1u64 << (n - 1)).wrapping_sub(width as u64 / 2 + 1) & mask(n),
                    _ => mask(n).wrapping_sub(width as u64 / 3) & mask(n),
                })
                .collect();
            let words = width.div_ceil(64);
            let (mut w0, mut w1) = (vec![0u64; keys * words], vec![0u64; keys * words]);
            k0.eval_window(0..k0.len(), &starts, width, &mut w0, None).unwrap();
            k1.eval_window(0..k1.len(), &starts, width, &mut w1, None).unwrap();
            for i in 0..keys {
                for u in 0..width {
                    let bit = |w: &[u64]| (w[i * words + u / 64] >> (u % 64)) & 1;
                    let p = starts[i].wrapping_add(u as u64) & mask(n);
                    assert_eq!(
                        bit(&w0) ^ bit(&w1),
                        (p == alphas[i]) as u64,
                        "n {n} width {width} key {i} u {u}"
                    );
                }
                // Bits past the window are clear.
                if width % 64 != 0 {
                    assert_eq!(w0[i * words + words - 1] >> (width % 64), 0);
                }
            }
            // With the shares at each window's last point: the same bits, and the shares a
            // walk of its own gives that point (also for a range of the batch).
            for range in [0..keys, 13..61] {
                let len = range.len();
                let st = &starts[range.clone()];
                let mut w = vec![0u64; len * words];
                let (mut e0, mut e1) = (vec![CmpShares::default(); len], vec![CmpShares::default(); len]);
                k0.eval_window(range.clone(), st, width, &mut w, Some(&mut e0)).unwrap();
                k1.eval_window(range.clone(), st, width, &mut vec![0u64; len * words], Some(&mut e1))
                    .unwrap();
                assert_eq!(w, w0[range.start * words..range.end * words], "n {n} width {width}");
                let ends: Vec<u64> = st.iter().map(|&s| s.wrapping_add(width as u64 - 1) & mask(n)).collect();
                let idx: Vec<u32> = range.clone().map(|k| k as u32).collect();
                let mut one = vec![CmpShares::default(); len];
                k0.eval_indexed(&idx, &ends, &mut one).unwrap();
                assert_eq!(e0, one, "n {n} width {width} {range:?}");
                for j in 0..len {
                    check_cmp(
                        e0[j],
                        e1[j],
                        ends[j],
                        alphas[range.start + j],
                        &format!("end n {n} width {width} {j}"),
                    );
                }
            }
        }
        let bad = k0.eval_window(0..k0.len(), &vec![0; keys], 0, &mut [], None);
        assert!(bad.is_err());
    }
}

/// `eval_near` (one walk per key, neighbours answered from its leaf block, the rest walked
/// on their own) gives every point the shares a walk of its own gives, in and across blocks.
#[test]
fn bitdpf_near_points_share_a_walk() {
    let mut r = rng(21);
    for n in [3u32, 7, 8, 10, 12, 37, 64] {
        let params = BitDpfParams::new(n).unwrap();
        let m = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        let keys = 700;
        let alphas: Vec<u64> = (0..keys).map(|_| r.next_u64() & m).collect();
        let (k0, k1) = bitdpf::keygen(params, &alphas, &mut r).unwrap();
        // Points at and near block edges, near α, and random.
        let points: Vec<u64> = (0..keys)
            .map(|i| match i % 4 {
                0 => (r.next_u64() & m & !127) | [0, 1, 126, 127][i / 4 % 4],
                1 => alphas[i].wrapping_add(i as u64 % 3) & m,
                _ => r.next_u64() & m,
            } & m)
            .collect();
        let deltas = [0u64, 1, 2, 127, 128, 300];
        let d = deltas.len();
        let mut near = [vec![CmpShares::default(); keys * d], vec![CmpShares::default(); keys * d]];
        k0.eval_near(0..k0.len(), &points, &deltas, &mut near[0]).unwrap();
        k1.eval_near(0..k1.len(), &points, &deltas, &mut near[1]).unwrap();
        for (j, &dj) in deltas.iter().enumerate() {
            let pts: Vec<u64> = points.iter().map(|&y| y.wrapping_sub(dj) & m).collect();
            let mut one = vec![CmpShares::default(); keys];
            k0.eval(&pts, &mut one).unwrap();
            for i in 0..keys {
                assert_eq!(near[0][i * d + j], one[i], "n={n} key={i} delta={dj}");
                check_cmp(
                    near[0][i * d + j],
                    near[1][i * d + j],
                    pts[i],
                    alphas[i],
                    &format!("n={n} i={i} d={dj}"),
                );
            }
        }
    }
    // Shapes are checked.
    let (k0, _) = bitdpf::keygen(BitDpfParams::new(9).unwrap(), &[1, 2], &mut r).unwrap();
    assert!(k0.eval_near(0..k0.len(), &[0, 1], &[0, 1], &mut [CmpShares::default(); 3]).is_err());
    assert!(k0.eval_near(0..k0.len(), &[0, 1 << 9], &[0], &mut [CmpShares::default(); 2]).is_err());
}

/// The evaluators read a range of a batch in place and answer exactly as the range
/// copied out (`slice`) does; a range outside the batch is an error.
#[test]
fn bitdpf_key_ranges_match_slices() {
    let mut r = rng(22);
    for n in [6u32, 20, 37] {
        let m = mask(n);
        let keys = 300;
        let alphas: Vec<u64> = (0..keys).map(|_| r.next_u64() & m).collect();
        let (k0, _) = bitdpf::keygen(BitDpfParams::new(n).unwrap(), &alphas, &mut r).unwrap();
        for range in [0..keys, 37..251, 299..300] {
            let cut = k0.slice(range.start, range.end);
            let len = range.len();
            // Points near each key's α, so that the walks reach their leaves.
            let pts: Vec<u64> = range.clone().map(|i| alphas[i].wrapping_add(r.next_u64() % 5) & m).collect();
            let deltas = [0u64, 1, 3];
            let (mut a, mut b) = (vec![CmpShares::default(); len * 3], vec![CmpShares::default(); len * 3]);
            cut.eval_near(0..cut.len(), &pts, &deltas, &mut a).unwrap();
            k0.eval_near(range.clone(), &pts, &deltas, &mut b).unwrap();
            assert_eq!(a, b, "near n={n} {range:?}");
            let width: usize = 200.min(1 << n);
            let words = width.div_ceil(64);
            let (mut a, mut b) = (vec![0u64; len * words], vec![0u64; len * words]);
            cut.eval_window(0..cut.len(), &pts, width, &mut a, None).unwrap();
            k0.eval_window(range.clone(), &pts, width, &mut b, None).unwrap();
            assert_eq!(a, b, "window n={n} {range:?}");
            // Three sorted points per key.
            let sorted: Vec<u64> = pts
                .iter()
                .flat_map(|&y| {
                    let mut v = [y, y.wrapping_add(1) & m, y.wrapping_add(900) & m];
                    v.sort_unstable();
                    v
                })
                .collect();
            let offsets: Vec<usize> = (0..=len).map(|g| 3 * g).collect();
            let words = bitdpf::sorted_words(&offsets);
            let (mut a, mut b) = (vec![0u64; words], vec![0u64; words]);
            let (mut ea, mut eb) = (vec![0u64; words], vec![0u64; words]);
            cut.eval_sorted(0..cut.len(), &sorted, &offsets, &mut a, Some(&mut ea)).unwrap();
            k0.eval_sorted(range.clone(), &sorted, &offsets, &mut b, Some(&mut eb)).unwrap();
            assert_eq!((a, ea), (b, eb), "sorted n={n} {range:?}");
        }
        let mut out = vec![CmpShares::default(); 2];
        assert!(k0.eval_near(299..301, &[0, 0], &[0], &mut out).is_err());
        assert!(k0.eval_window(301..302, &[0], 8, &mut [0u64], None).is_err());
    }
}
