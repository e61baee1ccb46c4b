//! Transformer building blocks as graph fragments: multi-head attention, the MLP, layer
//! normalisation and mean pooling, over fixed-point weights.

use std::sync::Arc;

use fss::ring::mask;

use crate::graph::{Graph, GraphError, Op, Shape, ValueId};
use crate::weights::Weights;

/// Reals to ring elements at scale `2^scale`, rounded to nearest.
pub fn quantize(v: &[f64], scale: u32, n: u32) -> Arc<[u64]> {
    let s = (scale as f64).exp2();
    v.iter().map(|&x| ((x * s).round() as i64 as u64) & mask(n)).collect()
}

/// Weights quantized at scale `2^scale` in `Z_{2^n}`, held in the narrowest type
/// ([`Weights::from_ring`]).
///
/// # Panics
/// If `n` is not in `1..=64`.
pub fn quantize_weights(v: &[f64], scale: u32, n: u32) -> Weights {
    // As `Weights::from_ring(&quantize(v, scale, n), n)`, without the ring words in between.
    let (s, ring) = ((scale as f64).exp2(), crate::weights::ring_of(n));
    Weights::from_signed(n, v.len(), |i| ring.to_signed((v[i] * s).round() as i64 as u64))
}

/// A ring element at scale `2^scale` as a real (two's complement).
pub fn dequantize(v: u64, scale: u32, n: u32) -> f64 {
    let x = v & mask(n);
    let s = if n < 64 && x >> (n - 1) == 1 { x as i64 - (1i64 << n) } else { x as i64 };
    s as f64 / (scale as f64).exp2()
}

/// Attention weights in fixed point: `w_qkv` is `hidden × 3·hidden` (columns `q | k | v`,
/// the query part already divided by `√head_dim`) at scale `f`, biases at scale `2f`.
#[derive(Clone, Debug)]
pub struct Attention {
    /// Query, key and value projections.
    pub w_qkv: Weights,
    /// Their biases.
    pub b_qkv: Arc<[u64]>,
    /// Output projection, `hidden × hidden`.
    pub w_o: Weights,
    /// Its bias.
    pub b_o: Arc<[u64]>,
    /// Heads.
    pub heads: usize,
}

/// MLP weights in fixed point: `hidden × ffn` then `ffn × hidden`.
#[derive(Clone, Debug)]
pub struct Mlp {
    /// First projection.
    pub w1: Weights,
    /// Its bias.
    pub b1: Arc<[u64]>,
    /// Second projection.
    pub w2: Weights,
    /// Its bias.
    pub b2: Arc<[u64]>,
    /// Inner width.
    pub ffn: usize,
    /// GPT-2's tanh GeLU instead of the erf form.
    pub tanh: bool,
}

/// `x·W + b` at scale `2f`, truncated back to `f`.
pub fn linear(
    g: &mut Graph,
    x: ValueId,
    w: &Weights,
    b: &Arc<[u64]>,
    out: usize,
) -> Result<ValueId, GraphError> {
    let y = g.push(Op::Linear { x, w: w.clone(), b: Some(b.clone()), out }, "linear")?;
    g.push(Op::Trunc { x: y, shift: g.f }, "truncation")
}

/// Multi-head self-attention of `x` (`seq × hidden`), causal or not.
pub fn attention(g: &mut Graph, x: ValueId, a: &Attention, causal: bool) -> Result<ValueId, GraphError> {
    let Shape { rows: s, cols: h } = g.shape(x);
    let (heads, f) = (a.heads, g.f);
    let dh = h / heads;
    let qkv = linear(g, x, &a.w_qkv, &a.b_qkv, 3 * h)?;
    // Per head, stacked: Q (heads·s × dh), Kᵀ (heads·dh × s), V (heads·s × dh).
    let at = |i: usize, c: usize| (i * 3 * h + c) as u32;
    let q: Vec<u32> = (0..heads)
        .flat_map(|hd| (0..s).flat_map(move |i| (0..dh).map(move |j| at(i, hd * dh + j))))
        .collect();
    let kt: Vec<u32> = (0..heads)
        .flat_map(|hd| (0..dh).flat_map(move |j| (0..s).map(move |i| at(i, h + hd * dh + j))))
        .collect();
    let v: Vec<u32> = (0..heads)
        .flat_map(|hd| (0..s).flat_map(move |i| (0..dh).map(move |j| at(i, 2 * h + hd * dh + j))))
        .collect();
    let q = g.push(Op::Gather { x: qkv, index: q.into(), shape: Shape::new(heads * s, dh) }, "attention")?;
    let kt =
        g.push(Op::Gather { x: qkv, index: kt.into(), shape: Shape::new(heads * dh, s) }, "attention")?;
    let v = g.push(Op::Gather { x: qkv, index: v.into(), shape: Shape::new(heads * s, dh) }, "attention")?;
    let scores = g.push(Op::MatMul { a: q, b: kt, count: heads, m: s, k: dh, n: s }, "attention")?;
    let scores = g.push(Op::Trunc { x: scores, shift: f }, "truncation")?;
    let p = g.push(Op::Softmax { x: scores, causal }, "softmax")?;
    let ctx = g.push(Op::MatMul { a: p, b: v, count: heads, m: s, k: s, n: dh }, "attention")?;
    let ctx = g.push(Op::Trunc { x: ctx, shift: f }, "truncation")?;
    let merged: Vec<u32> = (0..s)
        .flat_map(|i| (0..heads).flat_map(move |hd| (0..dh).map(move |j| ((hd * s + i) * dh + j) as u32)))
        .collect();
    let merged = g.push(Op::Gather { x: ctx, index: merged.into(), shape: Shape::new(s, h) }, "attention")?;
    linear(g, merged, &a.w_o, &a.b_o, h)
}

/// The MLP: `GeLU(x·W1 + b1)·W2 + b2`, each product truncated.
pub fn mlp(g: &mut Graph, x: ValueId, m: &Mlp) -> Result<ValueId, GraphError> {
    let h = g.shape(x).cols;
    let u = linear(g, x, &m.w1, &m.b1, m.ffn)?;
    let u = g.push(Op::Gelu { x: u, tanh: m.tanh }, "gelu")?;
    linear(g, u, &m.w2, &m.b2, h)
}

/// LayerNorm with gain (scale `f`) and bias (scale `2f`).
pub fn layer_norm(
    g: &mut Graph,
    x: ValueId,
    gamma: &Arc<[u64]>,
    beta: &Arc<[u64]>,
) -> Result<ValueId, GraphError> {
    g.push(Op::LayerNorm { x, gamma: gamma.clone(), beta: beta.clone() }, "layernorm")
}

/// `a + b`.
pub fn add(g: &mut Graph, a: ValueId, b: ValueId) -> Result<ValueId, GraphError> {
    g.push(Op::Add { a, b }, "residual")
}

/// The mean over rows (`1 × cols`): a row sum, then an exact division by a power of two,
/// or a product with `⌊2^f / rows⌉` and a truncation.
pub fn mean_pool(g: &mut Graph, x: ValueId) -> Result<ValueId, GraphError> {
    let rows = g.shape(x).rows;
    let s = g.push(Op::SumRows { x }, "pooling")?;
    if rows == 1 {
        return Ok(s);
    }
    if rows.is_power_of_two() {
        return g.push(Op::Trunc { x: s, shift: rows.trailing_zeros() }, "pooling");
    }
    let c = (((1u64 << g.f) as f64) / rows as f64).round() as u64;
    let s = g.push(Op::Scale { x: s, c }, "pooling")?;
    g.push(Op::Trunc { x: s, shift: g.f }, "pooling")
}

/// Row `i` of `x` (`1 × cols`).
pub fn row(g: &mut Graph, x: ValueId, i: usize) -> Result<ValueId, GraphError> {
    let c = g.shape(x).cols;
    let index: Vec<u32> = (0..c).map(|j| (i * c + j) as u32).collect();
    g.push(Op::Gather { x, index: index.into(), shape: Shape::new(1, c) }, "pooling")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weights quantized straight into their narrow type equal those read back from the
    /// ring words, in every type and ring (values past the ring's half wrap alike).
    #[test]
    fn quantized_weights_are_the_ring_words_narrowed() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        for (range, n) in [(7.9, 50), (8.1, 50), (1e6, 50), (1e12, 50), (3.0, 14), (1e14, 40), (1.0, 64)] {
            let v: Vec<f64> = (0..999).map(|_| next() * 2.0 * range).chain([-range, range, 0.0]).collect();
            let want = Weights::from_ring(&quantize(&v, 12, n), n);
            let got = quantize_weights(&v, 12, n);
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "range {range}, n {n}");
            assert_eq!(got.ring_words(n), want.ring_words(n), "range {range}, n {n}");
        }
    }
}
