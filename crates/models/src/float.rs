//! The f64 reference forward pass of BERT and GPT-2, and its pieces.
//!
//! Every tensor is a row-major `Vec<f64>` (`seq × width`). The pieces ([`matmul`], [`linear`],
//! [`layer_norm`], [`softmax_rows`], [`attention`], [`gelu_erf`], [`gelu_tanh`], the per-layer
//! functions) are public so that fixed-point and secure evaluations can be compared with the
//! intermediate values, not only with the final output.

use rayon::prelude::*;

use crate::config::{BertConfig, Gpt2Config};
use crate::error::{ModelError, Result};
use crate::weights::{BertLayer, BertWeights, Gpt2Layer, Gpt2Weights, check_len};

/// Columns of the output computed by one task of [`matmul`].
const COL_BLOCK: usize = 64;

/// `a · b` for row-major `a` (`m × k`) and `b` (`k × n`): an `m × n` matrix.
///
/// Each task computes a block of 64 output columns for all rows (i-k-j order within the
/// block), so a block of `b` stays in cache while every row of `a` passes over it; blocks run
/// in parallel on rayon's pool.
///
/// # Panics
/// If `a.len() != m·k` or `b.len() != k·n`.
pub fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    assert_eq!(a.len(), m * k, "matmul: a is not {m}×{k}");
    assert_eq!(b.len(), k * n, "matmul: b is not {k}×{n}");
    let mut out = vec![0.0; m * n];
    if m == 0 || n == 0 {
        return out;
    }
    let blocks: Vec<(usize, Vec<f64>)> = (0..n.div_ceil(COL_BLOCK))
        .into_par_iter()
        .map(|jb| {
            let j0 = jb * COL_BLOCK;
            let w = COL_BLOCK.min(n - j0);
            let mut block = vec![0.0; m * w];
            for (arow, orow) in a.chunks_exact(k.max(1)).zip(block.chunks_exact_mut(w)) {
                for (kk, &x) in arow.iter().enumerate() {
                    let brow = &b[kk * n + j0..kk * n + j0 + w];
                    for (o, &y) in orow.iter_mut().zip(brow) {
                        *o += x * y;
                    }
                }
            }
            (j0, block)
        })
        .collect();
    for (j0, block) in blocks {
        let w = block.len() / m;
        for (orow, brow) in out.chunks_exact_mut(n).zip(block.chunks_exact(w)) {
            orow[j0..j0 + w].copy_from_slice(brow);
        }
    }
    out
}

/// `x · w + bias` for `x` of `rows × fan_in`, `w` of `fan_in × fan_out` and `bias` of
/// `fan_out`: a `rows × fan_out` matrix.
///
/// # Panics
/// If the lengths do not match these shapes.
pub fn linear(x: &[f64], w: &[f64], bias: &[f64], fan_in: usize, fan_out: usize) -> Vec<f64> {
    assert_eq!(bias.len(), fan_out, "linear: bias length");
    assert_eq!(x.len() % fan_in.max(1), 0, "linear: x is not a multiple of fan_in");
    let rows = x.len() / fan_in.max(1);
    let mut y = matmul(x, w, rows, fan_in, fan_out);
    for row in y.chunks_exact_mut(fan_out.max(1)) {
        for (v, b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
    y
}

/// LayerNorm of every row of `x` (rows of `gamma.len()` values):
/// `(x − mean) / √(var + eps) · gamma + beta` with the population variance.
///
/// # Panics
/// If `gamma` and `beta` differ in length or `x` is not a whole number of rows.
pub fn layer_norm(x: &[f64], gamma: &[f64], beta: &[f64], eps: f64) -> Vec<f64> {
    let dim = gamma.len();
    assert_eq!(beta.len(), dim, "layer_norm: gamma and beta differ in length");
    assert!(dim > 0 && x.len().is_multiple_of(dim), "layer_norm: x is not a whole number of rows");
    let mut out = vec![0.0; x.len()];
    for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let mean = xr.iter().sum::<f64>() / dim as f64;
        let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / dim as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for (((o, &v), &g), &b) in or.iter_mut().zip(xr).zip(gamma).zip(beta) {
            *o = (v - mean) * inv * g + b;
        }
    }
    out
}

/// Softmax of one row in place (max subtracted first). An empty row stays empty.
pub fn softmax(row: &mut [f64]) {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in row.iter_mut() {
        *v /= sum;
    }
}

/// Softmax of every row of `x` (rows of `cols` values) in place.
///
/// # Panics
/// If `cols` is 0 or `x` is not a whole number of rows.
pub fn softmax_rows(x: &mut [f64], cols: usize) {
    assert!(cols > 0 && x.len().is_multiple_of(cols), "softmax_rows: x is not a whole number of rows");
    x.chunks_exact_mut(cols).for_each(softmax);
}

/// GeLU in its exact form, `x/2 · (1 + erf(x/√2))` (BERT's `gelu`).
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))
}

/// GeLU in its tanh form, `x/2 · (1 + tanh(√(2/π)·(x + 0.044715·x³)))` (GPT-2's `gelu_new`).
pub fn gelu_tanh(x: f64) -> f64 {
    const C: f64 = 0.797_884_560_802_865_4; // √(2/π)
    0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh())
}

/// Attention probabilities, `heads × seq × seq` (head-major): row `i` of head `h` is the
/// softmax of `q_i · k_j / √head_dim` over `j` (over `j ≤ i` if `causal`, the rest 0).
///
/// `q` and `k` are `seq × heads·head_dim`, head `h` in columns `h·head_dim .. (h+1)·head_dim`.
///
/// # Panics
/// If `q` or `k` is not `seq × heads·head_dim`.
pub fn attention_probs(
    q: &[f64],
    k: &[f64],
    seq: usize,
    heads: usize,
    head_dim: usize,
    causal: bool,
) -> Vec<f64> {
    let width = heads * head_dim;
    assert_eq!(q.len(), seq * width, "attention: q is not seq × heads·head_dim");
    assert_eq!(k.len(), seq * width, "attention: k is not seq × heads·head_dim");
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut p = vec![0.0; heads * seq * seq];
    if seq == 0 {
        return p;
    }
    p.par_chunks_mut(seq * seq).enumerate().for_each(|(h, ph)| {
        let c0 = h * head_dim;
        for (i, row) in ph.chunks_exact_mut(seq).enumerate() {
            let qi = &q[i * width + c0..i * width + c0 + head_dim];
            let valid = if causal { i + 1 } else { seq };
            for (j, s) in row[..valid].iter_mut().enumerate() {
                let kj = &k[j * width + c0..j * width + c0 + head_dim];
                *s = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>() * scale;
            }
            softmax(&mut row[..valid]);
        }
    });
    p
}

/// Multi-head scaled dot-product attention: `seq × heads·head_dim`, head `h` in columns
/// `h·head_dim ..`, each head's output `P_h · V_h` with `P` from [`attention_probs`].
///
/// # Panics
/// If `q`, `k` or `v` is not `seq × heads·head_dim`.
pub fn attention(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    seq: usize,
    heads: usize,
    head_dim: usize,
    causal: bool,
) -> Vec<f64> {
    let width = heads * head_dim;
    assert_eq!(v.len(), seq * width, "attention: v is not seq × heads·head_dim");
    let p = attention_probs(q, k, seq, heads, head_dim, causal);
    let mut out = vec![0.0; seq * width];
    for h in 0..heads {
        let c0 = h * head_dim;
        let ph = &p[h * seq * seq..(h + 1) * seq * seq];
        for (i, prow) in ph.chunks_exact(seq).enumerate() {
            let orow = &mut out[i * width + c0..i * width + c0 + head_dim];
            for (j, &pij) in prow.iter().enumerate() {
                let vj = &v[j * width + c0..j * width + c0 + head_dim];
                for (o, &x) in orow.iter_mut().zip(vj) {
                    *o += pij * x;
                }
            }
        }
    }
    out
}

/// Mean of the `seq` rows of `hidden` (`seq × dim`): a `dim` vector (zeros if `seq` is 0).
///
/// # Panics
/// If `hidden.len() != seq·dim`.
pub fn mean_pool(hidden: &[f64], seq: usize, dim: usize) -> Vec<f64> {
    assert_eq!(hidden.len(), seq * dim, "mean_pool: hidden is not seq × dim");
    let mut out = vec![0.0; dim];
    for row in hidden.chunks_exact(dim.max(1)) {
        for (o, v) in out.iter_mut().zip(row) {
            *o += v;
        }
    }
    if seq > 0 {
        out.iter_mut().for_each(|o| *o /= seq as f64);
    }
    out
}

/// `v / ‖v‖₂` (the zero vector stays zero).
pub fn l2_normalize(v: &[f64]) -> Vec<f64> {
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm == 0.0 { v.to_vec() } else { v.iter().map(|x| x / norm).collect() }
}

/// Cosine similarity of two vectors of equal length (0 if either is zero).
///
/// # Panics
/// If the lengths differ.
pub fn cosine(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "cosine: lengths differ");
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 { 0.0 } else { dot / (na * nb) }
}

/// Checks a token sequence against a table of `rows` rows and a position limit.
fn check_ids(ids: &[u32], rows: usize, max_len: usize, table: &'static str) -> Result<()> {
    if ids.is_empty() {
        return Err(ModelError::EmptySequence);
    }
    if ids.len() > max_len {
        return Err(ModelError::SequenceTooLong { len: ids.len(), max: max_len });
    }
    match ids.iter().position(|&id| id as usize >= rows) {
        Some(pos) => Err(ModelError::IdOutOfRange { id: ids[pos], pos, table, size: rows }),
        None => Ok(()),
    }
}

/// Adds `b` to `a` elementwise.
fn add_assign(a: &mut [f64], b: &[f64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// Fails unless `x` is `seq × hidden` with `seq ≥ 1`; returns `seq`.
fn rows_of(x: &[f64], hidden: usize) -> Result<usize> {
    if x.is_empty() {
        return Err(ModelError::EmptySequence);
    }
    if !x.len().is_multiple_of(hidden) {
        return Err(ModelError::LengthMismatch {
            what: "hidden states (a multiple of hidden)",
            expected: x.len().div_ceil(hidden) * hidden,
            actual: x.len(),
        });
    }
    Ok(x.len() / hidden)
}

/// BERT's embedding: `LN(word[id] + position[i] + token_type[type])`, `seq × hidden`.
/// `type_ids` defaults to all zeros.
///
/// # Errors
/// Invalid weights, an empty or too long sequence, an id outside its table, or `type_ids` of
/// another length.
pub fn bert_embed(w: &BertWeights, token_ids: &[u32], type_ids: Option<&[u32]>) -> Result<Vec<f64>> {
    w.validate()?;
    let c = &w.config;
    check_ids(token_ids, c.vocab, c.max_positions, "vocabulary")?;
    let zeros = vec![0; token_ids.len()];
    let types = type_ids.unwrap_or(&zeros);
    if types.len() != token_ids.len() {
        return Err(ModelError::LengthMismatch {
            what: "type_ids",
            expected: token_ids.len(),
            actual: types.len(),
        });
    }
    check_ids(types, c.type_vocab, c.max_positions, "token type")?;
    let h = c.hidden;
    let mut x = vec![0.0; token_ids.len() * h];
    for (i, (row, (&id, &ty))) in x.chunks_exact_mut(h).zip(token_ids.iter().zip(types)).enumerate() {
        let (id, ty) = (id as usize, ty as usize);
        for (j, v) in row.iter_mut().enumerate() {
            *v = w.word[id * h + j] + w.position[i * h + j] + w.token_type[ty * h + j];
        }
    }
    Ok(layer_norm(&x, &w.emb_ln_g, &w.emb_ln_b, c.ln_eps))
}

/// One BERT encoder layer on `x` (`seq × hidden`).
///
/// # Errors
/// Tensors of `layer` that do not fit `config`, or `x` that is not `seq × hidden`.
pub fn bert_layer(layer: &BertLayer, config: &BertConfig, x: &[f64]) -> Result<Vec<f64>> {
    config.validate()?;
    layer.validate(config, 0)?;
    let (h, f) = (config.hidden, config.ffn);
    let seq = rows_of(x, h)?;
    let q = linear(x, &layer.wq, &layer.bq, h, h);
    let k = linear(x, &layer.wk, &layer.bk, h, h);
    let v = linear(x, &layer.wv, &layer.bv, h, h);
    let ctx = attention(&q, &k, &v, seq, config.heads, config.head_dim(), false);
    let mut a = linear(&ctx, &layer.wo, &layer.bo, h, h);
    add_assign(&mut a, x);
    let x1 = layer_norm(&a, &layer.ln1_g, &layer.ln1_b, config.ln_eps);
    let mut u = linear(&x1, &layer.w1, &layer.b1, h, f);
    u.iter_mut().for_each(|v| *v = gelu_erf(*v));
    let mut y = linear(&u, &layer.w2, &layer.b2, f, h);
    add_assign(&mut y, &x1);
    Ok(layer_norm(&y, &layer.ln2_g, &layer.ln2_b, config.ln_eps))
}

/// The BERT encoder: the final hidden states, `seq × hidden` row-major. No attention mask
/// (there is no padding); `type_ids` defaults to all zeros.
///
/// # Errors
/// Invalid weights, an empty or too long sequence, an id outside its table, or `type_ids` of
/// another length.
pub fn bert_forward(w: &BertWeights, token_ids: &[u32], type_ids: Option<&[u32]>) -> Result<Vec<f64>> {
    let mut x = bert_embed(w, token_ids, type_ids)?;
    for layer in &w.layers {
        x = bert_layer(layer, &w.config, &x)?;
    }
    Ok(x)
}

/// GPT-2's embedding: `wte[id] + wpe[i]`, `seq × hidden`.
///
/// # Errors
/// Invalid weights, an empty or too long sequence, or an id outside the vocabulary.
pub fn gpt2_embed(w: &Gpt2Weights, token_ids: &[u32]) -> Result<Vec<f64>> {
    w.validate()?;
    let c = &w.config;
    check_ids(token_ids, c.vocab, c.max_positions, "vocabulary")?;
    let h = c.hidden;
    let mut x = vec![0.0; token_ids.len() * h];
    for (i, (row, &id)) in x.chunks_exact_mut(h).zip(token_ids).enumerate() {
        let id = id as usize;
        for (j, v) in row.iter_mut().enumerate() {
            *v = w.wte[id * h + j] + w.wpe[i * h + j];
        }
    }
    Ok(x)
}

/// One GPT-2 decoder layer on the residual stream `x` (`seq × hidden`).
///
/// # Errors
/// Tensors of `layer` that do not fit `config`, or `x` that is not `seq × hidden`.
pub fn gpt2_layer(layer: &Gpt2Layer, config: &Gpt2Config, x: &[f64]) -> Result<Vec<f64>> {
    config.validate()?;
    layer.validate(config, 0)?;
    let (h, f) = (config.hidden, config.ffn);
    let seq = rows_of(x, h)?;
    let a = layer_norm(x, &layer.ln1_g, &layer.ln1_b, config.ln_eps);
    let qkv = linear(&a, &layer.w_qkv, &layer.b_qkv, h, 3 * h);
    let (mut q, mut k, mut v) =
        (Vec::with_capacity(seq * h), Vec::with_capacity(seq * h), Vec::with_capacity(seq * h));
    for row in qkv.chunks_exact(3 * h) {
        q.extend_from_slice(&row[..h]);
        k.extend_from_slice(&row[h..2 * h]);
        v.extend_from_slice(&row[2 * h..]);
    }
    let ctx = attention(&q, &k, &v, seq, config.heads, config.head_dim(), true);
    let mut x1 = linear(&ctx, &layer.w_proj, &layer.b_proj, h, h);
    add_assign(&mut x1, x);
    let m = layer_norm(&x1, &layer.ln2_g, &layer.ln2_b, config.ln_eps);
    let mut u = linear(&m, &layer.w_fc, &layer.b_fc, h, f);
    u.iter_mut().for_each(|v| *v = gelu_tanh(*v));
    let mut y = linear(&u, &layer.w_out, &layer.b_out, f, h);
    add_assign(&mut y, &x1);
    Ok(y)
}

/// The GPT-2 decoder: hidden states after the final LayerNorm, `seq × hidden` row-major.
///
/// # Errors
/// Invalid weights, an empty or too long sequence, or an id outside the vocabulary.
pub fn gpt2_forward(w: &Gpt2Weights, token_ids: &[u32]) -> Result<Vec<f64>> {
    let mut x = gpt2_embed(w, token_ids)?;
    for layer in &w.layers {
        x = gpt2_layer(layer, &w.config, &x)?;
    }
    Ok(layer_norm(&x, &w.lnf_g, &w.lnf_b, w.config.ln_eps))
}

/// Next-token logits of the last position: `h_last · wteᵀ`, a `vocab` vector, where
/// `hidden_states` is the output of [`gpt2_forward`] (`seq × hidden`).
///
/// # Errors
/// Invalid weights, or `hidden_states` empty or not a whole number of rows.
pub fn gpt2_logits_last(w: &Gpt2Weights, hidden_states: &[f64]) -> Result<Vec<f64>> {
    let h = w.config.hidden;
    w.config.validate()?;
    check_len(|| "wte".into(), &w.wte, w.config.vocab * h)?;
    let seq = rows_of(hidden_states, h)?;
    let last = &hidden_states[(seq - 1) * h..];
    Ok(w.wte.par_chunks_exact(h).map(|row| row.iter().zip(last).map(|(a, b)| a * b).sum()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BertConfig, Gpt2Config};

    fn naive_matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|t| a[i * k + t] * b[t * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn matmul_matches_naive_on_ragged_shapes() {
        for &(m, k, n) in &[(1, 1, 1), (3, 5, 7), (2, 9, 64), (5, 3, 130), (4, 0, 3), (0, 4, 3)] {
            let a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.37).sin()).collect();
            let b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.11).cos()).collect();
            let got = matmul(&a, &b, m, k, n);
            let want = naive_matmul(&a, &b, m, k, n);
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-12, "{m}x{k}x{n}");
            }
        }
    }

    #[test]
    fn softmax_rows_sum_to_one() {
        let mut x: Vec<f64> = (0..60).map(|i| (i as f64 * 1.7).sin() * 30.0).collect();
        x[7] = 1000.0; // no overflow thanks to the max subtraction
        softmax_rows(&mut x, 12);
        for row in x.chunks(12) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            assert!(row.iter().all(|&p| (0.0..=1.0).contains(&p)));
        }
        assert!((x[7] - 1.0).abs() < 1e-12);
        let p = attention_probs(
            &[1.0, 0.5, -1.0, 2.0, 0.0, 1.0],
            &[0.3, 1.0, 2.0, -1.0, 0.5, 0.5],
            3,
            1,
            2,
            true,
        );
        assert_eq!(p[0], 1.0);
        assert_eq!((p[1], p[2], p[5]), (0.0, 0.0, 0.0));
        for row in p.chunks(3) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn gelu_forms_agree_and_have_known_values() {
        assert_eq!(gelu_erf(0.0), 0.0);
        assert!((gelu_erf(1.0) - 0.841_344_746_068_542_9).abs() < 1e-15);
        assert!((gelu_erf(-3.0) + 0.004_049_694_094_890_285).abs() < 1e-15);
        for i in -80..=80 {
            let x = f64::from(i) / 10.0;
            assert!((gelu_erf(x) - gelu_tanh(x)).abs() < 1e-3, "{x}");
        }
    }

    #[test]
    fn layer_norm_rows_have_zero_mean_unit_variance() {
        let x: Vec<f64> = (0..40).map(|i| (i as f64 * 0.9).sin() * 5.0 + 3.0).collect();
        let y = layer_norm(&x, &[1.0; 8], &[0.0; 8], 1e-12);
        for row in y.chunks(8) {
            let m = row.iter().sum::<f64>() / 8.0;
            let v = row.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / 8.0;
            assert!(m.abs() < 1e-12 && (v - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn pooling_and_normalisation() {
        let h = [1.0, 2.0, 3.0, 6.0];
        assert_eq!(mean_pool(&h, 2, 2), vec![2.0, 4.0]);
        let n = l2_normalize(&[3.0, 4.0]);
        assert_eq!(n, vec![0.6, 0.8]);
        assert_eq!(l2_normalize(&[0.0, 0.0]), vec![0.0, 0.0]);
        assert!((cosine(&[1.0, 0.0], &[1.0, 1.0]) - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-15);
    }

    /// Per-row mean and variance of `(y − beta) / gamma`, i.e. before the gain and bias.
    fn normalised_moments(y: &[f64], g: &[f64], b: &[f64]) -> Vec<(f64, f64)> {
        y.chunks(g.len())
            .map(|row| {
                let z: Vec<f64> = row.iter().zip(g.iter().zip(b)).map(|(v, (g, b))| (v - b) / g).collect();
                let n = z.len() as f64;
                let m = z.iter().sum::<f64>() / n;
                (m, z.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / n)
            })
            .collect()
    }

    #[test]
    fn bert_tiny_forward_is_finite_and_layer_normed() {
        let w = BertWeights::random(BertConfig::bert_tiny(), 5).unwrap();
        let ids: Vec<u32> = (0..20).map(|i| 5 + i * 97 % 4000).collect();
        let types: Vec<u32> = (0..20).map(|i| u32::from(i >= 10)).collect();
        let y = bert_forward(&w, &ids, Some(&types)).unwrap();
        assert_eq!(y.len(), 20 * 128);
        assert!(y.iter().all(|v| v.is_finite()));
        let last = &w.layers[1];
        for (m, v) in normalised_moments(&y, &last.ln2_g, &last.ln2_b) {
            assert!(m.abs() < 1e-9 && (v - 1.0).abs() < 1e-6, "{m} {v}");
        }
        // Attention is neither uniform nor one-hot on these weights.
        let x = bert_embed(&w, &ids, Some(&types)).unwrap();
        let l = &w.layers[0];
        let q = linear(&x, &l.wq, &l.bq, 128, 128);
        let k = linear(&x, &l.wk, &l.bk, 128, 128);
        let p = attention_probs(&q, &k, 20, 2, 64, false);
        let max = p.iter().copied().fold(0.0, f64::max);
        assert!(max > 0.1 && max < 0.95, "max attention {max}");
        // Type ids change the result; the default is all zeros.
        assert_ne!(y, bert_forward(&w, &ids, None).unwrap());
        assert_eq!(bert_forward(&w, &ids, None).unwrap(), bert_forward(&w, &ids, Some(&[0; 20])).unwrap());
    }

    #[test]
    fn forward_rejects_bad_inputs() {
        let w = BertWeights::random(BertConfig::bert_tiny(), 5).unwrap();
        assert!(matches!(bert_forward(&w, &[], None), Err(ModelError::EmptySequence)));
        assert!(matches!(
            bert_forward(&w, &[2, 4096], None),
            Err(ModelError::IdOutOfRange { id: 4096, pos: 1, .. })
        ));
        assert!(matches!(bert_forward(&w, &[2, 3], Some(&[0, 2])), Err(ModelError::IdOutOfRange { .. })));
        assert!(matches!(bert_forward(&w, &[2, 3], Some(&[0])), Err(ModelError::LengthMismatch { .. })));
        assert!(matches!(
            bert_forward(&w, &vec![5; 513], None),
            Err(ModelError::SequenceTooLong { len: 513, max: 512 })
        ));
        let mut broken = w.clone();
        broken.layers[0].b1.push(0.0);
        assert!(matches!(bert_forward(&broken, &[2, 3], None), Err(ModelError::WeightLength { .. })));
        assert!(bert_layer(&w.layers[0], &w.config, &[0.0; 100]).is_err());
    }

    #[test]
    fn gpt2_is_causal_and_activations_stay_moderate() {
        let mut c = Gpt2Config::gpt2().with_layers(2);
        c.vocab = 1000; // a smaller table keeps the test fast; the layers have GPT-2's shapes
        let w = Gpt2Weights::random(c, 9).unwrap();
        let ids: Vec<u32> = vec![3, 17, 256, 999, 42, 7, 7, 100];
        let y = gpt2_forward(&w, &ids).unwrap();
        assert_eq!(y.len(), 8 * 768);
        let mut changed = ids.clone();
        changed[5] = 500;
        let z = gpt2_forward(&w, &changed).unwrap();
        assert_eq!(y[..5 * 768], z[..5 * 768], "positions before the change must not move");
        assert_ne!(y[5 * 768..6 * 768], z[5 * 768..6 * 768]);
        // The residual stream stays O(1)–O(10) and attention is not degenerate.
        let mut x = gpt2_embed(&w, &ids).unwrap();
        for l in &w.layers {
            let a = layer_norm(&x, &l.ln1_g, &l.ln1_b, c.ln_eps);
            let qkv = linear(&a, &l.w_qkv, &l.b_qkv, 768, 3 * 768);
            let q: Vec<f64> = qkv.chunks(3 * 768).flat_map(|r| r[..768].to_vec()).collect();
            let k: Vec<f64> = qkv.chunks(3 * 768).flat_map(|r| r[768..1536].to_vec()).collect();
            let p = attention_probs(&q, &k, 8, 12, 64, true);
            // Rows 4.. of every head attend to at least 5 positions.
            let maxes: Vec<f64> = p
                .chunks(64)
                .flat_map(|head| head.chunks(8).skip(4).map(|r| r.iter().copied().fold(0.0, f64::max)))
                .collect();
            assert!(maxes.iter().all(|&m| m < 0.99), "one-hot attention");
            x = gpt2_layer(l, &c, &x).unwrap();
            let max = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            assert!(max > 0.5 && max < 20.0, "residual max {max}");
        }
        let logits = gpt2_logits_last(&w, &y).unwrap();
        assert_eq!(logits.len(), 1000);
        let last = &y[7 * 768..];
        let want: f64 = w.wte[42 * 768..43 * 768].iter().zip(last).map(|(a, b)| a * b).sum();
        assert!((logits[42] - want).abs() < 1e-12);
        assert!(matches!(gpt2_logits_last(&w, &[]), Err(ModelError::EmptySequence)));
        assert!(matches!(gpt2_logits_last(&w, &[0.0; 769]), Err(ModelError::LengthMismatch { .. })));
    }
}
