//! Randomness for the dealer.
//!
//! Every `gen` function takes the RNG explicitly (`&mut impl CryptoRng`), so tests can seed
//! it. Production code uses [`os_rng`]: AES-128 in counter mode keyed from the operating
//! system's CSPRNG (docs/design/brief.md §4).

use std::cell::RefCell;
use std::convert::Infallible;

use aes::Aes128Enc;
use aes::cipher::{BlockCipherEncrypt, KeyInit};
pub use rand_core::{CryptoRng, Rng, SeedableRng};
use rand_core::{TryCryptoRng, TryRng};
use zeroize::Zeroize;

use crate::prg::AesBlock;

use crate::pad::{PadSeed, RootStream};
use crate::tree::SEED_MASK;

/// The dealer's cryptographically secure generator: AES-128 in counter mode (the block
/// cipher of NIST SP 800-90A's CTR_DRBG), seeded with a 128-bit key and a 128-bit starting
/// counter. It replaced ChaCha12, whose refills were ~12 % of the compiled operators' key
/// generation (`perf`, `bench ops --ops gelu`); AES on the VAES units costs ~0.3 ns per 16
/// bytes when it gets `prg::PAR` (64) blocks at a time, so a refill is that many blocks
/// (16 at a time went block by block through the cipher's one-block path: the refills were
/// 15 % of the compiled GeLU's key generation).
#[derive(Clone)]
pub struct DealerRng {
    cipher: Aes128Enc,
    counter: u128,
    /// The current refill (on the heap: the generator is moved around by value) and the
    /// next word of it to hand out.
    words: Box<[u64; WORDS]>,
    next: usize,
    /// How the dealer's values are split with this generator ([`SplitRng`]).
    split: Split,
}

/// How the dealer splits a value `v` into additive shares with a generator
/// (`gates::dealer::share`): a gate's dealing takes it from the generator it is given, so
/// that it cannot leak into another dealing that runs on the same thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Split {
    /// `(a, v − a)` with `a` uniform: keys used as they are dealt.
    #[default]
    Random,
    /// `(0, v)`, nothing drawn: only for a gate whose keys go through the seeded encoding
    /// (`gates::keyio::encode_pair`), which stores every share word as the value minus a
    /// pad of one party's seed — the pads are the split, the dealt one never reaches a key
    /// (drawing `a` cost the dealer AES for nothing).
    Resplit,
    /// As [`Split::Resplit`], drawing and discarding the words [`Split::Random`] draws, so
    /// that the rest of the dealing sees the same stream: for the test that seeded bundles
    /// are byte for byte the same with a random split.
    ResplitDrawing,
}

/// A generator that also says how values dealt with it are split.
pub trait SplitRng: CryptoRng {
    /// The split mode.
    fn split(&self) -> Split;

    /// `out` filled with the generator's next words, in the order `next_u64` returns them
    /// (bulk randomness: shares of a dealer word for every element).
    fn fill_words(&mut self, out: &mut [u64]) {
        out.iter_mut().for_each(|w| *w = self.next_u64());
    }
}

impl SplitRng for DealerRng {
    fn split(&self) -> Split {
        self.split
    }

    /// The buffered words, then the keystream encrypted straight into `out`, then a refill
    /// for an odd last word: a few memory passes per word, where copying word by word
    /// through the buffer cost ~4× the AES (criterion `rng/fill_bytes`).
    fn fill_words(&mut self, out: &mut [u64]) {
        let rest = self.take_buffered(out);
        let (bulk, tail) = rest.split_at_mut(rest.len() & !1);
        keystream(&self.cipher, &mut self.counter, bulk);
        if !tail.is_empty() {
            self.refill();
            self.take_buffered(tail);
        }
    }
}

impl DealerRng {
    /// This generator, splitting values as `mode` says ([`Split`]).
    pub fn with_split(mut self, mode: Split) -> DealerRng {
        self.split = mode;
        self
    }
}

/// 64-bit words a [`DealerRng`] generates at a time (two per AES block).
const WORDS: usize = 2 * crate::prg::PAR;

/// `out` (an even number of words) filled with the keystream from `counter` on, two words
/// per block as [`crate::prg::halves`] reads them: each block's counter written in place
/// and encrypted there, so the keystream has no other copy to wipe.
fn keystream(cipher: &Aes128Enc, counter: &mut u128, out: &mut [u64]) {
    for pair in out.chunks_exact_mut(2) {
        pair[0] = (*counter as u64).to_le();
        pair[1] = ((*counter >> 64) as u64).to_le();
        *counter = counter.wrapping_add(1);
    }
    let bytes: &mut [[u8; 16]] = bytemuck::cast_slice_mut(out);
    crate::prg::count_stream_blocks(bytes.len() as u64);
    cipher.encrypt_blocks(AesBlock::cast_slice_from_core_mut(bytes));
    out.iter_mut().for_each(|w| *w = u64::from_le(*w));
}

impl DealerRng {
    fn refill(&mut self) {
        keystream(&self.cipher, &mut self.counter, &mut self.words[..]);
        self.next = 0;
    }

    /// As many of the buffered words as fit into the start of `out` (wiped from the
    /// buffer); the rest of `out`.
    fn take_buffered<'a>(&mut self, out: &'a mut [u64]) -> &'a mut [u64] {
        let k = out.len().min(WORDS - self.next);
        let words = &mut self.words[self.next..self.next + k];
        out[..k].copy_from_slice(words);
        words.zeroize();
        self.next += k;
        &mut out[k..]
    }

    #[inline]
    fn next_word(&mut self) -> u64 {
        if self.next == WORDS {
            self.refill();
        }
        let w = self.words[self.next];
        self.words[self.next] = 0;
        self.next += 1;
        w
    }
}

impl Drop for DealerRng {
    fn drop(&mut self) {
        // (The cipher's round keys wipe themselves.)
        self.counter.zeroize();
        self.words.zeroize();
    }
}

impl std::fmt::Debug for DealerRng {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DealerRng(AES-128-CTR)")
    }
}

impl SeedableRng for DealerRng {
    /// The AES key (bytes 0..16) and the starting counter (bytes 16..32, little-endian).
    type Seed = [u8; 32];

    fn from_seed(mut seed: [u8; 32]) -> DealerRng {
        let mut key: [u8; 16] = seed[..16].try_into().expect("16 bytes");
        let counter = u128::from_le_bytes(seed[16..].try_into().expect("16 bytes"));
        let cipher = Aes128Enc::new(&key.into());
        key.zeroize();
        seed.zeroize();
        DealerRng { cipher, counter, words: Box::new([0; WORDS]), next: WORDS, split: Split::Random }
    }
}

impl TryRng for DealerRng {
    type Error = Infallible;

    #[inline]
    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(self.next_word() as u32)
    }

    #[inline]
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.next_word())
    }

    /// Word after word, little-endian (a short tail takes the low bytes of one more word):
    /// whole words a refill at a time (the words handed out zeroed in one pass), so that
    /// bulk bytes (a batch of tree roots) cost no test and store per word.
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        let mut chunks = dst.chunks_exact_mut(8);
        while chunks.len() > 0 {
            if self.next == WORDS {
                self.refill();
            }
            let k = chunks.len().min(WORDS - self.next);
            let words = &mut self.words[self.next..self.next + k];
            for (c, w) in (&mut chunks).take(k).zip(words.iter()) {
                c.copy_from_slice(&w.to_le_bytes());
            }
            words.zeroize();
            self.next += k;
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let mut w = self.next_word().to_le_bytes();
            tail.copy_from_slice(&w[..tail.len()]);
            w.zeroize();
        }
        Ok(())
    }
}

impl TryCryptoRng for DealerRng {}

/// Seed a [`DealerRng`] from the operating system.
///
/// # Errors
/// The OS error if the system CSPRNG is unavailable; the dealer must not proceed then.
pub fn os_rng() -> Result<DealerRng, getrandom::Error> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)?;
    let rng = DealerRng::from_seed(seed);
    zeroize::Zeroize::zeroize(&mut seed);
    Ok(rng)
}

/// The parties' root streams of [`with_root_seeds`].
type Streams = Box<[RootStream; 2]>;

thread_local! {
    /// Where this thread's key generation draws tree roots from ([`with_root_seeds`]). Boxed:
    /// a thread-local of a library loaded at run time (the Python extension) lives in the
    /// small static TLS block, which two AES key schedules would overflow.
    static ROOTS: RefCell<Option<Streams>> = const { RefCell::new(None) };
}

/// Run `f` (a gate's key generation) with every DPF and DCF root seed it draws on this thread
/// taken from the parties' root streams of `seeds` ([`RootStream`]: party `b`'s roots from
/// `seeds[b]`) instead of the generator, or, with `None`, from the generator. The seeded
/// encoding of the keys (`gates::keyio::encode_pair` with the same seeds) then leaves out
/// every batch of roots that is the next of its party's stream, and the party's reader
/// regenerates them. (A batch drawn otherwise, on another thread say, is written in full.)
pub fn with_root_seeds<T>(seeds: Option<&[PadSeed; 2]>, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Streams>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            ROOTS.with(|r| *r.borrow_mut() = prev);
        }
    }
    let streams = seeds.map(|[s0, s1]| Box::new([RootStream::new(s0), RootStream::new(s1)]));
    let _restore = Restore(ROOTS.with(|r| r.replace(streams)));
    f()
}

/// Root seeds of `keys` key pairs, `2k + b` party `b`'s of key `k`: from the root streams of
/// [`with_root_seeds`] when set, else uniformly random.
pub(crate) fn random_roots<R: CryptoRng + ?Sized>(rng: &mut R, keys: usize) -> Vec<u128> {
    let from_streams = ROOTS.with(|r| {
        let mut r = r.borrow_mut();
        let [s0, s1] = &mut **r.as_mut()?;
        let (mut a, mut b) = (Vec::with_capacity(keys), Vec::with_capacity(keys));
        s0.take(keys, &mut a);
        s1.take(keys, &mut b);
        Some(a.into_iter().zip(b).flat_map(|(x, y)| [x, y]).collect())
    });
    from_streams.unwrap_or_else(|| {
        // One draw for the batch: seed after seed, 16 little-endian bytes each, control bits cleared.
        let mut bytes = vec![0u8; 32 * keys];
        rng.fill_bytes(&mut bytes);
        let roots = bytes
            .chunks_exact(16)
            .map(|b| u128::from_le_bytes(b.try_into().expect("16 bytes")) & SEED_MASK)
            .collect();
        crate::wipe::wipe(&mut bytes);
        roots
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generator's blocks count as stream blocks (the dealer's AES in `bench model`'s
    /// `keygen_aes_blocks`): at least a block per two words drawn. (Other tests draw at the
    /// same time, so the count can only be bounded below.)
    #[test]
    fn drawn_words_count_as_stream_blocks() {
        let mut r = DealerRng::from_seed([7u8; 32]);
        let before = crate::prg::stream_blocks();
        let mut out = vec![0u64; 10_000];
        r.fill_words(&mut out);
        assert!(crate::prg::stream_blocks() - before >= 5_000);
    }

    /// The generator is AES-128-CTR: with the zero key and counter, its first block is
    /// FIPS-197's `AES_0(0) = 66e94bd4ef8a2c3b884cfa59ca342b2e`, then `AES_0(1)`, …; words
    /// and bytes come from one stream, and seeds that differ give different streams.
    #[test]
    fn dealer_rng_is_aes_ctr() {
        let mut r = DealerRng::from_seed([0u8; 32]);
        assert_eq!(r.next_u64(), 0x3b2c_8aef_d44b_e966);
        assert_eq!(r.next_u64(), 0x2e2b_34ca_59fa_4c88);
        let second = {
            let c = Aes128Enc::new(&[0u8; 16].into());
            let mut b = crate::prg::to_block(1);
            c.encrypt_block(&mut b);
            crate::prg::from_block(&b)
        };
        assert_eq!(r.next_u64() as u128 | (r.next_u64() as u128) << 64, second);
        let mut bytes = [0u8; 24];
        DealerRng::from_seed([0u8; 32]).fill_bytes(&mut bytes);
        assert_eq!(bytes[..8], 0x3b2c_8aef_d44b_e966u64.to_le_bytes());
        let mut seed = [0u8; 32];
        seed[31] = 1;
        assert_ne!(DealerRng::from_seed(seed).next_u64(), 0x3b2c_8aef_d44b_e966);
        // Across refills (128 words at a time) the stream goes on.
        let mut a = DealerRng::seed_from_u64(7);
        let words: Vec<u64> = (0..200).map(|_| a.next_u64()).collect();
        let mut b = DealerRng::seed_from_u64(7);
        let mut all = [0u8; 1600];
        b.fill_bytes(&mut all);
        assert!(
            all.chunks_exact(8).zip(&words).all(|(c, &w)| u64::from_le_bytes(c.try_into().unwrap()) == w)
        );
        // Words and bytes mixed, from mid-refill, with a short tail: still the one stream
        // (a tail takes one more word whole).
        let mut c = DealerRng::seed_from_u64(7);
        let mut mixed: Vec<u64> = (0..3).map(|_| c.next_u64()).collect();
        let mut run = [0u8; 8 * 150 + 5];
        c.fill_bytes(&mut run);
        mixed.extend(run.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().unwrap())));
        assert_eq!(run[1200..], words[153].to_le_bytes()[..5]);
        mixed.push(c.next_u64());
        assert_eq!(mixed[..153], words[..153]);
        assert_eq!(mixed[153], words[154]);
    }

    /// Bulk words are the next words: from a fresh generator and from mid-refill, shorter
    /// than a refill, whole refills and more, with the stream going on after them.
    #[test]
    fn fill_words_is_the_stream_of_next_u64() {
        let mut a = DealerRng::seed_from_u64(9);
        let want: Vec<u64> = (0..2000).map(|_| a.next_u64()).collect();
        for first in [0usize, 1, 127, 128, 129] {
            for len in [0usize, 1, 5, 127, 128, 129, 256, 300, 1000] {
                let mut b = DealerRng::seed_from_u64(9);
                (0..first).for_each(|_| _ = b.next_u64());
                let mut got = vec![0u64; len];
                b.fill_words(&mut got);
                assert_eq!(got, want[first..first + len], "first {first}, len {len}");
                assert_eq!(b.next_u64(), want[first + len], "first {first}, len {len}");
            }
        }
    }

    /// A batch of roots drawn from the generator is seed after seed, each the next 16 bytes
    /// with its control bit cleared.
    #[test]
    fn roots_from_the_generator_are_its_next_blocks() {
        let mut a = DealerRng::seed_from_u64(4);
        let want: Vec<u128> = (0..7)
            .map(|_| {
                let mut b = [0u8; 16];
                a.fill_bytes(&mut b);
                u128::from_le_bytes(b) & SEED_MASK
            })
            .collect();
        let mut b = DealerRng::seed_from_u64(4);
        assert_eq!(random_roots(&mut b, 3), want[..6]);
        assert!(random_roots(&mut b, 0).is_empty());
        assert_eq!(random_roots(&mut b, 1)[0], want[6]);
    }

    #[test]
    fn roots_come_from_the_streams_only_inside_with_root_seeds() {
        let mut rng = DealerRng::seed_from_u64(1);
        let seeds = [[1u8; 16], [2u8; 16]];
        let (mut p0, mut p1) = (Vec::new(), Vec::new());
        RootStream::new(&seeds[0]).take(5, &mut p0);
        RootStream::new(&seeds[1]).take(5, &mut p1);
        let (a, b, inner, c) = with_root_seeds(Some(&seeds), || {
            let a = random_roots(&mut rng, 2);
            // A nested call sets its own streams (or none) and restores these.
            let inner = with_root_seeds(None, || random_roots(&mut rng, 1));
            let b = random_roots(&mut rng, 3);
            let c = std::thread::scope(|s| s.spawn(|| ROOTS.with(|r| r.borrow().is_none())).join().unwrap());
            (a, b, inner, c)
        });
        assert_eq!(a, vec![p0[0], p1[0], p0[1], p1[1]]);
        assert_eq!(b, vec![p0[2], p1[2], p0[3], p1[3], p0[4], p1[4]]);
        assert!(!p0.contains(&inner[0]) && !p1.contains(&inner[0]));
        assert!(c, "other threads draw from their generator");
        assert!(ROOTS.with(|r| r.borrow().is_none()));
        let d = random_roots(&mut rng, 1);
        assert!(d.iter().all(|r| r & 1 == 0 && !p0.contains(r)));
    }
}
