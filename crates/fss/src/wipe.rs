//! Wiping key material: one bulk write per allocation.
//!
//! `zeroize`'s `Vec` impl zeroizes element by element (a volatile store and a fence each).
//! [`wipe`] clears the vector and zeroizes its whole allocation through `zeroize`'s bulk path
//! for uninitialised memory (a `memset` and an optimisation barrier). Wiping the hundreds of
//! MB of keys a model drops layer by layer is memory-bound either way: ~9 % of a bert-tiny
//! online run before, ~8–10 % after (`perf record` on `fusefss bench model`).

use std::mem::MaybeUninit;

use zeroize::Zeroize;

/// Zero every byte of `v`'s allocation and empty it.
pub fn wipe<T: Copy>(v: &mut Vec<T>) {
    v.clear();
    let spare: &mut [MaybeUninit<T>] = v.spare_capacity_mut();
    spare.zeroize();
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
    /// forbids: their zeroing is `zeroize`'s guarantee for `[MaybeUninit<T>]`. What is ours:
    /// the vector ends empty and keeps its allocation, so the zeroed bytes are the ones that
    /// held the key, not a fresh allocation's.)
    #[test]
    fn wipe_empties_in_place() {
        let mut v: Vec<[u128; 2]> = (1..=100u128).map(|x| [x, !x]).collect();
        v.truncate(60);
        let (ptr, cap) = (v.as_ptr(), v.capacity());
        wipe(&mut v);
        assert!(v.is_empty());
        assert_eq!((v.as_ptr(), v.capacity()), (ptr, cap));
    }
}
