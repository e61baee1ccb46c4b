//! Deployment: the dealer, the two servers and the client as separate processes.

pub mod client;
pub mod dealer;
pub mod proto;
pub mod server;
