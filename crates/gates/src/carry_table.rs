//! Truncation with slack whose carry is read from small lookup tables (FuseFSS; paper §4,
//! fused operators: the truncations the compiler leaves to the engine).
//!
//! SIGMA's truncation ([`crate::shift::ArsSlack`]) reads the carry `c = 1[x̂_l < r_l]` of the
//! low `s` bits from a 1-bit DPF on `s` bits: at `s = 12` a root, five levels of correction
//! words and a leaf, ~113 B per element. Here the `s` bits are cut into a high chunk of
//! `H = s − L` bits and a low chunk of `L = min(s, 7)` bits, and
//! `c = 1[x̂_h < r_h] + 1[x̂_h = r_h]·1[x̂_l < r_l]` (the two terms exclusive) comes from three
//! truth tables the dealer XOR-shares: `1[v < r_h]` and `1[v = r_h]` over the `2^H` values of
//! the high chunk, `1[v < r_l]` over the `2^L` of the low (192 bits at `s = 12`). A party
//! reads its shares at the public chunks, and round 1 opens the three bits masked,
//! `â = a ⊕ z₁`, `ê = e ⊕ z₂`, `b̂ = b ⊕ z₃`. Then `c = a + e·b` is public times
//! dealer-shared: `a` picks one of two words (as SIGMA's carry does), and
//! `e·b = ê·b̂ + ê(1 − 2b̂)·z₃ + b̂(1 − 2ê)·z₂ + (1 − 2ê)(1 − 2b̂)·z₂z₃` takes three more words.
//! Round 2 opens the output. Same two rounds and the same result as SIGMA's truncation, for
//! the tables, three words and two bits more per element instead of the DPF: 52 against
//! 127 B per element at `n = 37` (unseeded), and no AES.

use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party};
use zeroize::Zeroize;

use crate::dealer::{random_bits, share, share_bits, split_draws};
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_bits, get_words, key_debug, put_bits, put_words};
use crate::kit::{check_inputs, check_party, party_term, unary};
use crate::online::Ctx;
use crate::shift::{ArsSlack, slack_lift};

/// Widest low chunk: its table is two words.
const LOW_BITS: u32 = 7;

/// `len` elements of `⌊x / 2^s⌋` from `Z_{2^n}` into `Z_{2^out}`, every input below
/// `2^{n−2}` in magnitude (as [`crate::shift::ArsSlack`]), for `s ≤ 13` (a high chunk of at
/// most 6 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArsSlackTable {
    /// Input ring width `n`.
    pub bits: u32,
    /// Shift `s`, `1 ≤ s ≤ min(n − 2, 13)`.
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
    /// Shares of every element's tables, `tables_bits()` bits each, packed in order.
    tables: Vec<u64>,
    /// Shares of the masks `z₁, z₂, z₃` of the opened bits, three per element.
    z: Vec<bool>,
    /// Shares of `r_out − ⌊r/2^s⌋ − a` for `â = 0, 1` (`a = â ⊕ z₁`).
    corr: [Vec<u64>; 2],
    /// Shares of `z₂`, `z₃` and `z₂z₃` as ring elements.
    ez: [Vec<u64>; 3],
    /// Shares of `msb(r)·2^{n−s}`.
    wrap: Vec<u64>,
}
fss::wipe_on_drop!(ArsSlackTableKey { wipe: [tables, z, corr, ez, wrap], zeroize: [] });
key_debug!(ArsSlackTableKey);

impl ArsSlackTable {
    /// Whether the tables can carry a shift of `s` bits (a high chunk of at most 6 bits).
    pub fn supports(shift: u32) -> bool {
        (1..=LOW_BITS + 6).contains(&shift)
    }

    fn low_bits(&self) -> u32 {
        self.shift.min(LOW_BITS)
    }

    fn high_bits(&self) -> u32 {
        self.shift - self.low_bits()
    }

    /// Table bits per element: `1[v < r_h]`, `1[v = r_h]` (when there is a high chunk),
    /// then `1[v < r_l]`.
    fn table_bits(&self) -> usize {
        let h = if self.high_bits() > 0 { 2usize << self.high_bits() } else { 0 };
        h + (1usize << self.low_bits())
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
            return Err(GateError::Params(format!("table carry: shift {} past 13 bits", self.shift)));
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
        let (hb, lb, tb) = (self.high_bits(), self.low_bits(), self.table_bits());
        // The tables, packed: element i's at bits [i·tb, (i+1)·tb).
        let mut tables = vec![0u64; (self.len * tb).div_ceil(64)];
        let mut put = |at: usize, width: usize, v: u128| {
            for k in 0..width.div_ceil(64) {
                let w = (v >> (64 * k)) as u64;
                let (bit, len) = (at + 64 * k, (width - 64 * k).min(64));
                let w = w & mask(len as u32);
                tables[bit / 64] |= w << (bit % 64);
                if bit % 64 + len > 64 {
                    tables[bit / 64 + 1] |= w >> (64 - bit % 64);
                }
            }
        };
        let below = |k: u64| -> u128 { if k >= 128 { u128::MAX } else { (1u128 << k) - 1 } };
        for (i, &ri) in r.iter().enumerate() {
            let low = ri & mask(s);
            let (rh, rl) = (low >> lb, low & mask(lb));
            let mut at = i * tb;
            if hb > 0 {
                let width = 1usize << hb;
                put(at, width, below(rh));
                put(at + width, width, 1u128 << rh);
                at += 2 * width;
            }
            put(at, 1usize << lb, below(rl));
        }
        let mut t0 = vec![0u64; tables.len()];
        split_draws(rng, &mut t0);
        let t1: Vec<u64> = tables.iter().zip(&t0).map(|(&t, &a)| t ^ a).collect();
        tables.zeroize();
        let z = random_bits(rng, 3 * self.len);
        let (z0, z1) = share_bits(rng, &z);
        // `a = â ⊕ z₁`: the word for `â` is `v₀ − a`.
        let v0: Vec<u64> = r.iter().zip(rout).map(|(&r, &o)| o.wrapping_sub(r >> s) & m).collect();
        let pick = |hat: bool| -> Vec<u64> {
            v0.iter().enumerate().map(|(i, &v)| v.wrapping_sub((hat ^ z[3 * i]) as u64) & m).collect()
        };
        let (a0, a1) = share(rng, &pick(false), self.out_bits);
        let (b0, b1) = share(rng, &pick(true), self.out_bits);
        let bit = |k: usize| -> Vec<u64> { (0..self.len).map(|i| z[3 * i + k] as u64).collect() };
        let both: Vec<u64> = (0..self.len).map(|i| (z[3 * i + 1] & z[3 * i + 2]) as u64).collect();
        let (e20, e21) = share(rng, &bit(1), self.out_bits);
        let (e30, e31) = share(rng, &bit(2), self.out_bits);
        let (e230, e231) = share(rng, &both, self.out_bits);
        let wrap: Vec<u64> = r.iter().map(|&r| (((r >> (n - 1)) & 1) << (n - s)) & m).collect();
        let (w0, w1) = share(rng, &wrap, self.out_bits);
        let out_bits = self.out_bits;
        let key = |party, tables, z, corr, ez, wrap| ArsSlackTableKey {
            party,
            out_bits,
            tables,
            z,
            corr,
            ez,
            wrap,
        };
        Ok((
            key(Party::P0, t0, z0, [a0, b0], [e20, e30, e230], w0),
            key(Party::P1, t1, z1, [a1, b1], [e21, e31, e231], w1),
        ))
    }

    /// The masked output (two rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &ArsSlackTableKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        self.check()?;
        let (n, s, m) = (self.bits, self.shift, mask(self.out_bits));
        check_len("inputs", self.len, xh.len())?;
        let (hb, lb, tb) = (self.high_bits(), self.low_bits(), self.table_bits());
        let read = |bit: usize| -> u64 { (key.tables[bit / 64] >> (bit % 64)) & 1 };
        // (`x₁ = x̂ + 2^{n−2}` is recomputed where it is read.)
        let lift = |x: u64| slack_lift(x, n);
        // Round 1: `a ⊕ z₁`, `e ⊕ z₂`, `b ⊕ z₃` per element (`e` is 0 without a high chunk),
        // as bits 0, 1 and 2 of one word: one 3-bit field per element on the wire.
        let mut bits = Vec::with_capacity(self.len);
        for (i, &x) in xh.iter().enumerate() {
            let low = lift(x) & mask(s);
            let (h, l) = ((low >> lb) as usize, (low & mask(lb)) as usize);
            let mut at = i * tb;
            let (a, e) = if hb > 0 {
                let width = 1usize << hb;
                let ae = (read(at + h), read(at + width + h));
                at += 2 * width;
                ae
            } else {
                (0, 0)
            };
            let b = read(at + l);
            // Without a high chunk the carry is `b` alone: it stands in `a`'s place.
            let (a, b) = if hb > 0 { (a, b) } else { (b, 0) };
            let z = key.z[3 * i] as u64 | (key.z[3 * i + 1] as u64) << 1 | (key.z[3 * i + 2] as u64) << 2;
            bits.push((a | e << 1 | b << 2) ^ z);
        }
        let mut opened = vec![0u64; self.len];
        ctx.open_packed_bits_into(&bits, 3, &mut opened).await?;
        let own = party_term(ctx.party());
        let [c0, c1] = &key.corr;
        let [e2, e3, e23] = &key.ez;
        let y: Vec<u64> = (0..self.len)
            .map(|i| {
                let x = lift(xh[i]);
                let o = opened[i];
                let (a, e, b) = (o & 1, (o >> 1) & 1, (o >> 2) & 1);
                let public = (x >> s).wrapping_sub(1 << (n - s - 2));
                let not_msb = 1 - (x >> (n - 1));
                // −e·b = −(ê·b̂ + ê(1 − 2b̂)·z₃ + b̂(1 − 2ê)·z₂ + (1 − 2ê)(1 − 2b̂)·z₂z₃).
                let (se, sb) = (1u64.wrapping_sub(2 * e), 1u64.wrapping_sub(2 * b));
                let eb = (own * e * b)
                    .wrapping_add((e * sb).wrapping_mul(e3[i]))
                    .wrapping_add((b * se).wrapping_mul(e2[i]))
                    .wrapping_add(se.wrapping_mul(sb).wrapping_mul(e23[i]));
                let corr = if a == 1 { c1[i] } else { c0[i] };
                (own * public).wrapping_add(corr).wrapping_sub(eb).wrapping_add(not_msb * key.wrap[i]) & m
            })
            .collect();
        ctx.open(&y, self.out_bits).await
    }
}

unary!(ArsSlackTable, ArsSlackTableKey);

impl GateKey for ArsSlackTableKey {
    type Shape = ArsSlackTable;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        // (The tables' shares are XOR shares of bits: a one-bit share run, packed.)
        let count = self.tables.len() * 64;
        w.put_share_bits(count, &self.tables);
        put_bits(w, &self.z);
        for v in self.corr.iter().chain(&self.ez) {
            put_words(w, v, self.out_bits);
        }
        put_words(w, &self.wrap, self.out_bits);
    }

    fn read(s: &ArsSlackTable, party: Party, r: &mut BitReader<'_>) -> Result<ArsSlackTableKey, DecodeError> {
        let count = (s.len * s.table_bits()).div_ceil(64) * 64;
        let mut tables = Vec::new();
        r.get_share_bits_packed(count, &mut tables)?;
        let z = get_bits(r, 3 * s.len)?;
        let mut words = || get_words(r, s.len, s.out_bits);
        let corr = [words()?, words()?];
        let ez = [words()?, words()?, words()?];
        let wrap = words()?;
        Ok(ArsSlackTableKey { party, out_bits: s.out_bits, tables, z, corr, ez, wrap })
    }
}
