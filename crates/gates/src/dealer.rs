//! The dealer's helpers: masks and additive / XOR secret sharing.

use fss::ring::mask;
use fss::rng::{Split, SplitRng};
use zeroize::Zeroize;

/// `count` uniform words of `bits` bits: as `count` calls of `next_u64`, masked, taken in
/// bulk through [`SplitRng::fill_words`] (`fss::rng::DealerRng` encrypts straight into
/// them).
pub fn random_words<R: SplitRng + ?Sized>(rng: &mut R, count: usize, bits: u32) -> Vec<u64> {
    let m = mask(bits);
    let mut out = vec![0u64; count];
    rng.fill_words(&mut out);
    if bits < 64 {
        out.iter_mut().for_each(|w| *w &= m);
    }
    out
}

/// `count` uniform bits.
pub fn random_bits<R: SplitRng + ?Sized>(rng: &mut R, count: usize) -> Vec<bool> {
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let w = rng.next_u64();
        out.extend((0..64.min(count - out.len())).map(|i| (w >> i) & 1 == 1));
    }
    out
}

/// `out` filled with the words a random split of values draws from `rng`: the generator's
/// next words ([`Split::Random`]), or zeros where the seeded encoding splits the values
/// ([`Split::Resplit`]; [`Split::ResplitDrawing`] draws as many and discards them).
pub fn split_draws<R: SplitRng + ?Sized>(rng: &mut R, out: &mut [u64]) {
    match rng.split() {
        Split::Random => rng.fill_words(out),
        Split::ResplitDrawing => {
            rng.fill_words(out);
            out.zeroize();
        }
        Split::Resplit => out.fill(0),
    }
}

/// Additive shares of every value mod `2^bits`: `(a, v − a)` with `a` uniform, or `(0, v)`
/// where the generator says that the seeded encoding splits them ([`Split::Resplit`]).
pub fn share<R: SplitRng + ?Sized>(rng: &mut R, values: &[u64], bits: u32) -> (Vec<u64>, Vec<u64>) {
    let m = mask(bits);
    let mut a = vec![0u64; values.len()];
    split_draws(rng, &mut a);
    a.iter_mut().for_each(|x| *x &= m);
    let b = values.iter().zip(&a).map(|(&v, &a)| v.wrapping_sub(a) & m).collect();
    (a, b)
}

/// XOR shares of every bit.
pub fn share_bits<R: SplitRng + ?Sized>(rng: &mut R, values: &[bool]) -> (Vec<bool>, Vec<bool>) {
    let a = random_bits(rng, values.len());
    let b = values.iter().zip(&a).map(|(&v, &a)| v ^ a).collect();
    (a, b)
}

#[cfg(test)]
mod tests {
    use fss::rng::{DealerRng, Rng, SeedableRng};

    use super::*;

    /// Bulk words are the generator's next words, masked, in order (across refills, from
    /// mid-refill, and with the generator going on after them).
    #[test]
    fn random_words_are_the_next_words() {
        let mut a = DealerRng::seed_from_u64(3);
        let want: Vec<u64> = (0..700).map(|_| a.next_u64()).collect();
        let mut b = DealerRng::seed_from_u64(3);
        assert_eq!(b.next_u64(), want[0]);
        let got = random_words(&mut b, 600, 37);
        assert!(got.iter().zip(&want[1..]).all(|(&g, &w)| g == w & mask(37)));
        assert_eq!(got.len(), 600);
        assert_eq!(random_words(&mut b, 5, 64), want[601..606]);
        assert_eq!(b.next_u64(), want[606]);
    }
}
