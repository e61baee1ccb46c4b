//! Llama-family decoders (SmolLM2's architecture) for token-by-token generation over a
//! secret-shared KV cache: the prefill program over the prompt and one decode program per
//! new token, with their f64 reference.
//!
//! Per layer (pre-norm): `x = x + Attn(RMSNorm(x))`, `x = x + W_down(SiLU(x·W_gate) ⊙
//! (x·W_up))` on `RMSNorm(x)`; then the final RMSNorm of the last position and the LM head
//! (here tied to the embedding), whose output stays at scale `2f`: the client truncates and
//! samples in the clear. Attention is grouped-query (`heads / kv_heads` query heads per key
//! and value head) with rotary position embeddings (Hugging Face's half-split layout, base
//! `rope_theta`); the queries carry `1/√head_dim`.
//!
//! The rotated keys and the values of every layer are the programs' carried values
//! ([`engine::Graph::carry`], slots `2l` and `2l + 1`): the servers keep them masked from one
//! program to the next and never open them; a decode program appends its new row to each.

use std::sync::Arc;

use engine::blocks::{quantize, quantize_weights};
use engine::{Graph, GraphError, Op, Shape, ValueId, Weights};

use crate::error::{ModelError, Result};
use crate::graph::Fixed;
use crate::weights::Gen;

/// A Llama decoder's shapes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Vocabulary.
    pub vocab: usize,
    /// Hidden width.
    pub hidden: usize,
    /// Layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key and value heads (a divisor of `heads`).
    pub kv_heads: usize,
    /// MLP inner width.
    pub ffn: usize,
    /// Rotary embedding base.
    pub rope_theta: f64,
    /// RMSNorm's ε.
    pub eps: f64,
}

impl LlamaConfig {
    /// The built-in `llama-tiny`: 2 layers, hidden 64, 4 query and 2 key/value heads, FFN
    /// 128, vocabulary 512, seeded random weights.
    pub fn llama_tiny() -> LlamaConfig {
        LlamaConfig {
            vocab: 512,
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            ffn: 128,
            rope_theta: 1e4,
            eps: 1e-5,
        }
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    /// Check the shapes fit together.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`].
    pub fn check(&self) -> Result<()> {
        let ok = self.heads > 0
            && self.kv_heads > 0
            && self.hidden.is_multiple_of(self.heads)
            && self.heads.is_multiple_of(self.kv_heads)
            && self.head_dim().is_multiple_of(2)
            && self.vocab > 0
            && self.layers > 0;
        if ok {
            Ok(())
        } else {
            Err(ModelError::InvalidConfig(format!("inconsistent Llama shapes {self:?}")))
        }
    }
}

/// One layer's weights, row-major `in × out`.
#[derive(Clone, Debug)]
pub struct LlamaLayer {
    /// RMSNorm gain before attention.
    pub attn_norm: Vec<f64>,
    /// `hidden × heads·d`.
    pub wq: Vec<f64>,
    /// `hidden × kv_heads·d`.
    pub wk: Vec<f64>,
    /// `hidden × kv_heads·d`.
    pub wv: Vec<f64>,
    /// `heads·d × hidden`.
    pub wo: Vec<f64>,
    /// RMSNorm gain before the MLP.
    pub mlp_norm: Vec<f64>,
    /// `hidden × ffn`.
    pub w_gate: Vec<f64>,
    /// `hidden × ffn`.
    pub w_up: Vec<f64>,
    /// `ffn × hidden`.
    pub w_down: Vec<f64>,
}

/// A Llama decoder's weights (the LM head tied to the embedding).
#[derive(Clone, Debug)]
pub struct LlamaWeights {
    /// Shapes.
    pub config: LlamaConfig,
    /// `vocab × hidden`.
    pub embed: Vec<f64>,
    /// Layers.
    pub layers: Vec<LlamaLayer>,
    /// The final RMSNorm's gain.
    pub final_norm: Vec<f64>,
}

impl LlamaWeights {
    /// Seeded random weights of the given shapes.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] for inconsistent shapes.
    pub fn random(config: LlamaConfig, seed: u64) -> Result<LlamaWeights> {
        config.check()?;
        let (h, d, f) = (config.hidden, config.head_dim(), config.ffn);
        let mut g = Gen::new(seed);
        let embed = g.std(config.vocab * h, 0.5);
        let layers = (0..config.layers)
            .map(|_| LlamaLayer {
                attn_norm: g.ln_gain(h),
                wq: g.linear(h, config.heads * d, 1.0),
                wk: g.linear(h, config.kv_heads * d, 1.0),
                wv: g.linear(h, config.kv_heads * d, 1.0),
                wo: g.linear(config.heads * d, h, 0.5),
                mlp_norm: g.ln_gain(h),
                w_gate: g.linear(h, f, 1.0),
                w_up: g.linear(h, f, 1.0),
                w_down: g.linear(f, h, 0.5),
            })
            .collect();
        let final_norm = g.ln_gain(h);
        Ok(LlamaWeights { config, embed, layers, final_norm })
    }

    /// Keep the first `layers` layers (all when `None`).
    pub fn keep_layers(&mut self, layers: Option<usize>) {
        if let Some(l) = layers {
            self.layers.truncate(l.max(1));
            self.config.layers = self.layers.len();
        }
    }

    /// The embedding row of `id`.
    fn row(&self, id: u32) -> &[f64] {
        let h = self.config.hidden;
        &self.embed[id as usize * h..(id as usize + 1) * h]
    }
}

/// `cos(p·θ_j)` and `sin(p·θ_j)` of Hugging Face's rotary embedding for position `p`, per
/// column of one head (`θ_j = base^{−2j/d}` for `j < d/2`, repeated for the second half).
fn rope_angles(p: usize, d: usize, base: f64) -> (Vec<f64>, Vec<f64>) {
    let half = d / 2;
    let (mut c, mut s) = (vec![0.0; d], vec![0.0; d]);
    for j in 0..d {
        let theta = base.powf(-2.0 * (j % half) as f64 / d as f64);
        let a = p as f64 * theta;
        c[j] = a.cos();
        s[j] = a.sin();
    }
    (c, s)
}

/// Rotate every head of `x` (`rows × heads·d`, row `i` at position `positions[i]`).
fn rope_f64(x: &mut [f64], positions: &[usize], heads: usize, d: usize, base: f64) {
    let half = d / 2;
    for (i, &p) in positions.iter().enumerate() {
        let (c, s) = rope_angles(p, d, base);
        for hd in 0..heads {
            let v = &mut x[(i * heads + hd) * d..(i * heads + hd + 1) * d];
            let old = v.to_vec();
            for j in 0..d {
                let rot = if j < half { -old[j + half] } else { old[j - half] };
                v[j] = old[j] * c[j] + rot * s[j];
            }
        }
    }
}

/// RMSNorm of each row of `x`.
pub fn rms_norm(x: &[f64], gamma: &[f64], eps: f64) -> Vec<f64> {
    let cols = gamma.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / cols as f64;
        let r = 1.0 / (ms + eps).sqrt();
        out.extend(row.iter().zip(gamma).map(|(v, g)| v * r * g));
    }
    out
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// The f64 model's state across a generation: each layer's rotated keys and values.
#[derive(Clone, Debug, Default)]
pub struct FloatCache {
    /// Per layer, `(keys, values)`, `positions × kv_heads·d` each.
    pub layers: Vec<(Vec<f64>, Vec<f64>)>,
    /// Positions so far.
    pub len: usize,
}

/// The f64 forward pass over `ids` at positions `cache.len ..`, appending to the cache; the
/// logits of the last position.
pub fn forward_f64(w: &LlamaWeights, ids: &[u32], cache: &mut FloatCache) -> Vec<f64> {
    use crate::float::{matmul, softmax};
    let c = &w.config;
    let (h, d, hq, hkv) = (c.hidden, c.head_dim(), c.heads, c.kv_heads);
    let group = hq / hkv;
    let rows = ids.len();
    let positions: Vec<usize> = (cache.len..cache.len + rows).collect();
    let mut x: Vec<f64> = ids.iter().flat_map(|&t| w.row(t).to_vec()).collect();
    if cache.layers.is_empty() {
        cache.layers = vec![(vec![], vec![]); w.layers.len()];
    }
    for (l, layer) in w.layers.iter().enumerate() {
        let a = rms_norm(&x, &layer.attn_norm, c.eps);
        let mut q = matmul(&a, &layer.wq, rows, h, hq * d);
        let mut k = matmul(&a, &layer.wk, rows, h, hkv * d);
        let v = matmul(&a, &layer.wv, rows, h, hkv * d);
        rope_f64(&mut q, &positions, hq, d, c.rope_theta);
        rope_f64(&mut k, &positions, hkv, d, c.rope_theta);
        let (kc, vc) = &mut cache.layers[l];
        kc.extend_from_slice(&k);
        vc.extend_from_slice(&v);
        let mut ctx = vec![0.0; rows * hq * d];
        let scale = 1.0 / (d as f64).sqrt();
        for hd in 0..hq {
            let kv = hd / group;
            for i in 0..rows {
                let seen = positions[i] + 1;
                let mut s: Vec<f64> = (0..seen)
                    .map(|t| {
                        (0..d).map(|j| q[(i * hq + hd) * d + j] * kc[(t * hkv + kv) * d + j]).sum::<f64>()
                            * scale
                    })
                    .collect();
                softmax(&mut s);
                for (t, p) in s.iter().enumerate() {
                    for j in 0..d {
                        ctx[(i * hq + hd) * d + j] += p * vc[(t * hkv + kv) * d + j];
                    }
                }
            }
        }
        let o = matmul(&ctx, &layer.wo, rows, hq * d, h);
        x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
        let m = rms_norm(&x, &layer.mlp_norm, c.eps);
        let gate = matmul(&m, &layer.w_gate, rows, h, c.ffn);
        let up = matmul(&m, &layer.w_up, rows, h, c.ffn);
        let act: Vec<f64> = gate.iter().zip(&up).map(|(g, u)| silu(*g) * u).collect();
        let dn = matmul(&act, &layer.w_down, rows, c.ffn, h);
        x.iter_mut().zip(&dn).for_each(|(a, b)| *a += b);
    }
    cache.len += rows;
    let last = rms_norm(&x[(rows - 1) * h..], &w.final_norm, c.eps);
    (0..c.vocab).map(|t| w.row(t as u32).iter().zip(&last).map(|(a, b)| a * b).sum()).collect()
}

/// Columns `from .. from + width` of `x`.
fn columns(
    g: &mut Graph,
    x: ValueId,
    from: usize,
    width: usize,
    label: &'static str,
) -> std::result::Result<ValueId, GraphError> {
    let s = g.shape(x);
    let index: Vec<u32> =
        (0..s.rows).flat_map(|i| (from..from + width).map(move |j| (i * s.cols + j) as u32)).collect();
    g.push(Op::Gather { x, index: index.into(), shape: Shape::new(s.rows, width) }, label)
}

/// How a client picks the next token from its logits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Softmax temperature; 0 is greedy (the argmax).
    pub temperature: f64,
    /// Nucleus mass: sample among the most likely tokens whose probabilities sum to it.
    pub top_p: f64,
}

impl Sampling {
    /// The argmax.
    pub const GREEDY: Sampling = Sampling { temperature: 0.0, top_p: 1.0 };

    /// Whether the parameters make sense (`temperature ≥ 0`, `0 < top_p ≤ 1`).
    pub fn is_valid(&self) -> bool {
        self.temperature >= 0.0 && self.top_p > 0.0 && self.top_p <= 1.0
    }

    /// The next token: the argmax when greedy, else a draw from `rng` among the nucleus of
    /// the tempered softmax.
    pub fn pick(&self, logits: &[f64], rng: &mut impl fss::rng::Rng) -> u32 {
        if self.temperature <= 0.0 || logits.is_empty() {
            return argmax(logits);
        }
        let top = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut p: Vec<(usize, f64)> =
            logits.iter().enumerate().map(|(i, &l)| (i, ((l - top) / self.temperature).exp())).collect();
        let z: f64 = p.iter().map(|x| x.1).sum();
        p.iter_mut().for_each(|x| x.1 /= z);
        p.sort_by(|a, b| b.1.total_cmp(&a.1));
        let (mut mass, mut keep) = (0.0, 0);
        for (k, x) in p.iter().enumerate() {
            mass += x.1;
            keep = k + 1;
            if mass >= self.top_p {
                break;
            }
        }
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * mass;
        let mut acc = 0.0;
        for x in &p[..keep] {
            acc += x.1;
            if u < acc {
                return x.0 as u32;
            }
        }
        p[keep - 1].0 as u32
    }
}

/// The most likely token (the first of equals).
pub fn argmax(logits: &[f64]) -> u32 {
    logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
        .map_or(0, |(i, _)| i as u32)
}

/// The f64 model's own greedy continuation of `prompt`: up to `new_tokens` tokens, stopping
/// after `eos`.
pub fn greedy_f64(w: &LlamaWeights, prompt: &[u32], new_tokens: usize, eos: Option<u32>) -> Vec<u32> {
    let mut cache = FloatCache::default();
    let mut out = vec![];
    let mut next = prompt.to_vec();
    for _ in 0..new_tokens {
        let logits = forward_f64(w, &next, &mut cache);
        let t = argmax(&logits);
        out.push(t);
        if Some(t) == eos {
            break;
        }
        next = vec![t];
    }
    out
}

/// The fixed-point weights of a Llama model, quantized once.
#[derive(Clone, Debug)]
pub struct LlamaFixed {
    /// Shapes.
    pub config: LlamaConfig,
    /// Ring and scale.
    pub fx: Fixed,
    layers: Vec<FixedLayer>,
    final_norm: Arc<[u64]>,
    /// The LM head, `hidden × vocab` (the embedding transposed).
    head: Weights,
    embed: Weights,
}

/// One layer's fixed-point weights: the query, key and value projections side by side
/// (`hidden × (heads + 2·kv_heads)·d`), and the gate and up projections side by side
/// (`hidden × 2·ffn`), so that each pair of products that read the same input is one linear
/// map and one truncation (one round) instead of several.
#[derive(Clone, Debug)]
struct FixedLayer {
    attn_norm: Arc<[u64]>,
    w_qkv: Weights,
    wo: Weights,
    mlp_norm: Arc<[u64]>,
    w_gate_up: Weights,
    w_down: Weights,
}

/// The columns of row-major matrices of `rows` rows placed side by side.
fn side_by_side(parts: &[&[f64]], rows: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for r in 0..rows {
        for p in parts {
            let c = p.len() / rows;
            out.extend_from_slice(&p[r * c..(r + 1) * c]);
        }
    }
    out
}

impl LlamaFixed {
    /// Quantize `w` at `fx` (the queries carry `1/√head_dim`).
    pub fn new(w: &LlamaWeights, fx: Fixed) -> LlamaFixed {
        let c = w.config;
        let q = |v: &[f64]| quantize(v, fx.f, fx.n);
        let qw = |v: &[f64]| quantize_weights(v, fx.f, fx.n);
        let scale = 1.0 / (c.head_dim() as f64).sqrt();
        let layers = w
            .layers
            .iter()
            .map(|l| {
                let wq: Vec<f64> = l.wq.iter().map(|v| v * scale).collect();
                FixedLayer {
                    attn_norm: q(&l.attn_norm),
                    w_qkv: qw(&side_by_side(&[&wq, &l.wk, &l.wv], c.hidden)),
                    wo: qw(&l.wo),
                    mlp_norm: q(&l.mlp_norm),
                    w_gate_up: qw(&side_by_side(&[&l.w_gate, &l.w_up], c.hidden)),
                    w_down: qw(&l.w_down),
                }
            })
            .collect();
        // The LM head is the embedding transposed (`hidden × vocab`), quantized once.
        let embed = qw(&w.embed);
        LlamaFixed {
            config: c,
            fx,
            layers,
            final_norm: q(&w.final_norm),
            head: embed.transposed(c.vocab, c.hidden),
            embed,
        }
    }

    /// The client's input for `ids`: their embedding rows at scale `f`.
    pub fn input(&self, ids: &[u32]) -> Vec<u64> {
        let h = self.config.hidden;
        ids.iter()
            .flat_map(|&t| self.embed.ring_range(t as usize * h..(t as usize + 1) * h, self.fx.n))
            .collect()
    }

    /// The program for `rows` new tokens at positions `past ..`: the prefill when `past` is
    /// 0 (causal over its rows), a decode step when `rows` is 1 and `past` positions are
    /// cached. Its output is the last position's logits at scale `2f`; it carries every
    /// layer's keys and values over `past + rows` positions.
    ///
    /// # Errors
    /// [`GraphError`] if the shapes do not fit, or for several rows after a cache.
    pub fn program(&self, past: usize, rows: usize) -> std::result::Result<Graph, GraphError> {
        let c = &self.config;
        let (h, d, hq, hkv) = (c.hidden, c.head_dim(), c.heads, c.kv_heads);
        if rows == 0 || (past > 0 && rows != 1) {
            return Err(GraphError { node: 0, msg: format!("{rows} rows after {past} cached positions") });
        }
        let (n, f) = (self.fx.n, self.fx.f);
        let mut g = Graph::new(n, f, Shape::new(rows, h));
        let positions: Vec<usize> = (past..past + rows).collect();
        let lin = |g: &mut Graph,
                   x: ValueId,
                   w: &Weights,
                   out: usize|
         -> std::result::Result<ValueId, GraphError> {
            let y = g.push(Op::Linear { x, w: w.clone(), b: None, out }, "linear")?;
            g.push(Op::Trunc { x: y, shift: f }, "truncation")
        };
        // A block's output is added to the residual stream where the next RMSNorm reads it,
        // in one seam (`Op::ResidualRmsNorm`: FuseFSS defers the truncation into the norm).
        let seam = |g: &mut Graph,
                    x: ValueId,
                    block: Option<ValueId>,
                    gamma: &Arc<[u64]>|
         -> std::result::Result<(ValueId, ValueId), GraphError> {
            let Some(y) = block else {
                return Ok((g.push(Op::RmsNorm { x, gamma: gamma.clone() }, "rmsnorm")?, x));
            };
            let both = g.push(Op::ResidualRmsNorm { h: x, y, shift: f, gamma: gamma.clone() }, "rmsnorm")?;
            let normed = g.push(Op::Rows { x: both, start: 0, count: rows }, "rmsnorm")?;
            Ok((normed, g.push(Op::Rows { x: both, start: rows, count: rows }, "residual")?))
        };
        let mut x = 0;
        // The last block's output, not yet truncated and added to `x`.
        let mut block = None;
        let mut carry = vec![];
        for (l, layer) in self.layers.iter().enumerate() {
            let (a, x1) = seam(&mut g, x, block, &layer.attn_norm)?;
            x = x1;
            let qkv = lin(&mut g, a, &layer.w_qkv, (hq + 2 * hkv) * d)?;
            // The queries and keys rotated together (one truncation), the values as they are.
            let qk = columns(&mut g, qkv, 0, (hq + hkv) * d, "rope")?;
            let qk = self.rope(&mut g, qk, &positions, hq + hkv)?;
            let q = columns(&mut g, qk, 0, hq * d, "attention")?;
            let mut k = columns(&mut g, qk, hq * d, hkv * d, "attention")?;
            let mut v = columns(&mut g, qkv, (hq + hkv) * d, hkv * d, "attention")?;
            if past > 0 {
                let shape = Shape::new(past, hkv * d);
                let kc = g.push(Op::Carried { slot: 2 * l, shape }, "kv cache")?;
                let vc = g.push(Op::Carried { slot: 2 * l + 1, shape }, "kv cache")?;
                k = g.push(Op::Concat { a: kc, b: k }, "kv cache")?;
                v = g.push(Op::Concat { a: vc, b: v }, "kv cache")?;
            }
            carry.extend([k, v]);
            let att = self.attention(&mut g, q, k, v, rows, past + rows)?;
            let o = g.push(Op::Linear { x: att, w: layer.wo.clone(), b: None, out: h }, "linear")?;
            let (m, x1) = seam(&mut g, x, Some(o), &layer.mlp_norm)?;
            x = x1;
            let gate_up = lin(&mut g, m, &layer.w_gate_up, 2 * c.ffn)?;
            let gate = columns(&mut g, gate_up, 0, c.ffn, "mlp")?;
            let up = columns(&mut g, gate_up, c.ffn, c.ffn, "mlp")?;
            let act = g.push(Op::Silu { x: gate }, "silu")?;
            let prod = g.push(Op::Mul { a: act, b: up }, "mlp")?;
            let prod = g.push(Op::Trunc { x: prod, shift: f }, "truncation")?;
            block = Some(g.push(Op::Linear { x: prod, w: layer.w_down.clone(), b: None, out: h }, "linear")?);
        }
        // The final norm reads the last position only: a seam when there is one row, else
        // the sum first.
        let y = match block {
            Some(dn) if rows == 1 => seam(&mut g, x, Some(dn), &self.final_norm)?.0,
            block => {
                if let Some(dn) = block {
                    let dn = g.push(Op::Trunc { x: dn, shift: f }, "truncation")?;
                    x = g.push(Op::Add { a: x, b: dn }, "residual")?;
                }
                let last = engine::blocks::row(&mut g, x, rows - 1)?;
                g.push(Op::RmsNorm { x: last, gamma: self.final_norm.clone() }, "rmsnorm")?
            }
        };
        g.push(Op::Linear { x: y, w: self.head.clone(), b: None, out: c.vocab }, "lm head")?;
        g.carry = carry;
        Ok(g)
    }

    /// Step `t` of a generation session after a prompt of `prompt_len` tokens: the prefill
    /// (`t = 0`), whose logits pick the first new token, then one decode step per further
    /// token (step `t` reads the token picked at step `t − 1`, at position
    /// `prompt_len + t − 1`). A session of `G` new tokens has steps `0 .. G`.
    ///
    /// # Errors
    /// As [`LlamaFixed::program`].
    pub fn step(&self, prompt_len: usize, t: usize) -> std::result::Result<Graph, GraphError> {
        if t == 0 { self.program(0, prompt_len) } else { self.program(prompt_len + t - 1, 1) }
    }

    /// Rotary embedding of `x` (`rows × heads·d` at scale `f`): `x ⊙ cos + swap(x) ⊙ ±sin`,
    /// truncated back to `f` (the rotation is linear, so it is local but for the truncation).
    fn rope(
        &self,
        g: &mut Graph,
        x: ValueId,
        positions: &[usize],
        heads: usize,
    ) -> std::result::Result<ValueId, GraphError> {
        let d = self.config.head_dim();
        let half = d / 2;
        let w = heads * d;
        let (mut cs, mut sn) =
            (Vec::with_capacity(positions.len() * w), Vec::with_capacity(positions.len() * w));
        let mut swap = Vec::with_capacity(positions.len() * w);
        for (i, &p) in positions.iter().enumerate() {
            let (c, s) = rope_angles(p, d, self.config.rope_theta);
            for hd in 0..heads {
                for j in 0..d {
                    cs.push(c[j]);
                    sn.push(if j < half { -s[j] } else { s[j] });
                    let src = if j < half { j + half } else { j - half };
                    swap.push((i * w + hd * d + src) as u32);
                }
            }
        }
        let (n, f) = (self.fx.n, self.fx.f);
        let shape = g.shape(x);
        let a = g.push(Op::MulPublic { x, c: quantize(&cs, f, n) }, "rope")?;
        let sw = g.push(Op::Gather { x, index: swap.into(), shape }, "rope")?;
        let b = g.push(Op::MulPublic { x: sw, c: quantize(&sn, f, n) }, "rope")?;
        let r = g.push(Op::Add { a, b }, "rope")?;
        g.push(Op::Trunc { x: r, shift: f }, "truncation")
    }

    /// Grouped-query attention of `rows` queries over `len` keys (causal when they are the
    /// same positions, `rows == len`).
    fn attention(
        &self,
        g: &mut Graph,
        q: ValueId,
        k: ValueId,
        v: ValueId,
        rows: usize,
        len: usize,
    ) -> std::result::Result<ValueId, GraphError> {
        let c = &self.config;
        let (d, hq, hkv) = (c.head_dim(), c.heads, c.kv_heads);
        let group = hq / hkv;
        let f = self.fx.f;
        let qi: Vec<u32> = (0..hq)
            .flat_map(|hd| (0..rows).flat_map(move |i| (0..d).map(move |j| (i * hq * d + hd * d + j) as u32)))
            .collect();
        // One product per key/value head: the `group` query heads that read it are stacked
        // (query head `hd` is in group `hd / group`, so the stacked rows are in head order),
        // and each key and value head is dealt once, not once per query head.
        let kt: Vec<u32> = (0..hkv)
            .flat_map(|kv| (0..d).flat_map(move |j| (0..len).map(move |t| (t * hkv * d + kv * d + j) as u32)))
            .collect();
        let vi: Vec<u32> = (0..hkv)
            .flat_map(|kv| (0..len).flat_map(move |t| (0..d).map(move |j| (t * hkv * d + kv * d + j) as u32)))
            .collect();
        let q =
            g.push(Op::Gather { x: q, index: qi.into(), shape: Shape::new(hq * rows, d) }, "attention")?;
        let kt =
            g.push(Op::Gather { x: k, index: kt.into(), shape: Shape::new(hkv * d, len) }, "attention")?;
        let v =
            g.push(Op::Gather { x: v, index: vi.into(), shape: Shape::new(hkv * len, d) }, "attention")?;
        let s = g.push(Op::MatMul { a: q, b: kt, count: hkv, m: group * rows, k: d, n: len }, "attention")?;
        let s = g.push(Op::Trunc { x: s, shift: f }, "truncation")?;
        let p = g.push(Op::Softmax { x: s, causal: rows == len && rows > 1 }, "softmax")?;
        let ctx =
            g.push(Op::MatMul { a: p, b: v, count: hkv, m: group * rows, k: len, n: d }, "attention")?;
        let ctx = g.push(Op::Trunc { x: ctx, shift: f }, "truncation")?;
        let merged: Vec<u32> = (0..rows)
            .flat_map(|i| (0..hq).flat_map(move |hd| (0..d).map(move |j| ((hd * rows + i) * d + j) as u32)))
            .collect();
        g.push(Op::Gather { x: ctx, index: merged.into(), shape: Shape::new(rows, hq * d) }, "attention")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The LM head is the quantized embedding, transposed.
    #[test]
    fn the_head_is_the_embedding_transposed() {
        let w = LlamaWeights::random(LlamaConfig::llama_tiny(), 1).unwrap();
        let fx = Fixed { n: 50, f: 12 };
        let m = LlamaFixed::new(&w, fx);
        let (h, vocab) = (w.config.hidden, w.config.vocab);
        let embed = quantize(&w.embed, fx.f, fx.n);
        let head = m.head.ring_words(fx.n);
        assert_eq!(head.len(), h * vocab);
        for t in 0..vocab {
            for j in 0..h {
                assert_eq!(head[j * vocab + t], embed[t * h + j]);
            }
        }
        assert_eq!(m.embed.ring_words(fx.n), &embed[..]);
    }

    #[test]
    fn decoding_with_the_cache_equals_recomputing_the_prefix() {
        let w = LlamaWeights::random(LlamaConfig::llama_tiny(), 1).unwrap();
        let ids = [5u32, 17, 300, 2];
        let mut full = FloatCache::default();
        let all = forward_f64(&w, &ids, &mut full);
        let mut c = FloatCache::default();
        forward_f64(&w, &ids[..2], &mut c);
        forward_f64(&w, &ids[2..3], &mut c);
        let step = forward_f64(&w, &ids[3..], &mut c);
        let err = all.iter().zip(&step).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(err < 1e-9, "{err}");
        assert_eq!(c.len, 4);
    }

    #[test]
    fn programs_carry_each_layers_keys_and_values() {
        let w = LlamaWeights::random(LlamaConfig::llama_tiny(), 1).unwrap();
        let fx = LlamaFixed::new(&w, Fixed { n: 50, f: 12 });
        let p = fx.program(0, 3).unwrap();
        assert_eq!(p.carry.len(), 4);
        assert_eq!(p.shape(p.output), Shape::new(1, 512));
        assert_eq!(p.shape(p.carry[0]), Shape::new(3, 32));
        let d = fx.program(3, 1).unwrap();
        assert_eq!(d.carried_in(), vec![Some(Shape::new(3, 32)); 4]);
        assert_eq!(d.shape(d.carry[3]), Shape::new(4, 32));
        assert!(fx.program(3, 2).is_err());
    }
}
