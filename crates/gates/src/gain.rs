//! A normalisation's last steps, `y = ⌊(γ_j·⌊z / 2^{s1}⌋ + β_j) / 2^{s2}⌋` per column `j`
//! (two truncations with slack around the public gain and bias), with the first
//! truncation's carry deferred into the second (FuseFSS; paper §4, fused operators).
//!
//! Separately ([`crate::shift::ArsSlack`] twice), the first truncation opens its masked
//! carry bit, then its re-masked output, and the second does the same: four rounds. Here
//! the first truncation's output is never re-masked. Round 1 opens `ĉ₁ = c₁ ⊕ z₁`; then
//! `u = U − K` with `U = pub₁ − ĉ₁` public and `K = ⌊r/2^{s1}⌋ + z₁ − 2ĉ₁z₁ − μ₁·msb(r)·2^{n−s1}`
//! (`μ₁` the slack identity's public bit), so the affine value is `Â − M` with
//! `Â = γ·U + β` public and `M = γ·K`: one of four masks the dealer knows, picked by the
//! public `(ĉ₁, μ₁)`. The second truncation's carry compares `M`'s low `s2` bits, which
//! `μ₁` does not change when `n − s1 ≥ s2` (the `μ₁` term is a multiple of `2^{n−s1}`):
//! the dealer keys one 1-bit DPF per element for each `ĉ₁` and the parties evaluate the one
//! `ĉ₁` picks (round 2). Its correction words are dealt for all four masks. Round 3 opens
//! the re-masked output. One round and one `n`-bit opening per element fewer, for a second
//! 1-bit DPF and four more words per element.

use std::sync::Arc;

use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party, Ring};
use zeroize::Zeroize;

use crate::dealer::share;
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_words, key_debug, put_words};
use crate::kit::{check_inputs, check_party, party_term, unary};
use crate::online::Ctx;
use crate::shift::{MaskedBitKey, deal_masked_bits, slack_lift};

/// `len` elements of `⌊(γ_j·⌊z/2^{s1}⌋ + β_j)/2^{s2}⌋` in `Z_{2^bits}` (`j = i mod cols`,
/// `cols` the gain's length), every truncated value below `2^{bits−2}` in magnitude (the
/// slack both truncations need).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeferredGain {
    /// Ring width `n`.
    pub bits: u32,
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
    /// The second carry for `ĉ₁ = 0, 1` (`2·len` points, element `i`'s at `2i + ĉ₁`).
    second: MaskedBitKey,
    /// Shares of `r_out − ⌊M/2^{s2}⌋ − z₂` for the mask `M` of `(ĉ₁, μ₁)`, at `2ĉ₁ + μ₁`.
    offset: [Vec<u64>; 4],
    /// Shares of `1 − 2z₂` for `ĉ₁ = 0, 1`.
    flip: [Vec<u64>; 2],
    /// Shares of `msb(M)`, `s2` bits (the parties use them times `2^{n−s2}`), at `2ĉ₁ + μ₁`.
    wrap: [Vec<u64>; 4],
}
fss::wipe_on_drop!(DeferredGainKey { wipe: [offset, flip, wrap], zeroize: [first, second] });

key_debug!(DeferredGainKey);

impl DeferredGain {
    /// Check the widths and the gain's and bias's lengths.
    ///
    /// # Errors
    /// [`GateError::Params`] for widths the deferral does not hold at.
    pub fn check(&self) -> Result<(), GateError> {
        let n = self.bits;
        if n > 64
            || self.s1 == 0
            || self.s2 == 0
            || self.s1 + 2 > n
            || self.s2 + 2 > n
            || n - self.s1 < self.s2
        {
            return Err(GateError::Params(format!(
                "deferred gain: shifts {} and {} on {n} bits (needs n − s1 ≥ s2)",
                self.s1, self.s2
            )));
        }
        let cols = self.gamma.len();
        if cols == 0 || !self.len.is_multiple_of(cols) {
            return Err(GateError::Params(format!("deferred gain: {} elements in rows of {cols}", self.len)));
        }
        check_len("beta", cols, self.beta.len())
    }

    fn widths(&self) -> Widths {
        Widths { bits: self.bits, s2: self.s2 }
    }

    fn input_width(&self) -> u32 {
        self.bits
    }

    fn output_width(&self) -> u32 {
        self.bits
    }

    /// The plaintext result for element `i`.
    fn plain(&self, z: u64, i: usize) -> u64 {
        let j = i % self.gamma.len();
        let ring = Ring::new(self.bits).expect("checked width");
        let u = ring.to_signed(z) >> self.s1;
        let a = self.gamma[j].wrapping_mul(u as u64).wrapping_add(self.beta[j]) & mask(self.bits);
        ((ring.to_signed(a) >> self.s2) as u64) & mask(self.bits)
    }

    /// The four masks `M(ĉ₁, μ₁) = γ_j·K(ĉ₁, μ₁)` of element `i` (input mask `r`, first
    /// masking bit `z`), at `2ĉ₁ + μ₁`.
    fn masks(&self, r: u64, z: bool, gamma: u64) -> [u64; 4] {
        let (n, s1) = (self.bits, self.s1);
        let m = mask(n);
        let d = (r >> s1).wrapping_add(z as u64);
        let b = (z as u64).wrapping_mul(2).wrapping_neg();
        let c = (((r >> (n - 1)) & 1) << (n - s1)).wrapping_neg();
        let k = |cb: u64, mu: u64| d.wrapping_add(cb.wrapping_mul(b)).wrapping_add(mu.wrapping_mul(c));
        [k(0, 0), k(0, 1), k(1, 0), k(1, 1)].map(|k| gamma.wrapping_mul(k) & m)
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
        // `μ₁` changes `M` by a multiple of `2^{n−s1}`, not its low `s2` bits.
        let mut lows2: Vec<u64> = masks.iter().flat_map(|mk| [mk[0] & mask(s2), mk[2] & mask(s2)]).collect();
        let (g0, g1, z2) = deal_masked_bits(s2, &lows2, rng)?;
        let mut offset: [Vec<u64>; 4] = std::array::from_fn(|k| {
            (0..len)
                .map(|i| rout[i].wrapping_sub(masks[i][k] >> s2).wrapping_sub(z2[2 * i + k / 2] as u64) & m)
                .collect()
        });
        let mut flip: [Vec<u64>; 2] = std::array::from_fn(|b| {
            (0..len).map(|i| 1u64.wrapping_sub(2 * z2[2 * i + b] as u64) & m).collect()
        });
        let mut wrap: [Vec<u64>; 4] =
            std::array::from_fn(|k| masks.iter().map(|mk| (mk[k] >> (n - 1)) & 1).collect());
        let mut shared = |v: &[u64], bits: u32| share(rng, v, bits);
        let o: [(Vec<u64>, Vec<u64>); 4] = std::array::from_fn(|k| shared(&offset[k], n));
        let fl: [(Vec<u64>, Vec<u64>); 2] = std::array::from_fn(|b| shared(&flip[b], n));
        let w: [(Vec<u64>, Vec<u64>); 4] = std::array::from_fn(|k| shared(&wrap[k], s2));
        lows1.zeroize();
        lows2.zeroize();
        masks.iter_mut().for_each(Zeroize::zeroize);
        offset.iter_mut().chain(flip.iter_mut()).chain(wrap.iter_mut()).for_each(Zeroize::zeroize);
        let split = |v: [(Vec<u64>, Vec<u64>); 4]| {
            let [a, b, c, d] = v;
            ([a.0, b.0, c.0, d.0], [a.1, b.1, c.1, d.1])
        };
        let (o0, o1) = split(o);
        let (w0, w1) = split(w);
        let [fa, fb] = fl;
        Ok((
            DeferredGainKey {
                party: Party::P0,
                widths: self.widths(),
                first: f0,
                second: g0,
                offset: o0,
                flip: [fa.0, fb.0],
                wrap: w0,
            },
            DeferredGainKey {
                party: Party::P1,
                widths: self.widths(),
                first: f1,
                second: g1,
                offset: o1,
                flip: [fa.1, fb.1],
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
        let (n, s1, s2) = (self.bits, self.s1, self.s2);
        let m = mask(n);
        // (Row by row, each pass writing only what the next round reads: `x₁ = ẑ + 2^{n−2}`
        // is recomputed where it is read.)
        let lift = |z: u64| slack_lift(z, n);
        let lows1: Vec<u64> = zh.iter().map(|&z| lift(z) & mask(s1)).collect();
        let c1 = key.first.open(ctx, &lows1).await?;
        // `Â = γ·(pub₁ − ĉ₁) + β`, public; its mask is `M(ĉ₁, μ₁)`.
        let mut x2 = Vec::with_capacity(self.len);
        let mut lows2 = Vec::with_capacity(self.len);
        let mut pick = Vec::with_capacity(self.len);
        for (i0, (row, c)) in zh.chunks(cols).zip(c1.chunks(cols)).enumerate() {
            for (((&z, &c), &g), &b) in row.iter().zip(c).zip(gamma.iter()).zip(beta.iter()) {
                let u = (lift(z) >> s1).wrapping_sub(1 << (n - s1 - 2)).wrapping_sub(c);
                let x = g.wrapping_mul(u).wrapping_add(b).wrapping_add(1 << (n - 2)) & m;
                x2.push(x);
                lows2.push(x & mask(s2));
            }
            let at = (i0 * cols) as u32;
            pick.extend(c.iter().enumerate().map(|(j, &c)| 2 * (at + j as u32) + c as u32));
        }
        let c2 = key.second.open_indexed(ctx, &lows2, &pick).await?;
        let own = party_term(ctx.party());
        let y: Vec<u64> = (0..self.len)
            .map(|i| {
                let mu1 = 1 - (lift(zh[i]) >> (n - 1));
                let k = 2 * c1[i] as usize + mu1 as usize;
                let public = (x2[i] >> s2).wrapping_sub(1 << (n - s2 - 2));
                let mu2 = 1 - (x2[i] >> (n - 1));
                (own * public)
                    .wrapping_add(key.offset[k][i])
                    .wrapping_sub(c2[i].wrapping_mul(key.flip[c1[i] as usize][i]))
                    .wrapping_add(mu2 * (key.wrap[k][i] << (n - s2)))
                    & m
            })
            .collect();
        ctx.open(&y, n).await
    }

    fn read_key(&self, r: &mut BitReader<'_>, party: Party) -> Result<DeferredGainKey, DecodeError> {
        let first = MaskedBitKey::read(self.s1, party, self.len, r)?;
        let second = MaskedBitKey::read(self.s2, party, 2 * self.len, r)?;
        let mut words = |bits: u32| get_words(r, self.len, bits);
        let offset = [words(self.bits)?, words(self.bits)?, words(self.bits)?, words(self.bits)?];
        let flip = [words(self.bits)?, words(self.bits)?];
        let wrap = [words(self.s2)?, words(self.s2)?, words(self.s2)?, words(self.s2)?];
        Ok(DeferredGainKey { party, widths: self.widths(), first, second, offset, flip, wrap })
    }
}

impl DeferredGainKey {
    fn write_key(&self, w: &mut BitWriter) {
        let shape = &self.widths;
        self.first.write(w);
        self.second.write(w);
        for v in self.offset.iter().chain(&self.flip) {
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
