//! Polynomials in public and secret per-element variables: how `Φ` is compiled.
//!
//! After the opening round every party knows some public values per element (the masked
//! input `x̂`, opened masked bits `ô = o ⊕ z`, opened Beaver differences). Every quantity the
//! gate still needs is a polynomial in those public values and in secrets the dealer knows
//! (the masks `z`, the input mask `r`, Beaver masks): for example a bit `o = ô + (1 − 2ô)·z`.
//! The dealer hands out additive shares of each secret monomial; a party then evaluates the
//! polynomial as a public linear combination of its shares, with no interaction
//! (docs/design/compiled-gates.md §2.3 generalised). Shares that came out of an FSS evaluation
//! ([`SVar::Local`]) can only enter linearly; a product that needs more goes through a
//! Beaver round.
//!
//! A [`Sym`] is such a polynomial over `Z_{2^bits}`; `bits = 1` is the Boolean case, where
//! `+` is `⊕` and additive shares are XOR shares.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use fss::ring::mask;

/// A value both parties know once it is available.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PVar {
    /// Opened masked bit `j` (a bit).
    Open(u32),
    /// The masked input `x̂` as an integer in `[0, 2^n)`.
    XHat,
    /// `((x̂ + offset) mod 2^n) >> shift`.
    XHatShr {
        /// Added before the shift.
        offset: u64,
        /// Bits dropped.
        shift: u32,
    },
    /// Opened Beaver difference `j` (a ring element).
    Beaver(u32),
    /// The public bit `1[x̂ < β]`.
    XHatBelow(u64),
    /// `x̂ mod 2^f`: the masked input's offset in its row of `2^f`.
    XHatLow(u32),
}

/// A value only the dealer knows, or a party-local share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SVar {
    /// The mask bit `z_j` of opened bit `j` (a bit).
    Z(u32),
    /// The input mask `r` as an integer in `[0, 2^n)`.
    R,
    /// `r >> shift`.
    RShr(u32),
    /// Secret-shared constant `κ_j`.
    Kappa(u32),
    /// Beaver mask `j`.
    Beaver(u32),
    /// A party's share of the output of an FSS evaluation: linear use only.
    Local(u32),
}

impl PVar {
    fn is_bit(self) -> bool {
        matches!(self, PVar::Open(_) | PVar::XHatBelow(_))
    }
}

impl SVar {
    fn is_bit(self) -> bool {
        matches!(self, SVar::Z(_))
    }
}

/// A product of variables with exponents, sorted by variable.
pub type Mono<V> = Vec<(V, u8)>;

fn mono_mul<V: Ord + Copy>(a: &Mono<V>, b: &Mono<V>, is_bit: impl Fn(V) -> bool) -> Mono<V> {
    let mut out: Mono<V> = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let take_a = j == b.len() || (i < a.len() && a[i].0 <= b[j].0);
        let (v, e) = if take_a {
            i += 1;
            a[i - 1]
        } else {
            j += 1;
            b[j - 1]
        };
        match out.last_mut() {
            Some(last) if last.0 == v => last.1 = if is_bit(v) { 1 } else { last.1 + e },
            _ => out.push((v, if is_bit(v) { 1 } else { e })),
        }
    }
    out
}

/// A polynomial over `Z_{2^bits}` in public and secret variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sym {
    bits: u32,
    terms: BTreeMap<(Mono<PVar>, Mono<SVar>), u64>,
}

/// A product that would multiply a party-local share by another secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotLocal;

impl Sym {
    /// The zero polynomial.
    pub fn zero(bits: u32) -> Sym {
        Sym { bits, terms: BTreeMap::new() }
    }

    /// A constant.
    pub fn constant(bits: u32, c: u64) -> Sym {
        Sym::zero(bits).plus_term(vec![], vec![], c)
    }

    /// A public variable.
    pub fn public(bits: u32, v: PVar) -> Sym {
        Sym::zero(bits).plus_term(vec![(v, 1)], vec![], 1)
    }

    /// A secret variable.
    pub fn secret(bits: u32, v: SVar) -> Sym {
        Sym::zero(bits).plus_term(vec![], vec![(v, 1)], 1)
    }

    /// The bit `ô ⊕ z` of opened bit `j`, in this ring: `ô + z − 2ôz` (`ô ⊕ z` for bits = 1).
    pub fn opened_bit(bits: u32, j: u32) -> Sym {
        let (o, z) = (Sym::public(bits, PVar::Open(j)), Sym::secret(bits, SVar::Z(j)));
        let oz = o.mul(&z).expect("no local share");
        o.add(&z).sub(&oz.scale(2))
    }

    /// Ring width.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// The terms: (public monomial, secret monomial) → coefficient.
    pub fn terms(&self) -> impl Iterator<Item = (&Mono<PVar>, &Mono<SVar>, u64)> {
        self.terms.iter().map(|((p, s), &c)| (p, s, c))
    }

    fn plus_term(mut self, p: Mono<PVar>, s: Mono<SVar>, c: u64) -> Sym {
        let m = mask(self.bits);
        let e = self.terms.entry((p, s)).or_insert(0);
        *e = e.wrapping_add(c) & m;
        self.terms.retain(|_, c| *c != 0);
        self
    }

    /// `self + o`.
    pub fn add(&self, o: &Sym) -> Sym {
        let mut out = self.clone();
        out.add_assign(o);
        out
    }

    /// `self += o`, in time linear in `o`'s terms (an accumulator need not be copied).
    pub fn add_assign(&mut self, o: &Sym) {
        debug_assert_eq!(self.bits, o.bits);
        let m = mask(self.bits);
        for ((p, s), &c) in &o.terms {
            match self.terms.entry((p.clone(), s.clone())) {
                Entry::Vacant(e) => {
                    if c & m != 0 {
                        e.insert(c & m);
                    }
                }
                Entry::Occupied(mut e) => {
                    let v = e.get().wrapping_add(c) & m;
                    if v == 0 {
                        e.remove();
                    } else {
                        *e.get_mut() = v;
                    }
                }
            }
        }
    }

    /// The same polynomial with every local share `Local(j)` renamed `Local(f(j))` (`f`
    /// one-to-one).
    pub fn map_locals(&self, f: impl Fn(u32) -> u32) -> Sym {
        let terms = self
            .terms
            .iter()
            .map(|((p, s), &c)| {
                let mut s: Mono<SVar> = s
                    .iter()
                    .map(|&(v, e)| match v {
                        SVar::Local(j) => (SVar::Local(f(j)), e),
                        other => (other, e),
                    })
                    .collect();
                s.sort_by_key(|&(v, _)| v);
                ((p.clone(), s), c)
            })
            .collect();
        Sym { bits: self.bits, terms }
    }

    /// `self − o`.
    pub fn sub(&self, o: &Sym) -> Sym {
        self.add(&o.scale(u64::MAX))
    }

    /// `c · self`.
    pub fn scale(&self, c: u64) -> Sym {
        let m = mask(self.bits);
        let mut out = self.clone();
        for v in out.terms.values_mut() {
            *v = v.wrapping_mul(c) & m;
        }
        out.terms.retain(|_, c| *c != 0);
        out
    }

    /// `self · o`.
    ///
    /// # Errors
    /// [`NotLocal`] if a party-local share would meet another secret.
    pub fn mul(&self, o: &Sym) -> Result<Sym, NotLocal> {
        debug_assert_eq!(self.bits, o.bits);
        let m = mask(self.bits);
        let mut out = Sym::zero(self.bits);
        for ((p1, s1), &c1) in &self.terms {
            for ((p2, s2), &c2) in &o.terms {
                let s = mono_mul(s1, s2, SVar::is_bit);
                if s.iter().any(|(v, _)| matches!(v, SVar::Local(_))) && (s.len() > 1 || s[0].1 > 1) {
                    return Err(NotLocal);
                }
                let p = mono_mul(p1, p2, PVar::is_bit);
                let e = out.terms.entry((p, s)).or_insert(0);
                *e = e.wrapping_add(c1.wrapping_mul(c2)) & m;
            }
        }
        out.terms.retain(|_, c| *c != 0);
        Ok(out)
    }

    /// The same polynomial in `Z_{2^bits}` for a smaller `bits` (coefficients reduced).
    pub fn reduce(&self, bits: u32) -> Sym {
        let mut terms = self.terms.clone();
        for c in terms.values_mut() {
            *c &= mask(bits);
        }
        terms.retain(|_, c| *c != 0);
        Sym { bits, terms }
    }

    /// Number of terms.
    pub fn len(&self) -> usize {
        self.terms.len()
    }

    /// Whether it is the zero polynomial.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The highest power of any one variable.
    pub fn max_exponent(&self) -> u32 {
        let pe = |m: &Mono<PVar>| m.iter().map(|&(_, e)| e as u32).max().unwrap_or(0);
        let se = |m: &Mono<SVar>| m.iter().map(|&(_, e)| e as u32).max().unwrap_or(0);
        self.terms.keys().map(|(p, s)| pe(p).max(se(s))).max().unwrap_or(0)
    }

    /// Whether the polynomial uses a party-local share or a dealer secret.
    pub fn is_public(&self) -> bool {
        self.terms.keys().all(|(_, s)| s.is_empty())
    }

    /// Every public variable used.
    pub fn public_vars(&self) -> Vec<PVar> {
        let mut v: Vec<PVar> = self.terms.keys().flat_map(|(p, _)| p.iter().map(|x| x.0)).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Every secret variable used.
    pub fn secret_vars(&self) -> Vec<SVar> {
        let mut v: Vec<SVar> = self.terms.keys().flat_map(|(_, s)| s.iter().map(|x| x.0)).collect();
        v.sort();
        v.dedup();
        v
    }
}

/// The 2-adic valuation of `c` in `Z_{2^bits}` (`bits` for zero).
pub fn valuation(c: u64, bits: u32) -> u32 {
    (c & mask(bits)).trailing_zeros().min(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evaluate with concrete values (tests only).
    fn eval(s: &Sym, p: impl Fn(PVar) -> u64, q: impl Fn(SVar) -> u64) -> u64 {
        let m = mask(s.bits);
        s.terms().fold(0u64, |acc, (pm, sm, c)| {
            let mut t = c;
            for &(v, e) in pm {
                t = t.wrapping_mul(p(v).wrapping_pow(e as u32));
            }
            for &(v, e) in sm {
                t = t.wrapping_mul(q(v).wrapping_pow(e as u32));
            }
            acc.wrapping_add(t) & m
        })
    }

    #[test]
    fn opened_bits_multiply_like_bits() {
        for bits in [1u32, 8, 64] {
            let a = Sym::opened_bit(bits, 0);
            let b = Sym::opened_bit(bits, 1);
            let ab = a.mul(&b).unwrap();
            for v in 0..16u64 {
                let (oa, ob, za, zb) = (v & 1, v >> 1 & 1, v >> 2 & 1, v >> 3 & 1);
                let p = |x: PVar| match x {
                    PVar::Open(0) => oa,
                    _ => ob,
                };
                let q = |x: SVar| match x {
                    SVar::Z(0) => za,
                    _ => zb,
                };
                assert_eq!(eval(&a, p, q), oa ^ za);
                assert_eq!(eval(&ab, p, q), (oa ^ za) & (ob ^ zb));
                // a·a = a for bits.
                assert_eq!(a.mul(&a).unwrap(), a);
            }
        }
    }

    #[test]
    fn local_shares_stay_linear() {
        let l = Sym::secret(16, SVar::Local(0));
        let x = Sym::public(16, PVar::XHat);
        assert!(l.mul(&x).is_ok());
        assert_eq!(l.mul(&Sym::secret(16, SVar::R)), Err(NotLocal));
        assert_eq!(l.mul(&l), Err(NotLocal));
        assert_eq!(l.sub(&l), Sym::zero(16));
    }
}
