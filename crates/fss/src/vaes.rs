//! VAES building blocks of the fused kernels (`crate::walk::fused`) and the dealer's level
//! hashes: the fixed keys' AES-128 key schedules, a barrier that keeps registers' AES rounds
//! in step, and [`hash_halves`], which hashes the dealer's seeds eight at a time in
//! registers. Only the kernel module below uses `unsafe`, behind the cfg
//! `avx512f+avx512vl+vaes+aes`; elsewhere [`hash_halves`] declines and the callers use the
//! `aes` crate over block arrays.

use crate::prg::HashKey;

/// `outs[c] = H_{keys[c].0}(s ⊕ τ_c)` as halves for every seed `s` given by its halves
/// `seeds` (the tweak `τ_c = keys[c].1` in the seed's low half): the dealer's level
/// expansion ([`crate::tree::DealerTrees::expand`]), as [`crate::prg::Prg::hash_halves_tweaked`]
/// computes it. With VAES, eight seeds at a time stay in registers, their `σ` blocks formed
/// there and every hash's AES run in step, instead of passes over block arrays. Returns
/// `false`, doing nothing, where the build has no VAES or for more than four hashes.
///
/// # Panics
/// If the slices differ in length (a caller bug, never input-driven).
pub(crate) fn hash_halves<const K: usize>(
    keys: [(HashKey, u64); K],
    seeds: (&[u64], &[u64]),
    outs: &mut [(&mut [u64], &mut [u64]); K],
) -> bool {
    let n = seeds.0.len();
    assert!(
        seeds.1.len() == n && outs.iter().all(|(l, h)| l.len() == n && h.len() == n),
        "hash_halves: length mismatch"
    );
    kernel::hash_halves(keys, seeds, outs)
}

/// Without AVX-512 and VAES: the dealer hashes over block arrays (the caller's fallback).
#[cfg(not(all(
    target_arch = "x86_64",
    target_feature = "avx512f",
    target_feature = "vaes",
    target_feature = "aes",
    target_feature = "avx512vl"
)))]
mod kernel {
    pub(super) fn hash_halves<const K: usize>(
        _: [(crate::prg::HashKey, u64); K],
        _: (&[u64], &[u64]),
        _: &mut [(&mut [u64], &mut [u64]); K],
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
pub(crate) mod kernel {
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    use crate::prg::{FIXED_KEYS, HashKey, count_blocks};

    /// The AES-128 key schedule of `key` (FIPS 197 §5.2): its eleven round keys.
    pub(crate) fn expand(key: [u8; 16]) -> [[u8; 16]; 11] {
        // SAFETY: the build enables AES-NI (the cfg of this module).
        unsafe { expand_ni(key) }
    }

    #[target_feature(enable = "aes,sse2")]
    fn expand_ni(key: [u8; 16]) -> [[u8; 16]; 11] {
        let mut out = [[0u8; 16]; 11];
        // SAFETY: 16 readable bytes.
        let mut k = unsafe { _mm_loadu_si128(key.as_ptr().cast()) };
        // Round key r + 1 from round key r: the last word's `SubWord(RotWord(·)) ⊕ rcon`
        // (from `aeskeygenassist`) XORed into the running XOR of the four words.
        macro_rules! next {
            ($r:expr, $rcon:expr) => {
                // SAFETY: 16 writable bytes.
                unsafe { _mm_storeu_si128(out[$r].as_mut_ptr().cast(), k) };
                let t = _mm_shuffle_epi32::<0xff>(_mm_aeskeygenassist_si128::<$rcon>(k));
                k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
                k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
                k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
                k = _mm_xor_si128(k, t);
            };
        }
        next!(0, 0x01);
        next!(1, 0x02);
        next!(2, 0x04);
        next!(3, 0x08);
        next!(4, 0x10);
        next!(5, 0x20);
        next!(6, 0x40);
        next!(7, 0x80);
        next!(8, 0x1b);
        next!(9, 0x36);
        // SAFETY: 16 writable bytes.
        unsafe { _mm_storeu_si128(out[10].as_mut_ptr().cast(), k) };
        out
    }

    /// `AES_K(x)` from `K`'s round keys ([`expand`]): the tests' check of the schedule
    /// against the `aes` crate.
    #[cfg(test)]
    pub(super) fn encrypt_with(rk: &[[u8; 16]; 11], x: [u8; 16]) -> [u8; 16] {
        #[target_feature(enable = "aes,sse2")]
        fn run(rk: &[[u8; 16]; 11], x: [u8; 16]) -> [u8; 16] {
            // SAFETY: 16 readable bytes each.
            let key = |r: usize| unsafe { _mm_loadu_si128(rk[r].as_ptr().cast()) };
            // SAFETY: as above.
            let mut b = _mm_xor_si128(unsafe { _mm_loadu_si128(x.as_ptr().cast()) }, key(0));
            for r in 1..10 {
                b = _mm_aesenc_si128(b, key(r));
            }
            b = _mm_aesenclast_si128(b, key(10));
            let mut out = [0u8; 16];
            // SAFETY: 16 writable bytes.
            unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), b) };
            out
        }
        // SAFETY: the build enables AES-NI (the cfg of this module).
        unsafe { run(rk, x) }
    }

    /// Round `r` of each fixed key's AES key (`keys[j][r]` for `H_j`), in every 128-bit lane.
    #[repr(C, align(64))]
    struct HashRoundKeys([[[u8; 64]; 11]; 4]);

    fn hash_round_keys() -> &'static HashRoundKeys {
        static KEYS: OnceLock<Box<HashRoundKeys>> = OnceLock::new();
        KEYS.get_or_init(|| {
            let mut t = Box::new(HashRoundKeys([[[0; 64]; 11]; 4]));
            for (j, rounds) in t.0.iter_mut().enumerate() {
                let ks = expand(FIXED_KEYS[j]);
                for (reg, k) in rounds.iter_mut().zip(&ks) {
                    for lane in reg.chunks_exact_mut(16) {
                        lane.copy_from_slice(k);
                    }
                }
            }
            t
        })
    }

    /// [`super::hash_halves`] with VAES: sixteen AES chains at a time (`K` hashes of `8/K`
    /// groups of eight seeds, two registers of four blocks each; with eight chains criterion
    /// `keygen/dcf_n50_l64_k1` took 815–859 µs, with sixteen 766–787).
    pub(super) fn hash_halves<const K: usize>(
        keys: [(HashKey, u64); K],
        seeds: (&[u64], &[u64]),
        outs: &mut [(&mut [u64], &mut [u64]); K],
    ) -> bool {
        let rk = hash_round_keys();
        // SAFETY: the build enables the features (the cfg of this module); `K` and `G`
        // match the register count (`2·K·G = 8`).
        unsafe {
            match K {
                1 => hash_run::<K, 8, 16>(rk, keys, seeds, outs),
                2 => hash_run::<K, 4, 16>(rk, keys, seeds, outs),
                4 => hash_run::<K, 2, 16>(rk, keys, seeds, outs),
                _ => return false,
            }
        }
        count_blocks((K * seeds.0.len()) as u64);
        true
    }

    /// The seeds of [`hash_halves`] in runs of `G` groups of eight (`R = 2·K·G` registers, a
    /// multiple of eight): register `2(c·G + g) + h`
    /// holds hash `c`'s `σ` blocks of group `g`'s even (`h = 0`) or odd seeds, `σ(s ⊕ τ) =
    /// [hi, hi ⊕ lo ⊕ τ]`; the feed-forward and the halves' transposition back are done in
    /// registers. A run's groups past the seeds load nothing and store nothing.
    #[target_feature(enable = "avx512f,avx512vl,vaes")]
    fn hash_run<const K: usize, const G: usize, const R: usize>(
        rk: &HashRoundKeys,
        keys: [(HashKey, u64); K],
        (lo, hi): (&[u64], &[u64]),
        outs: &mut [(&mut [u64], &mut [u64]); K],
    ) {
        let n = lo.len();
        assert!(
            2 * K * G == R
                && R.is_multiple_of(8)
                && hi.len() == n
                && outs.iter().all(|(l, h)| l.len() == n && h.len() == n)
        );
        let zero = _mm512_setzero_si512();
        let tweak: [__m512i; K] = std::array::from_fn(|c| _mm512_set1_epi64(keys[c].1 as i64));
        let key = |c: usize, r: usize| {
            // SAFETY: 64 aligned readable bytes.
            unsafe { _mm512_load_si512(rk.0[keys[c].0 as usize][r].as_ptr().cast()) }
        };
        let mut at = 0;
        while at < n {
            let mut real = [0u8; G];
            let (mut plo, mut phi) = ([zero; G], [zero; G]);
            for (g, ((rg, pl), ph)) in real.iter_mut().zip(&mut plo).zip(&mut phi).enumerate() {
                let from = (at + 8 * g).min(n);
                *rg = (0xffu16 >> (8 - (n - from).min(8))) as u8;
                // SAFETY: the real lanes' words are in bounds (`from + count ≤ n`); the
                // others are not read.
                unsafe {
                    *pl = _mm512_maskz_loadu_epi64(*rg, lo.as_ptr().add(from).cast());
                    *ph = _mm512_maskz_loadu_epi64(*rg, hi.as_ptr().add(from).cast());
                }
            }
            // `hi ⊕ lo ⊕ τ` (0x96: three-way XOR).
            let sx = |c: usize, g: usize| _mm512_ternarylogic_epi64::<0x96>(phi[g], plo[g], tweak[c]);
            let mut x = [zero; R];
            for (c, hash) in x.chunks_exact_mut(2 * G).enumerate() {
                for (g, b) in hash.chunks_exact_mut(2).enumerate() {
                    let s = sx(c, g);
                    b[0] = _mm512_xor_si512(_mm512_unpacklo_epi64(phi[g], s), key(c, 0));
                    b[1] = _mm512_xor_si512(_mm512_unpackhi_epi64(phi[g], s), key(c, 0));
                }
            }
            for r in 1..10 {
                for (c, hash) in x.chunks_exact_mut(2 * G).enumerate() {
                    let k = key(c, r);
                    hash.iter_mut().for_each(|b| *b = _mm512_aesenc_epi128(*b, k));
                }
                for h in x.chunks_exact_mut(8) {
                    in_step(<&mut [__m512i; 8]>::try_from(h).expect("eight registers"));
                }
            }
            for (c, hash) in x.chunks_exact_mut(2 * G).enumerate() {
                let k = key(c, 10);
                hash.iter_mut().for_each(|b| *b = _mm512_aesenclast_epi128(*b, k));
            }
            for (c, ((dl, dh), hash)) in outs.iter_mut().zip(x.chunks_exact(2 * G)).enumerate() {
                for (g, b) in hash.chunks_exact(2).enumerate() {
                    // H(s) = AES(σ) ⊕ σ, back to one seed per 64-bit element.
                    let ol = _mm512_xor_si512(_mm512_unpacklo_epi64(b[0], b[1]), phi[g]);
                    let oh = _mm512_xor_si512(_mm512_unpackhi_epi64(b[0], b[1]), sx(c, g));
                    let from = (at + 8 * g).min(n);
                    // SAFETY: as the loads: only the real lanes' words are written.
                    unsafe {
                        _mm512_mask_storeu_epi64(dl.as_mut_ptr().add(from).cast(), real[g], ol);
                        _mm512_mask_storeu_epi64(dh.as_mut_ptr().add(from).cast(), real[g], oh);
                    }
                }
            }
            at += 8 * G;
        }
    }

    /// Eight words as a register.
    #[inline(always)]
    pub(crate) fn load8(v: &[u64; 8]) -> __m512i {
        // SAFETY: 64 readable bytes.
        unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
    }

    /// Keep the registers' AES rounds in step: round `r + 1` of any register is issued after
    /// round `r` of all of them. (Without this, LLVM emitted each register's ten rounds one
    /// after the other, a chain of dependent `vaesenc` that filled the scheduler.) An empty
    /// `asm!` that reads and writes every register is a point no instruction moves across.
    #[inline(always)]
    pub(crate) fn in_step<const R: usize>(x: &mut [__m512i; R]) {
        use std::arch::asm;
        // SAFETY: the assembly is empty: it only pins the registers' values to this point.
        unsafe {
            match x.as_mut_slice() {
                [a, b, c, d, e, f, g, h] => asm!(
                    "/* {0} {1} {2} {3} {4} {5} {6} {7} */",
                    inout(zmm_reg) * a,
                    inout(zmm_reg) * b,
                    inout(zmm_reg) * c,
                    inout(zmm_reg) * d,
                    inout(zmm_reg) * e,
                    inout(zmm_reg) * f,
                    inout(zmm_reg) * g,
                    inout(zmm_reg) * h,
                    options(pure, nomem, nostack, preserves_flags)
                ),
                [a, b, c, d, e, f] => asm!(
                    "/* {0} {1} {2} {3} {4} {5} */",
                    inout(zmm_reg) * a,
                    inout(zmm_reg) * b,
                    inout(zmm_reg) * c,
                    inout(zmm_reg) * d,
                    inout(zmm_reg) * e,
                    inout(zmm_reg) * f,
                    options(pure, nomem, nostack, preserves_flags)
                ),
                [a, b, c, d] => asm!(
                    "/* {0} {1} {2} {3} */",
                    inout(zmm_reg) * a,
                    inout(zmm_reg) * b,
                    inout(zmm_reg) * c,
                    inout(zmm_reg) * d,
                    options(pure, nomem, nostack, preserves_flags)
                ),
                [a, b] => asm!(
                    "/* {0} {1} */",
                    inout(zmm_reg) * a,
                    inout(zmm_reg) * b,
                    options(pure, nomem, nostack, preserves_flags)
                ),
                _ => {}
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// The key schedule gives the `aes` crate's ciphertexts under both walk keys.
        #[test]
        fn key_schedule_matches_the_aes_crate() {
            use crate::prg::{FIXED_KEYS, HashKey, Prg};
            let prg = Prg::global();
            for (j, hk) in [HashKey::Left, HashKey::Right, HashKey::ValueLeft, HashKey::ValueRight]
                .into_iter()
                .enumerate()
            {
                let rk = expand(FIXED_KEYS[j]);
                for x in [0u128, 1, u128::MAX, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210] {
                    // H_j(x) = AES(σ(x)) ⊕ σ(x).
                    let s = crate::prg::sigma(x);
                    let aes = u128::from_le_bytes(encrypt_with(&rk, s.to_le_bytes()));
                    assert_eq!(aes ^ s, prg.hash(hk, x));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{DealerRng, Rng, SeedableRng};

    /// The dealer's hashes in registers equal `Prg::hash_halves_tweaked`'s, for one, two and
    /// four hashes with and without tweaks, and seed counts that fill the register groups
    /// or not; words past the seeds are untouched.
    #[test]
    fn dealer_hashes_equal_the_block_arrays() {
        let prg = crate::prg::Prg::global();
        let mut rng = DealerRng::seed_from_u64(11);
        let vaes = cfg!(all(
            target_arch = "x86_64",
            target_feature = "avx512f",
            target_feature = "vaes",
            target_feature = "aes",
            target_feature = "avx512vl"
        ));
        for n in [0usize, 1, 5, 8, 9, 16, 17, 31, 33, 64, 100, 257] {
            let lo: Vec<u64> = (0..n).map(|_| rng.next_u64()).collect();
            let hi: Vec<u64> = (0..n).map(|_| rng.next_u64()).collect();
            fn check<const K: usize>(
                prg: &crate::prg::Prg,
                keys: [(HashKey, u64); K],
                seeds: (&[u64], &[u64]),
                vaes: bool,
            ) {
                // The first `n` words of each output pair, as the hashes take them.
                fn outs<const K: usize>(
                    v: &mut [(Vec<u64>, Vec<u64>)],
                    n: usize,
                ) -> [(&mut [u64], &mut [u64]); K] {
                    let mut it = v.iter_mut();
                    std::array::from_fn(|_| {
                        let (l, h) = it.next().expect("K outputs");
                        (&mut l[..n], &mut h[..n])
                    })
                }
                let n = seeds.0.len();
                let mut want = vec![(vec![0u64; n], vec![0u64; n]); K];
                prg.hash_halves_tweaked(keys, seeds, outs(&mut want, n));
                // One spare word past the seeds, which must keep its value.
                let mut got = vec![(vec![7u64; n + 1], vec![7u64; n + 1]); K];
                assert_eq!(hash_halves(keys, seeds, &mut outs(&mut got, n)), vaes);
                if !vaes {
                    return;
                }
                for (c, ((wl, wh), (gl, gh))) in want.iter().zip(&got).enumerate() {
                    assert_eq!(&gl[..n], &wl[..], "n = {n}, hash {c}: low halves");
                    assert_eq!(&gh[..n], &wh[..], "n = {n}, hash {c}: high halves");
                    assert_eq!((gl[n], gh[n]), (7, 7), "n = {n}: a word past the seeds");
                }
            }
            let seeds = (&lo[..], &hi[..]);
            check(prg, [(HashKey::ValueRight, 0)], seeds, vaes);
            check(prg, [(HashKey::Left, 0), (HashKey::Right, 0)], seeds, vaes);
            check(prg, [(HashKey::Right, 5), (HashKey::ValueLeft, u64::MAX)], seeds, vaes);
            check(
                prg,
                [(HashKey::Left, 0), (HashKey::Right, 0), (HashKey::ValueLeft, 3), (HashKey::ValueLeft, 4)],
                seeds,
                vaes,
            );
        }
    }
}
