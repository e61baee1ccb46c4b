//! Typed errors of the gates: local misuse, a misbehaving or desynchronised peer, bad keys.

use thiserror::Error;

/// Why a gate could not be dealt or evaluated.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum GateError {
    /// An FSS primitive rejected its inputs.
    #[error(transparent)]
    Fss(#[from] fss::FssError),
    /// A key could not be decoded.
    #[error("key decoding failed: {0}")]
    Decode(#[from] fss::DecodeError),
    /// Inputs, masks or keys of different lengths were combined.
    #[error("length mismatch: {what}: expected {expected}, got {actual}")]
    Length {
        /// What was being checked.
        what: &'static str,
        /// The length the other arguments imply.
        expected: usize,
        /// The length received.
        actual: usize,
    },
    /// Parameters that describe no valid gate.
    #[error("invalid gate parameters: {0}")]
    Params(String),
    /// A key belongs to the other party or to another gate shape.
    #[error("key does not fit: {0}")]
    KeyMismatch(&'static str),
    /// The peer's message has the wrong size for this round: it is misbehaving or runs a
    /// different program.
    #[error("peer message for round {round} has {actual} bytes, expected {expected}")]
    PeerMessage {
        /// Round number (from 1).
        round: u64,
        /// Bytes this party expected.
        expected: usize,
        /// Bytes received.
        actual: usize,
    },
    /// The two parties' programs diverged (one finished while the other still exchanges).
    #[error("the parties' protocols diverged: {0}")]
    Desync(&'static str),
    /// The transport failed.
    #[error("transport: {0}")]
    Transport(String),
    /// The keys could not be read (a missing, corrupted or mismatched key bundle).
    #[error("keys: {0}")]
    Keys(String),
}

/// Check that `actual == expected`.
pub(crate) fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<(), GateError> {
    if expected != actual {
        return Err(GateError::Length { what, expected, actual });
    }
    Ok(())
}
