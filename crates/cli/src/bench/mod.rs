//! `fusefss bench …`: measurements printed as a table or as JSON lines.

use clap::{Args, Subcommand};

mod fss;
pub mod model;
pub mod ops;
mod paper;

/// Arguments of `fusefss bench`.
#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchCommand,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// FSS primitives (DPF, 1-bit DPF comparison, DCF, full-domain DPF) on one thread.
    ///
    /// For each primitive: one party's key bytes, key generation time per key, batched
    /// evaluation time per point, AES blocks per evaluation and the AES time per block
    /// measured in the same run, so that `eval_ns / (aes_blocks_per_eval ·
    /// aes_ns_per_block)` is the distance from the AES floor.
    Fss(fss::FssBenchArgs),
    /// Operators (gates) between two in-memory parties, checked against their references.
    ///
    /// Per element: one party's key bytes, bytes sent + received by one party, rounds, dealer
    /// time, the slower party's online time, whether every secure output equals the
    /// plaintext fixed-point reference, and that reference's max error against the f64
    /// function. Use `--json` for one JSON object per line.
    Ops(ops::OpsBenchArgs),
    /// A whole model run securely: dealer, then both servers in one process on two threads.
    ///
    /// Per implementation: online and key-generation time, one party's key bytes, bytes sent +
    /// received by one party, rounds, whether the output equals the plaintext fixed-point
    /// reference, and its error and cosine against the f64 model. Use `--json` for one
    /// JSON object per line.
    Model(model::ModelBenchArgs),
    /// Private generation: the prefill over a prompt, then decode steps over the shared KV
    /// cache, both servers in one process.
    ///
    /// Per implementation: prefill and median per-token online time, key generation, key
    /// bytes (prefill and per token), communication and rounds per token, peak memory,
    /// whether every step equals the plaintext fixed-point model, and how often the
    /// fixed-point argmax equals the f64 model's. Use `--json` for one JSON object per line.
    Generate(crate::generate::GenerateBenchArgs),
    /// The paper's models with both implementations, printed like the paper's Table 1.
    ///
    /// Each model at seq 128 (BERT-tiny, BERT-base, BERT-large, GPT-2 by default) under each
    /// `--net`: SIGMA's and FuseFSS's online time, communication, rounds, key size and key
    /// generation, with our ratios next to the paper's; then BERT-base from seq 32 to 512.
    /// Keys go to disk (a temporary folder) and are streamed back; long runs show a
    /// progress bar. Use `--json` for one JSON object per run.
    Paper(paper::PaperBenchArgs),
}

/// Run a `bench` subcommand.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.what {
        BenchCommand::Fss(a) => fss::run(a),
        BenchCommand::Ops(a) => ops::run(a),
        BenchCommand::Model(a) => model::run_bench(a),
        BenchCommand::Generate(a) => crate::generate::run_bench(a),
        BenchCommand::Paper(a) => paper::run(a),
    }
}

pub use crate::model::median;
