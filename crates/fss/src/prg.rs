//! The pseudorandom generator behind every tree: fixed-key AES in the circular
//! correlation-robust Matyas–Meyer–Oseas form (docs/design/fss-building-blocks.md §2.2).
//!
//! ```text
//! σ(hi‖lo) = (hi ⊕ lo)‖hi
//! H_j(x)   = AES_{K_j}(σ(x)) ⊕ σ(x)        j = 0..3, K_j fixed and public
//! ```
//!
//! `H_0`/`H_1` expand a seed into its left/right child, `H_2`/`H_3` into the DCF value of
//! the left/right child. Blocks are `u128` read from 16 little-endian bytes, so bit 0 of
//! byte 0 is the least significant bit, which the trees use as the control bit.
//!
//! AES costs ~0.3 ns per block when it is called on many blocks at once and ~12 ns one
//! block at a time, so every evaluator in this crate fills a buffer of σ-inputs for a whole
//! tree level and calls [`Prg::encrypt`] once per key index. The `aes` crate picks AES-NI or
//! VAES at run time.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use aes::Aes128Enc;
use aes::cipher::{BlockCipherEncrypt, KeyInit};

/// Blocks the `aes` crate's widest backend encrypts per step: calls are padded to a multiple
/// (a remainder would be encrypted one block at a time, ~4× slower per block).
pub(crate) const PAR: usize = 64;

/// `n` rounded up to a multiple of [`PAR`].
#[inline]
pub(crate) fn pad(n: usize) -> usize {
    n.next_multiple_of(PAR)
}

/// An AES block as the `aes` crate stores it.
pub type AesBlock = aes::Block;

/// Which of the four fixed-key hashes to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum HashKey {
    /// `H_0`: left child seed.
    Left = 0,
    /// `H_1`: right child seed.
    Right = 1,
    /// `H_2`: value words of the left child (DCF), leaf conversion of wide payloads.
    ValueLeft = 2,
    /// `H_3`: value words of the right child (DCF).
    ValueRight = 3,
}

impl HashKey {
    /// The child-seed hash for direction `bit` (0 = left, 1 = right).
    #[inline]
    pub fn child(bit: u64) -> HashKey {
        if bit & 1 == 0 { HashKey::Left } else { HashKey::Right }
    }

    /// The value hash for direction `bit` (0 = left, 1 = right).
    #[inline]
    pub fn value(bit: u64) -> HashKey {
        if bit & 1 == 0 { HashKey::ValueLeft } else { HashKey::ValueRight }
    }
}

/// `K_j = SHA-256("fss-theory/prg/key/" ‖ j)[0..16]`, the public keys of the convention
/// (docs/design/fss-building-blocks.md §2.2); the known-answer tests pin them.
pub(crate) const FIXED_KEYS: [[u8; 16]; 4] = [
    [0x4e, 0xcd, 0xc3, 0x82, 0x95, 0x66, 0x9a, 0xc1, 0xe3, 0x75, 0x2d, 0xe6, 0x80, 0xed, 0x14, 0x81],
    [0x84, 0xb6, 0xcf, 0x37, 0xaa, 0x8d, 0x0a, 0xec, 0x6f, 0x87, 0x52, 0xc9, 0x9b, 0xf3, 0x8c, 0xa9],
    [0x33, 0xad, 0x54, 0xfd, 0x2a, 0x63, 0xdd, 0xf0, 0x98, 0x7e, 0x86, 0x63, 0x41, 0x58, 0x8e, 0xd7],
    [0x56, 0x5d, 0x1f, 0x60, 0xfe, 0x07, 0x82, 0xb0, 0x17, 0xd0, 0xe5, 0x1d, 0xb7, 0x22, 0x5c, 0xf9],
];

/// AES blocks encrypted through [`Prg`], by every thread of the process.
static AES_BLOCKS: AtomicU64 = AtomicU64::new(0);

/// AES blocks encrypted through [`Prg`] so far, by every thread of the process: the
/// benchmarks' measure of FSS work (`aes_blocks`), taken before and after what they time.
pub fn aes_blocks() -> u64 {
    AES_BLOCKS.load(Ordering::Relaxed)
}

/// AES blocks of counter-mode streams, by every thread of the process: the dealer's
/// randomness ([`crate::rng::DealerRng`]), the pads and root streams of seeded keys
/// ([`crate::pad`]). Not in [`aes_blocks`]: a key generation's AES is the two together
/// (`bench model`'s `keygen_aes_blocks`), and a server's online count stays its trees'.
static STREAM_BLOCKS: AtomicU64 = AtomicU64::new(0);

/// AES blocks of counter-mode streams so far, by every thread of the process (see
/// [`STREAM_BLOCKS`]).
pub fn stream_blocks() -> u64 {
    STREAM_BLOCKS.load(Ordering::Relaxed)
}

/// Count `n` blocks of a counter-mode stream.
#[inline]
pub(crate) fn count_stream_blocks(n: u64) {
    STREAM_BLOCKS.fetch_add(n, Ordering::Relaxed);
}

/// Count `n` blocks encrypted outside [`Prg`] (the fused walk's own AES rounds).
#[inline]
#[allow(dead_code)] // (only the VAES walk calls it)
pub(crate) fn count_blocks(n: u64) {
    AES_BLOCKS.fetch_add(n, Ordering::Relaxed);
}

/// The four fixed-key AES instances. Use [`Prg::global`]; the key schedules are computed once.
pub struct Prg {
    ciphers: [Aes128Enc; 4],
}

impl std::fmt::Debug for Prg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prg(fixed-key σ-MMO)")
    }
}

impl Prg {
    fn new() -> Prg {
        Prg { ciphers: FIXED_KEYS.map(|k| Aes128Enc::new(&k.into())) }
    }

    /// The process-wide instance (the keys are public constants).
    pub fn global() -> &'static Prg {
        static PRG: OnceLock<Prg> = OnceLock::new();
        PRG.get_or_init(Prg::new)
    }

    /// `H_j(x)` for one block. Slow path (~12 ns); hot loops use [`Prg::encrypt`].
    pub fn hash(&self, j: HashKey, x: u128) -> u128 {
        let s = sigma(x);
        let mut blk = to_block(s);
        AES_BLOCKS.fetch_add(1, Ordering::Relaxed);
        self.ciphers[j as usize].encrypt_block(&mut blk);
        from_block(&blk) ^ s
    }

    /// `out[i] = H_j(input[i])` for a whole slice (the batched form of [`Prg::hash`]).
    ///
    /// # Panics
    /// If the slices differ in length (a caller bug, never input-driven).
    pub fn hash_many(&self, j: HashKey, input: &[u128], out: &mut [u128]) {
        assert_eq!(input.len(), out.len(), "hash_many: length mismatch");
        const STEP: usize = 256;
        let mut sig = [AesBlock::default(); STEP];
        let mut enc = [AesBlock::default(); STEP];
        for (inp, o) in input.chunks(STEP).zip(out.chunks_mut(STEP)) {
            let m = inp.len();
            for (d, &x) in sig[..m].iter_mut().zip(inp) {
                *d = to_block(sigma(x));
            }
            // Whole 64-block batches: a remainder would be encrypted one block at a time.
            let padded = pad(m);
            self.encrypt(j, &sig[..padded], &mut enc[..padded]);
            for k in 0..m {
                o[k] = from_block(&enc[k]) ^ from_block(&sig[k]);
            }
        }
    }

    /// `outs[c] = H_{keys[c]}(x)` for every seed `x` given by its halves `(lo, hi)` and every
    /// key, as halves: `σ` computed once for all of them (the dealer's level expansion: both
    /// children, and a DCF's values too).
    ///
    /// # Panics
    /// If the slices differ in length (a caller bug, never input-driven).
    pub fn hash_halves<const K: usize>(
        &self,
        keys: [HashKey; K],
        seeds: (&[u64], &[u64]),
        outs: [(&mut [u64], &mut [u64]); K],
    ) {
        self.hash_halves_tweaked(keys.map(|k| (k, 0)), seeds, outs);
    }

    /// As [`Prg::hash_halves`], output `c` being `H_{k}(x ⊕ τ)` for `keys[c] = (k, τ)`, the
    /// tweak `τ` XORed into the seed's low half (a DCF's value blocks for `K > 1` words):
    /// `σ(x ⊕ τ) = σ(x) ⊕ σ(τ)`, so `σ` is still computed once.
    ///
    /// # Panics
    /// As [`Prg::hash_halves`].
    pub fn hash_halves_tweaked<const K: usize>(
        &self,
        keys: [(HashKey, u64); K],
        (lo, hi): (&[u64], &[u64]),
        mut outs: [(&mut [u64], &mut [u64]); K],
    ) {
        let n = lo.len();
        assert!(
            hi.len() == n && outs.iter().all(|(l, h)| l.len() == n && h.len() == n),
            "hash_halves: length mismatch"
        );
        const STEP: usize = 256;
        let mut sig = [AesBlock::default(); STEP];
        let mut tweaked = [AesBlock::default(); STEP];
        let mut enc = [AesBlock::default(); STEP];
        for at in (0..n).step_by(STEP) {
            let m = STEP.min(n - at);
            let (l, h) = (&lo[at..at + m], &hi[at..at + m]);
            // σ(hi‖lo) = (hi ⊕ lo)‖hi: the block's low half is `hi`, its high half `hi ⊕ lo`.
            for ((d, &l), &h) in sig[..m].iter_mut().zip(l).zip(h) {
                *d = block(h, h ^ l);
            }
            let padded = pad(m);
            for (&(j, tweak), (ol, oh)) in keys.iter().zip(outs.iter_mut()) {
                // σ(τ) has `τ` in its high half only.
                let input = if tweak == 0 {
                    &sig[..padded]
                } else {
                    for ((d, &l), &h) in tweaked[..m].iter_mut().zip(l).zip(h) {
                        *d = block(h, h ^ l ^ tweak);
                    }
                    &tweaked[..padded]
                };
                self.encrypt(j, input, &mut enc[..padded]);
                let (ol, oh) = (&mut ol[at..at + m], &mut oh[at..at + m]);
                for k in 0..m {
                    let (el, eh) = halves(&enc[k]);
                    ol[k] = el ^ h[k];
                    oh[k] = eh ^ h[k] ^ l[k] ^ tweak;
                }
            }
        }
    }

    /// Raw batched AES: `out[i] = AES_{K_j}(input[i])`. The caller supplies σ-inputs and
    /// XORs them back in to complete `H_j`.
    ///
    /// # Panics
    /// If the slices differ in length (a caller bug, never input-driven).
    #[inline]
    pub fn encrypt(&self, j: HashKey, input: &[AesBlock], out: &mut [AesBlock]) {
        AES_BLOCKS.fetch_add(input.len() as u64, Ordering::Relaxed);
        self.ciphers[j as usize]
            .encrypt_blocks_b2b(input, out)
            .expect("encrypt: input and output lengths differ");
    }
}

/// The low and high halves of an AES block (little-endian).
#[inline(always)]
pub(crate) fn halves(b: &AesBlock) -> (u64, u64) {
    (
        u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
    )
}

/// The block with halves `lo`, `hi`.
#[inline(always)]
pub(crate) fn block(lo: u64, hi: u64) -> AesBlock {
    let mut b = AesBlock::default();
    b[..8].copy_from_slice(&lo.to_le_bytes());
    b[8..].copy_from_slice(&hi.to_le_bytes());
    b
}

/// The linear orthomorphism σ(hi‖lo) = (hi ⊕ lo)‖hi of the σ-MMO construction.
#[inline(always)]
pub fn sigma(x: u128) -> u128 {
    let hi = x >> 64;
    let lo = x & (u64::MAX as u128);
    ((hi ^ lo) << 64) | hi
}

/// A `u128` as an AES block (little-endian bytes).
#[inline(always)]
pub fn to_block(x: u128) -> AesBlock {
    x.to_le_bytes().into()
}

/// An AES block as a `u128` (little-endian bytes).
#[inline(always)]
pub fn from_block(b: &AesBlock) -> u128 {
    u128::from_le_bytes(b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fips197_aes128_vector() {
        let key: [u8; 16] = core::array::from_fn(|i| i as u8);
        let aes = Aes128Enc::new(&key.into());
        let pt: [u8; 16] =
            [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];
        let mut blk: AesBlock = pt.into();
        aes.encrypt_block(&mut blk);
        let want: [u8; 16] =
            [0x69, 0xc4, 0xe0, 0xd8, 0x6a, 0x7b, 0x04, 0x30, 0xd8, 0xcd, 0xb7, 0x80, 0x70, 0xb4, 0xc5, 0x5a];
        assert_eq!(blk.0, want);
    }

    #[test]
    fn batched_hash_equals_single() {
        let prg = Prg::global();
        let xs: Vec<u128> =
            (0..1000u128).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)).collect();
        for j in [HashKey::Left, HashKey::Right, HashKey::ValueLeft, HashKey::ValueRight] {
            let mut out = vec![0u128; xs.len()];
            prg.hash_many(j, &xs, &mut out);
            for (x, o) in xs.iter().zip(&out) {
                assert_eq!(*o, prg.hash(j, *x));
            }
        }
    }

    #[test]
    fn sigma_is_linear_and_invertible() {
        let x = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210u128;
        let y = 0xdead_beef_0000_1111_2222_3333_4444_5555u128;
        assert_eq!(sigma(x ^ y), sigma(x) ^ sigma(y));
        assert_ne!(sigma(x), sigma(y));
    }
}
