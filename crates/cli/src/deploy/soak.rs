//! `fusefss soak`: the deployment under random faults. It deals bundles, starts both
//! servers as processes of this binary, and runs queries (each a `fusefss query` process)
//! while injecting faults at random: a server killed mid-query and restarted, a client that
//! reaches one server only, a client killed between its two sends, idle and garbage
//! connections, concurrent clients. It prints one JSON object; it fails if an unfaulted
//! query failed, a bundle was used twice, or a server is down at the end.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use fss::rng::{Rng, SeedableRng};
use net::tls::{self, Role};
use net::{Conn, Transport};
use serde::Serialize;
use service::proto::{Msg, QueryHead};

/// Arguments of `fusefss soak`.
#[derive(Args)]
pub struct SoakArgs {
    /// Queries to run (concurrent clients add theirs).
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Fraction of queries that come with a fault.
    #[arg(long, default_value_t = 0.2)]
    fault_rate: f64,
    /// Sequence length of the bert-tiny queries.
    #[arg(long, default_value_t = 8)]
    seq: usize,
    /// Seed of the fault schedule (the keys always come from the OS).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the deployment's folder here instead of a temporary one.
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Serialize, Default)]
struct Report {
    queries: usize,
    faults: usize,
    ok: usize,
    failed: usize,
    /// Failed queries that came with no fault (must be 0).
    unfaulted_failed: usize,
    bundles_spent: usize,
    bundles_reused: usize,
    max_server_rss_bytes: u64,
    servers_up: bool,
    /// Faults by kind.
    fault_kinds: std::collections::BTreeMap<&'static str, usize>,
    elapsed_s: f64,
}

struct Proc {
    child: Child,
    addr: String,
}

fn exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("finding this binary")
}

fn start(dir: &Path, party: u8, listen: &str, peer: &str) -> anyhow::Result<Proc> {
    let mut child = Command::new(exe()?)
        .args(["serve", "--party", &party.to_string()])
        .arg("--dir")
        .arg(dir.join(format!("party{party}")))
        .args(["--listen", listen, "--peer", peer, "--timeout", "5", "--pair-timeout", "2"])
        .arg("--tls")
        .arg(dir.join("tls"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting a server")?;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let out = child.stdout.take().context("server stdout")?;
    let l2 = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            l2.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(line);
        }
    });
    let t = Instant::now();
    loop {
        let found = lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find_map(|l| l.strip_prefix(&format!("[party {party}] listening on ")).map(String::from));
        if let Some(addr) = found {
            return Ok(Proc { child, addr });
        }
        if let Some(st) = child.try_wait()? {
            bail!("server {party} exited ({st}) before it listened");
        }
        if t.elapsed() > Duration::from_secs(60) {
            bail!("server {party} did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rss(pid: u32) -> u64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return 0 };
    let kb = |key: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    kb("VmHWM:").max(kb("VmRSS:")) * 1024
}

/// One `fusefss query --check --json`: whether it matched, and the bundle it used.
fn query(dir: &Path, addrs: &str, seq: usize, text: &str) -> Result<String, String> {
    let o = Command::new(exe().map_err(|e| e.to_string())?)
        .args(["query", "--servers", addrs, "--seq", &seq.to_string(), "--text", text, "--check", "--json"])
        .args(["--timeout", "30"])
        .arg("--tls")
        .arg(dir.join("tls"))
        .output()
        .map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).into_owned());
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).map_err(|e| e.to_string())?;
    if v["matches_plaintext"] != true {
        return Err(format!("does not match the plaintext: {v}"));
    }
    Ok(v["bundle"].as_str().unwrap_or_default().to_string())
}

/// A pinned client's connection to server `party`.
fn pinned(dir: &Path, party: u8, addr: &str) -> anyhow::Result<Conn> {
    let tls_dir = dir.join("tls");
    let me = tls::load_identity(&tls_dir, Role::Client)?;
    let cfg = tls::client_config(&me, tls::load_cert(&tls_dir, Role::server(party))?)?;
    let sock = TcpStream::connect(addr)?;
    Ok(Conn::tls(sock, tls::client_connection(cfg)?, Some(Duration::from_secs(10)), None)?)
}

fn half(id: [u8; 16], seq: usize, words: usize) -> [Msg; 2] {
    let head = QueryHead { id, model: "bert-tiny".into(), seq: seq as u32, layers: None, new: None };
    [Msg::Query(head), Msg::Share(vec![0; words])]
}

const KINDS: [&str; 7] =
    ["kill_party0", "kill_party1", "half_sent", "client_killed", "idle_connections", "garbage", "concurrent"];

pub fn run(a: SoakArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("fusefss-soak-{}", std::process::id())),
    };
    let _ = std::fs::remove_dir_all(&dir);
    let count = a.queries + a.queries / 2 + 8;
    let o = Command::new(exe()?)
        .args(["dealer", "--seq", &a.seq.to_string(), "--count", &count.to_string()])
        .arg("--out")
        .arg(&dir)
        .stdout(Stdio::null())
        .output()?;
    if !o.status.success() {
        bail!("dealer: {}", String::from_utf8_lossy(&o.stderr));
    }
    let words = a.seq * 128;
    let mut p1 = start(&dir, 1, "127.0.0.1:0", "127.0.0.1:1")?;
    let mut p0 = start(&dir, 0, "127.0.0.1:0", &p1.addr)?;
    let addrs = format!("{},{}", p0.addr, p1.addr);
    let mut rng = fss::rng::DealerRng::seed_from_u64(a.seed);
    let mut r = Report::default();
    let mut held: Vec<TcpStream> = vec![];
    let mut bundles_seen: Vec<String> = vec![];
    let mut record = |r: &mut Report, res: Result<String, String>, faulted: bool| match res {
        Ok(b) => {
            r.ok += 1;
            bundles_seen.push(b);
        }
        Err(e) => {
            r.failed += 1;
            if !faulted {
                r.unfaulted_failed += 1;
                eprintln!("unfaulted query failed: {}", e.trim());
            }
        }
    };
    let mut i = 0;
    while r.queries < a.queries {
        i += 1;
        let faulted = (rng.next_u64() as f64 / u64::MAX as f64) < a.fault_rate;
        let text = format!("soak query {i}");
        if !faulted {
            r.queries += 1;
            let res = query(&dir, &addrs, a.seq, &text);
            record(&mut r, res, false);
        } else {
            let kind = KINDS[(rng.next_u64() % KINDS.len() as u64) as usize];
            r.faults += 1;
            *r.fault_kinds.entry(kind).or_default() += 1;
            match kind {
                "kill_party0" | "kill_party1" => {
                    // Kill a server while a query runs (or about to), restart it in place.
                    let (d, ad) = (dir.clone(), addrs.clone());
                    let seq = a.seq;
                    let h = std::thread::spawn(move || query(&d, &ad, seq, "killed"));
                    std::thread::sleep(Duration::from_millis(rng.next_u64() % 200));
                    let party = if kind == "kill_party0" { 0 } else { 1 };
                    let peer = p1.addr.clone();
                    let victim = if party == 0 { &mut p0 } else { &mut p1 };
                    r.max_server_rss_bytes = r.max_server_rss_bytes.max(rss(victim.child.id()));
                    let _ = victim.child.kill();
                    let _ = victim.child.wait();
                    let res = h.join().unwrap_or_else(|_| Err("panicked".into()));
                    r.queries += 1;
                    record(&mut r, res, true);
                    let addr = victim.addr.clone();
                    *victim = if party == 0 {
                        start(&dir, 0, &addr, &peer)?
                    } else {
                        start(&dir, 1, &addr, "127.0.0.1:1")?
                    };
                }
                "half_sent" => {
                    let mut c = pinned(&dir, 0, &p0.addr)?;
                    let mut id = [0u8; 16];
                    rng.fill_bytes(&mut id);
                    for m in half(id, a.seq, words) {
                        c.send(&m.encode())?;
                    }
                    std::thread::spawn(move || {
                        c.set_timeout(Some(Duration::from_secs(30)));
                        let _ = c.recv();
                    });
                }
                "client_killed" => {
                    let mut id = [0u8; 16];
                    rng.fill_bytes(&mut id);
                    let mut c = pinned(&dir, 0, &p0.addr)?;
                    for m in half(id, a.seq, words) {
                        c.send(&m.encode())?;
                    }
                    drop(c);
                    if let Ok(mut c) = pinned(&dir, 1, &p1.addr) {
                        let [h, _] = half(id, a.seq, words);
                        let _ = c.send(&h.encode());
                    }
                }
                "idle_connections" => {
                    for addr in [&p0.addr, &p1.addr] {
                        for _ in 0..25 {
                            if held.len() < 300
                                && let Ok(s) = TcpStream::connect(addr.as_str())
                            {
                                held.push(s);
                            }
                        }
                    }
                }
                "garbage" => {
                    for addr in [&p0.addr, &p1.addr] {
                        if let Ok(mut s) = TcpStream::connect(addr.as_str()) {
                            let junk: Vec<u8> = (0..512).map(|_| rng.next_u64() as u8).collect();
                            let _ = s.write_all(&junk);
                        }
                    }
                }
                _ => {
                    // Three clients at once: all legitimate, all must succeed.
                    let hs: Vec<_> = (0..3)
                        .map(|k| {
                            let (d, ad, seq) = (dir.clone(), addrs.clone(), a.seq);
                            std::thread::spawn(move || query(&d, &ad, seq, &format!("concurrent {k}")))
                        })
                        .collect();
                    for h in hs {
                        r.queries += 1;
                        let res = h.join().unwrap_or_else(|_| Err("panicked".into()));
                        record(&mut r, res, false);
                    }
                }
            }
            if kind != "concurrent" && !kind.starts_with("kill") {
                // The fault is beside a legitimate query, which must succeed.
                r.queries += 1;
                let res = query(&dir, &addrs, a.seq, &text);
                record(&mut r, res, false);
            }
        }
        for p in [&p0, &p1] {
            r.max_server_rss_bytes = r.max_server_rss_bytes.max(rss(p.child.id()));
        }
    }
    r.servers_up = p0.child.try_wait()?.is_none() && p1.child.try_wait()?.is_none();
    let l0 = service::store::ledger(&dir.join("party0"))?;
    let l1 = service::store::ledger(&dir.join("party1"))?;
    let dups = |l: &[String]| l.len() - l.iter().collect::<std::collections::HashSet<_>>().len();
    let answered_twice = dups(&bundles_seen);
    r.bundles_spent = l0.len().max(l1.len());
    r.bundles_reused = dups(&l0) + dups(&l1) + answered_twice;
    r.elapsed_s = t0.elapsed().as_secs_f64();
    drop(held);
    drop((p0, p1));
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("{}", serde_json::to_string(&r)?);
    if r.unfaulted_failed > 0 || r.bundles_reused > 0 || !r.servers_up {
        bail!("the soak found a fault it should not have");
    }
    Ok(())
}
