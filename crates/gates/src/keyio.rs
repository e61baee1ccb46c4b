//! Encoding of gate keys: every field bit-packed to its width with the `fss` codec.
//!
//! A gate key holds the material for all elements of one gate instance. Its shape (element
//! count, widths) is public and known to the reader, so the material carries no lengths:
//! [`GateKey::read`] takes the shape and reads exactly that much, failing with a typed error
//! on short input. Containers (key bundles) add their own headers and checksums; a key that
//! travels alone uses [`GateKey::encode`]:
//!
//! ```text
//! offset  size  field
//! 0       4     magic "FSSG"
//! 4       1     format version (1)
//! 5       1     party (0 or 1)
//! 6       8     fingerprint of the key type and the gate's shape (FNV-1a, LE)
//! 14      m     key material
//! 14+m    4     CRC-32 of bytes 0..14+m (LE)
//! ```

use fss::codec::{BitReader, BitWriter};
use fss::pad::{PadSeed, PadStream, RootStream};
use fss::words::KeyBuffer;
use fss::{DecodeError, Party};
use std::sync::Arc;

/// The key of one gate instance.
pub trait GateKey: Sized {
    /// The public shape the reader needs (widths, element count, …).
    type Shape: std::fmt::Debug;

    /// The party this key belongs to.
    fn party(&self) -> Party;

    /// Append the key material.
    fn write(&self, w: &mut BitWriter);

    /// Read key material written by [`GateKey::write`] for `shape`.
    ///
    /// # Errors
    /// [`DecodeError`] if the stream is short or a field is invalid.
    fn read(shape: &Self::Shape, party: Party, r: &mut BitReader<'_>) -> Result<Self, DecodeError>;

    /// Size of the key material in bits.
    fn bits(&self) -> u64 {
        let mut w = BitWriter::counting();
        self.write(&mut w);
        w.bit_len() + w.share_bits()
    }

    /// The key material as bytes (for tests and simple storage).
    fn to_bytes(&self) -> Vec<u8> {
        let mut w = BitWriter::new();
        self.write(&mut w);
        w.finish()
    }

    /// Read a key from bytes produced by [`GateKey::to_bytes`], requiring that nothing but
    /// padding remains.
    ///
    /// # Errors
    /// As [`GateKey::read`], plus [`DecodeError::TrailingBytes`].
    fn from_bytes(shape: &Self::Shape, party: Party, bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = BitReader::new(bytes);
        let k = Self::read(shape, party, &mut r)?;
        r.finish()?;
        Ok(k)
    }

    /// The standalone, versioned, checksummed encoding, bound to the key type and `shape`.
    fn encode(&self, shape: &Self::Shape) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.push(VERSION);
        out.push(self.party().bit());
        out.extend_from_slice(&fingerprint::<Self>(shape).to_le_bytes());
        out.extend(self.to_bytes());
        let crc = crc32(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decode [`GateKey::encode`]'s output for `shape`.
    ///
    /// # Errors
    /// [`DecodeError`] for a truncated, corrupted, wrong-version input, or a key of another
    /// type or shape.
    fn decode(shape: &Self::Shape, bytes: &[u8]) -> Result<Self, DecodeError> {
        const HEAD: usize = 14;
        if bytes.len() < HEAD + 4 {
            return Err(DecodeError::Truncated { needed: HEAD + 4, available: bytes.len() });
        }
        if bytes[..4] != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        if bytes[4] != VERSION {
            return Err(DecodeError::UnsupportedVersion { found: bytes[4], supported: VERSION });
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(DecodeError::Checksum);
        }
        let party = Party::from_index(body[5])?;
        if body[6..14] != fingerprint::<Self>(shape).to_le_bytes() {
            return Err(DecodeError::InvalidField("key of another gate type or shape"));
        }
        Self::from_bytes(shape, party, &body[HEAD..])
    }
}

/// Sizes of a gate's key in bits (both parties' keys have the same), counted once by the
/// dealer and used by [`encode_pair`] and the key-size reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySizes {
    /// All of a key's material.
    pub bits: u64,
    /// Its share words ([`put_words`], [`put_bits`]).
    pub shares: u64,
    /// The share bits of the words that start before the split of a seeded encoding
    /// ([`share_split`]).
    pub below: u64,
    /// The bits of the key's tree roots, which a seeded encoding leaves out
    /// ([`fss::pad::RootStream`]), and the runs they come in (a bit each in its place).
    pub roots: u64,
    /// See `roots`.
    pub root_runs: u64,
    /// The bits of its correction words, which [`encode_pair`] stores in the key's side
    /// region ([`BitWriter::with_side_region`]).
    pub side: u64,
    /// Its share words of 2..=64 bits that start before the split, and from it on (what
    /// [`encode_pair`]'s writers keep of one key for the other's).
    pub words: [u64; 2],
}

impl KeySizes {
    /// The sizes of `key`, counted without writing it.
    pub fn of<K: GateKey>(key: &K) -> KeySizes {
        let mut w = BitWriter::counting().counting_side();
        key.write(&mut w);
        let shares = w.share_bits();
        let mut c = BitWriter::counting_split(share_split(shares));
        key.write(&mut c);
        KeySizes {
            bits: w.bit_len() + shares + w.side_bits(),
            shares,
            below: c.share_bits_below(),
            words: c.share_words_split(),
            roots: w.root_bits(),
            root_runs: w.root_runs(),
            side: w.side_bits(),
        }
    }

    /// Bytes of each party's key as [`encode_pair`] writes it, seeded or not.
    pub fn stored_bytes(&self, seeded: bool) -> [u64; 2] {
        let side = self.side / 8;
        if !seeded {
            return [PLAIN_HEADER_BYTES + side + (self.bits - self.side).div_ceil(8); 2];
        }
        let rest = self.bits - self.shares - self.roots + self.root_runs - self.side;
        // Party 0 keeps its words from the split on, party 1 those before it.
        [self.shares - self.below, self.below].map(|k| SEEDED_HEADER_BYTES + side + (rest + k).div_ceil(8))
    }
}

/// Where a seeded encoding splits a key's `share_bits` bits of share words: party 0's words
/// that start before it, and party 1's from it on, are the pad.
pub fn share_split(share_bits: u64) -> u64 {
    share_bits / 2
}

/// Header bytes of a gate key in a bundle with all its share words: `0`, seven zero bytes,
/// and the bytes of its side region (8 bytes, little-endian).
pub const PLAIN_HEADER_BYTES: u64 = 16;

/// Header bytes of a seeded gate key in a bundle: `1`, seven zero bytes, the 16-byte seed
/// of the party's pad, the split ([`share_split`]) and the bytes of the side region (8
/// bytes each, little-endian).
pub const SEEDED_HEADER_BYTES: u64 = 40;

/// Both parties' keys of one gate, encoded for a bundle, each as its header, its side
/// region and its bit stream. The side region holds the key's correction words
/// ([`BitWriter::put_side_words`]), 8-byte aligned (the header is a multiple of 8 bytes)
/// so that a server reads them in place ([`decode_keyed_in_place`]). With `seeds`, each
/// party's key has half of its share words from the pad of its own seed ([`fss::pad`]):
/// party 0's words that start before the split ([`share_split`]), party 1's from it on; the
/// other party's word of each pair is the value minus that pad. The roots of the keys'
/// trees are left out where they are the next of the party's [`RootStream`] of the same
/// seed (the dealer draws them so inside [`fss::rng::with_root_seeds`]); the party
/// regenerates them. A party never sees the other's seed. `sizes` are the keys'
/// ([`KeySizes::of`]).
pub fn encode_pair<K: GateKey>(
    k0: &K,
    k1: &K,
    sizes: &KeySizes,
    seeds: Option<[PadSeed; 2]>,
) -> [Vec<u8>; 2] {
    // Each key written once into a buffer of its final size, behind its header.
    let KeySizes { bits, shares, below, side, .. } = *sizes;
    let side_bytes = (side / 8) as usize;
    let header = |kind: u8, seed: Option<(&PadSeed, u64)>, rest_bits: u64| {
        let mut h = Vec::with_capacity((SEEDED_HEADER_BYTES + side / 8 + rest_bits.div_ceil(8) + 8) as usize);
        h.extend_from_slice(&[kind, 0, 0, 0, 0, 0, 0, 0]);
        if let Some((seed, split)) = seed {
            h.extend_from_slice(seed);
            h.extend_from_slice(&split.to_le_bytes());
        }
        h.extend_from_slice(&(side / 8).to_le_bytes());
        h
    };
    // The side region (correction words, the same in both keys) written once behind party
    // 0's header and copied behind party 1's: not zeroed first, nor filled twice.
    let fronts = |h0: Vec<u8>, mut h1: Vec<u8>| {
        let head = h0.len();
        let mut w = BitWriter::side_region_only(h0);
        k0.write(&mut w);
        let front0 = w.side_region_bytes();
        h1.extend_from_slice(&front0[head..]);
        (front0, h1)
    };
    let Some([seed0, seed1]) = seeds else {
        let (front0, front1) = fronts(header(0, None, bits - side), header(0, None, bits - side));
        let plain = |k: &K, front| {
            let mut w = BitWriter::new().with_filled_side_region(front, side_bytes);
            k.write(&mut w);
            w.finish()
        };
        return [plain(k0, front0), plain(k1, front1)];
    };
    let split = share_split(shares);
    // Party 0's words after the split are the values minus party 1's pad, party 1's before
    // it the values minus party 0's pad.
    // (Of the words kept, party 0's key stores those from the split on, party 1's the rest.)
    let [kept_below, kept_above] = sizes.words.map(|n| n as usize);
    let mut w = BitWriter::recording_shares(split, true);
    w.reserve_kept_shares(kept_above);
    k1.write(&mut w);
    let theirs = w.into_shares();
    let (front0, front1) = fronts(
        header(1, Some((&seed0, split)), bits - below - side),
        header(1, Some((&seed1, split)), bits - (shares - below) - side),
    );
    let mut w = BitWriter::split(theirs, PadStream::new(&seed1), split, true)
        .with_roots(RootStream::new(&seed0))
        .with_filled_side_region(front0, side_bytes);
    w.reserve_kept_shares(kept_below);
    k0.write(&mut w);
    let (b0, ours) = w.finish_split();
    let mut w = BitWriter::split(ours, PadStream::new(&seed0), split, false)
        .discarding_own()
        .with_roots(RootStream::new(&seed1))
        .with_filled_side_region(front1, side_bytes);
    k1.write(&mut w);
    let (b1, _) = w.finish_split();
    [b0, b1]
}

/// Read a key that [`encode_pair`] wrote for `party` (its words copied out of `bytes`).
///
/// # Errors
/// [`DecodeError`] for a short or malformed input, as [`GateKey::from_bytes`].
pub fn decode_keyed<K: GateKey>(shape: &K::Shape, party: Party, bytes: &[u8]) -> Result<K, DecodeError> {
    decode_section(shape, party, bytes, None)
}

/// Read a key that [`encode_pair`] wrote for `party` into `buf`, its correction words read
/// in place: the key keeps `buf` alive until it is dropped ([`fss::words`]).
///
/// # Errors
/// As [`decode_keyed`].
pub fn decode_keyed_in_place<K: GateKey>(
    shape: &K::Shape,
    party: Party,
    buf: &Arc<dyn KeyBuffer>,
) -> Result<K, DecodeError> {
    decode_section(shape, party, buf.key_bytes(), Some(buf))
}

fn decode_section<K: GateKey>(
    shape: &K::Shape,
    party: Party,
    bytes: &[u8],
    buf: Option<&Arc<dyn KeyBuffer>>,
) -> Result<K, DecodeError> {
    let word = |at: usize| {
        let b =
            bytes.get(at..at + 8).ok_or(DecodeError::Truncated { needed: at + 8, available: bytes.len() })?;
        Ok::<u64, DecodeError>(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let (seeded, head) = match bytes.first() {
        Some(0) => (false, PLAIN_HEADER_BYTES as usize),
        Some(1) => (true, SEEDED_HEADER_BYTES as usize),
        Some(_) => return Err(DecodeError::InvalidField("gate key header")),
        None => return Err(DecodeError::Truncated { needed: 1, available: 0 }),
    };
    if word(0)? >> 8 != 0 {
        return Err(DecodeError::InvalidField("gate key header"));
    }
    let side_len = word(head - 8)?;
    let side_end = (head as u64)
        .checked_add(side_len)
        .filter(|&e| e <= bytes.len() as u64 && side_len.is_multiple_of(8))
        .ok_or(DecodeError::InvalidField("side region length"))? as usize;
    let (side, stream) = (&bytes[head..side_end], &bytes[side_end..]);
    let in_place = buf.map(|b| (Arc::clone(b), head));
    let mut r = if seeded {
        let seed: PadSeed = bytes[8..24].try_into().expect("16 bytes");
        let split = word(24)?;
        BitReader::with_pad(stream, PadStream::new(&seed), split, party == Party::P0)
            .with_roots(RootStream::new(&seed))
    } else {
        BitReader::new(stream)
    }
    .with_side(side, in_place);
    let k = K::read(shape, party, &mut r)?;
    r.finish()?;
    Ok(k)
}

const MAGIC: [u8; 4] = *b"FSSG";
const VERSION: u8 = 1;

/// FNV-1a of the key type's name and the shape's `Debug` form.
fn fingerprint<K: GateKey>(shape: &K::Shape) -> u64 {
    let text = format!("{}:{:?}", std::any::type_name::<K>(), shape);
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

fn crc32(data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(data);
    h.finalize()
}

/// Append share words of `bits` bits: additive shares modulo `2^bits` of dealer values
/// ([`BitWriter::put_share`]; the seeded encoding takes one party's from a pad).
pub fn put_words(w: &mut BitWriter, v: &[u64], bits: u32) {
    w.put_share_run(bits, v.len(), |i| v[i]);
}

/// Read `count` share words of `bits` bits ([`put_words`]).
///
/// # Errors
/// [`DecodeError::Truncated`] if the stream is short.
pub fn get_words(r: &mut BitReader<'_>, count: usize, bits: u32) -> Result<Vec<u64>, DecodeError> {
    let mut v = Vec::new();
    r.get_share_run_map(bits, count, &mut v, |x| x)?;
    Ok(v)
}

/// Append share bits (XOR shares).
pub fn put_bits(w: &mut BitWriter, v: &[bool]) {
    w.put_share_run(1, v.len(), |i| v[i] as u64);
}

/// Read `count` share bits ([`put_bits`]).
///
/// # Errors
/// [`DecodeError::Truncated`] if the stream is short.
pub fn get_bits(r: &mut BitReader<'_>, count: usize) -> Result<Vec<bool>, DecodeError> {
    // Straight into the bits: a vector of words on the way would be freed unwiped.
    let mut v = Vec::new();
    r.get_share_run_map(1, count, &mut v, |x| x == 1)?;
    Ok(v)
}

/// `Debug` for key types: the shape, never the material.
macro_rules! key_debug {
    ($t:ty) => {
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t)).field("party", &self.party).finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use key_debug;
