//! The deployment's protocol, without sockets: key bundles on disk and the server's key
//! store, the program a bundle is for, the messages, and the client, party-0 and party-1
//! sides of a query as state machines. The binary (`fusefss serve`, `query`, `dealer`)
//! owns the sockets, threads and deadlines and drives these.
//!
//! | module | what |
//! |---|---|
//! | [`bundle`] | one party's keys for one query as a file, written and streamed section by section |
//! | `key_bytes` | a section's encoded key bytes in memory: wiped when dropped, recycled by the reader |
//! | [`store`] | a server's folder of bundles: exclusive lock, party marker, ledger of used bundles |
//! | [`descriptor`] | which model, shape and implementation a bundle is for |
//! | [`program`] | the program for a descriptor with its identity, built once per process |
//! | [`error`] | why a program cannot be built for a descriptor ([`error::ProgramError`]) |
//! | [`proto`] | the messages and their frame limits |
//! | [`session`] | a generation session's keys as one bundle: dealt ahead, read step by step |
//! | [`queue`] | queries waiting at a server: bounded, expiring without spending a bundle |
//! | [`leader`] | party 0: propose a bundle, begin only when party 1 holds the same query |
//! | [`follower`] | party 1: pair client halves with party 0's proposals |
//! | [`client`] | the client: messages out, answers checked and combined |
//! | [`private`] | owner-only files and folders |
//! | [`text`] | peer text made safe for logs |

pub mod bundle;
pub mod client;
pub mod cpu_time;
pub mod descriptor;
pub mod error;
pub mod follower;
mod key_bytes;
pub mod leader;
pub mod private;
pub mod program;
pub mod proto;
pub mod queue;
pub mod session;
pub mod store;
pub mod text;

pub use bundle::{BundleError, BundleHeader, BundleId, BundleReader, BundleWriter, Fingerprints, ReaderCpu};
pub use descriptor::{Descriptor, Shape};
pub use program::{Catalog, Program, Programs};
pub use store::Store;
