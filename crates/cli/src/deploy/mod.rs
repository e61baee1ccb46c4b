//! Deployment: the dealer, the two servers and the client as separate processes, the
//! runtime around the `service` crate's protocol.

pub mod client;
pub mod dealer;
mod listen;
pub mod server;
pub mod soak;
