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
use fss::pad::{PadSeed, PadStream};
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
        w.bit_len() + w.recorded_bits()
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

/// Sizes of a key in bits: all of it, and its share words ([`put_words`], [`put_bits`]),
/// which a seeded encoding leaves out of one party's key.
pub fn key_share_bits<K: GateKey>(key: &K) -> (u64, u64) {
    let mut w = BitWriter::counting();
    key.write(&mut w);
    let shares = w.recorded_bits();
    (w.bit_len() + shares, shares)
}

/// Header bytes of a gate key in a bundle: one byte, `0` for a key with all its share
/// words, `1` for a seeded one, which the 16-byte seed of its pad follows.
pub const SEEDED_HEADER_BYTES: u64 = 17;

/// Both parties' keys of one gate, encoded for a bundle, each behind a one-byte header.
/// With `seeded = Some((p, seed))`, party `p`'s share words are the pad of `seed`
/// ([`fss::pad`]) and only the seed is stored in their place; the other party's are
/// adjusted so that each pair still adds up to the dealer's value. Without, both keys are
/// [`GateKey::to_bytes`].
pub fn encode_pair<K: GateKey>(k0: &K, k1: &K, seeded: Option<(Party, PadSeed)>) -> [Vec<u8>; 2] {
    // Each key written once into a buffer of its final size, behind its header byte(s).
    let (bits, shares) = key_share_bits(k0);
    let Some((p, seed)) = seeded else {
        let plain = |k: &K| {
            let mut w = BitWriter::with_prefix(Vec::with_capacity(1 + bits.div_ceil(8) as usize + 8));
            w.put(0, 8);
            k.write(&mut w);
            w.finish()
        };
        return [plain(k0), plain(k1)];
    };
    let (ks, ko) = if p == Party::P0 { (k0, k1) } else { (k1, k0) };
    let mut w = BitWriter::recording();
    w.reserve(bits - shares + 8 * SEEDED_HEADER_BYTES);
    w.reserve_recorded(shares);
    w.put(1, 8);
    for b in seed {
        w.put(b as u64, 8);
    }
    ks.write(&mut w);
    let (seeded_bytes, recorded) = w.finish_recording();
    let mut w = BitWriter::adjusting(recorded, PadStream::new(&seed));
    w.reserve(bits + 8);
    w.put(0, 8);
    ko.write(&mut w);
    let other = w.finish();
    if p == Party::P0 { [seeded_bytes, other] } else { [other, seeded_bytes] }
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
            let seed: PadSeed = bytes
                .get(1..head)
                .ok_or(DecodeError::Truncated { needed: head, available: bytes.len() })?
                .try_into()
                .expect("16 bytes");
            let mut r = BitReader::with_pad(&bytes[head..], PadStream::new(&seed));
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
    for &x in v {
        w.put_share(x, bits);
    }
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
    for &b in v {
        w.put_share(b as u64, 1);
    }
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
