//! `fusefss bench paper`: the paper's models with both implementations, in the layout of its
//! Table 1 with our ratios next to the paper's, and BERT-base's sequence sweep
//! (docs/design/paper.md §5.1–§5.3).

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::model::NetChoice;
use crate::model::{
    KeysArgs, KeysAt, Link, ModelName, ModelRow, TransportChoice, load, reset_peak_rss, run_with,
};

/// Arguments of `fusefss bench paper`.
#[derive(Args)]
pub struct PaperBenchArgs {
    /// Models of the table (comma-separated; `--models ''` for none, e.g. only the sweep).
    #[arg(long, value_parser = model_names, default_value = "bert-tiny,bert-base,bert-large,gpt2")]
    models: ModelList,
    /// Networks between the servers (comma-separated): none (in process), lan, wan.
    #[arg(long, value_delimiter = ',', value_enum, default_value = "none,lan")]
    net: Vec<NetChoice>,
    /// Sequence length of the table.
    #[arg(long, default_value_t = 128)]
    seq: usize,
    /// BERT-base's sequence lengths for the sweep (comma-separated; `--sweep ''` for none).
    #[arg(long, value_parser = sequence_lengths, default_value = "32,64,128,256,512")]
    sweep: SeqList,
    /// The sweep's network.
    #[arg(long, value_enum, default_value = "lan")]
    sweep_net: NetChoice,
    /// Runs of at least this many tokens deal while the servers run (`--keys-streamed`):
    /// BERT-base at 512 tokens needs more key bytes than a disk of this size holds.
    #[arg(long, default_value_t = 512)]
    stream_from_seq: usize,
    #[command(flatten)]
    keys: KeysArgs,
    /// One JSON object per run.
    #[arg(long)]
    json: bool,
}

/// Sequence lengths read from a comma-separated list (empty for none).
#[derive(Clone, Debug)]
struct SeqList(Vec<usize>);

/// Models read from a comma-separated list (empty for none).
#[derive(Clone, Debug)]
struct ModelList(Vec<ModelName>);

fn model_names(s: &str) -> Result<ModelList, String> {
    let names = s.split(',').map(str::trim).filter(|t| !t.is_empty());
    Ok(ModelList(names.map(|t| t.parse::<ModelName>().map_err(|e| e.to_string())).collect::<Result<_, _>>()?))
}

fn sequence_lengths(s: &str) -> Result<SeqList, String> {
    let lens = s
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| match t.parse::<usize>() {
            Ok(0) | Err(_) => Err(format!("`{t}` is not a sequence length (a positive integer)")),
            Ok(n) => Ok(n),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SeqList(lens))
}

/// The paper's figures for one model at seq 128 (Table 1 and §5.2): online ms and
/// communication GB (SIGMA, FuseFSS); key GB (2^30 bytes, per party) and key generation s,
/// where it gives them.
struct Paper {
    model: ModelName,
    online_ms: (f64, f64),
    comm_gb: (f64, f64),
    key_gb: Option<(f64, f64)>,
    keygen_s: Option<(f64, f64)>,
}

const PAPER: [Paper; 4] = [
    Paper {
        model: ModelName::BertTiny,
        online_ms: (63.90, 42.60),
        comm_gb: (0.021, 0.018),
        key_gb: None,
        keygen_s: None,
    },
    Paper {
        model: ModelName::BertBase,
        online_ms: (1613.80, 1149.50),
        comm_gb: (1.062, 0.891),
        key_gb: Some((18.076, 13.678)),
        keygen_s: Some((1.32, 1.08)),
    },
    Paper {
        model: ModelName::BertLarge,
        online_ms: (4034.50, 2997.90),
        comm_gb: (2.833, 2.376),
        key_gb: None,
        keygen_s: None,
    },
    Paper {
        model: ModelName::Gpt2,
        online_ms: (1423.90, 1072.70),
        comm_gb: (0.885, 0.777),
        key_gb: None,
        keygen_s: None,
    },
];

/// The paper's BERT-base online times by sequence length (§5.3): SIGMA, FuseFSS, ms.
const PAPER_SWEEP: [(usize, f64, f64); 3] =
    [(32, 642.30, 545.50), (128, 1613.80, 1149.50), (512, 7694.70, 5324.10)];

/// One JSON line: a run, and where it belongs.
#[derive(Serialize)]
struct PaperRow<'a> {
    /// `table` or `sweep`.
    kind: &'static str,
    #[serde(flatten)]
    row: &'a ModelRow,
    /// The paper's figure for this implementation's online time, ms, if it gives one.
    paper_online_ms: Option<f64>,
    /// The paper's communication, bytes (2^30 per GB), if it gives one.
    paper_comm_bytes: Option<f64>,
    /// The paper's key size, bytes, if it gives one.
    paper_key_bytes: Option<f64>,
}

const GIB: f64 = (1u64 << 30) as f64;

pub fn run(a: PaperBenchArgs) -> anyhow::Result<()> {
    let runs = 2 * (a.models.0.len() * a.net.len() + a.sweep.0.len());
    let bar = ProgressBar::new(runs as u64);
    bar.set_style(
        ProgressStyle::with_template("bench paper [{bar:30}] {pos}/{len} runs, {elapsed} (eta {eta}) {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let (keys, temp) = a.keys.resolve();
    let result = run_all(&a, &keys, &bar);
    bar.finish_and_clear();
    if let Some(d) = temp {
        let _ = std::fs::remove_dir_all(d);
    }
    result
}

/// SIGMA's and FuseFSS's rows for one model, sequence length and network.
fn pair(
    model: ModelName,
    loaded: &models::registry::Loaded,
    seq: usize,
    net: NetChoice,
    keys: &KeysAt,
    bar: &ProgressBar,
) -> anyhow::Result<[ModelRow; 2]> {
    let ids = loaded.tokens(None, Some(seq))?;
    let (g, x, float_out) = loaded.prepare(&ids)?;
    let mut rng = fss::rng::os_rng()?;
    let link = Link { transport: TransportChoice::Mem, net: net.sim() };
    let mut one = |imp: engine::Impl| -> anyhow::Result<ModelRow> {
        bar.set_message(format!("{model} seq {seq} net {} {imp}", net.name()));
        reset_peak_rss();
        let o = run_with(&g, &x, &float_out, imp, &mut rng, |_, _| {}, link, keys)?;
        bar.inc(1);
        Ok(ModelRow::new(model.name(), imp, &g, loaded.layers(), &o, ("mem", net.name())))
    };
    Ok([one(engine::Impl::Sigma)?, one(engine::Impl::Fusefss)?])
}

fn ratio(ours: f64, theirs: f64) -> String {
    format!("{:.2}×", ours / theirs)
}

fn change(sigma: f64, fusefss: f64) -> String {
    format!("{:+.0} %", 100.0 * (fusefss / sigma - 1.0))
}

fn run_all(a: &PaperBenchArgs, disk: &KeysAt, bar: &ProgressBar) -> anyhow::Result<()> {
    let keys_for = |seq: usize| if seq >= a.stream_from_seq { KeysAt::Stream } else { disk.clone() };
    let mut lines = vec![];
    for &model in &a.models.0 {
        let loaded = load(model, None)?;
        let paper = PAPER.iter().find(|p| p.model == model && a.seq == 128);
        for &net in &a.net {
            let [s, f] = pair(model, &loaded, a.seq, net, &keys_for(a.seq), bar)?;
            if a.json {
                for (r, i) in [(&s, 0), (&f, 1)] {
                    let pick = |t: (f64, f64)| if i == 0 { t.0 } else { t.1 };
                    let row = PaperRow {
                        kind: "table",
                        row: r,
                        paper_online_ms: paper.map(|p| pick(p.online_ms)),
                        paper_comm_bytes: paper.map(|p| pick(p.comm_gb) * GIB),
                        paper_key_bytes: paper.and_then(|p| p.key_gb).map(|k| pick(k) * GIB),
                    };
                    bar.suspend(|| println!("{}", serde_json::to_string(&row).unwrap_or_default()));
                }
                continue;
            }
            let p = |f: &dyn Fn(&Paper) -> Option<String>| {
                paper.and_then(f).map_or(String::new(), |v| format!("; paper {v}"))
            };
            lines.push(format!(
                "{:<10} {:<4} online {:>9.0} / {:>9.0} ms ({} faster{})  comm {:.3} / {:.3} GB ({}{})  rounds {} / {} ({})  \
                 key {:.2} / {:.2} GB ({}{})  keygen {:.1} / {:.1} s ({}{})  exact {}/{}  peak {:.1} GB",
                model.name(),
                net.name(),
                s.online_ms,
                f.online_ms,
                ratio(s.online_ms, f.online_ms),
                p(&|p| Some(ratio(p.online_ms.0, p.online_ms.1))),
                s.comm_bytes as f64 / GIB,
                f.comm_bytes as f64 / GIB,
                change(s.comm_bytes as f64, f.comm_bytes as f64),
                p(&|p| Some(change(p.comm_gb.0, p.comm_gb.1))),
                s.rounds,
                f.rounds,
                ratio(f.rounds as f64, s.rounds as f64),
                s.key_bytes as f64 / GIB,
                f.key_bytes as f64 / GIB,
                change(s.key_bytes as f64, f.key_bytes as f64),
                p(&|p| p.key_gb.map(|k| change(k.0, k.1))),
                s.keygen_ms / 1e3,
                f.keygen_ms / 1e3,
                change(s.keygen_ms, f.keygen_ms),
                p(&|p| p.keygen_s.map(|k| change(k.0, k.1))),
                s.exact,
                f.exact,
                s.peak_rss_bytes.max(f.peak_rss_bytes) as f64 / GIB,
            ));
            bar.suspend(|| println!("{}", lines.last().map_or("", String::as_str)));
        }
    }
    if !a.sweep.0.is_empty() {
        let loaded = load(ModelName::BertBase, None)?;
        if !a.json {
            bar.suspend(|| {
                println!(
                    "\nBERT-base by sequence length (net {}; SIGMA / FuseFSS online):",
                    a.sweep_net.name()
                )
            });
        }
        for &seq in &a.sweep.0 {
            let keys = keys_for(seq);
            let [s, f] = pair(ModelName::BertBase, &loaded, seq, a.sweep_net, &keys, bar)?;
            let paper = PAPER_SWEEP.iter().find(|p| p.0 == seq);
            if a.json {
                for (r, pick) in [(&s, paper.map(|p| p.1)), (&f, paper.map(|p| p.2))] {
                    let row = PaperRow {
                        kind: "sweep",
                        row: r,
                        paper_online_ms: pick,
                        paper_comm_bytes: None,
                        paper_key_bytes: None,
                    };
                    bar.suspend(|| println!("{}", serde_json::to_string(&row).unwrap_or_default()));
                }
                continue;
            }
            let line = format!(
                "  seq {seq:>3}: {:>9.0} / {:>9.0} ms ({}{})  key {:.2} / {:.2} GB  keys {}  exact {}/{}",
                s.online_ms,
                f.online_ms,
                change(s.online_ms, f.online_ms),
                paper.map_or(String::new(), |p| format!("; paper {}", change(p.1, p.2))),
                s.key_bytes as f64 / GIB,
                f.key_bytes as f64 / GIB,
                keys.name(),
                s.exact,
                f.exact,
            );
            bar.suspend(|| println!("{line}"));
        }
    }
    Ok(())
}
