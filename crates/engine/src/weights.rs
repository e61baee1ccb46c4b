//! Public weight matrices, held once in the narrowest signed integer type that holds their
//! ring values: a model's weights at scale `f` fit 16 or 32 bits, and a decode step, a
//! matrix-vector product, takes as long as its weights take to read from memory.

use std::fmt;
use std::sync::Arc;

use fss::ring::mask;
use gates::linalg::{WeightSlice, transpose_into};

/// A public weight matrix (row-major), shared by every program that reads it.
#[derive(Clone)]
pub enum Weights {
    /// Values in `[−2^15, 2^15)`.
    I16(Arc<[i16]>),
    /// Values in `[−2^31, 2^31)`.
    I32(Arc<[i32]>),
    /// Ring words (any value).
    Ring(Arc<[u64]>),
}

impl fmt::Debug for Weights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Weights::I16(_) => "i16",
            Weights::I32(_) => "i32",
            Weights::Ring(_) => "ring",
        };
        write!(f, "Weights({kind} × {})", self.len())
    }
}

impl Weights {
    /// The weights whose ring values (two's complement in `n` bits) are `words`, in the
    /// narrowest type that holds them all.
    ///
    /// # Panics
    /// If `n` is not in `1..=64`.
    pub fn from_ring(words: &[u64], n: u32) -> Weights {
        let ring = ring_of(n);
        Weights::from_signed(n, words.len(), |i| ring.to_signed(words[i]))
    }

    /// The `len` weights whose values (each in `[−2^{n−1}, 2^{n−1})`) are `value(0..len)`,
    /// in the narrowest type that holds them all, without a vector of ring words first
    /// (`value` is called twice per weight).
    pub fn from_signed(n: u32, len: usize, value: impl Fn(usize) -> i64) -> Weights {
        let (lo, hi) = (0..len).fold((0i64, 0i64), |(lo, hi), i| {
            let v = value(i);
            (lo.min(v), hi.max(v))
        });
        // A value must also be below 2^{n−1} in magnitude to stand for itself in the ring.
        let fits = |bits: u32| n >= bits && lo >= -(1i64 << (bits - 1)) && hi < (1i64 << (bits - 1));
        if fits(16) {
            Weights::I16((0..len).map(|i| value(i) as i16).collect())
        } else if fits(32) {
            Weights::I32((0..len).map(|i| value(i) as i32).collect())
        } else {
            Weights::Ring((0..len).map(|i| value(i) as u64 & mask(n)).collect())
        }
    }

    /// The transpose of these weights read as a row-major `rows × cols` matrix, in the same
    /// type.
    ///
    /// # Panics
    /// If `rows · cols` is not the number of weights.
    pub fn transposed(&self, rows: usize, cols: usize) -> Weights {
        fn t<T: Copy + Default>(v: &[T], rows: usize, cols: usize) -> Arc<[T]> {
            assert_eq!(v.len(), rows * cols, "a {rows} × {cols} matrix");
            let mut out = vec![T::default(); v.len()];
            transpose_into(v, &mut out, rows, cols);
            out.into()
        }
        match self {
            Weights::I16(v) => Weights::I16(t(v, rows, cols)),
            Weights::I32(v) => Weights::I32(t(v, rows, cols)),
            Weights::Ring(v) => Weights::Ring(t(v, rows, cols)),
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.slice().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held in memory.
    pub fn bytes(&self) -> usize {
        match self {
            Weights::I16(v) => 2 * v.len(),
            Weights::I32(v) => 4 * v.len(),
            Weights::Ring(v) => 8 * v.len(),
        }
    }

    /// For the products ([`gates::linalg::matmul_mod_weights`]).
    pub fn slice(&self) -> WeightSlice<'_> {
        match self {
            Weights::I16(v) => WeightSlice::I16(v),
            Weights::I32(v) => WeightSlice::I32(v),
            Weights::Ring(v) => WeightSlice::Ring(v),
        }
    }

    /// Every weight as a ring word of `Z_{2^n}`.
    pub fn ring_words(&self, n: u32) -> Vec<u64> {
        self.ring_range(0..self.len(), n)
    }

    /// Weights `range` as ring words of `Z_{2^n}` (an embedding row).
    ///
    /// # Panics
    /// If `range` is out of bounds.
    pub fn ring_range(&self, range: std::ops::Range<usize>, n: u32) -> Vec<u64> {
        let m = mask(n);
        match self {
            Weights::I16(v) => v[range].iter().map(|&x| i64::from(x) as u64 & m).collect(),
            Weights::I32(v) => v[range].iter().map(|&x| i64::from(x) as u64 & m).collect(),
            Weights::Ring(v) => v[range].iter().map(|&x| x & m).collect(),
        }
    }

    /// Where the shared storage is (the same for every clone): an identity for caches.
    pub fn addr(&self) -> usize {
        match self {
            Weights::I16(v) => v.as_ptr() as usize,
            Weights::I32(v) => v.as_ptr() as usize,
            Weights::Ring(v) => v.as_ptr() as usize,
        }
    }
}

/// The ring `Z_{2^n}` of a model's weights.
///
/// # Panics
/// If `n` is not in `1..=64` (a model's ring width is checked when its graph is made).
pub(crate) fn ring_of(n: u32) -> fss::Ring {
    fss::Ring::new(n).expect("a ring of 1..=64 bits")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transpose holds every weight at its transposed place, in the same type.
    #[test]
    fn transposed_weights() {
        let n = 50;
        for vals in
            [vec![1i64, -2, 3, -4, 5, -6], vec![1 << 20, -3, 7, 9, -11, 13], vec![1 << 40, 0, 1, 2, 3, 4]]
        {
            let w = Weights::from_ring(&vals.iter().map(|&x| x as u64 & mask(n)).collect::<Vec<_>>(), n);
            let t = w.transposed(2, 3);
            assert_eq!(format!("{w:?}"), format!("{t:?}"));
            let (a, b) = (w.ring_words(n), t.ring_words(n));
            for r in 0..2 {
                for c in 0..3 {
                    assert_eq!(b[c * 2 + r], a[r * 3 + c]);
                }
            }
            assert_eq!(t.transposed(3, 2).ring_words(n), a);
        }
    }

    #[test]
    fn the_narrowest_type_that_holds_every_value() {
        let n = 50;
        let ring = |v: &[i64]| -> Vec<u64> { v.iter().map(|&x| x as u64 & mask(n)).collect() };
        for (vals, kind) in [
            (vec![0, -32768, 32767], "i16"),
            (vec![0, 32768], "i32"),
            (vec![-(1 << 31), (1 << 31) - 1], "i32"),
            (vec![1 << 31], "ring"),
        ] {
            let w = Weights::from_ring(&ring(&vals), n);
            assert!(format!("{w:?}").contains(kind), "{vals:?}: {w:?}");
            assert_eq!(w.ring_words(n), ring(&vals));
        }
        // In a ring narrower than 16 bits every word is a ring word.
        let w = Weights::from_ring(&[1, 2, 3], 12);
        assert!(matches!(w, Weights::Ring(_)));
    }
}
