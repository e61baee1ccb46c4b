//! `fusefss generate` and `fusefss bench generate`: token-by-token private generation with
//! the dealer, both servers and the client in one process.
//!
//! Each step is a program: the prefill over the prompt, then one decode program per new
//! token over the KV cache, which the servers keep as masked values. Per step the client
//! reconstructs the LM head's output (scale `2f`), truncates it, picks the next token in the
//! clear (greedy, or with `--temperature` / `--top-p` from its own RNG), embeds it and
//! secret-shares it for the next step. Where the keys are:
//!
//! - streamed (the default of `generate`, `--keys-streamed`): the dealer deals each step
//!   beside the servers and hands its keys over gate by gate, the KV cache's masks carried
//!   from step to step; the first token comes after the prefill's own dealing;
//! - on disk (the default of `bench generate`, `--keys-on-disk` / `--keys-dir`): the dealer
//!   deals the whole session ahead (`service::session`: one bundle per party, the steps'
//!   keys one after the other); both servers then run it step by step on two threads,
//!   reading each step's keys as they reach them, so a step's online time has the machine
//!   to itself;
//! - in memory (`--keys-in-memory`): each step dealt in memory just before it runs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use engine::blocks::dequantize;
use engine::{DealReport, Impl, PartyRun, deal_carried, plain_step, reconstruct, share_input};
use fss::Party;
use fss::rng::{DealerRng, Rng, SeedableRng};
use models::graph::Fixed;
use models::llama::{FloatCache, Sampling, argmax, forward_f64, greedy_f64};
use models::registry::{Llama, Loaded, ModelName};
use serde::Serialize;
use service::bundle::{BundleHeader, BundleId, BundleReader, BundleWriter, Fingerprints};
use service::session::{self, SessionShape};

use crate::model::NetChoice;
use crate::model::{
    ImplChoice, KeysArgs, KeysAt, KeysDefault, Link, TransportChoice, peak_rss_bytes, reset_peak_rss,
    run_linked_step,
};

/// Load a model that generates (a built-in one, or the Hugging Face folder `dir`), at its
/// own ring width and scale or at `fixed`; with its name for reports.
///
/// # Errors
/// If its files are missing, it does not generate, or the widths do not fit.
pub fn load_llama(
    model: ModelName,
    dir: Option<&std::path::Path>,
    fixed: Option<Fixed>,
) -> anyhow::Result<(Llama, String)> {
    if dir.is_none() && !model.generates() {
        bail!(
            "{model} does not generate text: use llama-tiny, smollm2 or a LlamaForCausalLM folder (--model-dir)"
        );
    }
    let (loaded, name) = crate::model::load_model(model, dir, None)?;
    let Loaded::Llama(m) = loaded else {
        bail!(
            "{name} does not generate text: use llama-tiny, smollm2 or a LlamaForCausalLM folder (--model-dir)"
        );
    };
    Ok((
        match fixed {
            Some(fx) if fx.f == 0 || fx.n < 2 * fx.f + 8 || fx.n > 64 => {
                bail!("--n {} --f {}: need 2f + 8 ≤ n ≤ 64 and f > 0", fx.n, fx.f)
            }
            Some(fx) => m.with_fixed(fx),
            None => *m,
        },
        name,
    ))
}

/// One step of a session.
#[derive(Clone, Debug, Serialize)]
pub struct StepRow {
    /// 0 is the prefill.
    pub step: usize,
    /// The token the client picked.
    pub token: u32,
    /// Online time (both servers on two threads), ms.
    pub online_ms: f64,
    /// Key generation of this step, ms.
    pub keygen_ms: f64,
    /// One party's key bytes.
    pub key_bytes: u64,
    /// One party's key bytes by layer type.
    pub key_bytes_by_layer: BTreeMap<&'static str, u64>,
    /// Computation time by layer type, ms (the slower server's).
    pub online_ms_by_layer: BTreeMap<&'static str, f64>,
    /// Bytes one server sent.
    pub comm_bytes: u64,
    /// Online rounds.
    pub rounds: u64,
    /// The secure output equals the plaintext fixed-point one bit for bit.
    pub exact: bool,
    /// The fixed-point argmax equals the f64 model's on the same prefix.
    pub matches_float: bool,
    /// The f64 model's pick on the same prefix.
    pub float_token: u32,
    /// The f64 model's margin between its first and second choice.
    pub float_margin: f64,
}

/// A whole session with one implementation.
pub struct Session {
    /// Prompt tokens.
    pub prompt: Vec<u32>,
    /// Steps, the prefill first.
    pub steps: Vec<StepRow>,
    /// Ring and scale.
    pub fx: Fixed,
}

/// How a session runs.
#[derive(Clone, Debug)]
pub struct SessionOpts {
    /// The link between the servers.
    pub link: Link,
    /// Where the keys are.
    pub keys: KeysAt,
    /// Stop at the model's end of turn.
    pub stop_at_eos: bool,
}

/// The servers' keys for a session.
enum Keys {
    /// Dealt step by step in memory: the dealer and its masks of the KV cache.
    Memory { dealer: DealerRng, masks: Vec<Vec<u64>> },
    /// Dealt step by step beside the servers, gate by gate as they take them
    /// (`--keys-streamed`): a step's keys are never all in memory at once.
    Stream { dealer: DealerRng, masks: Vec<Vec<u64>> },
    /// Dealt ahead: both parties' bundles, read step by step.
    Disk { readers: Box<[BundleReader; 2]>, paths: [PathBuf; 2], reports: Vec<DealReport> },
}

impl Keys {
    /// Deal ahead into `dir` when asked to.
    fn prepare(m: &Llama, imp: Impl, shape: SessionShape, at: &KeysAt) -> anyhow::Result<Keys> {
        let mut dealer = fss::rng::os_rng()?;
        let dir = match at {
            KeysAt::Memory => return Ok(Keys::Memory { dealer, masks: vec![] }),
            KeysAt::Stream => return Ok(Keys::Stream { dealer, masks: vec![] }),
            KeysAt::Disk(dir) => dir,
        };
        let (fp, sections) = session::identity(&m.fx, imp, shape, &mut Fingerprints::default())?;
        let mut run = [0u8; 16];
        dealer.fill_bytes(&mut run);
        let id = BundleId { run, index: 0 };
        let header = |party| BundleHeader {
            party,
            id,
            fingerprint: fp,
            descriptor: format!(
                "in-process generation session, {} prompt tokens, {} steps",
                shape.prompt_len,
                shape.steps()
            ),
            sections: sections as u32,
        };
        let dirs = [dir.join("party0"), dir.join("party1")];
        for d in &dirs {
            crate::interrupt::create_dir(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let n = m.fx.fx.n;
        let mut w0 = BundleWriter::create_in(&dirs[0], n, &header(Party::P0))?;
        let mut w1 = BundleWriter::create_in(&dirs[1], n, &header(Party::P1))?;
        let reports = session::deal(&m.fx, imp, shape, &mut dealer, [&mut w0, &mut w1], |_, _| {})?;
        let paths = [w0.finish()?, w1.finish()?];
        let mut readers = [
            BundleReader::open_sections(&paths[0], n, sections, &fp, Party::P0)?,
            BundleReader::open_sections(&paths[1], n, sections, &fp, Party::P1)?,
        ];
        for r in &mut readers {
            // Both servers on this machine: each reader on its server's core.
            r.beside(engine::cores::for_party(r.header().party));
            r.read_ahead();
        }
        Ok(Keys::Disk { readers: Box::new(readers), paths, reports })
    }

    /// Run step `t` at both servers over `link`: its dealer's report, both runs and the
    /// online time (keys dealt in memory are dealt first, outside it; streamed keys are
    /// dealt beside the servers, within it).
    #[allow(clippy::too_many_arguments)]
    fn run_step(
        &mut self,
        t: usize,
        g: &engine::Graph,
        gates: &[Option<Box<dyn engine::DynGate>>],
        inputs: [Vec<u64>; 2],
        held: [&[Vec<u64>]; 2],
        link: Link,
    ) -> anyhow::Result<(DealReport, [PartyRun; 2], std::time::Duration)> {
        match self {
            Keys::Memory { dealer, masks } => {
                let dealt = deal_carried(g, gates, dealer, masks, |_, _| {})?;
                let [mut k0, mut k1] = dealt.keys;
                let t0 = Instant::now();
                let runs = run_linked_step(g, gates, [&mut k0, &mut k1], inputs, held, link)?;
                let online = t0.elapsed();
                *masks = dealt.carry;
                Ok((dealt.report, runs, online))
            }
            Keys::Stream { dealer, masks } => {
                let s = crate::model::stream::run(g, gates, dealer, masks, |_, _| {}, inputs, held, link)?;
                *masks = s.carry;
                Ok((s.report, s.runs, s.online))
            }
            Keys::Disk { readers, reports, .. } => {
                let [r0, r1] = &mut **readers;
                let t0 = Instant::now();
                let runs = run_linked_step(g, gates, [r0, r1], inputs, held, link)?;
                Ok((reports[t].clone(), runs, t0.elapsed()))
            }
        }
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        // Single-use: a session's keys are gone when it ends, used or not.
        if let Keys::Disk { paths, .. } = self {
            for p in paths.iter() {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// Run a session: the prefill over `prompt`, then a decode step per further token, up to
/// `new_tokens` tokens; `each` sees every step as it ends.
///
/// # Errors
/// If a program does not build or a run fails.
pub fn run_session(
    m: &Llama,
    prompt: &[u32],
    new_tokens: usize,
    imp: Impl,
    sampling: Sampling,
    opts: &SessionOpts,
    mut each: impl FnMut(&StepRow),
) -> anyhow::Result<Session> {
    run_session_until(m, prompt, new_tokens, imp, sampling, opts, |r| {
        each(r);
        true
    })
}

/// As [`run_session`], ending the session early (its keys unused) when `each` returns false.
///
/// # Errors
/// If a program does not build or a run fails.
pub fn run_session_until(
    m: &Llama,
    prompt: &[u32],
    new_tokens: usize,
    imp: Impl,
    sampling: Sampling,
    opts: &SessionOpts,
    mut each: impl FnMut(&StepRow) -> bool,
) -> anyhow::Result<Session> {
    let shape = SessionShape { prompt_len: prompt.len(), new_tokens };
    let mut keys = Keys::prepare(m, imp, shape, &opts.keys)?;
    let mut client = fss::rng::os_rng()?;
    // Each server's masked values and the plaintext values of the KV cache, carried from
    // step to step.
    let mut held: [Vec<Vec<u64>>; 2] = [vec![], vec![]];
    let mut plain_cache: Vec<Vec<u64>> = vec![];
    let mut float_cache = FloatCache::default();
    let mut ids = prompt.to_vec();
    let mut steps = vec![];
    for t in 0..shape.steps() {
        let new: Vec<u32> = if t == 0 { prompt.to_vec() } else { vec![*ids.last().expect("a token")] };
        let (g, gates) = session::step_program(&m.fx, imp, shape, t)?;
        let x = m.fx.input(&new);
        let (want, next_plain) = plain_step(&g, &gates, &x, &plain_cache)?;
        let (x0, x1) = share_input(&x, g.n, &mut client);
        let (report, [r0, r1], online) =
            keys.run_step(t, &g, &gates, [x0, x1], [&held[0], &held[1]], opts.link)?;
        let y = reconstruct(&r0.output, &r1.output, g.n);
        let logits: Vec<f64> = y.iter().map(|&v| dequantize(v, 2 * g.f, g.n)).collect();
        let float = forward_f64(&m.w, &new, &mut float_cache);
        let token = sampling.pick(&logits, &mut client);
        let row = StepRow {
            step: t,
            token,
            online_ms: online.as_secs_f64() * 1e3,
            keygen_ms: report.time.as_secs_f64() * 1e3,
            key_bytes: report.key_bits.div_ceil(8),
            key_bytes_by_layer: report.by_label.iter().map(|(l, b)| (*l, b.div_ceil(8))).collect(),
            online_ms_by_layer: {
                let mut by = BTreeMap::new();
                for run in [&r0, &r1] {
                    for (l, d) in &run.times {
                        let e = by.entry(*l).or_insert(0.0f64);
                        *e = e.max(d.as_secs_f64() * 1e3);
                    }
                }
                by
            },
            comm_bytes: r0.stats.comm_bytes().max(r1.stats.comm_bytes()),
            rounds: r0.stats.rounds,
            exact: y == want,
            matches_float: argmax(&logits) == argmax(&float),
            float_token: argmax(&float),
            float_margin: {
                let mut v = float.clone();
                v.sort_by(|a, b| b.total_cmp(a));
                v[0] - v.get(1).copied().unwrap_or(v[0])
            },
        };
        let go_on = each(&row);
        steps.push(row);
        held = [r0.carried, r1.carried];
        plain_cache = next_plain;
        ids.push(token);
        if !go_on || (opts.stop_at_eos && Some(token) == m.eos) {
            break;
        }
    }
    Ok(Session { prompt: prompt.to_vec(), steps, fx: m.fx.fx })
}

/// Arguments of `fusefss generate`.
#[derive(Args)]
pub struct GenerateArgs {
    /// Model: llama-tiny (built in) or smollm2 (`scripts/fetch-models.sh`).
    #[arg(long, default_value = "llama-tiny")]
    model: ModelName,
    /// A Hugging Face `LlamaForCausalLM` folder instead (`config.json`,
    /// `model.safetensors`, `tokenizer.json`).
    #[arg(long, conflicts_with = "model")]
    model_dir: Option<PathBuf>,
    /// The private prompt.
    #[arg(long, default_value = "the servers never see this prompt")]
    prompt: String,
    /// Tokens to generate (at most: generation stops at the model's end of turn).
    #[arg(long, default_value_t = 8)]
    max_new_tokens: usize,
    /// Wrap the prompt in the model's chat template (SmolLM2).
    #[arg(long)]
    chat: bool,
    /// Ring width (with --f; default: the model's).
    #[arg(long, requires = "f")]
    n: Option<u32>,
    /// Fixed-point scale (with --n).
    #[arg(long, requires = "n")]
    f: Option<u32>,
    /// Implementation(s).
    #[arg(long = "impl", value_enum, default_value = "fusefss")]
    implementation: ImplChoice,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Nucleus sampling mass.
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// Also compute the plaintext fixed-point and f64 models' own continuations, and fail
    /// unless every step equals the plaintext fixed-point model.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    keys: KeysArgs,
    /// One JSON object per implementation instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct GenerateRow<'a> {
    model: String,
    #[serde(rename = "impl")]
    implementation: &'static str,
    /// Where the keys were: `"stream"`, `"memory"` or `"disk"`.
    keys: &'static str,
    prompt_tokens: &'a [u32],
    tokens: Vec<u32>,
    text: String,
    exact: bool,
    tokens_match_float: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    float_tokens: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    float_agrees: Option<bool>,
    steps: &'a [StepRow],
}

/// The share of decode steps (the prefill when there are none) whose fixed-point argmax
/// is the f64 model's on the same prefix.
fn match_rate(s: &Session) -> f64 {
    let decode = &s.steps[1..];
    if decode.is_empty() {
        return f64::from(u8::from(s.steps[0].matches_float));
    }
    decode.iter().filter(|r| r.matches_float).count() as f64 / decode.len() as f64
}

pub fn run(a: GenerateArgs) -> anyhow::Result<()> {
    let sampling = Sampling { temperature: a.temperature, top_p: a.top_p };
    if !sampling.is_valid() {
        bail!("--temperature must be ≥ 0 and --top-p in (0, 1]");
    }
    if a.max_new_tokens == 0 {
        bail!("--max-new-tokens must be positive");
    }
    let (m, name) = load_llama(a.model, a.model_dir.as_deref(), a.n.zip(a.f).map(|(n, f)| Fixed { n, f }))?;
    let prompt = m.prompt(&a.prompt, a.chat)?;
    // Streamed by default: the first token comes after the prefill's own dealing, not after
    // the whole session's (`--keys-on-disk` deals ahead).
    let (keys, temp) = a.keys.resolve_or(KeysDefault::Stream);
    let opts = SessionOpts { link: Link::default(), keys, stop_at_eos: true };
    let result = generate_all(&a, &name, &m, &prompt, sampling, &opts);
    if let Some(d) = temp {
        let _ = std::fs::remove_dir_all(d);
    }
    result
}

fn generate_all(
    a: &GenerateArgs,
    name: &str,
    m: &Llama,
    prompt: &[u32],
    sampling: Sampling,
    opts: &SessionOpts,
) -> anyhow::Result<()> {
    let mut all_exact = true;
    let float_tokens = a.check.then(|| greedy_f64(&m.w, prompt, a.max_new_tokens, m.eos));
    for imp in a.implementation.impls() {
        if !a.json {
            let keys = match opts.keys {
                KeysAt::Stream => "keys dealt beside the servers, who share the machine with the dealer",
                KeysAt::Memory => "keys dealt in memory before each step",
                KeysAt::Disk(_) => "keys dealt ahead into bundles on disk",
            };
            println!("{name} ({}), prompt of {} tokens, {keys}:", imp.name(), prompt.len());
        }
        let s = run_session(m, prompt, a.max_new_tokens, imp, sampling, opts, |r| {
            if !a.json {
                println!(
                    "  {} token {:>5} {:<12} online {:>7.1} ms, key {:>7.2} MB, {:>4} rounds, {}",
                    if r.step == 0 { "prefill" } else { "step   " },
                    r.token,
                    format!("{:?}", m.decode(&[r.token])),
                    r.online_ms,
                    r.key_bytes as f64 / 1e6,
                    r.rounds,
                    if r.exact { "exact" } else { "NOT EXACT" }
                );
            }
        })?;
        let exact = s.steps.iter().all(|r| r.exact);
        all_exact &= exact;
        let tokens: Vec<u32> = s.steps.iter().map(|r| r.token).collect();
        let text = m.decode(&tokens);
        // Greedy secure steps that all equal the plaintext fixed-point model are its own
        // continuation; the f64 model's may differ.
        let greedy = sampling.temperature <= 0.0;
        let float_agrees = float_tokens.as_ref().filter(|_| greedy).map(|f| *f == tokens);
        if a.json {
            let row = GenerateRow {
                model: name.to_string(),
                implementation: imp.name(),
                keys: opts.keys.name(),
                prompt_tokens: &s.prompt,
                tokens,
                text,
                exact,
                tokens_match_float: match_rate(&s),
                float_tokens: float_tokens.clone(),
                float_agrees,
                steps: &s.steps,
            };
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!("  text: {text:?}");
            println!(
                "  every step equals the plaintext fixed-point model: {exact}; argmax as the f64 model's on {:.0} % of decode steps",
                100.0 * match_rate(&s)
            );
            if let Some(f) = &float_tokens {
                if greedy {
                    println!(
                        "  plaintext fixed-point continuation: {}",
                        if exact { "the same" } else { "DIFFERENT" }
                    );
                }
                println!(
                    "  f64 continuation: {:?}{}",
                    m.decode(f),
                    match float_agrees {
                        Some(true) => " (the same)",
                        Some(false) => " (differs)",
                        None => "",
                    }
                );
            }
        }
    }
    if a.check && !all_exact {
        bail!("a step differs from the plaintext fixed-point model");
    }
    Ok(())
}

/// Arguments of `fusefss bench generate`.
#[derive(Args)]
pub struct GenerateBenchArgs {
    /// Model: llama-tiny (built in) or smollm2 (`scripts/fetch-models.sh`).
    #[arg(long, default_value = "llama-tiny")]
    model: ModelName,
    /// A Hugging Face `LlamaForCausalLM` folder instead (`config.json`,
    /// `model.safetensors`, `tokenizer.json`).
    #[arg(long, conflicts_with = "model")]
    model_dir: Option<PathBuf>,
    /// Prompt tokens (a fixed pseudo-random prompt).
    #[arg(long, default_value_t = 32)]
    prompt_len: usize,
    /// Tokens to generate: the prefill's and one per decode step (at least 2).
    #[arg(long, default_value_t = 32)]
    new_tokens: usize,
    /// Implementation(s).
    #[arg(long = "impl", value_enum, default_value = "both")]
    implementation: ImplChoice,
    /// Ring width (with --f; default: the model's).
    #[arg(long, requires = "f")]
    n: Option<u32>,
    /// Fixed-point scale (with --n).
    #[arg(long, requires = "n")]
    f: Option<u32>,
    /// How the two servers talk: an in-memory channel, loopback TCP, or loopback TLS.
    #[arg(long, value_enum, default_value = "mem")]
    transport: TransportChoice,
    /// Simulated network on the server link (latency per message and bandwidth).
    #[arg(long, value_enum, default_value = "none")]
    net: NetChoice,
    #[command(flatten)]
    keys: KeysArgs,
    /// One JSON object per implementation.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct BenchRow {
    model: String,
    #[serde(rename = "impl")]
    implementation: &'static str,
    prompt_len: usize,
    new_tokens: usize,
    n: u32,
    f: u32,
    prefill_ms: f64,
    per_token_ms: f64,
    keygen_ms: f64,
    prefill_key_bytes: u64,
    key_bytes_per_token: f64,
    comm_bytes_per_token: f64,
    rounds_per_token: f64,
    peak_rss_bytes: u64,
    exact: bool,
    tokens_match_float: f64,
    transport: &'static str,
    net: &'static str,
    keys: &'static str,
    /// One party's key bytes per decode step by layer type (mean over the steps).
    key_bytes_per_token_by_layer: BTreeMap<&'static str, f64>,
    /// Computation time per decode step by layer type, ms (mean over the steps; the
    /// slower server's).
    online_ms_per_token_by_layer: BTreeMap<&'static str, f64>,
}

pub fn run_bench(a: GenerateBenchArgs) -> anyhow::Result<()> {
    if a.prompt_len == 0 || a.new_tokens < 2 {
        bail!("--prompt-len must be positive and --new-tokens at least 2 (the prefill and a decode step)");
    }
    let (m, name) = load_llama(a.model, a.model_dir.as_deref(), a.n.zip(a.f).map(|(n, f)| Fixed { n, f }))?;
    let mut r = DealerRng::seed_from_u64(0x9e37);
    let prompt: Vec<u32> =
        (0..a.prompt_len).map(|_| (r.next_u64() % m.w.config.vocab as u64) as u32).collect();
    let (keys, temp) = a.keys.resolve();
    let opts =
        SessionOpts { link: Link { transport: a.transport, net: a.net.sim() }, keys, stop_at_eos: false };
    let result = bench_rows(&a, &name, &m, &prompt, &opts);
    if let Some(d) = temp {
        let _ = std::fs::remove_dir_all(d);
    }
    result
}

/// The mean over `rows` of each layer type's value.
fn mean_by(
    rows: &[StepRow],
    field: impl Fn(&StepRow) -> BTreeMap<&'static str, f64>,
) -> BTreeMap<&'static str, f64> {
    let mut by = BTreeMap::new();
    for r in rows {
        for (l, v) in field(r) {
            *by.entry(l).or_insert(0.0) += v / rows.len() as f64;
        }
    }
    by
}

fn bench_rows(
    a: &GenerateBenchArgs,
    name: &str,
    m: &Llama,
    prompt: &[u32],
    opts: &SessionOpts,
) -> anyhow::Result<()> {
    for imp in a.implementation.impls() {
        // Each implementation's row reports its own peak, not the previous one's.
        reset_peak_rss();
        let s = run_session(m, prompt, a.new_tokens, imp, Sampling::GREEDY, opts, |_| {})?;
        let decode = &s.steps[1..];
        let mean = |f: &dyn Fn(&StepRow) -> f64| decode.iter().map(f).sum::<f64>() / decode.len() as f64;
        let row = BenchRow {
            model: name.to_string(),
            implementation: imp.name(),
            prompt_len: a.prompt_len,
            new_tokens: a.new_tokens,
            n: s.fx.n,
            f: s.fx.f,
            prefill_ms: s.steps[0].online_ms,
            per_token_ms: crate::model::median(decode.iter().map(|r| r.online_ms).collect()),
            keygen_ms: s.steps.iter().map(|r| r.keygen_ms).sum(),
            prefill_key_bytes: s.steps[0].key_bytes,
            key_bytes_per_token: mean(&|r| r.key_bytes as f64),
            comm_bytes_per_token: mean(&|r| r.comm_bytes as f64),
            rounds_per_token: mean(&|r| r.rounds as f64),
            peak_rss_bytes: peak_rss_bytes(),
            exact: s.steps.iter().all(|r| r.exact),
            tokens_match_float: match_rate(&s),
            transport: a.transport.name(),
            net: a.net.name(),
            keys: opts.keys.name(),
            key_bytes_per_token_by_layer: mean_by(decode, |r| {
                r.key_bytes_by_layer.iter().map(|(l, b)| (*l, *b as f64)).collect()
            })
            .into_iter()
            .map(|(l, v)| (l, v.round()))
            .collect(),
            online_ms_per_token_by_layer: mean_by(decode, |r| r.online_ms_by_layer.clone()),
        };
        if a.json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "{} {}: prompt {} + {} tokens; prefill {:.1} ms, {:.1} ms/token, {:.2} MB key/token, {:.2} MB comm/token, {:.0} rounds/token; exact {}; argmax as f64 on {:.0} %",
                row.model,
                row.implementation,
                row.prompt_len,
                row.new_tokens,
                row.prefill_ms,
                row.per_token_ms,
                row.key_bytes_per_token / 1e6,
                row.comm_bytes_per_token / 1e6,
                row.rounds_per_token,
                row.exact,
                100.0 * row.tokens_match_float
            );
        }
    }
    Ok(())
}
