//! Driving one server's online phase over a message link, and both servers in one process.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use fss::Party;
use gates::online::{Progress, Session, Stats};
use gates::{Ctx, GateError};

use crate::error::EngineError;
use crate::exec::{KeySource, PartyKeys, online_step};
use crate::graph::Graph;
use crate::layers::DynGate;

/// What one server's online phase produced and cost.
#[derive(Clone, Debug)]
pub struct PartyRun {
    /// Its share of the output.
    pub output: Vec<u64>,
    /// Its communication and rounds.
    pub stats: Stats,
    /// Its computation time by layer type.
    pub times: Vec<(&'static str, Duration)>,
    /// Its communication and rounds by layer type.
    pub stats_by_label: Vec<(&'static str, Stats)>,
    /// Wall-clock time of its online phase (computation and waiting for the peer).
    pub wall: Duration,
    /// Time it spent dropping, and so wiping, its spent keys ([`Ctx::wipe_time`]), most of
    /// it while the peer's message was on its way.
    pub wipe: Duration,
    /// The masked values it keeps for the next program of a session ([`Graph::carry`]).
    pub carried: Vec<Vec<u64>>,
}

/// Run one server's online phase: `exchange(msg, idle)` sends this round's message to the
/// peer, calls `idle` (which drops the keys spent so far, [`Ctx::retire`]), then returns the
/// peer's message of the same round (the only place that touches the link).
///
/// # Errors
/// A gate's error, a key source's error, or the error `exchange` returns.
pub fn run_party(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    keys: &mut dyn KeySource,
    x_share: &[u64],
    exchange: impl FnMut(Vec<u8>, &mut dyn FnMut()) -> Result<Vec<u8>, GateError>,
) -> Result<PartyRun, GateError> {
    run_party_step(g, gates, keys, x_share, &[], exchange)
}

/// One program of a session at one server: as [`run_party`], with the masked values
/// carried over from the previous program; [`PartyRun::carried`] holds this program's.
///
/// # Errors
/// As [`run_party`].
pub fn run_party_step(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    keys: &mut dyn KeySource,
    x_share: &[u64],
    carried: &[Vec<u64>],
    mut exchange: impl FnMut(Vec<u8>, &mut dyn FnMut()) -> Result<Vec<u8>, GateError>,
) -> Result<PartyRun, GateError> {
    let ctx = Ctx::new(keys.party());
    let t = Instant::now();
    let mut s = Session::new(&ctx, online_step(g, gates, &ctx, keys, x_share, carried));
    let (output, carried) = loop {
        match s.advance() {
            Progress::Send(msg) => {
                let peer = exchange(msg, &mut || ctx.drop_spent())?;
                s.deliver(&peer)?;
            }
            Progress::Done(r) => break r?,
        }
    };
    drop(s);
    // (The keys still held: dropped and timed here rather than with the context.)
    ctx.drop_spent();
    Ok(PartyRun {
        output,
        stats: ctx.stats(),
        times: ctx.times(),
        stats_by_label: ctx.stats_by_label(),
        wall: t.elapsed(),
        wipe: ctx.wipe_time(),
        carried,
    })
}

/// Run `f` on a one-thread pool of its own: a server that shares the machine with its peer
/// (both in one process) gets one core, and its parallel loops run inline on that thread
/// instead of handing work to (and waiting on) a pool the other server also uses.
///
/// The pools are kept for the next call: a server's thread, with its working buffers
/// (tens of MB per layer, kept per thread by the gates), serves query after query instead
/// of faulting fresh pages in on every one.
///
/// # Panics
/// If the operating system cannot start a thread.
pub fn on_own_core<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    static IDLE: std::sync::Mutex<Vec<rayon::ThreadPool>> = std::sync::Mutex::new(Vec::new());
    let idle = || IDLE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let pool = idle().pop();
    let pool = pool.unwrap_or_else(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "server".into())
            .build()
            .expect("start a server thread")
    });
    let out = pool.install(f);
    idle().push(pool);
    out
}

/// Run both servers' online phases on two threads connected by an in-memory channel, each
/// with its own one-thread pool ([`on_own_core`]).
///
/// # Errors
/// The first party's error, or [`GateError::Desync`] if a peer stops mid-protocol.
pub fn run_threads(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    keys: [PartyKeys; 2],
    inputs: [Vec<u64>; 2],
) -> Result<[PartyRun; 2], EngineError> {
    let [mut k0, mut k1] = keys;
    run_threads_step(g, gates, [&mut k0, &mut k1], inputs, [&[], &[]])
}

/// One program of a session on two threads: as [`run_threads`], with keys from any source
/// (memory, or bundles on disk), each server with the masked values it carried over from
/// the previous program.
///
/// # Errors
/// As [`run_threads`].
pub fn run_threads_step(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    keys: [&mut (dyn KeySource + Send); 2],
    inputs: [Vec<u64>; 2],
    carried: [&[Vec<u64>]; 2],
) -> Result<[PartyRun; 2], EngineError> {
    let (tx0, rx1) = mpsc::channel::<Vec<u8>>();
    let (tx1, rx0) = mpsc::channel::<Vec<u8>>();
    let link = |tx: mpsc::Sender<Vec<u8>>, rx: mpsc::Receiver<Vec<u8>>| {
        move |msg, idle: &mut dyn FnMut()| {
            tx.send(msg).map_err(|_| GateError::Desync("the peer stopped"))?;
            idle();
            rx.recv().map_err(|_| GateError::Desync("the peer stopped"))
        }
    };
    run_pair(g, gates, keys, inputs, carried, [link(tx0, rx0), link(tx1, rx1)])
}

/// The one two-server runner: both servers' online phases of one program on two threads,
/// each on its own core ([`on_own_core`], pinned there: [`crate::cores`]), with its keys,
/// input share, carried values and link (`exchange` as in [`run_party`]).
///
/// # Errors
/// The first party's error; [`GateError::Desync`] if a server thread panicked.
pub fn run_pair<L>(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    keys: [&mut (dyn KeySource + Send); 2],
    inputs: [Vec<u64>; 2],
    carried: [&[Vec<u64>]; 2],
    links: [L; 2],
) -> Result<[PartyRun; 2], EngineError>
where
    L: FnMut(Vec<u8>, &mut dyn FnMut()) -> Result<Vec<u8>, GateError> + Send,
{
    let [k0, k1] = keys;
    let [x0, x1] = inputs;
    let [c0, c1] = carried;
    let [l0, l1] = links;
    let (r0, r1) = std::thread::scope(|s| {
        let h0 = s.spawn(|| on_own_core(|| pinned(Party::P0, || run_party_step(g, gates, k0, &x0, c0, l0))));
        let h1 = s.spawn(|| on_own_core(|| pinned(Party::P1, || run_party_step(g, gates, k1, &x1, c1, l1))));
        (h0.join(), h1.join())
    });
    let unwrap = |r: std::thread::Result<Result<PartyRun, GateError>>| -> Result<PartyRun, EngineError> {
        r.map_err(|_| EngineError::Online(GateError::Desync("a server thread panicked")))?
            .map_err(EngineError::Online)
    };
    Ok([unwrap(r0)?, unwrap(r1)?])
}

/// `f` on the calling thread pinned to `party`'s core ([`crate::cores::for_party`]; where
/// there is none, or the system refuses, as it is).
fn pinned<T>(party: Party, f: impl FnOnce() -> T) -> T {
    if let Some(cpu) = crate::cores::for_party(party) {
        crate::cores::pin_this_thread(cpu);
    }
    f()
}
