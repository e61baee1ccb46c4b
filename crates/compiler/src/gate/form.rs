//! The output form: each exchange's linear forms, computed share by share from the locals,
//! the dealer words and the public variables, and the first exchange's masked bits opened
//! packed.

use std::ops::Range;

use fss::Party;
use fss::ring::mask;
use gates::{Ctx, GateError};

use super::key::CompiledKey;
use super::plan::GateRef;
use crate::parity::words_for;
use crate::program::{FTerm, Form, Program, Src};
use crate::sym::PVar;
use crate::word_column::WordBuf;

/// Where a form reads a public variable from, element by element.
#[derive(Clone, Copy)]
pub(super) enum PvCol<'a> {
    /// Not known yet (opened by a later exchange).
    None,
    /// A column of values.
    Col(&'a [u64]),
    /// A bit of the first exchange's packed opening: bit `b` of word `w` of each element's
    /// `zw` words.
    Bit { words: &'a [u64], zw: usize, w: usize, b: u32 },
}

/// Values of the public variables known before any exchange (input width `n`).
pub(super) fn static_pvar(v: PVar, n: u32) -> Option<Box<dyn Fn(u64) -> u64>> {
    match v {
        PVar::XHat => Some(Box::new(|x| x)),
        PVar::XHatBelow(beta) => Some(Box::new(move |x| (x < beta) as u64)),
        PVar::XHatLow(f) => Some(Box::new(move |x| x & mask(f))),
        PVar::XHatShr { offset, shift } => {
            Some(Box::new(move |x| (x.wrapping_add(offset) & mask(n)) >> shift))
        }
        _ => None,
    }
}

/// The first exchange when it opens only masked bits of packed leaves
/// ([`EvalPlan::packed_first`](super::plan::EvalPlan)): per element, the bit vector
/// `leaves ⊕ masks ⊕ constants` (bit `i` for bit form `i`), opened in one message of as many
/// bytes as the one-bit columns took, into `out` (`words_for(bits)` words per element). No
/// share column per bit, no encoding pass over them.
pub(super) async fn open_masked_bits(
    g: GateRef<'_>,
    ctx: &Ctx,
    key: &CompiledKey,
    packed: &[u64],
    out: &mut [u64],
) -> Result<(), GateError> {
    let (p, len) = (g.p, g.len);
    let ex = &p.exchanges[0];
    let nb = ex.bits.len();
    let (zw, lw) = (words_for(nb), words_for(p.leaves.len()).max(1));
    let party0 = key.party == Party::P0;
    let mut konst = vec![0u64; zw];
    // Form i's leaves (odd coefficients); identity when form i reads leaf i alone.
    let mut reads: Vec<Vec<usize>> = vec![vec![]; nb];
    for (i, f) in ex.bits.iter().enumerate() {
        for t in f.terms.iter().filter(|t| t.coef & 1 == 1) {
            match t.src {
                Src::One if party0 => konst[i / 64] ^= 1 << (i % 64),
                Src::Local(j) => reads[i].push(j as usize),
                _ => {}
            }
        }
    }
    // (Leaves past the opened ones, a mux's alternatives, are masked off the last word.)
    let identity = reads.iter().enumerate().all(|(i, r)| r.as_slice() == [i]);
    let tail = if nb % 64 == 0 { !0u64 } else { (1u64 << (nb % 64)) - 1 };
    let mut mine = vec![0u64; len * zw];
    for ((m, z), acc) in
        mine.chunks_exact_mut(zw).zip(key.zbits.chunks_exact(zw)).zip(packed.chunks_exact(lw))
    {
        for w in 0..zw {
            m[w] = z[w] ^ konst[w];
        }
        if identity {
            m.iter_mut().zip(acc).for_each(|(m, a)| *m ^= a);
            m[zw - 1] ^= acc[zw - 1] & !tail;
        } else {
            for (i, r) in reads.iter().enumerate() {
                let bit = r.iter().fold(0u64, |b, &j| b ^ (acc[j / 64] >> (j % 64)));
                m[i / 64] ^= (bit & 1) << (i % 64);
            }
        }
    }
    ctx.open_packed_bits_into(&mine, nb as u32, &mut out[..len * zw]).await?;
    Ok(())
}

/// A party's XOR shares of a masked bit ([`bit_form`](super::plan::bit_form)) for every
/// element: one pass per term with an odd coefficient, the leaves read from `packed` when
/// they are kept there.
pub(super) fn eval_bit_form(
    g: GateRef<'_>,
    f: &Form,
    key: &CompiledKey,
    locals: &[u64],
    packed: &[u64],
    out: &mut [u64],
) {
    let (len, leaves) = (g.len, g.p.leaves.len());
    let lw = words_for(leaves).max(1);
    let odd = || f.terms.iter().filter(|t| t.coef & 1 == 1);
    let ones = odd().filter(|t| matches!(t.src, Src::One)).count() as u64;
    out.fill(ones & (key.party == Party::P0) as u64 & 1);
    for t in odd() {
        match t.src {
            Src::One => {}
            Src::Word(j) => {
                key.words[j as usize].xor_low_bits(&mut out[..len]);
            }
            Src::Local(j) if g.plan.packed_leaves && (j as usize) < leaves => {
                let (w, b) = (j as usize / 64, j % 64);
                for (o, acc) in out.iter_mut().zip(packed.chunks_exact(lw)) {
                    *o ^= (acc[w] >> b) & 1;
                }
            }
            Src::Local(j) => {
                let col = &locals[j as usize * len..(j as usize + 1) * len];
                out.iter_mut().zip(col).for_each(|(o, &v)| *o ^= v & 1);
            }
        }
    }
}

/// Elements per block of [`eval_form`].
const BLOCK: usize = 512;

/// A party's shares of a linear form for every element.
///
/// Term by term over blocks of elements: each public monomial the form uses is computed
/// once per element of the block, and each term is one multiply-add per element over
/// contiguous columns (a Φ of a split view has hundreds of terms).
pub(super) fn eval_form(
    g: GateRef<'_>,
    f: &Form,
    key: &CompiledKey,
    locals: &[u64],
    pv: &[PvCol<'_>],
    out: &mut [u64],
) {
    let fp = FormPlan::new(g.p, f, pv, key.party == Party::P0);
    let m = mask(f.bits);
    let out = &mut out[..g.len];
    let one = if f.bits == 1 { 1 } else { u64::MAX };
    // Columns of a block's length (a gate of a few elements, say a row's `1/σ`, allocates
    // and clears only that).
    let stride = g.len.clamp(1, BLOCK);
    let mut buf = FormBuffers {
        stride,
        cols: vec![0u64; fp.factors.len() * stride],
        lcols: vec![0u64; fp.lused.len() * stride],
        tmp: vec![0u64; stride],
        wbuf: WordBuf::default(),
    };
    for e0 in (0..g.len).step_by(stride) {
        let e1 = (e0 + stride).min(g.len);
        let w = e1 - e0;
        fp.monomial_columns(e0..e1, stride, &mut buf.cols);
        for (c, &j) in fp.lused.iter().enumerate() {
            let col = &mut buf.lcols[c * stride..c * stride + w];
            for (v, e) in col.iter_mut().zip(e0..e1) {
                *v = locals[j * g.len + e] & one;
            }
        }
        let acc = &mut out[e0..e1];
        acc.fill(0);
        fp.sum_terms(f, key, e0..e1, &mut buf, acc);
    }
    out.iter_mut().for_each(|a| *a &= m);
}

/// The used public monomials' factors in [`eval_form`], all monomials' in two flat lists
/// (the plan is made per call, for gates of one element too, and a `1/σ` grid's form has
/// hundreds of monomials: a list of its own per monomial was most of such a call): opened
/// bits read packed, as `(word, mask)` pairs whose AND must be all ones (a bit's powers are
/// the bit), and columns with their powers; monomial `c`'s are `bits[at[c].0..at[c + 1].0]`
/// and `cols[at[c].1..at[c + 1].1]`.
struct MonoFactors<'a> {
    bits: Vec<PackedBits>,
    cols: Vec<PowerCol<'a>>,
    at: Vec<(usize, usize)>,
}

/// Opened bits of a word of a packed opening: `(word, mask)`.
type PackedBits = (usize, u64);

/// A public column and its power.
type PowerCol<'a> = (&'a [u64], u8);

impl<'a> MonoFactors<'a> {
    /// Monomials.
    fn len(&self) -> usize {
        self.at.len() - 1
    }

    /// Monomial `c`'s packed bits and columns.
    fn of(&self, c: usize) -> (&[PackedBits], &[PowerCol<'a>]) {
        let ((b0, c0), (b1, c1)) = (self.at[c], self.at[c + 1]);
        (&self.bits[b0..b1], &self.cols[c0..c1])
    }
}

/// [`eval_form`]'s block buffers: the used monomials' and locals' columns (`stride` words
/// each), a monomial's term sum, and a narrow dealer word's block, widened.
struct FormBuffers {
    stride: usize,
    cols: Vec<u64>,
    lcols: Vec<u64>,
    tmp: Vec<u64>,
    wbuf: WordBuf,
}

/// What [`eval_form`] works out once per form: the public monomials and locals it reads
/// (a column slot each), its terms grouped by monomial, and the fused passes.
struct FormPlan<'a> {
    party0: bool,
    /// Column slot of each public monomial of the program (`usize::MAX`: unused), and the
    /// used ones' factors, by slot.
    slot: Vec<usize>,
    factors: MonoFactors<'a>,
    /// The packed opening the monomials read, if any: its words and words per element.
    packed_bits: Option<(&'a [u64], usize)>,
    /// Column slot of each local (`usize::MAX`: unread), and the locals read, by slot.
    lslot: Vec<usize>,
    lused: Vec<usize>,
    /// Term indices grouped by public monomial (terms without one first), in term order:
    /// group `g` is `(pmono, terms[at..end])` with `(pmono, at, end) = groups[g]`.
    groups: Vec<(Option<u32>, usize, usize)>,
    terms: Vec<usize>,
    /// Per group: a monomial with one dealer word and constants (the usual case: the
    /// compiler folds a monomial's dealer terms into one word) takes one fused pass: its
    /// column slot, the word's coefficient and index, and the constants (party 0's).
    fused: Vec<Option<(usize, u64, usize, u64)>>,
    /// Per slot: with one word of opened bits per element, a fused monomial that is one
    /// opened bit alone is read from the opening in the fused pass, without a column of its
    /// own (GeLU: half of its monomials).
    lone_bit: Vec<Option<u32>>,
}

impl<'a> FormPlan<'a> {
    fn new(p: &Program, f: &Form, pv: &[PvCol<'a>], party0: bool) -> FormPlan<'a> {
        let (slot, used) = slots(p.pmonos.len(), f.terms.iter().filter_map(|t| t.pmono.map(|i| i as usize)));
        let locals =
            f.terms.iter().filter_map(|t| if let Src::Local(j) = t.src { Some(j as usize) } else { None });
        let (lslot, lused) = slots(p.locals as usize, locals);
        // Each used monomial's factors; the packed opening they read, if any.
        let mut packed_bits: Option<(&[u64], usize)> = None;
        let mut factors = MonoFactors { bits: vec![], cols: vec![], at: Vec::with_capacity(used.len() + 1) };
        factors.at.push((0, 0));
        for &i in &used {
            let b0 = factors.bits.len();
            for &(s, x) in &p.pmonos[i] {
                match pv[s as usize] {
                    PvCol::Bit { words, zw, w, b } => {
                        packed_bits = Some((words, zw));
                        match factors.bits[b0..].iter_mut().find(|(w2, _)| *w2 == w) {
                            Some((_, m)) => *m |= 1 << b,
                            None => factors.bits.push((w, 1 << b)),
                        }
                    }
                    PvCol::Col(c) => factors.cols.push((c, x)),
                    PvCol::None => unreachable!("a form reads only public variables opened before it"),
                }
            }
            factors.at.push((factors.bits.len(), factors.cols.len()));
        }
        // (Each monomial's group found through its slot: a search of the groups per term
        // was quadratic, and the plan is made per call, for gates of one element too.)
        // Groups numbered in order of first use, then their terms placed by a counting sort.
        let mut group_pmono: Vec<Option<u32>> = vec![None];
        let mut group_of = vec![usize::MAX; used.len()];
        let term_group: Vec<usize> = f
            .terms
            .iter()
            .map(|t| match t.pmono {
                None => 0,
                Some(i) => {
                    let s = slot[i as usize];
                    if group_of[s] == usize::MAX {
                        group_of[s] = group_pmono.len();
                        group_pmono.push(t.pmono);
                    }
                    group_of[s]
                }
            })
            .collect();
        let mut start = vec![0usize; group_pmono.len() + 1];
        term_group.iter().for_each(|&g| start[g + 1] += 1);
        for g in 0..group_pmono.len() {
            start[g + 1] += start[g];
        }
        let groups: Vec<(Option<u32>, usize, usize)> =
            group_pmono.iter().enumerate().map(|(g, &pm)| (pm, start[g], start[g + 1])).collect();
        let mut terms = vec![0usize; f.terms.len()];
        for (ti, &g) in term_group.iter().enumerate() {
            terms[start[g]] = ti;
            start[g] += 1;
        }
        let fused: Vec<_> =
            groups.iter().map(|&(pmono, a, b)| fuse(f, party0, &slot, pmono, &terms[a..b])).collect();
        let mut lone_bit: Vec<Option<u32>> = vec![None; factors.len()];
        if let Some((_, 1)) = packed_bits {
            for &(sl, ..) in fused.iter().flatten() {
                if let ([(0, m)], []) = factors.of(sl)
                    && m.count_ones() == 1
                {
                    lone_bit[sl] = Some(m.trailing_zeros());
                }
            }
        }
        FormPlan { party0, slot, factors, packed_bits, lslot, lused, groups, terms, fused, lone_bit }
    }

    /// The used public monomials of elements `range`, a column of `stride` words per slot
    /// (lone bits excepted: the fused pass reads them from the opening).
    fn monomial_columns(&self, range: Range<usize>, stride: usize, cols: &mut [u64]) {
        let (e0, e1) = (range.start, range.end);
        let w = e1 - e0;
        for c in 0..self.factors.len() {
            if self.lone_bit[c].is_some() {
                continue;
            }
            let (bits, factors) = self.factors.of(c);
            let col = &mut cols[c * stride..c * stride + w];
            match (bits, self.packed_bits) {
                ([], _) | (_, None) => col.fill(1),
                (&[(wi, m)], Some((words, zw))) => {
                    let src = &words[e0 * zw..e1 * zw];
                    if zw == 1 {
                        col.iter_mut().zip(src).for_each(|(v, &o)| *v = (o & m == m) as u64);
                    } else {
                        col.iter_mut()
                            .zip(src.chunks_exact(zw))
                            .for_each(|(v, o)| *v = (o[wi] & m == m) as u64);
                    }
                }
                (_, Some((words, zw))) => {
                    for (v, o) in col.iter_mut().zip(words[e0 * zw..e1 * zw].chunks_exact(zw)) {
                        *v = bits.iter().all(|&(wi, m)| o[wi] & m == m) as u64;
                    }
                }
            }
            for &(src, x) in factors {
                let src = &src[e0..e1];
                if x == 1 {
                    col.iter_mut().zip(src).for_each(|(v, &p)| *v = v.wrapping_mul(p));
                } else {
                    col.iter_mut().zip(src).for_each(|(v, &p)| *v = v.wrapping_mul(p.wrapping_pow(x as u32)));
                }
            }
        }
    }

    /// Adds form `f`'s terms of elements `range` to `acc`, from the block's columns in
    /// `buf`. Terms by public monomial: `Σ_t c_t·pm·v_t = pm·Σ_t c_t·v_t`, one product per
    /// term and one per monomial instead of two per term.
    fn sum_terms(
        &self,
        f: &Form,
        key: &CompiledKey,
        range: Range<usize>,
        buf: &mut FormBuffers,
        acc: &mut [u64],
    ) {
        let (e0, e1) = (range.start, range.end);
        let w = e1 - e0;
        let FormBuffers { stride, cols, lcols, tmp, wbuf } = buf;
        let stride = *stride;
        for (&(pmono, a, b), fused) in self.groups.iter().zip(&self.fused) {
            let group = &self.terms[a..b];
            if let &Some((sl, c, j, konst)) = fused {
                let v = key.words[j].block(e0..e1, wbuf);
                if let (Some(b), Some((words, _))) = (self.lone_bit[sl], self.packed_bits) {
                    for ((a, &v), &o) in acc.iter_mut().zip(v).zip(&words[e0..e1]) {
                        let pm = ((o >> b) & 1).wrapping_neg();
                        *a = a.wrapping_add(c.wrapping_mul(v).wrapping_add(konst) & pm);
                    }
                    continue;
                }
                let col = &cols[sl * stride..][..w];
                for ((a, &v), &pm) in acc.iter_mut().zip(v).zip(col) {
                    *a = a.wrapping_add(pm.wrapping_mul(c.wrapping_mul(v).wrapping_add(konst)));
                }
                continue;
            }
            let sum: &mut [u64] = match pmono {
                None => &mut *acc,
                Some(_) => {
                    tmp[..w].fill(0);
                    &mut tmp[..w]
                }
            };
            for &ti in group {
                let t = &f.terms[ti];
                match t.src {
                    Src::One if !self.party0 => {}
                    Src::One => sum.iter_mut().for_each(|a| *a = a.wrapping_add(t.coef)),
                    Src::Word(j) => {
                        let v = key.words[j as usize].block(e0..e1, wbuf);
                        for (a, &v) in sum.iter_mut().zip(v) {
                            *a = a.wrapping_add(t.coef.wrapping_mul(v));
                        }
                    }
                    Src::Local(j) => {
                        let c = self.lslot[j as usize];
                        for (a, &v) in sum.iter_mut().zip(&lcols[c * stride..c * stride + w]) {
                            *a = a.wrapping_add(t.coef.wrapping_mul(v));
                        }
                    }
                }
            }
            if let Some(i) = pmono {
                let c = self.slot[i as usize];
                let col = &cols[c * stride..c * stride + w];
                for ((a, &v), &pm) in acc.iter_mut().zip(&tmp[..w]).zip(col) {
                    *a = a.wrapping_add(pm.wrapping_mul(v));
                }
            }
        }
    }
}

/// A slot per distinct index of `used` (out of `count`), in order of first use: each
/// index's slot (`usize::MAX` where unused), and the indices by slot.
fn slots(count: usize, used: impl Iterator<Item = usize>) -> (Vec<usize>, Vec<usize>) {
    let (mut slot, mut by_slot) = (vec![usize::MAX; count], vec![]);
    for i in used {
        if slot[i] == usize::MAX {
            slot[i] = by_slot.len();
            by_slot.push(i);
        }
    }
    (slot, by_slot)
}

/// The fused pass of a group of terms (`group`, on public monomial `pmono`), when it is one
/// dealer word and constants: the monomial's column slot, the word's coefficient and index,
/// and the constants (party 0's).
fn fuse(
    f: &Form,
    party0: bool,
    slot: &[usize],
    pmono: Option<u32>,
    group: &[usize],
) -> Option<(usize, u64, usize, u64)> {
    let konst = group
        .iter()
        .filter(|&&ti| party0 && f.terms[ti].src == Src::One)
        .fold(0u64, |k, &ti| k.wrapping_add(f.terms[ti].coef));
    let mut rest = group.iter().map(|&ti| &f.terms[ti]).filter(|t| t.src != Src::One);
    match (pmono, rest.next(), rest.next()) {
        (Some(i), Some(&FTerm { coef, src: Src::Word(j), .. }), None) => {
            Some((slot[i as usize], coef, j as usize, konst))
        }
        _ => None,
    }
}
