//! Wrapping integer matrix products (`Z_{2^64}`, reduced by the caller), row-major.
//!
//! A blocked i-k-j loop: the inner loop streams a row of `B` into a row of `C` and
//! vectorises (AVX-512 `vpmullq` when the build targets it, see `.cargo/config.toml`);
//! rows of `C` are split across the rayon pool.

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
        for i in 0..m {
            for j in 0..n {
                let want = (0..k).fold(0u64, |s, t| s.wrapping_add(a[i * k + t].wrapping_mul(b[t * n + j])));
                assert_eq!(c[i * n + j], want);
            }
        }
        assert_eq!(matmul_bt(&a, &transpose(&b, k, n), m, k, n), c);
    }
}
