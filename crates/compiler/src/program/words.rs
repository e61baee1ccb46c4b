//! The word builder: symbolic polynomials turned into linear forms, allocating public
//! monomials and dealer words, then the dealer terms of one monomial combined into one word
//! and the opened bits' one-bit masks read from ring words.

use std::collections::HashMap;

use fss::ring::mask;

use super::ir::{Exchange, FTerm, Form, Src, WordDef};
use crate::sym::{Mono, PVar, SVar, Sym, valuation};

/// Turns syms into forms, allocating public monomials and dealer words.
pub(super) struct Builder {
    pub(super) pvars: Vec<PVar>,
    pvar_ids: HashMap<PVar, u32>,
    pub(super) pmonos: Vec<Vec<(u32, u8)>>,
    pmono_ids: HashMap<Vec<(u32, u8)>, u32>,
    pub(super) words: Vec<WordDef>,
    word_ids: HashMap<(u32, Mono<SVar>), u32>,
}

impl Builder {
    pub(super) fn new() -> Builder {
        Builder {
            pvars: vec![],
            pvar_ids: HashMap::new(),
            pmonos: vec![],
            pmono_ids: HashMap::new(),
            words: vec![],
            word_ids: HashMap::new(),
        }
    }

    fn pmono(&mut self, m: &Mono<PVar>) -> Option<u32> {
        if m.is_empty() {
            return None;
        }
        let ids: Vec<(u32, u8)> = m
            .iter()
            .map(|&(v, e)| {
                let n = self.pvars.len() as u32;
                let id = *self.pvar_ids.entry(v).or_insert(n);
                if id == n {
                    self.pvars.push(v);
                }
                (id, e)
            })
            .collect();
        let n = self.pmonos.len() as u32;
        let id = *self.pmono_ids.entry(ids.clone()).or_insert(n);
        if id == n {
            self.pmonos.push(ids);
        }
        Some(id)
    }

    /// In every arithmetic form, the dealer terms that share a public monomial become one
    /// word: `pm·Σ_t c_t·w_t = 2^v·pm·W` with `W = Σ_t (c_t / 2^v)·w_t` (of `bits − v`
    /// bits, `v` the least valuation of the `c_t`). The dealer knows every `w_t`, so it deals
    /// `W` directly: a party then does one multiply-add per monomial instead of one per
    /// term (GeLU's output form: 163 → 72 terms). Words no form reads any more leave the
    /// key, and every word's width is recomputed from the uses left.
    pub(super) fn combine_by_pmono(&mut self, exchanges: &mut [Exchange]) {
        for f in exchanges.iter_mut().flat_map(Exchange::forms_mut) {
            if f.bits == 1 {
                continue;
            }
            let bits = f.bits;
            // Groups in order of their first term.
            let mut groups: Vec<(u32, Vec<usize>)> = vec![];
            let mut group_of: HashMap<u32, usize> = HashMap::new();
            for (ti, t) in f.terms.iter().enumerate() {
                let (Some(pm), Src::Word(id)) = (t.pmono, t.src) else { continue };
                if self.words[id as usize].out_mask.is_some() {
                    continue;
                }
                let g = *group_of.entry(pm).or_insert_with(|| {
                    groups.push((pm, vec![]));
                    groups.len() - 1
                });
                groups[g].1.push(ti);
            }
            let mut drop = vec![false; f.terms.len()];
            let mut added = vec![];
            for (pm, g) in groups.into_iter().filter(|(_, g)| g.len() > 1) {
                let v = g.iter().map(|&ti| valuation(f.terms[ti].coef, bits)).min().unwrap_or(bits);
                let wm = mask(bits - v);
                // Monomials in order of their first appearance.
                let mut value: Vec<(u64, Mono<SVar>)> = vec![];
                let mut at: HashMap<&Mono<SVar>, usize> = HashMap::new();
                for &ti in &g {
                    drop[ti] = true;
                    let Src::Word(id) = f.terms[ti].src else { unreachable!("grouped word terms") };
                    let c = (f.terms[ti].coef & mask(bits)) >> v;
                    for (wc, mono) in &self.words[id as usize].value {
                        let add = c.wrapping_mul(*wc);
                        match at.get(mono) {
                            Some(&k) => value[k].0 = value[k].0.wrapping_add(add) & wm,
                            None => {
                                at.insert(mono, value.len());
                                value.push((add & wm, mono.clone()));
                            }
                        }
                    }
                }
                value.retain(|(c, _)| *c != 0);
                if value.is_empty() {
                    continue;
                }
                let id = self.words.len() as u32;
                self.words.push(WordDef { bits, width: bits - v, value, out_mask: None });
                added.push(FTerm { coef: 1u64 << v, pmono: Some(pm), src: Src::Word(id) });
            }
            if added.is_empty() {
                continue;
            }
            let mut kept: Vec<FTerm> =
                f.terms.iter().zip(&drop).filter(|(_, d)| !**d).map(|(t, _)| *t).collect();
            kept.extend(added);
            f.terms = kept;
        }
        // Widths from the uses left; unread words leave.
        let mut width = vec![0u32; self.words.len()];
        let mut read = vec![false; self.words.len()];
        for e in exchanges.iter() {
            for f in e.forms() {
                for t in &f.terms {
                    if let Src::Word(id) = t.src {
                        read[id as usize] = true;
                        width[id as usize] = width[id as usize].max(f.bits - valuation(t.coef, f.bits));
                    }
                }
            }
        }
        self.keep_words(exchanges, |i, w| {
            if read[i] && w.out_mask.is_none() {
                w.width = width[i];
            }
            read[i]
        });
    }

    /// Keep the words for which `keep(index, word)` holds (it may also adjust the word) and
    /// renumber the forms' references to them.
    fn keep_words(&mut self, exchanges: &mut [Exchange], mut keep: impl FnMut(usize, &mut WordDef) -> bool) {
        let mut new_id = vec![u32::MAX; self.words.len()];
        let mut kept = vec![];
        for (i, mut w) in std::mem::take(&mut self.words).into_iter().enumerate() {
            if keep(i, &mut w) {
                new_id[i] = kept.len() as u32;
                kept.push(w);
            }
        }
        self.words = kept;
        self.word_ids.clear();
        for e in exchanges.iter_mut() {
            for f in e.forms_mut() {
                for t in f.terms.iter_mut() {
                    if let Src::Word(id) = &mut t.src {
                        *id = new_id[*id as usize];
                    }
                }
            }
        }
    }

    /// An opened bit's form adds a one-bit word `z_j`. Where a ring word holds `z_j` too,
    /// the low bit of a party's additive share of it is an XOR share of `z_j` (bit 0 of a
    /// sum mod `2^w` is the XOR of the bits 0): the form reads that word instead and the
    /// one-bit word leaves the key.
    pub(super) fn share_mask_bits(&mut self, exchanges: &mut [Exchange]) {
        let mut reads = vec![0usize; self.words.len()];
        for e in exchanges.iter() {
            for t in e.forms().flat_map(|f| f.terms.iter()) {
                if let Src::Word(id) = t.src {
                    reads[id as usize] += 1;
                }
            }
        }
        // The first ring word holding each lone monomial once.
        let mut ring: HashMap<&Mono<SVar>, usize> = HashMap::new();
        for (i, v) in self.words.iter().enumerate() {
            if let (true, [(1, vm)]) =
                (v.bits > 1 && v.width >= 1 && v.out_mask.is_none(), v.value.as_slice())
            {
                ring.entry(vm).or_insert(i);
            }
        }
        let mut drop = vec![false; self.words.len()];
        for f in exchanges.iter_mut().flat_map(|e| e.bits.iter_mut()) {
            for t in f.terms.iter_mut() {
                let Src::Word(id) = t.src else { continue };
                let w = &self.words[id as usize];
                if w.bits != 1 || w.out_mask.is_some() || t.pmono.is_some() || reads[id as usize] != 1 {
                    continue;
                }
                let [(1, m)] = w.value.as_slice() else { continue };
                if let Some(&r) = ring.get(m) {
                    drop[id as usize] = true;
                    t.src = Src::Word(r as u32);
                }
            }
        }
        if !drop.contains(&true) {
            return;
        }
        self.keep_words(exchanges, |i, _| !drop[i]);
    }

    /// The form of `s`; dealer terms with a constant public factor go into one word per form
    /// (with output `out`'s mask added).
    pub(super) fn form(&mut self, s: &Sym, out: Option<usize>) -> Form {
        let bits = s.bits();
        let mut terms = vec![];
        let mut folded: Vec<(u64, Mono<SVar>)> = vec![];
        for (p, m, c) in s.terms() {
            let pm = self.pmono(p);
            let src = if m.is_empty() {
                Src::One
            } else if let [(SVar::Local(j), 1)] = m.as_slice() {
                Src::Local(*j)
            } else if pm.is_none() {
                folded.push((c, m.clone()));
                continue;
            } else {
                let n = self.words.len() as u32;
                let id = *self.word_ids.entry((bits, m.clone())).or_insert(n);
                if id == n {
                    self.words.push(WordDef { bits, width: 0, value: vec![(1, m.clone())], out_mask: None });
                }
                let w = &mut self.words[id as usize];
                w.width = w.width.max(bits - valuation(c, bits));
                Src::Word(id)
            };
            terms.push(FTerm { coef: c, pmono: pm, src });
        }
        if !folded.is_empty() || out.is_some() {
            let id = self.words.len() as u32;
            let width = if out.is_some() {
                bits
            } else {
                folded.iter().map(|(c, _)| bits - valuation(*c, bits)).max().unwrap_or(0)
            };
            self.words.push(WordDef { bits, width, value: folded, out_mask: out });
            terms.push(FTerm { coef: 1, pmono: None, src: Src::Word(id) });
        }
        Form { bits, terms }
    }
}
