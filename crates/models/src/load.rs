//! Loading Hugging Face checkpoints from safetensors files.
//!
//! [`BertWeights::from_safetensors`] reads `BertModel` names (`embeddings.word_embeddings.weight`,
//! `encoder.layer.N.attention.self.query.weight`, ...) with or without a `bert.` prefix, and
//! transposes the `[out, in]` Linear weights to this crate's `in × out`.
//! [`Gpt2Weights::from_safetensors`] reads `GPT2Model` names (`wte.weight`, `h.N.attn.c_attn.weight`,
//! ...) with or without a `transformer.` prefix; GPT-2's Conv1D weights are already `[in, out]`.
//!
//! The architecture is read from the tensor shapes; the number of heads and the LayerNorm
//! epsilon, which shapes do not tell, from a `config.json` beside the weights when there is one.

use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

use crate::config::{BertConfig, Gpt2Config};
use crate::error::{ModelError, Result};
use crate::llama::{LlamaConfig, LlamaLayer, LlamaWeights};
use crate::weights::{BertLayer, BertWeights, Gpt2Layer, Gpt2Weights};

/// The weights file looked up in a model folder.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The configuration file looked up beside the weights.
pub const CONFIG_FILE: &str = "config.json";

/// Reads a whole file, telling a missing file from other I/O errors.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    if !path.is_file() {
        return Err(ModelError::MissingFile { path: path.to_path_buf() });
    }
    std::fs::read(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })
}

/// `path` is a folder holding `model.safetensors`, or the weights file itself; returns the
/// weights file and the `config.json` beside it.
fn resolve(path: &Path) -> (PathBuf, PathBuf) {
    let file = if path.is_dir() { path.join(WEIGHTS_FILE) } else { path.to_path_buf() };
    let config = file.parent().map_or_else(|| PathBuf::from(CONFIG_FILE), |d| d.join(CONFIG_FILE));
    (file, config)
}

/// A parsed `config.json`, or an empty object when there is none.
struct JsonConfig {
    path: PathBuf,
    value: Value,
}

impl JsonConfig {
    fn read(path: PathBuf) -> Result<Self> {
        if !path.is_file() {
            return Ok(JsonConfig { path, value: Value::Null });
        }
        let bytes = read_file(&path)?;
        let value = serde_json::from_slice(&bytes)
            .map_err(|e| ModelError::Json { path: path.clone(), message: e.to_string() })?;
        Ok(JsonConfig { path, value })
    }

    fn usize(&self, key: &str) -> Result<Option<usize>> {
        match self.value.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => {
                v.as_u64().and_then(|n| usize::try_from(n).ok()).map(Some).ok_or_else(|| ModelError::Json {
                    path: self.path.clone(),
                    message: format!("{key} is not a non-negative integer"),
                })
            }
        }
    }

    fn f64(&self, key: &str) -> Result<Option<f64>> {
        match self.value.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| ModelError::Json {
                path: self.path.clone(),
                message: format!("{key} is not a number"),
            }),
        }
    }
}

/// The tensors of one file, with the name prefix the checkpoint uses.
struct Tensors<'a> {
    st: SafeTensors<'a>,
    prefix: &'static str,
}

impl<'a> Tensors<'a> {
    fn parse(path: &Path, bytes: &'a [u8], prefixes: &[&'static str], probe: &str) -> Result<Self> {
        let st = SafeTensors::deserialize(bytes)
            .map_err(|source| ModelError::Safetensors { path: path.to_path_buf(), source })?;
        let prefix =
            prefixes.iter().copied().find(|p| st.tensor(&format!("{p}{probe}")).is_ok()).unwrap_or("");
        Ok(Tensors { st, prefix })
    }

    fn name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn has(&self, name: &str) -> bool {
        self.st.tensor(&self.name(name)).is_ok()
    }

    fn view(&self, name: &str) -> Result<safetensors::tensor::TensorView<'a>> {
        let full = self.name(name);
        self.st.tensor(&full).map_err(|_| ModelError::MissingTensor { name: full })
    }

    /// The shape of a 2-D tensor.
    fn shape2(&self, name: &str) -> Result<[usize; 2]> {
        let shape = self.view(name)?.shape().to_vec();
        match shape[..] {
            [a, b] => Ok([a, b]),
            _ => Err(ModelError::TensorRank { name: self.name(name), rank: 2, actual: shape }),
        }
    }

    /// A float tensor of exactly `shape`, as `f64` in the file's (row-major) order.
    fn load(&self, name: &str, shape: &[usize]) -> Result<Vec<f64>> {
        let view = self.view(name)?;
        if view.shape() != shape {
            return Err(ModelError::TensorShape {
                name: self.name(name),
                expected: shape.to_vec(),
                actual: view.shape().to_vec(),
            });
        }
        let data = view.data();
        let values: Vec<f64> = match view.dtype() {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect(),
            Dtype::F64 => data
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                .collect(),
            Dtype::F16 => {
                data.chunks_exact(2).map(|b| f16_to_f64(u16::from_le_bytes([b[0], b[1]]))).collect()
            }
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|b| f64::from(f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)))
                .collect(),
            other => {
                return Err(ModelError::TensorDtype { name: self.name(name), dtype: format!("{other:?}") });
            }
        };
        // The parser checks that the data length matches shape and dtype; stay defensive.
        let expected: usize = shape.iter().product();
        if values.len() != expected {
            return Err(ModelError::TensorShape {
                name: self.name(name),
                expected: shape.to_vec(),
                actual: view.shape().to_vec(),
            });
        }
        Ok(values)
    }

    /// A PyTorch Linear weight stored `[out, in]`, returned as `in × out` row-major.
    fn linear_t(&self, name: &str, fan_in: usize, fan_out: usize) -> Result<Vec<f64>> {
        let w = self.load(name, &[fan_out, fan_in])?;
        Ok(transpose(&w, fan_out, fan_in))
    }

    /// Counts the layers `0, 1, ...` for which `pattern(i)` names a tensor.
    fn count_layers(&self, pattern: impl Fn(usize) -> String) -> usize {
        (0..).take_while(|&i| self.has(&pattern(i))).count()
    }
}

/// The transpose of a row-major `rows × cols` matrix.
fn transpose(m: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut t = vec![0.0; m.len()];
    gates::linalg::transpose_into(m, &mut t, rows, cols);
    t
}

/// IEEE half precision to `f64`.
fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let mant = f64::from(h & 0x3ff);
    sign * match exp {
        0 => mant * 2f64.powi(-24),
        31 if mant == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + mant / 1024.0) * 2f64.powi(exp - 15),
    }
}

/// Heads from `config.json`, else `hidden / default_head_dim`.
fn heads_of(cfg: &JsonConfig, key: &str, hidden: usize, default_head_dim: usize) -> Result<usize> {
    match cfg.usize(key)? {
        Some(h) => Ok(h),
        None if hidden.is_multiple_of(default_head_dim) => Ok(hidden / default_head_dim),
        None => Err(ModelError::InvalidConfig(format!(
            "no {key} in {} and hidden {hidden} is not a multiple of {default_head_dim}",
            cfg.path.display()
        ))),
    }
}

impl BertWeights {
    /// Loads a Hugging Face `BertModel` checkpoint (e.g. all-MiniLM-L6-v2).
    ///
    /// `path` is a folder holding `model.safetensors` (and optionally `config.json`), or the
    /// safetensors file itself. Sizes come from the tensor shapes; heads from
    /// `num_attention_heads` in `config.json`, else `hidden / 32`; epsilon from
    /// `layer_norm_eps`, else 1e-12. Pooler and `position_ids` tensors are ignored.
    ///
    /// # Errors
    /// [`ModelError::MissingFile`], [`ModelError::Io`], [`ModelError::Safetensors`],
    /// [`ModelError::Json`], [`ModelError::MissingTensor`], [`ModelError::TensorShape`],
    /// [`ModelError::TensorRank`], [`ModelError::TensorDtype`], or [`ModelError::InvalidConfig`].
    pub fn from_safetensors(path: impl AsRef<Path>) -> Result<Self> {
        let (file, config_path) = resolve(path.as_ref());
        let bytes = read_file(&file)?;
        let cfg = JsonConfig::read(config_path)?;
        let t = Tensors::parse(&file, &bytes, &["bert."], "embeddings.word_embeddings.weight")?;

        let [vocab, hidden] = t.shape2("embeddings.word_embeddings.weight")?;
        let [max_positions, _] = t.shape2("embeddings.position_embeddings.weight")?;
        let [type_vocab, _] = t.shape2("embeddings.token_type_embeddings.weight")?;
        let layers = t.count_layers(|i| format!("encoder.layer.{i}.attention.self.query.weight"));
        let ffn = if layers > 0 {
            t.shape2("encoder.layer.0.intermediate.dense.weight")?[0]
        } else {
            cfg.usize("intermediate_size")?.unwrap_or(4 * hidden)
        };
        let config = BertConfig {
            vocab,
            hidden,
            layers,
            heads: heads_of(&cfg, "num_attention_heads", hidden, 32)?,
            ffn,
            max_positions,
            type_vocab,
            ln_eps: cfg.f64("layer_norm_eps")?.unwrap_or(1e-12),
        };
        config.validate()?;

        let h = hidden;
        let word = t.load("embeddings.word_embeddings.weight", &[vocab, h])?;
        let position = t.load("embeddings.position_embeddings.weight", &[max_positions, h])?;
        let token_type = t.load("embeddings.token_type_embeddings.weight", &[type_vocab, h])?;
        let emb_ln_g = t.load("embeddings.LayerNorm.weight", &[h])?;
        let emb_ln_b = t.load("embeddings.LayerNorm.bias", &[h])?;
        let layers = (0..layers)
            .map(|i| {
                let p = format!("encoder.layer.{i}.");
                let n = |s: &str| format!("{p}{s}");
                Ok(BertLayer {
                    wq: t.linear_t(&n("attention.self.query.weight"), h, h)?,
                    bq: t.load(&n("attention.self.query.bias"), &[h])?,
                    wk: t.linear_t(&n("attention.self.key.weight"), h, h)?,
                    bk: t.load(&n("attention.self.key.bias"), &[h])?,
                    wv: t.linear_t(&n("attention.self.value.weight"), h, h)?,
                    bv: t.load(&n("attention.self.value.bias"), &[h])?,
                    wo: t.linear_t(&n("attention.output.dense.weight"), h, h)?,
                    bo: t.load(&n("attention.output.dense.bias"), &[h])?,
                    ln1_g: t.load(&n("attention.output.LayerNorm.weight"), &[h])?,
                    ln1_b: t.load(&n("attention.output.LayerNorm.bias"), &[h])?,
                    w1: t.linear_t(&n("intermediate.dense.weight"), h, ffn)?,
                    b1: t.load(&n("intermediate.dense.bias"), &[ffn])?,
                    w2: t.linear_t(&n("output.dense.weight"), ffn, h)?,
                    b2: t.load(&n("output.dense.bias"), &[h])?,
                    ln2_g: t.load(&n("output.LayerNorm.weight"), &[h])?,
                    ln2_b: t.load(&n("output.LayerNorm.bias"), &[h])?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(BertWeights { config, word, position, token_type, emb_ln_g, emb_ln_b, layers })
    }
}

impl LlamaWeights {
    /// Loads a Hugging Face `LlamaForCausalLM` checkpoint (`model.embed_tokens.weight`,
    /// `model.layers.N.self_attn.q_proj.weight`, ..., with or without the `model.` prefix)
    /// with a tied LM head; heads, key/value heads, the rotary base and RMSNorm's ε from
    /// `config.json` (required: shapes do not tell them).
    ///
    /// # Errors
    /// As [`BertWeights::from_safetensors`], and [`ModelError::InvalidConfig`] for a model
    /// whose LM head is not tied to its embedding.
    pub fn from_safetensors(path: impl AsRef<Path>) -> Result<Self> {
        let (file, config_path) = resolve(path.as_ref());
        let bytes = read_file(&file)?;
        let cfg = JsonConfig::read(config_path.clone())?;
        let t = Tensors::parse(&file, &bytes, &["model."], "embed_tokens.weight")?;
        let [vocab, hidden] = t.shape2("embed_tokens.weight")?;
        let layers = t.count_layers(|i| format!("layers.{i}.self_attn.q_proj.weight"));
        let need = |key: &str| -> Result<usize> {
            cfg.usize(key)?
                .ok_or_else(|| ModelError::InvalidConfig(format!("{}: no {key}", config_path.display())))
        };
        if cfg.value.get("tie_word_embeddings").and_then(Value::as_bool) == Some(false) {
            return Err(ModelError::InvalidConfig(
                "only a LM head tied to the embedding is supported".into(),
            ));
        }
        let heads = need("num_attention_heads")?;
        let config = LlamaConfig {
            vocab,
            hidden,
            layers,
            heads,
            kv_heads: cfg.usize("num_key_value_heads")?.unwrap_or(heads),
            ffn: t.shape2("layers.0.mlp.gate_proj.weight")?[0],
            rope_theta: cfg.f64("rope_theta")?.unwrap_or(1e4),
            eps: cfg.f64("rms_norm_eps")?.unwrap_or(1e-5),
        };
        let (h, d) = (hidden, config.head_dim());
        let (q, kv, f) = (config.heads * d, config.kv_heads * d, config.ffn);
        let embed = t.load("embed_tokens.weight", &[vocab, h])?;
        let layers = (0..layers)
            .map(|i| {
                let n = |s: &str| format!("layers.{i}.{s}");
                Ok(LlamaLayer {
                    attn_norm: t.load(&n("input_layernorm.weight"), &[h])?,
                    wq: t.linear_t(&n("self_attn.q_proj.weight"), h, q)?,
                    wk: t.linear_t(&n("self_attn.k_proj.weight"), h, kv)?,
                    wv: t.linear_t(&n("self_attn.v_proj.weight"), h, kv)?,
                    wo: t.linear_t(&n("self_attn.o_proj.weight"), q, h)?,
                    mlp_norm: t.load(&n("post_attention_layernorm.weight"), &[h])?,
                    w_gate: t.linear_t(&n("mlp.gate_proj.weight"), h, f)?,
                    w_up: t.linear_t(&n("mlp.up_proj.weight"), h, f)?,
                    w_down: t.linear_t(&n("mlp.down_proj.weight"), f, h)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let final_norm = t.load("norm.weight", &[h])?;
        let w = LlamaWeights { config, embed, layers, final_norm };
        w.config.check()?;
        Ok(w)
    }
}

impl Gpt2Weights {
    /// Loads a Hugging Face `GPT2Model` / `GPT2LMHeadModel` checkpoint.
    ///
    /// `path` is a folder holding `model.safetensors` (and optionally `config.json`), or the
    /// safetensors file itself. Sizes come from the tensor shapes; heads from `n_head` in
    /// `config.json`, else `hidden / 64`; epsilon from `layer_norm_epsilon`, else 1e-5. The
    /// causal-mask buffers (`h.N.attn.bias`) and `lm_head.weight` (tied to `wte`) are ignored.
    ///
    /// # Errors
    /// As [`BertWeights::from_safetensors`].
    pub fn from_safetensors(path: impl AsRef<Path>) -> Result<Self> {
        let (file, config_path) = resolve(path.as_ref());
        let bytes = read_file(&file)?;
        let cfg = JsonConfig::read(config_path)?;
        let t = Tensors::parse(&file, &bytes, &["transformer."], "wte.weight")?;

        let [vocab, hidden] = t.shape2("wte.weight")?;
        let [max_positions, _] = t.shape2("wpe.weight")?;
        let layers = t.count_layers(|i| format!("h.{i}.attn.c_attn.weight"));
        let ffn = if layers > 0 {
            t.shape2("h.0.mlp.c_fc.weight")?[1]
        } else {
            cfg.usize("n_inner")?.unwrap_or(4 * hidden)
        };
        let config = Gpt2Config {
            vocab,
            hidden,
            layers,
            heads: heads_of(&cfg, "n_head", hidden, 64)?,
            ffn,
            max_positions,
            ln_eps: cfg.f64("layer_norm_epsilon")?.unwrap_or(1e-5),
        };
        config.validate()?;

        let h = hidden;
        let wte = t.load("wte.weight", &[vocab, h])?;
        let wpe = t.load("wpe.weight", &[max_positions, h])?;
        let layers = (0..layers)
            .map(|i| {
                let n = |s: &str| format!("h.{i}.{s}");
                Ok(Gpt2Layer {
                    ln1_g: t.load(&n("ln_1.weight"), &[h])?,
                    ln1_b: t.load(&n("ln_1.bias"), &[h])?,
                    w_qkv: t.load(&n("attn.c_attn.weight"), &[h, 3 * h])?,
                    b_qkv: t.load(&n("attn.c_attn.bias"), &[3 * h])?,
                    w_proj: t.load(&n("attn.c_proj.weight"), &[h, h])?,
                    b_proj: t.load(&n("attn.c_proj.bias"), &[h])?,
                    ln2_g: t.load(&n("ln_2.weight"), &[h])?,
                    ln2_b: t.load(&n("ln_2.bias"), &[h])?,
                    w_fc: t.load(&n("mlp.c_fc.weight"), &[h, ffn])?,
                    b_fc: t.load(&n("mlp.c_fc.bias"), &[ffn])?,
                    w_out: t.load(&n("mlp.c_proj.weight"), &[ffn, h])?,
                    b_out: t.load(&n("mlp.c_proj.bias"), &[h])?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let lnf_g = t.load("ln_f.weight", &[h])?;
        let lnf_b = t.load("ln_f.bias", &[h])?;
        Ok(Gpt2Weights { config, wte, wpe, layers, lnf_g, lnf_b })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision_conversions() {
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
        assert_eq!(f16_to_f64(0x0001), 2f64.powi(-24));
        assert_eq!(f16_to_f64(0x7bff), 65504.0);
        assert!(f16_to_f64(0x7c00).is_infinite());
        assert!(f16_to_f64(0x7e00).is_nan());
    }

    #[test]
    fn transpose_is_an_involution() {
        let m: Vec<f64> = (0..12).map(f64::from).collect();
        let t = transpose(&m, 3, 4);
        assert_eq!(t[1], 4.0); // (0,1) of the transpose is (1,0) of m
        assert_eq!(transpose(&t, 4, 3), m);
    }
}
