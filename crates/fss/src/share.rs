//! Parties and the two kinds of shares an FSS evaluation returns.

use crate::error::DecodeError;

/// One of the two evaluating servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Party {
    /// Server 0 (its tree walks start with control bit 0).
    P0,
    /// Server 1 (control bit 1; negates additive outputs).
    P1,
}

impl Party {
    /// Both parties, in order.
    pub const BOTH: [Party; 2] = [Party::P0, Party::P1];

    /// 0 or 1.
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// 0 or 1 as the initial control bit.
    #[inline]
    pub const fn bit(self) -> u8 {
        self as u8
    }

    /// The party with index `i`.
    ///
    /// # Errors
    /// [`DecodeError::InvalidField`] unless `i` is 0 or 1.
    pub fn from_index(i: u8) -> Result<Party, DecodeError> {
        match i {
            0 => Ok(Party::P0),
            1 => Ok(Party::P1),
            _ => Err(DecodeError::InvalidField("party must be 0 or 1")),
        }
    }

    /// The other server.
    #[inline]
    pub const fn peer(self) -> Party {
        match self {
            Party::P0 => Party::P1,
            Party::P1 => Party::P0,
        }
    }

    /// `(−1)^b · v mod 2^64`: party 1 negates additive outputs (docs/design/fss-building-blocks.md §1).
    #[inline]
    pub const fn signed(self, v: u64) -> u64 {
        match self {
            Party::P0 => v,
            Party::P1 => v.wrapping_neg(),
        }
    }
}

/// One party's additive share of a value in `Z_{2^ℓ}`: the two shares sum to the value
/// mod `2^ℓ`. Always reduced to `ℓ` bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct AddShare(pub u64);

/// One party's XOR share of a bit: the two shares XOR to the bit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct XorBit(pub bool);

impl AddShare {
    /// Reconstruct `a + b mod 2^bits`.
    #[inline]
    pub fn reconstruct(a: AddShare, b: AddShare, bits: u32) -> u64 {
        a.0.wrapping_add(b.0) & crate::ring::mask(bits)
    }
}

impl XorBit {
    /// Reconstruct `a ⊕ b`.
    #[inline]
    pub fn reconstruct(a: XorBit, b: XorBit) -> bool {
        a.0 ^ b.0
    }
}

impl std::ops::BitXor for XorBit {
    type Output = XorBit;
    #[inline]
    fn bitxor(self, rhs: XorBit) -> XorBit {
        XorBit(self.0 ^ rhs.0)
    }
}

impl std::ops::BitXorAssign for XorBit {
    #[inline]
    fn bitxor_assign(&mut self, rhs: XorBit) {
        self.0 ^= rhs.0;
    }
}
