//! Transports between the parties (docs/design/brief.md §3, §7): the [`Transport`] trait, an in-memory
//! pair ([`mem`]), TCP and TLS connections ([`conn`], [`tls`]) with a writer thread so that
//! sending never blocks the protocol, a simulated network ([`NetSim`]) for benchmarks, and
//! byte and message counters.
//!
//! Messages are opaque byte strings framed by their length. Protocol code (the engine's
//! sessions) never sees a socket: it hands a message to [`Transport::exchange`] and gets the
//! peer's message back.

pub mod conn;
mod error;
pub mod mem;
mod sim;
pub mod tls;
mod transport;

pub use conn::Conn;
pub use error::NetError;
pub use mem::MemTransport;
pub use sim::NetSim;
pub use transport::{Counters, MAX_MESSAGE, Transport};
