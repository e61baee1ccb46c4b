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
        let mut child = Command::new(BIN)
            .args(["serve", "--party", &party.to_string()])
            .args(["--dir", dir.join(format!("party{party}")).to_str().unwrap()])
            .args(["--listen", listen, "--peer", peer, "--timeout", "3", "--pair-timeout", "2"])
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
    let me = tls::load_identity(tls_dir, Role::Client).unwrap();
    let cfg = tls::client_config(&me, tls::load_cert(tls_dir, Role::Server0).unwrap()).unwrap();
    let sock = TcpStream::connect(addr).unwrap();
    Conn::tls(sock, tls::client_connection(cfg).unwrap(), Some(Duration::from_secs(20)), None).unwrap()
}

/// A well-formed query's two messages for bert-tiny at seq 8 (the wire format of
/// `fusefss query`): its shape (tag 1: query id, model, sequence length, layers), then the
/// input share (tag 2: the number of words, the words).
fn query_messages(id: u8, words: usize) -> [Vec<u8>; 2] {
    let mut head = vec![1u8];
    head.extend_from_slice(&[id; 16]);
    head.extend_from_slice(&9u32.to_le_bytes());
    head.extend_from_slice(b"bert-tiny");
    head.extend_from_slice(&8u32.to_le_bytes());
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
