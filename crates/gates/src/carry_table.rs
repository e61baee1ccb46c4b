//! Truncation with slack whose carry is read from small lookup tables (FuseFSS; paper §4,
//! fused operators: the truncations the compiler leaves to the engine).
//!
//! SIGMA's truncation ([`crate::shift::ArsSlack`]) reads the carry `c = 1[x̂_l < r_l]` of the
//! low `s` bits from a 1-bit DPF on `s` bits: at `s = 12` a root, five levels of correction
//! words and a leaf, ~113 B per element. Here the `s` bits are cut into a high chunk of
//! `H = s − L` bits and a low chunk of `L = min(s, 7)` bits, and
//! `c = 1[x̂_h < r_h] + 1[x̂_h = r_h]·1[x̂_l < r_l]` (the two terms exclusive) comes from two
//! truth tables the dealer XOR-shares: `1[v < r_h]` over the `2^H` values of the high chunk
//! (its `1[v = r_h]` is `1[v − 1 < r_h] ⊕ 1[v < r_h]`, XOR-linear in the shares), `1[v < r_l]`
//! over the `2^L` of the low (160 bits at `s = 12`). A party reads its shares at the public
//! chunks, and round 1 opens the three bits masked,
//! `â = a ⊕ z₁`, `ê = e ⊕ z₂`, `b̂ = b ⊕ z₃`. Then `c = a + e·b` is public times
//! dealer-shared: `a` picks one of two words (as SIGMA's carry does), and
//! `e·b = ê·b̂ + ê(1 − 2b̂)·z₃ + b̂(1 − 2ê)·z₂ + (1 − 2ê)(1 − 2b̂)·z₂z₃` takes three more words.
//! Round 2 opens the output. Same two rounds and the same result as SIGMA's truncation, for
//! the tables, three words and two bits more per element instead of the DPF: 48 against
//! 127 B per element at `n = 37` (unseeded), and no AES.
//!
//! The high chunk takes up to 10 bits (the softmax's product, truncated by `scale + 5 =
//! 17`: tables of 1,152 bits, no AES, the same three opened bits). Past 17 bits a middle
//! chunk of `M` bits sits between them (`H, M ≤ 6`): `c = a + e·a' + e·e'·b`, with
//! `a' = 1[x̂_m < r_m]` and `e' = 1[x̂_m = r_m]` read from two more tables. Round 1 opens
//! five masked bits; the two products of opened bits take nine words (`z₂, z₃, z₄, z₅`
//! and the products `z₂z₃, z₂z₄, z₂z₅, z₄z₅, z₂z₄z₅`), still two rounds and no AES (at
//! `s = 17` that would be 192 table bits, but two more opened bits per element than the
//! wide high chunk: the softmax's communication).

use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party};
use zeroize::Zeroize;

use crate::dealer::{random_bits, share, split_draws};
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_words, key_debug, put_words};
use crate::kit::{check_inputs, check_party, party_term, unary};
use crate::online::Ctx;
use crate::shift::{ArsSlack, slack_lift};

/// Widest low chunk: its table is two words.
const LOW_BITS: u32 = 7;

/// Widest high and middle chunks of a three-chunk split: their tables are two words each.
const HIGH_BITS: u32 = 6;

/// Widest high chunk of a two-chunk split: its table (1,024 bits) is larger than a
/// middle chunk's, but it opens three bits where a middle chunk opens five (the softmax's
/// product, truncated by 17 bits, stays within its communication so).
const WIDE_HIGH_BITS: u32 = 10;

/// `len` elements of `⌊x / 2^s⌋` from `Z_{2^n}` into `Z_{2^out}`, every input below
/// `2^{n−2}` in magnitude (as [`crate::shift::ArsSlack`]), for `s ≤ 19` (a high chunk of at
/// most 10 bits, or high and middle chunks of at most 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArsSlackTable {
    /// Input ring width `n`.
    pub bits: u32,
    /// Shift `s`, `1 ≤ s ≤ min(n − 2, 19)`.
    pub shift: u32,
    /// Output ring width (at least `n − s`).
    pub out_bits: u32,
    /// Elements.
    pub len: usize,
}

/// A party's [`ArsSlackTable`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct ArsSlackTableKey {
    party: Party,
    out_bits: u32,
    /// XOR shares of every element's slot, `slot_bits()` bits each, packed in order: its
    /// tables, then the masks `z₁, z₂, z₃` of its opened bits (five with a middle chunk),
    /// read with the tables' bits.
    tables: Vec<u64>,
    /// Shares of `r_out − ⌊r/2^s⌋ − a` for `â = 0, 1` (`a = â ⊕ z₁`).
    corr: [Vec<u64>; 2],
    /// Shares of `z₂`, `z₃` and `z₂z₃` as ring elements; with a middle chunk, of `z₂, z₃,
    /// z₄, z₅, z₂z₃, z₂z₄, z₂z₅, z₄z₅, z₂z₄z₅` (the rest empty).
    ez: [Vec<u64>; 9],
    /// Shares of `msb(r)·2^{n−s}`.
    wrap: Vec<u64>,
}
fss::wipe_on_drop!(ArsSlackTableKey { wipe: [tables, corr, ez, wrap], zeroize: [] });
key_debug!(ArsSlackTableKey);

impl ArsSlackTable {
    /// Whether the tables can carry a shift of `s` bits (a high chunk of at most 10 bits, or
    /// high and middle chunks of at most 6).
    pub fn supports(shift: u32) -> bool {
        (1..=LOW_BITS + 2 * HIGH_BITS).contains(&shift)
    }

    fn low_bits(&self) -> u32 {
        self.shift.min(LOW_BITS)
    }

    /// The middle chunk's width: 0 up to 17 bits, else half of what the low chunk leaves.
    fn mid_bits(&self) -> u32 {
        let rest = self.shift - self.low_bits();
        if rest <= WIDE_HIGH_BITS { 0 } else { rest / 2 }
    }

    fn high_bits(&self) -> u32 {
        self.shift - self.low_bits() - self.mid_bits()
    }

    /// Opened bits per element: `a, e, b`, or `a, e, a', e', b` with a middle chunk.
    fn opened_bits(&self) -> usize {
        if self.mid_bits() > 0 { 5 } else { 3 }
    }

    /// Table bits per element: `1[v < r_h]` (when there is a high chunk), `1[v < r_m]` (when
    /// there is a middle one), then `1[v < r_l]`. (`1[v = r_c]` is `1[v − 1 < r_c] ⊕
    /// 1[v < r_c]`, or `1 ⊕ 1[0 < r_c]` at `v = 0`: read from the same table.)
    fn table_bits(&self) -> usize {
        let one = |w: u32| if w > 0 { 1usize << w } else { 0 };
        one(self.high_bits()) + one(self.mid_bits()) + (1usize << self.low_bits())
    }

    /// Bits of an element's slot: its tables, then its opened bits' masks.
    fn slot_bits(&self) -> usize {
        self.table_bits() + self.opened_bits()
    }

    fn input_width(&self) -> u32 {
        self.bits
    }

    fn output_width(&self) -> u32 {
        self.out_bits
    }

    /// SIGMA's truncation of the same shape: the same widths to check and the same result.
    fn sigma(&self) -> ArsSlack {
        ArsSlack { bits: self.bits, shift: self.shift, out_bits: self.out_bits, len: self.len }
    }

    fn check(&self) -> Result<(), GateError> {
        if !Self::supports(self.shift) {
            return Err(GateError::Params(format!("table carry: shift {} past 19 bits", self.shift)));
        }
        self.sigma().check()
    }

    /// The plaintext result for one input.
    fn plain(&self, x: u64) -> u64 {
        self.sigma().plain(x)
    }

    /// Deal keys for input masks `r` and output masks `rout`.
    ///
    /// # Errors
    /// [`GateError`] on bad parameters or lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(ArsSlackTableKey, ArsSlackTableKey), GateError> {
        self.check()?;
        check_len("masks", self.len, r.len())?;
        check_len("output masks", self.len, rout.len())?;
        let (n, s, m) = (self.bits, self.shift, mask(self.out_bits));
        let (hb, mb, lb, sb) = (self.high_bits(), self.mid_bits(), self.low_bits(), self.slot_bits());
        let nz = self.opened_bits();
        let mut z = random_bits(rng, nz * self.len);
        // The slots, packed: element i's tables at bits [i·sb, i·sb + tb), its masks after.
        let mut tables = vec![0u64; (self.len * sb).div_ceil(64)];
        let tb = self.table_bits();
        for (i, &ri) in r.iter().enumerate() {
            let low = ri & mask(s);
            let (rh, rm, rl) = (low >> (mb + lb), (low >> lb) & mask(mb), low & mask(lb));
            set_bits(&mut tables, i * sb + tb, &z[nz * i..nz * (i + 1)]);
            let mut at = i * sb;
            for (w, rc) in [(hb, rh), (mb, rm)] {
                if w > 0 {
                    // `1[v < r_c]` for every value `v` of the chunk.
                    fill_ones(&mut tables, at, rc as usize);
                    at += 1usize << w;
                }
            }
            fill_ones(&mut tables, at, rl as usize);
        }
        let mut t0 = vec![0u64; tables.len()];
        split_draws(rng, &mut t0);
        let t1: Vec<u64> = tables.iter().zip(&t0).map(|(&t, &a)| t ^ a).collect();
        tables.zeroize();
        // `a = â ⊕ z₁`: the word for `â` is `v₀ − a`.
        // (Every vector of values wiped once shared: they are the dealer's secrets.)
        let shared = |mut v: Vec<u64>, rng: &mut R| {
            let pair = share(rng, &v, self.out_bits);
            v.zeroize();
            pair
        };
        let mut v0: Vec<u64> = r.iter().zip(rout).map(|(&r, &o)| o.wrapping_sub(r >> s) & m).collect();
        let pick = |hat: bool| -> Vec<u64> {
            v0.iter().enumerate().map(|(i, &v)| v.wrapping_sub((hat ^ z[nz * i]) as u64) & m).collect()
        };
        let (a0, a1) = shared(pick(false), rng);
        let (b0, b1) = shared(pick(true), rng);
        v0.zeroize();
        // The products of the other masks the second round needs, as ring elements.
        let products: &[&[usize]] = if mb > 0 {
            &[&[1], &[2], &[3], &[4], &[1, 2], &[1, 3], &[1, 4], &[3, 4], &[1, 3, 4]]
        } else {
            &[&[1], &[2], &[1, 2]]
        };
        let (mut ez0, mut ez1): ([Vec<u64>; 9], [Vec<u64>; 9]) = Default::default();
        for (k, idx) in products.iter().enumerate() {
            let v: Vec<u64> =
                z.chunks_exact(nz).map(|zi| idx.iter().fold(true, |all, &j| all & zi[j]) as u64).collect();
            (ez0[k], ez1[k]) = shared(v, rng);
        }
        let wrap: Vec<u64> = r.iter().map(|&r| (((r >> (n - 1)) & 1) << (n - s)) & m).collect();
        let (w0, w1) = shared(wrap, rng);
        z.zeroize();
        let out_bits = self.out_bits;
        let key =
            |party, tables, corr, ez, wrap| ArsSlackTableKey { party, out_bits, tables, corr, ez, wrap };
        Ok((key(Party::P0, t0, [a0, b0], ez0, w0), key(Party::P1, t1, [a1, b1], ez1, w1)))
    }

    /// The masked output (two rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &ArsSlackTableKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        self.check()?;
        let (n, s) = (self.bits, self.shift);
        check_len("inputs", self.len, xh.len())?;
        let (hb, mb, lb, tb) = (self.high_bits(), self.mid_bits(), self.low_bits(), self.table_bits());
        let nz = self.opened_bits();
        let read = |bit: usize| -> u64 { (key.tables[bit / 64] >> (bit % 64)) & 1 };
        // (`x₁ = x̂ + 2^{n−2}` is recomputed where it is read.)
        let lift = |x: u64| slack_lift(x, n);
        // Party 0's constant term (in `1[0 = r_c] = 1 ⊕ 1[0 < r_c]` too).
        let own = party_term(key.party);
        // Where each table starts in an element's bits (a missing chunk's takes none).
        let one = |w: u32| if w > 0 { 1usize << w } else { 0 };
        let (at_m, at_b) = (one(hb), one(hb) + one(mb));
        // A chunk's `(1[v < r_c], 1[v = r_c])` from its table at `t`.
        let lt_eq = |t: usize, v: usize| -> (u64, u64) {
            let a = read(t + v);
            let before = if v > 0 { read(t + v - 1) } else { own };
            (a, a ^ before)
        };
        // Round 1: `a ⊕ z₁`, `e ⊕ z₂`, `b ⊕ z₃` per element (`e` is 0 without a high chunk),
        // as bits 0, 1 and 2 of one word: one 3-bit field per element on the wire; with a
        // middle chunk `a, e, a', e', b` as a 5-bit field.
        let (sb, two) = (self.slot_bits(), TwoChunk::new(s));
        let bits: Vec<u64> = xh
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let low = lift(x) & mask(s);
                let (h, mid, l) = (
                    (low >> (mb + lb)) as usize,
                    ((low >> lb) & mask(mb)) as usize,
                    (low & mask(lb)) as usize,
                );
                let at = i * sb;
                let field = if mb > 0 {
                    let b = read(at + at_b + l);
                    let (a, e) = lt_eq(at, h);
                    let (a2, e2) = lt_eq(at + at_m, mid);
                    a | e << 1 | a2 << 2 | e2 << 3 | b << 4
                } else {
                    two.field(&key.tables, at, low, own)
                };
                field ^ bits_at(&key.tables, at + tb, nz as u32)
            })
            .collect();
        let mut opened = vec![0u64; self.len];
        ctx.open_packed_bits_into(&bits, nz as u32, &mut opened).await?;
        let y = if mb == 0 {
            two_chunk_outputs(self, own, xh, &opened, key)
        } else {
            three_chunk_outputs(self, own, xh, &opened, key)
        };
        ctx.open(&y, self.out_bits).await
    }
}

/// A party's share of `e·b` for two opened bits `ê = e ⊕ z₂`, `b̂ = b ⊕ z₃`, from its
/// shares of `z₂`, `z₃` and `z₂z₃`: `ê·b̂ + ê(1 − 2b̂)·z₃ + b̂(1 − 2ê)·z₂ + (1 − 2ê)(1 − 2b̂)·z₂z₃`
/// (`own` is party 0's constant term).
#[inline(always)]
pub(crate) fn opened_product(own: u64, e: u64, b: u64, [z2, z3, z23]: [u64; 3]) -> u64 {
    let (se, sb) = (1u64.wrapping_sub(2 * e), 1u64.wrapping_sub(2 * b));
    (own * e * b)
        .wrapping_add((e * sb).wrapping_mul(z3))
        .wrapping_add((b * se).wrapping_mul(z2))
        .wrapping_add(se.wrapping_mul(sb).wrapping_mul(z23))
}

/// The carry `1[v < α]` of `s ≤ 17` bits from two truth tables, as [`ArsSlackTable`] reads
/// it without a middle chunk: a high chunk of `s − L` bits and a low one of `L = min(s, 7)`,
/// `c = a + e·b` with `a = 1[v_h < α_h]`, `e = 1[v_h = α_h]`, `b = 1[v_l < α_l]` (`c = b`
/// without a high chunk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TwoChunk {
    high: u32,
    low: u32,
}

impl TwoChunk {
    /// Whether `s` bits fit two chunks.
    pub(crate) fn supports(s: u32) -> bool {
        (1..=LOW_BITS + WIDE_HIGH_BITS).contains(&s)
    }

    /// The chunks of `s` bits (`TwoChunk::supports(s)`).
    pub(crate) fn new(s: u32) -> TwoChunk {
        let low = s.min(LOW_BITS);
        TwoChunk { high: s - low, low }
    }

    fn high_table(self) -> usize {
        if self.high > 0 { 1 << self.high } else { 0 }
    }

    /// Table bits per threshold: `1[v < α_h]` over the high chunk, then `1[v < α_l]`.
    pub(crate) fn table_bits(self) -> usize {
        self.high_table() + (1 << self.low)
    }

    /// Opened bits per carry: `a, e, b`, or `b` alone without a high chunk.
    pub(crate) fn opened_bits(self) -> usize {
        if self.high > 0 { 3 } else { 1 }
    }

    /// Bits of a slot: the tables, then the masks of the opened bits.
    pub(crate) fn slot_bits(self) -> usize {
        self.table_bits() + self.opened_bits()
    }

    /// Write the slot of the threshold `alpha` and the opened bits' masks `z` at bit `at` of
    /// `slots` (bits clear).
    pub(crate) fn fill_slot(self, slots: &mut [u64], at: usize, alpha: u64, z: &[bool]) {
        if self.high > 0 {
            fill_ones(slots, at, (alpha >> self.low) as usize);
        }
        fill_ones(slots, at + self.high_table(), (alpha & mask(self.low)) as usize);
        set_bits(slots, at + self.table_bits(), z);
    }

    /// A party's shares of the opened bits at the value `v` from the slot at bit `at`: its
    /// [`TwoChunk::field`] XOR its masks.
    #[inline(always)]
    pub(crate) fn masked_field(self, slots: &[u64], at: usize, v: u64, own: u64) -> u64 {
        self.field(slots, at, v, own) ^ bits_at(slots, at + self.table_bits(), self.opened_bits() as u32)
    }

    /// A party's shares of `a | e << 1 | b << 2` (of `b` without a high chunk) at the value
    /// `v` from the tables at bit `at` (`1[v = α_h]` is `1[v − 1 < α_h] ⊕ 1[v < α_h]`, with
    /// party 0's constant `own` for `1[−1 < α_h]`).
    #[inline(always)]
    pub(crate) fn field(self, tables: &[u64], at: usize, v: u64, own: u64) -> u64 {
        let read = |bit: usize| (tables[bit / 64] >> (bit % 64)) & 1;
        let (h, l) = ((v >> self.low) as usize, (v & mask(self.low)) as usize);
        let b = read(at + self.high_table() + l);
        if self.high == 0 {
            return b;
        }
        let a = read(at + h);
        let before = if h > 0 { read(at + h - 1) } else { own };
        a | (a ^ before) << 1 | b << 2
    }
}

/// Bits `pos..pos + w` of the bit string `words` (`w ≤ 57`), as the low bits of a word.
#[inline(always)]
fn bits_at(words: &[u64], pos: usize, w: u32) -> u64 {
    let (i, sh) = (pos / 64, (pos % 64) as u32);
    let lo = words[i] >> sh;
    let v = if sh + w > 64 { lo | words[i + 1] << (64 - sh) } else { lo };
    v & mask(w)
}

/// Sets bit `at + j` of `v` for every `bits[j]` that is set (at most 64 bits, gathered
/// into one word).
fn set_bits(v: &mut [u64], at: usize, bits: &[bool]) {
    debug_assert!(bits.len() <= 64);
    let w = bits.iter().enumerate().fold(0u64, |w, (j, &b)| w | (b as u64) << j);
    fss::codec::place_bits(v, at, w, bits.len() as u32);
}

/// Sets bits `at..at + count` of `v`.
fn fill_ones(v: &mut [u64], at: usize, count: usize) {
    let (mut bit, end) = (at, at + count);
    while bit < end {
        let (w, sh) = (bit / 64, bit % 64);
        let take = (64 - sh).min(end - bit);
        v[w] |= mask(take as u32) << sh;
        bit += take;
    }
}

/// The second round's shares of [`ArsSlackTable::run`] with a middle chunk: `c = a + e·a' +
/// e·e'·b` from the opened `â, ê, â', ê', b̂`. (Every slice cut to the elements first, so
/// that the loop reads them without bounds checks.)
fn three_chunk_outputs(
    g: &ArsSlackTable,
    own: u64,
    xh: &[u64],
    opened: &[u64],
    key: &ArsSlackTableKey,
) -> Vec<u64> {
    let (n, s, m, len) = (g.bits, g.shift, mask(g.out_bits), g.len);
    let (xh, opened, wrap) = (&xh[..len], &opened[..len], &key.wrap[..len]);
    let (c0, c1) = (&key.corr[0][..len], &key.corr[1][..len]);
    let w: [&[u64]; 9] = std::array::from_fn(|k| &key.ez[k][..len]);
    let lifted_top = 1u64 << (n - s - 2);
    // `1 − 2v` for an opened bit `v`, in the ring.
    let sign = |v: u64| 1u64.wrapping_sub(2 * v);
    (0..len)
        .map(|i| {
            let x = slack_lift(xh[i], n);
            let o = opened[i];
            let public = (x >> s).wrapping_sub(lifted_top);
            let not_msb = 1 - (x >> (n - 1));
            // A masked bit `v̂ ⊕ z` is `v̂ + (1 − 2v̂)·z`: products of such bits expand into
            // public terms times the dealer's products of masks (masks z₂…z₅ at 0–3).
            let (e, a2, e2, b) = ((o >> 1) & 1, (o >> 2) & 1, (o >> 3) & 1, (o >> 4) & 1);
            let (se, sa2, se2, sb) = (sign(e), sign(a2), sign(e2), sign(b));
            let ea = (own * e * a2)
                .wrapping_add((e * sa2).wrapping_mul(w[1][i]))
                .wrapping_add((a2 * se).wrapping_mul(w[0][i]))
                .wrapping_add(se.wrapping_mul(sa2).wrapping_mul(w[4][i]));
            let eeb = (own * e * e2 * b)
                .wrapping_add((e * e2 * sb).wrapping_mul(w[3][i]))
                .wrapping_add((e * b * se2).wrapping_mul(w[2][i]))
                .wrapping_add((e2 * b * se).wrapping_mul(w[0][i]))
                .wrapping_add((e * se2.wrapping_mul(sb)).wrapping_mul(w[7][i]))
                .wrapping_add((e2 * se.wrapping_mul(sb)).wrapping_mul(w[6][i]))
                .wrapping_add((b * se.wrapping_mul(se2)).wrapping_mul(w[5][i]))
                .wrapping_add(se.wrapping_mul(se2).wrapping_mul(sb).wrapping_mul(w[8][i]));
            let corr = c0[i] ^ ((c0[i] ^ c1[i]) & (o & 1).wrapping_neg());
            (own * public)
                .wrapping_add(corr)
                .wrapping_sub(ea.wrapping_add(eeb))
                .wrapping_add(not_msb * wrap[i])
                & m
        })
        .collect()
}

/// The second round's shares of [`ArsSlackTable::run`] without a middle chunk: `c = a + e·b`
/// from the opened `â, ê, b̂`, over zipped slices (so that it vectorises: with slices cut to
/// the elements and indexed, as [`three_chunk_outputs`], `bench ops --n 37 --ops ars_slack`
/// took 16–20 ns per element against 9.2–11).
fn two_chunk_outputs(
    g: &ArsSlackTable,
    own: u64,
    xh: &[u64],
    opened: &[u64],
    key: &ArsSlackTableKey,
) -> Vec<u64> {
    let (n, s, m) = (g.bits, g.shift, mask(g.out_bits));
    let [c0, c1] = &key.corr;
    let (z2, z3, z23) = (&key.ez[0], &key.ez[1], &key.ez[2]);
    let lifted_top = 1u64 << (n - s - 2);
    xh.iter()
        .zip(opened)
        .zip(c0.iter().zip(c1))
        .zip(z2.iter().zip(z3).zip(z23))
        .zip(&key.wrap)
        .map(|((((&x, &o), (&a0, &a1)), ((&z2, &z3), &z23)), &w)| {
            let x = slack_lift(x, n);
            let (a, e, b) = (o & 1, (o >> 1) & 1, (o >> 2) & 1);
            let public = (x >> s).wrapping_sub(lifted_top);
            let not_msb = 1 - (x >> (n - 1));
            let eb = opened_product(own, e, b, [z2, z3, z23]);
            // (A select of the word `â` picks, without a branch.)
            let corr = a0 ^ ((a0 ^ a1) & a.wrapping_neg());
            (own * public).wrapping_add(corr).wrapping_sub(eb).wrapping_add(not_msb * w) & m
        })
        .collect()
}

unary!(ArsSlackTable, ArsSlackTableKey);

impl GateKey for ArsSlackTableKey {
    type Shape = ArsSlackTable;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        // (The slots' shares are XOR shares of bits: a one-bit share run, packed.)
        let count = self.tables.len() * 64;
        w.put_share_bits(count, &self.tables);
        // (The unused product words are empty.)
        for v in self.corr.iter().chain(self.ez.iter().filter(|v| !v.is_empty())) {
            put_words(w, v, self.out_bits);
        }
        put_words(w, &self.wrap, self.out_bits);
    }

    fn read(s: &ArsSlackTable, party: Party, r: &mut BitReader<'_>) -> Result<ArsSlackTableKey, DecodeError> {
        let count = (s.len * s.slot_bits()).div_ceil(64) * 64;
        let mut tables = Vec::new();
        r.get_share_bits_packed(count, &mut tables)?;
        let mut words = || get_words(r, s.len, s.out_bits);
        let corr = [words()?, words()?];
        let mut ez: [Vec<u64>; 9] = Default::default();
        for e in ez.iter_mut().take(if s.mid_bits() > 0 { 9 } else { 3 }) {
            *e = words()?;
        }
        let wrap = words()?;
        Ok(ArsSlackTableKey { party, out_bits: s.out_bits, tables, corr, ez, wrap })
    }
}
