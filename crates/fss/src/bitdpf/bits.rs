//! A leaf block's bits: the masks and parities every walk reads its answers with.

/// Bit `i` of the result is the XOR of bits `0..=i` of `x`.
#[inline(always)]
pub(super) fn prefix_xor(mut x: u128) -> u128 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x ^= x << 64;
    x
}

/// A lane walk's leaf block (halves), its last direction as a mask, and the LT flip.
#[derive(Clone, Copy, Default)]
pub(super) struct LaneLeaf {
    pub(super) bl: u64,
    pub(super) bh: u64,
    pub(super) sel: u64,
    pub(super) flip: u64,
}

impl LaneLeaf {
    /// (LT, EQ) shares of the point at block position `pos`.
    #[inline(always)]
    pub(super) fn answer(&self, pos: u32) -> (bool, bool) {
        let (ml, mh) = upto_halves(pos);
        let (ml, mh) = (ml ^ self.sel, mh ^ self.sel);
        let parity = ((self.bl & ml).count_ones() + (self.bh & mh).count_ones()) as u64 & 1;
        let eq = if pos < 64 { self.bl >> pos } else { self.bh >> (pos - 64) } & 1;
        ((self.flip ^ parity) == 1, eq == 1)
    }
}

/// Bits strictly above position `pos` of a block.
#[inline(always)]
pub(super) fn above(blk: u128, pos: u32) -> u128 {
    blk.checked_shr(pos + 1).unwrap_or(0)
}

/// Mask of positions `0..=pos` as (low, high) halves.
#[inline(always)]
pub(super) fn upto_halves(pos: u32) -> (u64, u64) {
    let lo = if pos >= 63 { u64::MAX } else { (2u64 << pos) - 1 };
    let hi = if pos < 64 {
        0
    } else if pos >= 127 {
        u64::MAX
    } else {
        (2u64 << (pos - 64)) - 1
    };
    (lo, hi)
}

/// Mask of positions `0..=pos`.
#[inline(always)]
pub(super) fn upto(pos: u32) -> u128 {
    if pos >= 127 { u128::MAX } else { (1u128 << (pos + 1)) - 1 }
}

/// Whether `x` has an odd number of ones.
#[inline(always)]
pub(super) fn parity(x: u128) -> bool {
    x.count_ones() & 1 == 1
}
