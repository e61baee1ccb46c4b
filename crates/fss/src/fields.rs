//! Runs of bit fields read in bulk from a little-endian bit string (the layout of
//! [`crate::codec`] and of [`crate::pad`]), and packed into one in blocks of 64.

use crate::ring::mask;

/// Append the fields of `bits` (1..=64) bits at bits `pos`, `pos + bits`, … of `data`,
/// mapped by `map`, for as many of the first `count` as have their read window (8 bytes
/// for `bits ≤ 57`, else 16) inside `data`; returns how many that is (the caller reads the
/// rest checked). From a sized iterator, so no capacity check per field: about 2× faster
/// than pushing field by field (`cargo bench -p fss -- codec/run`). Where the build has
/// AVX-512 VBMI, fields of up to 57 bits go eight at a time through [`unpack8`].
#[inline]
pub(crate) fn read_fields<T>(
    data: &[u8],
    pos: u64,
    bits: u32,
    count: usize,
    out: &mut Vec<T>,
    map: impl Fn(u64) -> T,
) -> usize {
    let span = if bits <= 57 { 8 } else { 16 };
    let safe = match data.len().checked_sub(span) {
        // Fields that start before bit `lim` have their window inside the data.
        Some(last) if (last as u64 + 1) * 8 > pos => {
            let lim = (last as u64 + 1) * 8;
            (count as u64).min((lim - pos).div_ceil(bits as u64)) as usize
        }
        _ => 0,
    };
    let (m, b) = (mask(bits), bits as u64);
    if span == 8 {
        // Eight fields of `bits` bits are `bits` bytes: groups of eight start at the same
        // bit offset in their first byte, `bits` bytes apart.
        let groups = unpack8::groups(data.len(), pos, bits, safe);
        if groups > 0 {
            let unpack = unpack8::Unpack8::new(pos, bits);
            let first = (pos / 8) as usize;
            out.reserve(8 * groups);
            for g in 0..groups {
                let at = first + g * bits as usize;
                out.extend(unpack.fields(&data[at..at + 64]).map(&map));
            }
        }
        let done = 8 * groups as u64;
        out.extend((done..safe as u64).map(|i| map(field8(data, pos + i * b, m))));
    } else {
        out.extend((0..safe as u64).map(|i| map(field16(data, pos + i * b, m))));
    }
    safe
}

/// The field at bit `p` of `data` under mask `m` (of at most 57 bits), from its 8-byte
/// window.
#[inline]
fn field8(data: &[u8], p: u64, m: u64) -> u64 {
    let first = (p / 8) as usize;
    (u64::from_le_bytes(data[first..first + 8].try_into().expect("8 bytes")) >> (p % 8)) & m
}

/// The field at bit `p` of `data` under mask `m` (of up to 64 bits), from its 16-byte
/// window.
#[inline]
fn field16(data: &[u8], p: u64, m: u64) -> u64 {
    let first = (p / 8) as usize;
    (u128::from_le_bytes(data[first..first + 16].try_into().expect("16 bytes")) >> (p % 8)) as u64 & m
}

/// The fields of `bits` (1..=64) bits at bits `pos`, `pos + bits`, … of `data` into `out`
/// (one per word), as [`read_fields`] reads them, for a `data` that holds every field's
/// read window (8 bytes for `bits ≤ 57`, else 16): written in place, eight at a time
/// through [`unpack8`] where the build has AVX-512 VBMI (no capacity checks, for the
/// blocks a form reads at evaluation, [`crate::packed`]).
///
/// # Panics
/// Unless `data` holds every field's window.
pub(crate) fn read_fields_into(data: &[u8], pos: u64, bits: u32, out: &mut [u64]) {
    let count = out.len();
    let (m, b) = (mask(bits), bits as u64);
    if bits <= 57 {
        let groups = unpack8::groups(data.len(), pos, bits, count);
        if groups > 0 {
            let unpack = unpack8::Unpack8::new(pos, bits);
            let first = (pos / 8) as usize;
            for (g, o) in out[..8 * groups].chunks_exact_mut(8).enumerate() {
                let at = first + g * bits as usize;
                o.copy_from_slice(&unpack.fields(&data[at..at + 64]));
            }
        }
        for (i, o) in out.iter_mut().enumerate().skip(8 * groups) {
            *o = field8(data, pos + i as u64 * b, m);
        }
        return;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = field16(data, pos + i as u64 * b, m);
    }
}

/// Append bits `pos .. pos + nbits` of `data` (little-endian bit order, as [`crate::codec`]
/// writes) to `out` as a bit string, 64 to a word (the last word's bits past them clear):
/// the bytes copied a word at a time, then shifted into place (no reallocation beyond the
/// `⌈nbits / 64⌉` words appended).
///
/// # Panics
/// Unless `data` holds the bits.
pub(crate) fn copy_bit_string(data: &[u8], pos: u64, nbits: usize, out: &mut Vec<u64>) {
    let words = nbits.div_ceil(64);
    if words == 0 {
        return;
    }
    let (f, s) = ((pos / 8) as usize, (pos % 8) as u32);
    let nbytes = (s as usize + nbits).div_ceil(8);
    let src = &data[f..f + nbytes];
    let base = out.len();
    // (At most one byte more than the words hold: the last word's top bits when shifted.)
    let fit = nbytes.min(8 * words);
    // The words appended as they are read (no zeroing ahead of the copy): `fit` bytes are
    // `words` words, the last one maybe short.
    out.reserve(words);
    let (full, rest) = src[..fit].as_chunks::<8>();
    out.extend(full.iter().map(|c| u64::from_le_bytes(*c)));
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        out.push(u64::from_le_bytes(last));
    }
    debug_assert_eq!(out.len(), base + words);
    let dst = &mut out[base..];
    let extra = src.get(fit).map_or(0, |&b| b as u64);
    if s > 0 {
        for i in 0..words - 1 {
            dst[i] = dst[i] >> s | dst[i + 1] << (64 - s);
        }
        dst[words - 1] = dst[words - 1] >> s | extra << (64 - s);
    }
    if !nbits.is_multiple_of(64) {
        dst[words - 1] &= mask((nbits % 64) as u32);
    }
}

/// Eight fields of `bits ≤ 57` bits from one 64-byte window: with AVX-512 VBMI one byte
/// permutation (each field's eight bytes into its lane), one variable shift and a mask.
#[cfg(all(target_arch = "x86_64", target_feature = "avx512f", target_feature = "avx512vbmi"))]
#[allow(unsafe_code)]
mod unpack8 {
    use std::arch::x86_64::{
        __m512i, _mm512_and_si512, _mm512_loadu_si512, _mm512_permutexvar_epi8, _mm512_srlv_epi64,
        _mm512_storeu_si512,
    };

    use crate::ring::mask;

    /// How many whole groups of eight of the first `safe` fields at bit `pos` have their
    /// 64-byte window inside `len` bytes.
    pub(super) fn groups(len: usize, pos: u64, bits: u32, safe: usize) -> usize {
        let first = (pos / 8) as usize;
        let fit = match len.checked_sub(first + 64) {
            Some(room) => room / bits as usize + 1,
            None => 0,
        };
        fit.min(safe / 8)
    }

    /// The byte permutation, shifts and mask of one run.
    pub(super) struct Unpack8 {
        index: __m512i,
        shift: __m512i,
        mask: __m512i,
    }

    impl Unpack8 {
        pub(super) fn new(pos: u64, bits: u32) -> Self {
            let (mut index, mut shift) = ([0u8; 64], [0u64; 8]);
            for lane in 0..8 {
                let bit = pos % 8 + lane as u64 * bits as u64;
                shift[lane] = bit % 8;
                for (j, ix) in index[8 * lane..8 * lane + 8].iter_mut().enumerate() {
                    *ix = (bit / 8) as u8 + j as u8;
                }
            }
            let masks = [mask(bits); 8];
            // SAFETY: the build enables AVX-512 (the cfg above); each load reads a 64-byte array.
            unsafe {
                Unpack8 {
                    index: _mm512_loadu_si512(index.as_ptr().cast()),
                    shift: _mm512_loadu_si512(shift.as_ptr().cast()),
                    mask: _mm512_loadu_si512(masks.as_ptr().cast()),
                }
            }
        }

        /// The eight fields whose window starts at `window[0]`.
        #[inline]
        pub(super) fn fields(&self, window: &[u8]) -> [u64; 8] {
            assert!(window.len() >= 64);
            // SAFETY: the build enables the features (the cfg above); the window has 64
            // bytes (checked above); the store writes 64 bytes into an eight-word array.
            unsafe { fields_vbmi(self, window) }
        }
    }

    #[target_feature(enable = "avx512f,avx512vbmi")]
    #[inline]
    unsafe fn fields_vbmi(u: &Unpack8, window: &[u8]) -> [u64; 8] {
        let mut out = [0u64; 8];
        // SAFETY: the caller checked that `window` has 64 bytes.
        let w = unsafe { _mm512_loadu_si512(window.as_ptr().cast()) };
        let v = _mm512_and_si512(_mm512_srlv_epi64(_mm512_permutexvar_epi8(u.index, w), u.shift), u.mask);
        // SAFETY: `out` is 64 writable bytes.
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), v) };
        out
    }
}

/// Without AVX-512 VBMI: no groups (every field through the scalar loop).
#[cfg(not(all(target_arch = "x86_64", target_feature = "avx512f", target_feature = "avx512vbmi")))]
mod unpack8 {
    pub(super) fn groups(_: usize, _: u64, _: u32, _: usize) -> usize {
        0
    }

    pub(super) struct Unpack8;

    impl Unpack8 {
        pub(super) fn new(_: u64, _: u32) -> Self {
            Unpack8
        }

        pub(super) fn fields(&self, _: &[u8]) -> [u64; 8] {
            unreachable!("no groups without AVX-512 VBMI")
        }
    }
}

/// Packs blocks of 64 fields of one width into that many 64-bit words.
pub(crate) struct Pack64 {
    bits: u32,
    eight: Option<pack8::Pack8>,
}

impl Pack64 {
    /// A packer of fields of `bits` (1..=64) bits.
    pub(crate) fn new(bits: u32) -> Pack64 {
        debug_assert!((1..=64).contains(&bits));
        Pack64 { bits, eight: pack8::Pack8::new(bits) }
    }

    /// The 64 fields `v` (each below `2^bits`) as a little-endian bit string, field `i` at
    /// bits `i · bits ..`, into `out[..bits]`. Where the build has AVX-512 VBMI, fields of
    /// 8 to 57 bits go eight at a time through [`pack8`] (eight fields fill `bits` whole
    /// bytes); other widths field by field.
    #[inline]
    pub(crate) fn pack(&self, v: &[u64; 64], out: &mut [u64; 64]) {
        let bits = self.bits;
        if let Some(p) = &self.eight {
            return p.pack64(v, out);
        }
        let (mut acc, mut fill, mut n) = (0u64, 0u32, 0);
        for &x in v {
            acc |= x << fill;
            let end = fill + bits;
            if end >= 64 {
                out[n] = acc;
                n += 1;
                // (`end > 64` only when `fill > 0`: the shift is below 64.)
                acc = if end > 64 { x >> (64 - fill) } else { 0 };
                fill = end - 64;
            } else {
                fill = end;
            }
        }
    }
}

/// Eight fields of 8 to 57 bits into their `bits` bytes: with AVX-512 VBMI one variable
/// shift (each field to its bit offset in its first byte) and two masked byte
/// permutations, of the even and of the odd fields (a byte holds bits of at most two
/// neighbouring fields), ORed.
#[cfg(all(target_arch = "x86_64", target_feature = "avx512f", target_feature = "avx512vbmi"))]
#[allow(unsafe_code)]
mod pack8 {
    use std::arch::x86_64::{
        __m512i, __mmask64, _mm512_loadu_si512, _mm512_maskz_permutexvar_epi8, _mm512_or_si512,
        _mm512_sllv_epi64, _mm512_storeu_si512,
    };

    /// The shifts and the two permutations of one width.
    pub(super) struct Pack8 {
        /// Bytes per eight fields (the width).
        bytes: usize,
        shift: __m512i,
        index: [__m512i; 2],
        keep: [__mmask64; 2],
    }

    impl Pack8 {
        /// For fields of `bits` bits, if 8 ≤ `bits` ≤ 57 (a field and its offset in its first
        /// byte fit in a lane, and the even fields' bytes are apart).
        pub(super) fn new(bits: u32) -> Option<Pack8> {
            if !(8..=57).contains(&bits) {
                return None;
            }
            let (mut shift, mut index, mut keep) = ([0u64; 8], [[0u8; 64]; 2], [0u64; 2]);
            for lane in 0..8usize {
                let start = lane as u32 * bits;
                shift[lane] = (start % 8) as u64;
                let (first, last) = ((start / 8) as usize, ((start + bits - 1) / 8) as usize);
                for (j, ix) in index[lane % 2].iter_mut().enumerate().take(last + 1).skip(first) {
                    *ix = (8 * lane + j - first) as u8;
                    keep[lane % 2] |= 1 << j;
                }
            }
            // SAFETY: the build enables AVX-512 (the cfg above); each load reads a 64-byte array.
            unsafe {
                Some(Pack8 {
                    bytes: bits as usize,
                    shift: _mm512_loadu_si512(shift.as_ptr().cast()),
                    index: index.map(|i| _mm512_loadu_si512(i.as_ptr().cast())),
                    keep,
                })
            }
        }

        /// The 64 fields `v` packed into `out[..bits]`, eight at a time into `bits` bytes
        /// each (a group's 64-byte store reaches at most byte `7 · 57 + 64 < 512`; the next
        /// group's store overwrites its tail).
        #[inline]
        pub(super) fn pack64(&self, v: &[u64; 64], out: &mut [u64; 64]) {
            // SAFETY: the build enables the features (the cfg above); `v` and `out` are 512
            // bytes each, and every store stays inside `out` (above).
            unsafe { pack64_vbmi(self, v, out) }
        }
    }

    #[target_feature(enable = "avx512f,avx512vbmi")]
    #[inline]
    unsafe fn pack64_vbmi(p: &Pack8, v: &[u64; 64], out: &mut [u64; 64]) {
        let bytes: *mut u8 = out.as_mut_ptr().cast();
        let stride = p.bytes;
        for g in 0..8 {
            // SAFETY: group `g`'s eight fields are inside `v`; its store ends at byte
            // `g · bits + 64 ≤ 463` of `out` (the caller's bound).
            unsafe {
                let x = _mm512_loadu_si512(v.as_ptr().add(8 * g).cast());
                let y = _mm512_sllv_epi64(x, p.shift);
                let even = _mm512_maskz_permutexvar_epi8(p.keep[0], p.index[0], y);
                let odd = _mm512_maskz_permutexvar_epi8(p.keep[1], p.index[1], y);
                _mm512_storeu_si512(bytes.add(g * stride).cast(), _mm512_or_si512(even, odd));
            }
        }
    }
}

/// Without AVX-512 VBMI: every width field by field.
#[cfg(not(all(target_arch = "x86_64", target_feature = "avx512f", target_feature = "avx512vbmi")))]
mod pack8 {
    pub(super) struct Pack8;

    impl Pack8 {
        pub(super) fn new(_: u32) -> Option<Pack8> {
            None
        }

        pub(super) fn pack64(&self, _: &[u64; 64], _: &mut [u64; 64]) {
            unreachable!("no packer without AVX-512 VBMI")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields one at a time, as the codec's checked reader does.
    fn reference(data: &[u8], pos: u64, bits: u32, count: usize) -> Vec<u64> {
        (0..count as u64)
            .map(|i| {
                let p = pos + i * bits as u64;
                (0..bits as u64).fold(0u64, |v, k| {
                    let q = p + k;
                    v | (((data[(q / 8) as usize] >> (q % 8)) & 1) as u64) << k
                })
            })
            .collect()
    }

    /// Every width, every start bit in a byte, runs that end at, near and far from the end
    /// of the data: the bulk path (vector groups and the scalar rest) equals field-by-field.
    #[test]
    fn bulk_equals_field_by_field() {
        let data: Vec<u8> = (0..700u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for bits in 1..=64u32 {
            for pos in [0u64, 1, 3, 7, 8, 13, 64, 101] {
                let fit = ((data.len() as u64 * 8 - pos) / bits as u64) as usize;
                for count in [0, 1, 7, 8, 9, 17, 64, fit.saturating_sub(9), fit] {
                    let mut out = Vec::new();
                    let got = read_fields(&data, pos, bits, count, &mut out, |v| v);
                    assert!(got <= count);
                    assert_eq!(out.len(), got);
                    assert_eq!(out, reference(&data, pos, bits, got), "bits {bits} pos {pos} count {count}");
                    // Only fields whose window might leave the data are left to the caller.
                    let span = if bits <= 57 { 8 } else { 16 };
                    let window_end = |i: usize| ((pos + i as u64 * bits as u64) / 8) as usize + span;
                    if got < count {
                        assert!(window_end(got) > data.len());
                    }
                }
            }
        }
    }

    /// Every width: a block of 64 fields packed is the fields written one by one, and reads
    /// back as them.
    #[test]
    fn packed_blocks_are_the_fields_in_order() {
        for bits in 1..=64u32 {
            let v: [u64; 64] = std::array::from_fn(|i| {
                (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(bits) & mask(bits)
            });
            // (The vector packer where the build has it, and the field-by-field one.)
            for packer in [Pack64::new(bits), Pack64 { bits, eight: None }] {
                let mut out = [0u64; 64];
                packer.pack(&v, &mut out);
                let bytes: Vec<u8> = out[..bits as usize].iter().flat_map(|w| w.to_le_bytes()).collect();
                assert_eq!(reference(&bytes, 0, bits, 64), v, "bits {bits}");
            }
        }
    }

    /// A map into another type is applied to every field, in order.
    #[test]
    fn mapped_fields_in_order() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
        let mut out: Vec<u32> = Vec::new();
        let got = read_fields(&data, 5, 37, 40, &mut out, |v| (v as u32) ^ 0x5555);
        let want: Vec<u32> = reference(&data, 5, 37, got).iter().map(|&v| (v as u32) ^ 0x5555).collect();
        assert_eq!(got, 40);
        assert_eq!(out, want);
    }
}
