//! The FuseFSS compiler: operator specifications compiled to one opening of the masked
//! input, a packed comparison, an interval lookup and a post-processing circuit `Φ`
//! (docs/design/brief.md §5; docs/design/paper.md §2–3; docs/design/compiled-gates.md).
//!
//! | module | what |
//! |---|---|
//! | [`spec`] | [`OperatorSpec`]: intervals, polynomial pieces, Boolean atoms, `Φ`; JSON; validation; the plaintext reference |
//! | [`predicate`] | mask-aware rewriting of predicates into comparison shares at public points |
//! | [`sym`] | polynomials over public values and dealer secrets: how `Φ` runs without interaction |
//! | [`program`] | compilation into a mask-independent [`Program`] with a choice of backends: the IR, the lowering, the word builder |
//! | [`gate`] | [`CompiledGate`]: the dealer's keys and the parties' online evaluation, one file per phase (plan, deal, compare, lookup, form, run) |
//! | [`library`] | GeLU, SiLU, sigmoid, tanh, nExp, reciprocal, rsqrt, exact shifts, clip as specs |
//! | [`fit`] | piecewise polynomials fitted to a function, with their error (`fusefss fit`) |
//! | [`composite`] | softmax, LayerNorm and RMSNorm with compiled nonlinearities; the program cache |
//!
//! ```
//! use std::sync::Arc;
//! use compiler::{compile, CompileOptions, CompiledGate, OperatorSpec};
//! use gates::harness;
//! let spec = OperatorSpec::from_json(r#"{
//!     "name": "relu8", "in_bits": 8, "out_bits": 8, "signed": true,
//!     "boundaries": [0, 128], "pieces": [ {"polys": [[0, 1]]}, {"polys": [[0]]} ]
//! }"#).unwrap();
//! let program = Arc::new(compile(&spec, CompileOptions::default()).unwrap());
//! let gate = CompiledGate::new(program, 256);
//! let x: Vec<u64> = (0..256).collect();
//! let mut rng = fss::rng::os_rng().unwrap();
//! let report = harness::run(&gate, &[&x], &mut rng).unwrap();
//! assert!(report.exact());
//! ```

pub mod composite;
pub mod fit;
pub mod gate;
pub mod library;
mod parity;
pub mod predicate;
pub mod program;
pub mod spec;
pub mod sym;
mod word_column;

pub use gate::{CompiledGate, CompiledKey, CompiledShape};
pub use program::{CmpBackend, CompileOptions, Cost, Limits, LookupBackend, Program, compile};
pub use spec::{OperatorSpec, SpecError};
