//! Spent key vectors kept for the next keys to overwrite, instead of wiped when dropped.
//!
//! Wiping a spent key is a pass of writes over its bytes, paid by the online phase (a
//! server drops its keys layer by layer) or by the dealer (its copy, once encoded). A
//! vector of spent words given here ([`give_words`]) is kept instead, and the next keys
//! made in this process take it ([`take_words`]): their words overwrite the old, and what
//! they do not cover is zeroed when it is taken. At most [`KEPT_BYTES`] are kept (a vector
//! past that is wiped at once), and [`wipe_all`] wipes everything kept (the binary calls
//! it before it exits). It is the policy of a bundle reader's section buffers
//! (`service::key_bytes`), which the next section read overwrites.
//!
//! Kept here: the dealer's correction words, which both parties' keys read from one
//! allocation when dealt in memory ([`crate::words::Words::into_pair`]); the dealer's next
//! trees take them. (A compiled gate's share words, kept and taken the same way when
//! dealt and decoded, gave no measurable gain: CHANGELOG.md.)

use std::sync::Mutex;

use zeroize::Zeroize;

/// Bytes of spent vectors kept at most.
pub const KEPT_BYTES: usize = 512 << 20;

/// Vectors of fewer words are wiped at once: cheap to wipe, and not worth a search of the
/// pool.
const MIN_WORDS: usize = 1 << 10;

/// Kept vectors and their bytes.
struct Pool {
    free: Vec<Vec<u64>>,
    bytes: usize,
    limit: usize,
}

impl Pool {
    const fn new(limit: usize) -> Pool {
        Pool { free: Vec::new(), bytes: 0, limit }
    }

    /// Keep `v`, or hand it back if it is too small or the pool is full.
    fn give(&mut self, v: Vec<u64>) -> Option<Vec<u64>> {
        let size = 8 * v.capacity();
        if v.capacity() < MIN_WORDS || self.bytes + size > self.limit {
            return Some(v);
        }
        self.bytes += size;
        self.free.push(v);
        None
    }

    /// The smallest kept vector with room for `n` words that wastes at most half of itself,
    /// emptied, its words from `n` on zeroed (those before are the caller's to overwrite).
    fn take(&mut self, n: usize) -> Option<Vec<u64>> {
        if n < MIN_WORDS {
            return None;
        }
        let i = (0..self.free.len())
            .filter(|&i| (n..=2 * n).contains(&self.free[i].capacity()))
            .min_by_key(|&i| self.free[i].capacity())?;
        let mut v = self.free.swap_remove(i);
        self.bytes -= 8 * v.capacity();
        v.clear();
        v.spare_capacity_mut()[n..].zeroize();
        Some(v)
    }

    /// Every kept vector, the pool emptied.
    fn drain(&mut self) -> Vec<Vec<u64>> {
        self.bytes = 0;
        std::mem::take(&mut self.free)
    }
}

static KEPT: Mutex<Pool> = Mutex::new(Pool::new(KEPT_BYTES));

/// Keep spent key words for later keys to overwrite (or wipe them if none are kept).
pub fn give_words(v: Vec<u64>) {
    let back = match KEPT.lock() {
        Ok(mut p) => p.give(v),
        Err(_) => Some(v),
    };
    if let Some(mut v) = back {
        crate::wipe::wipe(&mut v);
    }
}

/// An empty vector with room for `n` words: spent words kept by [`give_words`] if some fit
/// (their words from `n` on zeroed), else a new allocation.
pub fn take_words(n: usize) -> Vec<u64> {
    let kept = KEPT.lock().ok().and_then(|mut p| p.take(n));
    kept.unwrap_or_else(|| Vec::with_capacity(n))
}

/// Wipe every kept vector.
pub fn wipe_all() {
    let free = KEPT.lock().map(|mut p| p.drain()).unwrap_or_default();
    for mut v in free {
        crate::wipe::wipe(&mut v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept vector goes to a request it holds without wasting more than half of itself
    /// (the smallest such), empty; small vectors and those past the limit are handed back;
    /// draining empties the pool.
    #[test]
    fn spent_vectors_are_kept_for_requests_they_fit() {
        let mut pool = Pool::new(8 * 10_000);
        let v = |cap: usize| {
            let mut v = Vec::with_capacity(cap);
            v.extend((0..cap as u64).map(|i| i | 1));
            v
        };
        assert!(pool.give(v(100)).is_some(), "too small to keep");
        let (a, b) = (v(4000), v(3000));
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        assert!(pool.give(a).is_none() && pool.give(b).is_none());
        assert!(pool.give(v(4000)).is_some(), "past the limit");
        assert_eq!(pool.bytes, 8 * 7000);
        assert!(pool.take(1000).is_none(), "would waste more than half");
        assert!(pool.take(100).is_none(), "too small to serve");
        let t = pool.take(2000).expect("3000 holds 2000");
        assert_eq!((t.as_ptr(), t.len()), (pb, 0));
        assert!(t.capacity() >= 2000);
        assert!(pool.take(4001).is_none(), "nothing holds 4001");
        let t = pool.take(3500).expect("4000 holds 3500");
        assert_eq!((t.as_ptr(), t.len()), (pa, 0));
        assert_eq!(pool.bytes, 0);
        assert!(pool.give(v(2000)).is_none());
        assert_eq!(pool.drain().len(), 1);
        assert_eq!(pool.bytes, 0);
        assert!(pool.take(2000).is_none());
    }

    /// Through the process's pool: a vector taken has room for the request and is empty
    /// (whether kept or new).
    #[test]
    fn taken_vectors_are_empty_with_room() {
        give_words(vec![7u64; 5000]);
        let w = take_words(4000);
        assert!(w.is_empty() && w.capacity() >= 4000);
        wipe_all();
    }
}
