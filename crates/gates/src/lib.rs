//! Masked-wire gates: the SIGMA-style baseline protocols and the sub-protocols the FuseFSS
//! compiler reuses (docs/design/brief.md §3, §6).
//!
//! Every wire carries a secret value `x` and a dealer-chosen one-time mask `r`; the servers
//! hold the public masked value `x̂ = x + r mod 2^n`. A gate ([`Gate`]) is a params type, a
//! key type, a dealer `keygen` (input and output masks in, both parties' keys out), a party
//! `eval` (key and public masked inputs in; it opens masked values through [`Ctx`] and
//! returns the masked output) and a plaintext `reference` that defines the exact result.
//!
//! | module | gates |
//! |---|---|
//! | [`arith`] | elementwise product, square, masked × masked matrix product (alone or batched) |
//! | [`select`] | bit × value (select), bit-to-arithmetic |
//! | [`cmp`] | DReLU, ReLU, interval test, row max |
//! | [`shift`] | truncate-reduce, truncate-with-slack, sign/zero extension, exact ARS/LRS |
//! | [`carry_table`] | truncate-with-slack, its carry read from XOR-shared truth tables (FuseFSS) |
//! | [`lut`] | table lookup by a full-domain 1-bit DPF |
//! | [`softmax`] | softmax, with and without a causal mask |
//! | [`norm`] | row sum of squares, LayerNorm, RMSNorm |
//! | [`centre`] | LayerNorm's mean and centred sums of squares in one round (FuseFSS) |
//! | [`gain`] | a normalisation's gain and bias between two truncations, the first's carry deferred (FuseFSS) |
//! | [`residual`] | residual sum and RMSNorm, with the truncation deferred (FuseFSS) or not |
//! | [`rsqrt`] | reciprocal square root (pseudo-float index + 13-bit table) |
//! | [`nonlinear`] | clip, DCF truncate-reduce, GeLU/SiLU, `e^{−x}`, reciprocal (SIGMA's CPU build) |
//!
//! [`online`] is the sans-IO online runtime, [`harness`] runs a gate between two in-memory
//! parties and counts key bytes, communication and rounds. The gate files share their
//! argument checks and the one-input `Gate` plumbing through a private gate kit (`kit`).

pub mod arith;
pub mod carry_table;
pub mod centre;
pub mod cmp;
pub mod dealer;
pub mod error;
pub mod gain;
pub mod gate;
pub mod harness;
pub mod keyio;
mod kit;
pub mod linalg;
pub mod lut;
pub mod nonlinear;
pub mod norm;
pub mod online;
pub mod residual;
pub mod rsqrt;
pub mod select;
pub mod shift;
pub mod softmax;
pub mod unary;

pub use error::GateError;
pub use gate::Gate;
pub use keyio::GateKey;
pub use online::{Ctx, Session, Stats, join, run_pair};
