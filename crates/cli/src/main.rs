//! `fusefss`: two-server private inference with function secret sharing.

use clap::{Parser, Subcommand};

/// mimalloc keeps freed memory for reuse: each layer's large buffers (tens of MB per gate)
/// would otherwise be mapped, page-faulted and unmapped afresh by the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keep freed memory mapped for the next gate instead of returning it to the system after
/// 10 ms (mimalloc's default): a gate's keys and buffers are tens of MB, freed and
/// allocated again gate after gate, and every fresh page costs a fault and the kernel's
/// zeroing (`perf`: 14 % of a five-query bert-tiny run's cycles, half of a one-query run's;
/// online 392–409 → 288–306 ms with keys on disk, CHANGELOG.md). The price is memory: the footprint stays at its high-water mark, and
/// that mark is higher on the largest runs (BERT-large seq 128 7.4 → 9.2 GB, BERT-base seq
/// 512 8.5 → 14.6 GB). `MIMALLOC_PURGE_DELAY` set in the environment wins.
#[allow(unsafe_code)]
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: called first thing in `main`, before any other thread exists (the option
        // setter is not thread safe); the option index is mimalloc v3's `mi_option_purge_delay`.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
}

use fusefss::{bench, compile, demo, deploy, fit, generate};

/// fusefss — private transformer inference with function secret sharing (FuseFSS).
///
/// A client secret-shares its input between two non-colluding servers; the servers evaluate
/// the model on shares with keys a dealer prepared offline. Today this binary measures the
/// FSS primitives and the operators (SIGMA's protocols and FuseFSS-compiled specs) and fits
/// specs; `demo` runs a whole model on one machine; `dealer`, `serve` and `query` run the
/// dealer, the two servers and the client as separate processes over TLS.
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
    /// Validate and compile a spec file and print its costs per element.
    ///
    /// Key bytes, communication and rounds per element, the compile time and the backends
    /// chosen; a spec that is invalid or past the compiler's limits is refused with the
    /// reason and a non-zero exit code. `--json` prints one object either way.
    Compile(compile::CompileArgs),
    /// Fit a spec to a function: `K` uniform intervals of degree `d` over its clamped range.
    ///
    /// Writes the spec as JSON (to `--out` or standard output) and prints its max absolute
    /// error over every representable input of the range, with the compiled operator's key
    /// bytes, communication and rounds, so that accuracy can be traded for cost. Measure it
    /// with `fusefss bench ops --impl fusefss --spec FILE`.
    Fit(fit::FitArgs),
    /// Write key bundles for K queries: OUT/party0/, OUT/party1/ and the TLS certificates
    /// in OUT/tls/.
    ///
    /// Each bundle holds one server's keys for one query of the given model and sequence
    /// length, in a versioned, checksummed file; a server uses each bundle once and never
    /// again. Shows a progress bar.
    Dealer(deploy::dealer::DealerArgs),
    /// Run one of the two servers: answer queries one after another with fresh key bundles.
    ///
    /// Party 0 connects to party 1 (`--peer`); both listen for the client. All connections
    /// use TLS with the dealer's pinned certificates. A failed query is reported to the
    /// client and the server goes on with the next one; a used bundle is never used again,
    /// also after a crash or restart.
    Serve(deploy::server::ServeArgs),
    /// Query the two servers: embed and secret-share the input, print the reconstructed
    /// output.
    ///
    /// With `--check`, recompute the plaintext fixed-point result locally and report
    /// `matches_plaintext`; with `--json`, print one JSON object.
    Query(deploy::client::QueryArgs),
    /// Generate text privately, token by token, in one process (dealer and both servers).
    ///
    /// The prefill runs over the prompt; each new token is one decode program over the KV
    /// cache, which the servers keep as masked values and never open. The client truncates
    /// the LM head's output, picks the token (greedy, or `--temperature` / `--top-p`), and
    /// shares its embedding for the next step. Prints every step's cost and whether it
    /// equals the plaintext fixed-point model.
    Generate(generate::GenerateArgs),
    /// Run the deployment under random faults and print one JSON object.
    ///
    /// Deals bundles, starts both servers as processes, and runs `--queries` queries while
    /// killing and restarting servers, sending half queries, killing clients between their
    /// two sends, and holding idle, garbage and concurrent connections. Reports `queries`,
    /// `faults`, `ok`, `failed`, `bundles_spent`, `bundles_reused`, `max_server_rss_bytes`
    /// and `servers_up`; fails if an unfaulted query failed or a bundle was used twice.
    Soak(deploy::soak::SoakArgs),
}

fn main() -> anyhow::Result<()> {
    keep_freed_memory();
    let result = match Cli::parse().command {
        Command::Bench(args) => bench::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Compile(args) => compile::run(args),
        Command::Fit(args) => fit::run(args),
        Command::Dealer(args) => deploy::dealer::run(args),
        Command::Serve(args) => deploy::server::run(args),
        Command::Query(args) => deploy::client::run(args),
        Command::Soak(args) => deploy::soak::run(args),
        Command::Generate(args) => generate::run(args),
    };
    // Spent key vectors kept for the next keys (`fss::recycle`) are wiped before exit.
    fss::recycle::wipe_all();
    result
}
