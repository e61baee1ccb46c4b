//! A party's key for a compiled gate: its parts, its shape, its encoding.

use std::sync::Arc;

use fss::bitdpf::{BitDpfKeys, BitDpfParams};
use fss::codec::{BitReader, BitWriter};
use fss::dcf::{DcfKeys, DcfParams};
use fss::{DecodeError, Party};
use gates::GateKey;
use gates::keyio::{get_bits, get_words, put_bits, put_words};
use zeroize::{Zeroize, ZeroizeOnDrop};

use super::plan::{GateRef, plan_of};
use crate::parity::words_for;
use crate::predicate::Family;
use crate::program::{CmpBackend, LookupPlan, Program, Src, table_params};
use crate::word_column::WordColumn;

/// The key shape: the program and the element count.
#[derive(Clone, Debug)]
pub struct CompiledShape {
    /// The program.
    pub program: Arc<Program>,
    /// Elements.
    pub len: usize,
}

/// One party's key for a [`CompiledGate`](super::CompiledGate) (zeroized on drop).
#[derive(Clone, PartialEq, Eq)]
pub struct CompiledKey {
    pub(super) party: Party,
    /// Stored width of each dealer word, and the output ring width (public shape).
    pub(super) widths: Vec<u32>,
    pub(super) l: u32,
    /// Elements.
    pub(super) len: usize,
    /// Per family: the comparison keys (one per element, or one per element and query).
    pub(super) cmp: Vec<BitDpfKeys>,
    /// Per family (per-threshold keying only): XOR shares of the carries, element-major.
    pub(super) carries: Vec<Vec<bool>>,
    /// Dealer words, word-major, each at the narrowest of 1, 32 or 64 bits.
    pub(super) words: Vec<WordColumn>,
    /// The masks of the first exchange's masked bits, packed per element (see
    /// [`masked_bit_masks`]); derived from `words`, not stored.
    pub(super) zbits: Vec<u64>,
    /// The table lookup's keys (one per element).
    pub(super) table: Option<fss::adpf::AdpfKeys>,
    /// The DCF lookup's keys (element-major) and base shares (element-major).
    pub(super) dcf: Option<DcfKeys>,
    pub(super) dcf_base: Vec<u64>,
}

impl Zeroize for CompiledKey {
    fn zeroize(&mut self) {
        // (Bulk wipes: `Vec::zeroize` writes element by element.)
        self.cmp.iter_mut().for_each(Zeroize::zeroize);
        self.carries.iter_mut().for_each(fss::wipe::wipe);
        self.words.iter_mut().for_each(WordColumn::wipe);
        fss::wipe::wipe(&mut self.zbits);
        self.table.zeroize();
        self.dcf.zeroize();
        fss::wipe::wipe(&mut self.dcf_base);
    }
}

impl Drop for CompiledKey {
    fn drop(&mut self) {
        self.zeroize();
    }
}

impl ZeroizeOnDrop for CompiledKey {}

impl std::fmt::Debug for CompiledKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKey").field("party", &self.party).finish_non_exhaustive()
    }
}

/// The comparison keys' parameters for family `f`.
pub(super) fn family_params(f: &Family) -> BitDpfParams {
    BitDpfParams::new(f.bits).expect("valid family width")
}

/// Comparison keys of family `f` for `len` elements.
fn family_keys(p: &Program, len: usize, f: &Family) -> usize {
    match p.cmp {
        CmpBackend::OneKey => len,
        CmpBackend::PerThreshold => len * f.points.len(),
    }
}

/// The DCF lookup's parameters and its keys per element (`None` without a DCF lookup).
pub(super) fn dcf_params(p: &Program) -> Option<(DcfParams, usize)> {
    match &p.lookup {
        LookupPlan::Dcf(d) => Some((
            DcfParams::new(p.in_bits(), p.out_bits(), d.words as u32).expect("valid DCF shape"),
            p.hat_intervals() - 1,
        )),
        _ => None,
    }
}

/// A party's masks of the first exchange's masked bits, packed per element
/// (`⌈bits / 64⌉` words each): bit `i` is the XOR of the low bits of bit form `i`'s words
/// (a word's low bit is an XOR share of the mask it holds). Empty unless that exchange is
/// opened packed (`packed_first`: the plan's [`EvalPlan::packed_first`](super::plan::EvalPlan)).
pub(super) fn masked_bit_masks(
    p: &Program,
    packed_first: bool,
    words: &[WordColumn],
    len: usize,
) -> Vec<u64> {
    if !packed_first {
        return vec![];
    }
    let ex = &p.exchanges[0];
    let zw = words_for(ex.bits.len());
    let mut z = vec![0u64; len * zw];
    for (i, f) in ex.bits.iter().enumerate() {
        for t in f.terms.iter().filter(|t| t.coef & 1 == 1) {
            if let Src::Word(j) = t.src {
                let col = &words[j as usize];
                if zw == 1 {
                    col.xor_low_bits_shifted(&mut z, i as u32);
                } else {
                    col.each_low_bit(len, |e, bit| z[e * zw + i / 64] ^= bit << (i % 64));
                }
            }
        }
    }
    z
}

impl GateKey for CompiledKey {
    type Shape = CompiledShape;

    fn party(&self) -> Party {
        self.party
    }

    fn write(&self, w: &mut BitWriter) {
        for (k, c) in self.cmp.iter().zip(&self.carries) {
            k.write_material(w);
            put_bits(w, c);
        }
        for (v, &width) in self.words.iter().zip(&self.widths) {
            v.write(w, self.len, width);
        }
        if let Some(t) = &self.table {
            t.write_material(w);
        }
        if let Some(d) = &self.dcf {
            d.write_material(w);
            put_words(w, &self.dcf_base, self.l);
        }
    }

    fn read(s: &CompiledShape, party: Party, r: &mut BitReader<'_>) -> Result<CompiledKey, DecodeError> {
        let plan = plan_of(&s.program);
        read_key(GateRef { p: &s.program, plan: &plan, len: s.len }, party, r)
    }
}

/// Party `party`'s key for `g`, read as [`CompiledKey::write`] wrote it.
fn read_key(g: GateRef<'_>, party: Party, r: &mut BitReader<'_>) -> Result<CompiledKey, DecodeError> {
    let p = g.p;
    let mut cmp = vec![];
    let mut carries = vec![];
    for f in &p.families {
        let count = family_keys(p, g.len, f);
        cmp.push(BitDpfKeys::read_material(family_params(f), party, count, r)?);
        let c = if p.cmp == CmpBackend::PerThreshold { count } else { 0 };
        carries.push(get_bits(r, c)?);
    }
    let words: Vec<WordColumn> =
        p.words.iter().map(|w| WordColumn::read(r, g.len, w.width)).collect::<Result<_, _>>()?;
    let table = match &p.lookup {
        LookupPlan::Table(t) => {
            Some(fss::adpf::AdpfKeys::read_material(table_params(t.domain_bits, g.l()), party, g.len, r)?)
        }
        _ => None,
    };
    let (dcf, dcf_base) = match dcf_params(p) {
        Some((params, per)) => {
            let LookupPlan::Dcf(d) = &p.lookup else { unreachable!("dcf") };
            let k = DcfKeys::read_material(params, party, g.len * per, r)?;
            (Some(k), get_words(r, g.len * d.words, g.l())?)
        }
        None => (None, vec![]),
    };
    let widths = p.words.iter().map(|w| w.width).collect();
    let zbits = masked_bit_masks(p, g.plan.packed_first, &words, g.len);
    Ok(CompiledKey { party, widths, l: g.l(), len: g.len, cmp, carries, words, zbits, table, dcf, dcf_base })
}
