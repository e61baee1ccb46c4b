//! Bit-packed binary encoding of keys.
//!
//! Key material is written as a little-endian bit stream: a field of `w` bits takes exactly
//! `w` bits, so `ℓ`-bit payload words and `n`-bit control-bit maps cost what the key-size
//! formulas of docs/design/fss-building-blocks.md §8 say. [`BitWriter`]/[`BitReader`] are public so that
//! higher layers (gate keys, openings) pack their own words the same way.
//!
//! A batch of keys that travels alone is wrapped in an envelope:
//!
//! ```text
//! offset  size  field
//! 0       4     magic "FSSK"
//! 4       1     format version (1)
//! 5       1     kind (1 = DPF, 2 = 1-bit ET DPF, 3 = DCF, 4 = arithmetic DPF)
//! 6       1     party (0 or 1)
//! 7       1     domain bits n
//! 8       1     output bits ℓ
//! 9       2     payload words K (LE)
//! 11      1     variant (DPF: leaf conversion, 0 = shifted, 1 = low bits; arithmetic DPF:
//!               early-terminated levels e; others 0)
//! 12      4     number of keys in the batch (LE)
//! 16      m     key material (bit stream, zero-padded to a byte)
//! 16+m    4     CRC-32 of bytes 0..16+m (LE)
//! ```
//!
//! Decoding checks every length, the version, the kind, the checksum and every field that
//! has forbidden values; it never panics.

use crate::error::DecodeError;
use crate::fields::{Pack64, read_fields};
use crate::packed::PackedWords;
use crate::pad::{PadStream, RootStream};
use crate::ring::mask;
use crate::share::Party;
use crate::words::{KeyBuffer, SharedWords, Words};
use std::sync::Arc;
use zeroize::Zeroize;

/// Share words a split writer handles at a time ([`BitWriter::put_share_run`]).
const SPLIT_CHUNK: usize = 1024;

/// Appends fields of 1..=64 bits (and 128-bit blocks) to a byte vector, LSB first.
///
/// Share words ([`BitWriter::put_share`]: additive shares of dealer values) are written
/// inline by default; the dealer's seeded encoding ([`crate::pad`], [`BitWriter::split`])
/// takes the words before a split point of one party's key, and the rest of the other's,
/// from a pad.
#[derive(Default)]
pub struct BitWriter {
    buf: Vec<u8>,
    acc: u128,
    pending: u32,
    shares: ShareSink,
    /// Count the bits without keeping them ([`BitWriter::counting`]): bytes dropped so far.
    dropped: Option<u64>,
    /// The root stream of this party's seed in a seeded encoding ([`BitWriter::with_roots`]).
    roots: Option<RootStream>,
    /// Bits of tree roots and runs of them written ([`BitWriter::put_roots`]).
    root_bits: u64,
    root_runs: u64,
    /// Where runs of 64-bit words go ([`BitWriter::put_side_words`]), and their bits.
    side: SideSink,
    side_bits: u64,
}

/// Where a writer's side words go.
#[derive(Default)]
enum SideSink {
    /// Into the stream.
    #[default]
    Stream,
    /// Only counted.
    Count,
    /// Into bytes `at..end` of the buffer (the side region, [`BitWriter::with_side_region`]),
    /// or, `filled`, passed over there: the region holds them already
    /// ([`BitWriter::with_filled_side_region`]).
    Region { at: usize, end: usize, filled: bool },
    /// Appended to the buffer, everything else only counted ([`BitWriter::side_region_only`]).
    Append,
}

/// Where a split key's share words have reached relative to its split point, for the
/// writer of party 0's key (`seeded_below`) or party 1's ([`BitWriter::split`]).
#[derive(Clone, Copy)]
struct Sides {
    /// Share bits before the current word.
    offset: u64,
    split: u64,
    /// Whether the party's words that start before `split` are its pad (party 0's are).
    seeded_below: bool,
}

impl Sides {
    /// From the current word on, how many of the next `count ≥ 1` words of `bits` bits lie
    /// on its side of the split (words that start before it, or from it on), and whether the
    /// party's key stores them (the other side's are its pad words); passes over them.
    #[inline]
    fn next_segment(&mut self, bits: u32, count: usize) -> (usize, bool) {
        let below = self.offset < self.split;
        let k = side_run(self.offset, self.split, bits, count);
        self.offset += k as u64 * bits as u64;
        (k, below != self.seeded_below)
    }
}

/// Share words of one party's key kept for the writer of the other party's key
/// ([`BitWriter::recording_shares`], [`BitWriter::finish_split`]): only the words that the
/// other key stores, in the order written, unpacked (words of 2..=64 bits one to an entry,
/// one-bit words 64 to an entry), so that the other writer takes them without a second
/// pass over a bit stream. Wiped when dropped. (Its `Debug` shows only lengths.)
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RecordedShares {
    words: Vec<u64>,
    bits: Vec<u64>,
    bit_len: usize,
    /// Where the other writer has read to (words, bits).
    word_at: usize,
    bit_at: usize,
}

impl std::fmt::Debug for RecordedShares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecordedShares({} words, {} one-bit words)", self.words.len(), self.bit_len)
    }
}

impl Drop for RecordedShares {
    fn drop(&mut self) {
        crate::wipe::wipe(&mut self.words);
        crate::wipe::wipe(&mut self.bits);
    }
}

impl RecordedShares {
    /// Keep words `word(0..count)` of `bits` (1..=64) bits.
    #[inline]
    fn record_run(&mut self, bits: u32, count: usize, mut word: impl FnMut(usize) -> u64) {
        if bits > 1 {
            self.words.extend((0..count).map(word));
            return;
        }
        for at in (0..count).step_by(64) {
            let k = (count - at).min(64);
            let v = (0..k).fold(0, |v, q| v | (word(at + q) & 1) << q);
            self.push_bits(v, k as u32);
        }
    }

    /// Bits `from .. from + count` of the bit string `words` (bit `i` is bit `i % 64` of
    /// word `i / 64`), appended as one-bit words: whole words copied where both sides are
    /// word-aligned.
    fn push_bits_run(&mut self, words: &[u64], from: usize, count: usize) {
        let need = (self.bit_len + count).div_ceil(64);
        if self.bits.len() < need {
            self.bits.resize(need, 0);
        }
        if self.bit_len.is_multiple_of(64) && from.is_multiple_of(64) {
            let (at, src, n) = (self.bit_len / 64, from / 64, count / 64);
            self.bits[at..at + n].copy_from_slice(&words[src..src + n]);
            if !count.is_multiple_of(64) {
                let k = (count % 64) as u32;
                place_bits(&mut self.bits, self.bit_len + 64 * n, words[src + n], k);
            }
        } else {
            for j in (0..count).step_by(64) {
                let k = (count - j).min(64) as u32;
                place_bits(&mut self.bits, self.bit_len + j, bits_at(words, from + j, k), k);
            }
        }
        self.bit_len += count;
    }

    /// Keep `k ≤ 64` one-bit words, the low bits of `v`.
    fn push_bits(&mut self, v: u64, k: u32) {
        let need = (self.bit_len + k as usize).div_ceil(64);
        if self.bits.len() < need {
            self.bits.resize(need, 0);
        }
        place_bits(&mut self.bits, self.bit_len, v, k);
        self.bit_len += k as usize;
    }

    /// The next `k` (1..=64) one-bit words, as the low bits of a word. (Kept words are a
    /// dealer-side invariant, not input: both keys of a gate come from one shape, so they
    /// have the same share words.)
    fn next_bits(&mut self, k: u32) -> u64 {
        assert!(self.bit_at + k as usize <= self.bit_len, "both keys of a gate have the same share words");
        let v = bits_at(&self.bits, self.bit_at, k);
        self.bit_at += k as usize;
        v
    }

    /// The next `count` words of 2..=64 bits.
    fn next_words(&mut self, count: usize) -> &[u64] {
        let at = self.word_at;
        self.word_at += count;
        self.words.get(at..at + count).expect("both keys of a gate have the same share words")
    }

    /// The next `count` words of `bits` (1..=64) bits: a slice of the kept words, or one-bit
    /// words unpacked into `ones`.
    fn next_run<'a>(&'a mut self, bits: u32, count: usize, ones: &'a mut Vec<u64>) -> &'a [u64] {
        if bits > 1 {
            return self.next_words(count);
        }
        ones.clear();
        for at in (0..count).step_by(64) {
            let k = (count - at).min(64);
            let v = self.next_bits(k as u32);
            ones.extend((0..k).map(|q| (v >> q) & 1));
        }
        ones
    }
}

/// A [`BitWriter::recording_shares`] writer's words.
struct Recorder {
    rec: RecordedShares,
    sides: Sides,
}

/// A key written with its share words split ([`BitWriter::split`]).
struct Split {
    /// The other party's words that this key stores.
    other: RecordedShares,
    pad: PadStream,
    sides: Sides,
    /// This party's words that the other key stores, kept for its writer (unless
    /// [`BitWriter::discarding_own`]).
    own: Option<RecordedShares>,
}

/// Of `count` words of `bits` bits from share bit `offset` on, how many lie on the first
/// word's side of share bit `split`: those that start before it, or all of them from it on.
#[inline]
fn side_run(offset: u64, split: u64, bits: u32, count: usize) -> usize {
    if offset < split && bits > 0 {
        ((split - offset).div_ceil(bits as u64)).min(count as u64) as usize
    } else {
        count
    }
}

/// Bits `at .. at + k` (`k ≤ 64`) of the bit string `words` (bit `i` is bit `i % 64` of
/// word `i / 64`), as the low bits of a word.
#[inline]
fn bits_at(words: &[u64], at: usize, k: u32) -> u64 {
    let (w, o) = (at / 64, (at % 64) as u32);
    let mut v = words[w] >> o;
    if o > 0 && o + k > 64 {
        v |= words[w + 1] << (64 - o);
    }
    v & mask(k)
}

/// Append `words` to `buf` as little-endian bytes.
#[inline]
fn append_words(buf: &mut Vec<u8>, words: &[u64]) {
    if cfg!(target_endian = "little") {
        // (One copy: the words' bytes are their little-endian encoding.)
        buf.extend_from_slice(bytemuck::cast_slice(words));
        return;
    }
    let at = buf.len();
    buf.resize(at + 8 * words.len(), 0);
    for (b, w) in buf[at..].chunks_exact_mut(8).zip(words) {
        b.copy_from_slice(&w.to_le_bytes());
    }
}

/// `v`'s low `k ≤ 64` bits placed (ORed) at bits `at .. at + k` of the bit string `words`
/// (bit `i` is bit `i % 64` of `words[i / 64]`).
#[inline]
pub fn place_bits(words: &mut [u64], at: usize, v: u64, k: u32) {
    let (w, o) = (at / 64, (at % 64) as u32);
    let v = v & mask(k);
    words[w] |= v << o;
    if o > 0 && o + k > 64 {
        words[w + 1] |= v >> (64 - o);
    }
}

/// Where a writer's share words go.
#[derive(Default)]
enum ShareSink {
    /// Into the stream.
    #[default]
    Inline,
    /// Only counted: share bits so far, and those of words that start before `split`.
    /// `words`: words of 2..=64 bits that start before `split`, and from it on.
    Count { offset: u64, split: u64, below: u64, words: [u64; 2] },
    /// Out of the stream, kept for the other party's split writer.
    Record(Box<Recorder>),
    /// Split between the stream and a pad.
    Split(Box<Split>),
}

impl BitWriter {
    /// An empty writer.
    pub fn new() -> BitWriter {
        BitWriter::default()
    }

    /// Continue writing after `prefix` (which must end on a byte boundary).
    pub fn with_prefix(prefix: Vec<u8>) -> BitWriter {
        BitWriter { buf: prefix, ..BitWriter::default() }
    }

    /// A writer that keeps only share words: those that the split writer of the other
    /// party's key, [`BitWriter::split`] at `split` with `seeded_below`, stores
    /// ([`BitWriter::into_shares`]).
    pub fn recording_shares(split: u64, seeded_below: bool) -> BitWriter {
        let r = Recorder { rec: RecordedShares::default(), sides: Sides { offset: 0, split, seeded_below } };
        BitWriter { shares: ShareSink::Record(Box::new(r)), dropped: Some(0), ..BitWriter::default() }
    }

    /// Whether this writer keeps only share words ([`BitWriter::recording_shares`]): key
    /// material without any (tree keys, correction words) may then skip writing itself.
    pub fn keeps_only_shares(&self) -> bool {
        matches!(self.shares, ShareSink::Record(_))
    }

    /// The share words a [`BitWriter::recording_shares`] writer kept (none for others).
    pub fn into_shares(self) -> RecordedShares {
        match self.shares {
            ShareSink::Record(r) => r.rec,
            _ => RecordedShares::default(),
        }
    }

    /// A writer of one party's key with its share words split at share bit `split`: a word
    /// that starts before `split` is party 0's pad word (`seeded_below`, party 0's writer:
    /// left out; party 1's: written as `v + s − p mod 2^w`), a word from `split` on is party
    /// 1's pad word (the other way round). `s` is the other party's word (from `other`,
    /// what [`BitWriter::into_shares`] or [`BitWriter::finish_split`] kept) and `p` the
    /// other party's pad at the word (`pad`: the word at share bit `o` of width `w` is the
    /// pad's bits `o..o + w`). Each pair of words still adds up to the dealer's value.
    pub fn split(other: RecordedShares, pad: PadStream, split: u64, seeded_below: bool) -> BitWriter {
        let s = Split {
            other,
            pad,
            sides: Sides { offset: 0, split, seeded_below },
            own: Some(RecordedShares::default()),
        };
        BitWriter { shares: ShareSink::Split(Box::new(s)), ..BitWriter::default() }
    }

    /// The same [`BitWriter::split`] writer without keeping its own share words (for the
    /// second key of a pair: [`BitWriter::finish_split`] then returns none).
    pub fn discarding_own(mut self) -> BitWriter {
        if let ShareSink::Split(a) = &mut self.shares {
            a.own = None;
        }
        self
    }

    /// Append `count` share words of `bits ≤ 64` bits, word `i` being `word(i)`: as `count`
    /// calls of [`BitWriter::put_share`], with the sink chosen once for the run (key
    /// material is long runs of words of one width).
    #[inline]
    pub fn put_share_run(&mut self, bits: u32, count: usize, mut word: impl FnMut(usize) -> u64) {
        debug_assert!(bits <= 64);
        if bits == 0 {
            return;
        }
        match &mut self.shares {
            ShareSink::Inline => self.put_run(bits, count, word),
            ShareSink::Count { offset, split, below, words } => {
                let k = if *offset < *split { side_run(*offset, *split, bits, count) } else { 0 };
                *below += k as u64 * bits as u64;
                if bits > 1 {
                    words[0] += k as u64;
                    words[1] += (count - k) as u64;
                }
                *offset += count as u64 * bits as u64;
            }
            ShareSink::Record(r) => {
                let mut i = 0;
                while i < count {
                    let (k, stored) = r.sides.next_segment(bits, count - i);
                    if stored {
                        r.rec.record_run(bits, k, |q| word(i + q));
                    }
                    i += k;
                }
            }
            ShareSink::Split(_) => {
                let ShareSink::Split(mut a) = std::mem::take(&mut self.shares) else { unreachable!() };
                let (mut ones, mut pads) = (vec![], vec![]);
                let mut i = 0;
                while i < count {
                    let (k, stored) = a.sides.next_segment(bits, count - i);
                    if stored {
                        // A chunk at a time: the other party's words as kept, its pad in bulk.
                        let mut j = i;
                        while j < i + k {
                            let c = (i + k - j).min(SPLIT_CHUNK);
                            pads.clear();
                            a.pad.take_run(bits, c, &mut pads, |x| x);
                            let others = a.other.next_run(bits, c, &mut ones);
                            self.put_run(bits, c, |q| {
                                word(j + q).wrapping_add(others[q]).wrapping_sub(pads[q])
                            });
                            j += c;
                        }
                    } else {
                        // This party's pad words: nothing stored, the other party's pad passed over.
                        if let Some(own) = &mut a.own {
                            own.record_run(bits, k, |q| word(i + q));
                        }
                        a.pad.skip(k as u64 * bits as u64);
                    }
                    i += k;
                }
                crate::wipe::wipe(&mut ones);
                crate::wipe::wipe(&mut pads);
                self.shares = ShareSink::Split(a);
            }
        }
    }

    /// Append `count` one-bit share words packed 64 to a word (bit `i` of `words` is word
    /// `i`): as [`BitWriter::put_share_run`] with one bit, 64 words at a time (one-bit
    /// shares are XOR shares, so a split key's words are the XOR of whole chunks).
    pub fn put_share_bits(&mut self, count: usize, words: &[u64]) {
        match &mut self.shares {
            ShareSink::Inline => {
                self.put_u64_run(count / 64, |i| words[i]);
                if !count.is_multiple_of(64) {
                    self.put(words[count / 64], (count % 64) as u32);
                }
            }
            ShareSink::Count { .. } => self.put_share_run(1, count, |_| 0),
            ShareSink::Record(r) => {
                let mut i = 0;
                while i < count {
                    let (seg, stored) = r.sides.next_segment(1, count - i);
                    if stored {
                        r.rec.push_bits_run(words, i, seg);
                    }
                    i += seg;
                }
            }
            ShareSink::Split(_) => {
                let ShareSink::Split(mut a) = std::mem::take(&mut self.shares) else { unreachable!() };
                // A chunk of 64-bit words at a time: the bits, the other party's as kept and
                // the pad XORed together, then written as one run.
                let (mut out, mut pads) = (vec![], vec![]);
                let mut i = 0;
                while i < count {
                    let (seg, stored) = a.sides.next_segment(1, count - i);
                    if stored {
                        let mut j = i;
                        while j < i + seg {
                            let c = (i + seg - j).min(64 * SPLIT_CHUNK);
                            let (whole, rest) = (c / 64, (c % 64) as u32);
                            pads.clear();
                            a.pad.take_bit_string(c, &mut pads);
                            out.clear();
                            out.extend(pads.iter().enumerate().map(|(q, &p)| {
                                let k = (c - 64 * q).min(64) as u32;
                                bits_at(words, j + 64 * q, k) ^ a.other.next_bits(k) ^ p
                            }));
                            self.put_u64_run(whole, |q| out[q]);
                            if rest > 0 {
                                self.put(out[whole], rest);
                            }
                            j += c;
                        }
                    } else {
                        if let Some(own) = &mut a.own {
                            own.push_bits_run(words, i, seg);
                        }
                        a.pad.skip(seg as u64);
                    }
                    i += seg;
                }
                crate::wipe::wipe(&mut out);
                crate::wipe::wipe(&mut pads);
                self.shares = ShareSink::Split(a);
            }
        }
    }

    /// Append a share word of `bits ≤ 64` bits: an additive share modulo `2^bits` (one bit:
    /// an XOR share) of a value the dealer split between the parties.
    #[inline]
    pub fn put_share(&mut self, v: u64, bits: u32) {
        if bits == 0 {
            return;
        }
        let v = match &mut self.shares {
            ShareSink::Inline => v,
            ShareSink::Count { offset, split, below, words } => {
                if *offset < *split {
                    *below += bits as u64;
                }
                if bits > 1 {
                    words[(*offset >= *split) as usize] += 1;
                }
                *offset += bits as u64;
                return;
            }
            ShareSink::Record(r) => {
                if r.sides.next_segment(bits, 1).1 {
                    r.rec.record_run(bits, 1, |_| v);
                }
                return;
            }
            ShareSink::Split(a) => {
                if !a.sides.next_segment(bits, 1).1 {
                    if let Some(own) = &mut a.own {
                        own.record_run(bits, 1, |_| v);
                    }
                    a.pad.skip(bits as u64);
                    return;
                }
                let s = if bits == 1 { a.other.next_bits(1) } else { a.other.next_words(1)[0] };
                v.wrapping_add(s).wrapping_sub(a.pad.take(bits))
            }
        };
        self.put(v, bits);
    }

    /// Share bits counted so far (a [`BitWriter::counting`] writer; 0 for others).
    pub fn share_bits(&self) -> u64 {
        match &self.shares {
            ShareSink::Count { offset, .. } => *offset,
            _ => 0,
        }
    }

    /// Share bits counted so far in words that start before the split
    /// ([`BitWriter::counting_split`]; 0 for others).
    pub fn share_bits_below(&self) -> u64 {
        match &self.shares {
            ShareSink::Count { below, .. } => *below,
            _ => 0,
        }
    }

    /// Share words of 2..=64 bits counted so far that start before the split, and from it
    /// on ([`BitWriter::counting_split`]; zeros for others).
    pub fn share_words_split(&self) -> [u64; 2] {
        match &self.shares {
            ShareSink::Count { words, .. } => *words,
            _ => [0; 2],
        }
    }

    /// Room for `words` more kept share words of 2..=64 bits (a
    /// [`BitWriter::recording_shares`] writer's, or those a [`BitWriter::split`] writer
    /// keeps of its own): [`BitWriter::share_words_split`] tells how many there will be.
    pub fn reserve_kept_shares(&mut self, words: usize) {
        match &mut self.shares {
            ShareSink::Record(r) => r.rec.words.reserve(words),
            ShareSink::Split(a) => {
                if let Some(own) = &mut a.own {
                    own.words.reserve(words);
                }
            }
            _ => {}
        }
    }

    /// The stream of a [`BitWriter::split`] writer, and its own share words (for the other
    /// party's writer).
    pub fn finish_split(mut self) -> (Vec<u8>, RecordedShares) {
        let own = match std::mem::take(&mut self.shares) {
            ShareSink::Split(mut a) => a.own.take().unwrap_or_default(),
            _ => RecordedShares::default(),
        };
        (self.finish(), own)
    }

    /// Append the low `bits` bits of `v` (`bits ≤ 64`; higher bits of `v` are ignored).
    #[inline]
    pub fn put(&mut self, v: u64, bits: u32) {
        debug_assert!(bits <= 64);
        self.acc |= ((v & mask(bits)) as u128) << self.pending;
        self.pending += bits;
        if self.pending >= 64 {
            match &mut self.dropped {
                None => self.buf.extend_from_slice(&(self.acc as u64).to_le_bytes()),
                Some(d) => *d += 8,
            }
            self.acc >>= 64;
            self.pending -= 64;
        }
    }

    /// Append `count` fields of `bits ≤ 64` bits, field `i` being the low bits of `word(i)`:
    /// as `count` calls of [`BitWriter::put`], the word being filled kept in a register.
    #[inline]
    pub fn put_run(&mut self, bits: u32, count: usize, mut word: impl FnMut(usize) -> u64) {
        debug_assert!(bits <= 64);
        // A counting writer only counts (the fields are not read).
        if let Some(d) = &mut self.dropped {
            let end = u64::from(self.pending) + count as u64 * u64::from(bits);
            *d += 8 * (end / 64);
            self.pending = (end % 64) as u32;
            return;
        }
        if bits == 64 {
            return self.put_u64_run(count, word);
        }
        // (Short runs field by field: a block costs its setup.)
        if bits == 0 || count * (bits as usize) < 1024 {
            return (0..count).for_each(|i| self.put(word(i), bits));
        }
        self.buf.reserve((count as u64 * bits as u64).div_ceil(8) as usize + 8);
        let m = mask(bits);
        // Blocks of 64 fields packed into `bits` words ([`Pack64`]), which go after the
        // pending bits as a run of words.
        let blocks = count / 64;
        if blocks > 0 {
            let packer = Pack64::new(bits);
            let (mut fields, mut packed) = ([0u64; 64], [0u64; 64]);
            for k in 0..blocks {
                fields.iter_mut().enumerate().for_each(|(q, f)| *f = word(64 * k + q) & m);
                packer.pack(&fields, &mut packed);
                self.put_u64_run(bits as usize, |i| packed[i]);
            }
            fields.zeroize();
            packed.zeroize();
        }
        // The rest field by field: a register holds the bits of the word being filled
        // (`fill < 64` of them); a field that completes it spills its high bits into the
        // next. Completed words are appended 64 at a time.
        let (mut acc, mut fill) = (self.acc as u64, self.pending);
        let mut done = [0u64; 64];
        let mut n = 0;
        for i in 64 * blocks..count {
            let v = word(i) & m;
            acc |= v << fill;
            let end = fill + bits;
            if end >= 64 {
                done[n] = acc;
                n += 1;
                if n == done.len() {
                    append_words(&mut self.buf, &done);
                    n = 0;
                }
                // (`end > 64` only when `fill > 0`: the shift is below 64.)
                acc = if end > 64 { v >> (64 - fill) } else { 0 };
                fill = end - 64;
            } else {
                fill = end;
            }
        }
        append_words(&mut self.buf, &done[..n]);
        self.acc = u128::from(acc);
        self.pending = fill;
    }

    /// Append `count` 64-bit fields, field `i` being `word(i)`: as `count` calls of
    /// [`BitWriter::put`] with 64 bits, without the bit accumulator's bookkeeping per field.
    #[inline]
    pub fn put_u64_run(&mut self, count: usize, mut word: impl FnMut(usize) -> u64) {
        // A 64-bit field leaves the pending bits as they were and completes 8 bytes.
        if let Some(d) = &mut self.dropped {
            *d += 8 * count as u64;
            return;
        }
        self.buf.reserve(8 * count);
        let sh = self.pending;
        // (Appended 64 words at a time.)
        let mut done = [0u64; 64];
        if sh == 0 {
            for at in (0..count).step_by(done.len()) {
                let k = (count - at).min(done.len());
                done[..k].iter_mut().enumerate().for_each(|(q, d)| *d = word(at + q));
                append_words(&mut self.buf, &done[..k]);
            }
            return;
        }
        // `pending < 64` bits wait in the accumulator: each field completes a word with its
        // low `64 − sh` bits and leaves its high `sh` bits waiting.
        let mut acc = self.acc as u64;
        for at in (0..count).step_by(done.len()) {
            let k = (count - at).min(done.len());
            for (q, d) in done[..k].iter_mut().enumerate() {
                let v = word(at + q);
                *d = acc | v << sh;
                acc = v >> (64 - sh);
            }
            append_words(&mut self.buf, &done[..k]);
        }
        self.acc = acc as u128;
    }

    /// Append one bit.
    #[inline]
    pub fn put_bit(&mut self, b: bool) {
        self.put(b as u64, 1);
    }

    /// The same writer, leaving out tree roots that are the next of `stream` (this party's
    /// [`RootStream`] in a seeded encoding, as the dealer drew them): each run of roots
    /// ([`BitWriter::put_roots`]) becomes one bit, set if the run is left out.
    pub fn with_roots(mut self, stream: RootStream) -> BitWriter {
        self.roots = Some(stream);
        self
    }

    /// Append a run of tree roots: as 128-bit blocks, or, in a writer [`BitWriter::with_roots`],
    /// a bit that says whether they are the next of its stream (then left out) or follow.
    pub fn put_roots(&mut self, roots: &[u128]) {
        self.root_bits += 128 * roots.len() as u64;
        self.root_runs += 1;
        if let Some(s) = &mut self.roots {
            let derived = s.take_if_next(roots);
            self.put_bit(derived);
            if derived {
                return;
            }
        }
        self.put_u64_run(2 * roots.len(), |i| (roots[i / 2] >> (64 * (i % 2))) as u64);
    }

    /// Bits of the tree roots written ([`BitWriter::put_roots`]; all of them, left out or not).
    pub fn root_bits(&self) -> u64 {
        self.root_bits
    }

    /// Runs of tree roots written ([`BitWriter::put_roots`]).
    pub fn root_runs(&self) -> u64 {
        self.root_runs
    }

    /// Append a 128-bit block.
    #[inline]
    pub fn put_u128(&mut self, v: u128) {
        self.put(v as u64, 64);
        self.put((v >> 64) as u64, 64);
    }

    /// Bits written so far.
    pub fn bit_len(&self) -> u64 {
        (self.buf.len() as u64 + self.dropped.unwrap_or(0)) * 8 + self.pending as u64
    }

    /// A writer that only counts: [`BitWriter::bit_len`] is the bits of everything but the
    /// share words, [`BitWriter::share_bits`] those of the share words.
    pub fn counting() -> BitWriter {
        BitWriter::counting_split(u64::MAX)
    }

    /// As [`BitWriter::counting`], also counting the share bits of words that start before
    /// share bit `split` ([`BitWriter::share_bits_below`]).
    pub fn counting_split(split: u64) -> BitWriter {
        BitWriter {
            shares: ShareSink::Count { offset: 0, split, below: 0, words: [0; 2] },
            dropped: Some(0),
            ..BitWriter::default()
        }
    }

    /// The same writer (an empty one), behind `prefix` and a side region of `side_bytes`
    /// bytes: runs of 64-bit words ([`BitWriter::put_side_words`]: the trees' correction
    /// words) fill the region, in order, instead of the stream, which follows it. A bundle's
    /// key is its header, the region and the stream; with both the header and the region a
    /// multiple of 8 bytes, a reader takes the region's words in place ([`crate::words`]).
    /// `side_bytes` is what the key's [`BitWriter::side_bits`] counted.
    pub fn with_side_region(mut self, mut prefix: Vec<u8>, side_bytes: usize) -> BitWriter {
        debug_assert!(self.buf.is_empty() && self.pending == 0, "a fresh writer");
        let at = prefix.len();
        prefix.resize(at + side_bytes, 0);
        self.buf = prefix;
        self.side = SideSink::Region { at, end: at + side_bytes, filled: false };
        self
    }

    /// A writer that keeps only a key's side words, appended to `prefix`, and counts the
    /// rest ([`BitWriter::side_region_bytes`]): a side region made once for two keys with the
    /// same side words (a pair's correction words), without first zeroing it.
    pub fn side_region_only(prefix: Vec<u8>) -> BitWriter {
        BitWriter {
            buf: prefix,
            shares: ShareSink::Count { offset: 0, split: u64::MAX, below: 0, words: [0; 2] },
            dropped: Some(0),
            side: SideSink::Append,
            ..BitWriter::default()
        }
    }

    /// The prefix and side words of a [`BitWriter::side_region_only`] writer.
    pub fn side_region_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// The same (empty) writer behind `bytes`, whose last `side_bytes` are the side region
    /// already filled with the key's side words (as [`BitWriter::side_region_only`] wrote
    /// them): [`BitWriter::with_side_region`] without writing the region again.
    pub fn with_filled_side_region(mut self, bytes: Vec<u8>, side_bytes: usize) -> BitWriter {
        debug_assert!(self.buf.is_empty() && self.pending == 0, "a fresh writer");
        let end = bytes.len();
        let at = end.checked_sub(side_bytes).expect("the bytes hold the side region");
        self.buf = bytes;
        self.side = SideSink::Region { at, end, filled: true };
        self
    }

    /// The same (counting) writer, counting side words apart from the stream
    /// ([`BitWriter::side_bits`]), as a [`BitWriter::with_side_region`] writer stores them.
    pub fn counting_side(mut self) -> BitWriter {
        self.side = SideSink::Count;
        self
    }

    /// Append the 64-bit `words`: to the side region of a
    /// [`BitWriter::with_side_region`] writer (counted only by a
    /// [`BitWriter::counting_side`] one), else to the stream as [`BitWriter::put_u64_run`].
    ///
    /// # Panics
    /// If the words overrun the side region (its size is the dealer's count of the same
    /// key's words, not input).
    pub fn put_side_words(&mut self, words: &[u64]) {
        let count = words.len();
        match &mut self.side {
            SideSink::Stream => return self.put_u64_run(count, |i| words[i]),
            SideSink::Count => {}
            SideSink::Region { at, end, filled } => {
                let region = self.buf.get_mut(*at..*at + 8 * count).filter(|_| *at + 8 * count <= *end);
                let region = region.expect("the side region holds the key's side words");
                if *filled {
                    debug_assert!(
                        region.chunks_exact(8).zip(words).all(|(b, w)| b == w.to_le_bytes()),
                        "the filled side region holds these side words"
                    );
                } else if cfg!(target_endian = "little") {
                    // (One copy: the words' bytes are their little-endian encoding.)
                    region.copy_from_slice(bytemuck::cast_slice(words));
                } else {
                    for (b, w) in region.chunks_exact_mut(8).zip(words) {
                        b.copy_from_slice(&w.to_le_bytes());
                    }
                }
                *at += 8 * count;
            }
            SideSink::Append => append_words(&mut self.buf, words),
        }
        self.side_bits += 64 * count as u64;
    }

    /// Bits of side words so far ([`BitWriter::put_side_words`] into a region or counted;
    /// a counting writer's [`BitWriter::bit_len`] leaves them out).
    pub fn side_bits(&self) -> u64 {
        self.side_bits
    }

    /// Room for `bits` more bits without growing.
    pub fn reserve(&mut self, bits: u64) {
        if self.dropped.is_none() {
            self.buf.reserve(bits.div_ceil(8) as usize + 8);
        }
    }

    /// Pad with zero bits to a byte boundary and return the bytes.
    pub fn finish(mut self) -> Vec<u8> {
        debug_assert!(
            !matches!(self.side, SideSink::Region { at, end, .. } if at != end),
            "the side region is filled"
        );
        while self.pending > 0 {
            self.buf.push(self.acc as u8);
            self.acc >>= 8;
            self.pending = self.pending.saturating_sub(8);
        }
        self.buf
    }
}

/// The pad side of a split key's reader.
struct PadSplit {
    pad: PadStream,
    offset: u64,
    split: u64,
    seeded_below: bool,
}

impl PadSplit {
    /// From the current word on, how many of the next `count ≤` words of `bits` bits lie on
    /// its side of the split, and whether they are this party's pad words (advancing past
    /// them: the caller reads them from the pad or the data).
    #[inline]
    fn segment(&mut self, bits: u32, count: usize) -> (usize, bool) {
        let below = self.offset < self.split;
        let k = side_run(self.offset, self.split, bits, count);
        self.offset += k as u64 * bits as u64;
        (k, below == self.seeded_below)
    }

    /// The pad's bits for the next share word of `bits` bits if it is this party's pad word
    /// (the pad advances for every word).
    #[inline]
    fn next(&mut self, bits: u32) -> Option<u64> {
        let p = self.pad.take(bits);
        let below = self.offset < self.split;
        self.offset += bits as u64;
        (below == self.seeded_below).then_some(p)
    }
}

/// Reads what a [`BitWriter`] wrote; every read is bounds-checked.
pub struct BitReader<'a> {
    data: &'a [u8],
    pos: u64,
    /// Where share words come from in a split key ([`BitReader::with_pad`]).
    pad: Option<PadSplit>,
    /// This party's root stream in a seeded key ([`BitReader::with_roots`]).
    roots: Option<RootStream>,
    /// The side region of a key written [`BitWriter::with_side_region`] ([`BitReader::with_side`]).
    side: Option<SideRegion<'a>>,
}

/// A reader's side region: its bytes, how many are read, and the buffer they lie in with
/// their offset there (to read words in place).
struct SideRegion<'a> {
    bytes: &'a [u8],
    at: usize,
    buffer: Option<(Arc<dyn KeyBuffer>, usize)>,
}

impl<'a> BitReader<'a> {
    /// A reader over `data`, starting at bit 0.
    pub fn new(data: &'a [u8]) -> BitReader<'a> {
        BitReader { data, pos: 0, pad: None, roots: None, side: None }
    }

    /// The same reader, for a key written [`BitWriter::with_side_region`] whose side region is
    /// `bytes`; with `buffer` (the buffer `bytes` lie in, and their offset there), words
    /// read from it are read in place where they are 8-byte aligned ([`SharedWords`]).
    pub fn with_side(
        mut self,
        bytes: &'a [u8],
        buffer: Option<(Arc<dyn KeyBuffer>, usize)>,
    ) -> BitReader<'a> {
        self.side = Some(SideRegion { bytes, at: 0, buffer });
        self
    }

    /// Read `count` 64-bit words written by [`BitWriter::put_side_words`]: from the side
    /// region (in place where it can), else from the stream.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer than `count` words remain (nothing is read).
    pub fn get_side_words(&mut self, count: usize) -> Result<Words, DecodeError> {
        let Some(s) = &mut self.side else {
            let mut v = Vec::new();
            self.get_run(64, count, &mut v)?;
            return Ok(Words::Owned(v));
        };
        let bytes = s.at.checked_add(count.saturating_mul(8)).and_then(|end| s.bytes.get(s.at..end)).ok_or(
            DecodeError::Truncated {
                needed: s.at.saturating_add(count.saturating_mul(8)),
                available: s.bytes.len(),
            },
        )?;
        let shared = s.buffer.as_ref().and_then(|(b, off)| SharedWords::new(b, off + s.at, count));
        s.at += bytes.len();
        Ok(match shared {
            Some(w) => Words::Shared(w),
            None => Words::Owned(
                bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect(),
            ),
        })
    }

    /// A reader of a key written by [`BitWriter::split`] with the same `split` and
    /// `seeded_below`: this party's pad words are its `pad` at their share bits, the rest
    /// come from `data`.
    pub fn with_pad(data: &'a [u8], pad: PadStream, split: u64, seeded_below: bool) -> BitReader<'a> {
        BitReader {
            data,
            pos: 0,
            pad: Some(PadSplit { pad, offset: 0, split, seeded_below }),
            roots: None,
            side: None,
        }
    }

    /// The same reader, for a key written [`BitWriter::with_roots`] this party's `stream`:
    /// runs of roots left out are regenerated from it.
    pub fn with_roots(mut self, stream: RootStream) -> BitReader<'a> {
        self.roots = Some(stream);
        self
    }

    /// Read a run of `count` tree roots ([`BitWriter::put_roots`]), appended to `out`.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if the stream is short.
    pub fn get_roots(&mut self, count: usize, out: &mut Vec<u128>) -> Result<(), DecodeError> {
        if self.roots.is_some() && self.get_bit()? {
            self.roots.as_mut().expect("checked").take(count, out);
            return Ok(());
        }
        self.get_u128_run(count, out)
    }

    /// Read a share word of `bits ≤ 64` bits ([`BitWriter::put_share`]).
    ///
    /// # Errors
    /// As [`BitReader::get`].
    #[inline]
    pub fn get_share(&mut self, bits: u32) -> Result<u64, DecodeError> {
        if let Some(p) = &mut self.pad
            && let Some(v) = p.next(bits)
        {
            return Ok(v);
        }
        self.get(bits)
    }

    /// The next `nbits` bits as a bit string appended to `out` (64 to a word, the last
    /// word's bits past them clear).
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer than `nbits` bits remain (nothing is read).
    fn get_bit_string(&mut self, nbits: usize, out: &mut Vec<u64>) -> Result<(), DecodeError> {
        self.ensure(nbits as u64)?;
        crate::fields::copy_bit_string(self.data, self.pos, nbits, out);
        self.pos += nbits as u64;
        Ok(())
    }

    /// Read `count` one-bit share words ([`BitWriter::put_share`] of width 1), packed 64 to
    /// a word (bit `i % 64` of word `i / 64`), appended to `out`. The stored and the pad's
    /// bits are copied a 64-bit word at a time.
    ///
    /// # Errors
    /// As [`BitReader::get_run`].
    pub fn get_share_bits_packed(&mut self, count: usize, out: &mut Vec<u64>) -> Result<(), DecodeError> {
        if self.pad.is_none() {
            return self.get_bit_string(count, out);
        }
        // Segments on one side of the split: bits up to a word boundary of `out`, then whole
        // words read as one run (from the pad or the stream), then the last bits.
        // `out` grows with the bits placed (a word zeroed as it is first written, never
        // the whole run ahead of the words appended over it).
        let base = out.len();
        out.reserve(count.div_ceil(64));
        let grow = |out: &mut Vec<u64>, bits: usize| {
            let want = base + bits.div_ceil(64);
            if out.len() < want {
                out.resize(want, 0);
            }
        };
        let mut i = 0;
        while i < count {
            let (seg, mine) = self.pad.as_mut().expect("a pad").segment(1, count - i);
            if !mine {
                // The other party's pad words: passed over at once, the words read.
                self.pad.as_mut().expect("a pad").pad.skip(seg as u64);
            }
            let end = i + seg;
            let part = |r: &mut Self, j: usize, k: usize, out: &mut Vec<u64>| -> Result<(), DecodeError> {
                let k = k as u32;
                let v = if mine { r.pad.as_mut().expect("a pad").pad.take(k) } else { r.get(k)? };
                place_bits(&mut out[base..], j, v, k);
                Ok(())
            };
            let head = ((64 - i % 64) % 64).min(seg);
            if head > 0 {
                grow(out, i + head);
                part(self, i, head, out)?;
            }
            let j = i + head;
            let whole = (end - j) / 64;
            if whole > 0 {
                // (`out` ends at word `j / 64`: the whole words are appended.)
                debug_assert_eq!(out.len(), base + j / 64);
                if mine {
                    self.pad.as_mut().expect("a pad").pad.take_bit_string(64 * whole, out);
                } else {
                    self.get_bit_string(64 * whole, out)?;
                }
            }
            let j = j + 64 * whole;
            if end > j {
                grow(out, end);
                part(self, j, end - j, out)?;
            }
            i = end;
        }
        Ok(())
    }

    /// Read `count` share words of `bits ≤ 64` bits each, mapped by `map`, appended to
    /// `out` (as [`BitReader::get_run_map`] for share words).
    ///
    /// # Errors
    /// As [`BitReader::get_run`].
    pub fn get_share_run_map<T>(
        &mut self,
        bits: u32,
        count: usize,
        out: &mut Vec<T>,
        map: impl Fn(u64) -> T,
    ) -> Result<(), DecodeError> {
        if self.pad.is_none() {
            return self.get_run_map(bits, count, out, map);
        }
        out.reserve(count);
        let mut left = count;
        while left > 0 {
            let p = self.pad.as_mut().expect("a pad");
            let (k, mine) = p.segment(bits, left);
            if mine {
                p.pad.take_run(bits, k, out, &map);
            } else {
                p.pad.skip(k as u64 * bits as u64);
                self.get_run_map(bits, k, out, &map)?;
            }
            left -= k;
        }
        Ok(())
    }

    /// Read `count` share words of `bits` (1..=64) bits each, kept as stored
    /// ([`PackedWords`]: the words the key holds copied as they are, this party's pad
    /// words left in the pad). The words and the reader's position are those of
    /// [`BitReader::get_share_run_map`].
    ///
    /// # Errors
    /// As [`BitReader::get_run`].
    pub fn get_share_run_packed(&mut self, bits: u32, count: usize) -> Result<PackedWords, DecodeError> {
        assert!((1..=64).contains(&bits), "share words of {bits} bits");
        let mut out = PackedWords::new(bits);
        let mut left = count;
        while left > 0 {
            let (k, mine) = match self.pad.as_mut() {
                None => (left, false),
                Some(p) => {
                    let (k, mine) = p.segment(bits, left);
                    if mine {
                        out.push_pad(p.pad.cipher(), p.pad.position(), k);
                    }
                    p.pad.skip(k as u64 * bits as u64);
                    (k, mine)
                }
            };
            if !mine {
                let need = k as u64 * bits as u64;
                self.ensure(need)?;
                out.push_stored(self.data, self.pos, k);
                self.pos += need;
            }
            left -= k;
        }
        Ok(out)
    }

    /// [`DecodeError::Truncated`] unless `bits` more bits remain.
    fn ensure(&self, bits: u64) -> Result<(), DecodeError> {
        if bits > self.remaining_bits() {
            return Err(DecodeError::Truncated {
                needed: (self.pos + bits).div_ceil(8) as usize,
                available: self.data.len(),
            });
        }
        Ok(())
    }

    /// Bits not yet read.
    pub fn remaining_bits(&self) -> u64 {
        self.data.len() as u64 * 8 - self.pos
    }

    /// Bits of the side region not yet read ([`BitReader::with_side`]; 0 without one).
    pub fn remaining_side_bits(&self) -> u64 {
        self.side.as_ref().map_or(0, |s| (s.bytes.len() - s.at) as u64 * 8)
    }

    /// Read a field of `bits ≤ 64` bits.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer than `bits` bits remain.
    #[inline]
    pub fn get(&mut self, bits: u32) -> Result<u64, DecodeError> {
        debug_assert!(bits <= 64);
        if bits == 0 {
            return Ok(0);
        }
        let end = self.pos + bits as u64;
        if end > self.data.len() as u64 * 8 {
            return Err(DecodeError::Truncated {
                needed: end.div_ceil(8) as usize,
                available: self.data.len(),
            });
        }
        let first = (self.pos / 8) as usize;
        // A field spans at most 9 bytes: read 16 at once where they exist (no copy of a
        // variable length), else only up to the field's last byte.
        let window = match self.data.get(first..first + 16) {
            Some(w) => u128::from_le_bytes(w.try_into().expect("16 bytes")),
            None => {
                let last = ((end - 1) / 8) as usize;
                let mut w = [0u8; 16];
                w[..=last - first].copy_from_slice(&self.data[first..=last]);
                u128::from_le_bytes(w)
            }
        };
        let v = (window >> (self.pos % 8)) as u64 & mask(bits);
        self.pos = end;
        Ok(v)
    }

    /// Read `count` fields of `bits ≤ 64` bits each, appended to `out`: as `count` calls of
    /// [`BitReader::get`], with one bounds check for the run (key material is long runs of
    /// fields of one width).
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer than `count · bits` bits remain (nothing is read).
    pub fn get_run(&mut self, bits: u32, count: usize, out: &mut Vec<u64>) -> Result<(), DecodeError> {
        self.get_run_map(bits, count, out, |v| v)
    }

    /// As [`BitReader::get_run`], each field mapped by `map` (say, into a narrower type)
    /// as it is read.
    ///
    /// # Errors
    /// As [`BitReader::get_run`].
    pub fn get_run_map<T>(
        &mut self,
        bits: u32,
        count: usize,
        out: &mut Vec<T>,
        map: impl Fn(u64) -> T,
    ) -> Result<(), DecodeError> {
        debug_assert!(bits <= 64);
        let need = count as u64 * bits as u64;
        self.ensure(need)?;
        out.reserve(count);
        if bits == 0 {
            out.extend(std::iter::repeat_with(|| map(0)).take(count));
            return Ok(());
        }
        let safe = read_fields(self.data, self.pos, bits, count, out, &map);
        self.pos += safe as u64 * bits as u64;
        for _ in safe..count {
            out.push(map(self.get(bits)?));
        }
        Ok(())
    }

    /// Read `count` 128-bit blocks, appended to `out` (as `count` calls of
    /// [`BitReader::get_u128`], one bounds check for the run).
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer than `128 · count` bits remain (nothing is read).
    pub fn get_u128_run(&mut self, count: usize, out: &mut Vec<u128>) -> Result<(), DecodeError> {
        let need = count as u64 * 128;
        self.ensure(need)?;
        out.reserve(count);
        if self.pos.is_multiple_of(8) {
            // Byte-aligned: the blocks are the bytes as they are.
            let first = (self.pos / 8) as usize;
            let bytes = &self.data[first..first + 16 * count];
            out.extend(bytes.chunks_exact(16).map(|c| u128::from_le_bytes(c.try_into().expect("16 bytes"))));
            self.pos += need;
            return Ok(());
        }
        // Not byte-aligned: each block from its 16 bytes and the next byte, shifted (`o` is
        // 1..=7; 64-bit shifts), for the blocks with a byte after them (from a sized
        // iterator); the last through `get_u128`.
        let (first, o) = ((self.pos / 8) as usize, (self.pos % 8) as u32);
        let whole = count.min((self.data.len() - first).saturating_sub(1) / 16);
        let src = &self.data[first..first + 16 * whole + 1];
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        out.extend(src.chunks_exact(16).zip(src.get(16..).unwrap_or_default().iter().step_by(16)).map(
            |(b, &nx)| {
                let (w0, w1) = (word(&b[..8]), word(&b[8..]));
                u128::from(w0 >> o | w1 << (64 - o)) | u128::from(w1 >> o | u64::from(nx) << (64 - o)) << 64
            },
        ));
        self.pos += 128 * whole as u64;
        for _ in whole..count {
            out.push(self.get_u128()?);
        }
        Ok(())
    }

    /// Read one bit.
    #[inline]
    pub fn get_bit(&mut self) -> Result<bool, DecodeError> {
        Ok(self.get(1)? == 1)
    }

    /// Read a 128-bit block.
    #[inline]
    pub fn get_u128(&mut self) -> Result<u128, DecodeError> {
        let lo = self.get(64)? as u128;
        let hi = self.get(64)? as u128;
        Ok(lo | hi << 64)
    }

    /// Check that only zero padding (< 8 bits) remains, and all of the side region is read.
    ///
    /// # Errors
    /// [`DecodeError::TrailingBytes`] if whole bytes remain, [`DecodeError::InvalidField`] if
    /// the padding bits are not zero.
    pub fn finish(mut self) -> Result<(), DecodeError> {
        if let Some(s) = &self.side
            && s.at < s.bytes.len()
        {
            return Err(DecodeError::TrailingBytes(s.bytes.len() - s.at));
        }
        let rest = self.remaining_bits();
        if rest >= 8 {
            return Err(DecodeError::TrailingBytes((rest / 8) as usize));
        }
        if self.get(rest as u32)? != 0 {
            return Err(DecodeError::InvalidField("non-zero padding bits"));
        }
        Ok(())
    }
}

/// The kinds of standalone keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum KeyKind {
    Dpf = 1,
    BitDpf = 2,
    Dcf = 3,
    Adpf = 4,
}

impl KeyKind {
    fn name(self) -> &'static str {
        match self {
            KeyKind::Dpf => "DPF",
            KeyKind::BitDpf => "1-bit DPF",
            KeyKind::Dcf => "DCF",
            KeyKind::Adpf => "arithmetic DPF",
        }
    }
}

/// The envelope header of a standalone key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: KeyKind,
    pub party: Party,
    pub domain_bits: u8,
    pub out_bits: u8,
    pub payload_words: u16,
    pub variant: u8,
    pub count: u32,
}

const MAGIC: [u8; 4] = *b"FSSK";
/// The envelope format version this build writes and reads.
pub const FORMAT_VERSION: u8 = 1;
const HEADER_LEN: usize = 16;
const CRC_LEN: usize = 4;
/// Bytes the envelope adds around the key material.
pub const ENVELOPE_OVERHEAD: usize = HEADER_LEN + CRC_LEN;

/// Wrap material written by `write` in the envelope.
pub(crate) fn seal(header: Header, write: impl FnOnce(&mut BitWriter)) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(HEADER_LEN);
    prefix.extend_from_slice(&MAGIC);
    prefix.push(FORMAT_VERSION);
    prefix.push(header.kind as u8);
    prefix.push(header.party.bit());
    prefix.push(header.domain_bits);
    prefix.push(header.out_bits);
    prefix.extend_from_slice(&header.payload_words.to_le_bytes());
    prefix.push(header.variant);
    prefix.extend_from_slice(&header.count.to_le_bytes());
    let mut w = BitWriter::with_prefix(prefix);
    write(&mut w);
    let mut out = w.finish();
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Check the envelope of `bytes` for a key of `kind`; return its header and material.
pub(crate) fn open(bytes: &[u8], kind: KeyKind) -> Result<(Header, &[u8]), DecodeError> {
    if bytes.len() < ENVELOPE_OVERHEAD {
        return Err(DecodeError::Truncated { needed: ENVELOPE_OVERHEAD, available: bytes.len() });
    }
    if bytes[..4] != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    if bytes[4] != FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion { found: bytes[4], supported: FORMAT_VERSION });
    }
    let (body, crc) = bytes.split_at(bytes.len() - CRC_LEN);
    let crc = u32::from_le_bytes(crc.try_into().expect("4-byte slice"));
    if crc32fast::hash(body) != crc {
        return Err(DecodeError::Checksum);
    }
    if body[5] != kind as u8 {
        return Err(DecodeError::WrongKind { expected: kind.name(), found: body[5] });
    }
    let header = Header {
        kind,
        party: Party::from_index(body[6])?,
        domain_bits: body[7],
        out_bits: body[8],
        payload_words: u16::from_le_bytes([body[9], body[10]]),
        variant: body[11],
        count: u32::from_le_bytes([body[12], body[13], body[14], body[15]]),
    };
    Ok((header, &body[HEADER_LEN..]))
}

/// Check that `material` has exactly the length of `bits` bits rounded up to bytes.
pub(crate) fn expect_material_len(material: &[u8], bits: u64) -> Result<(), DecodeError> {
    let needed = bits.div_ceil(8) as usize;
    match material.len() {
        l if l < needed => Err(DecodeError::Truncated { needed, available: l }),
        l if l > needed => Err(DecodeError::TrailingBytes(l - needed)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key of share words of every width between plain fields, both parties' keys
    /// written split at every point: the plain fields read back unchanged, the share words
    /// still add up to the values, each key stores only its words on its side of the split,
    /// and a counting writer counts what they hold.
    #[test]
    fn split_share_words_still_add_up() {
        use crate::pad::PadStream;
        use crate::rng::{DealerRng, Rng, SeedableRng};
        let mut rng = DealerRng::seed_from_u64(5);
        let widths: Vec<u32> = (0..=64).chain([1, 1, 1, 37, 50, 64]).collect();
        let total: u64 = widths.iter().map(|&b| b as u64).sum();
        let values: Vec<u64> = widths.iter().map(|&b| rng.next_u64() & mask(b)).collect();
        let ours: Vec<u64> = widths.iter().map(|&b| rng.next_u64() & mask(b)).collect();
        let theirs: Vec<u64> =
            values.iter().zip(&ours).zip(&widths).map(|((v, a), &b)| v.wrapping_sub(*a) & mask(b)).collect();
        let plain = |i: usize| (i as u64 * 0x9e37_79b9) & mask(13);
        let write = |w: &mut BitWriter, shares: &[u64]| {
            for (i, (&v, &b)) in shares.iter().zip(&widths).enumerate() {
                w.put(plain(i), 13);
                w.put_share(v, b);
            }
        };
        let (seed0, seed1) = ([9u8; 16], [10u8; 16]);
        for split in [0, 1, 64, 65, total / 2, total - 1, total, u64::MAX] {
            let mut c = BitWriter::counting_split(split);
            write(&mut c, &ours);
            assert_eq!((c.bit_len(), c.share_bits()), (13 * widths.len() as u64, total));
            let below = c.share_bits_below();
            // Words of two bits or more on each side: by where each word starts.
            let mut at = 0u64;
            let mut words = [0u64; 2];
            for &b in &widths {
                if b > 1 {
                    words[(at >= split) as usize] += 1;
                }
                at += b as u64;
            }
            assert_eq!(c.share_words_split(), words, "split {split}");
            let mut w = BitWriter::recording_shares(split, true);
            write(&mut w, &theirs);
            let mut w0 = BitWriter::split(w.into_shares(), PadStream::new(&seed1), split, true);
            write(&mut w0, &ours);
            assert_eq!(w0.bit_len(), c.bit_len() + total - below, "split {split}");
            let (k0, own) = w0.finish_split();
            let mut w1 = BitWriter::split(own, PadStream::new(&seed0), split, false);
            write(&mut w1, &theirs);
            assert_eq!(w1.bit_len(), c.bit_len() + below, "split {split}");
            let (k1, _) = w1.finish_split();
            let mut a = BitReader::with_pad(&k0, PadStream::new(&seed0), split, true);
            let mut b = BitReader::with_pad(&k1, PadStream::new(&seed1), split, false);
            for (i, (&v, &bits)) in values.iter().zip(&widths).enumerate() {
                assert_eq!(a.get(13).unwrap(), plain(i));
                assert_eq!(b.get(13).unwrap(), plain(i));
                let (x, y) = (a.get_share(bits).unwrap(), b.get_share(bits).unwrap());
                assert_eq!(x.wrapping_add(y) & mask(bits), v, "split {split}, word {i} of {bits} bits");
            }
            a.finish().unwrap();
            b.finish().unwrap();
        }
        // One-bit words written one by one, read packed 64 to a word, split anywhere.
        let bits: Vec<u64> = (0..200).map(|_| rng.next_u64() & 1).collect();
        let ours: Vec<u64> = (0..200).map(|_| rng.next_u64() & 1).collect();
        let theirs: Vec<u64> = bits.iter().zip(&ours).map(|(b, o)| b ^ o).collect();
        for split in [0, 1, 63, 64, 100, 130, 200] {
            let put = |w: &mut BitWriter, v: &[u64]| v.iter().for_each(|&x| w.put_share(x, 1));
            let mut w = BitWriter::recording_shares(split, true);
            put(&mut w, &theirs);
            let mut w0 = BitWriter::split(w.into_shares(), PadStream::new(&seed1), split, true);
            put(&mut w0, &ours);
            let (k0, own) = w0.finish_split();
            let mut w1 = BitWriter::split(own, PadStream::new(&seed0), split, false);
            put(&mut w1, &theirs);
            let (k1, _) = w1.finish_split();
            let (mut p0, mut p1) = (vec![], vec![]);
            let mut a = BitReader::with_pad(&k0, PadStream::new(&seed0), split, true);
            let mut b = BitReader::with_pad(&k1, PadStream::new(&seed1), split, false);
            a.get_share_bits_packed(200, &mut p0).unwrap();
            b.get_share_bits_packed(200, &mut p1).unwrap();
            a.finish().unwrap();
            b.finish().unwrap();
            for (i, &v) in bits.iter().enumerate() {
                assert_eq!((p0[i / 64] ^ p1[i / 64]) >> (i % 64) & 1, v, "split {split}, bit {i}");
            }
        }
    }

    /// Packed one-bit share words, read with a pad or without, are the words read one by
    /// one, wherever the split falls (before, inside and after the run, on and off word
    /// boundaries), on either side of it, behind any stream offset, for runs shorter and
    /// longer than a word.
    #[test]
    fn packed_share_bits_are_the_single_reads() {
        use crate::pad::PadStream;
        use crate::rng::{DealerRng, Rng, SeedableRng};
        let mut rng = DealerRng::seed_from_u64(21);
        let data: Vec<u8> = (0..2048).map(|_| rng.next_u64() as u8).collect();
        let splits = [
            None,
            Some(0u64),
            Some(1),
            Some(3),
            Some(63),
            Some(64),
            Some(65),
            Some(500),
            Some(4000),
            Some(9999),
        ];
        for lead in [0u32, 1, 7, 63, 64, 65] {
            for count in [1usize, 5, 63, 64, 65, 129, 1000, 4000] {
                for split in splits {
                    for seeded_below in [true, false] {
                        let reader = || {
                            let mut r = match split {
                                Some(s) => {
                                    BitReader::with_pad(&data, PadStream::new(&[9u8; 16]), s, seeded_below)
                                }
                                None => BitReader::new(&data),
                            };
                            r.get(lead.min(64)).unwrap();
                            r.get(lead.saturating_sub(64)).unwrap();
                            r
                        };
                        let mut one = reader();
                        let single: Vec<u64> = (0..count).map(|_| one.get_share(1).unwrap()).collect();
                        let mut packed = vec![7u64];
                        let mut run = reader();
                        run.get_share_bits_packed(count, &mut packed).unwrap();
                        let want: Vec<u64> = [7u64]
                            .into_iter()
                            .chain(
                                single
                                    .chunks(64)
                                    .map(|c| c.iter().enumerate().fold(0, |w, (i, &b)| w | b << i)),
                            )
                            .collect();
                        let at = format!("lead {lead}, count {count}, split {split:?}, below {seeded_below}");
                        assert_eq!(packed, want, "{at}");
                        // Both readers are at the same place in the stream and the pad after.
                        assert_eq!(run.get_share(17).unwrap(), one.get_share(17).unwrap(), "{at}");
                        assert_eq!(run.remaining_bits(), one.remaining_bits(), "{at}");
                        if split.is_none() {
                            break;
                        }
                    }
                }
            }
        }
    }

    /// A run of share words kept packed reads, block by block at any offset, the words a
    /// mapped run reads, and leaves the reader (and its pad) where that run does: with and
    /// without a pad, across the split and on either side of it, behind any offset, at
    /// every class of width. A short stream is an error.
    #[test]
    fn packed_share_runs_are_the_mapped_reads() {
        use crate::pad::PadStream;
        use crate::rng::{DealerRng, Rng, SeedableRng};
        let mut rng = DealerRng::seed_from_u64(22);
        let data: Vec<u8> = (0..40_000).map(|_| rng.next_u64() as u8).collect();
        let splits = [None, Some(0u64), Some(1), Some(37), Some(4000), Some(100_000), Some(1 << 40)];
        let mut scratch = vec![];
        for bits in [1u32, 2, 13, 32, 33, 37, 57, 58, 64] {
            for lead in [0u32, 3, 64, 101] {
                for count in [0usize, 1, 7, 8, 9, 511, 2000] {
                    for split in splits {
                        for seeded_below in [true, false] {
                            let reader = || {
                                let mut r = match split {
                                    Some(s) => BitReader::with_pad(
                                        &data,
                                        PadStream::new(&[5u8; 16]),
                                        s,
                                        seeded_below,
                                    ),
                                    None => BitReader::new(&data),
                                };
                                r.get(lead.min(64)).unwrap();
                                r.get(lead.saturating_sub(64)).unwrap();
                                r
                            };
                            let at = format!(
                                "bits {bits} lead {lead} count {count} split {split:?} {seeded_below}"
                            );
                            let mut mapped = reader();
                            let mut want = vec![];
                            mapped.get_share_run_map(bits, count, &mut want, |x| x).unwrap();
                            let mut run = reader();
                            let packed = run.get_share_run_packed(bits, count).unwrap();
                            assert_eq!((packed.len(), packed.bits()), (count, bits), "{at}");
                            for r in [0..count, 0..count / 2, count / 3..count, count / 2..count / 2 + 1] {
                                if r.end > count {
                                    continue;
                                }
                                let mut got = vec![0; r.len()];
                                packed.read_into(r.clone(), &mut got, &mut scratch);
                                assert_eq!(got, want[r.clone()], "{at} {r:?}");
                            }
                            assert_eq!(run.get_share(17).unwrap(), mapped.get_share(17).unwrap(), "{at}");
                            assert_eq!(run.remaining_bits(), mapped.remaining_bits(), "{at}");
                            if split.is_none() {
                                break;
                            }
                        }
                    }
                }
            }
        }
        // Short: an error, nothing read; no pad words to stand in for the missing bytes.
        let mut r = BitReader::new(&data[..10]);
        assert!(r.get_share_run_packed(37, 3).is_err());
        assert_eq!(r.remaining_bits(), 80);
        let mut r = BitReader::with_pad(&data[..10], PadStream::new(&[5u8; 16]), 1 << 40, false);
        assert!(r.get_share_run_packed(37, 3).is_err());
        let mut r = BitReader::with_pad(&data[..10], PadStream::new(&[5u8; 16]), 1 << 40, true);
        assert_eq!(r.get_share_run_packed(37, 1000).unwrap().len(), 1000, "all pad words");
    }

    #[test]
    fn runs_write_what_single_writes_write() {
        use crate::pad::PadStream;
        use crate::rng::{DealerRng, Rng, SeedableRng};
        let mut rng = DealerRng::seed_from_u64(8);
        // Each run behind a prefix of every length mod 64, so every accumulator state occurs.
        for lead in 0..70u32 {
            for bits in [1u32, 2, 7, 8, 9, 13, 32, 33, 37, 50, 57, 58, 63, 64] {
                // Short runs, and for some leads runs across the bulk writer's blocks
                // (4,096 bits) and the split writer's chunks (1,024 words).
                let long = if lead % 5 == 2 { 4_000 } else { 0 };
                let count = 1 + long + (rng.next_u64() % 300) as usize;
                let a: Vec<u64> = (0..count).map(|_| rng.next_u64() & mask(bits)).collect();
                let b: Vec<u64> = (0..count).map(|_| rng.next_u64() & mask(bits)).collect();
                let lead_word = rng.next_u64();
                let singles = |w: &mut BitWriter, v: &[u64]| {
                    w.put(lead_word, lead.min(64));
                    w.put(lead_word, lead.saturating_sub(64));
                    v.iter().for_each(|&x| w.put_share(x, bits));
                    v.iter().for_each(|&x| w.put(x, 64));
                    v.iter().for_each(|&x| w.put(x, bits));
                };
                let runs = |w: &mut BitWriter, v: &[u64]| {
                    w.put(lead_word, lead.min(64));
                    w.put(lead_word, lead.saturating_sub(64));
                    w.put_share_run(bits, v.len(), |i| v[i]);
                    w.put_u64_run(v.len(), |i| v[i]);
                    w.put_run(bits, v.len(), |i| v[i]);
                };
                let both = |make: &dyn Fn() -> BitWriter, v: &[u64]| {
                    let (mut x, mut y) = (make(), make());
                    singles(&mut x, v);
                    runs(&mut y, v);
                    (x, y)
                };
                let (x, y) = both(&BitWriter::new, &a);
                assert_eq!(x.finish(), y.finish(), "inline, lead {lead}, {bits} bits");
                let split = lead as u64 * 3;
                let (x, y) = both(&|| BitWriter::counting_split(split), &a);
                assert_eq!(
                    (x.bit_len(), x.share_bits(), x.share_bits_below()),
                    (y.bit_len(), y.share_bits(), y.share_bits_below()),
                    "counting, lead {lead}, {bits} bits"
                );
                let (x, y) = both(&|| BitWriter::recording_shares(split, true), &b);
                let (theirs, theirs_run) = (x.into_shares(), y.into_shares());
                assert_eq!(theirs, theirs_run);
                let pad = || PadStream::new(&[3u8; 16]);
                let (x, y) = both(&|| BitWriter::split(theirs.clone(), pad(), split, true), &a);
                let (k0, own) = x.finish_split();
                assert_eq!((k0.clone(), own), y.finish_split(), "split, lead {lead}, {bits} bits");
                // One-bit words packed: the same as one by one, in every sink.
                if bits == 1 {
                    let packed: Vec<u64> =
                        a.chunks(64).map(|c| c.iter().enumerate().fold(0, |w, (i, &b)| w | b << i)).collect();
                    let makes: [&dyn Fn() -> BitWriter; 3] =
                        [&BitWriter::new, &|| BitWriter::recording_shares(split, true), &|| {
                            BitWriter::split(theirs.clone(), pad(), split, true)
                        }];
                    for (m, make) in makes.into_iter().enumerate() {
                        let (mut x, mut y) = (make(), make());
                        x.put(lead_word, lead.min(64));
                        y.put(lead_word, lead.min(64));
                        a.iter().for_each(|&v| x.put_share(v, 1));
                        y.put_share_bits(a.len(), &packed);
                        assert_eq!(x.bit_len(), y.bit_len());
                        if m == 1 {
                            assert_eq!(x.into_shares(), y.into_shares(), "packed record, lead {lead}");
                        } else {
                            assert_eq!(x.finish_split(), y.finish_split(), "packed, lead {lead}");
                        }
                    }
                }
                // Read back with the pad: runs read what single reads read.
                let reader = || {
                    let mut r = BitReader::with_pad(&k0, PadStream::new(&[4u8; 16]), split, true);
                    r.get(lead.min(64)).unwrap();
                    r.get(lead.saturating_sub(64)).unwrap();
                    r
                };
                let mut r1 = reader();
                let single: Vec<u64> = (0..count).map(|_| r1.get_share(bits).unwrap()).collect();
                let mut r2 = reader();
                let mut run = vec![];
                r2.get_share_run_map(bits, count, &mut run, |v| v).unwrap();
                assert_eq!(single, run, "read run, lead {lead}, {bits} bits");
                assert_eq!(r1.get_run(64, count, &mut vec![]).map(|_| ()), Ok(()));
                if bits == 1 {
                    let mut r3 = reader();
                    let mut packed = vec![];
                    r3.get_share_bits_packed(count, &mut packed).unwrap();
                    let want: Vec<u64> = single
                        .chunks(64)
                        .map(|c| c.iter().enumerate().fold(0, |w, (i, &b)| w | b << i))
                        .collect();
                    assert_eq!(packed, want, "read packed, lead {lead}");
                }
            }
        }
    }

    #[test]
    fn bit_stream_round_trip() {
        let fields: Vec<(u64, u32)> = (1..=64u32)
            .map(|b| (0x9e37_79b9_7f4a_7c15u64.rotate_left(b) & mask(b), b))
            .chain([(1, 1), (0, 3), (5, 3)])
            .collect();
        let mut w = BitWriter::new();
        for &(v, b) in &fields {
            w.put(v, b);
        }
        w.put_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let total = w.bit_len();
        let bytes = w.finish();
        assert_eq!(bytes.len() as u64, total.div_ceil(8));
        let mut r = BitReader::new(&bytes);
        for &(v, b) in &fields {
            assert_eq!(r.get(b).unwrap(), v);
        }
        assert_eq!(r.get_u128().unwrap(), 0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        r.finish().unwrap();
    }

    #[test]
    fn runs_read_what_single_reads_read() {
        // Runs of every width, after every offset in a byte, across the end where the
        // unchecked window stops, against field-by-field reads of the same stream.
        let mut x = 0x243f_6a88_85a3_08d3u64;
        let mut next = || {
            x = x.rotate_left(13).wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
            x
        };
        for lead in 0..8u32 {
            for bits in [0u32, 1, 3, 8, 12, 37, 56, 57, 58, 63, 64] {
                // (Runs across the bulk readers' pieces of 256 blocks, too.)
                let count = if bits == 37 { 600 } else { 41 };
                let mut w = BitWriter::new();
                w.put(next() & mask(lead), lead);
                let vals: Vec<u64> = (0..count).map(|_| next() & mask(bits)).collect();
                vals.iter().for_each(|&v| w.put(v, bits));
                let blocks: Vec<u128> =
                    (0..count).map(|_| u128::from(next()) << 64 | u128::from(next())).collect();
                blocks.iter().for_each(|&b| w.put_u128(b));
                let bytes = w.finish();
                let mut r = BitReader::new(&bytes);
                r.get(lead).unwrap();
                let (mut got, mut got32, mut got_b) = (vec![], vec![], vec![]);
                let mut r2 = BitReader::new(&bytes);
                r2.get(lead).unwrap();
                r.get_run(bits, count, &mut got).unwrap();
                r2.get_run_map(bits, count, &mut got32, |v| v as u128).unwrap();
                r.get_u128_run(count, &mut got_b).unwrap();
                assert_eq!(got, vals, "{lead} + {bits}");
                assert_eq!(got32, vals.iter().map(|&v| u128::from(v)).collect::<Vec<_>>());
                assert_eq!(got_b, blocks, "{lead} + {bits}");
                r.finish().unwrap();
                // A run longer than the stream reads nothing and fails.
                let mut r = BitReader::new(&bytes);
                let mut none = vec![];
                assert!(r.get_u128_run(2 * count + 100, &mut none).is_err() && none.is_empty());
            }
        }
    }

    #[test]
    fn runs_at_the_end_of_the_stream_read_what_single_reads_read() {
        // The bulk reads stop where a field's 8- or 16-byte read window would leave the data
        // and read the rest checked: runs that end the stream, of every width around the
        // window's switch (57/58 bits), after every offset in a byte, of lengths around it.
        let mut x = 0x1319_8a2e_0370_7344u64;
        let mut next = || {
            x = x.rotate_left(17).wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(3);
            x
        };
        for lead in 0..8u32 {
            for bits in [1u32, 5, 8, 31, 56, 57, 58, 63, 64] {
                for count in [0usize, 1, 2, 3, 17, 130] {
                    let mut w = BitWriter::new();
                    w.put(next() & mask(lead), lead);
                    let vals: Vec<u64> = (0..count).map(|_| next() & mask(bits)).collect();
                    vals.iter().for_each(|&v| w.put(v, bits));
                    let bytes = w.finish();
                    let mut r = BitReader::new(&bytes);
                    r.get(lead).unwrap();
                    let mut got = vec![7u64];
                    r.get_run(bits, count, &mut got).unwrap();
                    assert_eq!(got[1..], vals[..], "{lead} + {count} × {bits}");
                    r.finish().unwrap();
                    // One field more than the stream holds (past its padding): nothing
                    // read, an error.
                    if u64::from(lead) + (count as u64 + 1) * u64::from(bits) > 8 * bytes.len() as u64 {
                        let mut r = BitReader::new(&bytes);
                        r.get(lead).unwrap();
                        let mut none = vec![];
                        assert!(r.get_run(bits, count + 1, &mut none).is_err() && none.is_empty());
                    }
                }
            }
        }
    }

    /// Side words go to the region of a region writer (the stream of any other), and come
    /// back from it, or from the stream without one; a reader must read all of the region,
    /// and a run past its end is an error.
    #[test]
    fn side_words_round_trip_through_their_region() {
        let words: Vec<u64> = (0..5u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
        let write = |w: &mut BitWriter| {
            w.put(5, 3);
            w.put_side_words(&words);
            w.put(9, 7);
        };
        let mut c = BitWriter::counting().counting_side();
        write(&mut c);
        assert_eq!((c.bit_len(), c.side_bits()), (10, 320));
        let mut w = BitWriter::new().with_side_region(vec![1, 2, 3, 4, 5, 6, 7, 8], 40);
        write(&mut w);
        let bytes = w.finish();
        assert_eq!(bytes.len(), 8 + 40 + 2);
        // The region made first by a side-only pass, then passed over: the same bytes.
        let mut s = BitWriter::side_region_only(vec![1, 2, 3, 4, 5, 6, 7, 8]);
        write(&mut s);
        let front = s.side_region_bytes();
        assert_eq!(front, bytes[..48]);
        let mut w = BitWriter::new().with_filled_side_region(front, 40);
        write(&mut w);
        assert_eq!(w.finish(), bytes);
        let read = |side: &[u8], stream: &[u8], k: usize| {
            let mut r = BitReader::new(stream).with_side(side, None);
            let got = (r.get(3)?, r.get_side_words(k)?.to_vec(), r.get(7)?);
            r.finish().map(|()| got)
        };
        assert_eq!(read(&bytes[8..48], &bytes[48..], 5), Ok((5, words.clone(), 9)));
        assert_eq!(read(&bytes[8..48], &bytes[48..], 4), Err(DecodeError::TrailingBytes(8)));
        assert!(matches!(read(&bytes[8..48], &bytes[48..], 6), Err(DecodeError::Truncated { .. })));
        // Without a region, the words are in the stream.
        let mut w = BitWriter::new();
        write(&mut w);
        let bytes = w.finish();
        let mut r = BitReader::new(&bytes);
        assert_eq!(
            (r.get(3).unwrap(), r.get_side_words(5).unwrap().to_vec(), r.get(7).unwrap()),
            (5, words, 9)
        );
        r.finish().unwrap();
    }

    #[test]
    fn reads_past_the_end_fail() {
        let mut r = BitReader::new(&[0xff]);
        assert_eq!(r.get(7).unwrap(), 0x7f);
        assert!(matches!(r.get(2), Err(DecodeError::Truncated { .. })));
        let r = BitReader::new(&[0, 0]);
        assert_eq!(r.finish(), Err(DecodeError::TrailingBytes(2)));
        let mut r = BitReader::new(&[0x80]);
        r.get(3).unwrap();
        assert!(r.finish().is_err());
    }
}

#[cfg(test)]
mod root_tests {
    use super::*;

    /// A key's runs of tree roots: left out where they are the next of the writer's root
    /// stream (one bit each), written in full otherwise, and read back from the same stream
    /// or the data; plain writers and readers keep them whole.
    #[test]
    fn roots_are_left_out_only_where_they_are_the_streams_next() {
        let seed = [5u8; 16];
        let mut next = Vec::new();
        let mut s = RootStream::new(&seed);
        s.take(7, &mut next);
        let (first, second) = (next[..3].to_vec(), next[3..].to_vec());
        let other: Vec<u128> = (1..=4u128).map(|i| i << 1).collect();
        let write = |w: &mut BitWriter| {
            w.put(0b101, 3);
            w.put_roots(&first);
            w.put_roots(&other);
            w.put_roots(&[]);
            w.put_roots(&second);
            w.put(9, 5);
        };
        let mut seeded = BitWriter::new().with_roots(RootStream::new(&seed));
        write(&mut seeded);
        let mut count = BitWriter::counting();
        write(&mut count);
        assert_eq!((count.root_bits(), count.root_runs()), (128 * 11, 4));
        assert_eq!(count.bit_len(), 8 + 128 * 11);
        // Three runs left out (the empty one too), one written: 4 flag bits and 4 roots.
        assert_eq!(seeded.bit_len(), 8 + 4 + 128 * 4);
        let bytes = seeded.finish();
        let mut r = BitReader::new(&bytes).with_roots(RootStream::new(&seed));
        assert_eq!(r.get(3).unwrap(), 0b101);
        let mut got = Vec::new();
        for want in [&first[..], &other[..], &[][..], &second[..]] {
            got.clear();
            r.get_roots(want.len(), &mut got).unwrap();
            assert_eq!(got, want);
        }
        assert_eq!(r.get(5).unwrap(), 9);
        r.finish().unwrap();
        // Plain: every root in the data, no flag.
        let mut plain = BitWriter::new();
        write(&mut plain);
        assert_eq!(plain.bit_len(), 8 + 128 * 11);
        let bytes = plain.finish();
        let mut r = BitReader::new(&bytes);
        r.get(3).unwrap();
        got.clear();
        r.get_roots(3, &mut got).unwrap();
        assert_eq!(got, first);
        // Another party's stream does not regenerate them.
        let mut r = BitReader::new(&[0xff; 64]).with_roots(RootStream::new(&[6u8; 16]));
        got.clear();
        r.get_roots(2, &mut got).unwrap();
        assert_ne!(got[..], next[..2]);
    }
}
