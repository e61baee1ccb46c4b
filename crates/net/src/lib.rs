//! Transports between the parties: in-memory pair, TCP, TLS, simulated latency and
//! bandwidth (design.md §3, §7). Not implemented yet: this crate reserves its place in the
//! workspace's dependency order.
