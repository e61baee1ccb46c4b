//! The dealer's helpers: masks and additive / XOR secret sharing.

use fss::ring::mask;
use fss::rng::CryptoRng;

/// `count` uniform words of `bits` bits.
pub fn random_words<R: CryptoRng + ?Sized>(rng: &mut R, count: usize, bits: u32) -> Vec<u64> {
    (0..count).map(|_| rng.next_u64() & mask(bits)).collect()
}

/// `count` uniform bits.
pub fn random_bits<R: CryptoRng + ?Sized>(rng: &mut R, count: usize) -> Vec<bool> {
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let w = rng.next_u64();
        out.extend((0..64.min(count - out.len())).map(|i| (w >> i) & 1 == 1));
    }
    out
}

/// Additive shares of every value mod `2^bits`: `(a, v − a)` with `a` uniform.
pub fn share<R: CryptoRng + ?Sized>(rng: &mut R, values: &[u64], bits: u32) -> (Vec<u64>, Vec<u64>) {
    let m = mask(bits);
    let a = random_words(rng, values.len(), bits);
    let b = values.iter().zip(&a).map(|(&v, &a)| v.wrapping_sub(a) & m).collect();
    (a, b)
}

/// XOR shares of every bit.
pub fn share_bits<R: CryptoRng + ?Sized>(rng: &mut R, values: &[bool]) -> (Vec<bool>, Vec<bool>) {
    let a = random_bits(rng, values.len());
    let b = values.iter().zip(&a).map(|(&v, &a)| v ^ a).collect();
    (a, b)
}
