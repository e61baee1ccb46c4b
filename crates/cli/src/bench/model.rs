//! `fusefss bench model`: a whole model run securely, both servers in one process.

use clap::Args;

use crate::model::{
    ImplChoice, KeysArgs, Link, ModelName, ModelRow, TransportChoice, load_model, reset_peak_rss, run_with,
};

pub use crate::model::NetChoice;

/// Arguments of `fusefss bench model`.
#[derive(Args)]
pub struct ModelBenchArgs {
    /// Model.
    #[arg(long, default_value = "bert-tiny")]
    model: ModelName,
    /// A Hugging Face model folder instead of a built-in model (`config.json` naming a
    /// BertModel, GPT2LMHeadModel or LlamaForCausalLM, `model.safetensors`, `tokenizer.json`).
    #[arg(long, conflicts_with = "model")]
    model_dir: Option<std::path::PathBuf>,
    /// Sequence length (the default text's tokens, repeated or cut).
    #[arg(long, default_value_t = 128)]
    seq: usize,
    /// Use only the first L layers.
    #[arg(long)]
    layers: Option<usize>,
    /// Implementation of the nonlinear layers.
    #[arg(long = "impl", value_enum, default_value = "fusefss")]
    implementation: ImplChoice,
    /// How the two servers talk: an in-memory channel, loopback TCP, or loopback TLS.
    #[arg(long, value_enum, default_value = "mem")]
    transport: TransportChoice,
    /// Simulated network on the server link (latency per message and bandwidth).
    #[arg(long, value_enum, default_value = "none")]
    net: NetChoice,
    /// Timed runs per implementation (fresh keys each; the implementations alternate run by
    /// run); `online_ms` is their median, `online_ms_runs` lists them.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Untimed runs per implementation first: servers answer query after query, and the first
    /// query of a process also pays for starting threads and faulting in working memory.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    #[command(flatten)]
    keys: KeysArgs,
    /// Print one JSON object per line.
    #[arg(long)]
    json: bool,
}

pub fn run_bench(a: ModelBenchArgs) -> anyhow::Result<()> {
    for row in rows(&a, |_, _| {})? {
        if a.json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "{} {} seq {} layers {} ({}, net {}): online {:.0} ms, keygen {:.0} ms, key {:.1} MB, comm {:.1} MB, {} rounds, \
             exact {}, max |err| vs f64 {:.2e}, cosine {:.6}",
                row.model,
                row.implementation,
                row.seq,
                row.layers,
                row.transport,
                row.net,
                row.online_ms,
                row.keygen_ms,
                row.key_bytes as f64 / 1e6,
                row.comm_bytes as f64 / 1e6,
                row.rounds,
                row.exact,
                row.max_abs_err_vs_float,
                row.cosine_vs_float
            );
            let parts: Vec<String> =
                row.time_by_layer_ms.iter().map(|(l, t)| format!("{l} {t:.0}")).collect();
            println!("  server time by layer (ms): {}", parts.join(", "));
            let parts: Vec<String> =
                row.key_bytes_by_layer.iter().map(|(l, b)| format!("{l} {:.1}", *b as f64 / 1e6)).collect();
            println!("  key by layer (MB): {}", parts.join(", "));
            let parts: Vec<String> = row
                .deal_cpu_ms_by_layer
                .iter()
                .map(|(l, t)| {
                    let enc =
                        row.encode_cpu_ms_by_layer.get(l).map_or(String::new(), |e| format!(" + {e:.0}"));
                    format!("{l} {t:.0}{enc}")
                })
                .collect();
            println!("  dealer CPU by layer (ms, keys + encoding): {}", parts.join(", "));
        }
    }
    Ok(())
}

/// The rows `bench model` prints, one per implementation; `progress(done, total)` counts
/// the runs (warm-up and timed).
pub fn rows(a: &ModelBenchArgs, mut progress: impl FnMut(usize, usize)) -> anyhow::Result<Vec<ModelRow>> {
    let (loaded, name) = load_model(a.model, a.model_dir.as_deref(), a.layers)?;
    let ids = loaded.tokens(None, Some(a.seq))?;
    let (g, x, float_out) = loaded.prepare(&ids)?;
    let mut rng = fss::rng::os_rng()?;
    anyhow::ensure!(a.reps >= 1, "--reps must be at least 1");
    let impls = a.implementation.impls();
    let link = Link { transport: a.transport, net: a.net.sim() };
    let names = (a.transport.name(), a.net.name());
    let (keys, temp) = a.keys.resolve();
    let mut runs: Vec<Vec<ModelRow>> = impls.iter().map(|_| vec![]).collect();
    let total = (a.warmup + a.reps) * impls.len();
    let result = (|| -> anyhow::Result<()> {
        for rep in 0..a.warmup + a.reps {
            for (i, &imp) in impls.iter().enumerate() {
                reset_peak_rss();
                let o = run_with(&g, &x, &float_out, imp, &mut rng, |_, _| {}, link, &keys)?;
                if rep >= a.warmup {
                    runs[i].push(ModelRow::new(&name, imp, &g, loaded.layers(), &o, names));
                }
                progress(rep * impls.len() + i + 1, total);
            }
        }
        Ok(())
    })();
    if let Some(d) = temp {
        let _ = std::fs::remove_dir_all(d);
    }
    result?;
    let mut out = Vec::with_capacity(runs.len());
    for mut rows in runs {
        let peak = rows.iter().map(|r| r.peak_rss_bytes).max().unwrap_or(0);
        // The median run's row (its layer times), with every run's online and key generation
        // times and their medians: one run's key generation varies by a third on this VM
        // (fresh pages for the keys), so it is a median like the online time.
        let times: Vec<f64> = rows.iter().map(|r| r.online_ms).collect();
        let keygen: Vec<f64> = rows.iter().map(|r| r.keygen_ms).collect();
        // The dealer's CPU by layer: each layer's median over the runs.
        let by_layer = |pick: fn(&ModelRow) -> &std::collections::BTreeMap<&'static str, f64>| {
            let mut all: std::collections::BTreeMap<&'static str, Vec<f64>> = Default::default();
            rows.iter().flat_map(|r| pick(r).iter()).for_each(|(l, t)| all.entry(*l).or_default().push(*t));
            all.into_iter().map(|(l, t)| (l, super::median(t))).collect()
        };
        let (deal_cpu, encode_cpu) =
            (by_layer(|r| &r.deal_cpu_ms_by_layer), by_layer(|r| &r.encode_cpu_ms_by_layer));
        rows.sort_by(|a, b| a.online_ms.total_cmp(&b.online_ms));
        let mut row = rows.swap_remove(rows.len() / 2);
        (row.deal_cpu_ms_by_layer, row.encode_cpu_ms_by_layer) = (deal_cpu, encode_cpu);
        row.online_ms = super::median(times.clone());
        row.online_ms_runs = times;
        row.keygen_ms = super::median(keygen.clone());
        row.keygen_ms_runs = keygen;
        row.peak_rss_bytes = peak;
        out.push(row);
    }
    Ok(out)
}
