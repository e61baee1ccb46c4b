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
use fss::{DecodeError, Party};

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
}

impl KeySizes {
    /// The sizes of `key`, counted without writing it.
    pub fn of<K: GateKey>(key: &K) -> KeySizes {
        let mut w = BitWriter::counting();
        key.write(&mut w);
        let shares = w.share_bits();
        let mut c = BitWriter::counting_split(share_split(shares));
        key.write(&mut c);
        KeySizes {
            bits: w.bit_len() + shares,
            shares,
            below: c.share_bits_below(),
            roots: w.root_bits(),
            root_runs: w.root_runs(),
        }
    }

    /// Bytes of each party's key as [`encode_pair`] writes it, seeded or not.
    pub fn stored_bytes(&self, seeded: bool) -> [u64; 2] {
        if !seeded {
            return [1 + self.bits.div_ceil(8); 2];
        }
        let rest = self.bits - self.shares - self.roots + self.root_runs;
        // Party 0 keeps its words from the split on, party 1 those before it.
        [self.shares - self.below, self.below].map(|k| SEEDED_HEADER_BYTES + (rest + k).div_ceil(8))
    }
}

/// Where a seeded encoding splits a key's `share_bits` bits of share words: party 0's words
/// that start before it, and party 1's from it on, are the pad.
pub fn share_split(share_bits: u64) -> u64 {
    share_bits / 2
}

/// Header bytes of a gate key in a bundle: one byte, `0` for a key with all its share
/// words, `1` for a seeded one, which the 16-byte seed of the party's pad and the split
/// ([`share_split`], 8 bytes, little-endian) follow.
pub const SEEDED_HEADER_BYTES: u64 = 25;

/// Both parties' keys of one gate, encoded for a bundle, each behind its header. With
/// `seeds`, each party's key has half of its share words from the pad of its own seed
/// ([`fss::pad`]): party 0's words that start before the split ([`share_split`]), party
/// 1's from it on; only the seed and the split are stored in their place, and the other
/// party's word of each pair is the value minus that pad. The roots of the keys' trees
/// are left out where they are the next of the party's [`RootStream`] of the same seed (the
/// dealer draws them so inside [`fss::rng::with_root_seeds`]); the party regenerates them.
/// A party never sees the other's seed. Without, both keys are [`GateKey::to_bytes`] behind
/// a zero byte. `sizes` are the keys' ([`KeySizes::of`]).
pub fn encode_pair<K: GateKey>(
    k0: &K,
    k1: &K,
    sizes: &KeySizes,
    seeds: Option<[PadSeed; 2]>,
) -> [Vec<u8>; 2] {
    // Each key written once into a buffer of its final size, behind its header.
    let KeySizes { bits, shares, below, .. } = *sizes;
    let Some([seed0, seed1]) = seeds else {
        let plain = |k: &K| {
            let mut w = BitWriter::with_prefix(Vec::with_capacity(1 + bits.div_ceil(8) as usize + 8));
            w.put(0, 8);
            k.write(&mut w);
            w.finish()
        };
        return [plain(k0), plain(k1)];
    };
    let split = share_split(shares);
    let header = |w: &mut BitWriter, seed: &PadSeed| {
        w.put(1, 8);
        for &b in seed {
            w.put(b as u64, 8);
        }
        w.put(split, 64);
    };
    // Party 0's words after the split are the values minus party 1's pad, party 1's before
    // it the values minus party 0's pad.
    let mut w = BitWriter::recording_shares();
    k1.write(&mut w);
    let theirs = w.into_shares();
    let mut w =
        BitWriter::split(theirs, PadStream::new(&seed1), split, true).with_roots(RootStream::new(&seed0));
    w.reserve(8 * SEEDED_HEADER_BYTES + bits - below);
    header(&mut w, &seed0);
    k0.write(&mut w);
    let (b0, ours) = w.finish_split();
    let mut w = BitWriter::split(ours, PadStream::new(&seed0), split, false)
        .discarding_own()
        .with_roots(RootStream::new(&seed1));
    w.reserve(8 * SEEDED_HEADER_BYTES + bits - (shares - below));
    header(&mut w, &seed1);
    k1.write(&mut w);
    let (b1, _) = w.finish_split();
    [b0, b1]
}

/// Read a key that [`encode_pair`] wrote for `party`.
///
/// # Errors
/// [`DecodeError`] for a short or malformed input, as [`GateKey::from_bytes`].
pub fn decode_keyed<K: GateKey>(shape: &K::Shape, party: Party, bytes: &[u8]) -> Result<K, DecodeError> {
    match bytes.first() {
        Some(0) => K::from_bytes(shape, party, &bytes[1..]),
        Some(1) => {
            let head = SEEDED_HEADER_BYTES as usize;
            let h =
                bytes.get(1..head).ok_or(DecodeError::Truncated { needed: head, available: bytes.len() })?;
            let seed: PadSeed = h[..16].try_into().expect("16 bytes");
            let split = u64::from_le_bytes(h[16..].try_into().expect("8 bytes"));
            let mut r = BitReader::with_pad(&bytes[head..], PadStream::new(&seed), split, party == Party::P0)
                .with_roots(RootStream::new(&seed));
            let k = K::read(shape, party, &mut r)?;
            r.finish()?;
            Ok(k)
        }
        Some(_) => Err(DecodeError::InvalidField("gate key header")),
        None => Err(DecodeError::Truncated { needed: 1, available: 0 }),
    }
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
    Ok(get_words(r, count, 1)?.into_iter().map(|b| b == 1).collect())
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
