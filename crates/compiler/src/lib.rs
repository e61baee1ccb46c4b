//! The FuseFSS compiler: operator specifications compiled to one opening, a packed comparison
//! and a vector interval lookup (design.md §5). Not implemented yet: this crate reserves its
//! place in the workspace's dependency order.
