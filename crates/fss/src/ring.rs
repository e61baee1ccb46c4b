//! The rings `Z_{2^n}` (1 ≤ n ≤ 64) and fixed-point numbers in them.
//!
//! Elements are `u64` values reduced mod `2^n`; signed values are two's complement in `n`
//! bits (docs/design/brief.md §4). A [`Ring`] carries the width so that tensors of `u64` need no
//! per-element tag.

use crate::error::FssError;

/// The ring `Z_{2^n}` for a validated width `1 ≤ n ≤ 64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ring {
    bits: u32,
}

impl Ring {
    /// The ring of `bits`-bit words.
    ///
    /// # Errors
    /// [`FssError::InvalidWidth`] unless `1 ≤ bits ≤ 64`.
    pub const fn new(bits: u32) -> Result<Ring, FssError> {
        if bits == 0 || bits > 64 {
            return Err(FssError::InvalidWidth(bits));
        }
        Ok(Ring { bits })
    }

    /// The width `n`.
    #[inline]
    pub const fn bits(self) -> u32 {
        self.bits
    }

    /// `2^n − 1`: the mask of valid elements.
    #[inline]
    pub const fn mask(self) -> u64 {
        mask(self.bits)
    }

    /// `x mod 2^n`.
    #[inline]
    pub const fn reduce(self, x: u64) -> u64 {
        x & self.mask()
    }

    /// Whether `x` is already reduced.
    #[inline]
    pub const fn contains(self, x: u64) -> bool {
        x & !self.mask() == 0
    }

    /// `a + b mod 2^n`.
    #[inline]
    pub const fn add(self, a: u64, b: u64) -> u64 {
        a.wrapping_add(b) & self.mask()
    }

    /// `a − b mod 2^n`.
    #[inline]
    pub const fn sub(self, a: u64, b: u64) -> u64 {
        a.wrapping_sub(b) & self.mask()
    }

    /// `a · b mod 2^n`.
    #[inline]
    pub const fn mul(self, a: u64, b: u64) -> u64 {
        a.wrapping_mul(b) & self.mask()
    }

    /// `−a mod 2^n`.
    #[inline]
    pub const fn neg(self, a: u64) -> u64 {
        a.wrapping_neg() & self.mask()
    }

    /// The most significant bit (the sign of a two's complement value).
    #[inline]
    pub const fn msb(self, x: u64) -> bool {
        (x >> (self.bits - 1)) & 1 == 1
    }

    /// The element read as a two's complement signed value.
    #[inline]
    pub const fn to_signed(self, x: u64) -> i64 {
        let shift = 64 - self.bits;
        ((x << shift) as i64) >> shift
    }

    /// A signed value as an element (wraps mod `2^n`).
    #[inline]
    pub const fn from_signed(self, v: i64) -> u64 {
        (v as u64) & self.mask()
    }
}

/// `2^bits − 1` for `0 ≤ bits ≤ 64`.
#[inline]
pub const fn mask(bits: u32) -> u64 {
    if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 }
}

/// Fixed-point numbers with `frac_bits` fractional bits in a [`Ring`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FixedPoint {
    ring: Ring,
    frac_bits: u32,
}

impl FixedPoint {
    /// Fixed point at scale `frac_bits` in `ring`.
    ///
    /// # Errors
    /// [`FssError::InvalidParams`] if `frac_bits ≥ n − 1` (no room for the sign and an
    /// integer bit).
    pub fn new(ring: Ring, frac_bits: u32) -> Result<FixedPoint, FssError> {
        if frac_bits + 1 >= ring.bits() {
            return Err(FssError::InvalidParams("fixed-point scale must be below n - 1"));
        }
        Ok(FixedPoint { ring, frac_bits })
    }

    /// The ring.
    pub fn ring(self) -> Ring {
        self.ring
    }

    /// The scale `f`.
    pub fn frac_bits(self) -> u32 {
        self.frac_bits
    }

    /// `⌊v·2^f + ½⌋` as a ring element (round half up, the convention of docs/design/compiled-gates.md §6).
    ///
    /// # Errors
    /// [`FssError::NotRepresentable`] if `v` is not finite or the result is outside the signed
    /// range `[−2^{n−1}, 2^{n−1})`.
    pub fn encode(self, v: f64) -> Result<u64, FssError> {
        let scaled = (v * (1u64 << self.frac_bits) as f64 + 0.5).floor();
        let half = (1u128 << (self.ring.bits() - 1)) as f64;
        if !scaled.is_finite() || scaled < -half || scaled >= half {
            return Err(FssError::NotRepresentable(v));
        }
        Ok(self.ring.from_signed(scaled as i64))
    }

    /// The real value of a ring element read as signed fixed point.
    pub fn decode(self, x: u64) -> f64 {
        self.ring.to_signed(x) as f64 / (1u64 << self.frac_bits) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_are_validated() {
        assert_eq!(Ring::new(0), Err(FssError::InvalidWidth(0)));
        assert_eq!(Ring::new(65), Err(FssError::InvalidWidth(65)));
        assert!(Ring::new(1).is_ok() && Ring::new(64).is_ok());
    }

    #[test]
    fn signed_round_trip_every_width() {
        for bits in 1..=64 {
            let r = Ring::new(bits).unwrap();
            let lo = -(1i128 << (bits - 1));
            let hi = (1i128 << (bits - 1)) - 1;
            for v in [lo, lo + 1, -1, 0, 1, hi - 1, hi] {
                if v < lo || v > hi {
                    continue;
                }
                let x = r.from_signed(v as i64);
                assert!(r.contains(x));
                assert_eq!(r.to_signed(x) as i128, v, "bits {bits} v {v}");
            }
        }
    }

    #[test]
    fn arithmetic_wraps() {
        let r = Ring::new(5).unwrap();
        assert_eq!(r.add(30, 5), 3);
        assert_eq!(r.sub(2, 5), 29);
        assert_eq!(r.mul(7, 9), 63 % 32);
        assert_eq!(r.neg(1), 31);
        assert!(r.msb(16) && !r.msb(15));
        let r64 = Ring::new(64).unwrap();
        assert_eq!(r64.add(u64::MAX, 2), 1);
    }

    #[test]
    fn fixed_point_round_trip() {
        let fp = FixedPoint::new(Ring::new(37).unwrap(), 12).unwrap();
        for v in [-3.25, -1.0 / 4096.0, 0.0, 0.5, 1.0, 1234.5] {
            assert_eq!(fp.decode(fp.encode(v).unwrap()), v);
        }
        // Half up: 0.5 ulp rounds to 1 ulp, -0.5 ulp rounds to 0.
        assert_eq!(fp.encode(0.5 / 4096.0).unwrap(), 1);
        assert_eq!(fp.encode(-0.5 / 4096.0).unwrap(), 0);
        assert!(fp.encode(f64::NAN).is_err());
        assert!(fp.encode(1e30).is_err());
        assert!(FixedPoint::new(Ring::new(12).unwrap(), 11).is_err());
    }
}
