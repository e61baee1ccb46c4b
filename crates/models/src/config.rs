//! Architecture hyperparameters of BERT encoders and GPT-2 decoders.

use crate::error::{ModelError, Result};

/// A BERT encoder (post-LN, erf-GeLU, learned absolute positions and token types).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BertConfig {
    /// Vocabulary size (rows of the word embedding).
    pub vocab: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Number of encoder layers.
    pub layers: usize,
    /// Attention heads per layer; `hidden` must be a multiple of it.
    pub heads: usize,
    /// Width of the feed-forward block.
    pub ffn: usize,
    /// Rows of the position embedding (the longest sequence).
    pub max_positions: usize,
    /// Rows of the token-type embedding.
    pub type_vocab: usize,
    /// LayerNorm epsilon.
    pub ln_eps: f64,
}

impl BertConfig {
    /// The built-in default model: BERT-tiny's shape (hidden 128, 2 layers, 2 heads, FFN 512)
    /// over a 4096-word built-in vocabulary (see [`crate::tokenize::BuiltinTokenizer`]).
    pub fn bert_tiny() -> Self {
        BertConfig {
            vocab: 4096,
            hidden: 128,
            layers: 2,
            heads: 2,
            ffn: 512,
            max_positions: 512,
            type_vocab: 2,
            ln_eps: 1e-12,
        }
    }

    /// BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072, vocabulary 30522 (the paper's
    /// BERT-base).
    pub fn bert_base() -> Self {
        BertConfig {
            vocab: 30522,
            hidden: 768,
            layers: 12,
            heads: 12,
            ffn: 3072,
            max_positions: 512,
            type_vocab: 2,
            ln_eps: 1e-12,
        }
    }

    /// BERT-large: 24 layers, hidden 1024, 16 heads, FFN 4096, vocabulary 30522.
    pub fn bert_large() -> Self {
        BertConfig { hidden: 1024, layers: 24, heads: 16, ffn: 4096, ..BertConfig::bert_base() }
    }

    /// all-MiniLM-L6-v2: 6 layers, hidden 384, 12 heads of 32, FFN 1536, vocabulary 30522.
    pub fn minilm() -> Self {
        BertConfig {
            vocab: 30522,
            hidden: 384,
            layers: 6,
            heads: 12,
            ffn: 1536,
            max_positions: 512,
            type_vocab: 2,
            ln_eps: 1e-12,
        }
    }

    /// The same model cut (or extended) to `layers` layers.
    pub fn with_layers(mut self, layers: usize) -> Self {
        self.layers = layers;
        self
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads.max(1)
    }

    /// Number of parameters (embeddings, layers, no pooler).
    pub fn num_params(&self) -> usize {
        let (h, f) = (self.hidden, self.ffn);
        let emb = (self.vocab + self.max_positions + self.type_vocab) * h + 2 * h;
        let layer = 4 * (h * h + h) + 2 * h * f + f + h + 4 * h;
        emb + self.layers * layer
    }

    /// Checks that every size is positive, `heads` divides `hidden` and `ln_eps` is finite and
    /// positive.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] naming the first violated rule.
    pub fn validate(&self) -> Result<()> {
        check_common(
            &[
                ("vocab", self.vocab),
                ("hidden", self.hidden),
                ("heads", self.heads),
                ("ffn", self.ffn),
                ("max_positions", self.max_positions),
                ("type_vocab", self.type_vocab),
            ],
            self.hidden,
            self.heads,
            self.ln_eps,
        )
    }
}

/// A GPT-2 decoder (pre-LN, causal attention, tanh-GeLU, final LayerNorm, tied output embedding).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpt2Config {
    /// Vocabulary size (rows of the token embedding).
    pub vocab: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Number of decoder layers.
    pub layers: usize,
    /// Attention heads per layer; `hidden` must be a multiple of it.
    pub heads: usize,
    /// Width of the MLP.
    pub ffn: usize,
    /// Rows of the position embedding (the context length).
    pub max_positions: usize,
    /// LayerNorm epsilon.
    pub ln_eps: f64,
}

impl Gpt2Config {
    /// GPT-2 small (124M): vocabulary 50257, hidden 768, 12 layers, 12 heads, MLP 3072,
    /// context 1024.
    pub fn gpt2() -> Self {
        Gpt2Config {
            vocab: 50257,
            hidden: 768,
            layers: 12,
            heads: 12,
            ffn: 3072,
            max_positions: 1024,
            ln_eps: 1e-5,
        }
    }

    /// The same model cut (or extended) to `layers` layers.
    pub fn with_layers(mut self, layers: usize) -> Self {
        self.layers = layers;
        self
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads.max(1)
    }

    /// Number of parameters (the output projection is tied to the token embedding).
    pub fn num_params(&self) -> usize {
        let (h, f) = (self.hidden, self.ffn);
        let emb = (self.vocab + self.max_positions) * h + 2 * h;
        let layer = 4 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h);
        emb + self.layers * layer
    }

    /// Checks that every size is positive, `heads` divides `hidden` and `ln_eps` is finite and
    /// positive.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] naming the first violated rule.
    pub fn validate(&self) -> Result<()> {
        check_common(
            &[
                ("vocab", self.vocab),
                ("hidden", self.hidden),
                ("heads", self.heads),
                ("ffn", self.ffn),
                ("max_positions", self.max_positions),
            ],
            self.hidden,
            self.heads,
            self.ln_eps,
        )
    }
}

fn check_common(sizes: &[(&str, usize)], hidden: usize, heads: usize, eps: f64) -> Result<()> {
    for &(name, v) in sizes {
        if v == 0 {
            return Err(ModelError::InvalidConfig(format!("{name} is 0")));
        }
    }
    if !hidden.is_multiple_of(heads) {
        return Err(ModelError::InvalidConfig(format!("{heads} heads do not divide hidden {hidden}")));
    }
    if !(eps.is_finite() && eps > 0.0) {
        return Err(ModelError::InvalidConfig(format!("LayerNorm epsilon {eps} is not positive")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid_and_have_known_sizes() {
        let t = BertConfig::bert_tiny();
        t.validate().unwrap();
        assert_eq!((t.hidden, t.layers, t.heads, t.head_dim()), (128, 2, 2, 64));
        let m = BertConfig::minilm();
        m.validate().unwrap();
        assert_eq!(m.head_dim(), 32);
        // all-MiniLM-L6-v2: 22,713,216 parameters with the pooler (147,840), which is not used.
        assert_eq!(m.num_params(), 22_713_216 - 147_840);
        let g = Gpt2Config::gpt2();
        g.validate().unwrap();
        assert_eq!(g.head_dim(), 64);
        // GPT-2 small: 124,439,808 parameters.
        assert_eq!(g.num_params(), 124_439_808);
        assert_eq!(g.with_layers(2).layers, 2);
        assert_eq!(m.with_layers(3).layers, 3);
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let mut c = BertConfig::bert_tiny();
        c.heads = 3;
        assert!(matches!(c.validate(), Err(ModelError::InvalidConfig(_))));
        let mut g = Gpt2Config::gpt2();
        g.vocab = 0;
        assert!(matches!(g.validate(), Err(ModelError::InvalidConfig(_))));
        let mut g = Gpt2Config::gpt2();
        g.ln_eps = 0.0;
        assert!(g.validate().is_err());
        // Zero layers is a valid (embedding-only) model.
        BertConfig::bert_tiny().with_layers(0).validate().unwrap();
    }
}
