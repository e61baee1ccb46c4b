//! The share pad: share words of a key, expanded from a 16-byte seed.
//!
//! Much of a gate key that is not a DPF or DCF tree is additive shares of dealer values
//! (masks, Beaver triples, the compiled gates' dealer words): each party holds one share and
//! their sum is the value. The dealer may take one party's share of a value from a
//! pseudorandom pad of that party's own seed instead of drawing it, and give the party the
//! seed in its place; the other party's share is then `value − pad`. The seeded encoding
//! (`gates::keyio::encode_pair`) does this for party 0's words in the first half of a key's
//! share words (with party 0's seed) and for party 1's in the second half (with party 1's),
//! so that each party stores half of its words. A party never sees the other's seed: its
//! stored words are the values minus a pad it cannot compute.
//!
//! The pad is AES-128 in counter mode under the seed, read as the little-endian bit stream of
//! [`crate::codec`]: the share word at share bit `o` of width `w` is the pad's bits `o..o + w`.

use aes::Aes128Enc;
use aes::cipher::{BlockCipherEncrypt, KeyInit};
use zeroize::Zeroize;

use crate::prg::AesBlock;
use crate::ring::mask;

/// Seed of a share pad (drawn by the dealer from its CSPRNG).
pub type PadSeed = [u8; 16];

/// Blocks generated at a time.
const CHUNK: usize = 256;

/// The pad of one seed, read bit field by bit field and generated as it is read.
pub struct PadStream {
    cipher: Aes128Enc,
    ctr: u128,
    buf: Vec<u8>,
    pos: u64,
}

impl std::fmt::Debug for PadStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PadStream(..)")
    }
}

impl PadStream {
    /// The pad of `seed`, from its first bit.
    pub fn new(seed: &PadSeed) -> PadStream {
        PadStream { cipher: Aes128Enc::new(seed.into()), ctr: 0, buf: Vec::new(), pos: 0 }
    }

    /// The next `bits ≤ 64` bits.
    #[inline]
    pub fn take(&mut self, bits: u32) -> u64 {
        debug_assert!(bits <= 64);
        // Keep 16 bytes beyond the field so that it is read as one window.
        let need = (self.pos + bits as u64).div_ceil(8) as usize + 16;
        if self.buf.len() < need {
            self.fill(need);
        }
        let first = (self.pos / 8) as usize;
        let w = u128::from_le_bytes(self.buf[first..first + 16].try_into().expect("16 bytes"));
        let v = (w >> (self.pos % 8)) as u64 & mask(bits);
        self.pos += bits as u64;
        v
    }

    /// Drop the bytes already read (all but the partly read one) and generate up to `need`.
    fn fill(&mut self, need: usize) {
        let done = (self.pos / 8) as usize;
        if done > 0 {
            self.buf[..done].zeroize();
            self.buf.drain(..done);
            self.pos -= done as u64 * 8;
        }
        let need = need - done;
        let mut blocks = [AesBlock::default(); CHUNK];
        while self.buf.len() < need {
            for b in &mut blocks {
                *b = self.ctr.to_le_bytes().into();
                self.ctr += 1;
            }
            self.cipher.encrypt_blocks(&mut blocks);
            for b in &blocks {
                self.buf.extend_from_slice(b.as_slice());
            }
        }
        blocks.iter_mut().for_each(|b| b.as_mut_slice().zeroize());
    }
}

impl Drop for PadStream {
    fn drop(&mut self) {
        self.buf.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_is_aes_ctr_read_as_a_bit_stream() {
        // Counter 0 under the all-zero key: AES-128(0, 0) = 66e94bd4ef8a2c3b884cfa59ca342b2e.
        let mut p = PadStream::new(&[0; 16]);
        assert_eq!(p.take(32), 0xd44b_e966);
        assert_eq!(p.take(8), 0xef);
        // Fields of any width read the same bits as one long run.
        let (mut a, mut b) = (PadStream::new(&[7; 16]), PadStream::new(&[7; 16]));
        let mut x = 0u128;
        for _ in 0..100_000 {
            let w1 = a.take(64) as u128 | (a.take(64) as u128) << 64;
            let (lo, mid, hi) = (b.take(1) as u128, b.take(63) as u128, b.take(64) as u128);
            assert_eq!(w1, lo | mid << 1 | hi << 64);
            x ^= w1;
        }
        assert_ne!(x, 0);
        assert_ne!(PadStream::new(&[8; 16]).take(64), PadStream::new(&[7; 16]).take(64));
    }
}
