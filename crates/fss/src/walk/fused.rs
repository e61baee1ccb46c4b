//! The walk's levels fused per lane: each lane hashes only the child it takes.
//!
//! [`Walk::descend_all`] computes both children of every lane with two whole-chunk AES calls
//! and then selects, with passes over the walk's arrays at every level. With VAES, a batch
//! of up to 32 lanes instead stays in registers through all the levels asked for: four
//! groups of eight lanes, one lane per 64-bit element as in the walk's arrays, whose `σ(s)`
//! blocks make two registers of four per group. Every block is encrypted under `H_0`'s round
//! keys, and a block whose lane goes right gets `K_0 ⊕ K_1`'s round key XORed in after each
//! round (`vaesenc` adds its round key last, so that is `H_1`'s AES): one AES per lane and
//! level instead of two, and no arrays between levels. The next levels' correction words
//! are prefetched. The results are the level-by-level walk's bit for bit (tests below); a
//! build without AVX-512 and VAES runs that walk.
//!
//! [`window_level`] does the same for a window's subtree (`BitDpfKeys::window_whole`): each
//! key's nodes of the next level (or its leaf blocks) are computed as the chosen children of
//! parents blended from two slots, instead of both children of every slot and a select.

use std::ops::Range;

use super::Walk;
use crate::tree::TreeKeys;

/// Levels `levels` of `w`'s descent: at level `i`, lane `k` evaluates key `key(k)` of
/// `tree` and goes in the direction of bit `s0 − 1 − i` of `points[k]`; with `PARITY`, the
/// prefix parity is kept (as [`Walk::descend_all`]).
pub(super) fn descend<const PARITY: bool>(
    w: &mut Walk,
    tree: &TreeKeys,
    levels: Range<u32>,
    key: impl Fn(usize) -> usize,
    points: &[u64],
    s0: u32,
) {
    kernel::descend::<PARITY>(w, tree, levels, key, points, s0);
}

/// A level of a window's subtree (`BitDpfKeys::window_whole`), keys `g0..g0 + rb.len()`:
/// the level's nodes are `p` slots per key, slot-major (`cur.0[s·count + k]`: seed halves
/// and control masks); output `q < outs` of key `k` is the child `q + rb[k]` of those slots
/// (`rb[k]` is 0 or 1), whose hash alone is computed. Above the leaves the outputs go
/// slot-major into [`WindowOut::Nodes`]; at the leaves each output is a leaf block, put at
/// `blocks[k·stride + q + rb[k]]`. Returns `false`, doing nothing, where the build has no
/// VAES (the caller then hashes both children of every slot).
pub(crate) fn window_level(
    tree: &TreeKeys,
    i: u32,
    g0: usize,
    rb: &[u64],
    cur: (&[u64], &[u64], &[u64]),
    outs: usize,
    out: WindowOut<'_>,
) -> bool {
    kernel::window_level(tree, i, g0, rb, cur, outs, out)
}

/// Where [`window_level`] puts its outputs.
#[allow(dead_code)] // (only the VAES kernel reads the fields)
pub(crate) enum WindowOut<'a> {
    /// The next level's slots, slot-major: seed halves and control masks.
    Nodes(&'a mut [u64], &'a mut [u64], &'a mut [u64]),
    /// Leaf blocks, key-major with `stride` blocks per key, corrected by the keys' leaf
    /// correction words (four words per key, from key `g0`).
    Leaves { blocks: &'a mut [u128], stride: usize, leaf_cw: &'a [u64] },
}

/// Without AVX-512 and VAES: the level-by-level walk, and no fused subtree.
#[cfg(not(all(
    target_arch = "x86_64",
    target_feature = "avx512f",
    target_feature = "vaes",
    target_feature = "aes",
    target_feature = "avx512vl"
)))]
mod kernel {
    use std::ops::Range;

    use crate::tree::TreeKeys;
    use crate::walk::Walk;

    pub(super) fn descend<const PARITY: bool>(
        w: &mut Walk,
        tree: &TreeKeys,
        levels: Range<u32>,
        key: impl Fn(usize) -> usize,
        points: &[u64],
        s0: u32,
    ) {
        w.descend_levels_batched::<PARITY>(tree, levels, key, points, s0);
    }

    pub(super) fn window_level(
        _: &TreeKeys,
        _: u32,
        _: usize,
        _: &[u64],
        _: (&[u64], &[u64], &[u64]),
        _: usize,
        _: super::WindowOut<'_>,
    ) -> bool {
        false
    }
}

#[cfg(all(
    target_arch = "x86_64",
    target_feature = "avx512f",
    target_feature = "vaes",
    target_feature = "aes",
    target_feature = "avx512vl"
))]
#[allow(unsafe_code)]
mod kernel {
    use std::arch::x86_64::*;
    use std::ops::Range;
    use std::sync::OnceLock;

    use crate::prg::{FIXED_KEYS, count_blocks};
    use crate::tree::TreeKeys;
    use crate::vaes::kernel::{expand, in_step, load8};
    use crate::walk::Walk;

    /// Lanes walked together: four groups of eight, eight independent AES chains (two
    /// registers of four blocks per group) to cover `vaesenc`'s latency.
    const BATCH: usize = 32;

    /// Levels ahead of the walk that a batch's correction words are prefetched.
    const PREFETCH: u32 = 2;

    /// Round `r` of `H_0`'s AES key (`keys[0][r]`), of `H_1`'s (`keys[1][r]`) and their XOR
    /// (`keys[2][r]`), in every 128-bit lane.
    #[repr(C, align(64))]
    struct RoundKeys([[[u8; 64]; 11]; 3]);

    fn round_keys() -> &'static RoundKeys {
        static KEYS: OnceLock<Box<RoundKeys>> = OnceLock::new();
        KEYS.get_or_init(|| {
            let mut t = Box::new(RoundKeys([[[0; 64]; 11]; 3]));
            let ks = [expand(FIXED_KEYS[0]), expand(FIXED_KEYS[1])];
            for (c, rounds) in t.0.iter_mut().enumerate() {
                for (r, reg) in rounds.iter_mut().enumerate() {
                    let k: [u8; 16] = match c {
                        2 => std::array::from_fn(|b| ks[0][r][b] ^ ks[1][r][b]),
                        _ => ks[c][r],
                    };
                    for lane in reg.chunks_exact_mut(16) {
                        lane.copy_from_slice(&k);
                    }
                }
            }
            t
        })
    }

    /// [`super::descend`] in batches of [`BATCH`] lanes (the last one in the fewest groups
    /// that hold it).
    pub(super) fn descend<const PARITY: bool>(
        w: &mut Walk,
        tree: &TreeKeys,
        levels: Range<u32>,
        key: impl Fn(usize) -> usize,
        points: &[u64],
        s0: u32,
    ) {
        let rk = round_keys();
        let m = points.len();
        let mut at = 0;
        while at < m {
            let l = (m - at).min(BATCH);
            let lv = levels.clone();
            // SAFETY: the build enables the features (the cfg of this module).
            let groups = unsafe {
                match l {
                    25.. => batch::<PARITY, 4>(rk, w, tree, lv, &key, points, at..at + l, s0),
                    17..=24 => batch::<PARITY, 3>(rk, w, tree, lv, &key, points, at..at + l, s0),
                    9..=16 => batch::<PARITY, 2>(rk, w, tree, lv, &key, points, at..at + l, s0),
                    _ => batch::<PARITY, 1>(rk, w, tree, lv, &key, points, at..at + l, s0),
                }
            };
            count_blocks((8 * groups * levels.len()) as u64);
            at += l;
        }
    }

    /// [`super::window_level`] with VAES: eight keys per group, up to four outputs at a time
    /// (two registers of four blocks each, their rounds in step); each output's parent is
    /// blended from its two candidate slots by `rb`.
    pub(super) fn window_level(
        tree: &TreeKeys,
        i: u32,
        g0: usize,
        rb: &[u64],
        cur: (&[u64], &[u64], &[u64]),
        outs: usize,
        mut out: super::WindowOut<'_>,
    ) -> bool {
        let count = rb.len();
        let rk = round_keys();
        let mut at = 0;
        while at < count {
            let real = (0xffu16 >> (8 - (count - at).min(8))) as u8;
            // SAFETY: the build enables the features (the cfg of this module).
            unsafe { window_group(rk, tree, i, g0, rb, cur, outs, &mut out, at, real) };
            at += 8;
        }
        count_blocks((outs * count.next_multiple_of(8)) as u64);
        true
    }

    /// What the outputs of a group of [`window_level`] share.
    struct Group<'a> {
        rk: &'a RoundKeys,
        k0: [__m512i; 11],
        cur: (&'a [u64], &'a [u64], &'a [u64]),
        rb: &'a [u64],
        count: usize,
        at: usize,
        real: u8,
        krb: __mmask8,
        /// Control-bit corrections, seed corrections (nodes) or leaf corrections (leaves:
        /// left low, left high, right low, right high).
        tl: __m512i,
        tr: __m512i,
        cl: __m512i,
        ch: __m512i,
        leaf: [__m512i; 4],
        tcw_bit: __m512i,
    }

    /// The words `v[from..]` of a group's real lanes (zero in the others).
    #[inline(always)]
    fn read_real(v: &[u64], from: usize, real: u8) -> __m512i {
        assert!(from + real.count_ones() as usize <= v.len());
        // SAFETY: the real lanes' words are in bounds (above); the others are not read.
        unsafe { _mm512_maskz_loadu_epi64(real, v.as_ptr().add(from).cast()) }
    }

    /// Keys `g0 + at..` (the lanes of `real`) of [`window_level`].
    #[target_feature(enable = "avx512f,avx512vl,vaes")]
    #[allow(clippy::too_many_arguments)]
    fn window_group(
        rk: &RoundKeys,
        tree: &TreeKeys,
        i: u32,
        g0: usize,
        rb: &[u64],
        cur: (&[u64], &[u64], &[u64]),
        outs: usize,
        out: &mut super::WindowOut<'_>,
        at: usize,
        real: u8,
    ) {
        let n = real.count_ones() as usize;
        let zero = _mm512_setzero_si512();
        let key0 = g0 + at;
        let (mut cl, mut ch, mut leaf) = (zero, zero, [zero; 4]);
        match out {
            super::WindowOut::Nodes(..) => {
                let (sl, sh) = tree.scw_level(i);
                (cl, ch) = (read_real(sl, key0, real), read_real(sh, key0, real));
            }
            super::WindowOut::Leaves { leaf_cw, .. } => {
                leaf = std::array::from_fn(|w| {
                    load8(&std::array::from_fn(|j| leaf_cw[4 * (at + j.min(n - 1)) + w]))
                });
            }
        }
        let g = Group {
            rk,
            // SAFETY: 64 aligned readable bytes each.
            k0: std::array::from_fn(|r| unsafe { _mm512_load_si512(rk.0[0][r].as_ptr().cast()) }),
            cur,
            rb,
            count: rb.len(),
            at,
            real,
            krb: _mm512_test_epi64_mask(read_real(rb, at, real), _mm512_set1_epi64(1)),
            tl: read_real(&tree.tcw_left, key0, real),
            tr: read_real(&tree.tcw_right, key0, real),
            cl,
            ch,
            leaf,
            tcw_bit: _mm512_set1_epi64((1u64 << (i & 63)) as i64),
        };
        let mut q0 = 0;
        while q0 < outs {
            match outs - q0 {
                1 => window_outputs::<1, 2>(&g, q0, out),
                2 => window_outputs::<2, 4>(&g, q0, out),
                3 => window_outputs::<3, 6>(&g, q0, out),
                _ => window_outputs::<4, 8>(&g, q0, out),
            }
            q0 += 4;
        }
    }

    /// Outputs `q0..q0 + M` of a group of [`window_level`], in `R = 2M` registers.
    #[target_feature(enable = "avx512f,avx512vl,vaes")]
    fn window_outputs<const M: usize, const R: usize>(
        g: &Group<'_>,
        q0: usize,
        out: &mut super::WindowOut<'_>,
    ) {
        let zero = _mm512_setzero_si512();
        let one = _mm512_set1_epi64(1);
        let (lo, hi, tm) = g.cur;
        let (mut x, mut km) = ([zero; R], [0u8; R]);
        let (mut plo, mut phi, mut kt, mut kdir) = ([zero; M], [zero; M], [0u8; M], [0u8; M]);
        for c in 0..M {
            let q = q0 + c;
            // Child q + rb of slot (q + rb) / 2, in direction (q + rb) mod 2.
            let (s0, s1) = (q >> 1, (q + 1) >> 1);
            let pick = |v: &[u64]| {
                let a = read_real(v, s0 * g.count + g.at, g.real);
                if s1 == s0 {
                    a
                } else {
                    _mm512_mask_blend_epi64(g.krb, a, read_real(v, s1 * g.count + g.at, g.real))
                }
            };
            (plo[c], phi[c]) = (pick(lo), pick(hi));
            kt[c] = _mm512_test_epi64_mask(pick(tm), one);
            kdir[c] = if q.is_multiple_of(2) { g.krb } else { !g.krb & g.real };
            let (even, odd) = (kdir[c] & 0x55, (kdir[c] & 0xaa) >> 1);
            (km[2 * c], km[2 * c + 1]) = (even | even << 1, odd | odd << 1);
            let sx = _mm512_xor_si512(phi[c], plo[c]);
            x[2 * c] = _mm512_unpacklo_epi64(phi[c], sx);
            x[2 * c + 1] = _mm512_unpackhi_epi64(phi[c], sx);
        }
        // SAFETY: 64 aligned readable bytes.
        let diff = |r: usize| unsafe { _mm512_load_si512(g.rk.0[2][r].as_ptr().cast()) };
        for q in 0..R {
            let y = _mm512_xor_si512(x[q], g.k0[0]);
            x[q] = _mm512_mask_xor_epi64(y, km[q], y, diff(0));
        }
        for (r, &k) in g.k0.iter().enumerate().take(10).skip(1) {
            for q in 0..R {
                let y = _mm512_aesenc_epi128(x[q], k);
                x[q] = _mm512_mask_xor_epi64(y, km[q], y, diff(r));
            }
            in_step(&mut x);
        }
        for q in 0..R {
            let y = _mm512_aesenclast_epi128(x[q], g.k0[10]);
            x[q] = _mm512_mask_xor_epi64(y, km[q], y, diff(10));
        }
        let n = g.real.count_ones() as usize;
        for c in 0..M {
            let q = q0 + c;
            let hl = _mm512_xor_si512(_mm512_unpacklo_epi64(x[2 * c], x[2 * c + 1]), phi[c]);
            let hh = _mm512_ternarylogic_epi64::<0x96>(
                _mm512_unpackhi_epi64(x[2 * c], x[2 * c + 1]),
                phi[c],
                plo[c],
            );
            match out {
                super::WindowOut::Nodes(nlo, nhi, ntm) => {
                    let kh = _mm512_test_epi64_mask(hl, one);
                    let ktcw =
                        _mm512_test_epi64_mask(_mm512_mask_blend_epi64(kdir[c], g.tl, g.tr), g.tcw_bit);
                    let cleared = _mm512_and_si512(hl, _mm512_set1_epi64(-2));
                    let nl = _mm512_mask_xor_epi64(cleared, kt[c], cleared, g.cl);
                    let nh = _mm512_mask_xor_epi64(hh, kt[c], hh, g.ch);
                    let nt = _mm512_maskz_set1_epi64(kh ^ (kt[c] & ktcw), -1);
                    let to = q * g.count + g.at;
                    for (v, w) in [(&mut **nlo, nl), (&mut **nhi, nh), (&mut **ntm, nt)] {
                        assert!(to + n <= v.len());
                        // SAFETY: the real lanes' words are in bounds (above); the others
                        // are not written.
                        unsafe { _mm512_mask_storeu_epi64(v.as_mut_ptr().add(to).cast(), g.real, w) };
                    }
                }
                super::WindowOut::Leaves { blocks, stride, .. } => {
                    // Each lane's leaf correction for its direction, where its t is set.
                    let cw = |w: usize| _mm512_mask_blend_epi64(kdir[c], g.leaf[w], g.leaf[2 + w]);
                    let bl = _mm512_mask_xor_epi64(hl, kt[c], hl, cw(0));
                    let bh = _mm512_mask_xor_epi64(hh, kt[c], hh, cw(1));
                    let (mut vl, mut vh) = ([0u64; 8], [0u64; 8]);
                    // SAFETY: 64 writable bytes each.
                    unsafe {
                        _mm512_storeu_si512(vl.as_mut_ptr().cast(), bl);
                        _mm512_storeu_si512(vh.as_mut_ptr().cast(), bh);
                    }
                    for j in 0..n {
                        let k = g.at + j;
                        let ci = q + (g.rb[k] & 1) as usize;
                        blocks[k * *stride + ci] = vl[j] as u128 | (vh[j] as u128) << 64;
                    }
                }
            }
        }
    }

    /// Walk lanes `lanes` (more than `8·(G − 1)`, at most `8·G`) through `levels` in `G`
    /// groups of eight lanes; returns `G`. The last group's spare lanes start from zero
    /// seeds on the batch's last key; their results are dropped.
    ///
    /// A group keeps its lanes' seed halves, points and control-bit corrections one lane per
    /// 64-bit element (as the level-by-level walk's arrays), and control bits, prefix parity
    /// and last directions as 8-bit masks. Its AES inputs `σ(s) = [hi, hi ⊕ lo]` are two
    /// registers of four blocks, the even lanes' and the odd lanes' (`unpacklo`/`unpackhi`),
    /// and a block going right gets the keys' difference after each round.
    #[target_feature(enable = "avx512f,avx512vl,vaes")]
    #[allow(clippy::too_many_arguments)]
    fn batch<const PARITY: bool, const G: usize>(
        rk: &RoundKeys,
        w: &mut Walk,
        tree: &TreeKeys,
        levels: Range<u32>,
        key: &impl Fn(usize) -> usize,
        points: &[u64],
        lanes: Range<usize>,
        s0: u32,
    ) -> usize {
        let lane = |q: usize| lanes.start + q.min(lanes.len() - 1);
        let keys: [usize; BATCH] = std::array::from_fn(|q| if q < 8 * G { key(lane(q)) } else { 0 });
        // Consecutive keys, every lane real: the correction words are read as slices.
        let first = (lanes.len() == 8 * G && (0..8 * G).all(|q| keys[q] == keys[0] + q)).then_some(keys[0]);
        // Group g's real lanes (at least one: G is the fewest groups that hold the lanes).
        let at = |g: usize| lanes.start + 8 * g;
        let real = |g: usize| (0xffu16 >> (8 - (lanes.len() - 8 * g).min(8))) as u8;
        // Group g's words of a per-lane array of the walk (zero in the spare lanes).
        let read = |v: &[u64], g: usize| {
            assert!(at(g) + real(g).count_ones() as usize <= v.len());
            // SAFETY: the real lanes' words are in bounds (above); the others are not read.
            unsafe { _mm512_maskz_loadu_epi64(real(g), v.as_ptr().add(at(g)).cast()) }
        };
        let per_key = |v: &[u64], g: usize| match first {
            Some(f) => load8(v[f + 8 * g..f + 8 * g + 8].try_into().expect("eight words")),
            None => load8(&std::array::from_fn(|j| v[keys[8 * g + j]])),
        };
        let one = _mm512_set1_epi64(1);
        let zero = _mm512_setzero_si512();
        let (mut lo, mut hi, mut p, mut tl, mut tr) = ([zero; G], [zero; G], [zero; G], [zero; G], [zero; G]);
        let (mut kt, mut kacc, mut kprev) = ([0u8; G], [0u8; G], [0u8; G]);
        for g in 0..G {
            (lo[g], hi[g], p[g]) = (read(&w.lo, g), read(&w.hi, g), read(points, g));
            (tl[g], tr[g]) = (per_key(&tree.tcw_left, g), per_key(&tree.tcw_right, g));
            kt[g] = _mm512_test_epi64_mask(read(&w.t, g), one);
            kacc[g] = _mm512_test_epi64_mask(read(&w.acc, g), one);
            kprev[g] = _mm512_test_epi64_mask(read(&w.prev, g), one);
        }
        let not_one = _mm512_set1_epi64(-2);
        let round = |c: usize, r: usize| {
            // SAFETY: 64 aligned readable bytes.
            unsafe { _mm512_load_si512(rk.0[c][r].as_ptr().cast()) }
        };
        // H_0's round keys; a block going right gets H_1's by XORing in the keys' difference
        // after each round (`vaesenc` adds its round key last).
        let k0: [__m512i; 11] = std::array::from_fn(|r| round(0, r));
        let end = levels.end;
        for i in levels {
            // The correction words of level i + 2 (a level's are a key count apart: without
            // this, a batch's walk down the levels waited on memory at every level).
            if i + PREFETCH < end {
                let (sl, sh) = tree.scw_level(i + PREFETCH);
                for v in [sl, sh] {
                    match first {
                        Some(f) => {
                            for at in (0..8 * G).step_by(8).chain([8 * G - 1]) {
                                _mm_prefetch::<_MM_HINT_T0>(v[f + at..].as_ptr().cast());
                            }
                        }
                        None => {
                            for &q in &keys[..8 * G] {
                                _mm_prefetch::<_MM_HINT_T0>(v[q..].as_ptr().cast());
                            }
                        }
                    }
                }
            }
            let dir_bit = _mm512_set1_epi64((1u64 << (s0 - 1 - i)) as i64);
            let tcw_bit = _mm512_set1_epi64((1u64 << i) as i64);
            let mut kdir = [0u8; G];
            // Register 2g holds group g's even lanes' blocks, 2g + 1 its odd lanes'; `km`
            // sets both halves of a block whose lane goes right.
            let mut x = [zero; 8];
            let mut km = [0u8; 8];
            for g in 0..G {
                kdir[g] = _mm512_test_epi64_mask(p[g], dir_bit);
                let (even, odd) = (kdir[g] & 0x55, (kdir[g] & 0xaa) >> 1);
                (km[2 * g], km[2 * g + 1]) = (even | even << 1, odd | odd << 1);
                let sx = _mm512_xor_si512(hi[g], lo[g]);
                x[2 * g] = _mm512_unpacklo_epi64(hi[g], sx);
                x[2 * g + 1] = _mm512_unpackhi_epi64(hi[g], sx);
            }
            for q in 0..2 * G {
                let y = _mm512_xor_si512(x[q], k0[0]);
                x[q] = _mm512_mask_xor_epi64(y, km[q], y, round(2, 0));
            }
            for (r, &k) in k0.iter().enumerate().take(10).skip(1) {
                for q in 0..2 * G {
                    let y = _mm512_aesenc_epi128(x[q], k);
                    x[q] = _mm512_mask_xor_epi64(y, km[q], y, round(2, r));
                }
                in_step(&mut x);
            }
            for q in 0..2 * G {
                let y = _mm512_aesenclast_epi128(x[q], k0[10]);
                x[q] = _mm512_mask_xor_epi64(y, km[q], y, round(2, 10));
            }
            let (sl, sh) = tree.scw_level(i);
            for g in 0..G {
                // H_c(s) = AES(σ(s)) ⊕ σ(s), back to one lane per element: the low halves
                // are `AES(σ).lo ⊕ hi`, the high halves `AES(σ).hi ⊕ hi ⊕ lo`.
                let hl = _mm512_xor_si512(_mm512_unpacklo_epi64(x[2 * g], x[2 * g + 1]), hi[g]);
                let hh = _mm512_ternarylogic_epi64::<0x96>(
                    _mm512_unpackhi_epi64(x[2 * g], x[2 * g + 1]),
                    hi[g],
                    lo[g],
                );
                let (cl, ch) = (per_key(sl, g), per_key(sh, g));
                let kh = _mm512_test_epi64_mask(hl, one);
                let ktcw = _mm512_test_epi64_mask(_mm512_mask_blend_epi64(kdir[g], tl[g], tr[g]), tcw_bit);
                if PARITY {
                    kacc[g] ^= kt[g] & (kdir[g] ^ kprev[g]);
                    kprev[g] = kdir[g];
                }
                let cleared = _mm512_and_si512(hl, not_one);
                lo[g] = _mm512_mask_xor_epi64(cleared, kt[g], cleared, cl);
                hi[g] = _mm512_mask_xor_epi64(hh, kt[g], hh, ch);
                kt[g] = kh ^ (kt[g] & ktcw);
            }
        }
        // Both halves of the blocks of lanes j..j + 4 of a lane mask.
        let blocks = |m: u8, j: u32| (0..4).fold(0u8, |b, q| b | (((m >> (j + q)) & 1) * (3 << (2 * q))));
        let (first_four, last_four) =
            (_mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0), _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4));
        for g in 0..G {
            let (k, r) = (at(g), real(g));
            // σ(s) = [hi, hi ⊕ lo] of lanes j..j + 4: the halves interleaved.
            let sx = _mm512_xor_si512(hi[g], lo[g]);
            let sig = [
                _mm512_permutex2var_epi64(hi[g], first_four, sx),
                _mm512_permutex2var_epi64(hi[g], last_four, sx),
            ];
            assert!(k + r.count_ones() as usize <= w.lo.len() && w.lo.len() <= w.sig.len());
            // SAFETY: the real lanes' words and blocks are in bounds (above); the others are
            // not written.
            unsafe {
                _mm512_mask_storeu_epi64(w.lo.as_mut_ptr().add(k).cast(), r, lo[g]);
                _mm512_mask_storeu_epi64(w.hi.as_mut_ptr().add(k).cast(), r, hi[g]);
                _mm512_mask_storeu_epi64(
                    w.t.as_mut_ptr().add(k).cast(),
                    r,
                    _mm512_maskz_set1_epi64(kt[g], -1),
                );
                if PARITY {
                    _mm512_mask_storeu_epi64(
                        w.acc.as_mut_ptr().add(k).cast(),
                        r,
                        _mm512_maskz_set1_epi64(kacc[g], -1),
                    );
                    _mm512_mask_storeu_epi64(
                        w.prev.as_mut_ptr().add(k).cast(),
                        r,
                        _mm512_maskz_set1_epi64(kprev[g], -1),
                    );
                }
                for (h, s) in sig.iter().enumerate() {
                    let m = blocks(r, 4 * h as u32);
                    if m != 0 {
                        _mm512_mask_storeu_epi64(w.sig.as_mut_ptr().add(k + 4 * h).cast(), m, *s);
                    }
                }
            }
        }
        G
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{DealerRng, Rng, SeedableRng};

    /// Random trees (every word uniform): the walks must agree on any key material.
    fn random_trees(levels: u32, keys: usize, rng: &mut DealerRng) -> TreeKeys {
        let mut t = TreeKeys::with_capacity(levels, keys);
        for _ in 0..keys {
            t.roots.push((rng.next_u64() as u128) << 64 | rng.next_u64() as u128 & !1);
            t.tcw_left.push(rng.next_u64());
            t.tcw_right.push(rng.next_u64());
        }
        for _ in 0..keys * levels as usize {
            t.scw_lo.push(rng.next_u64());
            t.scw_hi.push(rng.next_u64());
        }
        t
    }

    fn state(w: &Walk) -> Vec<(u64, u64, u64, u64, u64, u128)> {
        (0..w.lo.len())
            .map(|k| (w.lo[k], w.hi[k], w.t[k], w.acc[k], w.prev[k], crate::prg::from_block(&w.sig[k])))
            .collect()
    }

    /// Fused and level-by-level walks end in the same state (seeds, control and parity
    /// masks, σ inputs) for every batch shape (1 to 70 lanes: full and partial registers and
    /// batches), consecutive and scattered keys, with and without parity, from the root and
    /// resumed mid-tree; and count the AES they compute.
    #[test]
    fn fused_walk_equals_level_by_level() {
        let mut rng = DealerRng::seed_from_u64(11);
        let (levels, nkeys) = (20u32, 90usize);
        let trees = random_trees(levels, nkeys, &mut rng);
        for m in (1..=36).chain([47, 64, 65, 70]) {
            let points: Vec<u64> = (0..m).map(|_| rng.next_u64() & ((1 << levels) - 1)).collect();
            let scattered: Vec<usize> = (0..m).map(|_| rng.next_u64() as usize % nkeys).collect();
            for consecutive in [true, false] {
                let key = |k: usize| if consecutive { 3 + k } else { scattered[k] };
                for (range, party) in [(0..levels, 0u8), (0..levels, 1), (5..17, 1)] {
                    let fresh = || {
                        let mut w = Walk::new(m, |k| trees.roots[key(k)], party);
                        if range.start > 0 {
                            // Resumed: arbitrary mid-tree state.
                            for k in 0..m {
                                w.t[k] = (rng_bit(k, 1) as u64).wrapping_neg();
                                w.acc[k] = (rng_bit(k, 2) as u64).wrapping_neg();
                                w.prev[k] = (rng_bit(k, 3) as u64).wrapping_neg();
                            }
                        }
                        w
                    };
                    let (mut a, mut b) = (fresh(), fresh());
                    a.descend_levels_batched::<true>(&trees, range.clone(), key, &points, levels);
                    let before = crate::prg::aes_blocks();
                    descend::<true>(&mut b, &trees, range.clone(), key, &points, levels);
                    assert!(crate::prg::aes_blocks() - before >= (m * range.len()) as u64);
                    assert_eq!(state(&a), state(&b), "m = {m}, consecutive = {consecutive}, {range:?}");
                    let (mut a, mut b) = (fresh(), fresh());
                    a.descend_levels_batched::<false>(&trees, range.clone(), key, &points, levels);
                    descend::<false>(&mut b, &trees, range.clone(), key, &points, levels);
                    assert_eq!(state(&a), state(&b));
                }
            }
        }
    }

    fn rng_bit(k: usize, salt: usize) -> bool {
        (k.wrapping_mul(0x9e37_79b9) >> salt) & 1 == 1
    }
}
