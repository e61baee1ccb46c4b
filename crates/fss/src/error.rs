//! Typed errors of the FSS primitives.

use thiserror::Error;

/// A misuse of a primitive: bad parameters, a point outside the domain, mismatched inputs.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum FssError {
    /// A ring or domain width outside `1..=64`.
    #[error("bit width {0} is outside 1..=64")]
    InvalidWidth(u32),
    /// Parameters that do not describe a valid primitive.
    #[error("invalid parameters: {0}")]
    InvalidParams(&'static str),
    /// An evaluation point (or a key point) does not fit the key's input domain.
    #[error("point {point:#x} is outside the {bits}-bit domain")]
    PointOutOfDomain {
        /// The offending point.
        point: u64,
        /// The domain width `n`.
        bits: u32,
    },
    /// A payload word does not fit the output group `Z_{2^ℓ}`.
    #[error("value {value:#x} does not fit in {bits} bits")]
    ValueOutOfRange {
        /// The offending value.
        value: u64,
        /// The output width `ℓ`.
        bits: u32,
    },
    /// Slices that must have related lengths do not.
    #[error("length mismatch: expected {expected}, got {actual}")]
    LengthMismatch {
        /// The length implied by the other arguments.
        expected: usize,
        /// The length received.
        actual: usize,
    },
    /// Keys evaluated together in one batch have different parameters.
    #[error("keys in one batch have different parameters")]
    MixedParams,
    /// Points that must be sorted (per key, non-decreasing) are not.
    #[error("points for one key are not sorted in non-decreasing order")]
    Unsorted,
    /// A full-domain evaluation over a domain this large would not fit in memory.
    #[error("full-domain evaluation over {bits} bits exceeds the limit of {max} bits")]
    DomainTooLarge {
        /// The key's domain width.
        bits: u32,
        /// The largest supported width.
        max: u32,
    },
    /// A fixed-point value that is not finite or does not fit the ring.
    #[error("fixed-point value {0} is not representable")]
    NotRepresentable(f64),
}

/// Why bytes could not be decoded into a key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ends before the structure does.
    #[error("truncated: need {needed} bytes, have {available}")]
    Truncated {
        /// Bytes the structure needs.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// Bytes remain after the structure.
    #[error("{0} unexpected trailing bytes")]
    TrailingBytes(usize),
    /// The magic bytes do not identify an fss key.
    #[error("not an fss key (bad magic)")]
    BadMagic,
    /// A format version this build does not read.
    #[error("unsupported key format version {found} (this build reads {supported})")]
    UnsupportedVersion {
        /// Version in the input.
        found: u8,
        /// Version this build reads.
        supported: u8,
    },
    /// The key is of another kind than the type asked for.
    #[error("wrong key kind: expected {expected}, found {found}")]
    WrongKind {
        /// Kind asked for.
        expected: &'static str,
        /// Kind found (raw tag).
        found: u8,
    },
    /// The checksum does not match: the bytes were corrupted.
    #[error("checksum mismatch: the key bytes are corrupted")]
    Checksum,
    /// A field holds a value no valid key has.
    #[error("invalid field: {0}")]
    InvalidField(&'static str),
}
