//! `fusefss bench model`: a whole model run securely, both servers in one process.

use clap::Args;

use crate::model::{ImplChoice, ModelName, ModelRow, load, run};

/// Arguments of `fusefss bench model`.
#[derive(Args)]
pub struct ModelBenchArgs {
    /// Model.
    #[arg(long, value_enum, default_value = "bert-tiny")]
    model: ModelName,
    /// Sequence length (the default text's tokens, repeated or cut).
    #[arg(long, default_value_t = 128)]
    seq: usize,
    /// Use only the first L layers.
    #[arg(long)]
    layers: Option<usize>,
    /// Implementation of the nonlinear layers.
    #[arg(long = "impl", value_enum, default_value = "fusefss")]
    implementation: ImplChoice,
    /// Print one JSON object per line.
    #[arg(long)]
    json: bool,
}

pub fn run_bench(a: ModelBenchArgs) -> anyhow::Result<()> {
    let loaded = load(a.model, a.layers)?;
    let ids = loaded.tokens(None, Some(a.seq))?;
    let (g, x, float_out) = loaded.prepare(&ids)?;
    let mut rng = fss::rng::os_rng()?;
    for imp in a.implementation.impls() {
        let o = run(&g, &x, &float_out, imp, &mut rng, |_, _| {})?;
        let row = ModelRow::new(a.model, imp, &g, loaded.layers(), &o);
        if a.json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "{} {} seq {} layers {}: online {:.0} ms, keygen {:.0} ms, key {:.1} MB, comm {:.1} MB, {} rounds, \
                 exact {}, max |err| vs f64 {:.2e}, cosine {:.6}",
                row.model,
                row.implementation,
                row.seq,
                row.layers,
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
        }
    }
    Ok(())
}
