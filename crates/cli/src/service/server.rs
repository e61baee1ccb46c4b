//! `fusefss serve`: one server. It answers queries one after another with fresh key
//! bundles, streamed from disk; party 0 dials party 1 and leads, party 1 follows.
//!
//! Per query: party 0 takes its lowest unused bundle, marks it used durably, and asks
//! party 1 to run the client's query with the same bundle; party 1 checks and marks it used
//! too, then both run the online phase over their link and send their output shares to the
//! client. Any failure ends the query with an error to the client, drops the server link
//! (party 0 reconnects for the next query) and never puts a bundle back.

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use engine::bundle::{BundleHeader, BundleId, BundleReader, Store, read_header};
use engine::{DynGate, Graph, Impl, run_party};
use fss::Party;
use gates::GateError;
use net::tls::{self, Role};
use net::{Conn, NetError, Transport};

use super::proto::{Answer, Descriptor, Msg, hex};
use crate::model::{ModelName, load};

/// Arguments of `fusefss serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Which server this is: 0 or 1.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=1))]
    party: u8,
    /// Its key store: the dealer's OUT/party0 or OUT/party1.
    #[arg(long)]
    dir: PathBuf,
    /// Address to listen on for the client (and, on party 1, for party 0); port 0 picks a
    /// free port and prints it.
    #[arg(long)]
    listen: String,
    /// The other server's address: party 0 connects to it; party 1 only reports it.
    #[arg(long)]
    peer: String,
    /// The dealer's certificate folder (OUT/tls): this server's key and the three pinned
    /// certificates.
    #[arg(long)]
    tls: PathBuf,
    /// Seconds to wait for a peer's message before a query fails.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

/// A program the server can run: built from a bundle's descriptor.
struct Program {
    g: Graph,
    gates: Vec<Option<Box<dyn DynGate>>>,
    imp: Impl,
    desc: Descriptor,
}

enum Event {
    Client { conn: Conn, id: [u8; 16], model: String, seq: u32, layers: Option<u32>, share: Vec<u64> },
    Peer(Conn),
}

struct Pending {
    conn: Conn,
    model: String,
    seq: u32,
    layers: Option<u32>,
    share: Vec<u64>,
    since: Instant,
}

struct Server {
    party: Party,
    store: Store,
    programs: HashMap<String, Result<Arc<Program>, String>>,
    timeout: Duration,
    peer: Option<Conn>,
    peer_addr: String,
    client_cfg: Arc<rustls::ClientConfig>,
}

fn say(party: Party, msg: impl std::fmt::Display) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "[party {}] {msg}", party.bit());
    let _ = o.flush();
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let party = if a.party == 0 { Party::P0 } else { Party::P1 };
    let me = tls::load_identity(&a.tls, Role::server(a.party))?;
    let other = tls::load_cert(&a.tls, Role::server(1 - a.party))?;
    let client = tls::load_cert(&a.tls, Role::Client)?;
    let server_cfg = tls::server_config(&me, vec![client.clone(), other.clone()])?;
    let client_cfg = tls::client_config(&me, other.clone())?;
    let store = Store::open(&a.dir).with_context(|| format!("opening the key store {}", a.dir.display()))?;
    let timeout = Duration::from_secs(a.timeout.max(1));
    let mut s = Server {
        party,
        store,
        programs: HashMap::new(),
        timeout,
        peer: None,
        peer_addr: a.peer.clone(),
        client_cfg,
    };
    s.report_store()?;
    let listener = TcpListener::bind(&a.listen).with_context(|| format!("listening on {}", a.listen))?;
    say(party, format!("listening on {}", listener.local_addr()?));
    let (tx, rx) = channel();
    std::thread::spawn(move || accept_loop(listener, server_cfg, client, other, timeout, party, tx));
    match party {
        Party::P0 => s.lead(rx),
        Party::P1 => s.follow(rx),
    }
}

fn accept_loop(
    listener: TcpListener,
    cfg: Arc<rustls::ServerConfig>,
    client: rustls::pki_types::CertificateDer<'static>,
    other: rustls::pki_types::CertificateDer<'static>,
    timeout: Duration,
    party: Party,
    tx: Sender<Event>,
) {
    for sock in listener.incoming() {
        let Ok(sock) = sock else { continue };
        let (cfg, client, other, tx) = (cfg.clone(), client.clone(), other.clone(), tx.clone());
        std::thread::spawn(move || {
            let from = sock.peer_addr().map(|a| a.to_string()).unwrap_or_default();
            let conn = match tls::server_connection(cfg).and_then(|c| Conn::tls(sock, c, Some(timeout), None))
            {
                Ok(c) => c,
                Err(e) => return say(party, format!("refused a connection from {from}: {e}")),
            };
            let cert = conn.peer_certificate().cloned();
            if cert.as_ref() == Some(&other) {
                if party == Party::P0 {
                    return say(party, "party 1 connected, but party 0 dials: closed");
                }
                let _ = tx.send(Event::Peer(conn));
                return;
            }
            if cert.as_ref() != Some(&client) {
                return;
            }
            let mut conn = conn;
            let msg = match conn.recv() {
                Ok(b) => Msg::decode(&b),
                Err(e) => return say(party, format!("the client at {from} sent no query: {e}")),
            };
            match msg {
                Ok(Msg::Query { id, model, seq, layers, share }) => {
                    let _ = tx.send(Event::Client { conn, id, model, seq, layers, share });
                }
                Ok(_) => {
                    let _ = conn.send(&Msg::Failed("expected a query".into()).encode());
                    say(party, format!("a client at {from} sent something other than a query"));
                }
                Err(e) => {
                    let _ = conn.send(&Msg::Failed(format!("malformed query: {e}")).encode());
                    say(party, format!("malformed message from the client at {from}: {e}"));
                }
            }
        });
    }
}

fn transport(e: NetError) -> GateError {
    GateError::Transport(match e {
        NetError::Closed => "the other server closed the connection".into(),
        e => format!("the other server: {e}"),
    })
}

impl Server {
    fn say(&self, msg: impl std::fmt::Display) {
        say(self.party, msg);
    }

    /// Report what the store holds, and check every descriptor builds.
    fn report_store(&mut self) -> anyhow::Result<()> {
        let scan = self.store.scan()?;
        for id in &scan.spent {
            self.say(format!("bundle {id} was already used (an interrupted query): refused and deleted"));
        }
        for (p, e) in &scan.bad {
            self.say(format!("ignoring {}: {e}", p.display()));
        }
        let mut by_desc: HashMap<String, usize> = HashMap::new();
        for (_, h) in &scan.ready {
            *by_desc.entry(h.descriptor.clone()).or_default() += 1;
        }
        if by_desc.is_empty() {
            self.say(format!(
                "no unused key bundle in {}: every query will be refused",
                self.store.dir().display()
            ));
        }
        let mut descs: Vec<_> = by_desc.into_iter().collect();
        descs.sort();
        for (d, k) in descs {
            match self.program(&d) {
                Ok(p) => self.say(format!("{k} bundle(s) ready for {}", p.desc.human())),
                Err(e) => self.say(format!("{k} bundle(s) for {d} cannot be served: {e}")),
            }
        }
        Ok(())
    }

    fn program(&mut self, descriptor: &str) -> Result<Arc<Program>, String> {
        self.programs
            .entry(descriptor.to_string())
            .or_insert_with(|| build_program(descriptor).map(Arc::new).map_err(|e| format!("{e:#}")))
            .clone()
    }

    /// The lowest unused bundle for the query's model and shape.
    fn pick(
        &mut self,
        model: &str,
        seq: u32,
        layers: Option<u32>,
    ) -> Result<(PathBuf, BundleHeader), String> {
        let scan = self.store.scan().map_err(|e| e.to_string())?;
        let mut others = vec![];
        for (p, h) in scan.ready {
            match Descriptor::parse(&h.descriptor) {
                Ok(d) if d.serves(model, seq, layers) => return Ok((p, h)),
                Ok(d) => others.push(d.human()),
                Err(_) => {}
            }
        }
        let want =
            format!("{model} at seq {seq}{}", layers.map(|l| format!(" ({l} layers)")).unwrap_or_default());
        others.sort();
        others.dedup();
        Err(if others.is_empty() {
            format!("no key bundle left for {want}: run `fusefss dealer` to make more")
        } else {
            format!("no key bundle for {want}: this server holds bundles for {}", others.join(", "))
        })
    }

    fn dial(&mut self) -> Result<&mut Conn, String> {
        if self.peer.is_none() {
            let addr = self
                .peer_addr
                .to_socket_addrs()
                .map_err(|e| format!("party 1 address {}: {e}", self.peer_addr))?
                .next()
                .ok_or_else(|| format!("party 1 address {} resolves to nothing", self.peer_addr))?;
            let sock = TcpStream::connect_timeout(&addr, self.timeout)
                .map_err(|e| format!("cannot reach party 1 at {addr}: {e}"))?;
            let c = tls::client_connection(self.client_cfg.clone())
                .and_then(|c| Conn::tls(sock, c, Some(self.timeout), None))
                .map_err(|e| format!("TLS with party 1 at {addr}: {e}"))?;
            self.say(format!("connected to party 1 at {addr}"));
            self.peer = Some(c);
        }
        Ok(self.peer.as_mut().expect("connected"))
    }

    /// Party 0: one query per client connection, in arrival order.
    fn lead(mut self, rx: Receiver<Event>) -> anyhow::Result<()> {
        for ev in rx {
            let Event::Client { mut conn, id, model, seq, layers, share } = ev else { continue };
            let t = Instant::now();
            let reply = match self.lead_query(id, &model, seq, layers, &share) {
                Ok(a) => {
                    self.say(format!(
                        "query {}: bundle {}, online {:.0} ms, {} rounds, {:.2} MB ({:.0} ms in all)",
                        &hex(&id)[..8],
                        a.bundle,
                        a.online_ms,
                        a.rounds,
                        a.comm_bytes as f64 / 1e6,
                        t.elapsed().as_secs_f64() * 1e3
                    ));
                    Msg::Answer(a)
                }
                Err(e) => {
                    self.say(format!("query {} failed: {e}", &hex(&id)[..8]));
                    Msg::Failed(e)
                }
            };
            let _ = conn.send(&reply.encode());
        }
        bail!("the listener stopped")
    }

    fn lead_query(
        &mut self,
        qid: [u8; 16],
        model: &str,
        seq: u32,
        layers: Option<u32>,
        share: &[u64],
    ) -> Result<Answer, String> {
        let (path, header) = self.pick(model, seq, layers)?;
        let id = header.id;
        let prog = self.program(&header.descriptor)?;
        if share.len() != prog.g.input.len() {
            return Err(format!(
                "the input has {} values; {} takes {}",
                share.len(),
                prog.desc.human(),
                prog.g.input.len()
            ));
        }
        let mut keys = match BundleReader::open(&path, &prog.g, prog.imp, self.party) {
            Ok(k) => k,
            Err(e) => {
                // Unusable: never offer it again.
                let _ = self.store.consume(id);
                self.store.discard(&id);
                return Err(format!("bundle {id}: {e}"));
            }
        };
        self.dial()?;
        self.store.consume(id).map_err(|e| e.to_string())?;
        let begin = Msg::Begin { query: qid, bundle: id, fingerprint: header.fingerprint }.encode();
        let timeout = self.timeout;
        let peer = self.peer.as_mut().expect("dialled");
        peer.set_timeout(Some(timeout));
        let reply = peer.send(&begin).and_then(|()| peer.recv());
        match reply.map_err(|e| e.to_string()).and_then(|b| Msg::decode(&b)) {
            Ok(Msg::Ready) => {}
            Ok(Msg::Refuse(why)) => {
                self.store.discard(&id);
                return Err(format!("party 1 refused bundle {id}: {why}"));
            }
            Ok(_) => {
                self.fail_link(&id);
                return Err("party 1 answered out of turn".into());
            }
            Err(e) => {
                self.fail_link(&id);
                return Err(format!("party 1 did not confirm the bundle: {e}"));
            }
        }
        self.online(&prog, &mut keys, share, id)
    }

    fn fail_link(&mut self, id: &BundleId) {
        if let Some(p) = self.peer.take() {
            p.abort();
        }
        self.store.discard(id);
    }

    /// The online phase over the server link; the bundle is deleted whatever happens.
    fn online(
        &mut self,
        prog: &Program,
        keys: &mut BundleReader,
        share: &[u64],
        id: BundleId,
    ) -> Result<Answer, String> {
        let peer = self.peer.as_mut().expect("linked");
        let r = run_party(&prog.g, &prog.gates, keys, share, |m, idle| {
            peer.exchange_idle(&m, idle).map_err(transport)
        });
        match r {
            Ok(run) => {
                self.store.discard(&id);
                Ok(Answer {
                    descriptor: prog.desc.render(),
                    bundle: id.to_string(),
                    n: prog.g.n,
                    f: prog.g.f,
                    share: run.output,
                    rounds: run.stats.rounds,
                    comm_bytes: run.stats.comm_bytes(),
                    online_ms: run.wall.as_secs_f64() * 1e3,
                })
            }
            Err(e) => {
                self.fail_link(&id);
                Err(format!("online phase with bundle {id} failed: {e}"))
            }
        }
    }

    /// Party 1: wait for party 0's lead, match it with the client's query, follow.
    fn follow(mut self, rx: Receiver<Event>) -> anyhow::Result<()> {
        self.say(format!("waiting for party 0 (expected from {})", self.peer_addr));
        let mut pending: HashMap<[u8; 16], Pending> = HashMap::new();
        loop {
            // New connections: a fresh server link replaces the old; queries wait for party 0.
            loop {
                match rx.try_recv() {
                    Ok(ev) => self.take(ev, &mut pending),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => bail!("the listener stopped"),
                }
            }
            let timeout = self.timeout;
            pending.retain(|id, p| {
                let keep = p.since.elapsed() < timeout;
                if !keep {
                    say(Party::P1, format!("query {}: party 0 never started it", &hex(id)[..8]));
                    let _ = p.conn.send(&Msg::Failed("party 0 never started this query".into()).encode());
                }
                keep
            });
            let Some(peer) = self.peer.as_mut() else {
                match rx.recv_timeout(Duration::from_millis(500)) {
                    Ok(ev) => self.take(ev, &mut pending),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => bail!("the listener stopped"),
                }
                continue;
            };
            peer.set_timeout(Some(Duration::from_millis(200)));
            let msg = match peer.recv() {
                Ok(b) => Msg::decode(&b),
                Err(NetError::Timeout(_)) => continue,
                Err(e) => {
                    self.say(format!("link to party 0 lost: {e}"));
                    self.peer = None;
                    continue;
                }
            };
            match msg {
                Ok(Msg::Begin { query, bundle, fingerprint }) => {
                    self.follow_query(query, bundle, fingerprint, &rx, &mut pending)?
                }
                Ok(_) | Err(_) => {
                    self.say("party 0 sent a malformed or unexpected message: link dropped");
                    if let Some(p) = self.peer.take() {
                        p.abort();
                    }
                }
            }
        }
    }

    fn take(&mut self, ev: Event, pending: &mut HashMap<[u8; 16], Pending>) {
        match ev {
            Event::Peer(c) => {
                self.say(format!(
                    "party 0 connected from {}",
                    c.peer_addr().map(|a| a.to_string()).unwrap_or_default()
                ));
                self.peer = Some(c);
            }
            Event::Client { conn, id, model, seq, layers, share } => {
                pending.insert(id, Pending { conn, model, seq, layers, share, since: Instant::now() });
            }
        }
    }

    fn follow_query(
        &mut self,
        qid: [u8; 16],
        id: BundleId,
        fp: [u8; 32],
        rx: &Receiver<Event>,
        pending: &mut HashMap<[u8; 16], Pending>,
    ) -> anyhow::Result<()> {
        // The client's query may still be on its way.
        let deadline = Instant::now() + self.timeout;
        while !pending.contains_key(&qid) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Event::Client { conn, id, model, seq, layers, share }) => {
                    pending.insert(id, Pending { conn, model, seq, layers, share, since: Instant::now() });
                }
                Ok(Event::Peer(c)) => {
                    // Party 0 gave up on this query and reconnected.
                    self.say("party 0 reconnected while a query was starting");
                    self.peer = Some(c);
                    return Ok(());
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => bail!("the listener stopped"),
            }
        }
        let q = pending.remove(&qid);
        let tag = &hex(&qid)[..8];
        let result = match q {
            None => Err(format!("no query {tag} from the client reached party 1 within {:?}", self.timeout)),
            Some(mut q) => {
                let r = self.follow_checked(id, fp, &mut q);
                match r {
                    Ok(a) => {
                        self.say(format!(
                            "query {tag}: bundle {}, online {:.0} ms, {} rounds, {:.2} MB",
                            a.bundle,
                            a.online_ms,
                            a.rounds,
                            a.comm_bytes as f64 / 1e6
                        ));
                        let _ = q.conn.send(&Msg::Answer(a).encode());
                        Ok(())
                    }
                    Err(e) => {
                        let _ = q.conn.send(&Msg::Failed(e.clone()).encode());
                        Err(e)
                    }
                }
            }
        };
        if let Err(e) = result {
            self.say(format!("query {tag} failed: {e}"));
            // Before the online phase party 0 waits for our word; after it, the link is gone.
            if let Some(p) = self.peer.as_mut() {
                let _ = p.send(&Msg::Refuse(e).encode());
            }
        }
        Ok(())
    }

    /// Check the bundle party 0 chose, mark it used, confirm, run.
    fn follow_checked(&mut self, id: BundleId, fp: [u8; 32], q: &mut Pending) -> Result<Answer, String> {
        if self.store.is_consumed(&id) {
            return Err(format!("bundle {id} was already used here (keys are single-use)"));
        }
        let path = self.store.path_of(&id);
        if !path.exists() {
            return Err(format!("party 1 has no bundle {id}"));
        }
        let header = read_header(&path).map_err(|e| {
            let _ = self.store.consume(id);
            self.store.discard(&id);
            e.to_string()
        })?;
        let d = Descriptor::parse(&header.descriptor)?;
        if !d.serves(&q.model, q.seq, q.layers) {
            return Err(format!(
                "bundle {id} is for {}, the query for {} at seq {}",
                d.human(),
                q.model,
                q.seq
            ));
        }
        if header.fingerprint != fp {
            return Err(format!("bundle {id} differs between the two servers (another dealer run?)"));
        }
        let prog = self.program(&header.descriptor)?;
        if q.share.len() != prog.g.input.len() {
            return Err(format!(
                "the input has {} values; {} takes {}",
                q.share.len(),
                d.human(),
                prog.g.input.len()
            ));
        }
        let mut keys = BundleReader::open(&path, &prog.g, prog.imp, self.party).map_err(|e| {
            let _ = self.store.consume(id);
            self.store.discard(&id);
            e.to_string()
        })?;
        // Party 0 always takes its lowest bundle: lower ones of the same run are spent there.
        if let Ok(scan) = self.store.scan() {
            for (_, h) in scan.ready {
                if h.id.run == id.run && h.id.index < id.index && self.store.consume(h.id).is_ok() {
                    self.store.discard(&h.id);
                    self.say(format!("bundle {} was skipped by party 0: deleted", h.id));
                }
            }
        }
        self.store.consume(id).map_err(|e| e.to_string())?;
        let timeout = self.timeout;
        let peer = self.peer.as_mut().ok_or("the link to party 0 is gone")?;
        peer.set_timeout(Some(timeout));
        if let Err(e) = peer.send(&Msg::Ready.encode()) {
            self.fail_link(&id);
            return Err(format!("party 0 is gone: {e}"));
        }
        let share = std::mem::take(&mut q.share);
        self.online(&prog, &mut keys, &share, id)
    }
}

/// The program a descriptor names, with this server's copy of the model.
fn build_program(descriptor: &str) -> anyhow::Result<Program> {
    let desc = Descriptor::parse(descriptor).map_err(anyhow::Error::msg)?;
    let model: ModelName = desc.model.parse()?;
    let imp = match desc.imp.as_str() {
        "fusefss" => Impl::Fusefss,
        "sigma" => Impl::Sigma,
        other => bail!("unknown implementation {other}"),
    };
    let loaded = load(model, Some(desc.layers as usize))?;
    if loaded.layers() != desc.layers as usize {
        bail!("the model has {} layers, the bundles {}", loaded.layers(), desc.layers);
    }
    let g = loaded.graph(desc.seq as usize)?;
    let gates = engine::build(&g, imp)?;
    Ok(Program { g, gates, imp, desc })
}
