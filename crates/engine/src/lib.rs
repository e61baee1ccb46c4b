//! Sans-IO evaluation of a tensor program by three backends: plaintext fixed-point
//! reference, dealer and online party (design.md §3). Not implemented yet: this crate
//! reserves its place in the workspace's dependency order.
