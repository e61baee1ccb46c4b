//! `fusefss bench fss`: key size, key generation and evaluation speed of the FSS primitives,
//! one thread, against the AES floor measured in the same run.

use std::hint::black_box;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use fss::AddShare;
use fss::adpf::{self, AdpfParams};
use fss::bitdpf::{self, BitDpfParams, CmpShares};
use fss::dcf::{self, DcfParams};
use fss::dpf::{self, DpfParams};
use fss::ring::mask;
use fss::rng::{DealerRng, Rng};
use serde::Serialize;

use super::median;

/// Arguments of `fusefss bench fss`.
#[derive(Args)]
pub struct FssBenchArgs {
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Keys evaluated together in one batch (each at its own point). The default keeps the
    /// batch's key material in cache (2.5 MB for DCF K = 4), so the rows measure the
    /// evaluator against AES; with 8192 the keys stream from memory (see docs/benchmarks.md).
    #[arg(long, default_value_t = 1024)]
    batch: usize,
    /// Timed repetitions per measurement; the median is reported.
    #[arg(long, default_value_t = 7)]
    reps: usize,
}

/// One line of output.
#[derive(Serialize)]
struct Row {
    primitive: &'static str,
    n: u32,
    out_bits: u32,
    payload_words: u32,
    /// One party's key material.
    key_bytes: usize,
    /// Dealer time per key (both parties' keys).
    keygen_ns: f64,
    /// Time per evaluated point, batched, one thread (per table entry for full domain).
    eval_ns: f64,
    aes_blocks_per_eval: f64,
    aes_ns_per_block: f64,
    /// `eval_ns / (aes_blocks_per_eval · aes_ns_per_block)`.
    floor_ratio: f64,
    batch: usize,
    threads: usize,
    /// Early-terminated tree levels (arithmetic DPF rows only).
    #[serde(skip_serializing_if = "Option::is_none")]
    et_levels: Option<u32>,
}

pub fn run(args: FssBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.batch > 0 && args.reps > 0, "--batch and --reps must be positive");
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let rows = pool.install(|| measure_all(&args))?;
    if args.json {
        for r in &rows {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        print_table(&rows);
    }
    Ok(())
}

fn measure_all(args: &FssBenchArgs) -> anyhow::Result<Vec<Row>> {
    let mut rng = fss::rng::os_rng().context("the OS random number generator is unavailable")?;
    let aes = crate::model::aes_ns_per_block(args.reps);
    let mut rows = vec![];
    // (The last: the one-round comparison of the softmax max tree at n = 37, `gates::cmp::ReluDcf`.)
    for (n, ell, kw) in [(50, 64, 1), (50, 64, 4), (37, 64, 1), (25, 27, 2)] {
        rows.push(bench_dcf(DcfParams::new(n, ell, kw)?, args, aes, &mut rng)?);
    }
    for n in [50, 37] {
        rows.push(bench_dpf_lt(BitDpfParams::new(n)?, args, aes, &mut rng)?);
    }
    rows.push(bench_dpf(DpfParams::new(50, 64)?, args, aes, &mut rng)?);
    for n in [8, 13, 16] {
        rows.push(bench_full_domain_arith(DpfParams::new(n, 64)?, args, aes, &mut rng)?);
        rows.push(bench_full_domain_bits(BitDpfParams::new(n)?, args, aes, &mut rng)?);
    }
    for n in [14, 15] {
        rows.push(bench_adpf_full_domain(AdpfParams::new(n, 50, 1, 2)?, args, aes, &mut rng)?);
    }
    Ok(rows)
}

/// Median seconds of `reps` runs of `f`, after one warm-up run.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn random_points(rng: &mut DealerRng, count: usize, bits: u32) -> Vec<u64> {
    (0..count).map(|_| rng.next_u64() & mask(bits)).collect()
}

#[allow(clippy::too_many_arguments)]
fn row(
    primitive: &'static str,
    (n, out_bits, payload_words): (u32, u32, u32),
    key_bytes: usize,
    keygen_ns: f64,
    eval_ns: f64,
    aes_blocks_per_eval: f64,
    aes: f64,
    batch: usize,
) -> Row {
    Row {
        primitive,
        n,
        out_bits,
        payload_words,
        key_bytes,
        keygen_ns,
        eval_ns,
        aes_blocks_per_eval,
        aes_ns_per_block: aes,
        floor_ratio: eval_ns / (aes_blocks_per_eval * aes),
        batch,
        threads: 1,
        et_levels: None,
    }
}

fn bench_dcf(p: DcfParams, args: &FssBenchArgs, aes: f64, rng: &mut DealerRng) -> anyhow::Result<Row> {
    let m = args.batch;
    let alphas = random_points(rng, m, p.domain_bits());
    let betas = random_points(rng, m * p.payload_words() as usize, p.out_bits());
    let keygen = time(args.reps, || {
        black_box(dcf::keygen(p, &alphas, &betas, rng).expect("valid inputs"));
    });
    let (k0, _) = dcf::keygen(p, &alphas, &betas, rng)?;
    let xs = random_points(rng, m, p.domain_bits());
    let mut out = vec![AddShare::default(); m * p.payload_words() as usize];
    let eval = time(args.reps, || k0.eval(&xs, &mut out).expect("valid inputs"));
    let shape = (p.domain_bits(), p.out_bits(), p.payload_words());
    let (kb, ge, ee) = (k0.key_bytes(), keygen * 1e9 / m as f64, eval * 1e9 / m as f64);
    Ok(row("dcf", shape, kb, ge, ee, p.aes_per_eval() as f64, aes, m))
}

fn bench_dpf(p: DpfParams, args: &FssBenchArgs, aes: f64, rng: &mut DealerRng) -> anyhow::Result<Row> {
    let m = args.batch;
    let alphas = random_points(rng, m, p.domain_bits());
    let betas = random_points(rng, m, p.out_bits());
    let keygen = time(args.reps, || {
        black_box(dpf::keygen(p, &alphas, &betas, rng).expect("valid inputs"));
    });
    let (k0, _) = dpf::keygen(p, &alphas, &betas, rng)?;
    let xs = random_points(rng, m, p.domain_bits());
    let mut out = vec![AddShare::default(); m];
    let eval = time(args.reps, || k0.eval(&xs, &mut out).expect("valid inputs"));
    let shape = (p.domain_bits(), p.out_bits(), 1);
    let (kb, ge, ee) = (k0.key_bytes(), keygen * 1e9 / m as f64, eval * 1e9 / m as f64);
    Ok(row("dpf", shape, kb, ge, ee, p.aes_per_eval() as f64, aes, m))
}

fn bench_dpf_lt(p: BitDpfParams, args: &FssBenchArgs, aes: f64, rng: &mut DealerRng) -> anyhow::Result<Row> {
    let m = args.batch;
    let alphas = random_points(rng, m, p.domain_bits());
    let keygen = time(args.reps, || {
        black_box(bitdpf::keygen(p, &alphas, rng).expect("valid inputs"));
    });
    let (k0, _) = bitdpf::keygen(p, &alphas, rng)?;
    let ys = random_points(rng, m, p.domain_bits());
    let mut out = vec![CmpShares::default(); m];
    let eval = time(args.reps, || k0.eval(&ys, &mut out).expect("valid inputs"));
    let shape = (p.domain_bits(), 1, 1);
    let (kb, ge, ee) = (k0.key_bytes(), keygen * 1e9 / m as f64, eval * 1e9 / m as f64);
    Ok(row("dpf_lt", shape, kb, ge, ee, p.aes_per_eval() as f64, aes, m))
}

/// Keys for full-domain rows: enough that each timed run expands ≥ 2^20 entries.
fn full_domain_keys(n: u32) -> usize {
    (1usize << 20 >> n).max(4)
}

fn bench_full_domain_arith(
    p: DpfParams,
    args: &FssBenchArgs,
    aes: f64,
    rng: &mut DealerRng,
) -> anyhow::Result<Row> {
    let keys = full_domain_keys(p.domain_bits());
    let alphas = random_points(rng, keys, p.domain_bits());
    let betas = vec![1; keys];
    let keygen = time(args.reps, || {
        black_box(dpf::keygen(p, &alphas, &betas, rng).expect("valid inputs"));
    });
    let (k0, _) = dpf::keygen(p, &alphas, &betas, rng)?;
    let eval = time(args.reps, || {
        black_box(k0.full_domain(0..keys).expect("small domain"));
    });
    let entries = (keys << p.domain_bits()) as f64;
    let aes_per_entry = 2.0 * ((1u64 << p.domain_bits()) - 1) as f64 / (1u64 << p.domain_bits()) as f64;
    let shape = (p.domain_bits(), p.out_bits(), 1);
    let (kb, ge, ee) = (k0.key_bytes(), keygen * 1e9 / keys as f64, eval * 1e9 / entries);
    Ok(row("dpf_full_domain", shape, kb, ge, ee, aes_per_entry, aes, keys))
}

fn bench_full_domain_bits(
    p: BitDpfParams,
    args: &FssBenchArgs,
    aes: f64,
    rng: &mut DealerRng,
) -> anyhow::Result<Row> {
    let keys = full_domain_keys(p.domain_bits());
    let alphas = random_points(rng, keys, p.domain_bits());
    let keygen = time(args.reps, || {
        black_box(bitdpf::keygen(p, &alphas, rng).expect("valid inputs"));
    });
    let (k0, _) = bitdpf::keygen(p, &alphas, rng)?;
    let eval = time(args.reps, || {
        black_box(k0.full_domain(0..keys).expect("small domain"));
    });
    let entries = (keys << p.domain_bits()) as f64;
    let aes_total = ((2u64 << p.levels()) - 2) as f64;
    let aes_per_entry = aes_total / (1u64 << p.domain_bits()) as f64;
    let shape = (p.domain_bits(), 1, 1);
    let (kb, ge, ee) = (k0.key_bytes(), keygen * 1e9 / keys as f64, eval * 1e9 / entries);
    Ok(row("dpf_full_domain", shape, kb, ge, ee, aes_per_entry, aes, keys))
}

/// The arithmetic DPF's full domain (the lookup tables' hot path) into a reused buffer, per
/// table entry (`2^d·K` words per key).
fn bench_adpf_full_domain(
    p: AdpfParams,
    args: &FssBenchArgs,
    aes: f64,
    rng: &mut DealerRng,
) -> anyhow::Result<Row> {
    let keys = full_domain_keys(p.domain_bits());
    let alphas = random_points(rng, keys, p.domain_bits());
    let betas = random_points(rng, keys * p.payload_words() as usize, p.out_bits());
    let keygen = time(args.reps, || {
        black_box(adpf::keygen(p, &alphas, &betas, rng).expect("valid inputs"));
    });
    let (k0, _) = adpf::keygen(p, &alphas, &betas, rng)?;
    let entries = keys << p.domain_bits();
    let mut out = vec![0u64; entries * p.payload_words() as usize];
    let eval = time(args.reps, || k0.full_domain_into(0..keys, &mut out).expect("valid range"));
    let aes_per_entry = p.aes_full_domain() as f64 / (1u64 << p.domain_bits()) as f64;
    let shape = (p.domain_bits(), p.out_bits(), p.payload_words());
    let (kb, ge, ee) = (k0.key_bytes(), keygen * 1e9 / keys as f64, eval * 1e9 / entries as f64);
    let r = row("adpf_full_domain", shape, kb, ge, ee, aes_per_entry, aes, keys);
    Ok(Row { et_levels: Some(p.et_levels()), ..r })
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<16} {:>3} {:>4} {:>3} {:>9} {:>11} {:>10} {:>9} {:>8} {:>7}",
        "primitive", "n", "out", "K", "key B", "keygen ns", "eval ns", "AES/eval", "AES ns", "×floor"
    );
    for r in rows {
        println!(
            "{:<16} {:>3} {:>4} {:>3} {:>9} {:>11.1} {:>10.2} {:>9.3} {:>8.3} {:>7.2}",
            r.primitive,
            r.n,
            r.out_bits,
            r.payload_words,
            r.key_bytes,
            r.keygen_ns,
            r.eval_ns,
            r.aes_blocks_per_eval,
            r.aes_ns_per_block,
            r.floor_ratio
        );
    }
    println!(
        "eval ns: per point (full domain: per table entry); one thread; batch of keys as listed in --json; \
         adpf_full_domain: e = 2, into a reused buffer"
    );
}
