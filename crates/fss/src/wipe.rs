//! Wiping key material: one bulk write per allocation, once.
//!
//! `zeroize`'s `Vec` impl zeroizes element by element (a volatile store and a fence each).
//! [`wipe`] clears the vector, zeroizes its whole allocation through `zeroize`'s bulk path
//! for uninitialised memory (a `memset` and an optimisation barrier) and releases it.
//! Wiping the hundreds of MB of keys a model drops layer by layer is memory-bound: one
//! bert-tiny query (seq 128) wipes ~140 MB per server for FuseFSS and ~108 MB for SIGMA
//! (counted in `wipe` per thread, temporarily, in the twenty-fourth session; the times in
//! CHANGELOG.md).

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

/// Key fields of plain values that [`wipe_on_drop`] wipes with [`wipe`]: a vector, or an
/// array of vectors.
///
/// (`#[derive(Zeroize)]` on a key goes through `zeroize`'s `Vec` impl, which writes every
/// element with a volatile store before clearing the allocation in bulk: each byte twice,
/// the first time slowly. bert-tiny's FuseFSS truncation keys took 3.5 ms per server and
/// query to wipe that way, 2.7 ms with [`wipe`].)
pub trait WipeField {
    /// Zero and release every allocation of the field.
    fn wipe_field(&mut self);
}

impl<T: Copy> WipeField for Vec<T> {
    fn wipe_field(&mut self) {
        wipe(self);
    }
}

impl<T: Copy, const N: usize> WipeField for [Vec<T>; N] {
    fn wipe_field(&mut self) {
        self.iter_mut().for_each(wipe);
    }
}

/// Implement `Zeroize` for a key type (wiping its vector fields, and arrays of them, with
/// [`wipe`] and zeroizing its other secret fields; fields listed in neither are public
/// shape) and zeroize it on drop.
#[macro_export]
macro_rules! wipe_on_drop {
    ($ty:ty { wipe: [$($v:ident),* $(,)?], zeroize: [$($o:ident),* $(,)?] $(,)? }) => {
        impl $crate::wipe::__zeroize::Zeroize for $ty {
            fn zeroize(&mut self) {
                $( $crate::wipe::WipeField::wipe_field(&mut self.$v); )*
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

    /// A key type under [`wipe_on_drop`]: its vectors and arrays of vectors end empty and
    /// released, its nested keys zeroized, and what it lists in neither (public shape) kept.
    #[test]
    fn keys_wipe_listed_fields_and_keep_their_shape() {
        struct Inner {
            w: Vec<u64>,
        }
        crate::wipe_on_drop!(Inner { wipe: [w], zeroize: [] });
        struct Key {
            bits: u32,
            words: Vec<u64>,
            flags: Vec<bool>,
            pair: [Vec<u64>; 2],
            inner: Inner,
        }
        crate::wipe_on_drop!(Key { wipe: [words, flags, pair], zeroize: [inner] });
        let mut k = Key {
            bits: 37,
            words: vec![5; 100],
            flags: vec![true; 9],
            pair: [vec![1; 10], vec![2; 20]],
            inner: Inner { w: vec![3; 30] },
        };
        k.zeroize();
        assert_eq!(k.bits, 37);
        let released = |v: &Vec<u64>| v.is_empty() && v.capacity() == 0;
        assert!(released(&k.words) && k.flags.capacity() == 0);
        assert!(k.pair.iter().all(released));
        assert!(released(&k.inner.w));
    }
}
