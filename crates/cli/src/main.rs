//! `fusefss`: two-server private inference with function secret sharing.

use clap::{Parser, Subcommand};

mod bench;
mod demo;
mod fit;
mod model;

/// fusefss — private transformer inference with function secret sharing (FuseFSS).
///
/// A client secret-shares its input between two non-colluding servers; the servers evaluate
/// the model on shares with keys a dealer prepared offline. Today this binary measures the
/// FSS primitives and the operators (SIGMA's protocols and FuseFSS-compiled specs) and fits
/// specs; the later commands (demo, dealer, serve, query) arrive with their crates.
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
    /// Run a model securely on one machine and show the result next to the plaintext one.
    ///
    /// The dealer prepares the keys (with a progress bar), the client embeds and secret-
    /// shares its text, both servers run the online phase on two threads, and the client
    /// reconstructs the output. Prints the secure and plaintext outputs, whether they agree,
    /// the time, communication, rounds and key size. No download for the default model.
    Demo(demo::DemoArgs),
    /// Fit a spec to a function: `K` uniform intervals of degree `d` over its clamped range.
    ///
    /// Writes the spec as JSON (to `--out` or standard output) and prints its max absolute
    /// error over every representable input of the range, with the compiled operator's key
    /// bytes, communication and rounds, so that accuracy can be traded for cost. Measure it
    /// with `fusefss bench ops --impl fusefss --spec FILE`.
    Fit(fit::FitArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Bench(args) => bench::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Fit(args) => fit::run(args),
    }
}
