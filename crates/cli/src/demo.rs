//! `fusefss demo`: one secure inference on one machine, shown next to the plaintext result.

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::model::{self, ImplChoice, KeysArgs, KeysAt, Link, Loaded, ModelName, load_model};

/// Arguments of `fusefss demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// Model (the default needs no download).
    #[arg(long, default_value = "bert-tiny")]
    model: ModelName,
    /// A Hugging Face model folder instead of a built-in model (`config.json` naming a
    /// BertModel, GPT2LMHeadModel or LlamaForCausalLM, `model.safetensors`, `tokenizer.json`).
    #[arg(long, conflicts_with = "model")]
    model_dir: Option<std::path::PathBuf>,
    /// The client's text.
    #[arg(long)]
    text: Option<String>,
    /// Sequence length: the text's tokens repeated or cut to this many.
    #[arg(long)]
    seq: Option<usize>,
    /// Use only the first L layers.
    #[arg(long)]
    layers: Option<usize>,
    /// Implementation of the nonlinear layers.
    #[arg(long = "impl", value_enum, default_value = "fusefss")]
    implementation: ImplChoice,
    #[command(flatten)]
    keys: KeysArgs,
}

pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    let (loaded, name) = load_model(a.model, a.model_dir.as_deref(), a.layers)?;
    let ids = loaded.tokens(a.text.as_deref(), a.seq)?;
    let (g, x, float_out) = loaded.prepare(&ids)?;
    println!(
        "{}: {} layers, {} tokens, ring Z_2^{} at scale 2^-{}; {} nodes ({} interactive)",
        name,
        loaded.layers(),
        ids.len(),
        g.n,
        g.f,
        g.nodes.len(),
        g.gates()
    );
    let mut rng = fss::rng::os_rng()?;
    let (keys, temp) = a.keys.resolve();
    let result = show_runs(&a, &loaded, &g, &x, &float_out, &mut rng, &keys);
    if let Some(d) = temp {
        let _ = std::fs::remove_dir_all(d);
    }
    result
}

fn show_runs(
    a: &DemoArgs,
    loaded: &Loaded,
    g: &engine::Graph,
    x: &[u64],
    float_out: &[f64],
    rng: &mut fss::rng::DealerRng,
    keys: &KeysAt,
) -> anyhow::Result<()> {
    for imp in a.implementation.impls() {
        let bar = ProgressBar::new(g.nodes.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("dealer ({msg}) [{bar:30}] {pos}/{len} layers, {elapsed}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.set_message(imp.name());
        let o = model::run_with(
            g,
            x,
            float_out,
            imp,
            rng,
            |i, _| bar.set_position(i as u64),
            Link::default(),
            keys,
        )?;
        bar.finish_and_clear();
        let secure = o.decoded(g);
        let plain: Vec<f64> = o.plain.iter().map(|&v| engine::blocks::dequantize(v, g.f, g.n)).collect();
        let show = |v: &[f64]| v.iter().take(6).map(|x| format!("{x:+.4}")).collect::<Vec<_>>().join(" ");
        println!("\n[{}]", imp.name());
        println!("  secure output    {} … ({} values)", show(&secure), secure.len());
        println!("  plaintext output {} …", show(&plain));
        println!("  f64 model        {} …", show(&o.float));
        println!(
            "  secure == plaintext fixed point: {}   cosine with f64: {:.6}   max |err|: {:.2e}",
            if o.exact() { "yes, on every value" } else { "NO" },
            o.cosine(g),
            o.max_abs_err(g)
        );
        let st = &o.runs[0].stats;
        println!(
            "  online {:.2} s (two servers, two threads), keygen {:.2} s, key {:.1} MB per server, \
             communication {:.1} MB per server, {} rounds",
            o.online.as_secs_f64(),
            o.deal.time.as_secs_f64(),
            o.deal.key_bits as f64 / 8e6,
            st.comm_bytes() as f64 / 1e6,
            st.rounds
        );
        if let Loaded::Gpt2(w, ..) = &loaded {
            let logits = models::float::gpt2_logits_last(w, &secure)?;
            let best =
                logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i).unwrap_or(0);
            println!("  next token (from the secure hidden state): id {best}");
        }
        if !o.exact() {
            anyhow::bail!("the secure output differs from the plaintext reference");
        }
    }
    Ok(())
}
