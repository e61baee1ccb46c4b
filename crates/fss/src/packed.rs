//! A run of share words kept as the key stores them, widened a block at a time when read.
//!
//! A compiled gate's dealer words are stored at their own widths (37 bits, say) and read
//! block by block by its forms. Decoding them into 64-bit words ahead of the online phase
//! writes, reads and at last wipes close to twice their stored bytes, and generates this
//! party's pad words ([`crate::pad`]) into memory only to read them once. A
//! [`PackedWords`] keeps the words the key stores as stored (one copy of their bytes) and
//! this party's pad words as a position in its pad, generated (AES-128 in counter mode,
//! well under a nanosecond a word) when a block is read.

use std::ops::Range;

use crate::pad::counter_blocks;
use crate::prg::AesBlock;
use aes::Aes128Enc;

/// Bytes kept past the last stored field: every field's read window
/// ([`crate::fields::read_fields_into`]) lies inside.
const SLACK: usize = 16;

/// `len` share words of `bits` (1..=64) bits, as stored or as pad positions. (No `Debug`:
/// it is key material.)
#[derive(Clone)]
pub struct PackedWords {
    bits: u32,
    len: usize,
    /// Consecutive runs of the words, in order; each runs to the next one's `from`.
    parts: Vec<Part>,
}

#[derive(Clone)]
enum Part {
    /// Words `from..` stored: their fields from bit `shift` of `bytes`.
    Stored { from: usize, shift: u32, bytes: Vec<u8> },
    /// Words `from..` are this party's pad words: the pad's bits from bit `at` on.
    Pad { from: usize, at: u64, cipher: Aes128Enc },
}

impl Part {
    fn from(&self) -> usize {
        match self {
            Part::Stored { from, .. } | Part::Pad { from, .. } => *from,
        }
    }
}

impl PackedWords {
    /// An empty run of words of `bits` bits, to push parts to.
    pub(crate) fn new(bits: u32) -> PackedWords {
        debug_assert!((1..=64).contains(&bits));
        PackedWords { bits, len: 0, parts: vec![] }
    }

    /// Append `count` stored words: the fields from bit `pos` of `data` (which holds them).
    pub(crate) fn push_stored(&mut self, data: &[u8], pos: u64, count: usize) {
        if count == 0 {
            return;
        }
        let end = pos + count as u64 * self.bits as u64;
        let (first, last) = ((pos / 8) as usize, end.div_ceil(8) as usize);
        let mut bytes = Vec::with_capacity(last - first + SLACK);
        bytes.extend_from_slice(&data[first..last]);
        bytes.resize(last - first + SLACK, 0);
        self.parts.push(Part::Stored { from: self.len, shift: (pos % 8) as u32, bytes });
        self.len += count;
    }

    /// Append `count` of this party's pad words: the pad of `cipher` from bit `at` on.
    pub(crate) fn push_pad(&mut self, cipher: &Aes128Enc, at: u64, count: usize) {
        if count == 0 {
            return;
        }
        self.parts.push(Part::Pad { from: self.len, at, cipher: cipher.clone() });
        self.len += count;
    }

    /// Words.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bits per word.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Words `r` (inside `0..len`) into `out` (of `r.len()` words); pad words are generated
    /// in `scratch` (which then holds key material: its owner wipes it).
    pub fn read_into(&self, r: Range<usize>, out: &mut [u64], scratch: &mut Vec<u8>) {
        assert!(r.end <= self.len && out.len() == r.len(), "words {r:?} of {}", self.len);
        let b = self.bits as u64;
        for (i, part) in self.parts.iter().enumerate() {
            let (from, to) = (part.from(), self.parts.get(i + 1).map_or(self.len, Part::from));
            let (a, z) = (r.start.max(from), r.end.min(to));
            if a >= z {
                continue;
            }
            let (dst, skip) = (&mut out[a - r.start..z - r.start], (a - from) as u64 * b);
            match part {
                Part::Stored { shift, bytes, .. } => {
                    crate::fields::read_fields_into(bytes, *shift as u64 + skip, self.bits, dst)
                }
                Part::Pad { at, cipher, .. } => {
                    // The blocks that hold the fields, and one more for the last window.
                    let (start, end) = (at + skip, at + skip + (z - a) as u64 * b);
                    let (c0, c1) = (start / 128, end.div_ceil(128) + 1);
                    scratch.clear();
                    scratch.resize(16 * (c1 - c0) as usize, 0);
                    let (chunks, _) = scratch.as_chunks_mut::<16>();
                    let mut ctr = c0 as u128;
                    counter_blocks(cipher, &mut ctr, AesBlock::cast_slice_from_core_mut(chunks));
                    crate::fields::read_fields_into(scratch, start % 128, self.bits, dst)
                }
            }
        }
    }

    /// Zero the stored bytes and release them (the pad parts hold no words).
    pub fn wipe(&mut self) {
        for p in &mut self.parts {
            if let Part::Stored { bytes, .. } = p {
                crate::wipe::wipe(bytes);
            }
        }
        self.parts = vec![];
        self.len = 0;
    }
}

impl Drop for PackedWords {
    fn drop(&mut self) {
        self.wipe();
    }
}
