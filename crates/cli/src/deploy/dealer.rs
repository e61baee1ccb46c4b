//! `fusefss dealer`: key bundles for K queries (or K generation sessions), one folder per
//! server, and the TLS certificates of the two servers and the client.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use fss::Party;
use fss::rng::Rng;
use indicatif::{ProgressBar, ProgressStyle};
use service::Descriptor;
use service::bundle::{BundleHeader, BundleId, BundleWriter, Fingerprints, fingerprint};
use service::session::{self, SessionShape};

use crate::model::{ModelName, load};

/// Arguments of `fusefss dealer`.
#[derive(Args)]
pub struct DealerArgs {
    /// Model.
    #[arg(long, default_value = "bert-tiny")]
    model: ModelName,
    /// Sequence length the keys are for (every query then has exactly this many tokens).
    #[arg(long, required_unless_present = "prompt_len", conflicts_with = "prompt_len")]
    seq: Option<usize>,
    /// Generation sessions (llama-tiny, smollm2): the prompt's tokens (every session's
    /// prompt then has exactly this many, chat template included).
    #[arg(long, requires = "max_new_tokens")]
    prompt_len: Option<usize>,
    /// Generation sessions: the tokens each generates at most (its steps: the prefill,
    /// then one decode step per further token).
    #[arg(long, requires = "prompt_len")]
    max_new_tokens: Option<usize>,
    /// Use only the first L layers.
    #[arg(long)]
    layers: Option<usize>,
    /// Key bundles to write: one query (or one generation session) each.
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// Output folder: writes OUT/party0/, OUT/party1/ and OUT/tls/ (certificates are made
    /// once and kept when the folder has them, so that more bundles can be added later).
    #[arg(long)]
    out: PathBuf,
    /// Implementation of the nonlinear layers: fusefss or sigma (a bundle holds keys for one).
    #[arg(long = "impl", default_value = "fusefss")]
    implementation: engine::Impl,
}

pub fn run(a: DealerArgs) -> anyhow::Result<()> {
    let seq = a.seq.or(a.prompt_len).unwrap_or(0);
    if seq == 0 || a.count == 0 || a.max_new_tokens == Some(0) {
        bail!("--seq (or --prompt-len), --max-new-tokens and --count must be positive");
    }
    let loaded = load(a.model, a.layers)?;
    if a.max_new_tokens.is_some() && loaded.llama().is_none() {
        bail!(
            "{} does not generate text: sessions (--prompt-len, --max-new-tokens) are for llama-tiny and smollm2",
            a.model
        );
    }
    let imp = a.implementation;
    let desc = Descriptor {
        model: a.model,
        seq: seq as u32,
        layers: loaded.layers() as u32,
        imp,
        new: a.max_new_tokens.map(|g| g as u32),
    };
    let dirs = [a.out.join("party0"), a.out.join("party1")];
    // Private folders (0700, files 0600 whatever the umask), each marked with its party.
    service::private::create_dir(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    for (d, party) in dirs.iter().zip([Party::P0, Party::P1]) {
        service::store::prepare(d, party).with_context(|| format!("preparing {}", d.display()))?;
    }
    let tls = a.out.join("tls");
    if !tls.join("client.pem").exists() {
        net::tls::generate(&tls)?;
        println!("certificates: {} (server0, server1, client)", tls.display());
    } else {
        // Kept, but owner-only like new ones (a folder from an older build may be 0755).
        service::private::restrict_dir(&tls).with_context(|| format!("restricting {}", tls.display()))?;
        println!("certificates: keeping those in {}", tls.display());
    }
    match loaded.llama().filter(|_| desc.new.is_some()) {
        Some(llama) => deal_sessions(&a, &desc, llama, &dirs),
        None => deal_queries(&a, &desc, &loaded.graph(seq)?, &dirs),
    }
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "dealer [{{bar:30}}] {{pos}}/{{len}} {what}, {{elapsed}} (eta {{eta}}) {{msg}}"
        ))
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar
}

fn done(a: &DealerArgs, t: Instant, bytes: u64, dirs: &[PathBuf; 2]) {
    println!(
        "wrote {} bundle(s) per server in {:.1} s: {:.1} MB each, to {} and {}",
        a.count,
        t.elapsed().as_secs_f64(),
        bytes as f64 / 1e6,
        dirs[0].display(),
        dirs[1].display()
    );
    println!(
        "give party0/ and tls/server0.* to server 0, party1/ and tls/server1.* to server 1, tls/client.* to the client (every party needs the three .pem certificates)"
    );
}

/// What one run of the dealer writes: `a.count` bundles per party for `desc`, over
/// `Z_{2^n}`, of `sections` sections, whose keys `deal_one` makes (it reports its progress in
/// units of the bar).
struct Bundles<'a> {
    desc: &'a Descriptor,
    n: u32,
    fingerprint: [u8; 32],
    sections: usize,
    /// Progress units per bundle, and their name.
    units: (u64, &'static str),
}

/// Write the bundles, one pair at a time, with a progress bar.
fn write_bundles(
    a: &DealerArgs,
    b: &Bundles<'_>,
    dirs: &[PathBuf; 2],
    mut deal_one: impl FnMut(&mut fss::rng::DealerRng, [&mut BundleWriter; 2], &dyn Fn(u64)) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut rng = fss::rng::os_rng()?;
    let mut run = [0u8; 16];
    rng.fill_bytes(&mut run);
    let bar = bar(u64::from(a.count) * b.units.0, b.units.1);
    let t = Instant::now();
    let mut bytes = 0u64;
    for index in 0..a.count {
        let id = BundleId { run, index };
        let header = |party| BundleHeader {
            party,
            id,
            fingerprint: b.fingerprint,
            descriptor: b.desc.to_string(),
            sections: b.sections as u32,
        };
        let mut w0 = BundleWriter::create_in(&dirs[0], b.n, &header(Party::P0))?;
        let mut w1 = BundleWriter::create_in(&dirs[1], b.n, &header(Party::P1))?;
        bar.set_message(format!("bundle {}/{}", index + 1, a.count));
        let base = u64::from(index) * b.units.0;
        deal_one(&mut rng, [&mut w0, &mut w1], &|done| bar.set_position(base + done))?;
        bytes = w0.bytes();
        w0.finish()?;
        w1.finish()?;
    }
    bar.finish_and_clear();
    done(a, t, bytes, dirs);
    Ok(())
}

/// Generation sessions: each bundle holds every step's keys, dealt ahead, the KV cache's
/// masks carried from step to step.
fn deal_sessions(
    a: &DealerArgs,
    desc: &Descriptor,
    llama: &models::registry::Llama,
    dirs: &[PathBuf; 2],
) -> anyhow::Result<()> {
    let shape = SessionShape { prompt_len: desc.seq as usize, new_tokens: desc.steps() };
    let (fingerprint, sections) =
        session::identity(&llama.fx, desc.imp, shape, &mut Fingerprints::default())?;
    println!("dealing {} session(s) for {}: {} steps each", a.count, desc.human(), shape.steps());
    let b = Bundles { desc, n: llama.fx.fx.n, fingerprint, sections, units: (shape.steps() as u64, "steps") };
    write_bundles(a, &b, dirs, |rng, [w0, w1], progress| {
        session::deal(&llama.fx, desc.imp, shape, rng, [w0, w1], |step, _| progress(step as u64 + 1))?;
        Ok(())
    })
}

/// One program per bundle.
fn deal_queries(
    a: &DealerArgs,
    desc: &Descriptor,
    g: &engine::Graph,
    dirs: &[PathBuf; 2],
) -> anyhow::Result<()> {
    let gates = engine::build(g, desc.imp)?;
    println!(
        "dealing {} bundle(s) for {}: {} nodes, {} with keys",
        a.count,
        desc.human(),
        g.nodes.len(),
        g.gates()
    );
    let b = Bundles {
        desc,
        n: g.n,
        fingerprint: fingerprint(g, desc.imp),
        sections: 2 + g.gates(),
        units: (g.nodes.len() as u64, "layers"),
    };
    write_bundles(a, &b, dirs, |rng, [w0, w1], progress| {
        engine::deal_into(g, &gates, rng, [w0, w1], |i, _| progress(i as u64))?;
        Ok(())
    })
}
