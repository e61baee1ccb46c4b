//! Where the fetched model files live.
//!
//! `scripts/fetch-models.sh` puts all-MiniLM-L6-v2 in `models/minilm/` and GPT-2's tokenizer in
//! `models/gpt2/` at the repository root, or wherever `FUSEFSS_MODELS` points.

use std::path::{Path, PathBuf};

/// The environment variable that overrides the models folder.
pub const MODELS_ENV: &str = "FUSEFSS_MODELS";

/// The models folder: `$FUSEFSS_MODELS` if set and non-empty; else the first `models/` folder
/// holding `minilm/`, `gpt2/` or `smollm2/` found in the current directory or one of its ancestors (so
/// tests running in `crates/models` find the repository's); else `./models`.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(MODELS_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    find_models_dir(&cwd).unwrap_or_else(|| cwd.join("models"))
}

/// The first `a/models` with a `minilm`, `gpt2` or `smollm2` subfolder, for `a` from `start` upwards.
fn find_models_dir(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|a| a.join("models"))
        .find(|m| ["minilm", "gpt2", "smollm2"].iter().any(|d| m.join(d).is_dir()))
}

/// all-MiniLM-L6-v2's folder (`model.safetensors`, `config.json`, `tokenizer.json`).
pub fn minilm_dir() -> PathBuf {
    models_dir().join("minilm")
}

/// SmolLM2-135M-Instruct's folder (`model.safetensors`, `config.json`, `tokenizer.json`).
pub fn smollm2_dir() -> PathBuf {
    models_dir().join("smollm2")
}

/// GPT-2's tokenizer folder (`encoder.json`, `vocab.bpe`).
pub fn gpt2_dir() -> PathBuf {
    models_dir().join("gpt2")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_models_folder_above_the_start() {
        let root = std::env::temp_dir().join(format!("fusefss-paths-{}", std::process::id()));
        let deep = root.join("a/b/c");
        std::fs::create_dir_all(&deep).unwrap();
        // A plain `models` folder (like crates/models) is not taken for the models folder.
        std::fs::create_dir_all(root.join("a/models")).unwrap();
        assert_eq!(find_models_dir(&deep).filter(|p| p.starts_with(&root)), None);
        std::fs::create_dir_all(root.join("models/gpt2")).unwrap();
        assert_eq!(find_models_dir(&deep), Some(root.join("models")));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
