//! Randomness for the dealer.
//!
//! Every `gen` function takes the RNG explicitly (`&mut impl CryptoRng`), so tests can seed
//! it. Production code uses [`os_rng`]: ChaCha12 seeded from the operating
//! system's CSPRNG (docs/design/brief.md §4).

use rand_chacha::ChaCha12Rng;
pub use rand_core::{CryptoRng, Rng, SeedableRng};

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

/// A uniformly random 128-bit block.
pub(crate) fn random_block<R: CryptoRng + ?Sized>(rng: &mut R) -> u128 {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    u128::from_le_bytes(b)
}
