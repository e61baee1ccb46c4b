//! The dealer, two servers and a client as separate processes on loopback: a query equals
//! the plaintext fixed-point result, and every failure is an error while both servers keep
//! serving, with no bundle ever used twice.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use net::tls::{self, Role};
use net::{Conn, Transport};

const BIN: &str = env!("CARGO_BIN_EXE_fusefss");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fusefss-deploy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn fusefss(args: &[&str]) -> Output {
    Command::new(BIN).args(args).env_remove("RUST_BACKTRACE").output().expect("run fusefss")
}

fn dealer(out: &Path, seq: usize, count: u32) {
    let o = fusefss(&[
        "dealer",
        "--model",
        "bert-tiny",
        "--seq",
        &seq.to_string(),
        "--count",
        &count.to_string(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "dealer: {}", String::from_utf8_lossy(&o.stderr));
}

/// A running server and the lines it printed.
struct Server {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    addr: String,
}

impl Server {
    fn start(party: u8, dir: &Path, peer: &str, listen: &str) -> Server {
        Server::start_with(party, dir, peer, listen, &[])
    }

    fn start_with(party: u8, dir: &Path, peer: &str, listen: &str, extra: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .args(["serve", "--party", &party.to_string()])
            .args(["--dir", dir.join(format!("party{party}")).to_str().unwrap()])
            .args(["--listen", listen, "--peer", peer, "--timeout", "3", "--pair-timeout", "2"])
            .args(extra)
            .args(["--tls", dir.join("tls").to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a server");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let l2 = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l2.lock().unwrap().push(line);
            }
        });
        let mut s = Server { child, lines, addr: String::new() };
        let line = s.wait_for("listening on ");
        s.addr = line.rsplit(' ').next().unwrap().to_string();
        s
    }

    /// The first printed line containing `what` (waits up to 20 s).
    fn wait_for(&self, what: &str) -> String {
        let t = Instant::now();
        loop {
            if let Some(l) = self.lines.lock().unwrap().iter().find(|l| l.contains(what)) {
                return l.clone();
            }
            let seen = self.lines.lock().unwrap().clone();
            assert!(t.elapsed() < Duration::from_secs(20), "no {what:?} in {seen:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn printed(&self, what: &str) -> bool {
        self.lines.lock().unwrap().iter().any(|l| l.contains(what))
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let lines = self.lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            eprintln!("server {} printed:\n{}", self.addr, lines.join("\n"));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Party 1, then party 0 pointed at it.
fn servers(dir: &Path) -> (Server, Server) {
    let p1 = Server::start(1, dir, "127.0.0.1:1", "127.0.0.1:0");
    let p0 = Server::start(0, dir, &p1.addr, "127.0.0.1:0");
    (p0, p1)
}

fn query(servers: [&str; 2], tls: &Path, seq: usize, text: &str) -> Result<serde_json::Value, String> {
    let s = format!("{},{}", servers[0], servers[1]);
    let seq = seq.to_string();
    let o = fusefss(&[
        "query",
        "--servers",
        &s,
        "--tls",
        tls.to_str().unwrap(),
        "--model",
        "bert-tiny",
        "--seq",
        &seq,
        "--text",
        text,
        "--check",
        "--json",
        "--timeout",
        "60",
    ]);
    if o.status.success() {
        Ok(serde_json::from_slice(&o.stdout).expect("one JSON object"))
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

/// A TLS connection to server 0 with the client's pinned certificate.
fn pinned_client(tls_dir: &Path, addr: &str) -> Conn {
    pinned_client_of(0, tls_dir, addr)
}

/// A TLS connection to server `party` with the client's pinned certificate.
fn pinned_client_of(party: u8, tls_dir: &Path, addr: &str) -> Conn {
    let me = tls::load_identity(tls_dir, Role::Client).unwrap();
    let cfg = tls::client_config(&me, tls::load_cert(tls_dir, Role::server(party)).unwrap()).unwrap();
    let sock = TcpStream::connect(addr).unwrap();
    Conn::tls(sock, tls::client_connection(cfg).unwrap(), Some(Duration::from_secs(20)), None).unwrap()
}

/// A well-formed query's two messages for bert-tiny at seq 8 (the wire format of
/// `fusefss query`): its shape (tag 1: query id, model, sequence length, layers, new tokens
/// of a generation), then the input share (tag 2: the number of words, the words).
fn query_messages(id: u8, words: usize) -> [Vec<u8>; 2] {
    let mut head = vec![1u8];
    head.extend_from_slice(&[id; 16]);
    head.extend_from_slice(&9u32.to_le_bytes());
    head.extend_from_slice(b"bert-tiny");
    head.extend_from_slice(&8u32.to_le_bytes());
    head.extend_from_slice(&0u32.to_le_bytes());
    head.extend_from_slice(&0u32.to_le_bytes());
    let mut share = vec![2u8];
    share.extend_from_slice(&(words as u64).to_le_bytes());
    share.extend(std::iter::repeat_n(0u8, 8 * words));
    [head, share]
}

/// Tag of a `Failed` answer.
const FAILED: u8 = 11;

fn ledger(dir: &Path, party: u8) -> Vec<String> {
    std::fs::read_to_string(dir.join(format!("party{party}/consumed.log")))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn queries_match_plaintext_and_bad_requests_are_refused() {
    let d = tmp("ok");
    dealer(&d, 8, 3);
    let (mut p0, mut p1) = servers(&d);
    let tls_dir = d.join("tls");
    let addrs = [p0.addr.as_str(), p1.addr.as_str()];

    // Two queries in a row, each with its own bundle, each equal to the plaintext result.
    let a = query(addrs, &tls_dir, 8, "the first private question").unwrap();
    let b = query(addrs, &tls_dir, 8, "another one").unwrap();
    for r in [&a, &b] {
        assert_eq!(r["matches_plaintext"], true, "{r}");
        assert_eq!(r["output"].as_array().unwrap().len(), 128);
        assert!(r["rounds"].as_u64().unwrap() > 10);
    }
    assert_ne!(a["bundle"], b["bundle"]);
    assert_ne!(a["output"], b["output"]);
    assert_eq!(ledger(&d, 0).len(), 2);
    assert_eq!(ledger(&d, 1), ledger(&d, 0));

    // Another shape than the bundles'.
    let e = query(addrs, &tls_dir, 4, "x").unwrap_err();
    assert!(e.contains("no key bundle for bert-tiny at seq 4") && e.contains("seq 8"), "{e}");

    // A client whose certificate is not pinned: refused at the handshake.
    let other = tmp("ok-other");
    net::tls::generate(&other.join("tls")).unwrap();
    let e = query(addrs, &other.join("tls"), 8, "x").unwrap_err();
    assert!(e.contains("certificate"), "{e}");
    // Each server logs the refusal when its own handshake ends (the client stops at the first).
    let t = Instant::now();
    while !(p0.printed("refused a connection") || p1.printed("refused a connection")) {
        assert!(t.elapsed() < Duration::from_secs(20), "no server logged the refusal");
        std::thread::sleep(Duration::from_millis(20));
    }

    // A malformed message from a pinned client.
    let mut c = pinned_client(&tls_dir, &p0.addr);
    c.send(b"\x01garbage").unwrap();
    let reply = c.recv().unwrap();
    assert_eq!(reply[0], FAILED, "a Failed message");
    assert!(String::from_utf8_lossy(&reply).contains("no query"));

    // Still serving: the last bundle, then a clear refusal when the store is spent.
    let c = query(addrs, &tls_dir, 8, "third").unwrap();
    assert_eq!(c["matches_plaintext"], true);
    let e = query(addrs, &tls_dir, 8, "fourth").unwrap_err();
    assert!(e.contains("no key bundle left"), "{e}");
    assert!(p0.alive() && p1.alive());
    assert_eq!(ledger(&d, 0).len(), 3);
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&other);
}

fn flip_byte_in_middle(path: &Path) {
    let mut b = std::fs::read(path).unwrap();
    let at = b.len() / 2;
    b[at] ^= 0x20;
    std::fs::write(path, b).unwrap();
}

fn bundles(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "fkb"))
        .collect();
    v.sort();
    v
}

#[test]
fn corruption_timeouts_and_vanished_peers_end_only_that_query() {
    let d = tmp("faults");
    dealer(&d, 8, 5);
    // Party 1's first bundle is damaged in the middle of a key section.
    flip_byte_in_middle(&bundles(&d.join("party1"))[0]);
    let (mut p0, mut p1) = servers(&d);
    let tls_dir = d.join("tls");
    let addrs = [p0.addr.as_str(), p1.addr.as_str()];
    let e = query(addrs, &tls_dir, 8, "x").unwrap_err();
    assert!(e.contains("checksum") || e.contains("closed the connection"), "{e}");
    p1.wait_for("checksum mismatch");

    // The next query gets a fresh bundle and the right answer.
    let r = query(addrs, &tls_dir, 8, "y").unwrap();
    assert_eq!(r["matches_plaintext"], true);

    // A client reaches party 0 only (defect 5): it fails after the pair timeout, no bundle
    // is spent, and a legitimate query behind it does not wait for it.
    let mut c = pinned_client(&tls_dir, &p0.addr);
    for m in query_messages(0xAB, 8 * 128) {
        c.send(&m).unwrap();
    }
    let t = Instant::now();
    let r = query(addrs, &tls_dir, 8, "not stalled").unwrap();
    assert_eq!(r["matches_plaintext"], true);
    assert!(t.elapsed() < Duration::from_secs(2), "stalled for {:?}", t.elapsed());
    let reply = c.recv().unwrap();
    assert_eq!(reply[0], FAILED, "a Failed message");
    let why = String::from_utf8_lossy(&reply);
    assert!(why.contains("reached party 0 only") && why.contains("no key was used"), "{why}");

    let r = query(addrs, &tls_dir, 8, "w").unwrap();
    assert_eq!(r["matches_plaintext"], true);
    assert!(p0.alive() && p1.alive());
    let used = ledger(&d, 0);
    assert_eq!(used.len(), 4, "{used:?}");
    assert_eq!(ledger(&d, 1), used);
    let unique: std::collections::HashSet<_> = used.iter().collect();
    assert_eq!(unique.len(), 4);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_server_killed_mid_query_refuses_its_used_bundle_after_restart() {
    let d = tmp("crash");
    dealer(&d, 64, 3);
    let backup0: Vec<(PathBuf, Vec<u8>)> =
        bundles(&d.join("party0")).into_iter().map(|p| (p.clone(), std::fs::read(&p).unwrap())).collect();
    let (mut p0, p1) = servers(&d);
    let tls_dir = d.join("tls");
    let (a0, a1) = (p0.addr.clone(), p1.addr.clone());

    // Kill party 1 as soon as it has marked the bundle used (the online phase is running).
    let q = {
        let (a0, a1, t) = (a0.clone(), a1.clone(), tls_dir.clone());
        std::thread::spawn(move || query([&a0, &a1], &t, 64, "interrupted"))
    };
    let t = Instant::now();
    while ledger(&d, 1).is_empty() {
        assert!(t.elapsed() < Duration::from_secs(60), "party 1 never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(p1);
    let e = q.join().unwrap().unwrap_err();
    assert!(e.contains("server"), "{e}");
    let first = ledger(&d, 1)[0].clone();

    // Restarted on the same address, party 1 refuses the bundle it had started.
    let p1 = Server::start(1, &d, "127.0.0.1:1", &a1);
    p1.wait_for(&format!("bundle {first} was already used"));
    let r = query([&a0, &a1], &tls_dir, 64, "after the restart").unwrap();
    assert_eq!(r["matches_plaintext"], true);
    assert_ne!(r["bundle"].as_str().unwrap(), first);

    // Party 0's key store is restored from a backup (its record of used bundles is lost):
    // party 1 still refuses every bundle it has used, and only a fresh one runs.
    drop(p0);
    let dir0 = d.join("party0");
    std::fs::remove_file(dir0.join("consumed.log")).unwrap();
    for (p, b) in &backup0 {
        std::fs::write(p, b).unwrap();
    }
    p0 = Server::start(0, &d, &a1, &a0);
    // Party 0 proposes its lowest bundle; party 1 refuses the two it used, party 0 retires
    // them, and the query runs on the third without the client seeing a refusal.
    let ok = query([&a0, &a1], &tls_dir, 64, "restored").unwrap();
    assert_eq!(ok["matches_plaintext"], true);
    assert_eq!(
        p0.lines.lock().unwrap().iter().filter(|l| l.contains("party 1 cannot use bundle")).count(),
        2
    );
    assert!(p0.alive());
    let used: Vec<String> = ledger(&d, 1);
    let unique: std::collections::HashSet<_> = used.iter().collect();
    assert_eq!(unique.len(), used.len(), "party 1 used a bundle twice: {used:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `fusefss serve` that is expected to refuse to start: its error.
fn serve_refused(party: u8, dir: &Path, store: &str) -> String {
    let o = fusefss(&[
        "serve",
        "--party",
        &party.to_string(),
        "--dir",
        dir.join(store).to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--peer",
        "127.0.0.1:1",
        "--tls",
        dir.join("tls").to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "a server started: {}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_store_is_served_once_by_its_own_party_and_its_files_are_private() {
    let d = tmp("store");
    // Defect 8: with umask 022 the dealer still writes owner-only folders and files.
    let o = Command::new("sh")
        .args(["-c", "umask 022 && exec \"$0\" \"$@\"", BIN, "dealer", "--seq", "8", "--count", "2", "--out"])
        .arg(&d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        for dir in ["party0", "party1", "tls"] {
            assert_eq!(mode(&d.join(dir)), 0o700, "{dir}");
        }
        for b in bundles(&d.join("party0")).iter().chain(&bundles(&d.join("party1"))) {
            assert_eq!(mode(b), 0o600, "{}", b.display());
        }
        for k in ["server0.key", "server1.key", "client.key", "../party0/party"] {
            assert_eq!(mode(&d.join("tls").join(k)), 0o600, "{k}");
        }
        // A key made readable by someone is narrowed again by the next dealer run.
        std::fs::set_permissions(d.join("tls/client.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
        dealer(&d, 8, 1);
        assert_eq!(mode(&d.join("tls/client.key")), 0o600);
    }
    // Defect 7: the other party's folder is refused at start-up.
    let e = serve_refused(0, &d, "party1");
    assert!(e.contains("holds party 1's keys, not party 0's"), "{e}");
    // Defect 1: a second server on a store in use is refused at start-up.
    let (p0, p1) = servers(&d);
    for (party, store) in [(0, "party0"), (1, "party1")] {
        let e = serve_refused(party, &d, store);
        assert!(e.contains("in use by another server"), "{e}");
    }
    let r = query([&p0.addr, &p1.addr], &d.join("tls"), 8, "one store, one server").unwrap();
    assert_eq!(r["matches_plaintext"], true);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn idle_slow_and_garbage_connections_do_not_stop_a_query() {
    let d = tmp("flood");
    dealer(&d, 8, 2);
    let (mut p0, mut p1) = servers(&d);
    // Defect 2: 300 idle TCP connections against each server, one that sends a byte every
    // second (beats a per-read timeout, not a whole-handshake deadline), and garbage.
    let mut held = vec![];
    for addr in [&p0.addr, &p1.addr] {
        for _ in 0..300 {
            held.push(TcpStream::connect(addr.as_str()).unwrap());
        }
        let mut g = TcpStream::connect(addr.as_str()).unwrap();
        use std::io::Write;
        let _ = g.write_all(&[0x16, 3, 1, 0xff, 0xff, 1, 2, 3]);
        held.push(g);
    }
    let t = Instant::now();
    let r = query([&p0.addr, &p1.addr], &d.join("tls"), 8, "through the flood").unwrap();
    assert_eq!(r["matches_plaintext"], true);
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    p0.wait_for("pending connection(s)");
    assert!(p0.alive() && p1.alive());
    drop(held);
    assert_eq!(ledger(&d, 0).len(), 1);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn overload_and_vanished_clients_spend_no_bundle() {
    let d = tmp("overload");
    dealer(&d, 8, 40);
    let p1 = Server::start_with(1, &d, "127.0.0.1:1", "127.0.0.1:0", &["--max-queue", "2"]);
    let p0 = Server::start_with(0, &d, &p1.addr, "127.0.0.1:0", &["--max-queue", "2"]);
    let tls_dir = d.join("tls");
    // Defect 3: 16 clients at once against queues of 2: the excess is refused as busy at
    // once, and a bundle is spent only by a query that is answered.
    let hs: Vec<_> = (0..16)
        .map(|i| {
            let (a0, a1, t) = (p0.addr.clone(), p1.addr.clone(), tls_dir.clone());
            std::thread::spawn(move || query([&a0, &a1], &t, 8, &format!("client {i}")))
        })
        .collect();
    let results: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = results.iter().filter(|r| r.as_ref().is_ok_and(|v| v["matches_plaintext"] == true)).count();
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(e.contains("busy") || e.contains("party 0 only") || e.contains("never started"), "{e}");
    }
    // Each server admits its own two, so the race may split every pair (no query answered);
    // whatever was answered spent one bundle on each side, and nothing else did.
    assert_eq!(ledger(&d, 0).len(), ok, "{results:?}");
    assert_eq!(ledger(&d, 1), ledger(&d, 0));
    // The burst's unpaired halves expire (party 1 keeps them twice the pair timeout of 2 s);
    // then a query alone is answered.
    std::thread::sleep(Duration::from_millis(4500));
    let alone = query([&p0.addr, &p1.addr], &tls_dir, 8, "after the burst").unwrap();
    assert_eq!(alone["matches_plaintext"], true);
    let ok = ok + 1;
    assert_eq!(ledger(&d, 0).len(), ok);

    // A client that sends its half to party 0, leaves, then sends to party 1: party 0 finds
    // it gone before it takes a bundle and withdraws it at party 1.
    let mut c0 = pinned_client(&tls_dir, &p0.addr);
    for m in query_messages(0xCD, 8 * 128) {
        c0.send(&m).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    drop(c0);
    std::thread::sleep(Duration::from_millis(100));
    let me = tls::load_identity(&tls_dir, Role::Client).unwrap();
    let cfg = tls::client_config(&me, tls::load_cert(&tls_dir, Role::Server1).unwrap()).unwrap();
    let sock = TcpStream::connect(p1.addr.as_str()).unwrap();
    let mut c1 =
        Conn::tls(sock, tls::client_connection(cfg).unwrap(), Some(Duration::from_secs(20)), None).unwrap();
    for m in query_messages(0xCD, 8 * 128) {
        c1.send(&m).unwrap();
    }
    // Party 1's half is withdrawn, or (if it came after the withdrawal) expires unpaired.
    let reply = c1.recv().unwrap();
    assert_eq!(reply[0], FAILED);
    let why = String::from_utf8_lossy(&reply);
    assert!(why.contains("client left") || why.contains("never started"), "{why}");
    p0.wait_for("the client left before it started (no key was used)");
    assert_eq!(ledger(&d, 0).len(), ok);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn oversized_frames_dirty_names_and_empty_texts_are_refused() {
    let d = tmp("frames");
    dealer(&d, 8, 1);
    let (mut p0, p1) = servers(&d);
    let tls_dir = d.join("tls");
    // Defect 4: the share frame is limited by the query's shape before it is read.
    let mut c = pinned_client(&tls_dir, &p0.addr);
    let [head, _] = query_messages(1, 8 * 128);
    c.send(&head).unwrap();
    let [_, too_long] = query_messages(1, 8 * 128 + 1);
    c.send(&too_long).unwrap();
    let reply = String::from_utf8_lossy(&c.recv().unwrap()).into_owned();
    assert!(reply.contains("exceeds the limit of 8201 bytes"), "{reply}");
    // A query's shape is itself limited to a small frame.
    let mut c = pinned_client(&tls_dir, &p0.addr);
    c.send(&vec![1u8; 100_000]).unwrap();
    let reply = String::from_utf8_lossy(&c.recv().unwrap()).into_owned();
    assert!(reply.contains("exceeds the limit"), "{reply}");
    // Control characters and long names reach the log escaped and cut.
    let mut c = pinned_client(&tls_dir, &p0.addr);
    let mut head = vec![1u8];
    head.extend_from_slice(&[7; 16]);
    let name = format!("\x1b[31mevil\nforged log line{}", "x".repeat(5000));
    head.extend_from_slice(&(name.len() as u32).to_le_bytes());
    head.extend_from_slice(name.as_bytes());
    head.extend_from_slice(&8u32.to_le_bytes());
    head.extend_from_slice(&0u32.to_le_bytes());
    head.extend_from_slice(&0u32.to_le_bytes());
    c.send(&head).unwrap();
    let _ = c.recv();
    let line = p0.wait_for("unknown model");
    assert!(!line.contains('\x1b') && line.contains("\\u{1b}") && line.len() < 400, "{line}");
    // An empty text is an error, not a query on [CLS] [SEP].
    let e = query([&p0.addr, &p1.addr], &tls_dir, 8, "").unwrap_err();
    assert!(e.contains("empty"), "{e}");
    assert!(p0.alive());
    assert!(ledger(&d, 0).is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_restarted_or_silent_peer_spends_no_bundle() {
    let d = tmp("peer");
    dealer(&d, 8, 3);
    let (p0, p1) = servers(&d);
    let tls_dir = d.join("tls");
    let (a0, a1) = (p0.addr.clone(), p1.addr.clone());
    assert_eq!(query([&a0, &a1], &tls_dir, 8, "before").unwrap()["matches_plaintext"], true);
    // Defect 6: party 1 restarted between queries; party 0 finds its link dead when it
    // proposes, dials again, and the next query runs.
    drop(p1);
    let p1 = Server::start(1, &d, "127.0.0.1:1", &a1);
    let r = query([&a0, &a1], &tls_dir, 8, "after the restart").unwrap();
    assert_eq!(r["matches_plaintext"], true);
    assert_eq!(ledger(&d, 0).len(), 2);
    assert_eq!(ledger(&d, 1), ledger(&d, 0));
    drop((p0, p1));

    // A peer that accepts and never answers: the query fails within the control timeout,
    // and no bundle is spent.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let hold = std::thread::spawn(move || silent.incoming().take(4).map(|s| s.unwrap()).collect::<Vec<_>>());
    let p0 = Server::start_with(0, &d, &silent_addr, "127.0.0.1:0", &["--control-timeout", "2"]);
    let p1 = Server::start(1, &d, "127.0.0.1:1", "127.0.0.1:0");
    let t = Instant::now();
    let e = query([&p0.addr, &p1.addr], &tls_dir, 8, "nobody home").unwrap_err();
    assert!(e.contains("no key was used"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert_eq!(ledger(&d, 0).len(), 2);
    drop((p0, p1));
    drop(hold);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_short_soak_reuses_no_bundle_and_keeps_both_servers_up() {
    let o = fusefss(&["soak", "--queries", "24", "--fault-rate", "0.35", "--seed", "7"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["bundles_reused"], 0, "{v}");
    assert_eq!(v["unfaulted_failed"], 0, "{v}");
    assert_eq!(v["servers_up"], true, "{v}");
    assert!(v["faults"].as_u64().unwrap() >= 4, "{v}");
    let (spent, ok, faults) =
        (v["bundles_spent"].as_u64().unwrap(), v["ok"].as_u64().unwrap(), v["faults"].as_u64().unwrap());
    assert!(spent <= ok + faults, "{v}");
    assert!(v["max_server_rss_bytes"].as_u64().unwrap() < 300 << 20, "{v}");
}

/// CPU seconds (user + system) a process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime), in clock ticks (100 per second on Linux).
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}

#[test]
#[cfg(target_os = "linux")]
fn out_of_file_descriptors_the_accept_loop_backs_off_and_recovers() {
    let d = tmp("emfile");
    dealer(&d, 8, 1);
    let p1 = Server::start(1, &d, "127.0.0.1:1", "127.0.0.1:0");
    // Party 0 with 48 file descriptors: 80 idle connections exhaust them.
    let mut child = Command::new("sh")
        .args([
            "-c",
            "ulimit -n 48 && exec \"$0\" \"$@\"",
            BIN,
            "serve",
            "--party",
            "0",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--peer", &p1.addr, "--pair-timeout", "2", "--handshake-timeout", "3"])
        .arg("--dir")
        .arg(d.join("party0"))
        .arg("--tls")
        .arg(d.join("tls"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let child = Kill(child);
    let addr = loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "party 0 exited");
        if let Some(a) = line.trim().strip_prefix("[party 0] listening on ") {
            break a.to_string();
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    // More connections than descriptors: the listener runs into the limit.
    let held: Vec<TcpStream> = (0..120).filter_map(|_| TcpStream::connect(addr.as_str()).ok()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_seconds(child.0.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(child.0.id()) - before;
    assert!(used < 0.5, "the accept loop used {used} s of CPU in 2 s");
    let log: Vec<String> = rx.try_iter().collect();
    assert!(log.iter().any(|l| l.contains("accept failed")), "{log:?}");
    drop(held);
    // The deadlines free the descriptors; a query then runs.
    std::thread::sleep(Duration::from_secs(4));
    let r = query([&addr, &p1.addr], &d.join("tls"), 8, "after the flood").unwrap();
    assert_eq!(r["matches_plaintext"], true);
    drop(child);
    let _ = std::fs::remove_dir_all(&d);
}

fn generate_query(
    servers: [&str; 2],
    tls: &Path,
    prompt: &str,
    new_tokens: usize,
) -> Result<serde_json::Value, String> {
    let s = format!("{},{}", servers[0], servers[1]);
    let o = fusefss(&[
        "query",
        "--generate",
        "--servers",
        &s,
        "--tls",
        tls.to_str().unwrap(),
        "--model",
        "llama-tiny",
        "--prompt",
        prompt,
        "--max-new-tokens",
        &new_tokens.to_string(),
        "--check",
        "--json",
    ]);
    if o.status.success() {
        Ok(serde_json::from_slice(&o.stdout).expect("one JSON object"))
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

/// The first messages of a llama-tiny generation of `new` tokens after a prompt of `seq`
/// tokens (64 words each), as `fusefss query --generate` sends them.
fn generation_messages(id: u8, seq: u32, new: u32) -> [Vec<u8>; 2] {
    let mut head = vec![1u8];
    head.extend_from_slice(&[id; 16]);
    head.extend_from_slice(&10u32.to_le_bytes());
    head.extend_from_slice(b"llama-tiny");
    head.extend_from_slice(&seq.to_le_bytes());
    head.extend_from_slice(&0u32.to_le_bytes());
    head.extend_from_slice(&new.to_le_bytes());
    let words = seq as usize * 64;
    let mut share = vec![2u8];
    share.extend_from_slice(&(words as u64).to_le_bytes());
    share.extend(std::iter::repeat_n(0u8, 8 * words));
    [head, share]
}

#[test]
fn generation_sessions_run_over_tls_and_are_spent_once() {
    let d = tmp("generate");
    // "a private prompt for you" is 7 tokens with llama-tiny's word-hash tokenizer.
    let o = fusefss(&[
        "dealer",
        "--model",
        "llama-tiny",
        "--prompt-len",
        "7",
        "--max-new-tokens",
        "4",
        "--count",
        "4",
        "--out",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "dealer: {}", String::from_utf8_lossy(&o.stderr));
    let (mut p0, mut p1) = servers(&d);
    let tls_dir = d.join("tls");
    let addrs = [p0.addr.as_str(), p1.addr.as_str()];

    // A whole session and a shorter one, every step equal to the plaintext fixed-point model.
    let a = generate_query(addrs, &tls_dir, "a private prompt for you", 4).unwrap();
    assert_eq!(a["matches_plaintext"], true, "{a}");
    assert_eq!(a["tokens"].as_array().unwrap().len(), 4, "{a}");
    assert_eq!(a["steps"].as_array().unwrap().len(), 4, "{a}");
    let b = generate_query(addrs, &tls_dir, "a private prompt for you", 2).unwrap();
    assert_eq!(b["matches_plaintext"], true, "{b}");
    assert_eq!(b["tokens"].as_array().unwrap().len(), 2, "{b}");
    assert_ne!(a["bundle"], b["bundle"]);
    assert_eq!(ledger(&d, 0).len(), 2);
    assert_eq!(ledger(&d, 1), ledger(&d, 0));

    // A prompt of another length, or more tokens than a session holds: refused, nothing spent.
    let e = generate_query(addrs, &tls_dir, "a shorter prompt", 2).unwrap_err();
    assert!(e.contains("no key bundle for llama-tiny generating 2 tokens after a prompt of 5"), "{e}");
    assert!(e.contains("after a prompt of 7"), "{e}");
    let e = generate_query(addrs, &tls_dir, "a private prompt for you", 5).unwrap_err();
    assert!(e.contains("no key bundle"), "{e}");
    assert_eq!(ledger(&d, 0).len(), 2);

    // A client that leaves after the first step: its session is spent and ends at both
    // servers, which go on serving.
    let mut cs: Vec<Conn> = (0..2).map(|p| pinned_client_of(p, &tls_dir, addrs[p as usize])).collect();
    for c in &mut cs {
        for m in generation_messages(9, 7, 4) {
            c.send(&m).unwrap();
        }
    }
    for c in &mut cs {
        c.set_max_frame(1 << 20);
        assert_eq!(c.recv().unwrap()[0], 10, "an Answer");
    }
    drop(cs);
    p0.wait_for("no next token from the client");
    assert_eq!(ledger(&d, 0).len(), 3);
    let c = generate_query(addrs, &tls_dir, "a private prompt for you", 3).unwrap();
    assert_eq!(c["matches_plaintext"], true, "{c}");
    let e = generate_query(addrs, &tls_dir, "a private prompt for you", 3).unwrap_err();
    assert!(e.contains("no key bundle left"), "{e}");
    assert!(p0.alive() && p1.alive());
    assert_eq!(ledger(&d, 0).len(), 4);
    assert_eq!(ledger(&d, 1), ledger(&d, 0));
    // Every session's file is gone, used or cut short.
    assert!(bundles(&d).is_empty(), "{:?}", bundles(&d));
    let _ = std::fs::remove_dir_all(&d);
}
