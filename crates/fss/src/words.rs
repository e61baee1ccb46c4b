//! Runs of 64-bit key words that are either owned or read in place from the bytes they were
//! stored in (a bundle's section, [`KeyBuffer`]).
//!
//! Correction words are most of a key's bytes (bert-tiny: the trees of every comparison and
//! lookup). Decoding them into vectors of their own copied every one, and dropping the key
//! wiped the copy: two passes over them besides the evaluation's. Stored 8-byte aligned in
//! a region ahead of the bit stream ([`crate::codec::BitWriter::with_side_region`]), they are read
//! where they lie instead, and the section's buffer lives as long as a key that reads it.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Bytes that keys may read their words from in place, kept alive by the keys that do.
///
/// `key_bytes` must return the same bytes (same address, same length) on every call: a
/// [`SharedWords`] checks their alignment once, when it is made.
pub trait KeyBuffer: Send + Sync {
    /// The bytes.
    fn key_bytes(&self) -> &[u8];
}

/// `len` little-endian 64-bit words at byte `start` of a [`KeyBuffer`] (8-byte aligned in
/// memory: checked when made).
#[derive(Clone)]
pub struct SharedWords {
    buf: Arc<dyn KeyBuffer>,
    start: usize,
    len: usize,
}

impl SharedWords {
    /// The words at byte `start` of `buf`, if they lie inside it, 8-byte aligned, on a
    /// little-endian machine (else `None`: the caller copies them).
    pub fn new(buf: &Arc<dyn KeyBuffer>, start: usize, len: usize) -> Option<SharedWords> {
        let bytes = buf.key_bytes().get(start..start.checked_add(len.checked_mul(8)?)?)?;
        (cfg!(target_endian = "little") && bytemuck::try_cast_slice::<u8, u64>(bytes).is_ok())
            .then(|| SharedWords { buf: Arc::clone(buf), start, len })
    }

    /// The words.
    #[inline]
    pub fn words(&self) -> &[u64] {
        // (Checked in `new`; the buffer's bytes do not move.)
        bytemuck::cast_slice(&self.buf.key_bytes()[self.start..self.start + 8 * self.len])
    }
}

/// Words the dealer made for both parties' keys (correction words are common to both): one
/// allocation that both keys read ([`Words::into_pair`]), wiped when the last of them lets
/// go of it.
struct DealtWords(Vec<u64>);

impl KeyBuffer for DealtWords {
    fn key_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

impl Drop for DealtWords {
    fn drop(&mut self) {
        crate::recycle::give_words(std::mem::take(&mut self.0));
    }
}

/// A run of 64-bit key words: owned, or read in place ([`SharedWords`]).
#[derive(Clone)]
pub enum Words {
    /// Words of their own (the dealer's, or copied).
    Owned(Vec<u64>),
    /// Words in a buffer shared with other keys of its section.
    Shared(SharedWords),
}

impl Default for Words {
    fn default() -> Words {
        Words::Owned(Vec::new())
    }
}

impl Words {
    /// Owned words with room for `n`.
    pub fn with_capacity(n: usize) -> Words {
        Words::Owned(Vec::with_capacity(n))
    }

    /// Owned words with room for `n`, in spent words kept for reuse if some fit
    /// ([`crate::recycle`]).
    pub(crate) fn recycled(n: usize) -> Words {
        Words::Owned(crate::recycle::take_words(n))
    }

    /// Append a word (owned words; shared ones are first copied).
    #[inline]
    pub fn push(&mut self, w: u64) {
        self.owned_mut().push(w);
    }

    /// Append words (owned words; shared ones are first copied).
    pub fn extend_from_slice(&mut self, ws: &[u64]) {
        self.owned_mut().extend_from_slice(ws);
    }

    /// The words as an owned vector (shared ones are first copied), for the dealer to fill.
    #[inline]
    pub(crate) fn owned_mut(&mut self) -> &mut Vec<u64> {
        if matches!(self, Words::Shared(_)) {
            return self.make_owned();
        }
        match self {
            Words::Owned(v) => v,
            Words::Shared(_) => unreachable!("shared words returned above"),
        }
    }

    /// (The dealer pushes owned words one by one: copying shared ones is the rare path.)
    #[cold]
    #[inline(never)]
    fn make_owned(&mut self) -> &mut Vec<u64> {
        if let Words::Shared(s) = self {
            *self = Words::Owned(s.words().to_vec());
        }
        match self {
            Words::Owned(v) => v,
            Words::Shared(_) => unreachable!("made owned above"),
        }
    }

    /// The words for two keys (both parties' correction words), read by both from one
    /// allocation instead of copied for the second.
    pub fn into_pair(self) -> (Words, Words) {
        match self {
            Words::Owned(v) if cfg!(target_endian = "little") => {
                let len = v.len();
                let buf: Arc<dyn KeyBuffer> = Arc::new(DealtWords(v));
                let s = SharedWords::new(&buf, 0, len).expect("a vector of words is 8-byte aligned");
                (Words::Shared(s.clone()), Words::Shared(s))
            }
            Words::Owned(v) => (Words::Owned(v.clone()), Words::Owned(v)),
            Words::Shared(s) => (Words::Shared(s.clone()), Words::Shared(s)),
        }
    }

    /// Zero owned words and release them; let go of shared ones (their buffer is wiped by
    /// its owner when it is refilled or dropped).
    pub fn wipe(&mut self) {
        match self {
            Words::Owned(v) => crate::wipe::wipe(v),
            Words::Shared(_) => *self = Words::default(),
        }
    }
}

impl zeroize::Zeroize for Words {
    fn zeroize(&mut self) {
        self.wipe();
    }
}

impl Deref for Words {
    type Target = [u64];

    #[inline]
    fn deref(&self) -> &[u64] {
        match self {
            Words::Owned(v) => v,
            Words::Shared(s) => s.words(),
        }
    }
}

impl PartialEq for Words {
    fn eq(&self, other: &Words) -> bool {
        **self == **other
    }
}

impl Eq for Words {}

impl fmt::Debug for Words {
    /// Only the count and where they are: the words are key material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if matches!(self, Words::Shared(_)) { "shared" } else { "owned" };
        write!(f, "Words({} {kind})", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Bytes(Vec<u8>);

    impl KeyBuffer for Bytes {
        fn key_bytes(&self) -> &[u8] {
            &self.0
        }
    }

    /// Words read in place equal the little-endian words of their bytes; a run that is not
    /// 8-byte aligned in memory, or not inside the buffer, is not shared; a shared run that
    /// is pushed to is copied first; wiping lets go of the buffer.
    #[test]
    fn shared_words_read_their_bytes() {
        let bytes: Vec<u8> = (0..200u32).map(|i| (i * 37 % 251) as u8).collect();
        let buf: Arc<dyn KeyBuffer> = Arc::new(Bytes(bytes.clone()));
        let base = buf.key_bytes().as_ptr() as usize;
        // The first offset at which words are 8-byte aligned in memory.
        let at = (8 - base % 8) % 8;
        let want: Vec<u64> =
            bytes[at..at + 80].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        let mut w = Words::Shared(SharedWords::new(&buf, at, 10).expect("aligned and inside"));
        assert_eq!(&*w, &want[..]);
        assert_eq!(w, Words::Owned(want.clone()));
        assert!(SharedWords::new(&buf, at + 1, 10).is_none(), "misaligned");
        assert!(SharedWords::new(&buf, at + 8 * 24, 2).is_none(), "past the end");
        assert!(SharedWords::new(&buf, usize::MAX - 3, 2).is_none(), "overflow");
        w.push(7);
        assert!(matches!(w, Words::Owned(_)) && w.len() == 11 && w[10] == 7 && w[..10] == want[..]);
        let mut s = Words::Shared(SharedWords::new(&buf, at, 1).unwrap());
        assert_eq!(Arc::strong_count(&buf), 2);
        s.wipe();
        assert_eq!(Arc::strong_count(&buf), 1);
        assert!(s.is_empty());
        // A pair of keys' words: both read the same words, pushing to one copies it.
        let (a, mut b) = Words::Owned(want.clone()).into_pair();
        assert_eq!((&*a, &*b), (&want[..], &want[..]));
        b.push(1);
        assert_eq!((a.len(), b.len()), (10, 11));
    }
}
