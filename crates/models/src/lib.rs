//! BERT and GPT-2 as engine programs, weight loading and an f64 reference (design.md §3).
//! Not implemented yet: this crate reserves its place in the workspace's dependency order.
