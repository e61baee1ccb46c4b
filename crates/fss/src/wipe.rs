//! Wiping key material: one bulk write per allocation, once.
//!
//! `zeroize`'s `Vec` impl zeroizes element by element (a volatile store and a fence each).
//! [`wipe`] clears the vector, zeroizes its whole allocation through `zeroize`'s bulk path
//! for uninitialised memory (a `memset` and an optimisation barrier) and releases it.
//! Wiping the hundreds of MB of keys a model drops layer by layer is memory-bound: one
//! bert-tiny query (seq 128) wiped ~228 MB per server for FuseFSS and ~219 MB for SIGMA
//! (counted in `wipe`, temporarily; the time in CHANGELOG.md); FuseFSS's
//! compiled keys now hold their narrow words at 1 or 32 bits, ~27 MB less by their widths.

use std::mem::MaybeUninit;

use zeroize::Zeroize;

/// Zero every byte of `v`'s allocation, then release it (`v` ends empty, with no
/// allocation).
///
/// Releasing makes a second wipe free: a key type zeroizes its parts when dropped, and each
/// part zeroizes itself again when it is dropped in turn (a tree inside a DPF inside a
/// gate's key). Keeping the allocation made every level clear the same megabytes again:
/// 2.8× (FuseFSS) and 4× (SIGMA) the key bytes for one bert-tiny query.
pub fn wipe<T: Copy>(v: &mut Vec<T>) {
    if v.capacity() == 0 {
        return;
    }
    v.clear();
    let spare: &mut [MaybeUninit<T>] = v.spare_capacity_mut();
    spare.zeroize();
    *v = Vec::new();
}

/// Implement `Zeroize` for a key type (wiping its vector fields with [`wipe`] and zeroizing
/// its other secret fields) and zeroize it on drop.
#[macro_export]
macro_rules! wipe_on_drop {
    ($ty:ty { wipe: [$($v:ident),* $(,)?], zeroize: [$($o:ident),* $(,)?] $(,)? }) => {
        impl $crate::wipe::__zeroize::Zeroize for $ty {
            fn zeroize(&mut self) {
                $( $crate::wipe::wipe(&mut self.$v); )*
                $( $crate::wipe::__zeroize::Zeroize::zeroize(&mut self.$o); )*
            }
        }
        impl Drop for $ty {
            fn drop(&mut self) {
                $crate::wipe::__zeroize::Zeroize::zeroize(self);
            }
        }
        impl $crate::wipe::__zeroize::ZeroizeOnDrop for $ty {}
    };
}

#[doc(hidden)]
pub use zeroize as __zeroize;

#[cfg(test)]
mod tests {
    use super::*;

    /// (The bytes themselves cannot be read back without `unsafe`, which the workspace
    /// forbids: their zeroing is `zeroize`'s guarantee for `[MaybeUninit<T>]`, applied to
    /// the whole allocation. What is ours: the vector ends empty and without its allocation,
    /// and wiping it again, as nested keys do when they drop, does nothing.)
    #[test]
    fn wipe_empties_and_releases() {
        let mut v: Vec<[u128; 2]> = (1..=100u128).map(|x| [x, !x]).collect();
        v.truncate(60);
        wipe(&mut v);
        assert!(v.is_empty());
        assert_eq!(v.capacity(), 0);
        wipe(&mut v);
        assert_eq!(v.capacity(), 0);
    }
}
