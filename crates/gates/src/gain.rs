//! A normalisation's last steps, `y = ⌊(γ_j·⌊z / 2^{s1}⌋ + β_j) / 2^{s2}⌋` per column `j`
//! (two truncations with slack around the public gain and bias), with the first
//! truncation's carry deferred into the second (FuseFSS; paper §4, fused operators).
//!
//! Separately ([`crate::shift::ArsSlack`] twice), the first truncation opens its masked
//! carry bit, then its re-masked output, and the second does the same: four rounds. Here
//! the first truncation's output is never re-masked. Round 1 opens `ĉ₁ = c₁ ⊕ z₁`; then
//! `u = U − K` with `U = pub₁ − ĉ₁` public and `K = ⌊r/2^{s1}⌋ + z₁ − 2ĉ₁z₁ − μ₁·msb(r)·2^{k−s1}`
//! (`μ₁` the slack identity's public bit), so the affine value is `Â − M` with
//! `Â = γ·U + β` public and `M = γ·K`: one of four masks the dealer knows, picked by the
//! public `(ĉ₁, μ₁)`. The second truncation's carry compares `M`'s low `s2` bits, which
//! `μ₁` does not change when `k − s1 ≥ s2` (the `μ₁` term is a multiple of `2^{k−s1}`, `k`
//! the input's ring, `n` the output's: the input may be narrower, as a normalisation's
//! bounded product is):
//! the dealer writes that carry's truth tables ([`crate::carry_table`]: `c₂ = a + e·b` from
//! a high and a low chunk) for each `ĉ₁`, and the parties read the ones `ĉ₁` picks and open
//! `a, e, b` masked (round 2; the masks are the same for both candidates, as only one is
//! ever opened). Its correction words are dealt for all four masks. Round 3 opens the
//! re-masked output. One round and one `n`-bit opening per element fewer than separately,
//! for two more opened bits per element than a 1-bit DPF carry would open: at `s2 = 12` the
//! two candidates' tables are 320 bits, where two candidate DPFs were ~226 B of key and
//! twice the memory traffic of one (`bench ops --ops layernorm`, CHANGELOG).

use std::sync::Arc;

use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party, Ring};
use zeroize::Zeroize;

use crate::carry_table::{TwoChunk, opened_product};
use crate::dealer::{random_bits, share, share_bits, split_draws};
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_bits, get_words, key_debug, put_bits, put_words};
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
    /// The second shift (`n − s1 ≥ s2`).
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
    /// XOR shares of the second carry's tables for `ĉ₁ = 0, 1`: element `i`'s for `ĉ₁` at
    /// bits `(2i + ĉ₁)·T` (`T` the tables' bits per threshold).
    tables: Vec<u64>,
    /// XOR shares of the masks of the second carry's opened bits (`a, e, b`, or `b` alone),
    /// one set per element.
    z: Vec<bool>,
    /// Shares of `r_out − ⌊M/2^{s2}⌋ − z_a` for the mask `M` of `(ĉ₁, μ₁)`, at `2ĉ₁ + μ₁`
    /// (`z_a` the mask of the opened `a`).
    offset: [Vec<u64>; 4],
    /// Shares of `1 − 2z_a`.
    flip: Vec<u64>,
    /// Shares of `z_e`, `z_b` and `z_e·z_b` (empty without a high chunk).
    ez: [Vec<u64>; 3],
    /// Shares of `msb(M)`, `s2` bits (the parties use them times `2^{n−s2}`), at `2ĉ₁ + μ₁`.
    wrap: [Vec<u64>; 4],
}
fss::wipe_on_drop!(DeferredGainKey { wipe: [tables, z, offset, flip, ez, wrap], zeroize: [first] });

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

    /// Whether the second shift fits the tables (`s2 ≤ 17`); the rest of [`DeferredGain::check`]
    /// is on the widths a normalisation gives it.
    pub fn supports(s2: u32) -> bool {
        TwoChunk::supports(s2)
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
        let (chunks, nz) = (self.chunks(), self.chunks().opened_bits());
        let tb = chunks.table_bits();
        let mut tables = vec![0u64; (2 * len * tb).div_ceil(64)];
        for (i, mk) in masks.iter().enumerate() {
            chunks.fill(&mut tables, 2 * i * tb, mk[0] & mask(s2));
            chunks.fill(&mut tables, (2 * i + 1) * tb, mk[2] & mask(s2));
        }
        let mut t0 = vec![0u64; tables.len()];
        split_draws(rng, &mut t0);
        let t1: Vec<u64> = tables.iter().zip(&t0).map(|(&t, &a)| t ^ a).collect();
        tables.zeroize();
        // The opened bits' masks, `z_a` first (`z_a, z_e, z_b`, or `z_a` alone).
        let mut z = random_bits(rng, nz * len);
        let (zs0, zs1) = share_bits(rng, &z);
        let za = |i: usize| z[nz * i] as u64;
        let mut offset: [Vec<u64>; 4] = std::array::from_fn(|k| {
            (0..len).map(|i| rout[i].wrapping_sub(masks[i][k] >> s2).wrapping_sub(za(i)) & m).collect()
        });
        let mut flip: Vec<u64> = (0..len).map(|i| 1u64.wrapping_sub(2 * za(i)) & m).collect();
        let mut ez: [Vec<u64>; 3] = Default::default();
        if nz == 3 {
            ez = [
                z.chunks_exact(3).map(|zi| zi[1] as u64).collect(),
                z.chunks_exact(3).map(|zi| zi[2] as u64).collect(),
                z.chunks_exact(3).map(|zi| (zi[1] & zi[2]) as u64).collect(),
            ];
        }
        let mut wrap: [Vec<u64>; 4] =
            std::array::from_fn(|k| masks.iter().map(|mk| (mk[k] >> (n - 1)) & 1).collect());
        let mut shared = |v: &[u64], bits: u32| share(rng, v, bits);
        let o: [(Vec<u64>, Vec<u64>); 4] = std::array::from_fn(|k| shared(&offset[k], n));
        let fl = shared(&flip, n);
        let e: [(Vec<u64>, Vec<u64>); 3] = std::array::from_fn(|k| shared(&ez[k], n));
        let w: [(Vec<u64>, Vec<u64>); 4] = std::array::from_fn(|k| shared(&wrap[k], s2));
        lows1.zeroize();
        z.zeroize();
        masks.iter_mut().for_each(Zeroize::zeroize);
        offset.iter_mut().chain(ez.iter_mut()).chain(wrap.iter_mut()).for_each(Zeroize::zeroize);
        flip.zeroize();
        let split4 = |v: [(Vec<u64>, Vec<u64>); 4]| {
            let [a, b, c, d] = v;
            ([a.0, b.0, c.0, d.0], [a.1, b.1, c.1, d.1])
        };
        let (o0, o1) = split4(o);
        let (w0, w1) = split4(w);
        let [ea, eb, ec] = e;
        let widths = self.widths();
        Ok((
            DeferredGainKey {
                party: Party::P0,
                widths,
                first: f0,
                tables: t0,
                z: zs0,
                offset: o0,
                flip: fl.0,
                ez: [ea.0, eb.0, ec.0],
                wrap: w0,
            },
            DeferredGainKey {
                party: Party::P1,
                widths,
                first: f1,
                tables: t1,
                z: zs1,
                offset: o1,
                flip: fl.1,
                ez: [ea.1, eb.1, ec.1],
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
        let c1 = key.first.open(ctx, &lows1).await?;
        // `Â = γ·(pub₁ − ĉ₁) + β`, public; its mask is `M(ĉ₁, μ₁)`. Round 2 opens the
        // second carry's `a, e, b` from the tables `ĉ₁` picks, masked.
        let own = party_term(ctx.party());
        let (chunks, nz) = (self.chunks(), self.chunks().opened_bits());
        let tb = chunks.table_bits();
        let mut x2 = Vec::with_capacity(self.len);
        let mut bits = Vec::with_capacity(self.len);
        for (i0, ((row, c), zs)) in
            zh.chunks(cols).zip(c1.chunks(cols)).zip(key.z.chunks(nz * cols)).enumerate()
        {
            let at = i0 * cols;
            for (j, ((((&z, &c), &g), &b), zi)) in
                row.iter().zip(c).zip(gamma.iter()).zip(beta.iter()).zip(zs.chunks_exact(nz)).enumerate()
            {
                let u = (lift(z) >> s1).wrapping_sub(1 << (k - s1 - 2)).wrapping_sub(c);
                let x = g.wrapping_mul(u).wrapping_add(b).wrapping_add(1 << (n - 2)) & m;
                x2.push(x);
                let field = chunks.field(&key.tables, (2 * (at + j) + c as usize) * tb, x & mask(s2), own);
                let zw = zi.iter().enumerate().fold(0u64, |acc, (k, &zk)| acc | (zk as u64) << k);
                bits.push(field ^ zw);
            }
        }
        let mut opened = vec![0u64; self.len];
        ctx.open_packed_bits_into(&bits, nz as u32, &mut opened).await?;
        drop(bits);
        // `c₂ = a + e·b`: `−a = −â·(1 − 2z_a) − z_a` (`−z_a` is in the offsets).
        let ez = if nz == 3 { Some(&key.ez) } else { None };
        let y: Vec<u64> = (0..self.len)
            .map(|i| {
                let mu1 = 1 - (lift(zh[i]) >> (k - 1));
                let at = 2 * c1[i] as usize + mu1 as usize;
                let public = (x2[i] >> s2).wrapping_sub(1 << (n - s2 - 2));
                let mu2 = 1 - (x2[i] >> (n - 1));
                let o = opened[i];
                let eb = match ez {
                    Some(w) => opened_product(own, (o >> 1) & 1, (o >> 2) & 1, [w[0][i], w[1][i], w[2][i]]),
                    None => 0,
                };
                (own * public)
                    .wrapping_add(key.offset[at][i])
                    .wrapping_sub((o & 1).wrapping_mul(key.flip[i]))
                    .wrapping_sub(eb)
                    .wrapping_add(mu2 * (key.wrap[at][i] << (n - s2)))
                    & m
            })
            .collect();
        ctx.open(&y, n).await
    }

    fn read_key(&self, r: &mut BitReader<'_>, party: Party) -> Result<DeferredGainKey, DecodeError> {
        let first = MaskedBitKey::read(self.s1, party, self.len, r)?;
        let chunks = self.chunks();
        let mut tables = Vec::new();
        r.get_share_bits_packed(table_words(2 * self.len * chunks.table_bits()) * 64, &mut tables)?;
        let z = get_bits(r, chunks.opened_bits() * self.len)?;
        let mut words = |bits: u32| get_words(r, self.len, bits);
        let offset = [words(self.bits)?, words(self.bits)?, words(self.bits)?, words(self.bits)?];
        let flip = words(self.bits)?;
        let mut ez: [Vec<u64>; 3] = Default::default();
        if chunks.opened_bits() == 3 {
            ez = [words(self.bits)?, words(self.bits)?, words(self.bits)?];
        }
        let wrap = [words(self.s2)?, words(self.s2)?, words(self.s2)?, words(self.s2)?];
        Ok(DeferredGainKey { party, widths: self.widths(), first, tables, z, offset, flip, ez, wrap })
    }
}

/// 64-bit words of `bits` table bits.
fn table_words(bits: usize) -> usize {
    bits.div_ceil(64)
}

impl DeferredGainKey {
    fn write_key(&self, w: &mut BitWriter) {
        let shape = &self.widths;
        self.first.write(w);
        // (XOR shares of bits: a one-bit share run, packed.)
        w.put_share_bits(self.tables.len() * 64, &self.tables);
        put_bits(w, &self.z);
        for v in self.offset.iter().chain([&self.flip]).chain(self.ez.iter().filter(|v| !v.is_empty())) {
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
