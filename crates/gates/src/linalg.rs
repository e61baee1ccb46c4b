//! Wrapping integer matrix products (`Z_{2^64}`, reduced by the caller), row-major.
//!
//! Tiled: a block of [`ROWS`] rows of `C` takes [`COLS`] columns at a time, and each
//! segment of a row of `B` is read once per block and added, scaled, into every row of
//! the block (the axpy vectorises: AVX-512 `vpmullq` when the build targets it, see
//! `.cargo/config.toml`). `B` is read from memory once per block of rows, not once per
//! row: a model's weights (GPT-2's 768 × 3,072 words are 19 MB) do not fit a cache. Blocks
//! of rows are split across the rayon pool. [`matmul_mod`] reduces into a ring of at most
//! 52 bits with AVX-512 IFMA when the build has it (one of the workspace's two `unsafe`
//! kernels, with `compiler::parity`'s folds; checked against [`matmul`]).

use rayon::prelude::*;

/// Rows of `C` that share each read of `B`.
pub const ROWS: usize = 16;
/// Columns of a tile: a tile of `C` is `ROWS × COLS` words (32 KB), a segment of `B` 2 KB.
pub const COLS: usize = 256;

/// `C += A·B` over the tiles, with `axpy(c, a, b)` doing `c += a·b` on a segment.
fn tiled<T: Copy + Sync>(
    a: &[u64],
    b: &[T],
    m: usize,
    k: usize,
    n: usize,
    axpy: impl Fn(&mut [u64], u64, &[T]) + Sync,
) -> Vec<u64> {
    assert_eq!(a.len(), m * k, "matmul: A is not m × k");
    assert_eq!(b.len(), k * n, "matmul: B is not k × n");
    let mut c = vec![0u64; m * n];
    if n == 0 {
        return c;
    }
    let block = |(bi, cb): (usize, &mut [u64])| {
        let rows = cb.len() / n;
        for j0 in (0..n).step_by(COLS) {
            let j1 = (j0 + COLS).min(n);
            for kk in 0..k {
                let seg = &b[kk * n + j0..kk * n + j1];
                for r in 0..rows {
                    let i = bi * ROWS + r;
                    axpy(&mut cb[r * n + j0..r * n + j1], a[i * k + kk], seg);
                }
            }
        }
    };
    if m * k * n < 1 << 16 {
        c.chunks_mut(ROWS * n).enumerate().for_each(block);
    } else {
        c.par_chunks_mut(ROWS * n).enumerate().for_each(block);
    }
    c
}

/// `C = A·B` for `A` of `m × k` and `B` of `k × n`, all mod `2^64`.
///
/// # Panics
/// If the slice lengths do not match the shapes (a caller bug).
pub fn matmul(a: &[u64], b: &[u64], m: usize, k: usize, n: usize) -> Vec<u64> {
    tiled(a, b, m, k, n, |c, x, seg| {
        for (cj, &bj) in c.iter_mut().zip(seg) {
            *cj = cj.wrapping_add(x.wrapping_mul(bj));
        }
    })
}

/// `C = A·B mod 2^bits`. For rings of at most 52 bits on a CPU with AVX-512 IFMA (the
/// build targets the machine's CPU, `.cargo/config.toml`), the products are
/// `vpmadd52luq`s: the low 52 bits of a product of two 52-bit values are all a 52-bit
/// ring needs, at one instruction per 8 products where a 64-bit multiply takes three.
///
/// # Panics
/// If the slice lengths do not match the shapes (a caller bug).
pub fn matmul_mod(a: &[u64], b: &[u64], m: usize, k: usize, n: usize, bits: u32) -> Vec<u64> {
    let mut c = ifma::matmul(a, b, m, k, n, bits).unwrap_or_else(|| matmul(a, b, m, k, n));
    let mask = fss::ring::mask(bits);
    c.iter_mut().for_each(|v| *v &= mask);
    c
}

/// A public weight matrix as the narrowest signed integers that hold its ring values
/// (sign-extended into the ring), or as ring words: a model's weights at scale `f` fit
/// 16 or 32 bits, and a matrix-vector product (a decode step) reads every weight once, so
/// its time is the bytes it reads.
#[derive(Clone, Copy, Debug)]
pub enum WeightSlice<'a> {
    /// Ring words.
    Ring(&'a [u64]),
    /// Signed 32-bit values.
    I32(&'a [i32]),
    /// Signed 16-bit values.
    I16(&'a [i16]),
}

impl WeightSlice<'_> {
    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            WeightSlice::Ring(v) => v.len(),
            WeightSlice::I32(v) => v.len(),
            WeightSlice::I16(v) => v.len(),
        }
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `C = A·W mod 2^64` for narrow signed weights (sign-extended).
fn narrow<T: Copy + Sync + Into<i64>>(a: &[u64], b: &[T], m: usize, k: usize, n: usize) -> Vec<u64> {
    tiled(a, b, m, k, n, |c, x, seg| {
        for (cj, &bj) in c.iter_mut().zip(seg) {
            *cj = cj.wrapping_add(x.wrapping_mul(bj.into() as u64));
        }
    })
}

/// `C = A·W mod 2^bits` for public weights `W` ([`WeightSlice`]); equal to [`matmul_mod`]
/// of the weights' ring words.
///
/// # Panics
/// If the slice lengths do not match the shapes (a caller bug).
pub fn matmul_mod_weights(
    a: &[u64],
    w: WeightSlice<'_>,
    m: usize,
    k: usize,
    n: usize,
    bits: u32,
) -> Vec<u64> {
    let mut c = match w {
        WeightSlice::Ring(b) => return matmul_mod(a, b, m, k, n, bits),
        WeightSlice::I32(b) => {
            ifma::matmul_narrow(a, b, m, k, n, bits).unwrap_or_else(|| narrow(a, b, m, k, n))
        }
        WeightSlice::I16(b) => {
            ifma::matmul_narrow(a, b, m, k, n, bits).unwrap_or_else(|| narrow(a, b, m, k, n))
        }
    };
    let mask = fss::ring::mask(bits);
    c.iter_mut().for_each(|v| *v &= mask);
    c
}

#[cfg(all(target_arch = "x86_64", target_feature = "avx512ifma"))]
#[allow(unsafe_code)]
mod ifma {
    use std::arch::x86_64::{
        __m512i, _mm512_loadu_si512, _mm512_madd52lo_epu64, _mm512_set1_epi64, _mm512_storeu_si512,
    };

    /// `A·B` modulo `2^52` (unreduced above), or `None` when `bits > 52`.
    pub(super) fn matmul(a: &[u64], b: &[u64], m: usize, k: usize, n: usize, bits: u32) -> Option<Vec<u64>> {
        if bits > 52 {
            return None;
        }
        // IFMA reads the low 52 bits of each operand: reduce them, copying only operands that
        // have higher bits (ring elements and a model's weights have none).
        fn low(v: &[u64]) -> std::borrow::Cow<'_, [u64]> {
            if v.iter().all(|&x| x >> 52 == 0) {
                v.into()
            } else {
                v.iter().map(|&x| x & ((1u64 << 52) - 1)).collect::<Vec<u64>>().into()
            }
        }
        let (a, b) = (low(a), low(b));
        Some(super::tiled(&a, &b, m, k, n, |c, x, seg| {
            let full = c.len().min(seg.len()) / 8 * 8;
            // SAFETY: the target feature is enabled at compile time (cfg above); every load
            // and store touches the 8 words at `j..j + 8` of `c` or `seg`, and `j + 8 ≤ full`,
            // which is at most the length of both.
            unsafe {
                let xv = _mm512_set1_epi64(x as i64);
                for j in (0..full).step_by(8) {
                    let cp = c.as_mut_ptr().add(j) as *mut __m512i;
                    let bp = seg.as_ptr().add(j) as *const __m512i;
                    _mm512_storeu_si512(
                        cp,
                        _mm512_madd52lo_epu64(_mm512_loadu_si512(cp), xv, _mm512_loadu_si512(bp)),
                    );
                }
            }
            for (cj, &bj) in c[full..].iter_mut().zip(&seg[full..]) {
                *cj = cj.wrapping_add(x.wrapping_mul(bj));
            }
        }))
    }

    /// A narrow signed weight type that IFMA can load 8 at a time, sign-extended to 64 bits.
    pub(super) trait Load8: Copy + Sync + Into<i64> {
        /// The 8 weights at `p`, sign-extended.
        ///
        /// # Safety
        /// `p` must point at 8 readable values.
        unsafe fn load8(p: *const Self) -> __m512i;
    }

    impl Load8 for i32 {
        unsafe fn load8(p: *const i32) -> __m512i {
            use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm512_cvtepi32_epi64};
            // SAFETY: the caller's contract: 8 values (32 bytes) are readable at `p`.
            unsafe { _mm512_cvtepi32_epi64(_mm256_loadu_si256(p as *const __m256i)) }
        }
    }

    impl Load8 for i16 {
        unsafe fn load8(p: *const i16) -> __m512i {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm512_cvtepi16_epi64};
            // SAFETY: the caller's contract: 8 values (16 bytes) are readable at `p`.
            unsafe { _mm512_cvtepi16_epi64(_mm_loadu_si128(p as *const __m128i)) }
        }
    }

    /// `A·W` modulo `2^52` for narrow signed weights (sign-extended, then their low 52 bits:
    /// `x·(w mod 2^52) ≡ x·w mod 2^52`), or `None` when `bits > 52`.
    pub(super) fn matmul_narrow<T: Load8>(
        a: &[u64],
        b: &[T],
        m: usize,
        k: usize,
        n: usize,
        bits: u32,
    ) -> Option<Vec<u64>> {
        use std::arch::x86_64::_mm512_and_si512;
        if bits > 52 {
            return None;
        }
        let a = low_a(a);
        Some(super::tiled(&a, b, m, k, n, |c, x, seg| {
            let full = c.len().min(seg.len()) / 8 * 8;
            // SAFETY: as in `matmul`: the target feature is enabled at compile time, and every
            // load and store touches the 8 elements at `j..j + 8` of `c` or `seg`, `j + 8 ≤ full`.
            unsafe {
                let xv = _mm512_set1_epi64(x as i64);
                let low52 = _mm512_set1_epi64((1i64 << 52) - 1);
                for j in (0..full).step_by(8) {
                    let cp = c.as_mut_ptr().add(j) as *mut __m512i;
                    let w = T::load8(seg.as_ptr().add(j));
                    _mm512_storeu_si512(
                        cp,
                        _mm512_madd52lo_epu64(_mm512_loadu_si512(cp), xv, _mm512_and_si512(w, low52)),
                    );
                }
            }
            for (cj, &bj) in c[full..].iter_mut().zip(&seg[full..]) {
                *cj = cj.wrapping_add(x.wrapping_mul(bj.into() as u64));
            }
        }))
    }

    /// `a` with only its low 52 bits (copied only if it has higher ones).
    fn low_a(a: &[u64]) -> std::borrow::Cow<'_, [u64]> {
        if a.iter().all(|&x| x >> 52 == 0) {
            a.into()
        } else {
            a.iter().map(|&x| x & ((1u64 << 52) - 1)).collect::<Vec<u64>>().into()
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "avx512ifma")))]
mod ifma {
    /// No IFMA in this build.
    pub(super) fn matmul(_: &[u64], _: &[u64], _: usize, _: usize, _: usize, _: u32) -> Option<Vec<u64>> {
        None
    }

    /// No IFMA in this build.
    pub(super) fn matmul_narrow<T>(
        _: &[u64],
        _: &[T],
        _: usize,
        _: usize,
        _: usize,
        _: u32,
    ) -> Option<Vec<u64>> {
        None
    }
}

/// `C = A·Bᵀ` for `A` of `m × k` and `B` of `n × k`.
pub fn matmul_bt(a: &[u64], b: &[u64], m: usize, k: usize, n: usize) -> Vec<u64> {
    matmul(a, &transpose(b, n, k), m, k, n)
}

/// The transpose of a `rows × cols` matrix.
pub fn transpose(a: &[u64], rows: usize, cols: usize) -> Vec<u64> {
    let mut t = vec![0u64; a.len()];
    transpose_into(a, &mut t, rows, cols);
    t
}

/// `out` = the transpose of the row-major `rows × cols` matrix `v`, in tiles (both sides'
/// cache lines reused: a large matrix read a column at a time misses the cache on every
/// element).
pub fn transpose_into<T: Copy>(v: &[T], out: &mut [T], rows: usize, cols: usize) {
    const TILE: usize = 32;
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                for c in c0..(c0 + TILE).min(cols) {
                    out[c * rows + r] = v[r * cols + c];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tiles cut at any size: every element lands at its transposed place.
    #[test]
    fn tiled_transpose() {
        for (rows, cols) in [(1, 1), (1, 70), (70, 1), (31, 33), (70, 45), (64, 64)] {
            let v: Vec<u32> = (0..rows * cols).map(|i| i as u32).collect();
            let mut t = vec![0; v.len()];
            transpose_into(&v, &mut t, rows, cols);
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(t[c * rows + r], v[r * cols + c], "{rows} × {cols}");
                }
            }
        }
    }

    #[test]
    fn matches_the_naive_product() {
        let (m, k, n) = (7, 300, 5);
        let a: Vec<u64> = (0..m * k).map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
        let b: Vec<u64> = (0..k * n).map(|i| (i as u64 + 3).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)).collect();
        let c = matmul(&a, &b, m, k, n);
        // Wide enough to take the vectorised path, with a remainder column, and across the
        // tiles: rows past a block of ROWS, columns past a tile of COLS.
        let (m2, k2, n2) = (ROWS + 3, 70, COLS + 27);
        let a2: Vec<u64> = (0..m2 * k2).map(|i| (i as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)).collect();
        let b2: Vec<u64> =
            (0..k2 * n2).map(|i| (i as u64 ^ 0x55).wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
        let c2 = matmul(&a2, &b2, m2, k2, n2);
        for bits in [13, 37, 50, 52, 53, 64] {
            let want: Vec<u64> = c.iter().map(|&v| v & fss::ring::mask(bits)).collect();
            assert_eq!(matmul_mod(&a, &b, m, k, n, bits), want, "{bits} bits");
            let want2: Vec<u64> = c2.iter().map(|&v| v & fss::ring::mask(bits)).collect();
            assert_eq!(matmul_mod(&a2, &b2, m2, k2, n2, bits), want2, "{bits} bits, {m2}×{k2}×{n2}");
        }
        let naive = |a: &[u64], b: &[u64], c: &[u64], (m, k, n): (usize, usize, usize)| {
            for i in 0..m {
                for j in 0..n {
                    let want =
                        (0..k).fold(0u64, |s, t| s.wrapping_add(a[i * k + t].wrapping_mul(b[t * n + j])));
                    assert_eq!(c[i * n + j], want, "{m}×{k}×{n} at ({i}, {j})");
                }
            }
        };
        naive(&a, &b, &c, (m, k, n));
        naive(&a2, &b2, &c2, (m2, k2, n2));
        assert_eq!(matmul_bt(&a, &transpose(&b, k, n), m, k, n), c);
    }

    #[test]
    fn narrow_weights_equal_their_ring_words() {
        // Signed weights across the tiles and with a remainder column, against the product
        // of their ring words, at widths on both sides of IFMA's 52 bits.
        let (m, k, n) = (ROWS + 2, 33, COLS + 13);
        let a: Vec<u64> = (0..m * k).map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
        let w32: Vec<i32> = (0..k * n).map(|i| ((i as i64 * 7919) % 200_003 - 100_001) as i32).collect();
        let w16: Vec<i16> = w32.iter().map(|&v| (v % 30_000) as i16).collect();
        for bits in [13, 37, 50, 52, 53, 56, 64] {
            let ring =
                |v: &[i64]| -> Vec<u64> { v.iter().map(|&x| x as u64 & fss::ring::mask(bits)).collect() };
            let r32 = ring(&w32.iter().map(|&v| i64::from(v)).collect::<Vec<_>>());
            let r16 = ring(&w16.iter().map(|&v| i64::from(v)).collect::<Vec<_>>());
            assert_eq!(
                matmul_mod_weights(&a, WeightSlice::I32(&w32), m, k, n, bits),
                matmul_mod(&a, &r32, m, k, n, bits),
                "i32, {bits} bits"
            );
            assert_eq!(
                matmul_mod_weights(&a, WeightSlice::I16(&w16), m, k, n, bits),
                matmul_mod(&a, &r16, m, k, n, bits),
                "i16, {bits} bits"
            );
            assert_eq!(
                matmul_mod_weights(&a, WeightSlice::Ring(&r32), m, k, n, bits),
                matmul_mod(&a, &r32, m, k, n, bits)
            );
        }
    }
}
