//! The 1-bit DPF with early termination and the comparisons read from it by prefix parity
//! (SIGMA's layout; docs/design/fss-building-blocks.md §3.3 and §4).
//!
//! A key at point `α` on `n` bits gives XOR shares of `1{y = α}`, `1{y < α}` and `1{y > α}`
//! for any public `y`, all from one walk down the tree. The tree stops `ν = 7` levels early:
//! one 128-bit leaf block holds 128 outputs, so a walk costs `n − 7` AES.
//!
//! Layout for `n > 7` (`L = n − 7`): root seed, `L − 1` levels of (seed CW, `tL`, `tR`) and
//! two 128-bit leaf CWs: `λ + (L − 1)(λ + 2) + 2λ` bits (the `130n − 656` of §8). For
//! `n ≤ 7` the key is XOR shares of the truth table of `j ↦ 1{j = α}` (`2^n` bits).
//!
//! Leaf bit order: output `y` sits at bit `y mod 128` of its leaf block, counted from the
//! least significant bit (as in `docs/design/models/fss_reference_model.py`).
//!
//! Evaluation, on a batch of keys ([`BitDpfKeys`]):
//!
//! | entry point | what |
//! |---|---|
//! | [`BitDpfKeys::eval`], [`BitDpfKeys::eval_indexed`], [`BitDpfKeys::eval_one`] | one point per lane: every key, chosen keys, one key |
//! | [`BitDpfKeys::eval_near`] | a few points per key near its own (within a leaf block), one walk per key |
//! | [`BitDpfKeys::eval_sorted`] | many sorted points per key, one walk of their common prefixes |
//! | [`BitDpfKeys::eval_window`] | equality shares over a window of consecutive points per key |
//! | [`BitDpfKeys::full_domain`] | equality shares at every point of the domain |
//!
//! | module | what |
//! |---|---|
//! | `keys` | [`BitDpfParams`], [`BitDpfKeys`], [`CmpShares`], [`keygen`], the encoding |
//! | `bits` | a leaf block's masks and parities |
//! | `point` | the per-point walk, the near points, the full domain |
//! | `sorted` | the sorted walk |
//! | `window` | the window walk |

mod bits;
mod keys;
mod point;
mod sorted;
mod window;

pub use keys::{BitDpfKeys, BitDpfParams, CmpShares, LEAF_BITS, keygen};
pub use sorted::{sorted_words, unpack_sorted};
