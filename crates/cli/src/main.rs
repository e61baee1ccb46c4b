//! `fusefss`: two-server private inference with function secret sharing.

use clap::{Parser, Subcommand};

mod bench;

/// fusefss — private transformer inference with function secret sharing (FuseFSS).
///
/// A client secret-shares its input between two non-colluding servers; the servers evaluate
/// the model on shares with keys a dealer prepared offline. Today this binary measures the
/// FSS primitives; the later commands (demo, dealer, serve, query, fit) arrive with their
/// crates.
#[derive(Parser)]
#[command(name = "fusefss", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure key sizes, key generation and evaluation speed.
    ///
    /// Results are per key or per evaluated point, with the AES floor measured in the same
    /// run. Use `--json` for one JSON object per line.
    Bench(bench::BenchArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Bench(args) => bench::run(args),
    }
}
