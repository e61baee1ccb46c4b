//! Two ends of an in-memory link, for parties on threads of one process.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::time::{Duration, Instant};

use crate::sim::{Schedule, wait_until};
use crate::{Counters, NetError, NetSim, Transport};

/// A message and, over a simulated network, when it arrives.
type Delivery = (Vec<u8>, Option<Instant>);

/// One end of an in-memory link.
#[derive(Debug)]
pub struct MemTransport {
    tx: Sender<Delivery>,
    rx: Receiver<Delivery>,
    schedule: Option<Schedule>,
    timeout: Option<Duration>,
    counters: Counters,
}

/// How long [`MemTransport::recv`] polls for the peer's message before it blocks.
///
/// The two servers of one process run the same protocol in step, so the peer's message of
/// a round usually comes within microseconds of this server's; blocking at once costs a
/// park and a wake-up of the thread: criterion `mem/round_64_bytes` (`cargo bench -p net`)
/// 20.3 µs per round blocking, 0.65 µs polling first, on the 2-core VM. A decode step of
/// SmolLM2 has 1,389 rounds (SIGMA's 2,322). Polling longer than the peer's usual lead
/// wastes the core; a message that comes later is waited for as before.
pub const SPIN: Duration = Duration::from_micros(50);

impl MemTransport {
    /// The peer's message if it comes within [`SPIN`] (without a simulated network, whose
    /// messages arrive later by design).
    fn spin(&mut self) -> Result<Option<Delivery>, NetError> {
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                match self.rx.try_recv() {
                    Ok(m) => return Ok(Some(m)),
                    Err(TryRecvError::Disconnected) => return Err(NetError::Closed),
                    Err(TryRecvError::Empty) => std::hint::spin_loop(),
                }
            }
            if start.elapsed() >= SPIN {
                return Ok(None);
            }
        }
    }

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
        let spun = if self.schedule.is_none() { self.spin()? } else { None };
        let (msg, at) = match (spun, self.timeout) {
            (Some(m), _) => m,
            (None, None) => self.rx.recv().map_err(|_| NetError::Closed)?,
            (None, Some(t)) => self.rx.recv_timeout(t).map_err(|e| match e {
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

    /// A message that comes after the poll ([`SPIN`]) is waited for, with or without a
    /// timeout.
    #[test]
    fn a_late_message_is_waited_for() {
        let (mut a, mut b) = MemTransport::pair(None);
        let late = std::thread::spawn(move || {
            for _ in 0..2 {
                std::thread::sleep(SPIN * 20);
                b.send(b"late").unwrap();
            }
            b
        });
        assert_eq!(a.recv().unwrap(), b"late");
        a.set_timeout(Some(Duration::from_secs(5)));
        assert_eq!(a.recv().unwrap(), b"late");
        drop(late.join().unwrap());
        assert!(matches!(a.recv(), Err(NetError::Closed)));
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
