//! Times of the f64 reference: random GPT-2 124M weights and a forward pass at 32 tokens, and
//! all-MiniLM-L6-v2 loading and forward passes at 32 and 128 tokens when it has been fetched.
//!
//! `cargo run --release -p models --example float_timings`

use std::time::{Duration, Instant};

use models::float::{bert_forward, gpt2_embed, gpt2_forward, gpt2_layer, gpt2_logits_last};
use models::paths::minilm_dir;
use models::{BertWeights, Gpt2Config, Gpt2Weights};

/// Median of three runs of `f`.
fn median3(mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..3)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[1]
}

fn main() -> Result<(), models::ModelError> {
    let s = Instant::now();
    let g = Gpt2Weights::random(Gpt2Config::gpt2(), 1)?;
    println!("GPT-2 124M random weights: {:?}", s.elapsed());
    let ids: Vec<u32> = (0..32).map(|i| (i * 1571 + 7) % 50257).collect();
    let mut h = Vec::new();
    let t = median3(|| h = gpt2_forward(&g, &ids).expect("forward"));
    println!("GPT-2 12 layers, 32 tokens: {t:?} (median of 3)");
    let s = Instant::now();
    let logits = gpt2_logits_last(&g, &h)?;
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    println!("GPT-2 logits of the last token: {:?}, max logit {max:.2}", s.elapsed());

    // The size of the residual stream, for choosing fixed-point widths.
    let mut x = gpt2_embed(&g, &ids)?;
    let mut maxes = Vec::new();
    for l in &g.layers {
        x = gpt2_layer(l, &g.config, &x)?;
        maxes.push(format!("{:.1}", x.iter().fold(0.0f64, |m, v| m.max(v.abs()))));
    }
    println!("GPT-2 residual max |x| after each layer: {}", maxes.join(" "));

    drop(g);

    let dir = minilm_dir();
    if !dir.join("model.safetensors").is_file() {
        println!("no {} (run scripts/fetch-models.sh): MiniLM skipped", dir.display());
        return Ok(());
    }
    let s = Instant::now();
    let w = BertWeights::from_safetensors(&dir)?;
    println!("MiniLM load: {:?}", s.elapsed());
    for seq in [32u32, 128] {
        let ids: Vec<u32> = (0..seq).map(|i| 1000 + i * 37).collect();
        let t = median3(|| {
            bert_forward(&w, &ids, None).expect("forward");
        });
        println!("MiniLM forward, {seq} tokens: {t:?} (median of 3)");
    }
    Ok(())
}
