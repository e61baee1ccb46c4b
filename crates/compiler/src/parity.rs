//! Many parities of one bit vector at once: the leaves' XOR-linear bits (docs/design/paper.md §3.5, the
//! step-bits lookup) are the GF(2) product `M·s` of a public matrix `M` (a row per leaf) and
//! a party's share vector `s` (comparison bits, or a window's equality bits). Instead of one
//! masked fold per leaf, the product is read from tables over `s`'s chunks ("four
//! Russians"): for chunk `j` and every value `c` of it, the leaves' bits `M_j·c`; the
//! product is the XOR of one entry per non-zero chunk column. When that reads more than
//! folding (long vectors, few leaves), each row is folded against `s` instead, eight rows
//! to a 512-bit vector (AVX-512 where the build has it).

/// Leaf bit vectors are stored in words of 64 leaves.
pub(crate) fn words_for(bits: usize) -> usize {
    bits.div_ceil(64)
}

/// `M·s` for a fixed `M` (leaves × `bits`): tables over chunks of `s`, or one fold per row.
#[derive(Clone, Debug)]
pub(crate) enum ParityTable {
    /// Four-Russians tables.
    Tables {
        /// Bits per chunk (4 or 8).
        chunk: u32,
        /// Words per leaf vector.
        lw: usize,
        /// Chunks that some leaf reads: (chunk index, offset of its `2^chunk × lw` entries).
        used: Vec<(usize, usize)>,
        table: Vec<u64>,
    },
    /// One masked fold per row, eight rows to a lane group and up to [`BAND_GROUPS`] groups
    /// to a band ([`Band`]): a pass over `s` updates a band's folds, each group's eight as
    /// one vector.
    Folds { bands: Vec<Band> },
}

impl Default for ParityTable {
    fn default() -> ParityTable {
        ParityTable::Folds { bands: vec![] }
    }
}

/// Byte tables larger than this use 4-bit chunks (16 entries each) or folds, so that what
/// is read stays in L1/L2.
const BYTE_TABLE_LIMIT: usize = 128 << 10;

impl ParityTable {
    /// Tables for the rows `masks[leaf]` (each `words_for(bits)` words; missing or empty
    /// rows read nothing) over `leaves` leaves.
    pub(crate) fn new(bits: usize, leaves: usize, masks: &[(usize, &[u64])]) -> ParityTable {
        let lw = words_for(leaves);
        let chunk_of = |m: &[u64], j: usize, c: u32| -> u64 {
            let (w, sh) = ((j * c as usize) / 64, (j * c as usize) % 64);
            m.get(w).map_or(0, |x| (x >> sh) & ((1 << c) - 1))
        };
        let used_chunks = |c: u32| {
            (0..bits.div_ceil(c as usize))
                .filter(|&j| masks.iter().any(|&(_, m)| chunk_of(m, j, c) != 0))
                .count()
        };
        // Rough costs per vector: a table entry per used chunk (`lw` words each), or per
        // group of eight rows a vector operation per word of `s`, the parities and their
        // lookup (`lw` words).
        let groups = masks.len().div_ceil(LANES);
        let fold_cost = groups * (words_for(bits) + lw + 2);
        let chunk = if used_chunks(8) * 256 * lw * 8 <= BYTE_TABLE_LIMIT && used_chunks(8) * lw <= fold_cost {
            8
        } else if used_chunks(4) * lw <= fold_cost {
            4
        } else {
            let bands =
                masks.chunks(BAND_GROUPS * LANES).map(|b| Band::new(b, words_for(bits), lw)).collect();
            return ParityTable::Folds { bands };
        };
        let entries = 1usize << chunk;
        let mut used = vec![];
        let mut table = vec![];
        for j in 0..bits.div_ceil(chunk as usize) {
            let cols: Vec<(usize, u64)> =
                masks.iter().map(|&(li, m)| (li, chunk_of(m, j, chunk))).filter(|&(_, c)| c != 0).collect();
            if cols.is_empty() {
                continue;
            }
            let at = table.len();
            table.resize(at + entries * lw, 0);
            for v in 0..entries as u64 {
                for &(li, c) in &cols {
                    if (v & c).count_ones() & 1 == 1 {
                        table[at + v as usize * lw + li / 64] ^= 1 << (li % 64);
                    }
                }
            }
            used.push((j, at));
        }
        ParityTable::Tables { chunk, lw, used, table }
    }

    /// Whether no leaf reads the vector.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            ParityTable::Tables { used, .. } => used.is_empty(),
            ParityTable::Folds { bands } => bands.is_empty(),
        }
    }

    /// `acc ^= M·s` (`acc`: `lw` words).
    #[inline]
    pub(crate) fn apply(&self, s: &[u64], acc: &mut [u64]) {
        match self {
            ParityTable::Folds { bands } => bands.iter().for_each(|band| band.apply(s, acc)),
            &ParityTable::Tables { chunk, lw, ref used, ref table } => {
                let c = chunk as usize;
                let m = (1u64 << c) - 1;
                let value = |j: usize| ((s[(j * c) / 64] >> ((j * c) % 64)) & m) as usize;
                if lw == 1 && c == 8 {
                    // Entries of 256 words, one run per used chunk in order; chunk j is
                    // byte j of `s`.
                    let a = table
                        .chunks_exact(256)
                        .zip(used)
                        .fold(0u64, |a, (t, &(j, _))| a ^ t[((s[j / 8] >> ((j % 8) * 8)) & 255) as usize]);
                    acc[0] ^= a;
                } else if lw == 1 {
                    let a = used.iter().fold(0u64, |a, &(j, at)| a ^ table[at + value(j)]);
                    acc[0] ^= a;
                } else {
                    for &(j, at) in used {
                        let at = at + value(j) * lw;
                        let row = &table[at..at + lw];
                        acc.iter_mut().zip(row).for_each(|(a, r)| *a ^= r);
                    }
                }
            }
        }
    }
}

/// Rows folded as one vector of words.
const LANES: usize = 8;

/// Lane groups per [`Band`]: their folds stay in registers through a pass over `s`.
const BAND_GROUPS: usize = 4;

/// Up to `BAND_GROUPS · LANES` rows of a [`ParityTable::Folds`], word-major: `rows[w·groups +
/// g]` holds word `w` of the band's rows `8g..8g + 8` (missing rows and words are zero).
/// `spread[(g·256 + v)·lw..][..lw]` is the leaf vector of group `g`'s rows whose bits `v` sets
/// (their leaves' bits, XORed): a group's eight parities reach the leaves in one lookup.
#[derive(Clone, Debug)]
pub(crate) struct Band {
    groups: usize,
    rows: Vec<[u64; LANES]>,
    lw: usize,
    spread: Vec<u64>,
}

impl Band {
    /// The band of `rows` (leaf, row), `words` words each, over leaf vectors of `lw` words.
    fn new(rows: &[(usize, &[u64])], words: usize, lw: usize) -> Band {
        let groups = rows.len().div_ceil(LANES);
        let mut packed = vec![[0u64; LANES]; words * groups];
        let mut spread = vec![0u64; groups * 256 * lw];
        for (r, &(li, row)) in rows.iter().enumerate() {
            let (g, lane) = (r / LANES, r % LANES);
            for (w, &x) in row.iter().take(words).enumerate() {
                packed[w * groups + g][lane] = x;
            }
            for v in (0..256).filter(|v| (v >> lane) & 1 == 1) {
                spread[(g * 256 + v) * lw + li / 64] ^= 1 << (li % 64);
            }
        }
        Band { groups, rows: packed, lw, spread }
    }

    /// `acc ^= ` the band's rows' parities against `s`, at their leaves.
    #[inline]
    fn apply(&self, s: &[u64], acc: &mut [u64]) {
        let odd = self.odd_rows(s);
        for g in 0..self.groups {
            let at = (g * 256 + ((odd >> (LANES * g)) & 255) as usize) * self.lw;
            acc.iter_mut().zip(&self.spread[at..at + self.lw]).for_each(|(a, &x)| *a ^= x);
        }
    }

    /// Bit `r` set where row `r`'s fold `⊕_w row_r[w] & s[w]` has odd parity.
    fn odd_rows(&self, s: &[u64]) -> u64 {
        by_groups!(fold::odd_rows, self, s)
    }
}

/// `$m::$f::<G>(rows, s)` for the band's group count `G` (at most [`BAND_GROUPS`]).
macro_rules! by_groups {
    ($m:ident::$f:ident, $band:expr, $s:expr) => {
        match $band.groups {
            1 => $m::$f::<1>(&$band.rows, $s),
            2 => $m::$f::<2>(&$band.rows, $s),
            3 => $m::$f::<3>(&$band.rows, $s),
            _ => $m::$f::<4>(&$band.rows, $s),
        }
    };
}
use by_groups;

/// A band's folds with AVX-512 when the build has it: per word of `s`, one broadcast and one
/// three-input logic op per group (`fold ⊕ (row ∧ x)`), then a popcount per lane. (Written
/// portably, the compiler vectorised across words instead, with gathers: slower than scalar.)
#[cfg(all(target_arch = "x86_64", target_feature = "avx512f", target_feature = "avx512vpopcntdq"))]
#[allow(unsafe_code)]
mod fold {
    use std::arch::x86_64::{
        __m512i, _mm512_loadu_epi64, _mm512_popcnt_epi64, _mm512_set1_epi64, _mm512_setzero_si512,
        _mm512_ternarylogic_epi64, _mm512_test_epi64_mask,
    };

    use super::LANES;

    pub(super) fn odd_rows<const G: usize>(rows: &[[u64; LANES]], s: &[u64]) -> u64 {
        // SAFETY: the build enables both target features (the cfg above).
        unsafe { odd_rows_avx512::<G>(rows, s) }
    }

    #[target_feature(enable = "avx512f,avx512vpopcntdq")]
    fn odd_rows_avx512<const G: usize>(rows: &[[u64; LANES]], s: &[u64]) -> u64 {
        let mut folds: [__m512i; G] = [_mm512_setzero_si512(); G];
        for (band, &x) in rows.chunks_exact(G).zip(s) {
            let x = _mm512_set1_epi64(x as i64);
            for (f, row) in folds.iter_mut().zip(band) {
                // SAFETY: `row` is eight readable words.
                let m = unsafe { _mm512_loadu_epi64(row.as_ptr().cast()) };
                // 0x78: a ⊕ (b ∧ c).
                *f = _mm512_ternarylogic_epi64::<0x78>(*f, m, x);
            }
        }
        let one = _mm512_set1_epi64(1);
        folds.iter().enumerate().fold(0u64, |odd, (g, &f)| {
            odd | (_mm512_test_epi64_mask(_mm512_popcnt_epi64(f), one) as u64) << (LANES * g)
        })
    }
}

/// A band's folds without AVX-512 (also checked against the vector code in the tests).
#[cfg(not(all(
    target_arch = "x86_64",
    target_feature = "avx512f",
    target_feature = "avx512vpopcntdq"
)))]
use portable as fold;

/// A band's folds, portably.
#[cfg_attr(
    all(target_arch = "x86_64", target_feature = "avx512f", target_feature = "avx512vpopcntdq", not(test)),
    allow(dead_code)
)]
mod portable {
    use super::LANES;

    pub(super) fn odd_rows<const G: usize>(rows: &[[u64; LANES]], s: &[u64]) -> u64 {
        let mut folds = [[0u64; LANES]; G];
        for (band, &x) in rows.chunks_exact(G).zip(s) {
            for (f, row) in folds.iter_mut().zip(band) {
                f.iter_mut().zip(row).for_each(|(f, &m)| *f ^= m & x);
            }
        }
        folds.iter().flatten().enumerate().fold(0u64, |odd, (r, f)| odd | ((f.count_ones() & 1) as u64) << r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit by bit: leaf `li` flips for every bit set in both its row and `s`.
    fn reference(masks: &[(usize, &[u64])], s: &[u64], lw: usize) -> Vec<u64> {
        let mut out = vec![0u64; lw];
        for &(li, m) in masks {
            for i in 0..64 * m.len().min(s.len()) {
                if (m[i / 64] >> (i % 64)) & (s[i / 64] >> (i % 64)) & 1 == 1 {
                    out[li / 64] ^= 1 << (li % 64);
                }
            }
        }
        out
    }

    /// A xorshift stream of test words.
    fn words(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// Against one fold per leaf, for every kind (folds, byte and nibble tables), with
    /// sparse, dense and repeated rows.
    #[test]
    fn equals_one_fold_per_leaf() {
        let mut next = words(0x9e37_79b9_7f4a_7c15);
        let mut kinds = std::collections::BTreeSet::new();
        // (bits, leaves, words a row may be non-zero in).
        let all = usize::MAX;
        for (bits, leaves, nonzero) in [
            (1usize, 1usize, all),
            (7, 3, all),
            (64, 5, all),
            (444, 24, all),
            (445, 70, all),
            (4098, 9, all),
            (4500, 33, all),
            (5000, 70, all),
            (6000, 20, all),
            (20000, 2, all),
            (20000, 70, 10),
        ] {
            let w = words_for(bits);
            let tail = |x: &mut Vec<u64>| {
                if bits % 64 != 0 {
                    *x.last_mut().unwrap() &= (1 << (bits % 64)) - 1;
                }
            };
            let rows: Vec<Vec<u64>> = (0..leaves)
                .map(|li| {
                    let mut m: Vec<u64> =
                        (0..w).map(|_| if li % 3 == 0 { next() & next() } else { next() }).collect();
                    let skip = if li % 4 == 1 { 1 } else { nonzero };
                    m.iter_mut().skip(skip).for_each(|x| *x = 0);
                    tail(&mut m);
                    m
                })
                .collect();
            // Leaf 0 appears twice: its rows add.
            let mut masks: Vec<(usize, &[u64])> = rows.iter().enumerate().map(|(i, m)| (i, &m[..])).collect();
            masks.push((0, &rows[leaves - 1][..]));
            let t = ParityTable::new(bits, leaves, &masks);
            kinds.insert(match t {
                ParityTable::Folds { .. } => 0,
                ParityTable::Tables { chunk, .. } => chunk,
            });
            for _ in 0..50 {
                let mut s: Vec<u64> = (0..w).map(|_| next()).collect();
                tail(&mut s);
                let mut acc = vec![0u64; words_for(leaves)];
                t.apply(&s, &mut acc);
                assert_eq!(acc, reference(&masks, &s, words_for(leaves)), "bits {bits} leaves {leaves}");
            }
        }
        // Every kind was checked: folds, tables of bytes and of nibbles.
        assert_eq!(kinds, [0, 4, 8].into(), "kinds");
        assert!(ParityTable::new(100, 3, &[]).is_empty());
    }

    /// Every band size, the vector folds and the portable ones against the parities bit
    /// by bit, with `s` shorter than the rows and longer.
    #[test]
    fn band_folds_are_the_rows_parities() {
        let mut next = words(0x2545_f491_4f6c_dd1d);
        for rows in [1usize, 7, 8, 9, 17, 24, 25, 32] {
            for (words, s_words) in [(1usize, 1usize), (5, 5), (19, 19), (6, 4), (3, 7)] {
                let m: Vec<Vec<u64>> = (0..rows).map(|_| (0..words).map(|_| next()).collect()).collect();
                let refs: Vec<(usize, &[u64])> = m.iter().enumerate().map(|(r, row)| (r, &row[..])).collect();
                let band = Band::new(&refs, words, 1);
                for _ in 0..20 {
                    let s: Vec<u64> = (0..s_words).map(|_| next()).collect();
                    let want = m.iter().enumerate().fold(0u64, |odd, (r, row)| {
                        let f = row.iter().zip(&s).fold(0u64, |a, (&m, &x)| a ^ (m & x));
                        odd | ((f.count_ones() & 1) as u64) << r
                    });
                    assert_eq!(band.odd_rows(&s), want, "rows {rows} words {words}");
                    let portable = by_groups!(portable::odd_rows, band, &s);
                    assert_eq!(portable, want, "rows {rows} words {words}");
                }
            }
        }
    }
}
