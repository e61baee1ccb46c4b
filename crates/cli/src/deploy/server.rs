//! `fusefss serve`: one server, the runtime around `service`'s state machines. It owns the
//! sockets, the threads and the deadlines; what a query may do when is decided by
//! [`service::leader`] (party 0) and [`service::follower`] (party 1).
//!
//! Threads: one accept loop per listener ([`super::listen`], bounded pending connections);
//! one short-lived thread per pending connection (TLS handshake, then the query's shape and
//! share, each frame limited before it is read); and the main thread, which holds the key
//! store and the server link and runs one query at a time.
//!
//! Per query, party 0 proposes its lowest unused bundle for the query's shape; party 1
//! accepts only when it holds the client's half of the same query and the same unused
//! bundle. Only then does party 0 mark the bundle used (after checking that the client is
//! still there), send `Begin`, and party 1 mark it used and answer `Ready`. A query whose
//! other half never arrives, whose client leaves, or that finds the servers busy ends with
//! an error and spends no bundle; a failure after `Begin` spends the bundle and drops the
//! server link. A dead link is found by the proposal itself and re-established before any
//! bundle is touched.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use engine::{PartyRun, run_party_step};
use fss::Party;
use gates::GateError;
use net::tls::{self, Role};
use net::{Conn, NetError, Transport};
use rustls::pki_types::CertificateDer;
use service::bundle::{BundleHeader, BundleId, BundleReader, read_header};
use service::follower::{Follower, Rejection};
use service::leader::{Proposal, Verdict};
use service::proto::{Answer, Msg, QueryHead, limits, reason, tag};
use service::queue::{Half, Limits, Queue};
use service::{Catalog, Descriptor, Program, Programs, Shape, Store, text};

use super::listen::{Pending, Ticket, accept_loop};
use super::say;

/// Arguments of `fusefss serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Which server this is: 0 or 1.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=1))]
    party: u8,
    /// Its key store: the dealer's OUT/party0 or OUT/party1 (locked while the server runs).
    #[arg(long)]
    dir: PathBuf,
    /// Address to listen on for clients (and, on party 1 without --peer-listen, for party
    /// 0); port 0 picks a free port and prints it.
    #[arg(long)]
    listen: String,
    /// Party 1: a separate address for party 0's link, so that client connections never
    /// compete with it (party 0's --peer then names this address).
    #[arg(long)]
    peer_listen: Option<String>,
    /// The other server's address: party 0 connects to it; party 1 only reports it.
    #[arg(long)]
    peer: String,
    /// The dealer's certificate folder (OUT/tls): this server's key and the three pinned
    /// certificates.
    #[arg(long)]
    tls: PathBuf,
    /// Seconds the online phase waits for a message from the other server.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Seconds for a control message between the servers (a proposal's answer, a dial).
    #[arg(long, default_value_t = 5)]
    control_timeout: u64,
    /// Seconds a new connection has for its TLS handshake and its query.
    #[arg(long, default_value_t = 10)]
    handshake_timeout: u64,
    /// Connections at most in their handshake at once (past it the oldest is closed).
    #[arg(long, default_value_t = 32)]
    max_pending: usize,
    /// Queries at most waiting to run (past it a query is refused as busy).
    #[arg(long, default_value_t = 16)]
    max_queue: usize,
    /// Seconds party 0 tries to pair a query with its half at party 1 before failing it
    /// (no bundle is spent).
    #[arg(long, default_value_t = 10)]
    pair_timeout: u64,
}

enum Event {
    Client(Half<Conn>),
    Peer(Conn),
}

struct Server {
    party: Party,
    store: Store,
    programs: Programs,
    timeout: Duration,
    control: Duration,
    peer: Option<Conn>,
    peer_addr: String,
    client_cfg: Arc<rustls::ClientConfig>,
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s.max(1))
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let party = if a.party == 0 { Party::P0 } else { Party::P1 };
    if a.peer_listen.is_some() && party == Party::P0 {
        bail!("--peer-listen is for party 1 (party 0 dials --peer)");
    }
    // The store first: a second server on the same folder stops here (defect 1), and so
    // does a server given the other party's folder (defect 7).
    let store =
        Store::open(&a.dir, party).with_context(|| format!("opening the key store {}", a.dir.display()))?;
    let me = tls::load_identity(&a.tls, Role::server(a.party))?;
    let other = tls::load_cert(&a.tls, Role::server(1 - a.party))?;
    let client = tls::load_cert(&a.tls, Role::Client)?;
    let server_cfg = tls::server_config(&me, vec![client.clone(), other.clone()])?;
    let client_cfg = tls::client_config(&me, other.clone())?;
    let limits =
        Limits { queue: a.max_queue.max(1), pair_timeout: secs(a.pair_timeout), ..Limits::default() };
    let mut s = Server {
        party,
        store,
        programs: Programs::default(),
        timeout: secs(a.timeout),
        control: secs(a.control_timeout),
        peer: None,
        peer_addr: a.peer.clone(),
        client_cfg,
    };
    s.report_store()?;
    let handshake = secs(a.handshake_timeout);
    let (tx, rx) = channel();
    let conn_cfg = ConnCfg { server_cfg, client, other, handshake, party, catalog: s.programs.catalog() };
    let listener = TcpListener::bind(&a.listen).with_context(|| format!("listening on {}", a.listen))?;
    s.say(format!("listening on {}", listener.local_addr()?));
    let peer_on_main = party == Party::P1 && a.peer_listen.is_none();
    spawn_listener(
        listener,
        a.max_pending,
        conn_cfg.clone(),
        Accepts { clients: true, peer: peer_on_main },
        &tx,
    );
    if let Some(addr) = &a.peer_listen {
        let l = TcpListener::bind(addr).with_context(|| format!("listening on {addr}"))?;
        s.say(format!("listening for party 0 on {}", l.local_addr()?));
        spawn_listener(l, 2, conn_cfg, Accepts { clients: false, peer: true }, &tx);
    }
    drop(tx);
    match party {
        Party::P0 => s.lead(rx, limits),
        Party::P1 => s.follow(rx, limits),
    }
}

#[derive(Clone, Copy)]
struct Accepts {
    clients: bool,
    peer: bool,
}

#[derive(Clone)]
struct ConnCfg {
    server_cfg: Arc<rustls::ServerConfig>,
    client: CertificateDer<'static>,
    other: CertificateDer<'static>,
    handshake: Duration,
    party: Party,
    catalog: Catalog,
}

fn spawn_listener(l: TcpListener, max: usize, cfg: ConnCfg, accepts: Accepts, tx: &Sender<Event>) {
    let tx = tx.clone();
    let pending = Pending::new(max, cfg.handshake);
    let party = cfg.party.bit();
    let handle = Arc::new(move |sock: TcpStream, ticket: Ticket| {
        if let Some(ev) = establish(sock, &cfg, accepts) {
            ticket.release();
            let _ = tx.send(ev);
        }
    });
    std::thread::spawn(move || accept_loop(l, pending, party, handle));
}

/// TLS, then who it is; for a client, its query's shape and share, each frame limited
/// before it is read (defect 4) and all of it within the handshake deadline.
fn establish(sock: TcpStream, cfg: &ConnCfg, accepts: Accepts) -> Option<Event> {
    let party = cfg.party.bit();
    let from = sock.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let mut conn = match tls::server_connection(cfg.server_cfg.clone())
        .and_then(|c| Conn::tls(sock, c, Some(cfg.handshake), None))
    {
        Ok(c) => c,
        Err(e) => {
            if !matches!(e, NetError::Timeout(_) | NetError::Closed | NetError::Io(_)) {
                say(party, format!("refused a connection from {from}: {}", reason(&e.to_string())));
            }
            return None;
        }
    };
    conn.set_max_frame(limits::CONTROL);
    conn.set_frame_deadline(Some(cfg.handshake));
    conn.set_timeout(Some(cfg.handshake));
    let cert = conn.peer_certificate().cloned();
    if cert.as_ref() == Some(&cfg.other) {
        if cfg.party == Party::P0 || !accepts.peer {
            say(party, "the other server connected where it should not: closed");
            return None;
        }
        return Some(Event::Peer(conn));
    }
    if cert.as_ref() != Some(&cfg.client) || !accepts.clients {
        return None;
    }
    let fail = |conn: &mut Conn, why: String| {
        say(party, format!("a client at {from}: {}", reason(&why)));
        let _ = conn.send(&Msg::Failed(why).encode());
        None
    };
    let head = match recv_msg(&mut conn) {
        Ok(Msg::Query(h)) => h,
        Ok(m) => return fail(&mut conn, format!("expected a query, got {}", m.name())),
        Err(e) => return fail(&mut conn, format!("no query: {e}")),
    };
    let shape = match shape_of(&head) {
        Ok(s) => s,
        Err(e) => return fail(&mut conn, e),
    };
    let Some(words) = cfg.catalog.input_len(&shape) else {
        let served = cfg.catalog.served();
        let what = if served.is_empty() {
            "no bundles".into()
        } else {
            format!("bundles for {}", served.join(", "))
        };
        return fail(&mut conn, format!("no key bundle for {shape} on this server: it holds {what}"));
    };
    conn.set_max_frame(limits::share(words));
    let share = match recv_msg(&mut conn) {
        Ok(Msg::Share(v)) if v.len() == words => v,
        Ok(Msg::Share(v)) => {
            return fail(&mut conn, format!("the input has {} values; {shape} takes {words}", v.len()));
        }
        Ok(m) => return fail(&mut conn, format!("expected the input share, got {}", m.name())),
        Err(e) => return fail(&mut conn, format!("no input share: {e}")),
    };
    conn.set_max_frame(limits::CONTROL);
    conn.set_frame_deadline(None);
    Some(Event::Client(Half { head, shape, share, client: conn, arrived: Instant::now() }))
}

/// The next message on `conn`, decoded.
fn recv_msg(conn: &mut Conn) -> Result<Msg, String> {
    let b = conn.recv().map_err(|e| e.to_string())?;
    Msg::decode(&b).map_err(|e| e.to_string())
}

fn shape_of(h: &QueryHead) -> Result<Shape, String> {
    let model = h.model.parse().map_err(|e: models::registry::UnknownModel| e.to_string())?;
    if h.seq == 0 {
        return Err("the sequence length is 0".into());
    }
    Ok(Shape { model, seq: h.seq, layers: h.layers, new: h.new })
}

fn transport(e: NetError) -> GateError {
    GateError::Transport(match e {
        NetError::Closed => "the other server closed the connection".into(),
        e => format!("the other server: {e}"),
    })
}

/// The answer to a client for one program's run.
fn answer(prog: &Program, g: &engine::Graph, id: BundleId, run: PartyRun) -> Answer {
    Answer {
        descriptor: prog.desc.to_string(),
        bundle: id.to_string(),
        n: g.n,
        f: g.f,
        share: run.output,
        rounds: run.stats.rounds,
        comm_bytes: run.stats.comm_bytes(),
        online_ms: run.wall.as_secs_f64() * 1e3,
    }
}

/// Tell a client its query failed.
fn fail_client(party: Party, mut h: Half<Conn>, why: &str) {
    say(party.bit(), format!("query {} failed: {}", tag(&h.id()), reason(why)));
    let _ = h.client.send(&Msg::Failed(why.to_string()).encode());
}

impl Server {
    fn say(&self, msg: impl std::fmt::Display) {
        say(self.party.bit(), msg);
    }

    /// Report what the store holds, and build the program of every descriptor in it.
    fn report_store(&mut self) -> anyhow::Result<()> {
        let scan = self.store.scan()?;
        for id in &scan.spent {
            self.say(format!("bundle {id} was already used (an interrupted query): refused and deleted"));
        }
        for (id, e) in &scan.undeletable {
            self.say(format!("bundle {id} is used but cannot be deleted: {e}"));
        }
        for (p, e) in &scan.bad {
            self.say(format!("ignoring {}: {}", p.display(), reason(e)));
        }
        let mut by_desc: BTreeMap<String, usize> = BTreeMap::new();
        for (_, h) in &scan.ready {
            *by_desc.entry(h.descriptor.clone()).or_default() += 1;
        }
        if by_desc.is_empty() {
            self.say(format!(
                "no unused key bundle in {}: every query will be refused",
                self.store.dir().display()
            ));
        }
        for (d, k) in by_desc {
            match d.parse::<Descriptor>().map_err(|e| e.to_string()).and_then(|d| self.programs.get(d)) {
                Ok(p) => self.say(format!("{k} bundle(s) ready for {}", p.desc.human())),
                Err(e) => {
                    self.say(format!("{k} bundle(s) for {} cannot be served: {}", text::clean(&d, 120), e))
                }
            }
        }
        Ok(())
    }

    /// Build the programs of bundles added since the last look (a dealer run while the
    /// server is up), so that connections accept their shapes.
    fn refresh(&mut self, last: &mut Instant) {
        if last.elapsed() < Duration::from_secs(5) {
            return;
        }
        *last = Instant::now();
        if let Ok(scan) = self.store.scan() {
            let descs: std::collections::BTreeSet<String> =
                scan.ready.into_iter().map(|(_, h)| h.descriptor).collect();
            for d in descs {
                if let Ok(d) = d.parse::<Descriptor>() {
                    let _ = self.programs.get(d);
                }
            }
        }
    }

    /// Retire a bundle that can never run: marked used, then deleted.
    fn retire(&mut self, id: BundleId) {
        let _ = self.store.consume(id);
        self.discard(id);
    }

    fn discard(&mut self, id: BundleId) {
        if let Err(e) = self.store.discard(&id) {
            self.say(format!("bundle {id} is used but its file stays: {e}"));
        }
    }

    /// The lowest unused bundle for `shape`, with its program.
    fn pick(&mut self, shape: &Shape) -> Result<(PathBuf, BundleHeader, Arc<Program>), String> {
        let scan = self.store.scan().map_err(|e| e.to_string())?;
        let mut others = vec![];
        for (p, h) in scan.ready {
            match h.descriptor.parse::<Descriptor>() {
                Ok(d) if d.serves(shape) => match self.programs.get(d) {
                    Ok(prog) => return Ok((p, h, prog)),
                    Err(e) => others.push(format!("{} (cannot be served: {e})", d.human())),
                },
                Ok(d) => others.push(d.human()),
                Err(_) => {}
            }
        }
        others.sort();
        others.dedup();
        Err(if others.is_empty() {
            format!("no key bundle left for {shape}: run `fusefss dealer` to make more")
        } else {
            format!("no key bundle for {shape}: this server holds bundles for {}", others.join(", "))
        })
    }

    /// The link to party 1, dialled if there is none; `true` if it was just dialled.
    fn link(&mut self) -> Result<bool, String> {
        if self.peer.is_some() {
            return Ok(false);
        }
        let addr = self
            .peer_addr
            .to_socket_addrs()
            .map_err(|e| format!("party 1 address {}: {e}", self.peer_addr))?
            .next()
            .ok_or_else(|| format!("party 1 address {} resolves to nothing", self.peer_addr))?;
        let sock = TcpStream::connect_timeout(&addr, self.control)
            .map_err(|e| format!("cannot reach party 1 at {addr}: {e}"))?;
        let mut c = tls::client_connection(self.client_cfg.clone())
            .and_then(|c| Conn::tls(sock, c, Some(self.control), None))
            .map_err(|e| format!("TLS with party 1 at {addr}: {e}"))?;
        c.set_max_frame(limits::CONTROL);
        self.say(format!("connected to party 1 at {addr}"));
        self.peer = Some(c);
        Ok(true)
    }

    fn drop_link(&mut self) {
        if let Some(p) = self.peer.take() {
            p.abort();
        }
    }

    /// Send a control message to party 1 and wait for its answer, within the control
    /// timeout. A link that fails here had not been used for this query: it is dropped,
    /// dialled again once, and the message resent (defect 6).
    fn ask(&mut self, m: &Msg) -> Result<Msg, String> {
        for attempt in 0..2 {
            let fresh = self.link()?;
            let control = self.control;
            let peer = self.peer.as_mut().expect("linked");
            peer.set_timeout(Some(control));
            peer.set_frame_deadline(Some(control));
            let r = peer.send(&m.encode()).and_then(|()| peer.recv());
            match r {
                Ok(b) => {
                    return Msg::decode(&b).map_err(|e| format!("party 1 sent a malformed message: {e}"));
                }
                Err(e) => {
                    self.drop_link();
                    if fresh || attempt == 1 {
                        return Err(format!("party 1 did not answer: {e}"));
                    }
                    self.say(format!("the link to party 1 is dead ({e}): reconnecting"));
                }
            }
        }
        unreachable!("two attempts")
    }

    /// Tell party 1 that a query will not run (best effort; nothing was spent).
    fn withdraw(&mut self, h: &Half<Conn>, why: &str) {
        if let Some(p) = self.peer.as_mut() {
            let m = Msg::Withdraw { query: h.id(), reason: why.to_string() };
            if p.send(&m.encode()).is_err() {
                self.drop_link();
            }
        }
    }

    /// Party 0: queries in arrival order, each started only when both halves are paired.
    fn lead(mut self, rx: Receiver<Event>, limits: Limits) -> anyhow::Result<()> {
        let mut queue: Queue<Conn> = Queue::leader(limits);
        let mut looked = Instant::now();
        loop {
            if queue.is_empty() {
                self.refresh(&mut looked);
            }
            let now = Instant::now();
            let wait =
                queue.next_due().map_or(Duration::from_millis(200), |t| t.saturating_duration_since(now));
            match rx.recv_timeout(wait.min(Duration::from_millis(200))) {
                Ok(Event::Client(h)) => {
                    if let Err(e) = queue.admit(h) {
                        let (h, why) = *e;
                        fail_client(self.party, h, &why.to_string());
                    }
                    continue;
                }
                Ok(Event::Peer(_)) => continue,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => bail!("the listener stopped"),
            }
            let now = Instant::now();
            for h in queue.expired(now) {
                let why = format!(
                    "the query reached party 0 only: its other half did not come to party 1 within {} s (no key was used)",
                    limits.pair_timeout.as_secs()
                );
                self.withdraw(&h, &why);
                fail_client(self.party, h, &why);
            }
            while let Some(h) = queue.next(Instant::now()) {
                if let Some(h) = self.start(h) {
                    queue.later(h, Instant::now());
                }
                // New arrivals and expiries between queries.
                if queue.next_due().is_some_and(|t| t > Instant::now()) {
                    break;
                }
            }
        }
    }

    /// Try to start one query; gives it back if it must wait (party 1 lacks its half).
    fn start(&mut self, mut h: Half<Conn>) -> Option<Half<Conn>> {
        if h.client.peer_gone() {
            self.say(format!("query {}: the client left before it started (no key was used)", tag(&h.id())));
            self.withdraw(&h, "the client left");
            return None;
        }
        let (path, header, prog) = match self.pick(&h.shape) {
            Ok(x) => x,
            Err(e) => {
                self.withdraw(&h, &e);
                fail_client(self.party, h, &e);
                return None;
            }
        };
        let id = header.id;
        if h.share.len() != prog.input_len() {
            let e = format!(
                "the input has {} values; {} takes {}",
                h.share.len(),
                prog.desc.human(),
                prog.input_len()
            );
            self.withdraw(&h, &e);
            fail_client(self.party, h, &e);
            return None;
        }
        let mut keys = match prog.open_bundle(&path, self.party) {
            Ok(k) => k,
            Err(e) => {
                self.say(format!("bundle {id} cannot be used: {e}; retired"));
                self.retire(id);
                return Some(h);
            }
        };
        let (mut proposal, msg) = Proposal::new(h.id(), id, prog.fingerprint);
        let answer = match self.ask(&msg) {
            Ok(m) => m,
            Err(e) => {
                let e = format!("{e} (no key was used)");
                fail_client(self.party, h, &e);
                return None;
            }
        };
        match proposal.on_answer(answer) {
            Ok(Verdict::Unpaired) => return Some(h),
            Ok(Verdict::Rejected { bundle_unusable: true, reason: why }) => {
                self.say(format!("party 1 cannot use bundle {id}: {}; retired", reason(&why)));
                self.retire(id);
                return Some(h);
            }
            Ok(Verdict::Rejected { reason: why, .. }) => {
                fail_client(self.party, h, &format!("party 1: {why}"));
                return None;
            }
            Ok(Verdict::Accepted) => {}
            Err(e) => {
                self.drop_link();
                fail_client(self.party, h, &format!("party 1 answered out of turn: {e} (no key was used)"));
                return None;
            }
        }
        // The last moment before a bundle is spent: is the client still there?
        if h.client.peer_gone() {
            self.say(format!("query {}: the client left before it started (no key was used)", tag(&h.id())));
            self.withdraw(&h, "the client left");
            return None;
        }
        if let Err(e) = self.store.consume(id) {
            let e = format!("cannot record bundle {id} as used: {e}");
            self.withdraw(&h, &e);
            fail_client(self.party, h, &e);
            return None;
        }
        let begin = proposal.begin().expect("accepted");
        let (timeout, control) = (self.timeout, self.control);
        let peer = self.peer.as_mut().expect("linked");
        peer.set_timeout(Some(control.max(timeout)));
        let ready = peer.send(&begin.encode()).map_err(|e| e.to_string()).and_then(|()| recv_msg(peer));
        let started = match ready {
            Ok(m) => {
                proposal.on_ready(m).map_err(|e| e.unwrap_or_else(|| "party 1 answered out of turn".into()))
            }
            Err(e) => Err(format!("party 1 did not confirm bundle {id}: {e}")),
        };
        if let Err(e) = started {
            self.drop_link();
            self.discard(id);
            fail_client(self.party, h, &reason(&e));
            return None;
        }
        self.run_and_answer(&prog, &mut keys, h, id);
        None
    }

    /// Run the online phase of a begun query and send its client the answer or the error.
    fn run_and_answer(&mut self, prog: &Program, keys: &mut BundleReader, mut h: Half<Conn>, id: BundleId) {
        if prog.desc.new.is_some() {
            // (A session's steps have gates of their own: its keys are read ahead only.)
            keys.read_ahead();
            return self.run_session(prog, keys, h, id);
        }
        keys.decode_ahead(prog.gates.clone());
        let share = std::mem::take(&mut h.share);
        match self.online(prog, keys, &share, id) {
            Ok(a) => {
                self.say(format!(
                    "query {}: bundle {}, online {:.0} ms, {} rounds, {:.2} MB ({:.0} ms since it arrived)",
                    tag(&h.id()),
                    a.bundle,
                    a.online_ms,
                    a.rounds,
                    a.comm_bytes as f64 / 1e6,
                    h.arrived.elapsed().as_secs_f64() * 1e3
                ));
                let _ = h.client.send(&Msg::Answer(a).encode());
            }
            Err(e) => fail_client(self.party, h, &e),
        }
    }

    /// The online phase over the server link; the bundle is deleted whatever happens, and
    /// the link dropped on failure.
    fn online(
        &mut self,
        prog: &Program,
        keys: &mut BundleReader,
        share: &[u64],
        id: BundleId,
    ) -> Result<Answer, String> {
        let r = self.online_step(&prog.graph, &prog.gates, keys, share, &[]);
        self.discard(id);
        let run = r.map_err(|e| format!("online phase with bundle {id} failed: {e}"))?;
        Ok(answer(prog, &prog.graph, id, run))
    }

    /// One program's online phase over the server link, with the masked values carried
    /// over from the previous program of a session; the link is dropped on failure.
    fn online_step(
        &mut self,
        g: &engine::Graph,
        gates: &[Option<Box<dyn engine::DynGate>>],
        keys: &mut BundleReader,
        share: &[u64],
        carried: &[Vec<u64>],
    ) -> Result<PartyRun, String> {
        let timeout = self.timeout;
        let peer = self.peer.as_mut().ok_or("the link to the other server is gone")?;
        peer.set_timeout(Some(timeout));
        peer.set_frame_deadline(Some(timeout));
        // Every round, the other server's message is as long as ours.
        let r = run_party_step(g, gates, keys, share, carried, |m, idle| {
            peer.set_max_frame(m.len() as u64);
            peer.exchange_idle(&m, idle).map_err(transport)
        });
        if let Some(p) = self.peer.as_mut() {
            p.set_max_frame(limits::CONTROL);
        }
        r.map_err(|e| {
            self.drop_link();
            e.to_string()
        })
    }

    /// A generation session: step after step, answer the client, wait for its next share
    /// (or `Stop`), agree with the other server that the next step runs, run it. The
    /// session's bundle was spent when it began and is deleted when it ends, however it
    /// ends; the KV cache stays here as masked values and is never opened.
    fn run_session(&mut self, prog: &Program, keys: &mut BundleReader, mut h: Half<Conn>, id: BundleId) {
        let query = tag(&h.id());
        let mut share = std::mem::take(&mut h.share);
        let mut carried: Vec<Vec<u64>> = vec![];
        let hidden = prog.input_len() / prog.desc.seq.max(1) as usize;
        let (mut total_ms, mut steps) = (0.0, 0);
        for t in 0..prog.steps() {
            let built = if t == 0 { None } else { Some(prog.step(t)) };
            let (g, gates) = match &built {
                None => (&prog.graph, prog.gates.as_slice()),
                Some(Ok((g, gates))) => (g, gates.as_slice()),
                Some(Err(e)) => {
                    let e = format!("step {t} does not build: {e}");
                    self.end_session(id, h, &e);
                    return;
                }
            };
            let run = match self.online_step(g, gates, keys, &share, &carried) {
                Ok(r) => r,
                Err(e) => {
                    let e = format!("step {t} of the session with bundle {id} failed: {e}");
                    self.end_session(id, h, &e);
                    return;
                }
            };
            let mut run = run;
            carried = std::mem::take(&mut run.carried);
            let a = answer(prog, g, id, run);
            total_ms += a.online_ms;
            steps += 1;
            if h.client.send(&Msg::Answer(a).encode()).is_err() {
                if t + 1 < prog.steps() {
                    // The other server waits for this step's agreement: end it there too.
                    let _ = match self.party {
                        Party::P0 => self.lead_step(t + 1, false),
                        Party::P1 => self.follow_step(t + 1, false),
                    };
                }
                self.end_session(id, h, "the client left");
                return;
            }
            if t + 1 == prog.steps() {
                break;
            }
            // The client's next token (its embedding's share) or the end.
            h.client.set_timeout(Some(self.timeout));
            h.client.set_max_frame(limits::share(hidden));
            let next = match recv_msg(&mut h.client) {
                Ok(Msg::Share(v)) if v.len() == hidden => Ok(Some(v)),
                Ok(Msg::Share(v)) => {
                    Err(format!("the next token's share has {} values, not {hidden}", v.len()))
                }
                Ok(Msg::Stop) => Ok(None),
                Ok(m) => Err(format!("expected the next token's share or Stop, got {}", m.name())),
                Err(e) => Err(format!("no next token from the client: {e}")),
            };
            let go = matches!(next, Ok(Some(_)));
            let agreed = match self.party {
                Party::P0 => self.lead_step(t + 1, go),
                Party::P1 => self.follow_step(t + 1, go),
            };
            match (agreed, next) {
                (Ok(true), Ok(Some(v))) => share = v,
                (Ok(_), Ok(None)) => break,
                (Ok(_), Ok(Some(_))) => {
                    let e =
                        format!("the session ended before step {}: the other server's half stopped", t + 1);
                    self.end_session(id, h, &e);
                    return;
                }
                (Err(e), _) | (Ok(_), Err(e)) => {
                    self.end_session(id, h, &e);
                    return;
                }
            }
        }
        self.discard(id);
        self.say(format!(
            "session {query}: bundle {id}, {steps} step(s), online {total_ms:.0} ms in all ({:.0} ms since it arrived)",
            h.arrived.elapsed().as_secs_f64() * 1e3
        ));
    }

    /// Party 0: tell party 1 whether step `t` runs (`go`: the client sent its share); it
    /// runs only if party 1's client sent one too.
    fn lead_step(&mut self, t: usize, go: bool) -> Result<bool, String> {
        let control = self.control;
        let peer = self.peer.as_mut().ok_or("the link to party 1 is gone")?;
        let m = if go { Msg::Step { index: t as u32 } } else { Msg::Stop };
        peer.set_timeout(Some(control));
        peer.set_frame_deadline(Some(control));
        peer.send(&m.encode()).map_err(|e| format!("party 1: {e}"))?;
        if !go {
            return Ok(false);
        }
        match recv_msg(peer) {
            Ok(Msg::Ready) => Ok(true),
            Ok(Msg::Stop) | Ok(Msg::Reject { .. }) => Ok(false),
            Ok(m) => Err(format!("party 1 answered {} to step {t}", m.name())),
            Err(e) => Err(format!("party 1 did not confirm step {t}: {e}")),
        }
    }

    /// Party 1: step `t` runs if party 0 says so and this server's client sent its share
    /// too (`go`).
    fn follow_step(&mut self, t: usize, go: bool) -> Result<bool, String> {
        let wait = self.timeout + self.control;
        let peer = self.peer.as_mut().ok_or("the link to party 0 is gone")?;
        peer.set_timeout(Some(wait));
        peer.set_frame_deadline(Some(self.control));
        match recv_msg(peer) {
            Ok(Msg::Step { index }) if index as usize == t => {
                let reply = if go { Msg::Ready } else { Msg::Stop };
                peer.send(&reply.encode()).map_err(|e| format!("party 0: {e}"))?;
                Ok(go)
            }
            Ok(Msg::Stop) => Ok(false),
            Ok(m) => Err(format!("party 0 sent {} where step {t} was due", m.name())),
            Err(e) => Err(format!("party 0 did not start step {t}: {e}")),
        }
    }

    /// A session that failed: its bundle deleted, its client told.
    fn end_session(&mut self, id: BundleId, h: Half<Conn>, why: &str) {
        self.discard(id);
        fail_client(self.party, h, why);
    }

    /// Whether bundle `id` (as party 0 proposes it) can run `h` here, without spending it.
    fn check(&mut self, h: &Half<Conn>, id: BundleId, fp: [u8; 32]) -> Result<Arc<Program>, Rejection> {
        let unusable = |reason: String| Rejection { bundle_unusable: true, reason };
        if self.store.is_consumed(&id) {
            return Err(unusable(format!("bundle {id} was already used at party 1 (keys are single-use)")));
        }
        let path = self.store.path_of(&id);
        if !path.exists() {
            return Err(unusable(format!("party 1 has no bundle {id}")));
        }
        let header = read_header(&path).map_err(|e| unusable(e.to_string()))?;
        if header.party != self.party {
            return Err(unusable(format!(
                "party 1's copy of bundle {id} holds party {}'s keys",
                header.party.bit()
            )));
        }
        if header.fingerprint != fp {
            return Err(unusable(format!(
                "bundle {id} differs between the two servers (another dealer run?)"
            )));
        }
        let d: Descriptor = header
            .descriptor
            .parse()
            .map_err(|e: service::descriptor::BadDescriptor| unusable(e.to_string()))?;
        if !d.serves(&h.shape) {
            return Err(Rejection {
                bundle_unusable: false,
                reason: format!("the client asked party 1 for {}, party 0 for {}", h.shape, d.human()),
            });
        }
        let prog = self.programs.get(d).map_err(unusable)?;
        if h.share.len() != prog.input_len() {
            return Err(Rejection {
                bundle_unusable: false,
                reason: format!(
                    "the input has {} values; {} takes {}",
                    h.share.len(),
                    d.human(),
                    prog.input_len()
                ),
            });
        }
        Ok(prog)
    }

    /// Party 1: pair the clients' halves with party 0's proposals, and follow.
    fn follow(mut self, rx: Receiver<Event>, limits: Limits) -> anyhow::Result<()> {
        self.say(format!("waiting for party 0 (expected from {})", self.peer_addr));
        let mut f: Follower<Conn> = Follower::new(limits);
        // The program of the last proposal party 1 accepted (a `Begin` can only be for it).
        let mut accepted: Option<Arc<Program>> = None;
        let mut looked = Instant::now();
        loop {
            if f.waiting() == 0 {
                self.refresh(&mut looked);
            }
            loop {
                let wait = if self.peer.is_some() { Duration::ZERO } else { Duration::from_millis(200) };
                match rx.recv_timeout(wait) {
                    Ok(Event::Client(h)) => {
                        if let Err(e) = f.admit(h) {
                            let (h, why) = *e;
                            fail_client(self.party, h, &why.to_string());
                        }
                    }
                    Ok(Event::Peer(c)) => {
                        self.say(format!(
                            "party 0 connected from {}",
                            c.peer_addr().map(|a| a.to_string()).unwrap_or_default()
                        ));
                        if let Some(old) = self.peer.replace(c) {
                            old.abort();
                        }
                        f.link_lost();
                    }
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => bail!("the listener stopped"),
                }
            }
            for h in f.expired(Instant::now()) {
                fail_client(self.party, h, "party 0 never started this query (no key was used)");
            }
            let Some(peer) = self.peer.as_mut() else { continue };
            peer.set_timeout(Some(Duration::from_millis(50)));
            peer.set_frame_deadline(Some(self.control));
            let msg = match peer.recv() {
                Ok(b) => Msg::decode(&b),
                Err(NetError::Timeout(_)) => continue,
                Err(e) => {
                    self.say(format!("link to party 0 lost: {}", reason(&e.to_string())));
                    self.drop_link();
                    f.link_lost();
                    continue;
                }
            };
            let step = msg.and_then(|m| {
                f.on_peer(m, |h, id, fp| {
                    accepted = Some(self.check(h, id, fp)?);
                    Ok(())
                })
            });
            let step = match step {
                Ok(s) => s,
                Err(e) => {
                    self.say(format!("party 0 sent a malformed or unexpected message ({e}): link dropped"));
                    self.drop_link();
                    f.link_lost();
                    continue;
                }
            };
            if let Some(r) = step.reply
                && let Some(p) = self.peer.as_mut()
                && p.send(&r.encode()).is_err()
            {
                self.drop_link();
                f.link_lost();
            }
            if let Some((h, why)) = step.failed {
                fail_client(self.party, h, &why);
            }
            if let Some((h, id)) = step.start {
                match accepted.take() {
                    Some(prog) => self.follow_query(h, id, &prog),
                    None => fail_client(self.party, h, "party 0 began a query party 1 had not accepted"),
                }
            }
        }
    }

    /// Party 0 began a query it proposed and party 1 accepted: mark the bundle used,
    /// confirm, run.
    fn follow_query(&mut self, h: Half<Conn>, id: BundleId, prog: &Program) {
        let path = self.store.path_of(&id);
        let mut keys = match prog.open_bundle(&path, self.party) {
            Ok(k) => k,
            Err(e) => {
                let e = e.to_string();
                self.retire(id);
                if let Some(p) = self.peer.as_mut() {
                    let _ = p.send(&Msg::Reject { bundle_unusable: true, reason: e.clone() }.encode());
                }
                return fail_client(self.party, h, &e);
            }
        };
        // Party 0 always takes its lowest bundle: lower ones of the same run are spent there.
        if let Ok(scan) = self.store.scan() {
            for (_, hd) in scan.ready {
                if hd.id.run == id.run && hd.id.index < id.index && self.store.consume(hd.id).is_ok() {
                    self.discard(hd.id);
                    self.say(format!("bundle {} was skipped by party 0: deleted", hd.id));
                }
            }
        }
        if let Err(e) = self.store.consume(id) {
            let e = format!("cannot record bundle {id} as used: {e}");
            if let Some(p) = self.peer.as_mut() {
                let _ = p.send(&Msg::Reject { bundle_unusable: true, reason: e.clone() }.encode());
            }
            return fail_client(self.party, h, &e);
        }
        let sent = self.peer.as_mut().map(|p| p.send(&Msg::Ready.encode()));
        if !matches!(sent, Some(Ok(()))) {
            self.drop_link();
            self.discard(id);
            return fail_client(self.party, h, "party 0 is gone");
        }
        self.run_and_answer(prog, &mut keys, h, id);
    }
}
