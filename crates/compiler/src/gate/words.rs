//! The dealer words of a compiled gate: polynomials in the dealer's secrets (the input
//! mask, the opened bits' masks, the Beaver masks, the secret constants), evaluated for a
//! chunk of elements at a time.
//!
//! A program's words share their monomials (GeLU at n = 50 in rows of `2^7`: 55 words, 148
//! terms over 46 distinct monomials). [`WordPlan`] lists the distinct monomials once and
//! each word as a sum over them, so that a chunk computes each monomial once and each word
//! in one pass per term (evaluated monomial by monomial for every word, a compiled GeLU's
//! dealer spent ~40 % of its time here).

use std::collections::HashMap;

use fss::ring::mask;
use fss::rng::SplitRng;
use gates::GateError;

use crate::program::Program;
use crate::sym::SVar;
use crate::word_column::WordColumn;

/// A program's dealer words as sums over their distinct monomials (made once per program,
/// kept in its evaluation plan).
#[derive(Clone, Debug, Default)]
pub(super) struct WordPlan {
    /// The distinct monomials, each as its factors (variable, exponent ≥ 1).
    monos: Vec<Vec<(SVar, u32)>>,
    /// Per word: its constant and its terms (coefficient, index into `monos`).
    words: Vec<(u64, Vec<(u64, usize)>)>,
}

impl WordPlan {
    pub(super) fn new(p: &Program) -> WordPlan {
        let mut monos: Vec<Vec<(SVar, u32)>> = vec![];
        let mut index: HashMap<Vec<(SVar, u32)>, usize> = HashMap::new();
        let words = p
            .words
            .iter()
            .map(|w| {
                let mut konst = 0u64;
                let mut terms = vec![];
                for (c, mono) in &w.value {
                    let factors: Vec<(SVar, u32)> =
                        mono.iter().filter(|&&(_, e)| e > 0).map(|&(v, e)| (v, e as u32)).collect();
                    if factors.is_empty() {
                        konst = konst.wrapping_add(*c);
                        continue;
                    }
                    let k = *index.entry(factors).or_insert_with_key(|f| {
                        monos.push(f.clone());
                        monos.len() - 1
                    });
                    terms.push((*c, k));
                }
                (konst, terms)
            })
            .collect();
        WordPlan { monos, words }
    }
}

/// The dealer's secrets that dealer words are polynomials in, per element.
pub(super) struct Secrets<'a> {
    /// Input masks.
    pub(super) r: &'a [u64],
    /// Masks of the opened bits.
    pub(super) z: &'a [Vec<bool>],
    /// Masks of the Beaver products.
    pub(super) u: &'a [Vec<u64>],
    /// The spec's secret constants.
    pub(super) kappa: &'a [u64],
}

impl Secrets<'_> {
    /// `t[q] ← v_e^exp` (the monomial's `first` factor) or `t[q] ← t[q] · v_e^exp` for
    /// variable `v` of the elements `e = at + q`: a loop over the chunk per factor, which
    /// vectorises.
    fn factor(&self, t: &mut [u64], at: usize, (v, exp): (SVar, u32), first: bool) -> Result<(), GateError> {
        let pow = |x: u64| if exp == 1 { x } else { x.wrapping_pow(exp) };
        let e = at..at + t.len();
        match v {
            SVar::Z(j) => {
                let z = &self.z[j as usize][e];
                // A bit's power is the bit.
                if first {
                    t.iter_mut().zip(z).for_each(|(a, &b)| *a = b as u64);
                } else {
                    t.iter_mut().zip(z).for_each(|(a, &b)| *a &= (b as u64).wrapping_neg());
                }
            }
            SVar::R => apply(t, first, self.r[e].iter().map(|&x| pow(x))),
            SVar::RShr(f) => apply(t, first, self.r[e].iter().map(|&x| pow(x >> f))),
            SVar::Kappa(k) => apply(t, first, std::iter::repeat(pow(self.kappa[k as usize]))),
            SVar::Beaver(i) => apply(t, first, self.u[i as usize][e].iter().map(|&x| pow(x))),
            SVar::Local(_) => return Err(GateError::Params("a dealer word uses a local share".into())),
        }
        Ok(())
    }
}

/// `t[q] ← x_q` (`first`) or `t[q] ← t[q] · x_q`.
#[inline]
fn apply(t: &mut [u64], first: bool, xs: impl Iterator<Item = u64>) {
    if first {
        t.iter_mut().zip(xs).for_each(|(a, x)| *a = x);
    } else {
        t.iter_mut().zip(xs).for_each(|(a, x)| *a = a.wrapping_mul(x));
    }
}

/// Both parties' shares of every dealer word of `p` (planned as `plan`) for `len`
/// elements, plus its output mask from `rout` where it carries one. Both are made chunk by
/// chunk: in a chunk, each word's first share is drawn ([`WordColumn::push_drawn`]) and
/// its second is the value minus it.
pub(super) fn deal_words<R: SplitRng + ?Sized>(
    p: &Program,
    plan: &WordPlan,
    len: usize,
    s: &Secrets<'_>,
    rout: &[u64],
    rng: &mut R,
) -> Result<[Vec<WordColumn>; 2], GateError> {
    /// Elements per chunk (a multiple of 64, a one-bit column's word): GeLU's 46 monomials
    /// of a chunk fit in the second level of cache, and shorter chunks pay their loops'
    /// setup more often (the words of `bench ops --ops gelu --rows 7` at n = 50: 8.8 ms for
    /// 65,536 elements in chunks of 2,048, 9.3 in chunks of 512 or of 4,096).
    const CHUNK: usize = 2048;
    let mut first: Vec<WordColumn> =
        p.words.iter().map(|w| WordColumn::first_share(rng.split(), len, w.width)).collect();
    let mut second: Vec<WordColumn> =
        p.words.iter().map(|w| WordColumn::with_capacity(len, w.width)).collect();
    let mut draws = Vec::with_capacity(CHUNK);
    // (A short column, such as the softmax's reciprocal of one word per row, takes buffers
    // of its own length, not a chunk's.)
    let chunk = CHUNK.min(len).max(1);
    let mut monos = vec![0u64; plan.monos.len() * chunk];
    let mut vals = [0u64; CHUNK];
    for at in (0..len).step_by(chunk) {
        let c = chunk.min(len - at);
        for (m, factors) in monos.chunks_exact_mut(chunk).zip(&plan.monos) {
            for (i, &f) in factors.iter().enumerate() {
                s.factor(&mut m[..c], at, f, i == 0)?;
            }
        }
        for (((w, (konst, terms)), a), b) in p.words.iter().zip(&plan.words).zip(&mut first).zip(&mut second)
        {
            a.push_drawn(rng, c, w.width, &mut draws);
            let v = &mut vals[..c];
            match w.out_mask {
                Some(o) => v.copy_from_slice(&rout[o * len + at..o * len + at + c]),
                None => v.fill(0),
            }
            if *konst != 0 {
                v.iter_mut().for_each(|x| *x = x.wrapping_add(*konst));
            }
            for &(coef, k) in terms {
                let t = &monos[k * chunk..k * chunk + c];
                if coef == 1 {
                    v.iter_mut().zip(t).for_each(|(x, &y)| *x = x.wrapping_add(y));
                } else {
                    v.iter_mut().zip(t).for_each(|(x, &y)| *x = x.wrapping_add(coef.wrapping_mul(y)));
                }
            }
            let m = mask(w.bits) & mask(w.width);
            v.iter_mut().for_each(|x| *x &= m);
            b.push_difference(a, at, v, w.width);
        }
    }
    fss::wipe::wipe(&mut monos);
    fss::wipe::wipe(&mut draws);
    zeroize::Zeroize::zeroize(&mut vals);
    Ok([first, second])
}
