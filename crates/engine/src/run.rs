//! Running both servers in one process, each on its own thread, over an in-memory channel.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use fss::Party;
use gates::online::{Progress, Session, Stats};
use gates::{Ctx, GateError};

use crate::error::EngineError;
use crate::exec::{PartyKeys, online};
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
    /// Wall-clock time of its online phase (computation and waiting for the peer).
    pub wall: Duration,
}

/// Run both servers' online phases on two threads connected by an in-memory channel.
///
/// # Errors
/// The first party's error, or [`GateError::Desync`] if a peer stops mid-protocol.
pub fn run_threads(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    keys: [PartyKeys; 2],
    inputs: [Vec<u64>; 2],
) -> Result<[PartyRun; 2], EngineError> {
    let (tx0, rx1) = mpsc::channel::<Vec<u8>>();
    let (tx1, rx0) = mpsc::channel::<Vec<u8>>();
    let [k0, k1] = keys;
    let [x0, x1] = inputs;
    let (r0, r1) = std::thread::scope(|s| {
        let h0 = s.spawn(move || party(g, gates, Party::P0, &k0, &x0, tx0, rx0));
        let h1 = s.spawn(move || party(g, gates, Party::P1, &k1, &x1, tx1, rx1));
        (h0.join(), h1.join())
    });
    let unwrap = |r: std::thread::Result<Result<PartyRun, GateError>>| -> Result<PartyRun, EngineError> {
        r.map_err(|_| EngineError::Online(GateError::Desync("a server thread panicked")))?
            .map_err(EngineError::Online)
    };
    Ok([unwrap(r0)?, unwrap(r1)?])
}

fn party(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    who: Party,
    keys: &PartyKeys,
    x: &[u64],
    tx: mpsc::Sender<Vec<u8>>,
    rx: mpsc::Receiver<Vec<u8>>,
) -> Result<PartyRun, GateError> {
    let ctx = Ctx::new(who);
    let t = Instant::now();
    let mut s = Session::new(&ctx, online(g, gates, &ctx, keys, x));
    let output = loop {
        match s.advance() {
            Progress::Send(msg) => {
                tx.send(msg).map_err(|_| GateError::Desync("the peer stopped"))?;
                let peer = rx.recv().map_err(|_| GateError::Desync("the peer stopped"))?;
                s.deliver(&peer)?;
            }
            Progress::Done(r) => break r?,
        }
    };
    Ok(PartyRun { output, stats: ctx.stats(), times: ctx.times(), wall: t.elapsed() })
}
