//! `fusefss query`: the client. It embeds its tokens (the embedding table is public),
//! secret-shares the embedded sequence between the two servers, and reconstructs the output
//! from their shares.

use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
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

use models::llama::Sampling;
use models::registry::Llama;

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
    #[arg(long, required_unless_present = "generate")]
    seq: Option<usize>,
    /// Generate text (llama-tiny, smollm2) from `--prompt` over a session the servers hold
    /// keys for: the prompt's tokens must be the session's prompt length.
    #[arg(long, requires = "prompt", conflicts_with_all = ["text", "input", "seq"])]
    generate: bool,
    /// The private prompt (with --generate).
    #[arg(long, requires = "generate")]
    prompt: Option<String>,
    /// Wrap the prompt in the model's chat template (SmolLM2).
    #[arg(long, requires = "generate")]
    chat: bool,
    /// Tokens to generate at most (generation stops at the model's end of turn).
    #[arg(long, default_value_t = 8)]
    max_new_tokens: usize,
    /// Sampling temperature (0: greedy), with the client's own randomness.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Nucleus sampling mass.
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// Run all --max-new-tokens steps even after the end of turn (their tokens discarded),
    /// so that the servers do not learn the answer's length.
    #[arg(long, requires = "generate")]
    hide_length: bool,
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
    if a.servers.len() != 2 {
        bail!("--servers takes two addresses, ADDR0,ADDR1 (got {})", a.servers.len());
    }
    if a.generate {
        return generate(&a);
    }
    let seq = a.seq.unwrap_or(0);
    if seq == 0 {
        bail!("--seq must be positive");
    }
    let t = Instant::now();
    let loaded = load(a.model, a.layers)?;
    let ids = tokens(&loaded, &a)?;
    let x = loaded.input(&ids);
    let me = tls::load_identity(&a.tls, Role::Client)?;
    let layers = loaded.layers();
    let timeout = Duration::from_secs(a.timeout.max(1));
    let g = loaded.graph(seq)?;
    let out_len = g.shape(g.output).len();
    let shape = Shape { model: a.model, seq: seq as u32, layers: Some(layers as u32), new: None };
    let reply = ask_both(
        shape,
        &x,
        loaded.fixed().n,
        out_len,
        &a.servers,
        &a.tls,
        &std::sync::Arc::new(me),
        timeout,
    )?;
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
        Loaded::Bert(..) | Loaded::Llama(_) => None,
    };
    let out = Output {
        model: a.model.name(),
        seq,
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
        println!("{} ({} tokens, {}), bundle {}", desc.human(), seq, out.implementation, out.bundle);
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

/// A TLS connection to server `party` (its certificate pinned).
pub fn connect(party: u8, addr: &str, dir: &std::path::Path, me: &tls::Identity) -> anyhow::Result<Conn> {
    let cert = tls::load_cert(dir, Role::server(party))?;
    let cfg = tls::client_config(me, cert)?;
    let sa = addr
        .to_socket_addrs()
        .with_context(|| format!("server {party} address {addr}"))?
        .next()
        .with_context(|| format!("server {party} address {addr} resolves to nothing"))?;
    let sock = TcpStream::connect_timeout(&sa, Duration::from_secs(10))
        .with_context(|| format!("cannot reach server {party} at {addr}"))?;
    Conn::tls(sock, tls::client_connection(cfg)?, Some(Duration::from_secs(10)), None)
        .with_context(|| format!("TLS with server {party} at {addr}"))
}

/// Send the query to server `party` and wait for its reply (the answer frame is limited
/// by the output's size).
pub fn ask(
    party: u8,
    addr: &str,
    dir: &std::path::Path,
    me: &tls::Identity,
    msgs: &[Msg; 2],
    out_len: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<u8>> {
    let mut c = connect(party, addr, dir, me)?;
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
        return Ok(loaded.tokens(a.text.as_deref(), a.seq)?);
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
    let seq = a.seq.unwrap_or(ids.len());
    Ok((0..seq).map(|i| ids[i % ids.len()]).collect())
}

/// One step of a generation, as `--json` prints it.
#[derive(Serialize)]
struct GenStep {
    step: usize,
    token: u32,
    online_ms: f64,
    rounds: u64,
    comm_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    matches_plaintext: Option<bool>,
}

/// A generation, as `--json` prints it.
#[derive(Serialize)]
struct GenOutput {
    model: &'static str,
    #[serde(rename = "impl")]
    implementation: String,
    bundle: String,
    prompt_tokens: usize,
    tokens: Vec<u32>,
    text: String,
    matches_plaintext: Option<bool>,
    total_ms: f64,
    steps: Vec<GenStep>,
}

/// `query --generate`: a generation session with both servers. The client sends each the
/// prompt's share; after every step it reconstructs the logits, picks the next token, and
/// sends each server the share of its embedding (or `Stop`).
fn generate(a: &QueryArgs) -> anyhow::Result<()> {
    let sampling = Sampling { temperature: a.temperature, top_p: a.top_p };
    let t = Instant::now();
    let loaded = load(a.model, a.layers)?;
    let Some(m) = loaded.llama() else {
        bail!("{} does not generate text: use llama-tiny or smollm2", a.model);
    };
    let prompt = m.prompt(a.prompt.as_deref().unwrap_or_default(), a.chat)?;
    let me = tls::load_identity(&a.tls, Role::Client)?;
    let session = RemoteSession {
        model: a.model,
        layers: loaded.layers() as u32,
        llama: m,
        prompt: &prompt,
        max_new_tokens: a.max_new_tokens,
        sampling,
        check: a.check,
        hide_length: a.hide_length,
        servers: &a.servers,
        tls: &a.tls,
        me: &me,
        timeout: Duration::from_secs(a.timeout.max(1)),
    };
    let (mut tokens, mut steps) = (vec![], vec![]);
    let (mut imp, mut bundle) = (None, String::new());
    if !a.json {
        println!("{} generating from a prompt of {} tokens:", a.model, prompt.len());
    }
    generate_remote(&session, |s| {
        bundle.clone_from(&s.bundle);
        imp = Some(s.imp);
        if !a.json && !s.after_end {
            println!(
                "  {} token {:>5} {:<14} online {:>7.1} ms, {:>4} rounds{}",
                if s.step == 0 { "prefill" } else { "step   " },
                s.token,
                format!("{:?}", m.decode(&[s.token])),
                s.online_ms,
                s.rounds,
                match s.matches_plaintext {
                    Some(true) => ", as the plaintext fixed-point model",
                    Some(false) => ", NOT as the plaintext fixed-point model",
                    None => "",
                }
            );
        }
        steps.push(GenStep {
            step: s.step,
            token: s.token,
            online_ms: s.online_ms,
            rounds: s.rounds,
            comm_bytes: s.comm_bytes,
            matches_plaintext: s.matches_plaintext,
        });
        if !s.after_end {
            tokens.push(s.token);
        }
        true
    })?;
    let matches = a.check.then(|| steps.iter().all(|s| s.matches_plaintext == Some(true)));
    let out = GenOutput {
        model: a.model.name(),
        implementation: imp.map(|i| i.name().to_string()).unwrap_or_default(),
        bundle,
        prompt_tokens: prompt.len(),
        text: m.decode(&tokens),
        tokens,
        matches_plaintext: matches,
        total_ms: t.elapsed().as_secs_f64() * 1e3,
        steps,
    };
    if a.json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        println!("  text: {:?}", out.text);
        println!("  {:.1} s in all, bundle {}", out.total_ms / 1e3, out.bundle);
        match matches {
            Some(true) => println!("  matches the plaintext fixed-point model: yes, at every step"),
            Some(false) => println!("  matches the plaintext fixed-point model: NO"),
            None => {}
        }
    }
    if matches == Some(false) {
        bail!("the secure result differs from the plaintext fixed-point result");
    }
    Ok(())
}

/// A deployed generation as the client runs it: the model, the prompt's tokens and how to
/// reach the servers.
pub struct RemoteSession<'a> {
    /// The model the servers' session bundles are for.
    pub model: ModelName,
    /// Its layers.
    pub layers: u32,
    /// The model in the clear (the client embeds tokens and finishes the logits).
    pub llama: &'a Llama,
    /// The prompt's tokens (the session's prompt length).
    pub prompt: &'a [u32],
    /// Steps of the session (the prefill's token is the first).
    pub max_new_tokens: usize,
    /// How the client picks each token.
    pub sampling: Sampling,
    /// Also run the plaintext fixed-point model on the same tokens, step by step.
    pub check: bool,
    /// Run the steps after the end of turn too, on dummy tokens, so the servers do not
    /// learn the answer's length.
    pub hide_length: bool,
    /// The two servers' addresses.
    pub servers: &'a [String],
    /// The dealer's certificate folder.
    pub tls: &'a Path,
    /// The client's TLS identity.
    pub me: &'a tls::Identity,
    /// How long to wait for a server.
    pub timeout: Duration,
}

/// One step of a deployed generation, as the client sees it.
pub struct RemoteStep {
    /// Step index (0: the prefill).
    pub step: usize,
    /// The token the client picked.
    pub token: u32,
    /// A step after the end of turn, run on a dummy token to hide the length.
    pub after_end: bool,
    /// The slower server's online time, ms.
    pub online_ms: f64,
    /// Online rounds.
    pub rounds: u64,
    /// Bytes the busier server sent.
    pub comm_bytes: u64,
    /// With `check`: whether the secure logits equal the plaintext fixed-point ones.
    pub matches_plaintext: Option<bool>,
    /// The session bundle's id.
    pub bundle: String,
    /// The implementation the servers' bundles were dealt for.
    pub imp: engine::Impl,
}

/// Run a generation against the two servers: share the prompt, then at each step
/// reconstruct the logits, pick a token, show it to `each` and share its embedding for the
/// next step. `each` returning false ends the session (the servers' remaining steps are
/// stopped, or run on dummy tokens with `hide_length`).
///
/// # Errors
/// Bad options, a server that cannot be reached or refuses, or a failed step.
pub fn generate_remote(
    s: &RemoteSession<'_>,
    mut each: impl FnMut(&RemoteStep) -> bool,
) -> anyhow::Result<()> {
    if !s.sampling.is_valid() {
        bail!("--temperature must be ≥ 0 and --top-p in (0, 1]");
    }
    if s.max_new_tokens == 0 {
        bail!("--max-new-tokens must be positive");
    }
    let m = s.llama;
    let mut rng = fss::rng::os_rng()?;
    let mut id = [0u8; 16];
    rng.fill_bytes(&mut id);
    let (n, f) = (m.fx.fx.n, m.fx.fx.f);
    let vocab = m.w.config.vocab;
    let shape = Shape {
        model: s.model,
        seq: s.prompt.len() as u32,
        layers: Some(s.layers),
        new: Some(s.max_new_tokens as u32),
    };
    let (x0, x1) = engine::share_input(&m.fx.input(s.prompt), n, &mut rng);
    let (mut q, msgs) = ClientQuery::new(id, shape, [x0, x1], vocab);
    let mut conns = Vec::with_capacity(2);
    for (party, msgs) in [0u8, 1].into_iter().zip(&msgs) {
        let mut c = connect(party, &s.servers[party as usize], s.tls, s.me)?;
        c.set_timeout(Some(s.timeout));
        c.set_max_frame(limits::answer(vocab));
        for msg in msgs {
            c.send(&msg.encode())?;
        }
        conns.push(c);
    }
    // With `check`, the plaintext fixed-point model on the same tokens, step by step.
    let session = service::session::SessionShape { prompt_len: s.prompt.len(), new_tokens: s.max_new_tokens };
    let mut plain_cache: Vec<Vec<u64>> = vec![];
    let mut next = s.prompt.to_vec();
    let mut ended = false;
    for step in 0..s.max_new_tokens {
        for (party, c) in conns.iter_mut().enumerate() {
            let b = c.recv().with_context(|| format!("waiting for server {party} (step {step})"))?;
            q.on_reply(party as u8, &b).with_context(|| format!("generation {} failed", tag(&id)))?;
        }
        let reply = std::mem::replace(&mut q, ClientQuery::awaiting(shape, vocab))
            .finish()
            .with_context(|| format!("generation {} failed", tag(&id)))?;
        let [a0, a1] = &reply.answers;
        let logits: Vec<f64> = reply.output.iter().map(|&v| dequantize(v, 2 * f, n)).collect();
        let token = if ended { m.eos.unwrap_or(0) } else { s.sampling.pick(&logits, &mut rng) };
        let matches_plaintext = if s.check {
            let (g, gates) = service::session::step_program(&m.fx, reply.descriptor.imp, session, step)?;
            let (want, cache) = engine::plain_step(&g, &gates, &m.fx.input(&next), &plain_cache)?;
            plain_cache = cache;
            Some(want == reply.output)
        } else {
            None
        };
        let go_on = each(&RemoteStep {
            step,
            token,
            after_end: ended,
            online_ms: a0.online_ms.max(a1.online_ms),
            rounds: a0.rounds.max(a1.rounds),
            comm_bytes: a0.comm_bytes.max(a1.comm_bytes),
            matches_plaintext,
            bundle: a0.bundle.clone(),
            imp: reply.descriptor.imp,
        }) || ended;
        ended |= Some(token) == m.eos || !go_on;
        let last = step + 1 == s.max_new_tokens || (ended && !(s.hide_length && go_on));
        if last {
            for c in &mut conns {
                let _ = c.send(&Msg::Stop.encode());
            }
            break;
        }
        next = vec![token];
        let (y0, y1) = engine::share_input(&m.fx.input(&next), n, &mut rng);
        for (c, share) in conns.iter_mut().zip([y0, y1]) {
            c.send(&Msg::Share(share).encode()).context("sending the next token's share")?;
        }
    }
    Ok(())
}

/// One query against both servers at once: share `x` (`n` bits), send each server its half,
/// and reconstruct the output of `out_len` values from their answers. The first failure
/// ends the query.
///
/// # Errors
/// A server that cannot be reached, refuses or fails, or answers that do not agree.
#[allow(clippy::too_many_arguments)]
pub fn ask_both(
    shape: Shape,
    x: &[u64],
    n: u32,
    out_len: usize,
    servers: &[String],
    tls: &Path,
    me: &std::sync::Arc<tls::Identity>,
    timeout: Duration,
) -> anyhow::Result<service::client::Reply> {
    let mut rng = fss::rng::os_rng()?;
    let (x0, x1) = engine::share_input(x, n, &mut rng);
    let mut id = [0u8; 16];
    rng.fill_bytes(&mut id);
    let (mut q, msgs) = ClientQuery::new(id, shape, [x0, x1], out_len);
    let (tx, rx) = std::sync::mpsc::channel();
    for (party, msgs) in [0u8, 1].into_iter().zip(msgs) {
        let (addr, dir, me, tx) =
            (servers[party as usize].clone(), tls.to_path_buf(), me.clone(), tx.clone());
        std::thread::spawn(move || {
            let _ = tx.send((party, ask(party, &addr, &dir, &me, &msgs, out_len, timeout)));
        });
    }
    drop(tx);
    for (party, r) in rx.iter().take(2) {
        let reply = r.with_context(|| format!("query {} failed", tag(&id)))?;
        q.on_reply(party, &reply).with_context(|| format!("query {} failed", tag(&id)))?;
    }
    q.finish().with_context(|| format!("query {} failed", tag(&id)))
}
