//! Function secret sharing primitives for two-server inference.
//!
//! A dealer splits a function `f` into two keys; each server evaluates its key on public
//! points, and the two outputs are shares of `f` at those points. Neither key alone reveals
//! anything about `f`'s secret point.
//!
//! | module | what |
//! |---|---|
//! | [`ring`] | `Z_{2^n}` (1 ≤ n ≤ 64) in `u64`, fixed-point encode/decode |
//! | [`share`] | [`Party`], additive and XOR share types |
//! | [`prg`] | fixed-key AES σ-MMO hash, batched (docs/design/fss-building-blocks.md §2) |
//! | [`dpf`] | BGI16 point function with `ℓ`-bit output, full-domain evaluation (§3) |
//! | [`bitdpf`] | 1-bit DPF with early termination; `=`, `<`, `>` by prefix parity (§3.3, §4); per-point, sorted and window walks |
//! | [`compare`] | one key per masked wire answering many public thresholds (§6.1) |
//! | [`dcf`] | BCG+21 comparison function with `K`-word vector payloads (§5) |
//! | [`adpf`] | arithmetic DPF, early termination, `K`-word payloads, for lookup tables (§3.3) |
//! | [`codec`] | bit-packed, versioned, checksummed key encoding |
//! | [`pad`] | share words expanded from a seed (seeded key halves) |
//! | [`words`] | runs of key words, owned or read in place from a bundle's section |
//! | [`recycle`] | spent key vectors kept for the next keys to overwrite |
//! | [`rng`] | the dealer's OS-seeded CSPRNG |
//!
//! Keys come in batches (`DpfKeys`, `BitDpfKeys`, `DcfKeys`, `AdpfKeys`): many keys of one
//! shape, stored level-major so that an evaluation walks all of them level by level and every
//! AES call covers a whole tree level. Batches above 256 lanes run on the rayon pool.
//!
//! ```
//! use fss::{dcf, rng::SeedableRng, share::AddShare};
//! let mut rng = fss::rng::DealerRng::seed_from_u64(7); // tests only: use rng::os_rng()
//! let params = dcf::DcfParams::new(16, 64, 1).unwrap();
//! // Two keys: f_0(x) = 42·1{x < 1000}, f_1(x) = 7·1{x < 3}.
//! let (k0, k1) = dcf::keygen(params, &[1000, 3], &[42, 7], &mut rng).unwrap();
//! let points = [999, 3];
//! let (mut y0, mut y1) = ([AddShare::default(); 2], [AddShare::default(); 2]);
//! k0.eval(&points, &mut y0).unwrap();
//! k1.eval(&points, &mut y1).unwrap();
//! assert_eq!(AddShare::reconstruct(y0[0], y1[0], 64), 42);
//! assert_eq!(AddShare::reconstruct(y0[1], y1[1], 64), 0);
//! ```

pub mod adpf;
pub mod bitdpf;
pub mod codec;
pub mod compare;
pub mod dcf;
pub mod dpf;
pub mod error;
mod fields;
pub mod packed;
pub mod pad;
pub mod prg;
pub mod recycle;
pub mod ring;
pub mod rng;
pub mod share;
mod tree;
mod vaes;
pub mod walk;
pub mod wipe;
pub mod words;

pub use error::{DecodeError, FssError};
pub use ring::{FixedPoint, Ring};
pub use share::{AddShare, Party, XorBit};
