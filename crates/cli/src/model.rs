//! Whole models: the built-in and real models, their secure runs against the plaintext
//! fixed-point reference and the f64 reference (`fusefss demo`, `fusefss bench model`).

use std::time::{Duration, Instant};

use clap::ValueEnum;
use engine::blocks::dequantize;
use engine::{DealReport, Graph, Impl, PartyRun};
use fss::rng::DealerRng;
use models::float;
pub use models::registry::{Loaded, ModelName, load};

/// Load a built-in model, or the Hugging Face folder `dir` when given; with its name for
/// reports (`bert-tiny`, or the folder's name).
///
/// # Errors
/// If the model's files are missing or do not load.
pub fn load_model(
    model: ModelName,
    dir: Option<&std::path::Path>,
    layers: Option<usize>,
) -> anyhow::Result<(Loaded, String)> {
    match dir {
        None => Ok((load(model, layers)?, model.name().to_string())),
        Some(d) => {
            let loaded = models::registry::load_dir(d, layers)
                .map_err(|e| anyhow::anyhow!("model folder {}: {e}", d.display()))?;
            let name =
                d.file_name().map_or_else(|| d.display().to_string(), |n| n.to_string_lossy().into_owned());
            Ok((loaded, name))
        }
    }
}
use serde::Serialize;

/// Which implementation(s) of the nonlinear layers a comparing command runs: one
/// [`Impl`] or both (the one choice the commands share; a bundle holds keys for one `Impl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ImplChoice {
    /// Operators compiled from specs (`crates/compiler`).
    Fusefss,
    /// SIGMA's protocols (`crates/gates`).
    Sigma,
    /// Both, side by side.
    Both,
}

impl ImplChoice {
    pub fn impls(self) -> Vec<Impl> {
        match self {
            ImplChoice::Fusefss => vec![Impl::Fusefss],
            ImplChoice::Sigma => vec![Impl::Sigma],
            ImplChoice::Both => vec![Impl::Fusefss, Impl::Sigma],
        }
    }
}

/// One secure run and its comparisons.
pub struct Outcome {
    pub secure: Vec<u64>,
    pub plain: Vec<u64>,
    pub float: Vec<f64>,
    pub deal: DealReport,
    pub runs: [PartyRun; 2],
    pub online: Duration,
    /// Bytes of both parties' bundles on disk (0 with keys in memory).
    pub keys_on_disk_bytes: u64,
    /// Where the keys were ([`KeysAt::name`]).
    pub keys: &'static str,
    /// AES blocks one server encrypted online (the mean of the two; `None` when the dealer
    /// ran at the same time, [`KeysAt::Stream`]).
    pub aes_blocks: Option<u64>,
    /// The process's CPU time during the online phase, every thread (with
    /// [`KeysAt::Stream`] the dealer's too).
    pub online_cpu: Option<Duration>,
    /// Each party's bundle reader's CPU time ([`KeysAt::Disk`]).
    pub reader_cpu: Option<[service::ReaderCpu; 2]>,
}

/// Where the dealer puts a run's keys in one process.
#[derive(Clone, Debug)]
pub enum KeysAt {
    /// In memory (both parties' keys at once).
    Memory,
    /// One bundle per party in this folder, written by the dealer, read back by the servers
    /// a few sections ahead of the online phase, then deleted: memory for a few layers'
    /// keys, not all of them.
    Disk(std::path::PathBuf),
    /// Dealt while the servers run, handed over gate by gate (a few gates ahead at most):
    /// neither memory nor disk for all the keys, but the dealer shares the machine with the
    /// servers during the online phase, so its time is not the online time alone; large
    /// row-wise gates run in chunks, one after another (more rounds, same outputs).
    Stream,
}

impl KeysAt {
    /// `"memory"`, `"disk"` or `"stream"`.
    pub fn name(&self) -> &'static str {
        match self {
            KeysAt::Memory => "memory",
            KeysAt::Disk(_) => "disk",
            KeysAt::Stream => "stream",
        }
    }
}

/// Where a command run in one process keeps its keys.
#[derive(clap::Args)]
pub struct KeysArgs {
    /// Keep the keys in memory (faster to deal than bundles on disk; both parties' keys at
    /// once in memory).
    #[arg(long, conflicts_with_all = ["keys_dir", "keys_streamed", "keys_on_disk"])]
    keys_in_memory: bool,
    /// Deal while the servers run, handing keys over gate by gate (the default of
    /// `generate`; for runs whose keys fit neither memory nor disk; the dealer then shares
    /// the machine with the servers).
    #[arg(long, conflicts_with_all = ["keys_dir", "keys_on_disk"])]
    keys_streamed: bool,
    /// Deal the whole run ahead into bundles on disk, then run (the default of every
    /// command but `generate`).
    #[arg(long)]
    keys_on_disk: bool,
    /// Folder for the bundles on disk (default: a fresh folder under the system's temporary
    /// folder, removed at the end).
    #[arg(long)]
    keys_dir: Option<std::path::PathBuf>,
}

/// Where a command keeps its keys when no option says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeysDefault {
    /// Bundles on disk, dealt ahead.
    Disk,
    /// Streamed beside the servers.
    Stream,
}

impl KeysArgs {
    /// Where the keys go (bundles on disk unless an option says otherwise), and the folder
    /// to remove at the end (if one was made here).
    pub fn resolve(&self) -> (KeysAt, Option<std::path::PathBuf>) {
        self.resolve_or(KeysDefault::Disk)
    }

    /// Where the keys go, `default` unless an option says, and the folder to remove at the
    /// end (if one was made here).
    pub fn resolve_or(&self, default: KeysDefault) -> (KeysAt, Option<std::path::PathBuf>) {
        let asked = KeysAsked {
            in_memory: self.keys_in_memory,
            streamed: self.keys_streamed,
            on_disk: self.keys_on_disk,
            dir: self.keys_dir.as_deref(),
        };
        let (at, temp) = asked
            .resolve(default, || std::env::temp_dir().join(format!("fusefss-keys-{}", std::process::id())));
        // A folder made here goes with the process even when a signal stops it.
        if let Some(d) = &temp {
            crate::interrupt::remove_on_interrupt(d);
        }
        (at, temp)
    }
}

/// The places for the keys a caller asked for (at most one: clap's conflicts, or the API's
/// check); `dir` means on disk.
pub struct KeysAsked<'a> {
    pub in_memory: bool,
    pub streamed: bool,
    pub on_disk: bool,
    pub dir: Option<&'a std::path::Path>,
}

impl KeysAsked<'_> {
    /// Where the keys go, `default` unless asked, and the folder to remove at the end (a
    /// fresh one from `temp` for bundles on disk without a folder).
    pub fn resolve(
        &self,
        default: KeysDefault,
        temp: impl FnOnce() -> std::path::PathBuf,
    ) -> (KeysAt, Option<std::path::PathBuf>) {
        if self.in_memory {
            return (KeysAt::Memory, None);
        }
        let on_disk = self.on_disk || self.dir.is_some();
        if self.streamed || (!on_disk && default == KeysDefault::Stream) {
            return (KeysAt::Stream, None);
        }
        match self.dir {
            Some(d) => (KeysAt::Disk(d.to_path_buf()), None),
            None => {
                let d = temp();
                (KeysAt::Disk(d.clone()), Some(d))
            }
        }
    }
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

/// How the two servers of one process talk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TransportChoice {
    /// An in-memory channel.
    Mem,
    /// TCP over loopback.
    Tcp,
    /// TLS (pinned certificates) over loopback TCP.
    Tls,
}

impl TransportChoice {
    pub fn name(self) -> &'static str {
        match self {
            TransportChoice::Mem => "mem",
            TransportChoice::Tcp => "tcp",
            TransportChoice::Tls => "tls",
        }
    }
}

/// The link between the servers: transport and simulated network.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub transport: TransportChoice,
    pub net: Option<net::NetSim>,
}

impl Default for Link {
    fn default() -> Link {
        Link { transport: TransportChoice::Mem, net: None }
    }
}

/// Both ends of a fresh link between the two servers.
fn connect(link: Link) -> anyhow::Result<[Box<dyn net::Transport>; 2]> {
    use std::net::{TcpListener, TcpStream};
    Ok(match link.transport {
        TransportChoice::Mem => {
            let (a, b) = net::MemTransport::pair(link.net);
            [Box::new(a), Box::new(b)]
        }
        TransportChoice::Tcp => {
            let l = TcpListener::bind("127.0.0.1:0")?;
            let a = TcpStream::connect(l.local_addr()?)?;
            let (b, _) = l.accept()?;
            [Box::new(net::Conn::plain(a, link.net)?), Box::new(net::Conn::plain(b, link.net)?)]
        }
        TransportChoice::Tls => {
            use net::tls::{self, Role};
            let dir = std::env::temp_dir().join(format!("fusefss-bench-tls-{}", std::process::id()));
            tls::generate(&dir)?;
            let (s0, s1) =
                (tls::load_identity(&dir, Role::Server0)?, tls::load_identity(&dir, Role::Server1)?);
            let _ = std::fs::remove_dir_all(&dir);
            let server = tls::server_config(&s1, vec![s0.cert.clone()])?;
            let client = tls::client_config(&s0, s1.cert.clone())?;
            let l = TcpListener::bind("127.0.0.1:0")?;
            let a = TcpStream::connect(l.local_addr()?)?;
            let (b, _) = l.accept()?;
            let t = Some(Duration::from_secs(30));
            let h =
                std::thread::spawn(move || net::Conn::tls(b, tls::server_connection(server)?, t, link.net));
            let c0 = net::Conn::tls(a, tls::client_connection(client)?, t, link.net)?;
            let c1 = h.join().map_err(|_| anyhow::anyhow!("TLS handshake thread panicked"))??;
            [Box::new(c0), Box::new(c1)]
        }
    })
}

/// Both servers' online phases on two threads over `link`.
pub fn run_linked(
    g: &Graph,
    gates: &[Option<Box<dyn engine::DynGate>>],
    keys: [engine::PartyKeys; 2],
    inputs: [Vec<u64>; 2],
    link: Link,
) -> anyhow::Result<[PartyRun; 2]> {
    let [mut k0, mut k1] = keys;
    run_linked_step(g, gates, [&mut k0, &mut k1], inputs, [&[], &[]], link)
}

/// One program of a session at both servers over `link`: keys from any source (memory
/// or bundles on disk), with the masked values each server carried over.
pub fn run_linked_step(
    g: &Graph,
    gates: &[Option<Box<dyn engine::DynGate>>],
    keys: [&mut (dyn engine::KeySource + Send); 2],
    inputs: [Vec<u64>; 2],
    carried: [&[Vec<u64>]; 2],
    link: Link,
) -> anyhow::Result<[PartyRun; 2]> {
    let ts = connect(link)?;
    let links = ts.map(|mut t| {
        move |m: Vec<u8>, idle: &mut dyn FnMut()| {
            t.exchange_idle(&m, idle).map_err(|e| gates::GateError::Transport(e.to_string()))
        }
    });
    Ok(engine::run_pair(g, gates, keys, inputs, carried, links)?)
}

/// Deal keys (to memory or to bundles on disk, as `keys` says), run both servers on two
/// threads over `link`, reconstruct, and compute the plaintext reference.
#[allow(clippy::too_many_arguments)]
pub fn run_with(
    g: &Graph,
    x: &[u64],
    float_out: &[f64],
    imp: Impl,
    rng: &mut DealerRng,
    progress: impl FnMut(usize, usize) + Send,
    link: Link,
    keys: &KeysAt,
) -> anyhow::Result<Outcome> {
    // Streamed keys: no gate's keys for both parties may fill the memory (chunks run one
    // after another, each adding its gate's rounds).
    let chunked;
    let g = match keys {
        KeysAt::Stream => {
            chunked = g.chunked(stream::CHUNK_ELEMS);
            &chunked
        }
        _ => g,
    };
    // (Shared with the bundles' reading threads, which decode the keys ahead.)
    let gates: engine::layers::Gates = std::sync::Arc::new(engine::build(g, imp)?);
    let plain = engine::plain(g, &gates, x);
    let (x0, x1) = engine::share_input(x, g.n, rng);
    let (mut aes, mut reader_cpu) = (None, None);
    let cpu = service::cpu_time::process;
    let (deal, runs, online, online_cpu, keys_on_disk_bytes) = match keys {
        KeysAt::Memory => {
            let (k0, k1, deal) = engine::deal(g, &gates, rng, progress)?;
            let (t, a, c) = (Instant::now(), fss::prg::aes_blocks(), cpu());
            let runs = run_linked(g, &gates, [k0, k1], [x0, x1], link)?;
            let (online, c) = (t.elapsed(), since(c, cpu()));
            aes = Some((fss::prg::aes_blocks() - a) / 2);
            (deal, runs, online, c, 0)
        }
        KeysAt::Stream => {
            let c = cpu();
            let s = stream::run(g, &gates, rng, &[], progress, [x0, x1], [&[], &[]], link)?;
            (s.report, s.runs, s.online, since(c, cpu()), 0)
        }
        KeysAt::Disk(dir) => {
            let mut disk = DiskKeys::deal(dir, g, &gates, rng, progress)?;
            let [r0, r1] = &mut disk.readers;
            let (t, a, c) = (Instant::now(), fss::prg::aes_blocks(), cpu());
            let runs = run_linked_step(g, &gates, [r0, r1], [x0, x1], [&[], &[]], link)?;
            let (online, c) = (t.elapsed(), since(c, cpu()));
            aes = Some((fss::prg::aes_blocks() - a) / 2);
            reader_cpu = disk.readers[0].thread_cpu().zip(disk.readers[1].thread_cpu()).map(|(a, b)| [a, b]);
            (disk.report.clone(), runs, online, c, disk.bytes)
        }
    };
    let secure = engine::reconstruct(&runs[0].output, &runs[1].output, g.n);
    Ok(Outcome {
        secure,
        plain,
        float: float_out.to_vec(),
        deal,
        runs,
        online,
        keys_on_disk_bytes,
        keys: keys.name(),
        aes_blocks: aes,
        online_cpu,
        reader_cpu,
    })
}

/// The time from `a` to `b` on a CPU clock (`None` if either is unknown).
fn since(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    Some(b?.saturating_sub(a?))
}

/// Keys handed from a dealer thread to the servers as they are made.
pub(crate) mod stream {
    use std::any::Any;
    use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

    use std::time::{Duration, Instant};

    use engine::{DealReport, DynGate, EngineError, Graph, KeySink, KeySource, PartyRun};
    use fss::Party;
    use fss::rng::DealerRng;
    use gates::GateError;

    use super::{Link, run_linked_step};

    /// Gates' keys dealt ahead of the online phase at most, per party.
    const AHEAD: usize = 2;

    /// Row-wise gates of more elements are dealt and run in chunks of at most this many
    /// ([`engine::Graph::chunked`]): BERT-base's softmax at 512 tokens (3.1 M elements,
    /// ~6 GB of key per party) runs as six chunks of two heads, ~1 GB per party each, so
    /// that the keys in flight (dealt, queued, being spent: a few gates for both parties)
    /// stay a few GB.
    pub const CHUNK_ELEMS: usize = 1 << 19;

    enum Item {
        Input(Vec<u64>),
        Gate(usize, Box<dyn Any + Send>),
        Output(Vec<u64>),
    }

    /// The dealer's end for one party.
    pub struct Sink(SyncSender<Item>);

    /// A server's end.
    pub struct Source {
        party: Party,
        rx: Receiver<Item>,
    }

    /// Both parties' ends.
    fn pair(_n: u32) -> (Sink, Sink, Source, Source) {
        let (t0, r0) = sync_channel(AHEAD);
        let (t1, r1) = sync_channel(AHEAD);
        (Sink(t0), Sink(t1), Source { party: Party::P0, rx: r0 }, Source { party: Party::P1, rx: r1 })
    }

    /// What [`run`] returns.
    pub struct Streamed {
        /// The dealer's report.
        pub report: DealReport,
        /// The masks of the program's carried values, for the next program.
        pub carry: Vec<Vec<u64>>,
        /// Both servers' runs.
        pub runs: [PartyRun; 2],
        /// From the start to both servers' end, dealing included.
        pub online: Duration,
    }

    /// Deal `g`'s keys on a thread of their own, handing them over gate by gate, while both
    /// servers run `g` (`carried`: the masks of the values carried from the previous
    /// program). A server that stops lets go of its end, so that the dealer stops too; when
    /// both fail, the servers' error comes with the dealer's.
    ///
    /// # Errors
    /// The servers' or the dealer's.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        g: &Graph,
        gates: &[Option<Box<dyn DynGate>>],
        rng: &mut DealerRng,
        carried: &[Vec<u64>],
        progress: impl FnMut(usize, usize) + Send,
        inputs: [Vec<u64>; 2],
        held: [&[Vec<u64>]; 2],
        link: Link,
    ) -> anyhow::Result<Streamed> {
        let (mut s0, mut s1, mut r0, mut r1) = pair(g.n);
        let t = Instant::now();
        let (dealt, runs) = std::thread::scope(|sc| {
            let dealer = sc.spawn(move || {
                let deal = || engine::deal_step(g, gates, rng, [&mut s0, &mut s1], carried, progress);
                match dealer_pool() {
                    Some(pool) => pool.install(deal),
                    None => deal(),
                }
            });
            let runs = run_linked_step(g, gates, [&mut r0, &mut r1], inputs, held, link);
            drop((r0, r1));
            (dealer.join().map_err(|_| anyhow::anyhow!("the dealer thread panicked")), runs)
        });
        let online = t.elapsed();
        match (dealt?, runs) {
            (Ok((report, carry)), Ok(runs)) => Ok(Streamed { report, carry, runs, online }),
            (Ok(_), Err(e)) => Err(e),
            (Err(d), Ok(_)) => Err(d.into()),
            (Err(d), Err(e)) => Err(e.context(format!("the dealer: {d}"))),
        }
    }

    /// The threads a dealer beside the servers deals on: as many as the machine's cores, at
    /// a lower priority than the servers' ([`DEALER_NICE`]). The servers' threads exchange a
    /// message every round, so a dealer thread that held a core for a time slice stalled
    /// both; at a lower priority it gives way as soon as a server has work, and deals while
    /// they wait (for each other, or for its next keys). (`None` if its threads could not be
    /// started: the dealer then deals on the global pool.)
    pub(super) fn dealer_pool() -> Option<&'static rayon::ThreadPool> {
        static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
        POOL.get_or_init(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(std::thread::available_parallelism().map_or(2, |n| n.get()))
                .thread_name(|i| format!("dealer-{i}"))
                .start_handler(|_| lower_priority())
                .build()
                .ok()
        })
        .as_ref()
    }

    /// How much nicer than the servers the streaming dealer's threads are. Not the lowest
    /// priority (Linux's `SCHED_IDLE`, which deals only on an idle core): as fast on an idle
    /// machine (a SmolLM2 decode step 194–205 ms either way), but beside two busy processes
    /// the dealer then all but stopped (a decode step 39 s, against 1.25 s at nice 10;
    /// CHANGELOG.md, twentieth session).
    pub const DEALER_NICE: i32 = 10;

    /// The calling thread [`DEALER_NICE`] nicer (Linux, where a thread has its own nice
    /// value; elsewhere, and if the system refuses, it keeps its priority).
    #[allow(unsafe_code)]
    fn lower_priority() {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: `nice` changes only the calling thread's nice value on Linux.
            let _ = unsafe { libc::nice(DEALER_NICE) };
        }
    }

    fn gone() -> EngineError {
        EngineError::Online(GateError::Desync("the server stopped taking keys"))
    }

    impl KeySink for Sink {
        fn input_mask(&mut self, share: Vec<u64>) -> Result<(), EngineError> {
            self.0.send(Item::Input(share)).map_err(|_| gone())
        }

        fn gate_key(
            &mut self,
            node: usize,
            _: &dyn DynGate,
            key: Box<dyn Any + Send>,
        ) -> Result<(), EngineError> {
            self.0.send(Item::Gate(node, key)).map_err(|_| gone())
        }

        fn output_mask(&mut self, share: Vec<u64>) -> Result<(), EngineError> {
            self.0.send(Item::Output(share)).map_err(|_| gone())
        }
    }

    impl Source {
        fn next(&mut self) -> Result<Item, GateError> {
            self.rx.recv().map_err(|_| GateError::Keys("the dealer stopped".into()))
        }
    }

    impl KeySource for Source {
        fn party(&self) -> Party {
            self.party
        }

        fn input_mask(&mut self) -> Result<Vec<u64>, GateError> {
            match self.next()? {
                Item::Input(v) => Ok(v),
                _ => Err(GateError::KeyMismatch("keys out of order")),
            }
        }

        fn gate_key(&mut self, node: usize, _: &dyn DynGate) -> Result<Box<dyn Any + Send>, GateError> {
            match self.next()? {
                Item::Gate(n, k) if n == node => Ok(k),
                _ => Err(GateError::KeyMismatch("keys out of order")),
            }
        }

        fn output_mask(&mut self) -> Result<Vec<u64>, GateError> {
            match self.next()? {
                Item::Output(v) => Ok(v),
                _ => Err(GateError::KeyMismatch("keys out of order")),
            }
        }
    }
}

/// One run's keys dealt into a bundle per party on disk, opened to be read ahead; the
/// files are deleted when this is dropped.
struct DiskKeys {
    readers: [service::BundleReader; 2],
    paths: [std::path::PathBuf; 2],
    report: DealReport,
    bytes: u64,
}

impl DiskKeys {
    fn deal(
        dir: &std::path::Path,
        g: &Graph,
        gates: &engine::layers::Gates,
        rng: &mut DealerRng,
        progress: impl FnMut(usize, usize),
    ) -> anyhow::Result<DiskKeys> {
        use fss::Party;
        use fss::rng::Rng;
        use service::bundle::{BundleHeader, BundleId, BundleReader, BundleWriter};
        let mut run = [0u8; 16];
        rng.fill_bytes(&mut run);
        // The run's random id stands for the program's identity: these bundles never leave
        // this process.
        let mut fp = [0u8; 32];
        fp[..16].copy_from_slice(&run);
        let header = |party| BundleHeader {
            party,
            id: BundleId { run, index: 0 },
            fingerprint: fp,
            descriptor: "in-process run".into(),
            sections: 2 + g.gates() as u32,
        };
        let dirs = [dir.join("party0"), dir.join("party1")];
        for d in &dirs {
            crate::interrupt::create_dir(d)?;
        }
        let mut w0 = BundleWriter::create(&dirs[0], g, &header(Party::P0))?;
        let mut w1 = BundleWriter::create(&dirs[1], g, &header(Party::P1))?;
        let t = std::time::Instant::now();
        let mut report = engine::deal_into(g, gates, rng, [&mut w0, &mut w1], progress)?;
        let bytes = w0.bytes() + w1.bytes();
        let paths = [w0.finish()?, w1.finish()?];
        // Key generation ends when both bundles are complete on disk: the sections still
        // behind the dealer written, and each file's closing `fsync`.
        report.time = t.elapsed();
        let mut readers = [
            BundleReader::open(&paths[0], g, &fp, Party::P0)?,
            BundleReader::open(&paths[1], g, &fp, Party::P1)?,
        ];
        for r in &mut readers {
            // Both servers on this machine: each reader on its server's core.
            r.beside(engine::cores::for_party(r.header().party));
            r.decode_ahead(gates.clone());
        }
        Ok(DiskKeys { readers, paths, report, bytes })
    }
}

impl Drop for DiskKeys {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Outcome {
    /// The larger of the two bundle readers' `part` of their CPU time, ms.
    fn reader_ms(&self, part: impl Fn(&service::ReaderCpu) -> Duration) -> Option<f64> {
        self.reader_cpu.map(|[a, b]| part(&a).max(part(&b)).as_secs_f64() * 1e3)
    }

    pub fn exact(&self) -> bool {
        self.secure == self.plain
    }

    pub fn decoded(&self, g: &Graph) -> Vec<f64> {
        self.secure.iter().map(|&v| dequantize(v, g.f, g.n)).collect()
    }

    pub fn max_abs_err(&self, g: &Graph) -> f64 {
        self.decoded(g).iter().zip(&self.float).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max)
    }

    pub fn cosine(&self, g: &Graph) -> f64 {
        float::cosine(&self.decoded(g), &self.float)
    }
}

/// One line of `bench model --json`.
#[derive(Serialize)]
pub struct ModelRow {
    pub model: String,
    #[serde(rename = "impl")]
    pub implementation: &'static str,
    pub seq: usize,
    pub layers: usize,
    pub n: u32,
    pub f: u32,
    pub online_ms: f64,
    /// Every timed run's online time, ms (`bench model --reps`), in run order.
    pub online_ms_runs: Vec<f64>,
    /// Key generation, ms: the median of the timed runs (`bench model`; one run elsewhere).
    pub keygen_ms: f64,
    /// Every timed run's key generation time, ms, in run order.
    pub keygen_ms_runs: Vec<f64>,
    /// Key bytes of the party with the larger key (as stored: FuseFSS keys seeded).
    pub key_bytes: u64,
    /// Each party's key bytes.
    pub key_bytes_each: [u64; 2],
    pub comm_bytes: u64,
    pub rounds: u64,
    pub exact: bool,
    pub max_abs_err_vs_float: f64,
    pub cosine_vs_float: f64,
    /// Computation time of the slower server by layer type, ms.
    pub time_by_layer_ms: std::collections::BTreeMap<&'static str, f64>,
    /// The dealer's CPU time by layer type, ms: making the keys, summed over the gates it
    /// deals in parallel (`bench model`: the median over the timed runs).
    pub deal_cpu_ms_by_layer: std::collections::BTreeMap<&'static str, f64>,
    /// The dealer's CPU time encoding the keys into bundles by layer type, ms (empty when
    /// the keys stay in memory).
    pub encode_cpu_ms_by_layer: std::collections::BTreeMap<&'static str, f64>,
    /// How the servers talked: `mem`, `tcp` or `tls`.
    pub transport: &'static str,
    /// Simulated network: `none`, `lan` or `wan`.
    pub net: &'static str,
    /// Key bytes by layer type (the mean of the two parties').
    pub key_bytes_by_layer: std::collections::BTreeMap<&'static str, u64>,
    /// Bytes sent plus received by layer type (the larger party's).
    pub comm_bytes_by_layer: std::collections::BTreeMap<&'static str, u64>,
    /// Rounds by layer type (each round counts for the layer that sent its message).
    pub rounds_by_layer: std::collections::BTreeMap<&'static str, u64>,
    /// Where the keys were: `memory`, `disk` (bundles read back as the servers run) or
    /// `stream` (dealt while the servers run).
    pub keys: &'static str,
    /// Both parties' bundles on disk (0 with keys in memory).
    pub keys_on_disk_bytes: u64,
    /// AES blocks one server encrypts online (null when the dealer ran alongside).
    pub aes_blocks: Option<u64>,
    /// Batched AES time per block, measured in the same run: `aes_blocks ·
    /// aes_ns_per_block` is the online time's AES floor, `keygen_aes_blocks ·
    /// aes_ns_per_block` the dealer's CPU floor.
    pub aes_ns_per_block: f64,
    /// AES blocks the dealer encrypted for both parties' keys: their trees, its randomness,
    /// the pads and root streams of seeded keys (null when the servers ran alongside,
    /// `keys: stream`).
    pub keygen_aes_blocks: Option<u64>,
    /// The process's peak resident memory during the run (the highest of the timed runs).
    pub peak_rss_bytes: u64,
    /// The process's CPU time during the online phase, ms: every thread (both servers,
    /// their bundle readers; with `keys: stream` the dealer too). Against `2 · online_ms`
    /// on two cores, what the cores did not spend on the run (waiting, idle).
    pub online_cpu_ms: Option<f64>,
    /// Time the slower server spent dropping, and so wiping, its spent keys, ms (most of it
    /// while the peer's message is on its way; not in `time_by_layer_ms`).
    pub wipe_ms: f64,
    /// With keys on disk, the CPU time of the party's bundle reader (the larger of the
    /// two) reading and checking sections, ms (null otherwise).
    pub reader_read_ms: Option<f64>,
    /// With keys on disk, the CPU time of the party's bundle reader (the larger of the
    /// two) decoding gates' keys, ms (null otherwise).
    pub reader_decode_ms: Option<f64>,
    /// With keys on disk, how long the online phase of a party (the longer of the two)
    /// waited for its bundle reader's next section, ms (null otherwise): reading on the
    /// online phase's path.
    pub reader_wait_ms: Option<f64>,
}

/// Durations by label as milliseconds.
fn ms_by_label(v: &[(&'static str, std::time::Duration)]) -> std::collections::BTreeMap<&'static str, f64> {
    v.iter().map(|(l, d)| (*l, d.as_secs_f64() * 1e3)).collect()
}

impl ModelRow {
    pub fn new(
        model: &str,
        imp: Impl,
        g: &Graph,
        layers: usize,
        o: &Outcome,
        link: (&'static str, &'static str),
    ) -> ModelRow {
        let mut time = std::collections::BTreeMap::new();
        for run in &o.runs {
            for (l, d) in &run.times {
                let e = time.entry(*l).or_insert(0.0f64);
                *e = e.max(d.as_secs_f64() * 1e3);
            }
        }
        let (mut comm, mut rounds) = (std::collections::BTreeMap::new(), std::collections::BTreeMap::new());
        for run in &o.runs {
            for (l, st) in &run.stats_by_label {
                let e = comm.entry(*l).or_insert(0u64);
                *e = (*e).max(st.comm_bytes());
                rounds.insert(*l, st.rounds);
            }
        }
        ModelRow {
            model: model.to_string(),
            implementation: imp.name(),
            seq: g.input.rows,
            layers,
            n: g.n,
            f: g.f,
            online_ms: o.online.as_secs_f64() * 1e3,
            online_ms_runs: vec![o.online.as_secs_f64() * 1e3],
            keygen_ms: o.deal.time.as_secs_f64() * 1e3,
            keygen_ms_runs: vec![o.deal.time.as_secs_f64() * 1e3],
            key_bytes: o.deal.key_bits.div_ceil(8),
            key_bytes_each: o.deal.party_key_bits.map(|b| b.div_ceil(8)),
            comm_bytes: o.runs[0].stats.comm_bytes().max(o.runs[1].stats.comm_bytes()),
            rounds: o.runs[0].stats.rounds,
            exact: o.exact(),
            max_abs_err_vs_float: o.max_abs_err(g),
            cosine_vs_float: o.cosine(g),
            time_by_layer_ms: time,
            deal_cpu_ms_by_layer: ms_by_label(&o.deal.deal_cpu_by_label),
            encode_cpu_ms_by_layer: ms_by_label(&o.deal.encode_cpu_by_label),
            transport: link.0,
            net: link.1,
            key_bytes_by_layer: o.deal.by_label.iter().map(|(l, b)| (*l, b.div_ceil(8))).collect(),
            comm_bytes_by_layer: comm,
            rounds_by_layer: rounds,
            keys: o.keys,
            keys_on_disk_bytes: o.keys_on_disk_bytes,
            aes_blocks: o.aes_blocks,
            aes_ns_per_block: aes_ns_per_block(3),
            keygen_aes_blocks: (o.keys != KeysAt::Stream.name()).then_some(o.deal.aes_blocks),
            peak_rss_bytes: peak_rss_bytes(),
            online_cpu_ms: o.online_cpu.map(|d| d.as_secs_f64() * 1e3),
            wipe_ms: o.runs.iter().map(|r| r.wipe.as_secs_f64() * 1e3).fold(0.0, f64::max),
            reader_read_ms: o.reader_ms(|c| c.read),
            reader_decode_ms: o.reader_ms(|c| c.decode),
            reader_wait_ms: o.reader_ms(|c| c.waited),
        }
    }
}

/// Batched fixed-key AES, ns per block: the median of `reps` runs of 2,000 calls of 1,024
/// blocks, after one warm-up run (the AES floor of a row is its `aes_blocks` times this).
pub fn aes_ns_per_block(reps: usize) -> f64 {
    use fss::prg::{AesBlock, HashKey, Prg};
    use std::hint::black_box;
    const BLOCKS: usize = 1024;
    const CALLS: usize = 2000;
    let input = vec![AesBlock::default(); BLOCKS];
    let mut out = vec![AesBlock::default(); BLOCKS];
    let prg = Prg::global();
    let mut once = || {
        let t = Instant::now();
        for _ in 0..CALLS {
            prg.encrypt(HashKey::Left, black_box(&input), &mut out);
        }
        black_box(&out);
        t.elapsed().as_secs_f64()
    };
    once();
    median((0..reps.max(1)).map(|_| once()).collect()) * 1e9 / (BLOCKS * CALLS) as f64
}

/// A simulated network between the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NetChoice {
    /// None: the transport as it is.
    None,
    /// 0.5 ms per message, 1 GB/s (the paper's LAN).
    Lan,
    /// 4 ms per message, 400 MB/s (the paper's WAN).
    Wan,
}

impl NetChoice {
    pub fn name(self) -> &'static str {
        match self {
            NetChoice::None => "none",
            NetChoice::Lan => "lan",
            NetChoice::Wan => "wan",
        }
    }

    pub fn sim(self) -> Option<net::NetSim> {
        match self {
            NetChoice::None => None,
            NetChoice::Lan => Some(net::NetSim::LAN),
            NetChoice::Wan => Some(net::NetSim::WAN),
        }
    }
}

/// Median of a non-empty sample.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    /// The streaming dealer's threads are `DEALER_NICE` nicer than the caller's (Linux, up
    /// to the nicest value), as many as the cores; the caller keeps its priority.
    #[test]
    #[allow(unsafe_code)]
    fn the_streaming_dealer_deals_at_a_lower_priority() {
        // SAFETY: `getpriority` reads the calling thread's nice value (who = 0).
        let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let mine = nice();
        let pool = super::stream::dealer_pool().expect("the dealer's threads start");
        assert_eq!(pool.current_num_threads(), std::thread::available_parallelism().map_or(2, |n| n.get()));
        if cfg!(target_os = "linux") {
            let theirs = pool.broadcast(|_| nice());
            let want = (mine + super::stream::DEALER_NICE).min(19);
            assert!(theirs.iter().all(|&p| p == want), "{theirs:?}, want {want}");
            assert_eq!(nice(), mine);
        }
    }
}
