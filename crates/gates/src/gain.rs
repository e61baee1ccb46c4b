//! A normalisation's last steps, `y = ⌊(γ_j·⌊z / 2^{s1}⌋ + β_j) / 2^{s2}⌋` per column `j`
//! (two truncations with slack around the public gain and bias), with the first
//! truncation's carry deferred into the second (FuseFSS; paper §4, fused operators).
//!
//! Separately ([`crate::shift::ArsSlack`] twice), the first truncation opens its masked
//! carry bit, then its re-masked output, and the second does the same: four rounds. Here
//! the first truncation's output is never re-masked, and both carries open in one round.
//! With `ĉ₁ = c₁ ⊕ z₁`, `u = U − K` where `U = pub₁ − ĉ₁` is public and
//! `K = ⌊r/2^{s1}⌋ + z₁ − 2ĉ₁z₁ − μ₁·msb(r)·2^{k−s1}` (`μ₁` the slack identity's public bit,
//! `k` the input's ring, `n` the output's: the input may be narrower, as a normalisation's
//! bounded product is), so the affine value is `Â − M` with `Â = γ·U + β` public once `ĉ₁`
//! is and `M = γ·K`: one of four masks the dealer knows, picked by the public `(ĉ₁, μ₁)`.
//! The second truncation's carry compares `M`'s low `s2` bits, which `μ₁` does not change
//! when `k − s1 ≥ s2` (the `μ₁` term is a multiple of `2^{k−s1}`). The dealer writes that
//! carry's truth tables ([`crate::carry_table`]: `c₂ = a + e·b` from a high and a low
//! chunk) for each value of `ĉ₁`, and the parties, before `ĉ₁` is known, read both at the
//! `Â` of either value: round 1 opens `ĉ₁` and both sets of `a, e, b`, each masked with its
//! own bits (the set of the other value tells nothing). Round 2 opens the re-masked output
//! from the set `ĉ₁` picks; its correction words are dealt for all four masks.
//!
//! Two rounds and one `n`-bit opening per element fewer than separately, for six opened
//! bits more. At `s2 = 12` the two tables are 320 bits, where two candidate 12-bit DPFs
//! (the deferral as it was, read one of two after `ĉ₁`) were ~226 B of key and twice the
//! memory traffic of one (CHANGELOG, twenty-eighth session).

use std::sync::Arc;

use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party, Ring};
use zeroize::Zeroize;

use crate::carry_table::{TwoChunk, opened_product};
use crate::dealer::{random_bits, share, split_draws};
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_words, key_debug, put_words};
use crate::kit::{check_inputs, check_party, party_term, unary};
use crate::online::Ctx;
use crate::shift::{MaskedBitKey, deal_masked_bits, slack_lift};

/// `len` elements of `⌊(γ_j·⌊z/2^{s1}⌋ + β_j)/2^{s2}⌋` in `Z_{2^bits}` (`j = i mod cols`,
/// `cols` the gain's length) from `z` in `Z_{2^in_bits}`, every truncated value below
/// `2^{w−2}` in magnitude in its ring `w` (the slack both truncations need).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeferredGain {
    /// Ring width `n` of the output (and of the gain's arithmetic).
    pub bits: u32,
    /// Ring width `k ≤ n` of the input `z` (`|z| < 2^{k−2}`): a normalisation's product,
    /// opened in a ring only as wide as its bound needs ([`crate::norm::Norm::with_product_bits`]).
    pub in_bits: u32,
    /// The first shift.
    pub s1: u32,
    /// The second shift (`k − s1 ≥ s2`, `s2 ≤ 17`).
    pub s2: u32,
    /// Elements.
    pub len: usize,
    /// Gain, one word per column.
    pub gamma: Arc<[u64]>,
    /// Bias, one word per column.
    pub beta: Arc<[u64]>,
}

/// The widths a [`DeferredGainKey`]'s words are written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Widths {
    bits: u32,
    s2: u32,
}

/// A party's [`DeferredGain`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct DeferredGainKey {
    party: Party,
    widths: Widths,
    /// The first carry, masked (`len` points).
    first: MaskedBitKey,
    /// XOR shares of the second carry's slots for `ĉ₁ = 0, 1`: element `i`'s for `ĉ₁` at bits
    /// `(2i + ĉ₁)·S`, its tables (`T` bits) then the masks of its opened bits (`a, e, b`, or
    /// `b` alone): `S = T + 3` (or `T + 1`).
    tables: Vec<u64>,
    /// Shares of `r_out − ⌊M/2^{s2}⌋ − z_a` for the mask `M` of `(ĉ₁, μ₁)`, at `2ĉ₁ + μ₁`
    /// (`z_a` the mask of `ĉ₁`'s opened `a`).
    offset: [Vec<u64>; 4],
    /// Shares of `1 − 2z_a` for `ĉ₁ = 0, 1`.
    flip: [Vec<u64>; 2],
    /// Shares of `z_e`, `z_b` and `z_e·z_b` for `ĉ₁ = 0, 1`, at `3ĉ₁ + j` (empty without a
    /// high chunk).
    ez: [Vec<u64>; 6],
    /// Shares of `msb(M)`, `s2` bits (the parties use them times `2^{n−s2}`), at `2ĉ₁ + μ₁`.
    wrap: [Vec<u64>; 4],
}
fss::wipe_on_drop!(DeferredGainKey { wipe: [tables, offset, flip, ez, wrap], zeroize: [first] });

key_debug!(DeferredGainKey);

impl DeferredGain {
    /// Check the widths and the gain's and bias's lengths.
    ///
    /// # Errors
    /// [`GateError::Params`] for widths the deferral does not hold at.
    pub fn check(&self) -> Result<(), GateError> {
        let (n, k) = (self.bits, self.in_bits);
        if n > 64
            || k > n
            || self.s1 == 0
            || self.s2 == 0
            || self.s1 + 2 > k
            || self.s2 + 2 > n
            || k - self.s1 < self.s2
            || !TwoChunk::supports(self.s2)
        {
            return Err(GateError::Params(format!(
                "deferred gain: shifts {} and {} from {k} to {n} bits (needs k ≤ n, k − s1 ≥ s2 and s2 ≤ 17)",
                self.s1, self.s2
            )));
        }
        let cols = self.gamma.len();
        if cols == 0 || !self.len.is_multiple_of(cols) {
            return Err(GateError::Params(format!("deferred gain: {} elements in rows of {cols}", self.len)));
        }
        check_len("beta", cols, self.beta.len())
    }

    fn chunks(&self) -> TwoChunk {
        TwoChunk::new(self.s2)
    }

    fn widths(&self) -> Widths {
        Widths { bits: self.bits, s2: self.s2 }
    }

    fn input_width(&self) -> u32 {
        self.in_bits
    }

    fn output_width(&self) -> u32 {
        self.bits
    }

    /// The plaintext result for element `i`.
    fn plain(&self, z: u64, i: usize) -> u64 {
        let j = i % self.gamma.len();
        let ring = Ring::new(self.bits).expect("checked width");
        let u = Ring::new(self.in_bits).expect("checked width").to_signed(z) >> self.s1;
        let a = self.gamma[j].wrapping_mul(u as u64).wrapping_add(self.beta[j]) & mask(self.bits);
        ((ring.to_signed(a) >> self.s2) as u64) & mask(self.bits)
    }

    /// The four masks `M(ĉ₁, μ₁) = γ_j·K(ĉ₁, μ₁)` of element `i` (input mask `r`, first
    /// masking bit `z`), at `2ĉ₁ + μ₁`.
    fn masks(&self, r: u64, z: bool, gamma: u64) -> [u64; 4] {
        let (n, k, s1) = (self.bits, self.in_bits, self.s1);
        let (m, r) = (mask(n), r & mask(k));
        let d = (r >> s1).wrapping_add(z as u64);
        let b = (z as u64).wrapping_mul(2).wrapping_neg();
        let c = (((r >> (k - 1)) & 1) << (k - s1)).wrapping_neg();
        let kk = |cb: u64, mu: u64| d.wrapping_add(cb.wrapping_mul(b)).wrapping_add(mu.wrapping_mul(c));
        [kk(0, 0), kk(0, 1), kk(1, 0), kk(1, 1)].map(|kv| gamma.wrapping_mul(kv) & m)
    }

    /// Deal keys for input masks `r`, output masks `rout` and the public gain and bias.
    ///
    /// # Errors
    /// [`GateError`] on bad parameters or lengths.
    pub fn deal<R: SplitRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(DeferredGainKey, DeferredGainKey), GateError> {
        self.check()?;
        let (gamma, cols) = (&self.gamma, self.gamma.len());
        check_len("masks", self.len, r.len())?;
        check_len("output masks", self.len, rout.len())?;
        let (n, s1, s2, len) = (self.bits, self.s1, self.s2, self.len);
        let m = mask(n);
        let mut lows1: Vec<u64> = r.iter().map(|&r| r & mask(s1)).collect();
        let (f0, f1, z1) = deal_masked_bits(s1, &lows1, rng)?;
        let mut masks: Vec<[u64; 4]> = (0..len).map(|i| self.masks(r[i], z1[i], gamma[i % cols])).collect();
        // `μ₁` changes `M` by a multiple of `2^{k−s1}`, not its low `s2` bits: one table
        // set per `ĉ₁`, element `i`'s for `ĉ₁` at set `2i + ĉ₁`.
        let chunks = self.chunks();
        let (nz, sb) = (chunks.opened_bits(), chunks.slot_bits());
        // The opened bits' masks for each `ĉ₁` (both are opened), `z_a` first (`z_a, z_e,
        // z_b`, or `z_a` alone), in each slot after its tables.
        let mut z = random_bits(rng, 2 * nz * len);
        let mut tables = vec![0u64; (2 * len * sb).div_ceil(64)];
        for (i, mk) in masks.iter().enumerate() {
            for c in 0..2 {
                let slot = 2 * i + c;
                chunks.fill_slot(
                    &mut tables,
                    slot * sb,
                    mk[2 * c] & mask(s2),
                    &z[slot * nz..(slot + 1) * nz],
                );
            }
        }
        let mut t0 = vec![0u64; tables.len()];
        split_draws(rng, &mut t0);
        let t1: Vec<u64> = tables.iter().zip(&t0).map(|(&t, &a)| t ^ a).collect();
        tables.zeroize();
        let za = |i: usize, c: usize| z[(2 * i + c) * nz] as u64;
        let mut offset: [Vec<u64>; 4] = std::array::from_fn(|k| {
            (0..len).map(|i| rout[i].wrapping_sub(masks[i][k] >> s2).wrapping_sub(za(i, k / 2)) & m).collect()
        });
        let mut flip: [Vec<u64>; 2] =
            std::array::from_fn(|c| (0..len).map(|i| 1u64.wrapping_sub(2 * za(i, c)) & m).collect());
        let mut ez: [Vec<u64>; 6] = Default::default();
        if nz == 3 {
            ez = std::array::from_fn(|k| {
                let (c, j) = (k / 3, k % 3);
                z.chunks_exact(3)
                    .skip(c)
                    .step_by(2)
                    .map(|zi| [zi[1], zi[2], zi[1] & zi[2]][j] as u64)
                    .collect()
            });
        }
        let mut wrap: [Vec<u64>; 4] =
            std::array::from_fn(|k| masks.iter().map(|mk| (mk[k] >> (n - 1)) & 1).collect());
        let mut shared = |v: &[u64], bits: u32| share(rng, v, bits);
        let o: [(Vec<u64>, Vec<u64>); 4] = std::array::from_fn(|k| shared(&offset[k], n));
        let fl: [(Vec<u64>, Vec<u64>); 2] = std::array::from_fn(|c| shared(&flip[c], n));
        let e: [(Vec<u64>, Vec<u64>); 6] = std::array::from_fn(|k| shared(&ez[k], n));
        let w: [(Vec<u64>, Vec<u64>); 4] = std::array::from_fn(|k| shared(&wrap[k], s2));
        lows1.zeroize();
        z.zeroize();
        masks.iter_mut().for_each(Zeroize::zeroize);
        offset
            .iter_mut()
            .chain(flip.iter_mut())
            .chain(ez.iter_mut())
            .chain(wrap.iter_mut())
            .for_each(Zeroize::zeroize);
        let (o0, o1) = unzip(o);
        let (w0, w1) = unzip(w);
        let (fl0, fl1) = unzip(fl);
        let (e0, e1) = unzip(e);
        let widths = self.widths();
        Ok((
            DeferredGainKey {
                party: Party::P0,
                widths,
                first: f0,
                tables: t0,
                offset: o0,
                flip: fl0,
                ez: e0,
                wrap: w0,
            },
            DeferredGainKey {
                party: Party::P1,
                widths,
                first: f1,
                tables: t1,
                offset: o1,
                flip: fl1,
                ez: e1,
                wrap: w1,
            },
        ))
    }

    /// The masked output from the masked input `zh` (three rounds).
    ///
    /// # Errors
    /// [`GateError`] on bad lengths or a peer's bad message.
    pub async fn run(&self, ctx: &Ctx, key: &DeferredGainKey, zh: &[u64]) -> Result<Vec<u64>, GateError> {
        self.check()?;
        let (gamma, beta, cols) = (&self.gamma, &self.beta, self.gamma.len());
        check_len("masked inputs", self.len, zh.len())?;
        let (n, k, s1, s2) = (self.bits, self.in_bits, self.s1, self.s2);
        let m = mask(n);
        // (Row by row, each pass writing only what the next round reads: `x₁ = ẑ + 2^{k−2}`
        // is recomputed where it is read.)
        let lift = |z: u64| slack_lift(z, k);
        let lows1: Vec<u64> = zh.iter().map(|&z| lift(z) & mask(s1)).collect();
        let first = key.first.shares(&lows1)?;
        drop(lows1);
        // `Â = γ·(pub₁ − ĉ₁) + β` is public once `ĉ₁` is; for either value of `ĉ₁` its low
        // bits read that value's tables now. One round opens `ĉ₁` and both sets of `a, e, b`,
        // masked: bit 0, then `ĉ₁ = 0`'s, then `ĉ₁ = 1`'s.
        let own = party_term(ctx.party());
        let chunks = self.chunks();
        let (nz, sb) = (chunks.opened_bits(), chunks.slot_bits());
        // `Â + 2^{n−2}` for `ĉ₁ = 0` (for `ĉ₁ = 1` it is `γ` less).
        let affine = |z: u64, g: u64, b: u64| -> u64 {
            let u = (lift(z) >> s1).wrapping_sub(1 << (k - s1 - 2));
            g.wrapping_mul(u).wrapping_add(b).wrapping_add(1 << (n - 2)) & m
        };
        let field = |slot: usize, x: u64| chunks.masked_field(&key.tables, slot * sb, x & mask(s2), own);
        let mut bits = Vec::with_capacity(self.len);
        for (i0, row) in zh.chunks(cols).enumerate() {
            let at = i0 * cols;
            for (j, ((&z, &g), &b)) in row.iter().zip(gamma.iter()).zip(beta.iter()).enumerate() {
                let x0 = affine(z, g, b);
                let slot = 2 * (at + j);
                let (f0, f1) = (field(slot, x0), field(slot + 1, x0.wrapping_sub(g)));
                bits.push(first[at + j] | f0 << 1 | f1 << (1 + nz));
            }
        }
        drop(first);
        let mut opened = vec![0u64; self.len];
        ctx.open_packed_bits_into(&bits, 1 + 2 * nz as u32, &mut opened).await?;
        drop(bits);
        // `c₂ = a + e·b` from `ĉ₁`'s set: `−a = −â·(1 − 2z_a) − z_a` (`−z_a` is in the offsets).
        let mut y = Vec::with_capacity(self.len);
        for (i0, (row, op)) in zh.chunks(cols).zip(opened.chunks(cols)).enumerate() {
            for (j, (((&z, &o), &g), &b)) in row.iter().zip(op).zip(gamma.iter()).zip(beta.iter()).enumerate()
            {
                let i = i0 * cols + j;
                let c = (o & 1) as usize;
                let x2 = affine(z, g, b).wrapping_sub((c as u64).wrapping_mul(g)) & m;
                let mu1 = 1 - (lift(z) >> (k - 1));
                let at = 2 * c + mu1 as usize;
                let public = (x2 >> s2).wrapping_sub(1 << (n - s2 - 2));
                let mu2 = 1 - (x2 >> (n - 1));
                let t = o >> (1 + nz as u32 * c as u32);
                let eb = if nz == 3 {
                    let w = &key.ez[3 * c..3 * c + 3];
                    opened_product(own, (t >> 1) & 1, (t >> 2) & 1, [w[0][i], w[1][i], w[2][i]])
                } else {
                    0
                };
                y.push(
                    (own * public)
                        .wrapping_add(key.offset[at][i])
                        .wrapping_sub((t & 1).wrapping_mul(key.flip[c][i]))
                        .wrapping_sub(eb)
                        .wrapping_add(mu2 * (key.wrap[at][i] << (n - s2)))
                        & m,
                );
            }
        }
        ctx.open(&y, n).await
    }

    fn read_key(&self, r: &mut BitReader<'_>, party: Party) -> Result<DeferredGainKey, DecodeError> {
        let first = MaskedBitKey::read(self.s1, party, self.len, r)?;
        let chunks = self.chunks();
        let mut tables = Vec::new();
        r.get_share_bits_packed((2 * self.len * chunks.slot_bits()).div_ceil(64) * 64, &mut tables)?;
        let mut words = |bits: u32| get_words(r, self.len, bits);
        let offset = [words(self.bits)?, words(self.bits)?, words(self.bits)?, words(self.bits)?];
        let flip = [words(self.bits)?, words(self.bits)?];
        let mut ez: [Vec<u64>; 6] = Default::default();
        if chunks.opened_bits() == 3 {
            for e in &mut ez {
                *e = words(self.bits)?;
            }
        }
        let wrap = [words(self.s2)?, words(self.s2)?, words(self.s2)?, words(self.s2)?];
        Ok(DeferredGainKey { party, widths: self.widths(), first, tables, offset, flip, ez, wrap })
    }
}

/// A party's halves of pairs of shares.
fn unzip<const N: usize>(mut v: [(Vec<u64>, Vec<u64>); N]) -> ([Vec<u64>; N], [Vec<u64>; N]) {
    let first = std::array::from_fn(|k| std::mem::take(&mut v[k].0));
    (first, std::array::from_fn(|k| std::mem::take(&mut v[k].1)))
}

impl DeferredGainKey {
    fn write_key(&self, w: &mut BitWriter) {
        let shape = &self.widths;
        self.first.write(w);
        // (XOR shares of bits: a one-bit share run, packed.)
        w.put_share_bits(self.tables.len() * 64, &self.tables);
        for v in self.offset.iter().chain(&self.flip).chain(self.ez.iter().filter(|v| !v.is_empty())) {
            put_words(w, v, shape.bits);
        }
        for v in &self.wrap {
            put_words(w, v, shape.s2);
        }
    }
}

impl GateKey for DeferredGainKey {
    type Shape = DeferredGain;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.write_key(w);
    }

    fn read(s: &DeferredGain, party: Party, r: &mut BitReader<'_>) -> Result<DeferredGainKey, DecodeError> {
        s.read_key(r, party)
    }
}

unary!(DeferredGain, DeferredGainKey, by_index);
