//! Masked-wire gates: the SIGMA-style baseline protocols and the sub-protocols the compiler
//! reuses (design.md §3). Not implemented yet: this crate reserves its place in the
//! workspace's dependency order (`fss` → `gates` → `compiler` → `engine`).
