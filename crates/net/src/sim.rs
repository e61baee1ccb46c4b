use std::time::{Duration, Instant};

/// A simulated network between two parties, for benchmarks: every message arrives
/// `latency` after its last byte left, and a link carries `bandwidth` bytes per second in
/// each direction. Both parties of a round send at once, so a round costs one `latency`
/// plus the transfer time of its larger message.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetSim {
    /// One-way delay of every message.
    pub latency: Duration,
    /// Bytes per second in each direction.
    pub bandwidth: f64,
}

impl NetSim {
    /// The paper's LAN setting: 0.5 ms, 1 GB/s.
    pub const LAN: NetSim = NetSim { latency: Duration::from_micros(500), bandwidth: 1e9 };
    /// The paper's WAN setting: 4 ms, 400 MB/s.
    pub const WAN: NetSim = NetSim { latency: Duration::from_millis(4), bandwidth: 4e8 };

    /// `"lan"` or `"wan"`.
    pub fn from_name(name: &str) -> Option<NetSim> {
        match name {
            "lan" => Some(NetSim::LAN),
            "wan" => Some(NetSim::WAN),
            _ => None,
        }
    }
}

/// When each message of one direction of a simulated link is delivered.
#[derive(Debug)]
pub(crate) struct Schedule {
    sim: NetSim,
    /// When the link has sent everything queued so far.
    free_at: Instant,
}

impl Schedule {
    pub(crate) fn new(sim: NetSim) -> Schedule {
        Schedule { sim, free_at: Instant::now() }
    }

    /// The delivery time of a message of `bytes` queued now.
    pub(crate) fn deliver_at(&mut self, bytes: usize) -> Instant {
        let start = self.free_at.max(Instant::now());
        self.free_at = start + Duration::from_secs_f64(bytes as f64 / self.sim.bandwidth);
        self.free_at + self.sim.latency
    }
}

/// Sleep until `t` (no-op if it has passed).
pub(crate) fn wait_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}
