//! A compiled operator as a masked-wire gate: the dealer's key generation and the parties'
//! online evaluation of a [`Program`], side by side with its reference ([`OperatorSpec::eval`]).

use std::sync::Arc;

use fss::bitdpf::{self, BitDpfKeys, BitDpfParams, CmpShares};
use fss::codec::{BitReader, BitWriter};
use fss::dcf::{self, DcfKeys, DcfParams};
use fss::ring::mask;
use fss::rng::CryptoRng;
use fss::{AddShare, DecodeError, Party};
use gates::dealer::{random_bits, random_words, share, share_bits};
use gates::keyio::{get_bits, get_words, put_bits, put_words};
use gates::{Ctx, Gate, GateError, GateKey};
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::predicate::{Family, LinBit, Term};
use crate::program::{CmpBackend, Form, LookupPlan, Program, Src, TablePlan, shift_poly, table_params};
use crate::spec::{BoolExpr, Kind, SpecError, word};
use crate::sym::{PVar, SVar};

/// `len` elements of one compiled operator.
#[derive(Clone, Debug)]
pub struct CompiledGate {
    program: Arc<Program>,
    plan: Arc<EvalPlan>,
    len: usize,
}

/// The key shape: the program and the element count.
#[derive(Clone, Debug)]
pub struct CompiledShape {
    /// The program.
    pub program: Arc<Program>,
    /// Elements.
    pub len: usize,
}

/// One party's key for a [`CompiledGate`].
#[derive(Clone, PartialEq, Eq, Zeroize, ZeroizeOnDrop)]
pub struct CompiledKey {
    #[zeroize(skip)]
    party: Party,
    /// Stored width of each dealer word, and the output ring width (public shape).
    #[zeroize(skip)]
    widths: Vec<u32>,
    #[zeroize(skip)]
    l: u32,
    /// Per family: the comparison keys (one per element, or one per element and query).
    cmp: Vec<BitDpfKeys>,
    /// Per family (per-threshold keying only): XOR shares of the carries, element-major.
    carries: Vec<Vec<bool>>,
    /// Dealer words, word-major.
    words: Vec<Vec<u64>>,
    /// The table lookup's keys (one per element).
    table: Option<fss::adpf::AdpfKeys>,
    /// The DCF lookup's keys (element-major) and base shares (element-major).
    dcf: Option<DcfKeys>,
    dcf_base: Vec<u64>,
}

impl std::fmt::Debug for CompiledKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKey").field("party", &self.party).finish_non_exhaustive()
    }
}

/// A leaf prepared for evaluation: bitmasks over each family's points.
#[derive(Clone, Debug, Default)]
struct LeafPlan {
    konst: bool,
    lt: Vec<(usize, Vec<u64>)>,
    eq: Vec<(usize, Vec<u64>)>,
    below: Vec<(u32, Vec<u64>)>,
}

/// Per family: the points grouped by offset, each group sorted by `β`.
#[derive(Clone, Debug)]
struct FamilyPlan {
    groups: Vec<(u64, std::ops::Range<usize>)>,
}

/// What evaluation precomputes from a program.
#[derive(Debug)]
struct EvalPlan {
    leaves: Vec<LeafPlan>,
    families: Vec<FamilyPlan>,
}

fn words_for(bits: usize) -> usize {
    bits.div_ceil(64)
}

impl EvalPlan {
    fn new(p: &Program) -> EvalPlan {
        let leaves = p
            .leaves
            .iter()
            .map(|b: &LinBit| {
                let mut plan = LeafPlan { konst: b.konst, ..LeafPlan::default() };
                for t in &b.terms {
                    match *t {
                        Term::Lt(f, k) | Term::Eq(f, k) => {
                            let f = f as usize;
                            let list = if matches!(t, Term::Lt(..)) { &mut plan.lt } else { &mut plan.eq };
                            if list.last().is_none_or(|(g, _)| *g != f) {
                                list.push((f, vec![0; words_for(p.families[f].points.len())]));
                            }
                            let m = &mut list.last_mut().expect("pushed").1;
                            m[k as usize / 64] ^= 1 << (k % 64);
                        }
                        Term::Below(bits, beta) => match plan.below.iter_mut().find(|(b, _)| *b == bits) {
                            Some((_, v)) => v.push(beta),
                            None => plan.below.push((bits, vec![beta])),
                        },
                    }
                }
                for (_, v) in &mut plan.below {
                    v.sort_unstable();
                }
                plan
            })
            .collect();
        let families = p
            .families
            .iter()
            .map(|f: &Family| {
                let mut groups: Vec<(u64, std::ops::Range<usize>)> = vec![];
                for (k, &(off, _)) in f.points.iter().enumerate() {
                    match groups.last_mut() {
                        Some((o, r)) if *o == off => r.end = k + 1,
                        _ => groups.push((off, k..k + 1)),
                    }
                }
                FamilyPlan { groups }
            })
            .collect();
        EvalPlan { leaves, families }
    }
}

impl CompiledGate {
    /// `len` elements of `program`.
    pub fn new(program: Arc<Program>, len: usize) -> CompiledGate {
        let plan = Arc::new(EvalPlan::new(&program));
        CompiledGate { program, plan, len }
    }

    /// The program.
    pub fn program(&self) -> &Arc<Program> {
        &self.program
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the gate has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn n(&self) -> u32 {
        self.program.in_bits()
    }

    fn l(&self) -> u32 {
        self.program.out_bits()
    }

    fn family_params(f: &Family) -> BitDpfParams {
        BitDpfParams::new(f.bits).expect("valid family width")
    }

    fn family_keys(&self, f: &Family) -> usize {
        match self.program.cmp {
            CmpBackend::OneKey => self.len,
            CmpBackend::PerThreshold => self.len * f.points.len(),
        }
    }

    fn dcf_params(&self) -> Option<(DcfParams, usize)> {
        match &self.program.lookup {
            LookupPlan::Dcf(d) => Some((
                DcfParams::new(self.n(), self.l(), d.words as u32).expect("valid DCF shape"),
                self.hat_intervals() - 1,
            )),
            _ => None,
        }
    }

    fn hat_intervals(&self) -> usize {
        self.program.hat_intervals()
    }

    /// Deal keys for input masks `r` and output masks `rout` (output-major, as
    /// [`Gate::output_wires`] lists them). Only the low `in_bits` bits of each mask are used:
    /// the gate reads that much of a possibly wider wire.
    ///
    /// # Errors
    /// [`GateError`] on bad lengths or masks out of range.
    pub fn deal<R: CryptoRng + ?Sized>(
        &self,
        r: &[u64],
        rout: &[u64],
        rng: &mut R,
    ) -> Result<(CompiledKey, CompiledKey), GateError> {
        let p = &*self.program;
        let (n, l, len) = (self.n(), self.l(), self.len);
        check("input masks", len, r.len())?;
        check("output masks", len * p.outputs.len(), rout.len())?;
        // The gate reads the low n bits of its wire (a width contract when the wire is wider).
        let r: Vec<u64> = r.iter().map(|&v| v & mask(n)).collect();
        let r = &r[..];
        let mut keys = [Vec::new(), Vec::new()];
        let mut carries = [Vec::new(), Vec::new()];
        for f in &p.families {
            let params = Self::family_params(f);
            match p.cmp {
                CmpBackend::OneKey => {
                    let alphas: Vec<u64> = r.iter().map(|&x| f.key_point(x)).collect();
                    let (k0, k1) = bitdpf::keygen(params, &alphas, rng)?;
                    keys[0].push(k0);
                    keys[1].push(k1);
                    carries[0].push(vec![]);
                    carries[1].push(vec![]);
                }
                CmpBackend::PerThreshold => {
                    let m = mask(f.bits);
                    let mut alphas = Vec::with_capacity(len * f.points.len());
                    let mut w = Vec::with_capacity(alphas.capacity());
                    for &x in r {
                        let rv = f.key_point(x);
                        for &(_, beta) in &f.points {
                            let (sum, over) = rv.overflowing_add(beta);
                            alphas.push(sum & m);
                            w.push(over || sum > m);
                        }
                    }
                    let (k0, k1) = bitdpf::keygen(params, &alphas, rng)?;
                    let (w0, w1) = share_bits(rng, &w);
                    keys[0].push(k0);
                    keys[1].push(k1);
                    carries[0].push(w0);
                    carries[1].push(w1);
                }
            }
        }
        // Masks of the opened bits and of the Beaver products.
        let z: Vec<Vec<bool>> = p.opened.iter().map(|_| random_bits(rng, len)).collect();
        let nb = p.beaver_round.len();
        let u: Vec<Vec<u64>> = (0..nb).map(|_| random_words(rng, len, l)).collect();
        let kappa: Vec<u64> = p.spec.kappa.iter().map(|&k| word(k, l)).collect();
        let sval = |v: SVar, e: usize| -> Result<u64, GateError> {
            Ok(match v {
                SVar::Z(j) => z[j as usize][e] as u64,
                SVar::R => r[e],
                SVar::RShr(f) => r[e] >> f,
                SVar::Kappa(k) => kappa[k as usize],
                SVar::Beaver(i) => u[i as usize][e],
                SVar::Local(_) => return Err(GateError::Params("a dealer word uses a local share".into())),
            })
        };
        let mut words = [Vec::new(), Vec::new()];
        for w in &p.words {
            let m = mask(w.bits);
            let mut vals = Vec::with_capacity(len);
            for e in 0..len {
                let mut v = 0u64;
                for (c, mono) in &w.value {
                    let mut t = *c;
                    for &(var, exp) in mono {
                        t = t.wrapping_mul(sval(var, e)?.wrapping_pow(exp as u32));
                    }
                    v = v.wrapping_add(t);
                }
                if let Some(o) = w.out_mask {
                    v = v.wrapping_add(rout[o * len + e]);
                }
                vals.push(v & m & mask(w.width));
            }
            let (a, b) = share(rng, &vals, w.width);
            words[0].push(a);
            words[1].push(b);
        }
        let mut table = [None, None];
        if let LookupPlan::Table(t) = &p.lookup {
            let alphas: Vec<u64> = (0..len).map(|e| self.table_point(t, r[e], &z, e)).collect();
            let (k0, k1) = fss::adpf::keygen(table_params(t.domain_bits, l), &alphas, &vec![1; len], rng)?;
            table = [Some(k0), Some(k1)];
        }
        let (mut dcf_keys, mut dcf_base) = ([None, None], [vec![], vec![]]);
        if let Some((params, per)) = self.dcf_params() {
            let (alphas, betas, base) = self.dcf_payloads(r, per)?;
            let (k0, k1) = dcf::keygen(params, &alphas, &betas, rng)?;
            let (b0, b1) = share(rng, &base, l);
            dcf_keys = [Some(k0), Some(k1)];
            dcf_base = [b0, b1];
        }
        let [k0, k1] = keys;
        let [c0, c1] = carries;
        let [w0, w1] = words;
        let [t0, t1] = table;
        let [d0, d1] = dcf_keys;
        let [b0, b1] = dcf_base;
        let widths: Vec<u32> = p.words.iter().map(|w| w.width).collect();
        let key = |party, cmp, carries, words, table, dcf, dcf_base| CompiledKey {
            party,
            widths: widths.clone(),
            l,
            cmp,
            carries,
            words,
            table,
            dcf,
            dcf_base,
        };
        Ok((key(Party::P0, k0, c0, w0, t0, d0, b0), key(Party::P1, k1, c1, w1, t1, d1, b1)))
    }

    /// The point of element `e`'s table DPF: the index mask, or (carry mask, row mask).
    fn table_point(&self, t: &TablePlan, r: u64, z: &[Vec<bool>], e: usize) -> u64 {
        if t.shift == 0 {
            t.opened.iter().enumerate().fold(0u64, |acc, (i, &j)| acc | (z[j as usize][e] as u64) << i)
        } else {
            let k = self.n() - t.shift;
            (z[t.opened[0] as usize][e] as u64) << k | ((r >> t.shift) & mask(k))
        }
    }

    /// DCF points, payloads and base values (digest §3.4): the intervals in `x̂`-space start
    /// at `α_i + r`; interval `t` carries the coefficients of `P_i(X_u)` re-expanded in `x̂`.
    #[allow(clippy::type_complexity)]
    fn dcf_payloads(&self, r: &[u64], per: usize) -> Result<(Vec<u64>, Vec<u64>, Vec<u64>), GateError> {
        let p = &*self.program;
        let LookupPlan::Dcf(d) = &p.lookup else { unreachable!("dcf lookup") };
        let s = &p.norm;
        let (n, l) = (self.n(), self.l());
        let nm = mask(n);
        let (mut alphas, mut betas, mut base) = (vec![], vec![], vec![]);
        for &re in r {
            let mut cuts: Vec<u64> = s.boundaries.iter().map(|&a| a.wrapping_add(re) & nm).collect();
            cuts.push(0);
            cuts.sort_unstable();
            cuts.dedup();
            // Always per + 1 intervals: a dummy split where a boundary lands on 0.
            let domain = 1u128 << n;
            while cuts.len() < per + 1 {
                let end = |i: usize| cuts.get(i + 1).map_or(domain, |&c| c as u128);
                let i = (0..cuts.len())
                    .find(|&i| end(i) - cuts[i] as u128 >= 2)
                    .expect("fewer intervals than points");
                cuts.insert(i + 1, cuts[i] + 1);
            }
            let payload = |c: u64| -> Vec<u64> {
                let x = c.wrapping_sub(re) & nm;
                let piece = &s.pieces[s.piece_of(x)];
                let wrapped = c < re;
                let delta = (re.wrapping_neg()).wrapping_add(if wrapped && n < 64 { 1u64 << n } else { 0 });
                let mut v = Vec::with_capacity(d.words);
                for poly in &piece.polys {
                    let mut c: Vec<u64> = poly.iter().map(|&x| word(x, l)).collect();
                    c.resize(d.degree + 1, 0);
                    v.extend(shift_poly(&c, delta & mask(l), l));
                }
                v.extend(piece.consts.iter().map(|&x| word(x, l)));
                v.extend(piece.bools.iter().map(|b| matches!(b, BoolExpr::Const(true)) as u64));
                v
            };
            let vals: Vec<Vec<u64>> = cuts.iter().map(|&c| payload(c)).collect();
            for t in 0..per {
                alphas.push(cuts[t + 1]);
                betas.extend(vals[t].iter().zip(&vals[t + 1]).map(|(a, b)| a.wrapping_sub(*b) & mask(l)));
            }
            base.extend(&vals[per]);
        }
        Ok((alphas, betas, base))
    }

    /// Party `b`'s comparison: fills the leaves' XOR shares into `locals`.
    fn comparison(&self, key: &CompiledKey, xh: &[u64], locals: &mut [u64]) -> Result<(), GateError> {
        let p = &*self.program;
        let nl = p.locals as usize;
        let total: usize = p.families.iter().map(|f| f.points.len()).sum::<usize>().max(1);
        let chunk = ((1 << 17) / total).clamp(64, 4096);
        let party0 = key.party == Party::P0;
        let n = self.n();
        let mut scratch = Scratch::default();
        // lt/eq bitsets per family, point order: [element][word]
        let mut lt: Vec<Vec<u64>> = vec![vec![]; p.families.len()];
        let mut eq: Vec<Vec<u64>> = vec![vec![]; p.families.len()];
        for e0 in (0..self.len).step_by(chunk) {
            let e1 = (e0 + chunk).min(self.len);
            for (fi, f) in p.families.iter().enumerate() {
                let t = f.points.len();
                let w = words_for(t);
                let (lt_f, eq_f) = (&mut lt[fi], &mut eq[fi]);
                lt_f.clear();
                lt_f.resize((e1 - e0) * w, 0);
                eq_f.clear();
                eq_f.resize(if f.eq { (e1 - e0) * w } else { 0 }, 0);
                match p.cmp {
                    CmpBackend::OneKey => {
                        let plan = &self.plan.families[fi];
                        let s = &mut scratch;
                        s.pts.clear();
                        s.idx.clear();
                        s.split.clear();
                        s.offsets.clear();
                        s.offsets.push(0);
                        for &x in &xh[e0..e1] {
                            let a = sorted_points(f, plan, n, x, &mut s.pts, &mut s.idx);
                            s.split.push(a);
                            s.offsets.push(s.pts.len());
                        }
                        s.lt.clear();
                        s.lt.resize(lt_f.len(), 0);
                        s.eq.clear();
                        s.eq.resize(eq_f.len(), 0);
                        let keys = key.cmp[fi].slice(e0, e1);
                        let eqs = if f.eq { Some(&mut s.eq[..]) } else { None };
                        keys.eval_sorted_bits(&s.pts, &s.offsets, &mut s.lt, eqs)?;
                        for e in 0..e1 - e0 {
                            let range = e * w..(e + 1) * w;
                            match s.split[e] {
                                // One group: point order is the sorted order reversed and rotated.
                                Some(a) => {
                                    unsort(&s.lt[range.clone()], t, a, &mut lt_f[range.clone()], &mut s.tmp);
                                    if f.eq {
                                        unsort(&s.eq[range.clone()], t, a, &mut eq_f[range], &mut s.tmp);
                                    }
                                }
                                None => {
                                    for j in 0..t {
                                        let k = s.idx[s.offsets[e] + j] as usize;
                                        let bit =
                                            |v: &[u64]| ((v[e * w + j / 64] >> (j % 64)) & 1) << (k % 64);
                                        lt_f[e * w + k / 64] |= bit(&s.lt);
                                        if f.eq {
                                            eq_f[e * w + k / 64] |= bit(&s.eq);
                                        }
                                    }
                                }
                            }
                        }
                    }
                    CmpBackend::PerThreshold => {
                        let mut pts = Vec::with_capacity((e1 - e0) * t);
                        for &x in &xh[e0..e1] {
                            pts.extend(f.points.iter().map(|&(off, _)| f.view(n, x, off)));
                        }
                        let mut out = vec![CmpShares::default(); pts.len()];
                        key.cmp[fi].slice(e0 * t, e1 * t).eval(&pts, &mut out)?;
                        for e in 0..e1 - e0 {
                            for (k, &(_, beta)) in f.points.iter().enumerate() {
                                let j = e * t + k;
                                // LT(v − β) = 1[v < r + β] ⊕ carry ⊕ 1[v < β]
                                let public = party0 && pts[j] < beta;
                                let v = out[j].lt.0 ^ key.carries[fi][(e0 + e) * t + k] ^ public;
                                lt_f[e * w + k / 64] |= (v as u64) << (k % 64);
                                if f.eq {
                                    eq_f[e * w + k / 64] |= (out[j].eq.0 as u64) << (k % 64);
                                }
                            }
                        }
                    }
                }
            }
            for e in 0..e1 - e0 {
                for (li, leaf) in self.plan.leaves.iter().enumerate() {
                    let mut par = 0u32;
                    for (f, m) in &leaf.lt {
                        let w = m.len();
                        par ^= m
                            .iter()
                            .zip(&lt[*f][e * w..(e + 1) * w])
                            .map(|(a, b)| (a & b).count_ones())
                            .sum::<u32>();
                    }
                    for (f, m) in &leaf.eq {
                        let w = m.len();
                        par ^= m
                            .iter()
                            .zip(&eq[*f][e * w..(e + 1) * w])
                            .map(|(a, b)| (a & b).count_ones())
                            .sum::<u32>();
                    }
                    if party0 {
                        par ^= leaf.konst as u32;
                        let x = xh[e0 + e];
                        for (bits, betas) in &leaf.below {
                            let v = x & mask(*bits);
                            par ^= (betas.len() - betas.partition_point(|&b| b <= v)) as u32;
                        }
                    }
                    locals[(e0 + e) * nl + li] = (par & 1) as u64;
                }
            }
        }
        Ok(())
    }

    /// The DCF lookup: suffix sums of the payloads at `x̂`.
    fn dcf_lookup(&self, key: &CompiledKey, xh: &[u64], locals: &mut [u64]) -> Result<(), GateError> {
        let LookupPlan::Dcf(d) = &self.program.lookup else { return Ok(()) };
        let (_, per) = self.dcf_params().expect("dcf");
        let keys = key.dcf.as_ref().ok_or(GateError::KeyMismatch("missing DCF keys"))?;
        let nl = self.program.locals as usize;
        let l = self.l();
        let pts: Vec<u64> = xh.iter().flat_map(|&x| std::iter::repeat_n(x, per)).collect();
        let mut out = vec![AddShare::default(); pts.len() * d.words];
        keys.eval(&pts, &mut out)?;
        for e in 0..self.len {
            for k in 0..d.words {
                let mut v = key.dcf_base[e * d.words + k];
                for t in 0..per {
                    v = v.wrapping_add(out[(e * per + t) * d.words + k].0);
                }
                locals[e * nl + d.first_local as usize + k] = v & mask(l);
            }
        }
        Ok(())
    }

    /// The table lookup after the opening: `[T[I]] = Σ_j y(j)·T[Î ⊕ j]` (or the reduced view's
    /// row sum).
    fn table_lookup(
        &self,
        key: &CompiledKey,
        xh: &[u64],
        opened: &[Vec<u64>],
        locals: &mut [u64],
    ) -> Result<(), GateError> {
        let LookupPlan::Table(t) = &self.program.lookup else { return Ok(()) };
        let keys = key.table.as_ref().ok_or(GateError::KeyMismatch("missing table keys"))?;
        let p = &*self.program;
        let (nl, l) = (p.locals as usize, self.l());
        let size = 1usize << t.domain_bits;
        let chunk = (1 << 20) / size.max(1);
        let chunk = chunk.max(1);
        for e0 in (0..self.len).step_by(chunk) {
            let e1 = (e0 + chunk).min(self.len);
            let y = keys.full_domain(e0..e1)?;
            for e in e0..e1 {
                let ye = &y[(e - e0) * size..(e - e0 + 1) * size];
                let mut acc = vec![0u64; t.words];
                if t.shift == 0 {
                    let idx = t
                        .opened
                        .iter()
                        .enumerate()
                        .fold(0usize, |a, (i, &j)| a | (opened[j as usize][e] as usize) << i);
                    for (j, &yj) in ye.iter().enumerate() {
                        let r = idx ^ j;
                        let row = &t.table[r * t.words..(r + 1) * t.words];
                        for (a, &v) in acc.iter_mut().zip(row) {
                            *a = a.wrapping_add(yj.wrapping_mul(v));
                        }
                    }
                } else {
                    let k = self.n() - t.shift;
                    let c = opened[t.opened[0] as usize][e];
                    let uh = (xh[e] >> t.shift) & mask(k);
                    let half = 1usize << k;
                    for (j, &yj) in ye.iter().enumerate() {
                        let (zc, i) = ((j >> k) as u64, (j & (half - 1)) as u64);
                        let row = (uh.wrapping_sub(c ^ zc).wrapping_sub(i) & mask(k)) as usize;
                        for (a, &v) in acc.iter_mut().zip(&t.table[row * t.words..(row + 1) * t.words]) {
                            *a = a.wrapping_add(yj.wrapping_mul(v));
                        }
                    }
                }
                for (k, a) in acc.into_iter().enumerate() {
                    locals[e * nl + t.first_local as usize + k] = a & mask(l);
                }
            }
        }
        Ok(())
    }

    /// The masked outputs.
    ///
    /// # Errors
    /// As [`Gate::eval`].
    pub async fn run(&self, ctx: &Ctx, key: &CompiledKey, xh: &[u64]) -> Result<Vec<u64>, GateError> {
        let p = &*self.program;
        let (n, len) = (self.n(), self.len);
        check("inputs", len, xh.len())?;
        if key.party != ctx.party() {
            return Err(GateError::KeyMismatch("key of the other party"));
        }
        let xh: Vec<u64> = xh.iter().map(|&x| x & mask(n)).collect();
        let nl = p.locals as usize;
        let mut locals = vec![0u64; len * nl];
        self.comparison(key, &xh, &mut locals)?;
        self.dcf_lookup(key, &xh, &mut locals)?;
        let npv = p.pvars.len();
        let mut pv = vec![0u64; len * npv];
        for (s, v) in p.pvars.iter().enumerate() {
            if let Some(f) = static_pvar(*v, n) {
                for e in 0..len {
                    pv[e * npv + s] = f(xh[e]);
                }
            }
        }
        let slot = |v: PVar| p.pvars.iter().position(|w| *w == v);
        let mut outputs = vec![];
        let mut bits = vec![];
        for (t, ex) in p.exchanges.iter().enumerate() {
            let mut forms: Vec<&Form> = ex.bits.iter().collect();
            forms.extend(ex.beaver.iter().map(|(_, f)| f));
            forms.extend(ex.outputs.iter());
            let shares: Vec<Vec<u64>> = forms.iter().map(|f| self.eval_form(f, key, &locals, &pv)).collect();
            let parts: Vec<(&[u64], u32)> =
                shares.iter().zip(&forms).map(|(s, f)| (s.as_slice(), f.bits)).collect();
            let opened = ctx.open_many(&parts).await?;
            let mut it = opened.into_iter();
            for j in 0..ex.bits.len() {
                let vals = it.next().expect("one per form");
                if let Some(s) = slot(PVar::Open(j as u32)) {
                    for e in 0..len {
                        pv[e * npv + s] = vals[e];
                    }
                }
                bits.push(vals);
            }
            for (i, _) in &ex.beaver {
                let vals = it.next().expect("one per form");
                if let Some(s) = slot(PVar::Beaver(*i)) {
                    for e in 0..len {
                        pv[e * npv + s] = vals[e];
                    }
                }
            }
            for _ in &ex.outputs {
                outputs.extend(it.next().expect("one per form"));
            }
            if t == 0 {
                self.table_lookup(key, &xh, &bits, &mut locals)?;
            }
        }
        Ok(outputs)
    }

    /// A party's shares of a linear form for every element.
    fn eval_form(&self, f: &Form, key: &CompiledKey, locals: &[u64], pv: &[u64]) -> Vec<u64> {
        let p = &*self.program;
        let (nl, npv) = (p.locals as usize, p.pvars.len());
        let m = mask(f.bits);
        let party0 = key.party == Party::P0;
        (0..self.len)
            .map(|e| {
                let mut acc = 0u64;
                for t in &f.terms {
                    let pub_val = match t.pmono {
                        None => 1,
                        Some(i) => p.pmonos[i as usize].iter().fold(1u64, |a, &(s, x)| {
                            a.wrapping_mul(pv[e * npv + s as usize].wrapping_pow(x as u32))
                        }),
                    };
                    let src = match t.src {
                        Src::One => party0 as u64,
                        Src::Word(w) => key.words[w as usize][e],
                        Src::Local(j) => {
                            let v = locals[e * nl + j as usize];
                            if f.bits == 1 { v & 1 } else { v }
                        }
                    };
                    acc = acc.wrapping_add(t.coef.wrapping_mul(pub_val).wrapping_mul(src));
                }
                acc & m
            })
            .collect()
    }

    /// The reference outputs of input `x`, output-major.
    pub fn plain(&self, x: &[u64]) -> Vec<u64> {
        let p = &*self.program;
        let vals: Vec<_> = x.iter().map(|&v| p.spec.eval(v)).collect();
        let mut out = Vec::with_capacity(x.len() * p.outputs.len());
        let (mut a, mut b) = (0, 0);
        for k in &p.outputs {
            match k {
                Kind::Arith => {
                    out.extend(vals.iter().map(|v| v.arith[a]));
                    a += 1;
                }
                Kind::Bool => {
                    out.extend(vals.iter().map(|v| v.bools[b] as u64));
                    b += 1;
                }
            }
        }
        out
    }
}

/// Values of the public variables known before any exchange.
fn static_pvar(v: PVar, n: u32) -> Option<Box<dyn Fn(u64) -> u64>> {
    match v {
        PVar::XHat => Some(Box::new(|x| x)),
        PVar::XHatShr { offset, shift } => {
            Some(Box::new(move |x| (x.wrapping_add(offset) & mask(n)) >> shift))
        }
        _ => None,
    }
}

/// Buffers reused across chunks of the comparison.
#[derive(Default)]
struct Scratch {
    pts: Vec<u64>,
    idx: Vec<u32>,
    offsets: Vec<usize>,
    split: Vec<Option<usize>>,
    lt: Vec<u64>,
    eq: Vec<u64>,
    tmp: Vec<u64>,
}

/// Family `f`'s points for masked input `x`, sorted. With one group of points (one offset),
/// the sorted order is point order reversed and rotated: returns the rotation, and pushes no
/// indices. Otherwise pushes each sorted point's index and returns `None`.
fn sorted_points(
    f: &Family,
    plan: &FamilyPlan,
    n: u32,
    x: u64,
    pts: &mut Vec<u64>,
    idx: &mut Vec<u32>,
) -> Option<usize> {
    let m = mask(f.bits);
    if let [(off, range)] = plan.groups.as_slice() {
        let v = f.view(n, x, *off);
        let betas = &f.points[range.clone()];
        // β ≤ v gives v − β (descending in β), β > v wraps above v: each part reversed.
        let q = betas.partition_point(|&(_, b)| b <= v);
        pts.extend(betas[..q].iter().rev().map(|&(_, b)| v.wrapping_sub(b) & m));
        pts.extend(betas[q..].iter().rev().map(|&(_, b)| v.wrapping_sub(b) & m));
        return Some(q);
    }
    let start = pts.len();
    for (off, range) in &plan.groups {
        let v = f.view(n, x, *off);
        for k in range.clone() {
            pts.push(v.wrapping_sub(f.points[k].1) & m);
            idx.push(k as u32);
        }
    }
    let mut pairs: Vec<(u64, u32)> = pts[start..].iter().copied().zip(idx[start..].iter().copied()).collect();
    pairs.sort_unstable();
    for (j, (pt, k)) in pairs.into_iter().enumerate() {
        pts[start + j] = pt;
        idx[start + j] = k;
    }
    None
}

/// 64 bits of `src` from bit `start` (zeros beyond the end).
#[inline(always)]
fn bits_at(src: &[u64], start: usize) -> u64 {
    let (i, sh) = (start / 64, start % 64);
    let lo = src.get(i).copied().unwrap_or(0) >> sh;
    let hi = if sh == 0 { 0 } else { src.get(i + 1).copied().unwrap_or(0) << (64 - sh) };
    lo | hi
}

/// Point-order bits from sorted-order bits `s` (`t` bits, `a` points at or below the view):
/// sorted position `j` holds point `a − 1 − j` for `j < a`, else `a + t − 1 − j`. That is
/// `out_i = r_{(i − a) mod t}` with `r` the reversal of `s`.
fn unsort(s: &[u64], t: usize, a: usize, out: &mut [u64], tmp: &mut Vec<u64>) {
    let w = words_for(t);
    let pad = 64 * w - t;
    // rev: the 64w-bit reversal of s; r_i = rev_{i + pad}; rr = r ‖ r (2t bits).
    tmp.clear();
    tmp.resize(4 * w + 2, 0);
    let (rev, rest) = tmp.split_at_mut(w);
    let (r, rr) = rest.split_at_mut(w);
    for j in 0..w {
        rev[j] = s[w - 1 - j].reverse_bits();
    }
    for (j, rj) in r.iter_mut().enumerate() {
        *rj = bits_at(rev, pad + 64 * j);
    }
    if !t.is_multiple_of(64) {
        r[w - 1] &= (1u64 << (t % 64)) - 1;
    }
    rr[..w].copy_from_slice(r);
    for (j, &v) in r.iter().enumerate() {
        let (i, sh) = ((t + 64 * j) / 64, (t + 64 * j) % 64);
        rr[i] |= v << sh;
        if sh != 0 {
            rr[i + 1] |= v >> (64 - sh);
        }
    }
    for (j, o) in out.iter_mut().enumerate() {
        *o = bits_at(rr, t - a + 64 * j);
    }
    if !t.is_multiple_of(64) {
        out[w - 1] &= (1u64 << (t % 64)) - 1;
    }
}

fn check(what: &'static str, expected: usize, actual: usize) -> Result<(), GateError> {
    if expected != actual {
        return Err(GateError::Length { what, expected, actual });
    }
    Ok(())
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
            put_words(w, v, width);
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
        let g = CompiledGate::new(s.program.clone(), s.len);
        g.read_key(party, r)
    }
}

impl CompiledGate {
    fn read_key(&self, party: Party, r: &mut BitReader<'_>) -> Result<CompiledKey, DecodeError> {
        let p = &*self.program;
        let mut cmp = vec![];
        let mut carries = vec![];
        for f in &p.families {
            let count = self.family_keys(f);
            cmp.push(BitDpfKeys::read_material(Self::family_params(f), party, count, r)?);
            let c = if p.cmp == CmpBackend::PerThreshold { count } else { 0 };
            carries.push(get_bits(r, c)?);
        }
        let words = p.words.iter().map(|w| get_words(r, self.len, w.width)).collect::<Result<_, _>>()?;
        let table = match &p.lookup {
            LookupPlan::Table(t) => Some(fss::adpf::AdpfKeys::read_material(
                table_params(t.domain_bits, self.l()),
                party,
                self.len,
                r,
            )?),
            _ => None,
        };
        let (dcf, dcf_base) = match self.dcf_params() {
            Some((params, per)) => {
                let LookupPlan::Dcf(d) = &p.lookup else { unreachable!("dcf") };
                let k = DcfKeys::read_material(params, party, self.len * per, r)?;
                (Some(k), get_words(r, self.len * d.words, self.l())?)
            }
            None => (None, vec![]),
        };
        let widths = p.words.iter().map(|w| w.width).collect();
        Ok(CompiledKey { party, widths, l: self.l(), cmp, carries, words, table, dcf, dcf_base })
    }
}

impl Gate for CompiledGate {
    type Key = CompiledKey;

    fn input_bits(&self) -> Vec<u32> {
        vec![self.n()]
    }

    fn input_lens(&self) -> Vec<usize> {
        vec![self.len]
    }

    fn output_bits(&self) -> u32 {
        self.program.output_width(0)
    }

    fn output_len(&self) -> usize {
        self.len * self.program.outputs.len()
    }

    fn output_wires(&self) -> Vec<(u32, usize)> {
        (0..self.program.outputs.len()).map(|o| (self.program.output_width(o), self.len)).collect()
    }

    fn key_shape(&self) -> CompiledShape {
        CompiledShape { program: self.program.clone(), len: self.len }
    }

    fn keygen<R: CryptoRng + ?Sized>(
        &self,
        masks_in: &[&[u64]],
        mask_out: &[u64],
        rng: &mut R,
    ) -> Result<(CompiledKey, CompiledKey), GateError> {
        check("input wires", 1, masks_in.len())?;
        self.deal(masks_in[0], mask_out, rng)
    }

    async fn eval(&self, ctx: &Ctx, key: &CompiledKey, inputs: &[&[u64]]) -> Result<Vec<u64>, GateError> {
        check("input wires", 1, inputs.len())?;
        self.run(ctx, key, inputs[0]).await
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        self.plain(inputs[0])
    }
}

/// Compile errors surface as gate parameter errors.
impl From<SpecError> for GateError {
    fn from(e: SpecError) -> GateError {
        GateError::Params(e.to_string())
    }
}
