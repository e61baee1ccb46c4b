//! The `fusefss` package as a library: the command-line tool's commands, and [`api`], the
//! functions the Python bindings (`python/`) call.
//!
//! The command modules are the binary's own (`src/main.rs` parses the arguments and calls
//! them); they print their results and are not a stable interface. [`api`] returns data
//! instead: the same runs, rows and costs the commands print.

pub mod api;
#[doc(hidden)]
pub mod bench;
#[doc(hidden)]
pub mod compile;
#[doc(hidden)]
pub mod demo;
#[doc(hidden)]
pub mod deploy;
#[doc(hidden)]
pub mod fit;
#[doc(hidden)]
pub mod generate;
#[doc(hidden)]
pub mod interrupt;
#[doc(hidden)]
pub mod model;
