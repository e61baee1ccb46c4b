//! BERT and GPT-2 as engine programs over fixed-point weights (the secure path).
//!
//! The client embeds its tokens from the public tables and secret-shares the embedded
//! sequence, so a program's input is the `seq × hidden` sum of token, position (and, for
//! BERT, token-type) embeddings at scale `f`. Linear weights are at scale `f` and biases at
//! `2f`; the query projection carries the `1/√head_dim` of the attention scores.
//!
//! - BERT (post-LN): embedding LayerNorm, then per layer `x = LN(x + Attn(x))`,
//!   `x = LN(x + MLP(x))`; the output is the mean over tokens (`1 × hidden`).
//! - GPT-2 (pre-LN, causal): per layer `x = x + Attn(LN(x))`, `x = x + MLP(LN(x))`, then
//!   the final LayerNorm; the output is the last token's hidden state (`1 × hidden`), from
//!   which the client computes next-token logits with the public embedding table.

use std::sync::Arc;

use engine::blocks::{self, Attention, Mlp, quantize, quantize_weights};
use engine::{Graph, GraphError, Shape, Weights};

use crate::weights::{BertWeights, Gpt2Weights};

/// Ring width and fixed-point scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixed {
    /// Ring width `n`.
    pub n: u32,
    /// Fractional bits `f`.
    pub f: u32,
}

impl Fixed {
    fn w(&self, v: &[f64]) -> Weights {
        quantize_weights(v, self.f, self.n)
    }

    /// A norm's gain (scale `f`), as ring words.
    fn g(&self, v: &[f64]) -> Arc<[u64]> {
        quantize(v, self.f, self.n)
    }

    fn b(&self, v: &[f64]) -> Arc<[u64]> {
        quantize(v, 2 * self.f, self.n)
    }
}

/// `[q | k | v]` columns of one `in × out` map each, with `q` (and its bias) scaled.
fn fuse_qkv(wq: &[f64], wk: &[f64], wv: &[f64], h: usize, scale: f64) -> Vec<f64> {
    let mut w = vec![0.0; h * 3 * h];
    for i in 0..h {
        for j in 0..h {
            w[i * 3 * h + j] = wq[i * h + j] * scale;
            w[i * 3 * h + h + j] = wk[i * h + j];
            w[i * 3 * h + 2 * h + j] = wv[i * h + j];
        }
    }
    w
}

/// The BERT encoder over `seq` tokens, mean-pooled.
///
/// # Errors
/// [`GraphError`] if the weights do not fit their shapes.
pub fn bert(w: &BertWeights, seq: usize, fx: Fixed) -> Result<Graph, GraphError> {
    let c = &w.config;
    let (h, heads) = (c.hidden, c.heads);
    let scale = 1.0 / (c.head_dim() as f64).sqrt();
    let mut g = Graph::new(fx.n, fx.f, Shape::new(seq, h));
    let mut x = blocks::layer_norm(&mut g, 0, &fx.g(&w.emb_ln_g), &fx.b(&w.emb_ln_b))?;
    for l in &w.layers {
        let bq: Vec<f64> =
            l.bq.iter().map(|v| v * scale).chain(l.bk.iter().copied()).chain(l.bv.iter().copied()).collect();
        let att = Attention {
            w_qkv: fx.w(&fuse_qkv(&l.wq, &l.wk, &l.wv, h, scale)),
            b_qkv: fx.b(&bq),
            w_o: fx.w(&l.wo),
            b_o: fx.b(&l.bo),
            heads,
        };
        let mlp = Mlp {
            w1: fx.w(&l.w1),
            b1: fx.b(&l.b1),
            w2: fx.w(&l.w2),
            b2: fx.b(&l.b2),
            ffn: c.ffn,
            tanh: false,
        };
        let a = blocks::attention(&mut g, x, &att, false)?;
        let s = blocks::add(&mut g, x, a)?;
        x = blocks::layer_norm(&mut g, s, &fx.g(&l.ln1_g), &fx.b(&l.ln1_b))?;
        let m = blocks::mlp(&mut g, x, &mlp)?;
        let s = blocks::add(&mut g, x, m)?;
        x = blocks::layer_norm(&mut g, s, &fx.g(&l.ln2_g), &fx.b(&l.ln2_b))?;
    }
    blocks::mean_pool(&mut g, x)?;
    Ok(g)
}

/// The client's input to [`bert`]: `word + position + token type` (type 0) at scale `f`.
pub fn bert_input(w: &BertWeights, ids: &[u32], fx: Fixed) -> Vec<u64> {
    let h = w.config.hidden;
    let q = |v: f64| ((v * (fx.f as f64).exp2()).round() as i64 as u64) & fss::ring::mask(fx.n);
    let mut x = Vec::with_capacity(ids.len() * h);
    for (i, &id) in ids.iter().enumerate() {
        for j in 0..h {
            let v = q(w.word[id as usize * h + j])
                .wrapping_add(q(w.position[i * h + j]))
                .wrapping_add(q(w.token_type[j]));
            x.push(v & fss::ring::mask(fx.n));
        }
    }
    x
}

/// The GPT-2 decoder over `seq` tokens: the last token's final hidden state.
///
/// # Errors
/// [`GraphError`] if the weights do not fit their shapes.
pub fn gpt2(w: &Gpt2Weights, seq: usize, fx: Fixed) -> Result<Graph, GraphError> {
    let c = &w.config;
    let (h, heads) = (c.hidden, c.heads);
    let scale = 1.0 / (c.head_dim() as f64).sqrt();
    let mut g = Graph::new(fx.n, fx.f, Shape::new(seq, h));
    let mut x = 0;
    for l in &w.layers {
        // The fused q|k|v map with q scaled.
        let mut wqkv = l.w_qkv.clone();
        for row in wqkv.chunks_mut(3 * h) {
            row[..h].iter_mut().for_each(|v| *v *= scale);
        }
        let bqkv: Vec<f64> =
            l.b_qkv.iter().enumerate().map(|(j, &v)| if j < h { v * scale } else { v }).collect();
        let att = Attention {
            w_qkv: fx.w(&wqkv),
            b_qkv: fx.b(&bqkv),
            w_o: fx.w(&l.w_proj),
            b_o: fx.b(&l.b_proj),
            heads,
        };
        let mlp = Mlp {
            w1: fx.w(&l.w_fc),
            b1: fx.b(&l.b_fc),
            w2: fx.w(&l.w_out),
            b2: fx.b(&l.b_out),
            ffn: c.ffn,
            tanh: true,
        };
        let a = blocks::layer_norm(&mut g, x, &fx.g(&l.ln1_g), &fx.b(&l.ln1_b))?;
        let a = blocks::attention(&mut g, a, &att, true)?;
        x = blocks::add(&mut g, x, a)?;
        let m = blocks::layer_norm(&mut g, x, &fx.g(&l.ln2_g), &fx.b(&l.ln2_b))?;
        let m = blocks::mlp(&mut g, m, &mlp)?;
        x = blocks::add(&mut g, x, m)?;
    }
    let last = blocks::row(&mut g, x, seq - 1)?;
    blocks::layer_norm(&mut g, last, &fx.g(&w.lnf_g), &fx.b(&w.lnf_b))?;
    Ok(g)
}

/// The client's input to [`gpt2`]: `wte[id] + wpe[i]` at scale `f`.
pub fn gpt2_input(w: &Gpt2Weights, ids: &[u32], fx: Fixed) -> Vec<u64> {
    let h = w.config.hidden;
    let q = |v: f64| ((v * (fx.f as f64).exp2()).round() as i64 as u64) & fss::ring::mask(fx.n);
    let mut x = Vec::with_capacity(ids.len() * h);
    for (i, &id) in ids.iter().enumerate() {
        for j in 0..h {
            x.push(q(w.wte[id as usize * h + j]).wrapping_add(q(w.wpe[i * h + j])) & fss::ring::mask(fx.n));
        }
    }
    x
}
