//! Encoded key sections in memory: zeroized when dropped, and recycled from the online
//! phase (once the key read in place from a section is spent) back to the bundle's reader,
//! so that reading the next section overwrites the last.
//!
//! A section's body is key material as much as the key decoded from it (SECURITY.md). A
//! buffer holds key bytes only in its contents (`bytes[..len]`: nothing is written past
//! them), so wiping it costs one `memset` of its contents, and refilling it with the next
//! section wipes the old contents by overwriting them (only what the new contents do not
//! cover is zeroed). Wiping every body once read would add a pass over every key byte
//! (bert-tiny, 161 MB per server and query); recycled, the reader's copy from the file is
//! that pass.

use std::io::Read;
use std::sync::mpsc::{Receiver, Sender, channel};

use fss::wipe::__zeroize::Zeroize;
use fss::words::KeyBuffer;

/// Bytes of key material: only `bytes[..len]` ever holds any.
pub(crate) struct KeyBytes {
    bytes: Vec<u8>,
}

impl KeyBytes {
    /// Encoded key bytes to write (the buffer is taken as it is).
    pub(crate) fn from_vec(bytes: Vec<u8>) -> KeyBytes {
        KeyBytes { bytes }
    }

    /// The bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes
    }

    /// Replace the contents with up to `len` bytes read from `r`, at most `capacity` (the
    /// room made first: the buffer never grows, which would leave a copy behind), and zero
    /// what is left of the old contents. Returns the bytes read.
    pub(crate) fn refill(&mut self, r: impl Read, len: u64, capacity: usize) -> std::io::Result<usize> {
        if self.bytes.capacity() < capacity {
            self.clear();
            self.bytes = Vec::with_capacity(capacity);
        }
        let old = self.bytes.len();
        self.bytes.truncate(0);
        let read = r.take(len.min(capacity as u64)).read_to_end(&mut self.bytes);
        let now = self.bytes.len();
        if old > now {
            self.bytes.spare_capacity_mut()[..old - now].zeroize();
        }
        read
    }

    /// Zero the contents and empty the buffer (its allocation is kept, now clean).
    fn clear(&mut self) {
        let n = self.bytes.len();
        self.bytes.truncate(0);
        self.bytes.spare_capacity_mut()[..n].zeroize();
    }

    fn capacity(&self) -> usize {
        self.bytes.capacity()
    }
}

impl Drop for KeyBytes {
    fn drop(&mut self) {
        self.clear();
    }
}

/// A section's bytes shared with the keys that read their words in place from it
/// ([`fss::words`]): handed back to the reader when the last of them is dropped.
pub(crate) struct SharedSection {
    body: Option<KeyBytes>,
    back: Sender<KeyBytes>,
}

impl SharedSection {
    /// `body`, to go back through `back`.
    pub(crate) fn new(body: KeyBytes, back: Sender<KeyBytes>) -> SharedSection {
        SharedSection { body: Some(body), back }
    }
}

impl KeyBuffer for SharedSection {
    fn key_bytes(&self) -> &[u8] {
        self.body.as_ref().map_or(&[], KeyBytes::as_slice)
    }
}

impl Drop for SharedSection {
    fn drop(&mut self) {
        // (A reader that is gone drops it: its contents are zeroed.)
        if let Some(b) = self.body.take() {
            let _ = self.back.send(b);
        }
    }
}

/// Buffers kept idle for reuse at most, besides those in flight (read ahead, or held by a
/// key that reads its words in place until it is spent): the reader takes those handed back
/// in before every section it reads, so one is enough (`perf stat`: page faults do not grow
/// with repetitions, with one kept as with four), and more hold
/// memory the size of the largest sections (peak memory of `bench model --model minilm
/// --seq 128 --impl both --reps 1 --warmup 0`, FuseFSS / SIGMA: 3.14 / 3.79 GB with bodies
/// freed unwiped, 3.50 / 4.51 GB keeping four, 3.39 / 3.93 GB keeping one).
const KEPT: usize = 1;

/// Old contents a refill may zero for any section, however small ([`Buffers::take`]).
const SMALL: usize = 1 << 16;

/// A reader's buffers: those the online phase handed back (through the [`Sender`] of
/// [`Buffers::new`]) wait here to be refilled.
pub(crate) struct Buffers {
    kept: Vec<KeyBytes>,
    back: Receiver<KeyBytes>,
}

impl Buffers {
    /// No buffers yet, and where to hand them back.
    pub(crate) fn new() -> (Buffers, Sender<KeyBytes>) {
        let (tx, back) = channel();
        (Buffers { kept: vec![], back }, tx)
    }

    /// A buffer for a section of `capacity` bytes: of the handed-back ones with room for
    /// it, the one whose old contents outrun it least (what a refill zeroes), then the
    /// smallest — unless even that refill would zero more than the section itself (and
    /// [`SMALL`]): a new buffer is then cheaper (the system zeroes at most the section's
    /// pages), and the large one stays for a large section. With none, a new one.
    ///
    /// (A small section used to take the buffer of a large one and zero the rest of it: in
    /// a bert-tiny query, 212 MB zeroed for FuseFSS's 276 MB of sections and 253 MB for
    /// SIGMA's 456 MB; 40 MB for either now.)
    pub(crate) fn take(&mut self, capacity: usize) -> KeyBytes {
        self.kept.extend(self.back.try_iter());
        let leftover = |k: &KeyBytes| k.bytes.len().saturating_sub(capacity);
        let fits = (0..self.kept.len())
            .filter(|&i| self.kept[i].capacity() >= capacity)
            .min_by_key(|&i| (leftover(&self.kept[i]), self.kept[i].capacity()))
            .filter(|&i| leftover(&self.kept[i]) <= capacity.max(SMALL));
        // (A new buffer gets its room from the refill.)
        let b = fits.map_or_else(|| KeyBytes::from_vec(Vec::new()), |i| self.kept.swap_remove(i));
        // (Dropped buffers zero their contents.)
        if self.kept.len() > KEPT {
            self.kept.sort_by_key(KeyBytes::capacity);
            self.kept.drain(..self.kept.len() - KEPT);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refill overwrites the old contents (zeroing the rest of them, which safe code
    /// cannot read back) in place; a buffer that is too small is replaced; a short source
    /// gives what it holds, a long one the room made.
    #[test]
    fn refills_leave_nothing_of_the_old_contents() {
        let (mut bufs, back) = Buffers::new();
        let mut b = bufs.take(64);
        assert_eq!(b.refill(&[7u8; 100][..], 64, 64).unwrap(), 64);
        assert_eq!(b.as_slice(), &[7u8; 64][..]);
        // Shorter contents: the old bytes past them are zeroed by `zeroize` (they cannot
        // be read back without `unsafe`, which the workspace forbids; see `fss::wipe`).
        b.refill(&[9u8; 10][..], 10, 10).unwrap();
        assert_eq!(b.as_slice(), &[9u8; 10][..]);
        assert!(b.capacity() >= 64, "refilled in place");
        // A section larger than the buffer: a new allocation.
        b.refill(&[1u8; 200][..], 200, 200).unwrap();
        assert!(b.capacity() >= 200);
        assert_eq!(b.as_slice(), &[1u8; 200][..]);
        // Handed back, then taken for a smaller section: the same buffer.
        back.send(b).unwrap();
        let c = bufs.take(150);
        assert!(c.capacity() >= 200);
        drop(c);
        // A short read (a truncated file) keeps what it read, no more; a longer source
        // than the room made gives only that room (the caller sees a short read).
        let mut d = bufs.take(50);
        assert_eq!(d.refill(&[3u8; 20][..], 50, 50).unwrap(), 20);
        assert_eq!(d.as_slice(), &[3u8; 20][..]);
        assert_eq!(d.refill(&[4u8; 90][..], 90, 60).unwrap(), 60);
        assert_eq!(d.as_slice(), &[4u8; 60][..]);
    }

    /// A section takes a buffer whose old contents outrun it by at most its own size (or
    /// `SMALL`); a smaller one gets a new buffer and leaves the large one kept.
    #[test]
    fn a_small_section_leaves_a_large_buffer_alone() {
        let (mut bufs, back) = Buffers::new();
        let n = 4 * SMALL;
        let mut large = bufs.take(n);
        large.refill(&vec![5u8; n][..], n as u64, n).unwrap();
        back.send(large).unwrap();
        // Zeroing 3/4 of the contents for a quarter: a new buffer instead.
        let small = bufs.take(SMALL);
        assert_eq!(small.capacity(), 0);
        assert_eq!(bufs.kept.len(), 1);
        // Half of them for half: the large buffer.
        let half = bufs.take(2 * SMALL);
        assert!(half.capacity() >= n);
        drop(half);
        // A tiny section may zero up to `SMALL` of a buffer's contents, not more.
        drop(small);
        let mut c = KeyBytes { bytes: Vec::with_capacity(SMALL + 1) };
        c.refill(&vec![2u8; SMALL + 1][..], SMALL as u64 + 1, SMALL + 1).unwrap();
        back.send(c).unwrap();
        assert_eq!(bufs.take(0).capacity(), 0, "SMALL + 1 to zero: a new buffer");
        assert!(bufs.take(1).capacity() > SMALL, "SMALL to zero: the kept buffer");
    }

    /// At most `KEPT` buffers wait for reuse; the smallest go first.
    #[test]
    fn at_most_a_few_buffers_are_kept() {
        let (mut bufs, back) = Buffers::new();
        for cap in [10usize, 20, 30, 40, 50, 60] {
            back.send(KeyBytes { bytes: Vec::with_capacity(cap) }).unwrap();
        }
        let b = bufs.take(35);
        assert_eq!(b.capacity(), 40, "the smallest that fits");
        assert_eq!(bufs.kept.len(), KEPT);
        assert!(bufs.kept.iter().all(|k| k.capacity() >= 20));
        // None fits: a new buffer; the largest stays for later.
        let big = bufs.take(1000);
        assert_eq!(big.capacity(), 0, "a new buffer, its room made by the refill");
        assert_eq!(bufs.kept.iter().map(KeyBytes::capacity).max(), Some(60));

        // Old contents count first: a larger buffer whose contents the section covers
        // beats a smaller one with longer contents.
        let (mut two, back2) = Buffers::new();
        let mut long = KeyBytes { bytes: Vec::with_capacity(64) };
        long.refill(&[1u8; 64][..], 64, 64).unwrap();
        let mut short = KeyBytes { bytes: Vec::with_capacity(128) };
        short.refill(&[2u8; 8][..], 8, 8).unwrap();
        back2.send(long).unwrap();
        back2.send(short).unwrap();
        assert_eq!(two.take(32).as_slice(), &[2u8; 8][..]);
    }
}
