//! Typed errors of model loading, tokenization and the float reference.

use std::path::PathBuf;

use thiserror::Error;

/// Everything that can go wrong when loading, tokenizing or running a model.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A file the loader needs does not exist.
    #[error("{}: file not found (run scripts/fetch-models.sh to fetch the offline models)", path.display())]
    MissingFile {
        /// The path that was looked up.
        path: PathBuf,
    },
    /// A model folder lacks a file.
    #[error(
        "{} is not a complete model folder: it has no {missing} (a Hugging Face folder holds config.json, model.safetensors and tokenizer.json)",
        dir.display()
    )]
    IncompleteFolder {
        /// The folder.
        dir: PathBuf,
        /// The first missing file.
        missing: &'static str,
    },
    /// Reading a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not a valid safetensors file.
    #[error("{}: not a valid safetensors file: {source}", path.display())]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: safetensors::SafeTensorError,
    },
    /// A JSON file (a `config.json`) does not parse or has a field of the wrong type.
    #[error("{}: invalid JSON: {message}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A tensor the architecture needs is not in the file.
    #[error("tensor {name} is missing")]
    MissingTensor {
        /// The tensor's full name in the file.
        name: String,
    },
    /// A tensor has a shape that does not fit the architecture.
    #[error("tensor {name} has shape {actual:?}, expected {expected:?}")]
    TensorShape {
        /// The tensor's full name in the file.
        name: String,
        /// The shape the architecture needs.
        expected: Vec<usize>,
        /// The shape in the file.
        actual: Vec<usize>,
    },
    /// A tensor has the wrong number of dimensions.
    #[error("tensor {name} has shape {actual:?}, expected {rank} dimensions")]
    TensorRank {
        /// The tensor's full name in the file.
        name: String,
        /// The number of dimensions the architecture needs.
        rank: usize,
        /// The shape in the file.
        actual: Vec<usize>,
    },
    /// A tensor is stored with an element type that is not a float.
    #[error("tensor {name} has dtype {dtype}, expected F32, F64, F16 or BF16")]
    TensorDtype {
        /// The tensor's full name in the file.
        name: String,
        /// The element type in the file.
        dtype: String,
    },
    /// A configuration that describes no valid model (zero sizes, heads not dividing the width).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A weight vector whose length does not match its configuration.
    #[error("weight {name} has {actual} values, the configuration needs {expected}")]
    WeightLength {
        /// Which weight (`layers[3].wq`, `word`, ...).
        name: String,
        /// The length the configuration implies.
        expected: usize,
        /// The length found.
        actual: usize,
    },
    /// A forward pass was given no tokens.
    #[error("empty token sequence")]
    EmptySequence,
    /// A sequence longer than the model's position table.
    #[error("sequence of {len} tokens exceeds the model's {max} positions")]
    SequenceTooLong {
        /// The sequence length.
        len: usize,
        /// The number of positions the model has.
        max: usize,
    },
    /// A token (or token type) id outside its table.
    #[error("id {id} at position {pos} is outside the {table} table of {size} rows")]
    IdOutOfRange {
        /// The id.
        id: u32,
        /// Its position in the sequence.
        pos: usize,
        /// Which table (`vocabulary`, `token type`).
        table: &'static str,
        /// The number of rows of the table.
        size: usize,
    },
    /// Inputs whose lengths must agree do not.
    #[error("{what}: expected length {expected}, got {actual}")]
    LengthMismatch {
        /// Which input.
        what: &'static str,
        /// The length implied by the other inputs.
        expected: usize,
        /// The length received.
        actual: usize,
    },
    /// The `tokenizers` crate failed to load a tokenizer or to encode or decode.
    #[error("tokenizer {}: {source}", path.display())]
    Tokenizer {
        /// The tokenizer's file or folder.
        path: PathBuf,
        /// The library's error.
        #[source]
        source: tokenizers::Error,
    },
    /// A model whose files have not been fetched.
    #[error("{model} is not in {}: {how}", dir.display())]
    NotFetched {
        /// The model.
        model: &'static str,
        /// Where its files were looked for.
        dir: PathBuf,
        /// How to fetch them.
        how: &'static str,
    },
    /// A text with no tokens of its own.
    #[error("the text is empty: it has no tokens")]
    EmptyText,
    /// The weights do not fit the program's shapes.
    #[error("program: {0}")]
    Program(#[from] engine::GraphError),
}

/// Shorthand for results of this crate.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
