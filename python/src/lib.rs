//! `fusefss._native`: the Rust side of the Python package `fusefss`.
//!
//! A thin layer over `fusefss::api`: arguments come in as Python strings, lists and bytes,
//! results go out as JSON text (small records) and little-endian bytes (arrays, which
//! `fusefss/__init__.py` turns into numpy arrays). Long work runs with the interpreter
//! released (`Python::detach`); progress callbacks re-attach for the moment of the call.
//! Every error is a `fusefss.FusefssError` carrying the Rust error's message and context.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fusefss::api;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// mimalloc, as the `fusefss` binary uses: the servers' large per-layer buffers are reused
/// instead of mapped and unmapped afresh, which the online times depend on.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

pyo3::create_exception!(
    fusefss,
    FusefssError,
    PyException,
    "An error from fusefss: its message is the Rust error's, with its context."
);

/// The Python exception for a Rust error (its whole chain of context).
fn err(e: anyhow::Error) -> PyErr {
    FusefssError::new_err(format!("{e:#}"))
}

fn json<T: serde::Serialize + ?Sized>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| err(e.into()))
}

/// Call an optional Python progress callback (errors in it are ignored: progress is best
/// effort and must not end the work).
fn report<A>(cb: Option<&Py<PyAny>>, args: A)
where
    A: for<'py> pyo3::call::PyCallArgs<'py>,
{
    if let Some(cb) = cb {
        Python::attach(|py| {
            let _ = cb.call1(py, args);
        });
    }
}

fn u64s(b: &[u8]) -> PyResult<Vec<u64>> {
    if !b.len().is_multiple_of(8) {
        return Err(FusefssError::new_err(format!("{} bytes are not whole 64-bit words", b.len())));
    }
    Ok(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
}

fn f64s(b: &[u8]) -> PyResult<Vec<f64>> {
    Ok(u64s(b)?.into_iter().map(f64::from_bits).collect())
}

fn bytes_u64(py: Python<'_>, v: &[u64]) -> Py<PyBytes> {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    PyBytes::new(py, &b).unbind()
}

fn bytes_f64(py: Python<'_>, v: &[f64]) -> Py<PyBytes> {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    PyBytes::new(py, &b).unbind()
}

/// A run as Python gets it: its record as JSON, the output's ring words and reals, and the
/// f64 reference (if computed), as little-endian bytes.
type RunOut = (String, Py<PyBytes>, Py<PyBytes>, Option<Py<PyBytes>>);

fn run_out(py: Python<'_>, r: &api::Run) -> PyResult<RunOut> {
    let meta = serde_json::json!({
        "seq": r.seq,
        "matches_plaintext": r.matches_plaintext,
        "costs": r.costs,
        "bundle": r.bundle,
        "impl": r.implementation,
    });
    Ok((
        json(&meta)?,
        bytes_u64(py, &r.output),
        bytes_f64(py, &r.values),
        r.reference.as_ref().map(|v| bytes_f64(py, v)),
    ))
}

/// A model loaded by name (`fusefss.Model` wraps it).
#[pyclass(module = "fusefss._native", frozen)]
struct NativeModel {
    inner: api::Model,
}

/// The embedded input's owner: token ids, ring words or reals.
fn input<'a>(
    tokens: &'a Option<Vec<u32>>,
    ring: &'a Option<Vec<u64>>,
    real: &'a Option<Vec<f64>>,
) -> PyResult<api::Input<'a>> {
    match (tokens, ring, real) {
        (Some(t), None, None) => Ok(api::Input::Tokens(t)),
        (None, Some(x), None) => Ok(api::Input::Ring(x)),
        (None, None, Some(x)) => Ok(api::Input::Real(x)),
        _ => Err(FusefssError::new_err("give exactly one of token ids and inputs")),
    }
}

#[pymethods]
impl NativeModel {
    #[new]
    #[pyo3(signature = (name, implementation, layers=None, keys_in_memory=false))]
    fn new(
        py: Python<'_>,
        name: &str,
        implementation: &str,
        layers: Option<usize>,
        keys_in_memory: bool,
    ) -> PyResult<Self> {
        let inner =
            py.detach(|| api::Model::load(name, implementation, layers, keys_in_memory)).map_err(err)?;
        Ok(NativeModel { inner })
    }

    fn info(&self) -> PyResult<String> {
        json(&self.inner.info())
    }

    #[pyo3(signature = (text, seq=None))]
    fn tokenize(&self, text: &str, seq: Option<usize>) -> PyResult<Vec<u32>> {
        self.inner.tokenize(text, seq).map_err(err)
    }

    fn decode(&self, ids: Vec<u32>) -> String {
        self.inner.decode(&ids)
    }

    fn prompt(&self, prompt: &str, chat: bool) -> PyResult<Vec<u32>> {
        self.inner.prompt(prompt, chat).map_err(err)
    }

    /// The client's embedded input for token ids, as ring words.
    fn input(&self, py: Python<'_>, ids: Vec<u32>) -> PyResult<Py<PyBytes>> {
        let x = self.inner.embedded(&ids).map_err(err)?;
        Ok(bytes_u64(py, &x))
    }

    #[pyo3(signature = (tokens=None, ring=None, real=None, secure=true, reference=false, progress=None))]
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        py: Python<'_>,
        tokens: Option<Vec<u32>>,
        ring: Option<Bound<'_, PyBytes>>,
        real: Option<Bound<'_, PyBytes>>,
        secure: bool,
        reference: bool,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<RunOut> {
        let ring = ring.map(|b| u64s(b.as_bytes())).transpose()?;
        let real = real.map(|b| f64s(b.as_bytes())).transpose()?;
        let inp = input(&tokens, &ring, &real)?;
        let model = &self.inner;
        let cb = progress.as_ref();
        let r = py.detach(|| model.run(inp, secure, reference, |d, t| report(cb, (d, t)))).map_err(err)?;
        run_out(py, &r)
    }

    #[pyo3(signature = (texts, secure=true, reference=false, progress=None))]
    fn embed(
        &self,
        py: Python<'_>,
        texts: Vec<String>,
        secure: bool,
        reference: bool,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<RunOut>> {
        let model = &self.inner;
        let cb = progress.as_ref();
        let runs = py
            .detach(|| model.embed(&texts, secure, reference, |i, d, t| report(cb, (i, d, t))))
            .map_err(err)?;
        runs.iter().map(|r| run_out(py, r)).collect()
    }

    #[pyo3(signature = (prompt, max_new_tokens, temperature, top_p, chat, keys_in_memory, keys_dir=None, keys_streamed=false, keys_on_disk=false))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        prompt: String,
        max_new_tokens: usize,
        temperature: f64,
        top_p: f64,
        chat: bool,
        keys_in_memory: bool,
        keys_dir: Option<PathBuf>,
        keys_streamed: bool,
        keys_on_disk: bool,
    ) -> NativeGeneration {
        let o = api::GenerateOptions {
            max_new_tokens,
            temperature,
            top_p,
            chat,
            keys_in_memory,
            keys_streamed,
            keys_on_disk,
            keys_dir,
            ..api::GenerateOptions::default()
        };
        let model = self.inner.clone();
        NativeGeneration::start(move |each| model.generate(&prompt, &o, each))
    }
}

/// What a generation's thread reports.
enum Event {
    Prompt(Vec<u32>),
    Token(api::Token),
    Failed(String),
}

/// A generation running on its own thread, read token by token (`fusefss.Generation`
/// wraps it).
#[pyclass(module = "fusefss._native", frozen)]
struct NativeGeneration {
    rx: Mutex<Receiver<Event>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl NativeGeneration {
    /// Run `session` on a thread: it hands each token to its callback, which sends it here
    /// and asks the session to end once the reader has gone or asked to stop.
    fn start<F>(session: F) -> NativeGeneration
    where
        F: FnOnce(&mut dyn FnMut(api::Token) -> bool) -> anyhow::Result<Vec<u32>> + Send + 'static,
    {
        let (tx, rx): (Sender<Event>, Receiver<Event>) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let sent = tx.clone();
            let mut each =
                move |t: api::Token| !halt.load(Ordering::Relaxed) && sent.send(Event::Token(t)).is_ok();
            let _ = match session(&mut each) {
                Ok(prompt) => tx.send(Event::Prompt(prompt)),
                Err(e) => tx.send(Event::Failed(format!("{e:#}"))),
            };
        });
        NativeGeneration { rx: Mutex::new(rx), stop, thread: Mutex::new(Some(thread)) }
    }
}

#[pymethods]
impl NativeGeneration {
    /// The next event: `("token", json)`, `("prompt", ids)` at the end, or `None` once all
    /// is read. Waits with the interpreter released, and answers Ctrl-C within 0.1 s.
    fn next_event(&self, py: Python<'_>) -> PyResult<Option<(String, String)>> {
        loop {
            let got = py.detach(|| {
                let rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
                rx.recv_timeout(Duration::from_millis(100))
            });
            match got {
                Ok(Event::Token(t)) => return Ok(Some(("token".into(), json(&t)?))),
                Ok(Event::Prompt(ids)) => return Ok(Some(("prompt".into(), json(&ids)?))),
                Ok(Event::Failed(msg)) => return Err(FusefssError::new_err(msg)),
                Err(RecvTimeoutError::Disconnected) => return Ok(None),
                Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            }
        }
    }

    /// Ask the session to end after its current step, and wait for it (interpreter
    /// released).
    fn close(&self, py: Python<'_>) {
        self.stop.store(true, Ordering::Relaxed);
        let t = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = t {
            py.detach(|| {
                let _ = t.join();
            });
        }
    }
}

impl Drop for NativeGeneration {
    fn drop(&mut self) {
        // Dropped unread: the session ends after its current step, on its own thread.
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A client of two deployed servers (`fusefss.Client` wraps it).
#[pyclass(module = "fusefss._native", frozen)]
struct NativeClient {
    inner: api::Client,
}

#[pymethods]
impl NativeClient {
    #[new]
    fn new(servers: Vec<String>, tls_dir: PathBuf, timeout_s: f64) -> PyResult<Self> {
        let timeout =
            Duration::from_secs_f64(if timeout_s.is_finite() { timeout_s.clamp(1.0, 1e6) } else { 1e6 });
        let inner = api::Client::new(&servers, &tls_dir, timeout).map_err(err)?;
        Ok(NativeClient { inner })
    }

    #[pyo3(signature = (model, tokens=None, ring=None, real=None, check=true))]
    fn run(
        &self,
        py: Python<'_>,
        model: PyRef<'_, NativeModel>,
        tokens: Option<Vec<u32>>,
        ring: Option<Bound<'_, PyBytes>>,
        real: Option<Bound<'_, PyBytes>>,
        check: bool,
    ) -> PyResult<RunOut> {
        let ring = ring.map(|b| u64s(b.as_bytes())).transpose()?;
        let real = real.map(|b| f64s(b.as_bytes())).transpose()?;
        let inp = input(&tokens, &ring, &real)?;
        let (client, model) = (&self.inner, &model.inner);
        let r = py.detach(|| client.run(model, inp, check)).map_err(err)?;
        run_out(py, &r)
    }

    #[pyo3(signature = (model, prompt, max_new_tokens, temperature, top_p, chat, check, hide_length))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        model: PyRef<'_, NativeModel>,
        prompt: String,
        max_new_tokens: usize,
        temperature: f64,
        top_p: f64,
        chat: bool,
        check: bool,
        hide_length: bool,
    ) -> NativeGeneration {
        let o = api::GenerateOptions {
            max_new_tokens,
            temperature,
            top_p,
            chat,
            check,
            hide_length,
            ..api::GenerateOptions::default()
        };
        let (client, model) = (self.inner.clone(), model.inner.clone());
        NativeGeneration::start(move |each| client.generate(&model, &prompt, &o, each))
    }
}

/// A spec's compiled costs per element, as JSON.
#[pyfunction]
fn compile_spec(py: Python<'_>, spec_json: &str, options: Vec<String>) -> PyResult<String> {
    let c = py.detach(|| api::compile_spec(spec_json, &options)).map_err(err)?;
    json(&c)
}

/// `bench ops` rows as JSON texts; `on_row(json)` sees each as it is measured.
#[pyfunction]
#[pyo3(signature = (argv, spec_json=None, on_row=None))]
fn bench_ops(
    py: Python<'_>,
    argv: Vec<String>,
    spec_json: Option<String>,
    on_row: Option<Py<PyAny>>,
) -> PyResult<Vec<String>> {
    let cb = on_row.as_ref();
    let rows = py
        .detach(|| {
            api::bench_ops(&argv, spec_json.as_deref(), |row| {
                if cb.is_some() {
                    report(cb, (row.to_string(),));
                }
            })
        })
        .map_err(err)?;
    Ok(rows.iter().map(|r| r.to_string()).collect())
}

/// `bench model` rows as JSON texts; `progress(done, total)` counts the runs.
#[pyfunction]
#[pyo3(signature = (argv, progress=None))]
fn bench_model(py: Python<'_>, argv: Vec<String>, progress: Option<Py<PyAny>>) -> PyResult<Vec<String>> {
    let cb = progress.as_ref();
    let rows = py.detach(|| api::bench_model(&argv, |d, t| report(cb, (d, t)))).map_err(err)?;
    Ok(rows.iter().map(|r| r.to_string()).collect())
}

/// Wipe the spent key words kept for later keys (`fss::recycle`); registered to run at exit.
#[pyfunction]
fn wipe_kept() {
    api::wipe_kept();
}

/// The Rust side of `fusefss`: use the package `fusefss`, which wraps this module.
#[pymodule(name = "_native")]
mod native {
    #[pymodule_export]
    use super::{
        FusefssError, NativeClient, NativeGeneration, NativeModel, bench_model, bench_ops, compile_spec,
        wipe_kept,
    };
}
