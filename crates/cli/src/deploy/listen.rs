//! Accepting connections with bounded resources (reliability probe, defect 2: ~1,020 idle
//! TCP connections stopped every query, and the accept loop spun on EMFILE).
//!
//! A connection is *pending* from `accept` until its TLS handshake and its first messages
//! are in; at most `max` are pending at once, each for at most `deadline`. A connection
//! past its deadline is shut down; when all slots are taken, the oldest pending one is shut
//! down to make room, so a flood of idle or slow connections cannot keep a legitimate
//! client out for longer than it takes to finish its own handshake. Accept errors (out of
//! file descriptors) back off instead of spinning.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::say;

struct Slot {
    id: u64,
    sock: TcpStream,
    since: Instant,
}

/// The pending connections of one listener.
#[derive(Clone)]
pub struct Pending {
    slots: Arc<Mutex<Vec<Slot>>>,
    next: Arc<AtomicU64>,
    max: usize,
    deadline: Duration,
}

/// A pending connection's place; dropping it (or [`Ticket::release`]) frees the slot.
pub struct Ticket {
    pending: Pending,
    id: u64,
}

impl Ticket {
    /// The connection is through its handshake and first messages.
    pub fn release(self) {}
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.pending.slots.lock().unwrap_or_else(PoisonError::into_inner);
        s.retain(|x| x.id != self.id);
    }
}

impl Pending {
    /// At most `max` pending connections, each for at most `deadline`.
    pub fn new(max: usize, deadline: Duration) -> Pending {
        Pending { slots: Arc::default(), next: Arc::default(), max: max.max(1), deadline }
    }

    /// Shut down the pending connections past their deadline; how many.
    fn sweep(&self, now: Instant) -> usize {
        let mut s = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let before = s.len();
        s.retain(|x| {
            let keep = now.saturating_duration_since(x.since) < self.deadline;
            if !keep {
                let _ = x.sock.shutdown(Shutdown::Both);
            }
            keep
        });
        before - s.len()
    }

    /// Take a slot for `sock`, closing the oldest pending connection if all are taken.
    /// Returns the ticket and whether one was evicted.
    fn admit(&self, sock: &TcpStream, now: Instant) -> Option<(Ticket, bool)> {
        let clone = sock.try_clone().ok()?;
        let mut s = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut evicted = false;
        if s.len() >= self.max {
            let old = s.remove(0);
            let _ = old.sock.shutdown(Shutdown::Both);
            evicted = true;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        s.push(Slot { id, sock: clone, since: now });
        Some((Ticket { pending: self.clone(), id }, evicted))
    }
}

/// Accept on `listener` for ever: each connection gets a slot and a thread running
/// `handle`, which releases the ticket once the connection is established.
pub fn accept_loop(
    listener: TcpListener,
    pending: Pending,
    party: u8,
    handle: Arc<dyn Fn(TcpStream, Ticket) + Send + Sync>,
) {
    if let Err(e) = listener.set_nonblocking(true) {
        return say(party, format!("the listener cannot poll: {e}"));
    }
    let mut backoff = Duration::from_millis(10);
    let (mut evictions, mut expired, mut last_report) = (0u64, 0u64, Instant::now());
    loop {
        let now = Instant::now();
        expired += pending.sweep(now) as u64;
        if (evictions > 0 || expired > 0) && last_report.elapsed() > Duration::from_secs(5) {
            say(
                party,
                format!(
                    "closed {evictions} pending connection(s) to make room and {expired} past their deadline"
                ),
            );
            (evictions, expired, last_report) = (0, 0, now);
        }
        match listener.accept() {
            Ok((sock, _)) => {
                if sock.set_nonblocking(false).is_err() {
                    continue;
                }
                let Some((ticket, evicted)) = pending.admit(&sock, now) else {
                    // No descriptor left to track it (EMFILE on dup): drop it and wait.
                    drop(sock);
                    backoff = wait(party, backoff, "out of file descriptors");
                    continue;
                };
                backoff = Duration::from_millis(10);
                evictions += u64::from(evicted);
                let h = handle.clone();
                let spawned =
                    std::thread::Builder::new().name("fusefss-conn".into()).spawn(move || h(sock, ticket));
                if spawned.is_err() {
                    backoff = wait(party, backoff, "cannot start a thread");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                // Out of file descriptors, or a transient network error: wait, never spin.
                backoff = wait(party, backoff, &e.to_string());
            }
        }
    }
}

/// Sleep `backoff` after an accept-side failure (logged once it reaches 640 ms); the next
/// back-off, doubled up to 1 s.
fn wait(party: u8, backoff: Duration, why: &str) -> Duration {
    if backoff >= Duration::from_millis(640) {
        say(party, format!("accept failed: {why}; retrying in {} ms", backoff.as_millis()));
    }
    std::thread::sleep(backoff);
    (backoff * 2).min(Duration::from_secs(1))
}
