//! Deployment: the dealer, the two servers and the client as separate processes, the
//! runtime around the `service` crate's protocol.

pub mod client;
pub mod dealer;
mod listen;
pub mod server;
pub mod soak;

/// Print a server's line, `[party N] msg`, at once (operators and tests read it as it comes).
pub fn say(party: u8, msg: impl std::fmt::Display) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "[party {party}] {msg}");
    let _ = o.flush();
}
