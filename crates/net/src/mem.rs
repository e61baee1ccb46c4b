//! Two ends of an in-memory link, for parties on threads of one process.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use crate::sim::{Schedule, wait_until};
use crate::{Counters, NetError, NetSim, Transport};

/// One end of an in-memory link.
#[derive(Debug)]
pub struct MemTransport {
    tx: Sender<(Vec<u8>, Option<Instant>)>,
    rx: Receiver<(Vec<u8>, Option<Instant>)>,
    schedule: Option<Schedule>,
    timeout: Option<Duration>,
    counters: Counters,
}

impl MemTransport {
    /// Both ends of a fresh link, optionally over a simulated network.
    pub fn pair(sim: Option<NetSim>) -> (MemTransport, MemTransport) {
        let (t0, r1) = channel();
        let (t1, r0) = channel();
        let end = |tx, rx| MemTransport {
            tx,
            rx,
            schedule: sim.map(Schedule::new),
            timeout: None,
            counters: Counters::default(),
        };
        (end(t0, r0), end(t1, r1))
    }
}

impl Transport for MemTransport {
    fn send(&mut self, msg: &[u8]) -> Result<(), NetError> {
        let at = self.schedule.as_mut().map(|s| s.deliver_at(msg.len()));
        self.tx.send((msg.to_vec(), at)).map_err(|_| NetError::Closed)?;
        self.counters.sent_bytes += msg.len() as u64;
        self.counters.sent_messages += 1;
        Ok(())
    }

    fn recv(&mut self) -> Result<Vec<u8>, NetError> {
        let (msg, at) = match self.timeout {
            None => self.rx.recv().map_err(|_| NetError::Closed)?,
            Some(t) => self.rx.recv_timeout(t).map_err(|e| match e {
                RecvTimeoutError::Timeout => NetError::Timeout(t),
                RecvTimeoutError::Disconnected => NetError::Closed,
            })?,
        };
        if let Some(at) = at {
            wait_until(at);
        }
        self.counters.received_bytes += msg.len() as u64;
        self.counters.received_messages += 1;
        Ok(msg)
    }

    fn counters(&self) -> Counters {
        self.counters
    }

    fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_cross_in_order_and_are_counted() {
        let (mut a, mut b) = MemTransport::pair(None);
        a.send(b"one").unwrap();
        a.send(b"two").unwrap();
        assert_eq!(b.exchange(b"back").unwrap(), b"one");
        assert_eq!(b.recv().unwrap(), b"two");
        assert_eq!(a.recv().unwrap(), b"back");
        assert_eq!(a.counters().sent_bytes, 6);
        assert_eq!(b.counters().received_messages, 2);
    }

    #[test]
    fn a_dropped_peer_and_a_silent_peer_are_errors() {
        let (mut a, b) = MemTransport::pair(None);
        a.set_timeout(Some(Duration::from_millis(20)));
        assert!(matches!(a.recv(), Err(NetError::Timeout(_))));
        drop(b);
        assert!(matches!(a.recv(), Err(NetError::Closed)));
        assert!(matches!(a.send(b"x"), Err(NetError::Closed)));
    }

    #[test]
    fn the_simulated_network_delays_every_round() {
        let sim = NetSim { latency: Duration::from_millis(5), bandwidth: 1e6 };
        let (mut a, mut b) = MemTransport::pair(Some(sim));
        let t = Instant::now();
        for _ in 0..4 {
            a.send(&[0; 1000]).unwrap();
            b.send(&[0; 1000]).unwrap();
            a.recv().unwrap();
            b.recv().unwrap();
        }
        // Four rounds of 5 ms latency and 1 ms transfer each.
        assert!(t.elapsed() >= Duration::from_millis(24), "{:?}", t.elapsed());
    }
}
