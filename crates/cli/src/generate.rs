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
use engine::{Impl, PartyKeys, build, deal_step, plain_step, reconstruct, run_threads_step, share_input};
use fss::Party;
use fss::rng::{DealerRng, Rng, SeedableRng};
use models::graph::Fixed;
use models::llama::{FloatCache, LlamaConfig, LlamaFixed, LlamaWeights, forward_f64};
use serde::Serialize;

use crate::model::ImplChoice;

/// The models `generate` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GenModel {
    /// Llama shapes (2 layers, hidden 64, 4 query and 2 key/value heads), seeded random
    /// weights, the built-in word-hash tokenizer; n = 50, f = 12.
    LlamaTiny,
}

impl GenModel {
    fn name(self) -> &'static str {
        "llama-tiny"
    }

    fn load(self) -> anyhow::Result<(LlamaWeights, LlamaFixed, models::BuiltinTokenizer)> {
        let w = LlamaWeights::random(LlamaConfig::llama_tiny(), models::registry::SEED)?;
        let fx = LlamaFixed::new(&w, Fixed { n: 50, f: 12 });
        let tok = models::BuiltinTokenizer::new(w.config.vocab)?;
        Ok((w, fx, tok))
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
    /// Bytes one server sent.
    pub comm_bytes: u64,
    /// Online rounds.
    pub rounds: u64,
    /// The secure output equals the plaintext fixed-point one bit for bit.
    pub exact: bool,
    /// The fixed-point argmax equals the f64 model's on the same prefix.
    pub matches_float: bool,
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

/// Run a session: the prefill over `prompt`, then `new_tokens` decode steps; `each` sees
/// every step as it ends.
///
/// # Errors
/// If a program does not build or a run fails.
pub fn run_session(
    w: &LlamaWeights,
    fx: &LlamaFixed,
    prompt: &[u32],
    new_tokens: usize,
    imp: Impl,
    sampling: Sampling,
    mut each: impl FnMut(&StepRow),
) -> anyhow::Result<Session> {
    let mut dealer = fss::rng::os_rng()?;
    let mut client = fss::rng::os_rng()?;
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
        let empty = |party| PartyKeys { party, input_mask: vec![], output_mask: vec![], gates: vec![] };
        let mut keys = [empty(Party::P0), empty(Party::P1)];
        let [k0, k1] = &mut keys;
        let (report, next_masks) = deal_step(&g, &gates, &mut dealer, [k0, k1], &masks, |_, _| {})?;
        keys.iter_mut().for_each(|k| k.gates.resize_with(g.nodes.len(), || None));
        let x = fx.input(&new);
        let (want, next_plain) = plain_step(&g, &gates, &x, &plain_cache)?;
        let (x0, x1) = share_input(&x, g.n, &mut client);
        let t = Instant::now();
        let [r0, r1] = run_threads_step(&g, &gates, keys, [x0, x1], [&held[0], &held[1]])?;
        let online = t.elapsed();
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
            comm_bytes: r0.stats.comm_bytes().max(r1.stats.comm_bytes()),
            rounds: r0.stats.rounds,
            exact: y == want,
            matches_float: argmax(&logits) == argmax(&float),
        };
        each(&row);
        steps.push(row);
        masks = next_masks;
        held = [r0.carried, r1.carried];
        plain_cache = next_plain;
        ids.push(token);
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
    /// Tokens to generate.
    #[arg(long, default_value_t = 8)]
    max_new_tokens: usize,
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
    let (w, fx, tok) = a.model.load()?;
    let prompt = tok.encode(&a.prompt);
    if prompt.len() <= 2 {
        bail!("the prompt is empty: it has no tokens");
    }
    let sampling = Sampling { temperature: a.temperature, top_p: a.top_p };
    let mut all_exact = true;
    for imp in a.implementation.impls() {
        if !a.json {
            println!("{} ({}), prompt of {} tokens:", a.model.name(), imp.name(), prompt.len());
        }
        let s = run_session(&w, &fx, &prompt, a.max_new_tokens, imp, sampling, |r| {
            if !a.json {
                println!(
                    "  {} token {:>4}  online {:>6.1} ms, key {:>5.2} MB, {:>4} rounds, {}",
                    if r.step == 0 { "prefill" } else { "step   " },
                    r.token,
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
    /// One JSON object per implementation.
    #[arg(long)]
    json: bool,
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
    let (w, fx, _) = a.model.load()?;
    let mut r = DealerRng::seed_from_u64(0x9e37);
    let prompt: Vec<u32> = (0..a.prompt_len).map(|_| (r.next_u64() % w.config.vocab as u64) as u32).collect();
    let greedy = Sampling { temperature: 0.0, top_p: 1.0 };
    for imp in a.implementation.impls() {
        let s = run_session(&w, &fx, &prompt, a.new_tokens, imp, greedy, |_| {})?;
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
            transport: "mem",
            net: "none",
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
