//! Tensor programs over masked fixed-point wires, run by three backends (docs/design/brief.md §3):
//! the plaintext fixed-point reference, the dealer (key generation, node by node) and the
//! online server (sans-IO: it only opens masked values through a [`gates::Ctx`]).
//!
//! | module | what |
//! |---|---|
//! | [`blocks`] | attention, MLP, LayerNorm, pooling as graph fragments over fixed-point weights |
//! | [`cores`] | where an in-process run's threads go: each server on a core of its own |
//! | [`graph`] | [`Graph`]: nodes (linear maps, gathers, truncations, matrix products, softmax, LayerNorm, GeLU) over shaped tensors |
//! | [`layers`] | what each node computes: local maps, and the gates of each [`Impl`] (SIGMA or FuseFSS) |
//! | [`exec`] | dealer, plaintext reference, online server, client input sharing and output reconstruction |
//! | [`run`] | one server's online phase over a message link; both servers in one process |
//! | [`weights`] | public weight matrices in the narrowest type that holds them |
//!
//! Every gate node runs over a whole tensor, so everything a layer computes in parallel
//! (every element, every head) shares its rounds.

pub mod blocks;
pub mod cores;
pub mod error;
pub mod exec;
pub mod graph;
pub mod layers;
pub mod run;
pub mod weights;

pub use error::EngineError;
pub use exec::{
    DealReport, Dealt, KeySink, KeySource, PartyKeys, Split, deal, deal_carried, deal_into, deal_into_split,
    deal_step, online, online_step, plain, plain_step, reconstruct, share_input,
};
pub use graph::{Graph, GraphError, Node, Op, Shape, ValueId};
pub use layers::{DynGate, Impl, NodeGates, build};
pub use run::{PartyRun, on_own_core, run_pair, run_party, run_party_step, run_threads, run_threads_step};
pub use weights::Weights;
