//! Errors of the engine.

use thiserror::Error;

/// Why a program could not be built, dealt or run.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The program does not type-check.
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    /// A compiled operator could not be built.
    #[error("operator: {0}")]
    Spec(#[from] compiler::SpecError),
    /// A gate failed (during key generation: at which node).
    #[error("node {node}: {source}")]
    Gate {
        /// The node, if known.
        node: usize,
        /// The failure.
        source: gates::GateError,
    },
    /// The online phase failed.
    #[error("online: {0}")]
    Online(#[from] gates::GateError),
    /// A key could not be decoded.
    #[error("key: {0}")]
    Decode(#[from] fss::DecodeError),
    /// The dealer was asked to deal in a way that would leak.
    #[error("dealer: {0}")]
    Dealer(String),
}

impl EngineError {
    pub(crate) fn at(node: usize, source: gates::GateError) -> EngineError {
        EngineError::Gate { node, source }
    }

    pub(crate) fn program(node: usize, msg: String) -> EngineError {
        EngineError::Graph(crate::graph::GraphError { node, msg })
    }
}
