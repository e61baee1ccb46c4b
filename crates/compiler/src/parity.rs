//! Many parities of one bit vector at once: the leaves' XOR-linear bits (docs/design/paper.md §3.5, the
//! step-bits lookup) are the GF(2) product `M·s` of a public matrix `M` (a row per leaf) and
//! a party's share vector `s` (comparison bits, or a window's equality bits). Instead of one
//! masked fold per leaf, the product is read from tables over `s`'s chunks ("four
//! Russians"): for chunk `j` and every value `c` of it, the leaves' bits `M_j·c`; the
//! product is the XOR of one entry per non-zero chunk column. When the tables would be
//! large (long vectors, few leaves), one masked fold per row is cheaper and kept.

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
    /// One masked fold per row, the rows word-major (`rows[w·leaves.len() + r]` is word `w`
    /// of row `r`, whose leaf is `leaves[r]`): a pass over `s` updates every row's fold.
    Folds { leaves: Vec<usize>, rows: Vec<u64> },
}

impl Default for ParityTable {
    fn default() -> ParityTable {
        ParityTable::Folds { leaves: vec![], rows: vec![] }
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
        // Rough costs per vector: a table entry per used chunk (`lw` words each), or a
        // fold of 4-word vectors and a popcount per row.
        let fold_cost = masks.len() * (words_for(bits).div_ceil(4) + 2);
        let chunk = if used_chunks(8) * 256 * lw * 8 <= BYTE_TABLE_LIMIT {
            8
        } else if used_chunks(4) * lw <= fold_cost {
            4
        } else {
            let w = words_for(bits);
            let mut rows = vec![0u64; w * masks.len()];
            for (r, &(_, m)) in masks.iter().enumerate() {
                for (i, &x) in m.iter().take(w).enumerate() {
                    rows[i * masks.len() + r] = x;
                }
            }
            return ParityTable::Folds { leaves: masks.iter().map(|&(li, _)| li).collect(), rows };
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
            ParityTable::Folds { leaves, .. } => leaves.is_empty(),
        }
    }

    /// `acc ^= M·s` (`acc`: `lw` words).
    #[inline]
    pub(crate) fn apply(&self, s: &[u64], acc: &mut [u64]) {
        match self {
            ParityTable::Folds { leaves, rows } => {
                let r = leaves.len();
                let mut folds = [0u64; 64];
                if r <= 64 {
                    let folds = &mut folds[..r];
                    for (word, &x) in rows.chunks_exact(r).zip(s) {
                        folds.iter_mut().zip(word).for_each(|(f, &m)| *f ^= m & x);
                    }
                    for (&li, f) in leaves.iter().zip(folds.iter()) {
                        acc[li / 64] ^= ((f.count_ones() & 1) as u64) << (li % 64);
                    }
                } else {
                    for (k, &li) in leaves.iter().enumerate() {
                        let f = rows[k..].iter().step_by(r).zip(s).fold(0u64, |a, (m, x)| a ^ (m & x));
                        acc[li / 64] ^= ((f.count_ones() & 1) as u64) << (li % 64);
                    }
                }
            }
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

    /// Against one fold per leaf, for both chunk sizes, with sparse, dense and repeated rows.
    #[test]
    fn equals_one_fold_per_leaf() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for (bits, leaves) in
            [(1usize, 1usize), (7, 3), (64, 5), (444, 24), (445, 70), (4098, 9), (5000, 70), (20000, 2)]
        {
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
                    if li % 4 == 1 {
                        m.iter_mut().skip(1).for_each(|x| *x = 0);
                    }
                    tail(&mut m);
                    m
                })
                .collect();
            // Leaf 0 appears twice: its rows add.
            let mut masks: Vec<(usize, &[u64])> = rows.iter().enumerate().map(|(i, m)| (i, &m[..])).collect();
            masks.push((0, &rows[leaves - 1][..]));
            let t = ParityTable::new(bits, leaves, &masks);
            // Long vectors with few rows fold; the others use tables.
            assert_eq!(matches!(t, ParityTable::Folds { .. }), bits >= 4000, "bits {bits}");
            for _ in 0..50 {
                let mut s: Vec<u64> = (0..w).map(|_| next()).collect();
                tail(&mut s);
                let mut acc = vec![0u64; words_for(leaves)];
                t.apply(&s, &mut acc);
                assert_eq!(acc, reference(&masks, &s, words_for(leaves)), "bits {bits} leaves {leaves}");
            }
        }
        assert!(ParityTable::new(100, 3, &[]).is_empty());
    }
}
