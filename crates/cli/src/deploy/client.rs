//! `fusefss query`: the client. It embeds its tokens (the embedding table is public),
//! secret-shares the embedded sequence between the two servers, and reconstructs the output
//! from their shares.

use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use engine::blocks::dequantize;
use fss::rng::Rng;
use net::tls::{self, Role};
use net::{Conn, Transport};
use serde::Serialize;

use service::Shape;
use service::client::ClientQuery;
use service::proto::{Msg, limits, tag};

use crate::model::{Loaded, ModelName, load};

/// Arguments of `fusefss query`.
#[derive(Args)]
pub struct QueryArgs {
    /// The two servers: ADDR0,ADDR1.
    #[arg(long, value_delimiter = ',', required = true)]
    servers: Vec<String>,
    /// The dealer's certificate folder (the client's key and the servers' pinned
    /// certificates).
    #[arg(long)]
    tls: PathBuf,
    /// Model (the servers' bundles must be for it).
    #[arg(long, default_value = "bert-tiny")]
    model: ModelName,
    /// Sequence length (the text's tokens are repeated or cut to it).
    #[arg(long)]
    seq: usize,
    /// Use only the first L layers (as the dealer did).
    #[arg(long)]
    layers: Option<usize>,
    /// The private text.
    #[arg(long, conflicts_with = "input")]
    text: Option<String>,
    /// The private input as a file: a JSON array of token ids.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Recompute the plaintext fixed-point result locally (the model is public) and report
    /// whether the secure result matches it.
    #[arg(long)]
    check: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Seconds to wait for the servers' answers.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

#[derive(Serialize)]
struct Output {
    model: &'static str,
    seq: usize,
    layers: usize,
    #[serde(rename = "impl")]
    implementation: String,
    bundle: String,
    n: u32,
    f: u32,
    /// The reconstructed output (BERT: the mean-pooled embedding; GPT-2: the last hidden
    /// state), in real units.
    output: Vec<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_token: Option<usize>,
    matches_plaintext: Option<bool>,
    online_ms: f64,
    total_ms: f64,
    rounds: u64,
    comm_bytes: u64,
}

pub fn run(a: QueryArgs) -> anyhow::Result<()> {
    if a.seq == 0 {
        bail!("--seq must be positive");
    }
    if a.servers.len() != 2 {
        bail!("--servers takes two addresses, ADDR0,ADDR1 (got {})", a.servers.len());
    }
    let t = Instant::now();
    let loaded = load(a.model, a.layers)?;
    let ids = tokens(&loaded, &a)?;
    let x = loaded.input(&ids);
    let me = tls::load_identity(&a.tls, Role::Client)?;
    let mut rng = fss::rng::os_rng()?;
    let (x0, x1) = engine::share_input(&x, loaded.fixed().n, &mut rng);
    let mut id = [0u8; 16];
    rng.fill_bytes(&mut id);
    let layers = loaded.layers();
    let timeout = Duration::from_secs(a.timeout.max(1));
    let g = loaded.graph(a.seq)?;
    let out_len = g.shape(g.output).len();
    let shape = Shape { model: a.model, seq: a.seq as u32, layers: Some(layers as u32) };
    let (mut q, msgs) = ClientQuery::new(id, shape, [x0, x1], out_len);
    let me = std::sync::Arc::new(me);
    let (tx, rx) = std::sync::mpsc::channel();
    for (party, msgs) in [0u8, 1].into_iter().zip(msgs) {
        let (addr, dir, me, tx) = (a.servers[party as usize].clone(), a.tls.clone(), me.clone(), tx.clone());
        std::thread::spawn(move || {
            let _ = tx.send((party, ask(party, &addr, &dir, &me, &msgs, out_len, timeout)));
        });
    }
    drop(tx);
    // Both servers at once; the first failure ends the query.
    for (party, r) in rx.iter().take(2) {
        let reply = r.with_context(|| format!("query {} failed", tag(&id)))?;
        q.on_reply(party, &reply).with_context(|| format!("query {} failed", tag(&id)))?;
    }
    let reply = q.finish().with_context(|| format!("query {} failed", tag(&id)))?;
    let [a0, a1] = &reply.answers;
    let desc = reply.descriptor;
    let n = a0.n;
    let y = reply.output.clone();
    let output: Vec<f64> = y.iter().map(|&v| dequantize(v, a0.f, n)).collect();
    let matches = if a.check {
        let gates = engine::build(&g, desc.imp)?;
        Some(engine::plain(&g, &gates, &x) == y)
    } else {
        None
    };
    let next_token = match &loaded {
        Loaded::Gpt2(w, ..) => {
            let logits = models::float::gpt2_logits_last(w, &output)?;
            logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i)
        }
        Loaded::Bert(..) => None,
    };
    let out = Output {
        model: a.model.name(),
        seq: a.seq,
        layers,
        implementation: desc.imp.name().into(),
        bundle: a0.bundle.clone(),
        n,
        f: a0.f,
        output,
        next_token,
        matches_plaintext: matches,
        online_ms: a0.online_ms.max(a1.online_ms),
        total_ms: t.elapsed().as_secs_f64() * 1e3,
        rounds: a0.rounds.max(a1.rounds),
        comm_bytes: a0.comm_bytes.max(a1.comm_bytes),
    };
    if a.json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        let show: Vec<String> = out.output.iter().take(6).map(|v| format!("{v:+.4}")).collect();
        println!("{} ({} tokens, {}), bundle {}", desc.human(), a.seq, out.implementation, out.bundle);
        println!("  output    {} … ({} values)", show.join(" "), out.output.len());
        if let Some(t) = out.next_token {
            println!("  next token: id {t}");
        }
        println!(
            "  online {:.0} ms on the servers, {:.0} ms in all; {} rounds, {:.2} MB per server",
            out.online_ms,
            out.total_ms,
            out.rounds,
            out.comm_bytes as f64 / 1e6
        );
        match matches {
            Some(true) => println!("  matches the plaintext fixed-point result: yes, on every value"),
            Some(false) => println!("  matches the plaintext fixed-point result: NO"),
            None => {}
        }
    }
    if matches == Some(false) {
        bail!("the secure result differs from the plaintext fixed-point result");
    }
    Ok(())
}

/// Send the query to server `party` and wait for its reply (the answer frame is limited
/// by the output's size).
fn ask(
    party: u8,
    addr: &str,
    dir: &std::path::Path,
    me: &tls::Identity,
    msgs: &[Msg; 2],
    out_len: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<u8>> {
    let cert = tls::load_cert(dir, Role::server(party))?;
    let cfg = tls::client_config(me, cert)?;
    let sa = addr
        .to_socket_addrs()
        .with_context(|| format!("server {party} address {addr}"))?
        .next()
        .with_context(|| format!("server {party} address {addr} resolves to nothing"))?;
    let sock = TcpStream::connect_timeout(&sa, Duration::from_secs(10))
        .with_context(|| format!("cannot reach server {party} at {addr}"))?;
    let mut c = Conn::tls(sock, tls::client_connection(cfg)?, Some(Duration::from_secs(10)), None)
        .with_context(|| format!("TLS with server {party} at {addr}"))?;
    c.set_timeout(Some(timeout));
    c.set_max_frame(limits::answer(out_len));
    for m in msgs {
        c.send(&m.encode())?;
    }
    c.recv().with_context(|| format!("waiting for server {party} at {addr}"))
}

/// Token ids from `--text` or `--input`, cut or repeated to `--seq`.
fn tokens(loaded: &Loaded, a: &QueryArgs) -> anyhow::Result<Vec<u32>> {
    let Some(path) = &a.input else {
        return Ok(loaded.tokens(a.text.as_deref(), Some(a.seq))?);
    };
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let ids: Vec<u32> = serde_json::from_str(&text)
        .with_context(|| format!("{}: expected a JSON array of token ids", path.display()))?;
    if ids.is_empty() {
        bail!("{}: no tokens", path.display());
    }
    let vocab = loaded.vocab();
    if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
        bail!("{}: token id {bad} is outside the vocabulary of {vocab}", path.display());
    }
    Ok((0..a.seq).map(|i| ids[i % ids.len()]).collect())
}
