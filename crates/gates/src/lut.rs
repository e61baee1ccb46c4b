//! Table lookup by a full-domain 1-bit DPF (SIGMA; docs/design/fss-building-blocks.md §6.7), with the
//! sign fix.
//!
//! The key is a 1-bit DPF at the mask `r`. Each party expands it over the whole domain
//! (bits `e_b(i)`) and computes `v_b = (−1)^b Σ_i e_b(i)·T[(x̂ − i) mod 2^m]`: the two sum to
//! `σ·T[x]` with a sign `σ = ±1` that neither knows, and the XOR shares of `w = 1{σ = −1}`
//! are bit 1 of `u_b = (−1)^b Σ_i e_b(i) mod 4`. Round 1 opens `ŵ = w ⊕ r_w` and
//! `V̂ = v + r_v`; round 2 opens `(1 − 2w)·V + r_out` through the select formula. Two rounds,
//! `1 + 2ℓ` bits each way.

use std::sync::Arc;

use fss::bitdpf::{self, BitDpfKeys, BitDpfParams};
use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;
use fss::rng::SplitRng;
use fss::{DecodeError, Party};
use rayon::prelude::*;

use crate::dealer::{random_bits, random_words, share, share_bits};
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, get_bits, get_words, key_debug, put_bits, put_words};
use crate::kit::{check_inputs, check_party, party_term};
use crate::online::Ctx;

/// `y = T[x]` for `x ∈ Z_{2^in_bits}` and a public table `T` of `ℓ = out_bits`-bit words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lut {
    /// Input width `m` (at most 20).
    pub in_bits: u32,
    /// Output width `ℓ`.
    pub out_bits: u32,
    /// Elements.
    pub len: usize,
    /// The table, `2^m` words below `2^ℓ`.
    pub table: Arc<[u64]>,
}

/// A party's [`Lut`] key.
#[derive(Clone, PartialEq, Eq)]
pub struct LutKey {
    party: Party,
    out_bits: u32,
    dpf: BitDpfKeys,
    /// XOR share of the sign-bit mask `r_w`.
    rw_bit: Vec<bool>,
    /// Additive shares of `r_v`, `r_w`, `r_w·r_v` and `r_out`.
    rv: Vec<u64>,
    rw: Vec<u64>,
    rwrv: Vec<u64>,
    rout: Vec<u64>,
}
fss::wipe_on_drop!(LutKey { wipe: [rw_bit, rv, rw, rwrv, rout], zeroize: [dpf] });
key_debug!(LutKey);

impl GateKey for LutKey {
    type Shape = Lut;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        self.dpf.write_material(w);
        put_bits(w, &self.rw_bit);
        for v in [&self.rv, &self.rw, &self.rwrv, &self.rout] {
            put_words(w, v, self.out_bits);
        }
    }

    fn read(s: &Lut, party: Party, r: &mut BitReader<'_>) -> Result<LutKey, DecodeError> {
        let params = BitDpfParams::new(s.in_bits).map_err(|_| DecodeError::InvalidField("LUT width"))?;
        let dpf = BitDpfKeys::read_material(params, party, s.len, r)?;
        let rw_bit = get_bits(r, s.len)?;
        let mut f = || get_words(r, s.len, s.out_bits);
        Ok(LutKey { party, out_bits: s.out_bits, dpf, rw_bit, rv: f()?, rw: f()?, rwrv: f()?, rout: f()? })
    }
}

/// Elements expanded together (bounds the memory of the expanded tables).
const EXPAND: usize = 512;

impl Lut {
    /// A lookup gate, checking the table.
    ///
    /// # Errors
    /// [`GateError::Params`] if the table has the wrong size or a word does not fit.
    pub fn new(in_bits: u32, out_bits: u32, len: usize, table: Arc<[u64]>) -> Result<Lut, GateError> {
        let lut = Lut { in_bits, out_bits, len, table };
        lut.check()?;
        Ok(lut)
    }

    fn check(&self) -> Result<(), GateError> {
        if !(1..=20).contains(&self.in_bits) || !(1..=64).contains(&self.out_bits) {
            return Err(GateError::Params(format!("LUT {} → {} bits", self.in_bits, self.out_bits)));
        }
        check_len("table entries", 1 << self.in_bits, self.table.len())?;
        if self.table.iter().any(|&t| t & !mask(self.out_bits) != 0) {
            return Err(GateError::Params("table word wider than the output".into()));
        }
        Ok(())
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
    ) -> Result<(LutKey, LutKey), GateError> {
        self.check()?;
        check_len("masks", self.len, r.len())?;
        check_len("output masks", self.len, rout.len())?;
        let ob = self.out_bits;
        let (d0, d1) = bitdpf::keygen(BitDpfParams::new(self.in_bits)?, r, rng)?;
        let rw = random_bits(rng, self.len);
        let rv = random_words(rng, self.len, ob);
        let rw_ring: Vec<u64> = rw.iter().map(|&b| b as u64).collect();
        let rwrv: Vec<u64> = rw_ring.iter().zip(&rv).map(|(&a, &b)| a * b).collect();
        let (b0, b1) = share_bits(rng, &rw);
        let (v0, v1) = share(rng, &rv, ob);
        let (w0, w1) = share(rng, &rw_ring, ob);
        let (p0, p1) = share(rng, &rwrv, ob);
        let (o0, o1) = share(rng, rout, ob);
        Ok((
            LutKey {
                party: Party::P0,
                out_bits: ob,
                dpf: d0,
                rw_bit: b0,
                rv: v0,
                rw: w0,
                rwrv: p0,
                rout: o0,
            },
            LutKey {
                party: Party::P1,
                out_bits: ob,
                dpf: d1,
                rw_bit: b1,
                rv: v1,
                rw: w1,
                rwrv: p1,
                rout: o1,
            },
        ))
    }

    /// Round 1's shares: the sign bit `w_b` and `v_b` for every element.
    fn expand(&self, party: Party, key: &LutKey, xh: &[u64]) -> Result<(Vec<bool>, Vec<u64>), GateError> {
        let (m, ob) = (self.in_bits, self.out_bits);
        let size = 1usize << m;
        // rev[k] = T[−k mod 2^m], so that T[(x̂ − i) mod 2^m] = rev[(i − x̂) mod 2^m].
        let rev: Vec<u64> = (0..size).map(|k| self.table[(size - k) & (size - 1)]).collect();
        let mut w = vec![false; self.len];
        let mut v = vec![0u64; self.len];
        let chunks = w.par_chunks_mut(EXPAND).zip(v.par_chunks_mut(EXPAND)).enumerate();
        chunks.try_for_each(|(c, (w, v))| -> Result<(), GateError> {
            let start = c * EXPAND;
            let blocks = key.dpf.full_domain(start..start + w.len())?;
            let per = blocks.len() / w.len();
            let mut bits = vec![0u64; size];
            for (j, bl) in blocks.chunks(per).enumerate() {
                let x = (xh[start + j] & mask(m)) as usize;
                // The bits as 0 / all-ones masks, then two contiguous dot products:
                // Σ_{i ≥ x} e(i)·rev[i − x] + Σ_{i < x} e(i)·rev[i + 2^m − x].
                let mut count = 0u64;
                for (i, chunk) in bits.chunks_mut(64).enumerate() {
                    let word = (bl[i / 2] >> (64 * (i % 2))) as u64;
                    count += word.count_ones() as u64;
                    for (b, e) in chunk.iter_mut().enumerate() {
                        *e = ((word >> b) & 1).wrapping_neg();
                    }
                }
                let dot =
                    |e: &[u64], t: &[u64]| e.iter().zip(t).fold(0u64, |s, (&e, &t)| s.wrapping_add(e & t));
                let sum = dot(&bits[x..], &rev[..size - x]).wrapping_add(dot(&bits[..x], &rev[size - x..]));
                w[j] = (party.signed(count) >> 1) & 1 == 1;
                v[j] = party.signed(sum) & mask(ob);
            }
            Ok(())
        })?;
        Ok((w, v))
    }

    /// Round 1: open the masked sign bits `ŵ` and values `V̂`.
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn first(
        &self,
        ctx: &Ctx,
        key: &LutKey,
        xh: &[u64],
    ) -> Result<(Vec<u64>, Vec<u64>), GateError> {
        self.check()?;
        let (w, v) = self.expand(ctx.party(), key, xh)?;
        let ob = self.out_bits;
        let wm: Vec<u64> = w.iter().zip(&key.rw_bit).map(|(&a, &b)| (a ^ b) as u64).collect();
        let vm: Vec<u64> = v.iter().zip(&key.rv).map(|(&a, &b)| a.wrapping_add(b) & mask(ob)).collect();
        let mut opened = ctx.open_many(&[(&wm, 1), (&vm, ob)]).await?;
        let vh = opened.pop().expect("two parts");
        Ok((opened.pop().expect("two parts"), vh))
    }

    /// This party's share of `T[x] + r_out` from round 1's openings:
    /// `[V] − 2·[w·V] + [r_out]`, with `[V] = b·V̂ − [r_v]` and `[w·V]` by the select formula.
    pub fn second_share(&self, party: Party, key: &LutKey, wh: &[u64], vh: &[u64]) -> Vec<u64> {
        let own = party_term(party);
        (0..self.len)
            .map(|i| {
                let (b, y) = (wh[i], vh[i]);
                let vshare = (own * y).wrapping_sub(key.rv[i]);
                let cross = key.rw[i].wrapping_mul(y).wrapping_sub(key.rwrv[i]);
                let cross = if b == 1 { cross.wrapping_neg() } else { cross };
                let wv = (own * b * y).wrapping_sub(b * key.rv[i]).wrapping_add(cross);
                vshare.wrapping_sub(wv.wrapping_mul(2)).wrapping_add(key.rout[i]) & mask(self.out_bits)
            })
            .collect()
    }

    /// The masked output (two rounds).
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &LutKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        let (wh, vh) = self.first(ctx, key, xh).await?;
        ctx.open(&self.second_share(ctx.party(), key, &wh, &vh), self.out_bits).await
    }
}

impl Gate for Lut {
    type Key = LutKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![self.in_bits]
    }

    fn input_lens(&self) -> Vec<usize> {
        vec![self.len]
    }

    fn output_bits(&self) -> u32 {
        self.out_bits
    }

    fn output_len(&self) -> usize {
        self.len
    }

    fn key_shape(&self) -> Lut {
        self.clone()
    }

    fn keygen<R: SplitRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(LutKey, LutKey), GateError> {
        check_inputs(masks_in, &self.input_lens())?;
        self.deal(masks_in[0], mask_out, rng)
    }

    async fn eval(&self, ctx: &Ctx, key: &LutKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check_inputs(inputs, &self.input_lens())?;
        check_party(ctx, key.party)?;
        self.run(ctx, key, inputs[0]).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        inputs[0].iter().map(|&x| self.table[(x & mask(self.in_bits)) as usize]).collect()
    }
}
