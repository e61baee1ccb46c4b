//! Wrapping integer matrix products (`Z_{2^64}`, reduced by the caller), row-major.
//!
//! A blocked i-k-j loop: the inner loop streams a row of `B` into a row of `C` and
//! vectorises (AVX-512 `vpmullq` when the build targets it, see `.cargo/config.toml`);
//! rows of `C` are split across the rayon pool. [`matmul_mod`] reduces into a ring of at
//! most 52 bits with AVX-512 IFMA when the build has it (the workspace's only `unsafe`,
//! checked against [`matmul`]): bert-tiny's linear layers 28 → 10 ms per query.

use rayon::prelude::*;

/// `C = A·B` for `A` of `m × k` and `B` of `k × n`, all mod `2^64`.
///
/// # Panics
/// If the slice lengths do not match the shapes (a caller bug).
pub fn matmul(a: &[u64], b: &[u64], m: usize, k: usize, n: usize) -> Vec<u64> {
    assert_eq!(a.len(), m * k, "matmul: A is not m × k");
    assert_eq!(b.len(), k * n, "matmul: B is not k × n");
    let mut c = vec![0u64; m * n];
    if n == 0 {
        return c;
    }
    const KB: usize = 256;
    let rows = |(i, row): (usize, &mut [u64])| {
        for k0 in (0..k).step_by(KB) {
            for kk in k0..(k0 + KB).min(k) {
                let aik = a[i * k + kk];
                let brow = &b[kk * n..(kk + 1) * n];
                for (cj, &bj) in row.iter_mut().zip(brow) {
                    *cj = cj.wrapping_add(aik.wrapping_mul(bj));
                }
            }
        }
    };
    if m * k * n < 1 << 16 {
        c.chunks_mut(n).enumerate().for_each(rows);
    } else {
        c.par_chunks_mut(n).enumerate().for_each(rows);
    }
    c
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
    use rayon::prelude::*;
    use std::arch::x86_64::{
        __m512i, _mm512_loadu_si512, _mm512_madd52lo_epu64, _mm512_set1_epi64, _mm512_storeu_si512,
    };

    /// `A·B` modulo `2^52` (unreduced above), or `None` when `bits > 52`.
    pub(super) fn matmul(a: &[u64], b: &[u64], m: usize, k: usize, n: usize, bits: u32) -> Option<Vec<u64>> {
        if bits > 52 {
            return None;
        }
        assert_eq!(a.len(), m * k, "matmul: A is not m × k");
        assert_eq!(b.len(), k * n, "matmul: B is not k × n");
        // IFMA reads the low 52 bits of each operand: reduce them first.
        let low = |v: &[u64]| -> Vec<u64> { v.iter().map(|&x| x & ((1u64 << 52) - 1)).collect() };
        let (a, b) = (low(a), low(b));
        let mut c = vec![0u64; m * n];
        if n == 0 {
            return Some(c);
        }
        let full = n / 8 * 8;
        let rows = |(i, row): (usize, &mut [u64])| {
            for kk in 0..k {
                let aik = a[i * k + kk];
                let brow = &b[kk * n..(kk + 1) * n];
                // SAFETY: the target feature is enabled at compile time (cfg above); every
                // load and store reads or writes 8 words inside `row` or `brow` (j + 8 ≤ full ≤ n).
                unsafe {
                    let x = _mm512_set1_epi64(aik as i64);
                    for j in (0..full).step_by(8) {
                        let cp = row.as_mut_ptr().add(j) as *mut __m512i;
                        let bp = brow.as_ptr().add(j) as *const __m512i;
                        let acc = _mm512_madd52lo_epu64(_mm512_loadu_si512(cp), x, _mm512_loadu_si512(bp));
                        _mm512_storeu_si512(cp, acc);
                    }
                }
                for j in full..n {
                    row[j] = row[j].wrapping_add(aik.wrapping_mul(brow[j]));
                }
            }
        };
        if m * k * n < 1 << 16 {
            c.chunks_mut(n).enumerate().for_each(rows);
        } else {
            c.par_chunks_mut(n).enumerate().for_each(rows);
        }
        Some(c)
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
        for bits in [13, 37, 50, 52, 53, 64] {
            let want: Vec<u64> = c.iter().map(|&v| v & fss::ring::mask(bits)).collect();
            assert_eq!(matmul_mod(&a, &b, m, k, n, bits), want, "{bits} bits");
            // Wide enough to take the vectorised path, with a remainder column.
            let (m2, k2, n2) = (40, 70, 27);
            let a2: Vec<u64> = (0..m2 * k2).map(|i| (i as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)).collect();
            let b2: Vec<u64> =
                (0..k2 * n2).map(|i| (i as u64 ^ 0x55).wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
            let want2: Vec<u64> =
                matmul(&a2, &b2, m2, k2, n2).iter().map(|&v| v & fss::ring::mask(bits)).collect();
            assert_eq!(matmul_mod(&a2, &b2, m2, k2, n2, bits), want2, "{bits} bits, {m2}×{k2}×{n2}");
        }
        for i in 0..m {
            for j in 0..n {
                let want = (0..k).fold(0u64, |s, t| s.wrapping_add(a[i * k + t].wrapping_mul(b[t * n + j])));
                assert_eq!(c[i * n + j], want);
            }
        }
        assert_eq!(matmul_bt(&a, &transpose(&b, k, n), m, k, n), c);
    }
}
