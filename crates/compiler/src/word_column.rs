//! One dealer word's shares for every element of a compiled gate: as the dealer makes them,
//! at the narrowest of 1, 32 or 64 bits per element; as read from a key, one-bit words 64
//! to a word and the rest as stored ([`WordColumn::Packed`]).
//!
//! A compiled key's words are mostly narrow: GeLU's 63 words at n = 37 are 13 one-bit
//! masks and 50 words of 13 to 37 bits. Holding each at its own class instead of 64 bits
//! is less for the output form to read and for the wipe to write when the key is spent; a
//! key read from a bundle keeps its stored words at their stored widths (about 1.7× less
//! memory again) and generates its own pad words only when a form reads them
//! (`fss::packed`): the bundle readers' decoding of a bert-tiny query 11.1 → 8.3 ms.

use fss::DecodeError;
use fss::codec::{BitReader, BitWriter};
use fss::packed::PackedWords;
use fss::ring::mask;
use fss::rng::{Split, SplitRng};

/// Shares of one dealer word, element by element (`len` of them), in the narrowest class
/// that holds its width. (No `Debug`: it is key material.)
#[derive(Clone)]
pub(crate) enum WordColumn {
    /// Width 1: bit `e % 64` of `v[e / 64]`.
    Bits(Vec<u64>),
    /// Width 2..=32.
    Narrow(Vec<u32>),
    /// Width 33..=64.
    Wide(Vec<u64>),
    /// Every element 0, of any width: the first party's share where the seeded encoding
    /// splits the words ([`Split::Resplit`](fss::rng::Split)), which is never stored as it
    /// is (nothing allocated, written or subtracted for it).
    Zero,
    /// Width 2..=64, as read from a key: the stored words as stored, this party's pad words
    /// as a position in its pad ([`PackedWords`]), widened a block at a time by
    /// [`WordColumn::block`]. Decoding words into 32- or 64-bit ones ahead of the online
    /// phase wrote, read and wiped ~1.7× their stored bytes.
    Packed(PackedWords),
}

/// [`WordColumn::block`]'s buffers: a block's words, widened, and the pad bytes they were
/// read from. Wiped when dropped (they hold key words).
#[derive(Default)]
pub(crate) struct WordBuf {
    words: Vec<u64>,
    pad: Vec<u8>,
}

impl Drop for WordBuf {
    fn drop(&mut self) {
        fss::wipe::wipe(&mut self.words);
        fss::wipe::wipe(&mut self.pad);
    }
}

impl WordColumn {
    /// `values` (each already below `2^width`) in the class of `width`; `values` is wiped.
    #[cfg(test)]
    pub(crate) fn new(mut values: Vec<u64>, width: u32) -> WordColumn {
        let col = match width {
            0 | 1 => {
                let mut v = vec![0u64; values.len().div_ceil(64)];
                for (e, &x) in values.iter().enumerate() {
                    v[e / 64] |= (x & 1) << (e % 64);
                }
                WordColumn::Bits(v)
            }
            2..=32 => WordColumn::Narrow(values.iter().map(|&x| x as u32).collect()),
            _ => return WordColumn::Wide(values),
        };
        fss::wipe::wipe(&mut values);
        col
    }

    /// Both parties' additive shares of `values` (each already below `2^width`) mod
    /// `2^width`, split as `rng` says ([`Split`]), each in the class of `width`: the first
    /// drawn ([`WordColumn::draw`]), the second the difference
    /// ([`WordColumn::push_difference`]).
    ///
    /// [`Split`]: fss::rng::Split
    #[cfg(test)]
    pub(crate) fn share<R: SplitRng + ?Sized>(rng: &mut R, values: &[u64], width: u32) -> [WordColumn; 2] {
        let a = WordColumn::draw(rng, values.len(), width);
        let mut b = WordColumn::with_capacity(values.len(), width);
        b.push_difference(&a, 0, &mut values.to_vec(), width);
        [a, b]
    }

    /// The first party's share of `len` values of `width` bits: uniform words from `rng`,
    /// or zeros where the seeded encoding splits them ([`split_draws`]); as
    /// [`WordColumn::first_share`] and [`WordColumn::push_drawn`] make it chunk by chunk.
    ///
    /// [`split_draws`]: gates::dealer::split_draws
    #[cfg(test)]
    pub(crate) fn draw<R: SplitRng + ?Sized>(rng: &mut R, len: usize, width: u32) -> WordColumn {
        let mut a = WordColumn::first_share(rng.split(), len, width);
        a.push_drawn(rng, len, width, &mut Vec::new());
        a
    }

    /// The first party's share of a word before any element is drawn: an empty column with
    /// room for `len` elements, or the zero column where the seeded encoding splits the
    /// words (any split but [`Split::Random`]).
    pub(crate) fn first_share(split: Split, len: usize, width: u32) -> WordColumn {
        if split == Split::Random { WordColumn::with_capacity(len, width) } else { WordColumn::Zero }
    }

    /// Append `count` elements of the first party's share drawn from `rng` (`buf` is scratch;
    /// the caller wipes it): uniform words at the class's width, a generator word giving 64
    /// one-bit shares or two narrow ones (a word per element and a repacking pass cost the
    /// dealer ~a quarter of a compiled gate's key generation). The zero column stays zero
    /// (its words drawn and discarded or not drawn, [`split_draws`]). A one-bit column
    /// takes a multiple of 64 elements but in its last call, a narrow one an even number.
    ///
    /// Drawn a chunk at a time beside the values it is subtracted from, the share is written
    /// once and read back from cache (drawn whole ahead of the values, a GeLU's first shares
    /// were zeroed, drawn, repacked and read back from memory).
    ///
    /// [`split_draws`]: gates::dealer::split_draws
    pub(crate) fn push_drawn<R: SplitRng + ?Sized>(
        &mut self,
        rng: &mut R,
        count: usize,
        width: u32,
        buf: &mut Vec<u64>,
    ) {
        let m = mask(width);
        // Generator words per class: a bit, half a word or a word per element (none at
        // width 0).
        let words = match width {
            0 => 0,
            1 => count.div_ceil(64),
            2..=32 => count.div_ceil(2),
            _ => count,
        };
        buf.clear();
        buf.resize(words, 0);
        gates::dealer::split_draws(rng, buf);
        match self {
            WordColumn::Zero => {}
            WordColumn::Bits(a) => {
                if width == 0 {
                    a.resize(a.len() + count.div_ceil(64), 0);
                    return;
                }
                if let Some(last) = buf.last_mut().filter(|_| !count.is_multiple_of(64)) {
                    *last &= mask((count % 64) as u32);
                }
                a.extend_from_slice(buf);
            }
            WordColumn::Narrow(a) => {
                let m = m as u32;
                a.extend(buf.iter().flat_map(|&w| [w as u32 & m, (w >> 32) as u32 & m]).take(count))
            }
            WordColumn::Wide(a) => a.extend(buf.iter().map(|&x| x & m)),
            WordColumn::Packed(_) => unreachable!("the dealer's columns are never packed"),
        }
    }

    /// An empty column of the class of `width`, with room for `len` elements.
    pub(crate) fn with_capacity(len: usize, width: u32) -> WordColumn {
        match width {
            0 | 1 => WordColumn::Bits(Vec::with_capacity(len.div_ceil(64))),
            2..=32 => WordColumn::Narrow(Vec::with_capacity(len)),
            _ => WordColumn::Wide(Vec::with_capacity(len)),
        }
    }

    /// Append elements `at..at + values.len()` of the second share: `values` (each already
    /// below `2^width`) minus `first`'s elements mod `2^width` (XOR for one bit), computed
    /// in place in `values`. The column holds `at` elements before, `at` a multiple of 64
    /// for a one-bit column, and `first` is of the same class.
    pub(crate) fn push_difference(&mut self, first: &WordColumn, at: usize, values: &mut [u64], width: u32) {
        let m = mask(width);
        let e = at..at + values.len();
        // The difference in place (nothing to subtract from a zero first share; one-bit
        // shares are XORed as they are packed).
        match first {
            WordColumn::Narrow(a) => {
                values.iter_mut().zip(&a[e]).for_each(|(v, &x)| *v = v.wrapping_sub(x as u64) & m)
            }
            WordColumn::Wide(a) => {
                values.iter_mut().zip(&a[e]).for_each(|(v, &x)| *v = v.wrapping_sub(x) & m)
            }
            WordColumn::Bits(_) | WordColumn::Zero => {}
            WordColumn::Packed(_) => unreachable!("the dealer's columns are never packed"),
        }
        match self {
            WordColumn::Bits(b) => {
                debug_assert!(at.is_multiple_of(64) && b.len() == at / 64);
                let a = match first {
                    WordColumn::Bits(a) => &a[at / 64..],
                    _ => &[],
                };
                for (i, chunk) in values.chunks(64).enumerate() {
                    let bits = chunk.iter().enumerate().fold(0, |acc, (q, &v)| acc | (v & m & 1) << q);
                    b.push(bits ^ a.get(i).copied().unwrap_or(0));
                }
            }
            WordColumn::Narrow(b) => b.extend(values.iter().map(|&v| v as u32)),
            WordColumn::Wide(b) => b.extend_from_slice(values),
            WordColumn::Zero => unreachable!("the second share is never the zero column"),
            WordColumn::Packed(_) => unreachable!("the dealer's columns are never packed"),
        }
    }

    /// Read `len` words of `width` bits (the stored layout: `width` bits per element).
    pub(crate) fn read(r: &mut BitReader<'_>, len: usize, width: u32) -> Result<WordColumn, DecodeError> {
        // Straight into the column's class: the stored layout of a one-bit column is its
        // bits in order, 64 to a word.
        Ok(match width {
            0 => WordColumn::Bits(vec![0; len.div_ceil(64)]),
            1 => {
                let mut v = Vec::new();
                r.get_share_bits_packed(len, &mut v)?;
                WordColumn::Bits(v)
            }
            2..=64 => WordColumn::Packed(r.get_share_run_packed(width, len)?),
            _ => return Err(DecodeError::InvalidField("a dealer word wider than 64 bits")),
        })
    }

    /// Write the `len` words at `width` bits each (the layout [`WordColumn::read`] reads).
    pub(crate) fn write(&self, w: &mut BitWriter, len: usize, width: u32) {
        match self {
            WordColumn::Bits(v) => w.put_share_bits(len, v),
            WordColumn::Narrow(v) => w.put_share_run(width, len, |e| v[e] as u64),
            WordColumn::Wide(v) => w.put_share_run(width, len, |e| v[e]),
            WordColumn::Zero if width <= 1 => w.put_share_bits(len, &vec![0; len.div_ceil(64)]),
            WordColumn::Zero => w.put_share_run(width, len, |_| 0),
            WordColumn::Packed(_) => {
                let mut buf = WordBuf::default();
                let v = self.block(0..len, &mut buf);
                w.put_share_run(width, len, |e| v[e]);
            }
        }
    }

    /// Elements `r` as 64-bit words: a slice of the column when it is wide, else widened
    /// into `buf` (read from the stored bytes or generated from the pad when packed).
    #[inline]
    pub(crate) fn block<'a>(&'a self, r: std::ops::Range<usize>, buf: &'a mut WordBuf) -> &'a [u64] {
        let n = r.len();
        // The block's words in `buf`, grown to hold them (never shrunk).
        let room = |words: &'a mut Vec<u64>| {
            if words.len() < n {
                words.resize(n, 0);
            }
            &mut words[..n]
        };
        match self {
            WordColumn::Wide(v) => &v[r],
            WordColumn::Packed(p) => {
                let out = room(&mut buf.words);
                p.read_into(r, out, &mut buf.pad);
                out
            }
            WordColumn::Narrow(v) => {
                let out = room(&mut buf.words);
                out.iter_mut().zip(&v[r]).for_each(|(b, &x)| *b = x as u64);
                out
            }
            WordColumn::Bits(v) => {
                let out = room(&mut buf.words);
                for (i, b) in out.iter_mut().enumerate() {
                    let e = r.start + i;
                    *b = (v[e / 64] >> (e % 64)) & 1;
                }
                out
            }
            WordColumn::Zero => {
                let out = room(&mut buf.words);
                out.fill(0);
                out
            }
        }
    }

    /// XOR each element's low bit into `out` (element `e` into `out[e]`).
    pub(crate) fn xor_low_bits(&self, out: &mut [u64]) {
        self.xor_low_bits_shifted(out, 0);
    }

    /// XOR each element's low bit, shifted left by `shift < 64`, into `out` (element `e`
    /// into `out[e]`): a simple loop per class, which vectorises.
    pub(crate) fn xor_low_bits_shifted(&self, out: &mut [u64], shift: u32) {
        let len = out.len();
        match self {
            WordColumn::Bits(v) => {
                for (o, &w) in out.chunks_mut(64).zip(v) {
                    for (q, d) in o.iter_mut().enumerate() {
                        *d ^= ((w >> q) & 1) << shift;
                    }
                }
            }
            WordColumn::Narrow(v) => {
                out.iter_mut().zip(&v[..len]).for_each(|(d, &x)| *d ^= (x as u64 & 1) << shift)
            }
            WordColumn::Wide(v) => out.iter_mut().zip(&v[..len]).for_each(|(d, &x)| *d ^= (x & 1) << shift),
            WordColumn::Zero => {}
            WordColumn::Packed(_) => self.each_block(len, |e0, v| {
                out[e0..e0 + v.len()].iter_mut().zip(v).for_each(|(d, &x)| *d ^= (x & 1) << shift)
            }),
        }
    }

    /// `f(e0, words e0..e0 + k)` for the first `len` elements, a block of at most
    /// [`LOW_BIT_BLOCK`] at a time.
    fn each_block(&self, len: usize, mut f: impl FnMut(usize, &[u64])) {
        let mut buf = WordBuf::default();
        for e0 in (0..len).step_by(LOW_BIT_BLOCK) {
            f(e0, self.block(e0..(e0 + LOW_BIT_BLOCK).min(len), &mut buf));
        }
    }

    /// `f(e, low bit of element e)` for the first `len` elements, in order.
    #[inline]
    pub(crate) fn each_low_bit(&self, len: usize, mut f: impl FnMut(usize, u64)) {
        match self {
            WordColumn::Bits(v) => (0..len).for_each(|e| f(e, (v[e / 64] >> (e % 64)) & 1)),
            WordColumn::Narrow(v) => v[..len].iter().enumerate().for_each(|(e, &x)| f(e, x as u64 & 1)),
            WordColumn::Wide(v) => v[..len].iter().enumerate().for_each(|(e, &x)| f(e, x & 1)),
            WordColumn::Zero => (0..len).for_each(|e| f(e, 0)),
            WordColumn::Packed(_) => {
                self.each_block(len, |e0, v| v.iter().enumerate().for_each(|(i, &x)| f(e0 + i, x & 1)))
            }
        }
    }

    /// Zero the column's memory and release it.
    pub(crate) fn wipe(&mut self) {
        match self {
            WordColumn::Bits(v) | WordColumn::Wide(v) => fss::wipe::wipe(v),
            WordColumn::Narrow(v) => fss::wipe::wipe(v),
            WordColumn::Packed(p) => p.wipe(),
            WordColumn::Zero => {}
        }
    }

    /// Elements, where the column knows them (a one-bit column: rounded up to 64; the zero
    /// column: none).
    fn elements(&self) -> Option<usize> {
        match self {
            WordColumn::Bits(v) => Some(64 * v.len()),
            WordColumn::Narrow(v) => Some(v.len()),
            WordColumn::Wide(v) => Some(v.len()),
            WordColumn::Packed(p) => Some(p.len()),
            WordColumn::Zero => None,
        }
    }
}

/// Elements a block of [`WordColumn::xor_low_bits_shifted`], [`WordColumn::each_low_bit`]
/// and a comparison of columns widens at a time.
const LOW_BIT_BLOCK: usize = 1024;

/// Columns are equal when their elements are, whatever their classes (a column read from
/// a key is [`WordColumn::Packed`], the dealer's is not); the zero column equals a column
/// of zeros.
impl PartialEq for WordColumn {
    fn eq(&self, other: &WordColumn) -> bool {
        let len = match (self.elements(), other.elements()) {
            (Some(a), Some(b)) if a != b => return false,
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => return true,
        };
        let (mut a, mut b) = (WordBuf::default(), WordBuf::default());
        (0..len).step_by(LOW_BIT_BLOCK).all(|e0| {
            let r = e0..(e0 + LOW_BIT_BLOCK).min(len);
            self.block(r.clone(), &mut a) == other.block(r, &mut b)
        })
    }
}

impl Eq for WordColumn {}

#[cfg(test)]
mod tests {
    use fss::rng::{DealerRng, Rng, SeedableRng, Split};

    use super::*;

    /// The elements of a column as words.
    fn words_of(c: &WordColumn, len: usize) -> Vec<u64> {
        let mut buf = WordBuf::default();
        c.block(0..len, &mut buf).to_vec()
    }

    /// Shares add up to the values mod `2^width` in every class and length (padding bits of
    /// a one-bit column clear); a random split draws a bit, half a word or a word of the
    /// generator per element and its first share is not the zero column; a resplit is
    /// `(0, v)` with the first share [`WordColumn::Zero`], drawing as much as the random
    /// split or nothing.
    #[test]
    fn shares_add_up_in_every_class() {
        for width in [0u32, 1, 2, 17, 32, 33, 37, 64] {
            for len in [0usize, 1, 2, 63, 64, 65, 200] {
                let m = mask(width);
                let values: Vec<u64> =
                    (0..len as u64).map(|e| e.wrapping_mul(0x9e37_79b9_7f4a_7c15) & m).collect();
                let draws = match width {
                    0 => 0,
                    1 => len.div_ceil(64),
                    2..=32 => len.div_ceil(2),
                    _ => len,
                };
                let mut after = DealerRng::seed_from_u64(6);
                (0..draws).for_each(|_| _ = after.next_u64());
                let after = after.next_u64();
                for split in [Split::Random, Split::Resplit, Split::ResplitDrawing] {
                    let mut rng = DealerRng::seed_from_u64(6).with_split(split);
                    let [a, b] = WordColumn::share(&mut rng, &values, width);
                    let (wa, wb) = (words_of(&a, len), words_of(&b, len));
                    let sum: Vec<u64> = wa.iter().zip(&wb).map(|(&x, &y)| x.wrapping_add(y) & m).collect();
                    let at = format!("width {width} len {len} {split:?}");
                    assert_eq!(sum, values, "{at}");
                    assert!(wa.iter().chain(&wb).all(|&x| x & !m == 0), "{at}");
                    // A resplit's first share is the zero column, of no class.
                    assert_eq!(matches!(a, WordColumn::Zero), split != Split::Random, "{at}");
                    for c in [&a, &b].into_iter().filter(|c| !matches!(c, WordColumn::Zero)) {
                        let class = matches!(
                            (c, width),
                            (WordColumn::Bits(_), 0..=1)
                                | (WordColumn::Narrow(_), 2..=32)
                                | (WordColumn::Wide(_), 33..)
                        );
                        assert!(class, "{at}");
                        if let WordColumn::Bits(v) = c {
                            assert_eq!(v.len(), len.div_ceil(64), "{at}");
                            assert!(len % 64 == 0 || v[v.len() - 1] >> (len % 64) == 0, "{at}");
                        }
                    }
                    if split != Split::Random {
                        assert!(wa.iter().all(|&x| x == 0), "{at}");
                    } else if width as usize * len >= 32 {
                        assert!(wa.iter().any(|&x| x != 0), "{at}");
                    }
                    let drew = split != Split::Resplit || draws == 0;
                    assert_eq!(rng.next_u64() == after, drew, "{at}");
                }
            }
        }
    }

    /// A first share drawn chunk by chunk (chunks of 64 and 192 elements, a short last one)
    /// is the one drawn at once, in every class and split, and takes as many generator words.
    #[test]
    fn a_first_share_drawn_in_chunks_is_the_whole() {
        for width in [0u32, 1, 2, 17, 32, 33, 37, 64] {
            for len in [1usize, 64, 65, 200, 1000] {
                for split in [Split::Random, Split::Resplit, Split::ResplitDrawing] {
                    let mut rng = DealerRng::seed_from_u64(9).with_split(split);
                    let whole = WordColumn::draw(&mut rng, len, width);
                    let after = rng.next_u64();
                    for chunk in [64usize, 192] {
                        let mut rng = DealerRng::seed_from_u64(9).with_split(split);
                        let mut parts = WordColumn::first_share(split, len, width);
                        let mut buf = Vec::new();
                        for at in (0..len).step_by(chunk) {
                            parts.push_drawn(&mut rng, chunk.min(len - at), width, &mut buf);
                        }
                        let at = format!("width {width} len {len} chunk {chunk} {split:?}");
                        assert!(words_of(&parts, len) == words_of(&whole, len), "{at}");
                        assert_eq!(
                            matches!(parts, WordColumn::Zero),
                            matches!(whole, WordColumn::Zero),
                            "{at}"
                        );
                        assert_eq!(rng.next_u64(), after, "{at}");
                    }
                }
            }
        }
    }

    /// A second share pushed chunk by chunk (chunks of 64 and 192 elements, a short last
    /// one) is the one pushed at once, in every class.
    #[test]
    fn a_difference_pushed_in_chunks_is_the_whole() {
        for width in [1u32, 2, 17, 32, 33, 37, 64] {
            for len in [1usize, 64, 65, 200, 1000] {
                let m = mask(width);
                let values: Vec<u64> = (0..len as u64)
                    .map(|e| e.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(7) & m)
                    .collect();
                let first = WordColumn::draw(&mut DealerRng::seed_from_u64(8), len, width);
                let mut whole = WordColumn::with_capacity(len, width);
                whole.push_difference(&first, 0, &mut values.clone(), width);
                for chunk in [64usize, 192] {
                    let mut parts = WordColumn::with_capacity(len, width);
                    for at in (0..len).step_by(chunk) {
                        let end = (at + chunk).min(len);
                        parts.push_difference(&first, at, &mut values[at..end].to_vec(), width);
                    }
                    assert!(parts == whole, "width {width} len {len} chunk {chunk}");
                }
            }
        }
    }

    /// Every class holds its values: written and read back at the stored width, widened by
    /// block at every offset, and by low bit.
    #[test]
    fn every_class_round_trips() {
        for width in [1u32, 2, 17, 32, 33, 37, 64] {
            let len = 200;
            let m = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
            let values: Vec<u64> = (0..len as u64)
                .map(|e| e.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(e as u32) & m)
                .collect();
            let col = WordColumn::new(values.clone(), width);
            let class = matches!(
                (&col, width),
                (WordColumn::Bits(_), 1) | (WordColumn::Narrow(_), 2..=32) | (WordColumn::Wide(_), 33..)
            );
            assert!(class, "width {width}");
            let mut w = BitWriter::new();
            col.write(&mut w, len, width);
            let bytes = w.finish();
            assert_eq!(bytes.len(), (len * width as usize).div_ceil(8));
            let back = WordColumn::read(&mut BitReader::new(&bytes), len, width).unwrap();
            assert!(back == col, "width {width}");
            // Read from a key, a column of two or more bits is kept packed as stored.
            assert_eq!(matches!(back, WordColumn::Packed(_)), width >= 2, "width {width}");
            let mut rewritten = BitWriter::new();
            back.write(&mut rewritten, len, width);
            assert_eq!(rewritten.finish(), bytes, "width {width}");
            for c in [&col, &back] {
                let mut buf = WordBuf::default();
                for (a, b) in [(0, len), (0, 64), (3, 130), (64, 200), (199, 200)] {
                    assert_eq!(c.block(a..b, &mut buf), &values[a..b], "width {width} block {a}..{b}");
                }
                let mut low = vec![1u64; len];
                c.xor_low_bits(&mut low);
                let mut shifted = vec![1u64; len];
                c.xor_low_bits_shifted(&mut shifted, 5);
                let mut seen = vec![];
                c.each_low_bit(len, |e, bit| seen.push((e, bit)));
                for e in 0..len {
                    assert_eq!(low[e], 1 ^ (values[e] & 1), "width {width} e {e}");
                    assert_eq!(shifted[e], 1 ^ (values[e] & 1) << 5, "width {width} e {e}");
                    assert_eq!(seen[e], (e, values[e] & 1));
                }
            }
            // Equal by elements: one element changed, or one more, is another column.
            let mut other = values.clone();
            other[len / 2] ^= 1;
            assert!(back != WordColumn::new(other, width), "width {width}");
            assert!(back != WordColumn::new([&values[..], &[0]].concat(), width) || width <= 1);
            let mut buf = WordBuf::default();
            // The zero column reads as, and writes the bytes of, zeros of the class.
            let zeros = WordColumn::new(vec![0; len], width);
            let mut wz = BitWriter::new();
            WordColumn::Zero.write(&mut wz, len, width);
            let mut wc = BitWriter::new();
            zeros.write(&mut wc, len, width);
            assert_eq!(wz.finish(), wc.finish(), "width {width}");
            assert_eq!(WordColumn::Zero.block(3..130, &mut buf), &[0; 127][..]);
            let mut low = vec![1u64; len];
            WordColumn::Zero.xor_low_bits_shifted(&mut low, 5);
            assert!(low.iter().all(|&x| x == 1));
            let mut count = 0;
            WordColumn::Zero.each_low_bit(len, |e, bit| count += usize::from(bit == 0 && e < len));
            assert_eq!(count, len);
            // A short stream is an error, not a panic.
            let short = &bytes[..bytes.len() - 1];
            assert!(WordColumn::read(&mut BitReader::new(short), len, width).is_err() || width == 0);
        }
    }
}
