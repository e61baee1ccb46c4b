//! Float weights of BERT and GPT-2, in `f64`, and seeded random weights.
//!
//! Every linear map is stored row-major as `in × out`, so a row vector maps as `y = x·W + b`.
//! Loading from safetensors is in [`crate::load`].
//!
//! # Random weights
//!
//! [`BertWeights::random`] and [`Gpt2Weights::random`] draw every value from a uniform
//! distribution, so that activations stay O(1)–O(10) through all layers and attention rows are
//! neither uniform nor one-hot:
//!
//! | tensor | distribution |
//! |---|---|
//! | linear weight with fan-in `k` (Q, K, V, FFN in) | uniform, mean 0, std `1/√k` |
//! | residual-branch output projections (attention out, FFN out) | uniform, mean 0, std `0.5/√k` |
//! | biases | uniform on `[−0.02, 0.02]` |
//! | LayerNorm gains | uniform on `[0.9, 1.1]` |
//! | LayerNorm biases | uniform on `[−0.05, 0.05]` |
//! | word / token embedding | uniform, mean 0, std 0.5 |
//! | position and token-type embeddings | uniform, mean 0, std 0.25 |
//!
//! With LayerNorm'd inputs of unit variance, queries and keys have entries of variance ≈ 1 and
//! the scaled scores `q·k/√d` have standard deviation ≈ 1. Each tensor has its own ChaCha8
//! stream (the seed picks the key, the tensor's index the stream, the element's index the word
//! position), so the values do not depend on the thread count.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use rayon::prelude::*;

use crate::config::{BertConfig, Gpt2Config};
use crate::error::{ModelError, Result};

/// One BERT encoder layer (post-LN): `x = LN1(x + Attn(x)·Wo + bo)`, then
/// `x = LN2(x + GeLU(x·W1 + b1)·W2 + b2)` with the erf GeLU.
#[derive(Debug, Clone, PartialEq)]
pub struct BertLayer {
    /// Query weight, `hidden × hidden`.
    pub wq: Vec<f64>,
    /// Query bias, `hidden`.
    pub bq: Vec<f64>,
    /// Key weight, `hidden × hidden`.
    pub wk: Vec<f64>,
    /// Key bias, `hidden`.
    pub bk: Vec<f64>,
    /// Value weight, `hidden × hidden`.
    pub wv: Vec<f64>,
    /// Value bias, `hidden`.
    pub bv: Vec<f64>,
    /// Attention output weight, `hidden × hidden`.
    pub wo: Vec<f64>,
    /// Attention output bias, `hidden`.
    pub bo: Vec<f64>,
    /// Gain of the LayerNorm after attention, `hidden`.
    pub ln1_g: Vec<f64>,
    /// Bias of the LayerNorm after attention, `hidden`.
    pub ln1_b: Vec<f64>,
    /// FFN input weight, `hidden × ffn`.
    pub w1: Vec<f64>,
    /// FFN input bias, `ffn`.
    pub b1: Vec<f64>,
    /// FFN output weight, `ffn × hidden`.
    pub w2: Vec<f64>,
    /// FFN output bias, `hidden`.
    pub b2: Vec<f64>,
    /// Gain of the LayerNorm after the FFN, `hidden`.
    pub ln2_g: Vec<f64>,
    /// Bias of the LayerNorm after the FFN, `hidden`.
    pub ln2_b: Vec<f64>,
}

/// A BERT encoder's weights (no pooler).
#[derive(Debug, Clone, PartialEq)]
pub struct BertWeights {
    /// The architecture.
    pub config: BertConfig,
    /// Word embedding, `vocab × hidden`.
    pub word: Vec<f64>,
    /// Position embedding, `max_positions × hidden`.
    pub position: Vec<f64>,
    /// Token-type embedding, `type_vocab × hidden`.
    pub token_type: Vec<f64>,
    /// Gain of the embedding LayerNorm, `hidden`.
    pub emb_ln_g: Vec<f64>,
    /// Bias of the embedding LayerNorm, `hidden`.
    pub emb_ln_b: Vec<f64>,
    /// The encoder layers, `config.layers` of them.
    pub layers: Vec<BertLayer>,
}

/// One GPT-2 decoder layer (pre-LN): `x += CausalAttn(LN1(x))·Wproj + bproj`, then
/// `x += GeLU_tanh(LN2(x)·Wfc + bfc)·Wout + bout`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Layer {
    /// Gain of the LayerNorm before attention, `hidden`.
    pub ln1_g: Vec<f64>,
    /// Bias of the LayerNorm before attention, `hidden`.
    pub ln1_b: Vec<f64>,
    /// Fused query, key and value weight, `hidden × 3·hidden`, columns `q | k | v`.
    pub w_qkv: Vec<f64>,
    /// Fused query, key and value bias, `3·hidden`.
    pub b_qkv: Vec<f64>,
    /// Attention output weight, `hidden × hidden`.
    pub w_proj: Vec<f64>,
    /// Attention output bias, `hidden`.
    pub b_proj: Vec<f64>,
    /// Gain of the LayerNorm before the MLP, `hidden`.
    pub ln2_g: Vec<f64>,
    /// Bias of the LayerNorm before the MLP, `hidden`.
    pub ln2_b: Vec<f64>,
    /// MLP input weight, `hidden × ffn`.
    pub w_fc: Vec<f64>,
    /// MLP input bias, `ffn`.
    pub b_fc: Vec<f64>,
    /// MLP output weight, `ffn × hidden`.
    pub w_out: Vec<f64>,
    /// MLP output bias, `hidden`.
    pub b_out: Vec<f64>,
}

/// A GPT-2 decoder's weights; the output projection is `wteᵀ` (tied).
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Weights {
    /// The architecture.
    pub config: Gpt2Config,
    /// Token embedding, `vocab × hidden`.
    pub wte: Vec<f64>,
    /// Position embedding, `max_positions × hidden`.
    pub wpe: Vec<f64>,
    /// The decoder layers, `config.layers` of them.
    pub layers: Vec<Gpt2Layer>,
    /// Gain of the final LayerNorm, `hidden`.
    pub lnf_g: Vec<f64>,
    /// Bias of the final LayerNorm, `hidden`.
    pub lnf_b: Vec<f64>,
}

/// Fails with [`ModelError::WeightLength`] unless `v` has `expected` values.
pub(crate) fn check_len(name: impl FnOnce() -> String, v: &[f64], expected: usize) -> Result<()> {
    if v.len() == expected {
        Ok(())
    } else {
        Err(ModelError::WeightLength { name: name(), expected, actual: v.len() })
    }
}

impl BertLayer {
    /// Checks every tensor's length against `config`; `index` only labels the error.
    ///
    /// # Errors
    /// [`ModelError::WeightLength`] for the first tensor of the wrong length.
    pub fn validate(&self, config: &BertConfig, index: usize) -> Result<()> {
        let (h, f) = (config.hidden, config.ffn);
        let tensors: [(&str, &[f64], usize); 16] = [
            ("wq", &self.wq, h * h),
            ("bq", &self.bq, h),
            ("wk", &self.wk, h * h),
            ("bk", &self.bk, h),
            ("wv", &self.wv, h * h),
            ("bv", &self.bv, h),
            ("wo", &self.wo, h * h),
            ("bo", &self.bo, h),
            ("ln1_g", &self.ln1_g, h),
            ("ln1_b", &self.ln1_b, h),
            ("w1", &self.w1, h * f),
            ("b1", &self.b1, f),
            ("w2", &self.w2, f * h),
            ("b2", &self.b2, h),
            ("ln2_g", &self.ln2_g, h),
            ("ln2_b", &self.ln2_b, h),
        ];
        for (name, v, n) in tensors {
            check_len(|| format!("layers[{index}].{name}"), v, n)?;
        }
        Ok(())
    }
}

impl BertWeights {
    /// Checks the configuration and every tensor's length against it.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`], or [`ModelError::WeightLength`] for the first tensor
    /// (or the layer count) that does not match.
    pub fn validate(&self) -> Result<()> {
        let c = &self.config;
        c.validate()?;
        let h = c.hidden;
        check_len(|| "word".into(), &self.word, c.vocab * h)?;
        check_len(|| "position".into(), &self.position, c.max_positions * h)?;
        check_len(|| "token_type".into(), &self.token_type, c.type_vocab * h)?;
        check_len(|| "emb_ln_g".into(), &self.emb_ln_g, h)?;
        check_len(|| "emb_ln_b".into(), &self.emb_ln_b, h)?;
        if self.layers.len() != c.layers {
            return Err(ModelError::WeightLength {
                name: "layers".into(),
                expected: c.layers,
                actual: self.layers.len(),
            });
        }
        for (i, l) in self.layers.iter().enumerate() {
            l.validate(c, i)?;
        }
        Ok(())
    }

    /// Seeded random weights of the shape `config` (distributions in the [module](self) docs).
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] if `config` does not validate.
    pub fn random(config: BertConfig, seed: u64) -> Result<Self> {
        config.validate()?;
        let (h, f) = (config.hidden, config.ffn);
        let mut g = Gen::new(seed);
        let word = g.std(config.vocab * h, EMB_STD);
        let position = g.std(config.max_positions * h, POS_STD);
        let token_type = g.std(config.type_vocab * h, POS_STD);
        let emb_ln_g = g.ln_gain(h);
        let emb_ln_b = g.ln_bias(h);
        let layers = (0..config.layers)
            .map(|_| BertLayer {
                wq: g.linear(h, h, 1.0),
                bq: g.bias(h),
                wk: g.linear(h, h, 1.0),
                bk: g.bias(h),
                wv: g.linear(h, h, 1.0),
                bv: g.bias(h),
                wo: g.linear(h, h, RESIDUAL_OUT),
                bo: g.bias(h),
                ln1_g: g.ln_gain(h),
                ln1_b: g.ln_bias(h),
                w1: g.linear(h, f, 1.0),
                b1: g.bias(f),
                w2: g.linear(f, h, RESIDUAL_OUT),
                b2: g.bias(h),
                ln2_g: g.ln_gain(h),
                ln2_b: g.ln_bias(h),
            })
            .collect();
        Ok(BertWeights { config, word, position, token_type, emb_ln_g, emb_ln_b, layers })
    }
}

impl Gpt2Layer {
    /// Checks every tensor's length against `config`; `index` only labels the error.
    ///
    /// # Errors
    /// [`ModelError::WeightLength`] for the first tensor of the wrong length.
    pub fn validate(&self, config: &Gpt2Config, index: usize) -> Result<()> {
        let (h, f) = (config.hidden, config.ffn);
        let tensors: [(&str, &[f64], usize); 12] = [
            ("ln1_g", &self.ln1_g, h),
            ("ln1_b", &self.ln1_b, h),
            ("w_qkv", &self.w_qkv, h * 3 * h),
            ("b_qkv", &self.b_qkv, 3 * h),
            ("w_proj", &self.w_proj, h * h),
            ("b_proj", &self.b_proj, h),
            ("ln2_g", &self.ln2_g, h),
            ("ln2_b", &self.ln2_b, h),
            ("w_fc", &self.w_fc, h * f),
            ("b_fc", &self.b_fc, f),
            ("w_out", &self.w_out, f * h),
            ("b_out", &self.b_out, h),
        ];
        for (name, v, n) in tensors {
            check_len(|| format!("layers[{index}].{name}"), v, n)?;
        }
        Ok(())
    }
}

impl Gpt2Weights {
    /// Checks the configuration and every tensor's length against it.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`], or [`ModelError::WeightLength`] for the first tensor
    /// (or the layer count) that does not match.
    pub fn validate(&self) -> Result<()> {
        let c = &self.config;
        c.validate()?;
        let h = c.hidden;
        check_len(|| "wte".into(), &self.wte, c.vocab * h)?;
        check_len(|| "wpe".into(), &self.wpe, c.max_positions * h)?;
        check_len(|| "lnf_g".into(), &self.lnf_g, h)?;
        check_len(|| "lnf_b".into(), &self.lnf_b, h)?;
        if self.layers.len() != c.layers {
            return Err(ModelError::WeightLength {
                name: "layers".into(),
                expected: c.layers,
                actual: self.layers.len(),
            });
        }
        for (i, l) in self.layers.iter().enumerate() {
            l.validate(c, i)?;
        }
        Ok(())
    }

    /// Seeded random weights of the shape `config` (distributions in the [module](self) docs).
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] if `config` does not validate.
    pub fn random(config: Gpt2Config, seed: u64) -> Result<Self> {
        config.validate()?;
        let (h, f) = (config.hidden, config.ffn);
        let mut g = Gen::new(seed);
        let wte = g.std(config.vocab * h, EMB_STD);
        let wpe = g.std(config.max_positions * h, POS_STD);
        let layers = (0..config.layers)
            .map(|_| Gpt2Layer {
                ln1_g: g.ln_gain(h),
                ln1_b: g.ln_bias(h),
                w_qkv: g.linear(h, 3 * h, 1.0),
                b_qkv: g.bias(3 * h),
                w_proj: g.linear(h, h, RESIDUAL_OUT),
                b_proj: g.bias(h),
                ln2_g: g.ln_gain(h),
                ln2_b: g.ln_bias(h),
                w_fc: g.linear(h, f, 1.0),
                b_fc: g.bias(f),
                w_out: g.linear(f, h, RESIDUAL_OUT),
                b_out: g.bias(h),
            })
            .collect();
        let lnf_g = g.ln_gain(h);
        let lnf_b = g.ln_bias(h);
        Ok(Gpt2Weights { config, wte, wpe, layers, lnf_g, lnf_b })
    }
}

/// Standard deviation of word/token embeddings.
const EMB_STD: f64 = 0.5;
/// Standard deviation of position and token-type embeddings.
const POS_STD: f64 = 0.25;
/// Scale of residual-branch output projections relative to `1/√fan_in`.
const RESIDUAL_OUT: f64 = 0.5;
/// Half-width of bias distributions.
const BIAS: f64 = 0.02;
/// Half-width of LayerNorm gain distributions around 1.
const LN_GAIN: f64 = 0.1;
/// Half-width of LayerNorm bias distributions.
const LN_BIAS: f64 = 0.05;
/// Elements per independently positioned chunk of a tensor's stream.
const CHUNK: usize = 1 << 15;

/// Uniform values, one ChaCha8 stream per tensor in the order the tensors are drawn.
pub(crate) struct Gen {
    seed: u64,
    stream: u64,
}

impl Gen {
    pub(crate) fn new(seed: u64) -> Self {
        Gen { seed, stream: 0 }
    }

    /// `len` values uniform on `[center − half, center + half]`.
    fn uniform(&mut self, len: usize, center: f64, half: f64) -> Vec<f64> {
        let (seed, stream) = (self.seed, self.stream);
        self.stream += 1;
        let mut out = vec![0.0; len];
        let scale = 2.0 * half / 4_294_967_296.0;
        let lo = center - half + 0.5 * scale;
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, chunk)| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(stream);
            // One 32-bit word per element, so chunk `c` starts at word `c·CHUNK`.
            rng.set_word_pos((c * CHUNK) as u128);
            for v in chunk {
                *v = lo + scale * f64::from(rng.next_u32());
            }
        });
        out
    }

    /// Mean 0, standard deviation `std` (uniform on `±std·√3`).
    pub(crate) fn std(&mut self, len: usize, std: f64) -> Vec<f64> {
        self.uniform(len, 0.0, std * 3f64.sqrt())
    }

    /// A `fan_in × fan_out` weight with std `factor/√fan_in`.
    pub(crate) fn linear(&mut self, fan_in: usize, fan_out: usize, factor: f64) -> Vec<f64> {
        self.std(fan_in * fan_out, factor / (fan_in as f64).sqrt())
    }

    fn bias(&mut self, len: usize) -> Vec<f64> {
        self.uniform(len, 0.0, BIAS)
    }

    pub(crate) fn ln_gain(&mut self, len: usize) -> Vec<f64> {
        self.uniform(len, 1.0, LN_GAIN)
    }

    fn ln_bias(&mut self, len: usize) -> Vec<f64> {
        self.uniform(len, 0.0, LN_BIAS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_std(v: &[f64]) -> (f64, f64) {
        let n = v.len() as f64;
        let m = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n;
        (m, var.sqrt())
    }

    #[test]
    fn random_is_deterministic_per_seed() {
        let c = BertConfig::bert_tiny();
        let a = BertWeights::random(c, 7).unwrap();
        let b = BertWeights::random(c, 7).unwrap();
        let d = BertWeights::random(c, 8).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.word, d.word);
        assert_ne!(a.layers[1].w1, d.layers[1].w1);
        a.validate().unwrap();
        let g = Gpt2Config::gpt2().with_layers(1);
        let x = Gpt2Weights::random(g, 1).unwrap();
        let y = Gpt2Weights::random(g, 1).unwrap();
        assert_eq!(x, y);
        x.validate().unwrap();
        // Tensors drawn from the same seed are independent streams, not copies.
        assert_ne!(&x.layers[0].w_proj[..], &x.layers[0].w_qkv[..768 * 768]);
        // A chunked draw equals one sequential stream.
        let mut g = Gen::new(3);
        let v = g.uniform(3 * CHUNK + 5, 0.0, 1.0);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        rng.set_stream(0);
        let scale = 2.0 / 4_294_967_296.0;
        for (i, &x) in v.iter().enumerate() {
            assert_eq!(x, -1.0 + 0.5 * scale + scale * f64::from(rng.next_u32()), "element {i}");
        }
    }

    #[test]
    fn random_distributions_have_documented_moments() {
        let w = BertWeights::random(BertConfig::bert_tiny(), 11).unwrap();
        let (m, s) = mean_std(&w.word);
        assert!(m.abs() < 0.01 && (s - EMB_STD).abs() < 0.01, "word {m} {s}");
        let l = &w.layers[0];
        let (m, s) = mean_std(&l.wq);
        let want = 1.0 / 128f64.sqrt();
        assert!(m.abs() < 0.005 && (s - want).abs() < 0.05 * want, "wq {m} {s}");
        let (_, s) = mean_std(&l.w2);
        let want = 0.5 / 512f64.sqrt();
        assert!((s - want).abs() < 0.05 * want, "w2 {s}");
        assert!(l.ln1_g.iter().all(|g| (0.9..=1.1).contains(g)));
        assert!(l.b1.iter().all(|b| b.abs() <= 0.02));
        assert!(l.ln2_b.iter().all(|b| b.abs() <= 0.05));
    }

    #[test]
    fn validate_reports_wrong_lengths() {
        let mut w = BertWeights::random(BertConfig::bert_tiny(), 1).unwrap();
        w.layers[1].wk.pop();
        match w.validate() {
            Err(ModelError::WeightLength { name, .. }) => assert_eq!(name, "layers[1].wk"),
            other => panic!("{other:?}"),
        }
        let mut g = Gpt2Weights::random(Gpt2Config::gpt2().with_layers(1), 1).unwrap();
        g.layers.clear();
        assert!(matches!(g.validate(), Err(ModelError::WeightLength { .. })));
        let mut c = Gpt2Config::gpt2();
        c.heads = 5;
        assert!(matches!(Gpt2Weights::random(c, 0), Err(ModelError::InvalidConfig(_))));
    }
}
