//! Errors shared by the modules that build programs: [`ProgramError`].

use engine::EngineError;
use thiserror::Error;

/// A program that cannot be built for a descriptor.
#[derive(Debug, Error)]
pub enum ProgramError {
    /// The model does not load.
    #[error("{0}")]
    Model(#[from] models::ModelError),
    /// A compiled operator does not build.
    #[error("{0}")]
    Gates(#[from] compiler::spec::SpecError),
    /// Keys could not be dealt.
    #[error("{0}")]
    Deal(engine::EngineError),
    /// The model cannot run the descriptor (an encoder asked to generate).
    #[error("{0}")]
    Unsupported(String),
    /// The model has fewer layers than the bundles.
    #[error("the model has {have} layers, the bundles {want}")]
    Layers {
        /// The model's.
        have: usize,
        /// The descriptor's.
        want: u32,
    },
}

impl From<EngineError> for ProgramError {
    fn from(e: EngineError) -> ProgramError {
        ProgramError::Deal(e)
    }
}
