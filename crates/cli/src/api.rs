//! What the Python bindings (`python/`) call: the command-line tool's runs, returning data
//! instead of printing it.
//!
//! - [`Model`]: a model known by name, run securely in this process (the dealer and both
//!   servers, as `fusefss demo` does) on token ids or embedded inputs, or generating text
//!   token by token (as `fusefss generate` does);
//! - [`Client`]: the same runs against two deployed servers (`fusefss serve`), as
//!   `fusefss query` does;
//! - [`compile_spec`], [`bench_ops`], [`bench_model`]: a spec's compiled costs, and the rows
//!   `fusefss bench ops --json` and `fusefss bench model --json` print;
//! - [`wipe_kept`]: wipe the spent key words kept for later keys (`fss::recycle`), as the
//!   binary does before it exits.
//!
//! Every function returns the Rust error with its context (`anyhow`); none panics on its
//! arguments.

use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use clap::Parser;
use engine::Impl;
use engine::blocks::dequantize;
use models::llama::Sampling;
use models::registry::{Llama, Loaded, ModelName};
use net::tls::{self, Role};
use serde::Serialize;
use service::Shape;

use crate::bench::model::ModelBenchArgs;
use crate::bench::ops::OpsBenchArgs;
use crate::generate::{SessionOpts, run_session_until};
use crate::model::{KeysAsked, KeysAt, KeysDefault, Link};

/// The costs of a secure run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Costs {
    /// Online time, ms: both servers, from the shared input to both output shares.
    pub online_ms: f64,
    /// Key generation, ms (`None` against deployed servers: the dealer ran elsewhere).
    pub keygen_ms: Option<f64>,
    /// One server's key bytes (`None` against deployed servers).
    pub key_bytes: Option<u64>,
    /// Bytes one server sent to the other.
    pub comm_bytes: u64,
    /// Online rounds.
    pub rounds: u64,
}

/// What a model is.
#[derive(Clone, Debug, Serialize)]
pub struct ModelInfo {
    /// Its name (`bert-tiny`, `minilm`, …, or the folder's name).
    pub name: String,
    /// The implementation of its nonlinear layers: `fusefss` or `sigma`.
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    /// Ring width: values are in `Z_{2^n}`.
    pub n: u32,
    /// Fixed-point scale: a real `x` is the ring word `round(x · 2^f)`.
    pub f: u32,
    /// Layers.
    pub layers: usize,
    /// Hidden size: an embedded token is this many values.
    pub hidden: usize,
    /// Token ids are below this.
    pub vocab: usize,
    /// Longest sequence (position table), if there is a limit.
    pub max_seq: Option<usize>,
    /// What the output is: `mean-pooled embedding`, `last hidden state` or `last token's
    /// logits`.
    pub output: &'static str,
    /// The output's scale: `f`, or `2f` for logits.
    pub output_scale: u32,
    /// Whether the model generates text ([`Model::generate`]).
    pub generates: bool,
}

/// A model, built in or from a folder, ready to run.
#[derive(Clone)]
pub struct Model {
    /// The built-in model, `None` for a folder.
    builtin: Option<ModelName>,
    /// Its name: the built-in name or the folder's.
    label: Arc<str>,
    imp: Impl,
    loaded: Arc<Loaded>,
    keys_in_memory: bool,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("name", &self.label).field("impl", &self.imp).finish()
    }
}

/// A fresh folder for one run's key bundles under the system's temporary folder.
fn temp_keys_dir(what: &str) -> PathBuf {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "fusefss-python-{what}-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A program's input.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// Token ids, embedded by the client from the public table.
    Tokens(&'a [u32]),
    /// The embedded sequence as ring words (`seq × hidden`, row-major, at scale `f`); each
    /// word is taken modulo `2^n`.
    Ring(&'a [u64]),
    /// The embedded sequence as reals (`seq × hidden`, row-major), rounded to the scale
    /// `2^{−f}` as the client does.
    Real(&'a [f64]),
}

/// One program run over one sequence.
#[derive(Clone, Debug)]
pub struct Run {
    /// Tokens (rows of the input).
    pub seq: usize,
    /// The output as ring words: the secure run's reconstruction (or, run in the clear,
    /// the plaintext fixed-point output).
    pub output: Vec<u64>,
    /// The output in real units (at [`ModelInfo::output_scale`]).
    pub values: Vec<f64>,
    /// The secure output equals the plaintext fixed-point model's bit for bit (`None`
    /// against deployed servers without a check).
    pub matches_plaintext: Option<bool>,
    /// What the run cost.
    pub costs: Costs,
    /// The f64 model's output, when asked for (from token ids only).
    pub reference: Option<Vec<f64>>,
    /// Against deployed servers: the key bundle the servers spent.
    pub bundle: Option<String>,
    /// The implementation that ran (`fusefss` or `sigma`).
    pub implementation: &'static str,
}

/// One generated token.
#[derive(Clone, Debug, Serialize)]
pub struct Token {
    /// 0 for the prefill's token.
    pub step: usize,
    /// The token id.
    pub id: u32,
    /// Its text (empty for the built-in word-hash tokenizer, which has no text).
    pub text: String,
    /// Whether it is the model's end of turn.
    pub end_of_turn: bool,
    /// The secure step equals the plaintext fixed-point model's bit for bit (`None`
    /// against deployed servers without a check).
    pub matches_plaintext: Option<bool>,
    /// What the step cost.
    pub costs: Costs,
}

/// How [`Model::generate`] and [`Client::generate`] generate.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Tokens to generate at most (generation stops at the model's end of turn).
    pub max_new_tokens: usize,
    /// Softmax temperature; 0 is greedy.
    pub temperature: f64,
    /// Nucleus sampling mass, in (0, 1].
    pub top_p: f64,
    /// Wrap the prompt in the model's chat template (SmolLM2).
    pub chat: bool,
    /// In this process: deal each step in memory just before it runs
    /// (`fusefss generate --keys-in-memory`).
    pub keys_in_memory: bool,
    /// In this process: deal each step beside the servers, handing its keys over gate by
    /// gate (`fusefss generate --keys-streamed`): the default when no other place is chosen.
    pub keys_streamed: bool,
    /// In this process: deal the whole session ahead into bundles on disk, in `keys_dir`
    /// or a fresh folder under the system's temporary folder, removed at the end
    /// (`fusefss generate --keys-on-disk`).
    pub keys_on_disk: bool,
    /// In this process: the folder for the session's bundles (implies `keys_on_disk`).
    pub keys_dir: Option<PathBuf>,
    /// Against deployed servers: recompute every step with the plaintext fixed-point model.
    pub check: bool,
    /// Against deployed servers: run every step even after the end of turn (on dummy
    /// tokens), so that the servers do not learn the answer's length.
    pub hide_length: bool,
}

impl Default for GenerateOptions {
    fn default() -> GenerateOptions {
        GenerateOptions {
            max_new_tokens: 8,
            temperature: 0.0,
            top_p: 1.0,
            chat: false,
            keys_in_memory: false,
            keys_streamed: false,
            keys_on_disk: false,
            keys_dir: None,
            check: true,
            hide_length: false,
        }
    }
}

impl GenerateOptions {
    fn sampling(&self) -> anyhow::Result<Sampling> {
        let s = Sampling { temperature: self.temperature, top_p: self.top_p };
        ensure!(s.is_valid(), "temperature must be ≥ 0 and top_p in (0, 1]");
        ensure!(self.max_new_tokens > 0, "max_new_tokens must be positive");
        Ok(s)
    }
}

/// The implementation called `name`.
///
/// # Errors
/// For a name other than `fusefss` and `sigma`.
pub fn implementation(name: &str) -> anyhow::Result<Impl> {
    match name {
        "fusefss" => Ok(Impl::Fusefss),
        "sigma" => Ok(Impl::Sigma),
        other => bail!("unknown implementation {:?}: fusefss or sigma", clip(other)),
    }
}

/// At most 64 characters of a user's string, for a message.
fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}

impl Model {
    /// Load a built-in model by name (`bert-tiny`, `minilm`, `gpt2`, `llama-tiny`,
    /// `smollm2`, …) or a Hugging Face folder (`config.json`, `model.safetensors`,
    /// `tokenizer.json`: BERT, GPT-2 or Llama), with at most `layers` layers, its nonlinear
    /// layers run by `imp` (`fusefss` or `sigma`). Secure runs deal their keys into bundles
    /// on disk, read back as the servers run (as `fusefss demo` does), or, with
    /// `keys_in_memory`, keep them in memory.
    ///
    /// # Errors
    /// For an unknown name or implementation, a folder that does not hold a model fusefss
    /// runs (the message names what is missing), or a fetched model that is missing (the
    /// message says how to fetch it).
    pub fn load(
        name_or_dir: &str,
        imp: &str,
        layers: Option<usize>,
        keys_in_memory: bool,
    ) -> anyhow::Result<Model> {
        let imp = implementation(imp)?;
        if layers == Some(0) {
            bail!("layers must be positive");
        }
        let (builtin, label, loaded) = match name_or_dir.parse::<ModelName>() {
            Ok(n) => (Some(n), n.name().to_string(), models::registry::load(n, layers)?),
            Err(e) => {
                let dir = Path::new(name_or_dir);
                let looks_like_a_path = name_or_dir.contains(std::path::MAIN_SEPARATOR)
                    || name_or_dir.starts_with('.')
                    || dir.exists();
                if !looks_like_a_path {
                    return Err(e.into());
                }
                let (loaded, label) = crate::model::load_model(ModelName::BertTiny, Some(dir), layers)?;
                (None, label, loaded)
            }
        };
        Ok(Model { builtin, label: label.into(), imp, loaded: Arc::new(loaded), keys_in_memory })
    }

    /// The model's name (a folder's name for a model from a folder).
    pub fn name(&self) -> &str {
        &self.label
    }

    /// Whether it generates text (a Llama decoder).
    fn generates(&self) -> bool {
        self.loaded.llama().is_some()
    }

    /// The built-in model a deployment's bundles name.
    fn builtin(&self) -> anyhow::Result<ModelName> {
        self.builtin.ok_or_else(|| {
            anyhow::anyhow!(
                "{}: deployed servers serve built-in models only (a model from a folder runs in this process)",
                self.label
            )
        })
    }

    /// What the model is.
    pub fn info(&self) -> ModelInfo {
        let fx = self.loaded.fixed();
        let (hidden, max_seq, output) = match &*self.loaded {
            Loaded::Bert(w, ..) => (w.config.hidden, Some(w.config.max_positions), "mean-pooled embedding"),
            Loaded::Gpt2(w, ..) => (w.config.hidden, Some(w.config.max_positions), "last hidden state"),
            Loaded::Llama(m) => (m.w.config.hidden, None, "last token's logits"),
        };
        ModelInfo {
            name: self.label.to_string(),
            implementation: self.imp.name(),
            n: fx.n,
            f: fx.f,
            layers: self.loaded.layers(),
            hidden,
            vocab: self.loaded.vocab(),
            max_seq,
            output,
            output_scale: self.output_scale(),
            generates: self.generates(),
        }
    }

    fn output_scale(&self) -> u32 {
        let f = self.loaded.fixed().f;
        if matches!(&*self.loaded, Loaded::Llama(_)) { 2 * f } else { f }
    }

    /// The token ids of `text` (with the tokenizer's special tokens), cut or repeated to
    /// `seq` tokens if given.
    ///
    /// # Errors
    /// For a text with no tokens of its own, or `seq` = 0.
    pub fn tokenize(&self, text: &str, seq: Option<usize>) -> anyhow::Result<Vec<u32>> {
        Ok(self.loaded.tokens(Some(text), seq)?)
    }

    /// The text of token ids (empty for the built-in word-hash tokenizer).
    pub fn decode(&self, ids: &[u32]) -> String {
        let vocab = self.loaded.vocab();
        let ids: Vec<u32> = ids.iter().copied().filter(|&t| (t as usize) < vocab).collect();
        match &*self.loaded {
            Loaded::Llama(m) => m.decode(&ids),
            _ => String::new(),
        }
    }

    /// Check that `ids` make a sequence this model takes.
    fn check_tokens(&self, ids: &[u32]) -> anyhow::Result<()> {
        ensure!(!ids.is_empty(), "no tokens");
        let vocab = self.loaded.vocab();
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            bail!("token id {bad} is outside the vocabulary of {vocab}");
        }
        self.check_seq(ids.len())
    }

    fn check_seq(&self, seq: usize) -> anyhow::Result<()> {
        ensure!(seq > 0, "no tokens");
        if let Some(max) = self.info().max_seq {
            ensure!(seq <= max, "{} tokens: {} takes at most {max}", seq, self.label);
        }
        Ok(())
    }

    /// The client's input for token ids: their embedded sequence as ring words (`seq ×
    /// hidden`, at scale `f`), as [`Input::Ring`] takes it.
    ///
    /// # Errors
    /// For ids outside the vocabulary, none, or more than the model takes.
    pub fn embedded(&self, ids: &[u32]) -> anyhow::Result<Vec<u64>> {
        self.check_tokens(ids)?;
        Ok(self.loaded.input(ids))
    }

    /// The client's input: ring words of the embedded sequence, and its length in tokens.
    fn input(&self, input: Input<'_>) -> anyhow::Result<(usize, Vec<u64>)> {
        let fx = self.loaded.fixed();
        let hidden = self.info().hidden;
        let rows = |len: usize| -> anyhow::Result<usize> {
            ensure!(
                len > 0 && len.is_multiple_of(hidden),
                "an input of {len} values is not a whole number of rows of {hidden} (the model's hidden size)"
            );
            let seq = len / hidden;
            self.check_seq(seq)?;
            Ok(seq)
        };
        Ok(match input {
            Input::Tokens(ids) => {
                self.check_tokens(ids)?;
                (ids.len(), self.loaded.input(ids))
            }
            Input::Ring(x) => (rows(x.len())?, x.iter().map(|&v| v & fss::ring::mask(fx.n)).collect()),
            Input::Real(x) => {
                let seq = rows(x.len())?;
                let limit = f64::from(fx.n as i32 - 1 - fx.f as i32).exp2();
                if let Some(bad) = x.iter().find(|v| !v.is_finite() || v.abs() >= limit) {
                    bail!("input value {bad} does not fit the ring (|x| < 2^{})", fx.n - 1 - fx.f);
                }
                (seq, engine::blocks::quantize(x, fx.f, fx.n).to_vec())
            }
        })
    }

    /// Run the model on one sequence: securely (keys dealt here, both servers on two
    /// threads, the input secret-shared and the output reconstructed, as `fusefss demo`),
    /// or in the clear (the plaintext fixed-point program, no keys). With `reference`, also
    /// the f64 model's output (token inputs only). `progress(done, total)` counts the
    /// dealer's nodes.
    ///
    /// # Errors
    /// For an input the model does not take, or a failed run.
    pub fn run(
        &self,
        input: Input<'_>,
        secure: bool,
        reference: bool,
        mut progress: impl FnMut(usize, usize) + Send,
    ) -> anyhow::Result<Run> {
        let (seq, x) = self.input(input)?;
        let g = self.loaded.graph(seq)?;
        let float = match input {
            Input::Tokens(ids) if reference => Some(self.loaded.float_output(ids)?),
            _ => None,
        };
        let (output, matches, costs) = if secure {
            let mut rng = fss::rng::os_rng()?;
            let (keys, temp) = if self.keys_in_memory {
                (KeysAt::Memory, None)
            } else {
                let d = temp_keys_dir("keys");
                (KeysAt::Disk(d.clone()), Some(d))
            };
            let float_out = float.as_deref().unwrap_or(&[]);
            let o = crate::model::run_with(
                &g,
                &x,
                float_out,
                self.imp,
                &mut rng,
                &mut progress,
                Link::default(),
                &keys,
            );
            if let Some(d) = temp {
                let _ = std::fs::remove_dir_all(d);
            }
            let o = o?;
            let costs = Costs {
                online_ms: o.online.as_secs_f64() * 1e3,
                keygen_ms: Some(o.deal.time.as_secs_f64() * 1e3),
                key_bytes: Some(o.deal.key_bits.div_ceil(8)),
                comm_bytes: o.runs[0].stats.comm_bytes().max(o.runs[1].stats.comm_bytes()),
                rounds: o.runs[0].stats.rounds,
            };
            let exact = o.exact();
            (o.secure, exact, costs)
        } else {
            let gates = engine::build(&g, self.imp)?;
            let y = engine::plain(&g, &gates, &x);
            progress(g.nodes.len(), g.nodes.len());
            (y, true, Costs { keygen_ms: Some(0.0), key_bytes: Some(0), ..Costs::default() })
        };
        let scale = self.output_scale();
        let values = output.iter().map(|&v| dequantize(v, scale, g.n)).collect();
        Ok(Run {
            seq,
            output,
            values,
            matches_plaintext: Some(matches),
            costs,
            reference: float,
            bundle: None,
            implementation: self.imp.name(),
        })
    }

    /// Embed each text with one run at its own token count (see [`Model::run`]);
    /// `progress(text, done, total)` counts the dealer's nodes of each text's run.
    ///
    /// # Errors
    /// For a model that generates (its output is logits, not an embedding), a text with no
    /// tokens, or a failed run.
    pub fn embed(
        &self,
        texts: &[String],
        secure: bool,
        reference: bool,
        mut progress: impl FnMut(usize, usize, usize) + Send,
    ) -> anyhow::Result<Vec<Run>> {
        if self.generates() {
            bail!("{} generates text (its output is logits): use generate() or forward()", self.label);
        }
        let mut runs = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let ids = self.tokenize(text, None).with_context(|| format!("text {i}"))?;
            let run = self
                .run(Input::Tokens(&ids), secure, reference, |d, t| progress(i, d, t))
                .with_context(|| format!("text {i}"))?;
            runs.push(run);
        }
        Ok(runs)
    }

    fn llama(&self) -> anyhow::Result<&Llama> {
        self.loaded.llama().ok_or_else(|| {
            anyhow::anyhow!("{} does not generate text: use llama-tiny or smollm2", self.label)
        })
    }

    /// The prompt's tokens for a generation.
    ///
    /// # Errors
    /// For a model that does not generate, or a prompt with no tokens.
    pub fn prompt(&self, prompt: &str, chat: bool) -> anyhow::Result<Vec<u32>> {
        Ok(self.llama()?.prompt(prompt, chat)?)
    }

    /// Generate text from `prompt` in this process, token by token (as `fusefss generate`):
    /// `each` sees every token as its step ends, and ends the session early by returning
    /// false. Returns the prompt's tokens.
    ///
    /// # Errors
    /// For a model that does not generate, bad options, or a failed step.
    pub fn generate(
        &self,
        prompt: &str,
        o: &GenerateOptions,
        mut each: impl FnMut(Token) -> bool,
    ) -> anyhow::Result<Vec<u32>> {
        let m = self.llama()?;
        let sampling = o.sampling()?;
        let ids = m.prompt(prompt, o.chat)?;
        let on_disk = o.keys_on_disk || o.keys_dir.is_some();
        ensure!(
            [o.keys_streamed, o.keys_in_memory, on_disk].iter().filter(|&&b| b).count() <= 1,
            "keys are streamed, in memory or in a folder: choose one"
        );
        // Streamed unless asked otherwise, as `fusefss generate`.
        let asked = KeysAsked {
            in_memory: o.keys_in_memory,
            streamed: o.keys_streamed,
            on_disk: o.keys_on_disk,
            dir: o.keys_dir.as_deref(),
        };
        let (keys, temp) = asked.resolve(KeysDefault::Stream, || temp_keys_dir("generate"));
        let opts = SessionOpts { link: Link::default(), keys, stop_at_eos: true };
        let result = run_session_until(m, &ids, o.max_new_tokens, self.imp, sampling, &opts, |r| {
            each(Token {
                step: r.step,
                id: r.token,
                text: m.decode(&[r.token]),
                end_of_turn: Some(r.token) == m.eos,
                matches_plaintext: Some(r.exact),
                costs: Costs {
                    online_ms: r.online_ms,
                    keygen_ms: Some(r.keygen_ms),
                    key_bytes: Some(r.key_bytes),
                    comm_bytes: r.comm_bytes,
                    rounds: r.rounds,
                },
            })
        });
        if let Some(d) = temp {
            let _ = std::fs::remove_dir_all(d);
        }
        result.map(|_| ids)
    }
}

/// A client of two deployed servers (`fusefss serve`): the same runs as [`Model`]'s, with
/// the servers' key bundles (`fusefss dealer`), over TLS with the dealer's pinned
/// certificates.
#[derive(Clone)]
pub struct Client {
    servers: [String; 2],
    tls: PathBuf,
    me: Arc<tls::Identity>,
    timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("servers", &self.servers).field("tls", &self.tls).finish()
    }
}

impl Client {
    /// A client of the servers at `servers` (party 0's address, then party 1's), with the
    /// dealer's certificate folder `tls` (the client's key and the servers' certificates),
    /// waiting at most `timeout` for an answer.
    ///
    /// # Errors
    /// For other than two addresses, an address that does not resolve, or a certificate
    /// folder without the client's identity.
    pub fn new(servers: &[String], tls: &Path, timeout: Duration) -> anyhow::Result<Client> {
        let [s0, s1] = servers else {
            bail!("servers takes two addresses, party 0's and party 1's (got {})", servers.len());
        };
        for (party, a) in servers.iter().enumerate() {
            a.to_socket_addrs().with_context(|| format!("server {party} address {:?}", clip(a)))?;
        }
        let me = tls::load_identity(tls, Role::Client)
            .with_context(|| format!("the client's certificate in {}", tls.display()))?;
        Ok(Client {
            servers: [s0.clone(), s1.clone()],
            tls: tls.to_path_buf(),
            me: Arc::new(me),
            timeout: timeout.max(Duration::from_secs(1)),
        })
    }

    /// One query of `model` on `input` (as `fusefss query`): the servers must hold bundles
    /// for this model at the input's token count. With `check`, recompute the plaintext
    /// fixed-point output and report whether the secure one matches it.
    ///
    /// # Errors
    /// For an input the model does not take, or a failed query (the servers' message).
    pub fn run(&self, model: &Model, input: Input<'_>, check: bool) -> anyhow::Result<Run> {
        let (seq, x) = model.input(input)?;
        let loaded = &model.loaded;
        let g = loaded.graph(seq)?;
        let out_len = g.shape(g.output).len();
        let shape = Shape {
            model: model.builtin()?,
            seq: seq as u32,
            layers: Some(loaded.layers() as u32),
            new: None,
        };
        let reply = crate::deploy::client::ask_both(
            shape,
            &x,
            loaded.fixed().n,
            out_len,
            &self.servers,
            &self.tls,
            &self.me,
            self.timeout,
        )?;
        let [a0, a1] = &reply.answers;
        let imp = reply.descriptor.imp;
        let matches = if check {
            let gates = engine::build(&g, imp)?;
            Some(engine::plain(&g, &gates, &x) == reply.output)
        } else {
            None
        };
        let scale = model.output_scale();
        let values = reply.output.iter().map(|&v| dequantize(v, scale, a0.n)).collect();
        Ok(Run {
            seq,
            output: reply.output,
            values,
            matches_plaintext: matches,
            costs: Costs {
                online_ms: a0.online_ms.max(a1.online_ms),
                keygen_ms: None,
                key_bytes: None,
                comm_bytes: a0.comm_bytes.max(a1.comm_bytes),
                rounds: a0.rounds.max(a1.rounds),
            },
            reference: None,
            bundle: Some(a0.bundle.clone()),
            implementation: imp.name(),
        })
    }

    /// A generation session with the servers (as `fusefss query --generate`): the servers
    /// must hold sessions for this model at the prompt's token count and at least
    /// `max_new_tokens` new tokens. `each` sees every token; returning false ends the
    /// session (the servers delete its keys). Returns the prompt's tokens.
    ///
    /// # Errors
    /// For a model that does not generate, bad options, or a failed step.
    pub fn generate(
        &self,
        model: &Model,
        prompt: &str,
        o: &GenerateOptions,
        mut each: impl FnMut(Token) -> bool,
    ) -> anyhow::Result<Vec<u32>> {
        let m = model.llama()?;
        let ids = m.prompt(prompt, o.chat)?;
        let session = crate::deploy::client::RemoteSession {
            model: model.builtin()?,
            layers: model.loaded.layers() as u32,
            llama: m,
            prompt: &ids,
            max_new_tokens: o.max_new_tokens,
            sampling: o.sampling()?,
            check: o.check,
            hide_length: o.hide_length,
            servers: &self.servers,
            tls: &self.tls,
            me: &self.me,
            timeout: self.timeout,
        };
        crate::deploy::client::generate_remote(&session, |s| {
            s.after_end
                || each(Token {
                    step: s.step,
                    id: s.token,
                    text: m.decode(&[s.token]),
                    end_of_turn: Some(s.token) == m.eos,
                    matches_plaintext: s.matches_plaintext,
                    costs: Costs {
                        online_ms: s.online_ms,
                        keygen_ms: None,
                        key_bytes: None,
                        comm_bytes: s.comm_bytes,
                        rounds: s.rounds,
                    },
                })
        })?;
        Ok(ids)
    }
}

/// A compiled spec's costs per element.
#[derive(Clone, Debug, Serialize)]
pub struct SpecCosts {
    /// The spec's name.
    pub name: String,
    /// Input width.
    pub in_bits: u32,
    /// Output width.
    pub out_bits: u32,
    /// Intervals.
    pub intervals: usize,
    /// One party's key bytes per element.
    pub key_bytes_per_elem: f64,
    /// Bytes one party sends and receives per element (as `bench ops` counts).
    pub comm_bytes_per_elem: f64,
    /// Online rounds.
    pub rounds: u32,
    /// Comparison queries per element.
    pub queries: u64,
    /// The comparison keying, lookup backend and full-width mode the compiler chose.
    pub backend: String,
}

/// Parse `bench ops`'s arguments (without `bench ops`).
fn ops_args(argv: &[String]) -> anyhow::Result<OpsBenchArgs> {
    #[derive(Parser)]
    #[command(name = "bench ops", no_binary_name = true)]
    struct Ops {
        #[command(flatten)]
        args: OpsBenchArgs,
    }
    Ok(Ops::try_parse_from(argv).map_err(|e| anyhow::anyhow!("{}", e.render().to_string().trim()))?.args)
}

/// Wipe the spent key words this process keeps for later keys to overwrite
/// (`fss::recycle`): the binary does it before it exits, the Python package at exit.
pub fn wipe_kept() {
    fss::recycle::wipe_all();
}

/// Compile the spec `json` (the format of `fusefss fit` and `docs/compiler.md`) with the
/// backends `options` select (`bench ops`'s `--cmp`, `--lookup`, `--split`, `--grouped`
/// arguments; none: the compiler's choice), and return its costs per element.
///
/// # Errors
/// For a spec that does not parse or validate, or options that do not apply to it.
pub fn compile_spec(json: &str, options: &[String]) -> anyhow::Result<SpecCosts> {
    let spec = compiler::OperatorSpec::from_json(json).context("spec")?;
    let args = ops_args(options)?;
    let p = crate::bench::ops::compile_for(&spec, &args)?;
    let c = p.cost();
    Ok(SpecCosts {
        name: spec.name.clone(),
        in_bits: spec.in_bits,
        out_bits: spec.out_bits,
        intervals: spec.pieces.len(),
        key_bytes_per_elem: c.key_bits as f64 / 8.0,
        comm_bytes_per_elem: 2.0 * c.sent_bits as f64 / 8.0,
        rounds: c.rounds,
        queries: c.queries,
        backend: crate::bench::ops::backend_name(&p),
    })
}

/// The rows of `fusefss bench ops ARGS --json`, each handed to `each` as it is measured;
/// `spec_json` measures that spec too (as `--spec FILE` does).
///
/// # Errors
/// For arguments `bench ops` refuses, a bad spec, or a failed run.
pub fn bench_ops(
    argv: &[String],
    spec_json: Option<&str>,
    mut each: impl FnMut(&serde_json::Value),
) -> anyhow::Result<Vec<serde_json::Value>> {
    let args = ops_args(argv)?;
    let spec = match (spec_json, &args.spec) {
        (Some(text), _) => Some(compiler::OperatorSpec::from_json(text).context("spec")?),
        (None, Some(path)) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Some(
                compiler::OperatorSpec::from_json(&text)
                    .with_context(|| format!("spec {}", path.display()))?,
            )
        }
        (None, None) => None,
    };
    let mut rows = vec![];
    crate::bench::ops::rows(&args, spec.as_ref(), |row| {
        let v = serde_json::to_value(row)?;
        each(&v);
        rows.push(v);
        Ok(())
    })?;
    Ok(rows)
}

/// The rows of `fusefss bench model ARGS --json`; `progress(done, total)` counts the runs.
///
/// # Errors
/// For arguments `bench model` refuses, a missing model, or a failed run.
pub fn bench_model(
    argv: &[String],
    progress: impl FnMut(usize, usize),
) -> anyhow::Result<Vec<serde_json::Value>> {
    #[derive(Parser)]
    #[command(name = "bench model", no_binary_name = true)]
    struct ModelCmd {
        #[command(flatten)]
        args: ModelBenchArgs,
    }
    let args = ModelCmd::try_parse_from(argv)
        .map_err(|e| anyhow::anyhow!("{}", e.render().to_string().trim()))?
        .args;
    let rows = crate::bench::model::rows(&args, progress)?;
    rows.iter().map(|r| Ok(serde_json::to_value(r)?)).collect()
}
