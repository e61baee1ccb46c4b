//! Randomness for the dealer.
//!
//! Every `gen` function takes the RNG explicitly (`&mut impl CryptoRng`), so tests can seed
//! it. Production code uses [`os_rng`]: ChaCha12 seeded from the operating
//! system's CSPRNG (docs/design/brief.md §4).

use std::cell::RefCell;

use rand_chacha::ChaCha12Rng;
pub use rand_core::{CryptoRng, Rng, SeedableRng};

use crate::pad::{PadSeed, RootStream};
use crate::tree::SEED_MASK;

/// The dealer's cryptographically secure generator.
pub type DealerRng = ChaCha12Rng;

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

/// A uniformly random tree seed with the control bit cleared.
pub(crate) fn random_seed<R: CryptoRng + ?Sized>(rng: &mut R) -> u128 {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    u128::from_le_bytes(b) & SEED_MASK
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
    from_streams.unwrap_or_else(|| (0..2 * keys).map(|_| random_seed(rng)).collect())
}

/// A uniformly random 128-bit block.
pub(crate) fn random_block<R: CryptoRng + ?Sized>(rng: &mut R) -> u128 {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    u128::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

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
