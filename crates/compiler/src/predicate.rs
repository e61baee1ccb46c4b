//! Mask-aware rewriting: every predicate on the secret input becomes an XOR of comparison
//! shares at public points and public bits (docs/design/paper.md §3.2, Lemma 4.3;
//! docs/design/fss-building-blocks.md §6.1 rule 1).
//!
//! A [`Family`] is one comparison key per element, at the input mask's view `r_v`, queried at
//! many public points `p`; each query yields XOR shares of `LT(p) = 1[p < r_v]` and, where
//! needed, `EQ(p) = 1[p = r_v]`. With `x̂ = x + r`:
//!
//! ```text
//! 1[x < β] = LT(x̂ − β) ⊕ LT(x̂) ⊕ 1[x̂ < β]            (one key at r answers every β)
//! ```
//!
//! so every threshold atom, interval indicator and thermometer bit is a [`LinBit`]: an XOR of
//! shares with public terms, computed with no interaction. `LT(x̂)` appears in both ends of an
//! interval and cancels (the paper's cancellation trick).

use std::collections::HashMap;

use fss::ring::mask;

/// A comparison key per element on a view of the masked input: the view of `x̂` is
/// `(((x̂ + offset) mod 2^n) >> shift) mod 2^bits`, compared with the same view of `r`
/// (without the offset).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Family {
    /// Low bits dropped (the high half of a split comparison), else 0.
    pub shift: u32,
    /// Width of the compared view.
    pub bits: u32,
    /// The queries `(offset, β)`: the point is `view_offset(x̂) − β mod 2^bits`.
    pub points: Vec<(u64, u64)>,
    /// Whether some [`LinBit`] uses an equality share.
    pub eq: bool,
}

impl Family {
    /// The key's secret point for input mask `r`.
    pub fn key_point(&self, r: u64) -> u64 {
        (r >> self.shift) & mask(self.bits)
    }

    /// The view of `x̂` with `offset`, in a ring of `n` bits.
    pub fn view(&self, n: u32, xh: u64, offset: u64) -> u64 {
        ((xh.wrapping_add(offset) & mask(n)) >> self.shift) & mask(self.bits)
    }
}

/// One term of a [`LinBit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Term {
    /// The share of `LT` at point `k` of a family.
    Lt(u16, u32),
    /// The share of `EQ` at point `k` of a family.
    Eq(u16, u32),
    /// The public bit `1[(x̂ mod 2^bits) < β]` (added by party 0 only).
    Below(u32, u64),
}

/// An XOR of comparison shares and public bits: a bit both parties hold XOR shares of after
/// the comparison, without interaction.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LinBit {
    /// Constant part (party 0 adds it).
    pub konst: bool,
    /// The terms, sorted, each at most once.
    pub terms: Vec<Term>,
}

impl LinBit {
    /// A constant.
    pub fn constant(b: bool) -> LinBit {
        LinBit { konst: b, terms: vec![] }
    }

    /// One term.
    pub fn term(t: Term) -> LinBit {
        LinBit { konst: false, terms: vec![t] }
    }

    /// `self ⊕ o`.
    pub fn xor(&self, o: &LinBit) -> LinBit {
        let mut terms = Vec::with_capacity(self.terms.len() + o.terms.len());
        let (a, b) = (&self.terms, &o.terms);
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            if j == b.len() || (i < a.len() && a[i] < b[j]) {
                terms.push(a[i]);
                i += 1;
            } else if i == a.len() || b[j] < a[i] {
                terms.push(b[j]);
                j += 1;
            } else {
                i += 1;
                j += 1;
            }
        }
        LinBit { konst: self.konst ^ o.konst, terms }
    }

    /// The XOR of many bits at once: sorts their terms once and cancels pairs, where folding
    /// with [`LinBit::xor`] would cost the accumulated length at every step.
    pub fn xor_all<'a>(bits: impl IntoIterator<Item = &'a LinBit>) -> LinBit {
        let mut konst = false;
        let mut all = vec![];
        for b in bits {
            konst ^= b.konst;
            all.extend_from_slice(&b.terms);
        }
        all.sort_unstable();
        let mut terms = Vec::with_capacity(all.len());
        for t in all {
            if terms.last() == Some(&t) {
                terms.pop();
            } else {
                terms.push(t);
            }
        }
        LinBit { konst, terms }
    }

    /// `¬self`.
    pub fn not(&self) -> LinBit {
        LinBit { konst: !self.konst, terms: self.terms.clone() }
    }

    /// Whether the bit is a constant.
    pub fn as_constant(&self) -> Option<bool> {
        self.terms.is_empty().then_some(self.konst)
    }
}

/// A bit as `a ⊕ (q ∧ c)`: `q` is non-zero only for comparisons answered by a split key
/// (high part `L ⊕ E∧c`, with `c` the low carry).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SplitBit {
    /// The XOR-linear part.
    pub a: LinBit,
    /// The factor of the low carry.
    pub q: LinBit,
}

impl SplitBit {
    /// `self ⊕ o`.
    pub fn xor(&self, o: &SplitBit) -> SplitBit {
        SplitBit { a: self.a.xor(&o.a), q: self.q.xor(&o.q) }
    }

    /// `¬self`.
    pub fn not(&self) -> SplitBit {
        SplitBit { a: self.a.not(), q: self.q.clone() }
    }

    /// A linear bit.
    pub fn lin(a: LinBit) -> SplitBit {
        SplitBit { a, q: LinBit::default() }
    }
}

/// How full-width comparisons are answered: by one key on the whole input, or (for specs
/// that shift by `f`) by a key on the high `n − f` bits with equality plus the `f`-bit low
/// key the shift needs anyway (docs/design/compiled-gates.md §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FullWidth {
    /// One `n`-bit key.
    Whole,
    /// High `(n − f)`-bit key with equality and the `f`-bit carry key.
    Split(u32),
    /// As [`FullWidth::Split`] at `f` (the first field), and a step function whose
    /// boundaries widen (a grid finer near 0, like `1/√x`'s octaves) is cut into runs of
    /// boundaries spanning at most `2^w` multiples (the second field) of their alignment
    /// `g ≥ f`, each split at `g` (a high key on `n − g` bits and a `g`-bit carry of its
    /// own): each run reads one window of high positions instead of a trie path per boundary.
    Grouped(u32, u32),
}

impl FullWidth {
    /// The split's shift `f`, if full-width comparisons are split.
    pub fn shift(self) -> Option<u32> {
        match self {
            FullWidth::Whole => None,
            FullWidth::Split(f) | FullWidth::Grouped(f, _) => Some(f),
        }
    }
}

/// Collects families and points while a spec is lowered.
#[derive(Debug)]
pub struct Families {
    n: u32,
    mode: FullWidth,
    families: Vec<Family>,
    index: HashMap<(u32, u32), u16>,
    points: Vec<HashMap<(u64, u64), u32>>,
}

impl Families {
    /// An empty collection for an `n`-bit input.
    pub fn new(n: u32, mode: FullWidth) -> Families {
        Families { n, mode, families: vec![], index: HashMap::new(), points: vec![] }
    }

    /// Input width.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// The full-width mode.
    pub fn mode(&self) -> FullWidth {
        self.mode
    }

    fn family(&mut self, shift: u32, bits: u32) -> u16 {
        if let Some(&f) = self.index.get(&(shift, bits)) {
            return f;
        }
        let f = self.families.len() as u16;
        self.families.push(Family { shift, bits, points: vec![], eq: false });
        self.points.push(HashMap::new());
        self.index.insert((shift, bits), f);
        f
    }

    /// The point `(offset, β)` of the family `(shift, bits)`.
    pub fn point(&mut self, shift: u32, bits: u32, offset: u64, beta: u64) -> (u16, u32) {
        let f = self.family(shift, bits);
        let key = (offset & mask(self.n), beta & mask(bits));
        let fam = &mut self.families[f as usize];
        let k = *self.points[f as usize].entry(key).or_insert_with(|| {
            fam.points.push(key);
            fam.points.len() as u32 - 1
        });
        (f, k)
    }

    /// `LT` at `view(x̂) − β` on a `bits`-wide family without shift.
    pub fn lt(&mut self, bits: u32, beta: u64) -> LinBit {
        let (f, k) = self.point(0, bits, 0, beta);
        LinBit::term(Term::Lt(f, k))
    }

    /// `1[x mod 2^bits < β]` for `0 ≤ β ≤ 2^bits` (the whole input for `bits = n`).
    pub fn below(&mut self, bits: u32, beta: u64) -> SplitBit {
        if beta == 0 {
            return SplitBit::lin(LinBit::constant(false));
        }
        if bits < 64 && beta >= 1u64 << bits {
            return SplitBit::lin(LinBit::constant(true));
        }
        let at = self.lt_point(bits, beta).xor(&self.lt_point(bits, 0));
        at.xor(&SplitBit::lin(LinBit::term(Term::Below(bits, beta))))
    }

    /// `LT(x̂ − β)` on `bits` bits, split when the full width is split and `β` allows it.
    fn lt_point(&mut self, bits: u32, beta: u64) -> SplitBit {
        match self.mode.shift() {
            Some(f) if bits == self.n && beta & mask(f) == 0 => {
                // 1[p < r] = 1[p_h < r_h] ⊕ 1[p_h = r_h]·1[p_l < r_l], and p_l = x̂_l.
                // p_h = x̂_h − β_h exactly (β has no low bits): one offset for every
                // threshold, so dense thresholds form one window of high positions.
                let (h, k) = self.point(f, self.n - f, 0, beta >> f);
                self.families[h as usize].eq = true;
                SplitBit { a: LinBit::term(Term::Lt(h, k)), q: LinBit::term(Term::Eq(h, k)) }
            }
            _ => SplitBit::lin(self.lt(bits, beta)),
        }
    }

    /// `LT(x̂ − β)` on the full width (the wrap bit `1[x̂ < r]` for `β = 0`).
    pub fn wrap(&mut self, beta: u64) -> SplitBit {
        self.lt_point(self.n, beta)
    }

    /// The low carry `c = 1[x̂ mod 2^f < r mod 2^f]` of a split.
    pub fn carry(&mut self, f: u32) -> LinBit {
        self.lt(f, 0)
    }

    /// The carry of the input moved by `offset`: `1[(x̂ + offset) mod 2^f < r mod 2^f]`
    /// (the carry key read at one more point). A family without shift reads
    /// `(x̂ + offset) mod 2^f`, so the offset is the point `β = −offset`: one group of points,
    /// answered from one read of the carry key's block.
    pub fn carry_at(&mut self, f: u32, offset: u64) -> LinBit {
        self.lt(f, offset.wrapping_neg() & mask(f))
    }

    /// `1[h₀ = j]` on the high key of a split at `f` (`h₀ = x̂_h − r_h`), as
    /// `1[h₀ < j + 1] ⊕ 1[h₀ < j]`: the `LT` shares at the thresholds around it and two
    /// public bits (`LT(x̂_h)` cancels), where equality shares would cost a row table's
    /// window its `EQ` outputs.
    pub fn eq_high(&mut self, f: u32, j: u64) -> LinBit {
        let n = self.n;
        let top = 1u64 << (n - f);
        debug_assert!(j < top, "a high position");
        // 1[h₀ < j] ⊕ LT(x̂_h) for 0 < j < 2^{n−f}; at the ends 1[h₀ < 0] = 0, 1[h₀ < top] = 1.
        let mut below = |j: u64| -> (LinBit, bool) {
            if j == 0 || j == top {
                return (LinBit::constant(j == top), true);
            }
            let (h, k) = self.point(f, n - f, 0, j);
            (LinBit::term(Term::Lt(h, k)).xor(&LinBit::term(Term::Below(n, j << f))), false)
        };
        let ((a, wa), (b, wb)) = (below(j + 1), below(j));
        let bit = a.xor(&b);
        if wa == wb {
            return bit;
        }
        // One end is a constant: the other keeps its `LT(x̂_h)`.
        let (h, k0) = self.point(f, n - f, 0, 0);
        bit.xor(&LinBit::term(Term::Lt(h, k0)))
    }

    /// `L = 1[a < r_h]` and `E = 1[a = r_h]` for `a = ((x̂ + offset) mod 2^n) >> f`.
    pub fn high(&mut self, f: u32, offset: u64) -> (LinBit, LinBit) {
        let (h, k) = self.point(f, self.n - f, offset, 0);
        self.families[h as usize].eq = true;
        (LinBit::term(Term::Lt(h, k)), LinBit::term(Term::Eq(h, k)))
    }

    /// The families collected, with each family's points sorted by `(offset, β)`: returns
    /// them and, per family, the old-index → new-index map to apply to bits built before.
    pub fn finish(self) -> (Vec<Family>, Vec<Vec<u32>>) {
        let mut maps = vec![];
        let mut out = vec![];
        for mut fam in self.families {
            let mut order: Vec<u32> = (0..fam.points.len() as u32).collect();
            order.sort_by_key(|&k| fam.points[k as usize]);
            let mut map = vec![0u32; order.len()];
            for (new, &old) in order.iter().enumerate() {
                map[old as usize] = new as u32;
            }
            fam.points = order.iter().map(|&k| fam.points[k as usize]).collect();
            out.push(fam);
            maps.push(map);
        }
        (out, maps)
    }
}

impl Families {
    /// For a split at `f` and `β` a multiple of `2^f`: `1[h₀ < β >> f]` for the high part
    /// `h₀ = x̂_h − r_h` that ignores the carry (the XOR-linear part of [`Families::below`]).
    ///
    /// With `slack`, without its wrap term `LT(ĥ) = 1[ĥ < r_h]`: returns the rest and whether
    /// the wrap term is to be XORed in (the caller has it as `msb(r)·¬msb(x̂)`, no comparison).
    pub fn below_high(&mut self, f: u32, beta: u64, slack: bool) -> (LinBit, bool) {
        let n = self.n;
        debug_assert!(beta & mask(f) == 0, "a split threshold has no low bits");
        if beta == 0 {
            return (LinBit::constant(false), false);
        }
        let (h, k) = self.point(f, n - f, 0, beta >> f);
        // 1[x̂_h < β_h] = 1[x̂ < β] since β has no low bits.
        let bit = LinBit::term(Term::Lt(h, k)).xor(&LinBit::term(Term::Below(n, beta)));
        if slack {
            return (bit, true);
        }
        let (h0, k0) = self.point(f, n - f, 0, 0);
        (bit.xor(&LinBit::term(Term::Lt(h0, k0))), false)
    }
}

/// [`step_bits`] of the high part `h₀ = x̂_h − r_h` of a split at `f`, every start a
/// multiple of `2^f`: the bits of `v` at `h₀·2^f` (no carry).
///
/// With `slack` ([`crate::spec::OperatorSpec::slack`]) each bit comes with whether the wrap
/// term `LT(ĥ)` is still to be XORed in (an odd number of its thresholds use it); without,
/// that flag is always false.
pub fn step_bits_high(
    fams: &mut Families,
    f: u32,
    starts: &[u64],
    values: &[u64],
    width: u32,
    slack: bool,
) -> Vec<(LinBit, bool)> {
    (0..width)
        .map(|j| {
            let mut bits = vec![LinBit::constant((values[0] >> j) & 1 == 1)];
            let mut wraps = false;
            for beta in flips(starts, values, j) {
                let (b, w) = fams.below_high(f, beta, slack);
                bits.push(b.not());
                wraps ^= w;
            }
            (LinBit::xor_all(&bits), wraps)
        })
        .collect()
}

/// The starts where bit `j` of a step function's value changes.
fn flips<'a>(starts: &'a [u64], values: &'a [u64], j: u32) -> impl Iterator<Item = u64> + 'a {
    (1..starts.len()).filter(move |&k| ((values[k] ^ values[k - 1]) >> j) & 1 == 1).map(move |k| starts[k])
}

/// Renumber a bit's points after [`Families::finish`].
pub fn renumber(b: &LinBit, maps: &[Vec<u32>]) -> LinBit {
    let mut terms: Vec<Term> = b
        .terms
        .iter()
        .map(|&t| match t {
            Term::Lt(f, k) => Term::Lt(f, maps[f as usize][k as usize]),
            Term::Eq(f, k) => Term::Eq(f, maps[f as usize][k as usize]),
            Term::Below(bits, beta) => Term::Below(bits, beta),
        })
        .collect();
    terms.sort();
    LinBit { konst: b.konst, terms }
}

/// XOR-linear read-out of a step function (docs/design/compiled-gates.md §2.2): for values `v_i` on the
/// intervals starting at `starts[i]` (unsigned `n`-bit order), bit `j` of `v(x)` is
/// `bit_j(v_0) ⊕ ⨁_k t_k·(bit_j(v_k) ⊕ bit_j(v_{k−1}))` with thermometer bits
/// `t_k = 1[x ≥ starts[k]] = ¬1[x < starts[k]]`. Returns one bit per `j < width`.
pub fn step_bits(fams: &mut Families, starts: &[u64], values: &[u64], width: u32) -> Vec<SplitBit> {
    let n = fams.n();
    (0..width)
        .map(|j| {
            let (mut a, mut q) = (vec![LinBit::constant((values[0] >> j) & 1 == 1)], vec![]);
            for beta in flips(starts, values, j) {
                let b = fams.below(n, beta).not();
                a.push(b.a);
                q.push(b.q);
            }
            SplitBit { a: LinBit::xor_all(&a), q: LinBit::xor_all(&q) }
        })
        .collect()
}

/// A one-bit step function of `x mod 2^bits` (`bits < n`): `values[k]` from `starts[k]` on
/// (`starts[0] = 0`), XOR-linear in the shares of the `bits`-bit family as [`step_bits`] is in
/// the full-width one.
pub fn low_step_bit(fams: &mut Families, bits: u32, starts: &[u64], values: &[u64]) -> LinBit {
    let mut v = vec![LinBit::constant(values[0] & 1 == 1)];
    for beta in flips(starts, values, 0) {
        v.push(fams.below(bits, beta).a.not());
    }
    LinBit::xor_all(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xor_all_equals_folding_xor() {
        // Bits with overlapping terms (repeats cancel in pairs, odd counts stay).
        let bits: Vec<LinBit> = (0..40u32)
            .map(|i| {
                let mut b = LinBit::constant(i % 3 == 0);
                for k in 0..(i % 7) {
                    b = b.xor(&LinBit::term(Term::Lt((k % 2) as u16, (i * 7 + k * 13) % 23)));
                }
                if i % 5 == 0 {
                    b = b.xor(&LinBit::term(Term::Below(8, i as u64)));
                }
                b
            })
            .collect();
        for len in [0, 1, 2, 17, 40] {
            let folded = bits[..len].iter().fold(LinBit::default(), |a, b| a.xor(b));
            assert_eq!(LinBit::xor_all(&bits[..len]), folded, "{len} bits");
        }
    }

    #[test]
    fn xor_cancels_and_not_flips() {
        let a = LinBit::term(Term::Lt(0, 1));
        let b = LinBit::term(Term::Lt(0, 2));
        let ab = a.xor(&b);
        assert_eq!(ab.terms.len(), 2);
        assert_eq!(ab.xor(&b), a);
        assert_eq!(a.not().not(), a);
        assert_eq!(a.xor(&a).as_constant(), Some(false));
    }

    #[test]
    fn intervals_cancel_the_wrap_term() {
        let mut f = Families::new(8, FullWidth::Whole);
        let lo = f.below(8, 10);
        let hi = f.below(8, 20);
        // 1[10 ≤ x < 20] uses LT at 10 and 20 and both public bits; LT(x̂) cancels.
        let ind = hi.xor(&lo);
        assert_eq!(ind.a.terms.len(), 4);
        assert!(ind.q.as_constant() == Some(false));
    }
}
