//! Encoding of gate keys: every field bit-packed to its width with the `fss` codec.
//!
//! A gate key holds the material for all elements of one gate instance. Its shape (element
//! count, widths) is public and known to the reader, so the encoding carries no lengths:
//! [`GateKey::read`] takes the shape and reads exactly that much, failing with a typed error
//! on short input. Containers (key bundles) add headers and checksums.

use fss::codec::{BitReader, BitWriter};
use fss::{DecodeError, Party};

/// The key of one gate instance.
pub trait GateKey: Sized {
    /// The public shape the reader needs (widths, element count, …).
    type Shape;

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
        let mut w = BitWriter::new();
        self.write(&mut w);
        w.bit_len()
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
}

/// Append words of `bits` bits.
pub fn put_words(w: &mut BitWriter, v: &[u64], bits: u32) {
    for &x in v {
        w.put(x, bits);
    }
}

/// Read `count` words of `bits` bits.
///
/// # Errors
/// [`DecodeError::Truncated`] if the stream is short.
pub fn get_words(r: &mut BitReader<'_>, count: usize, bits: u32) -> Result<Vec<u64>, DecodeError> {
    let need = count as u64 * bits as u64;
    if r.remaining_bits() < need {
        return Err(DecodeError::Truncated {
            needed: need.div_ceil(8) as usize,
            available: (r.remaining_bits() / 8) as usize,
        });
    }
    (0..count).map(|_| r.get(bits)).collect()
}

/// Append bits.
pub fn put_bits(w: &mut BitWriter, v: &[bool]) {
    for &b in v {
        w.put_bit(b);
    }
}

/// Read `count` bits.
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
