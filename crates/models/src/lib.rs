//! BERT and GPT-2 on the plaintext side: configurations, `f64` weights (seeded random or from
//! Hugging Face safetensors), tokenizers and an `f64` reference forward pass (docs/design/brief.md §3, §8).
//!
//! | module | what |
//! |---|---|
//! | [`config`] | [`BertConfig`] (BERT-tiny, all-MiniLM-L6-v2) and [`Gpt2Config`] (GPT-2 124M) |
//! | [`weights`] | [`BertWeights`], [`Gpt2Weights`]: `in × out` linear maps, seeded random weights |
//! | [`load`] | `from_safetensors` for Hugging Face `BertModel` and `GPT2Model` checkpoints |
//! | [`float`] | the f64 forward passes and their pieces (matmul, LayerNorm, softmax, GeLU, attention) |
//! | [`graph`] | the secure path: BERT and GPT-2 as engine programs over fixed-point weights |
//! | [`tokenize`] | [`BuiltinTokenizer`] (no files), MiniLM's WordPiece, GPT-2's byte-level BPE |
//! | [`llama`] | Llama-family decoders (SmolLM2's architecture): prefill and decode programs over a carried KV cache, f64 reference, `llama-tiny` |
//! | [`registry`] | the models known by name ([`ModelName`]), loaded with their fixed point and tokenizer |
//! | [`paths`] | where `scripts/fetch-models.sh` put the offline models |
//!
//! ```
//! use models::{BertConfig, BertWeights, BuiltinTokenizer, float};
//! let w = BertWeights::random(BertConfig::bert_tiny(), 42).unwrap();
//! let ids = BuiltinTokenizer::new(w.config.vocab).unwrap().encode("private inference");
//! let h = float::bert_forward(&w, &ids, None).unwrap();
//! let e = float::l2_normalize(&float::mean_pool(&h, ids.len(), w.config.hidden));
//! assert!((e.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-12);
//! ```

pub mod config;
pub mod error;
pub mod float;
pub mod graph;
pub mod llama;
pub mod load;
pub mod paths;
pub mod registry;
pub mod tokenize;
pub mod weights;

pub use config::{BertConfig, Gpt2Config};
pub use error::{ModelError, Result};
pub use registry::{Loaded, ModelName, Tok};
pub use tokenize::{BuiltinTokenizer, Gpt2Tokenizer, HfTokenizer};
pub use weights::{BertLayer, BertWeights, Gpt2Layer, Gpt2Weights};
