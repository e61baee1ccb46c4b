//! Wrapping integer matrix products (`Z_{2^64}`, reduced by the caller), row-major.
//!
//! Tiled: a block of [`ROWS`] rows of `C` takes [`COLS`] columns at a time, and each
//! segment of a row of `B` is read once per block and added, scaled, into every row of
//! the block (the axpy vectorises: AVX-512 `vpmullq` when the build targets it, see
//! `.cargo/config.toml`). `B` is read from memory once per block of rows, not once per
//! row: a model's weights (GPT-2's 768 × 3,072 words are 19 MB) do not fit a cache. Blocks
//! of rows are split across the rayon pool. [`matmul_mod`] reduces into a ring of at most
//! 52 bits with AVX-512 IFMA when the build has it (the workspace's only `unsafe`, checked
//! against [`matmul`]).

use rayon::prelude::*;

/// Rows of `C` that share each read of `B`.
pub const ROWS: usize = 16;
/// Columns of a tile: a tile of `C` is `ROWS × COLS` words (32 KB), a segment of `B` 2 KB.
pub const COLS: usize = 256;

/// `C += A·B` over the tiles, with `axpy(c, a, b)` doing `c += a·b` on a segment.
fn tiled(
    a: &[u64],
    b: &[u64],
    m: usize,
    k: usize,
    n: usize,
    axpy: impl Fn(&mut [u64], u64, &[u64]) + Sync,
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
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "avx512ifma")))]
mod ifma {
    /// No IFMA in this build.
    pub(super) fn matmul(_: &[u64], _: &[u64], _: usize, _: usize, _: usize, _: u32) -> Option<Vec<u64>> {
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
    for i in 0..rows {
        for j in 0..cols {
            t[j * rows + i] = a[i * cols + j];
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
