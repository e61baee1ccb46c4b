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

use crate::parity::{ParityTable, words_for};
use crate::predicate::{Family, LinBit, Term};
use crate::program::{
    CmpBackend, FTerm, Form, LookupPlan, Program, Src, TablePlan, shift_poly, table_params,
};
use crate::spec::{BoolExpr, Kind, SpecError, word};
use crate::sym::{PVar, SVar};
use crate::word_column::WordColumn;

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

/// One party's key for a [`CompiledGate`] (zeroized on drop).
#[derive(Clone, PartialEq, Eq)]
pub struct CompiledKey {
    party: Party,
    /// Stored width of each dealer word, and the output ring width (public shape).
    widths: Vec<u32>,
    l: u32,
    /// Elements.
    len: usize,
    /// Per family: the comparison keys (one per element, or one per element and query).
    cmp: Vec<BitDpfKeys>,
    /// Per family (per-threshold keying only): XOR shares of the carries, element-major.
    carries: Vec<Vec<bool>>,
    /// Dealer words, word-major, each at the narrowest of 1, 32 or 64 bits.
    words: Vec<WordColumn>,
    /// The masks of the first exchange's masked bits, packed per element (see
    /// [`masked_bit_masks`]); derived from `words`, not stored.
    zbits: Vec<u64>,
    /// The table lookup's keys (one per element).
    table: Option<fss::adpf::AdpfKeys>,
    /// The DCF lookup's keys (element-major) and base shares (element-major).
    dcf: Option<DcfKeys>,
    dcf_base: Vec<u64>,
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

/// A leaf's terms as bitmasks over each family's points (and over dense runs' windows):
/// what [`EvalPlan`]'s parity tables are built from.
#[derive(Clone, Debug, Default)]
struct LeafPlan {
    konst: bool,
    lt: Vec<(usize, Vec<u64>)>,
    eq: Vec<(usize, Vec<u64>)>,
    below: Vec<(u32, Vec<u64>)>,
    /// Dense runs the leaf reads: (family, run, window masks).
    runs: Vec<(usize, usize, RunMasks)>,
}

/// A leaf's part in a dense run, over window positions `u` (`p = p_start + u`).
#[derive(Clone, Debug, Default)]
struct RunMasks {
    /// `C(u) = ⨁_{k: u_k < u} m_k` for the leaf's LT terms in the run.
    lt: Vec<u64>,
    /// The leaf's EQ terms, at their window positions.
    eq: Vec<u64>,
    /// `C(S)`: the XOR of the leaf's LT terms in the run.
    total: bool,
}

/// A dense run of a family's points, answered from equality shares over a window:
/// points `a..=b` in `β` order (circularly: a run may continue past `2^bits − 1` into the
/// smallest `β`s, with `a > b`), window width `(β_b − β_a mod 2^bits) + 1`, starting at
/// `v − β_b`.
#[derive(Clone, Debug)]
struct Run {
    a: usize,
    b: usize,
    width: usize,
}

/// Per family: the points grouped by offset, each group sorted by `β`; for a one-group
/// family, its dense runs and the points still evaluated one by one (each run's first
/// point, whose `LT` anchors the run, comes with the run's window).
#[derive(Clone, Debug)]
struct FamilyPlan {
    groups: Vec<(u64, std::ops::Range<usize>)>,
    runs: Vec<Run>,
    sparse: Vec<usize>,
    /// The one-by-one points in clusters of one offset whose `β`s lie within a leaf block of
    /// the first's (a split comparison's `β` and `β + 1`): `(point, β − β_first)` per member.
    clusters: Vec<Vec<(usize, u64)>>,
}

impl FamilyPlan {
    /// Group the one-by-one points (in `β` order within each offset) into clusters.
    fn cluster(&mut self, f: &Family) {
        let mut clusters: Vec<Vec<(usize, u64)>> = vec![];
        for &k in &self.sparse {
            let (off, beta) = f.points[k];
            match clusters.last_mut() {
                Some(c)
                    if f.points[c[0].0].0 == off && beta - f.points[c[0].0].1 < 1 << bitdpf::LEAF_BITS =>
                {
                    c.push((k, beta - f.points[c[0].0].1));
                }
                _ => clusters.push(vec![(k, 0)]),
            }
        }
        self.clusters = clusters;
    }
}

/// Split points (sorted by `β`) into runs at gaps wider than this.
const RUN_GAP: u64 = 2048;

/// A run is read from a window when its points would cost more one by one (≈ 8 ns each)
/// than the window (≈ 0.05 ns per position for the tree, 0.005 ns per position and leaf).
/// (Fitted before the parity tables; a model with narrower gaps and cheaper leaves made
/// GeLU and `e^{−x}` 1.5× slower, so it stays.)
fn dense(count: usize, width: u64, leaves: usize) -> bool {
    count >= 32 && (count as f64) * 8.0 > width as f64 * (0.05 + 0.005 * leaves as f64) + 200.0
}

/// What evaluation precomputes from a program.
#[derive(Debug)]
struct EvalPlan {
    families: Vec<FamilyPlan>,
    /// A reduced view's table per word, rows reversed.
    reversed: Vec<Vec<u64>>,
    /// The leaves' public low-bit terms, merged per width.
    below: Vec<BelowGroup>,
    /// The leaves' constants, a bit per leaf (party 0 adds them).
    konst: Vec<u64>,
    /// Per family: the leaves' `LT` and `EQ` terms outside dense runs, as parity tables
    /// over the family's bits in point order.
    lt_tables: Vec<ParityTable>,
    eq_tables: Vec<ParityTable>,
    /// Per family and dense run: the leaves' terms on the run's window.
    run_tables: Vec<Vec<RunTables>>,
    /// Whether only masked-bit forms ([`bit_form`]) read the leaves: then the leaves stay
    /// packed (a bit per leaf) and are not stored as locals.
    packed_leaves: bool,
    /// Whether the first exchange is opened packed ([`packed_first_exchange`]).
    packed_first: bool,
}

/// Whether `f` is a one-bit form without public factors (a masked bit: a leaf, its mask's
/// low bit and constants, XORed).
fn bit_form(f: &Form) -> bool {
    f.bits == 1 && f.terms.iter().all(|t| t.pmono.is_none())
}

/// Whether only [`bit_form`]s read the leaves ([`EvalPlan::packed_leaves`]).
fn packed_leaves(p: &Program) -> bool {
    let leaves = p.leaves.len() as u32;
    p.exchanges.iter().all(|e| {
        e.forms()
            .filter(|f| !bit_form(f))
            .all(|f| f.terms.iter().all(|t| !matches!(t.src, Src::Local(j) if j < leaves)))
    })
}

/// Whether the first exchange opens only masked bits of packed leaves: each a [`bit_form`]
/// whose locals are leaves. It is then computed and opened packed, a bit vector per element
/// ([`CompiledGate::open_masked_bits`]).
fn packed_first_exchange(p: &Program) -> bool {
    let Some(ex) = p.exchanges.first() else { return false };
    let leaves = p.leaves.len() as u32;
    packed_leaves(p)
        && !ex.bits.is_empty()
        && ex.beaver.is_empty()
        && ex.outputs.is_empty()
        && ex
            .bits
            .iter()
            .all(|f| bit_form(f) && f.terms.iter().all(|t| !matches!(t.src, Src::Local(j) if j >= leaves)))
}

/// A party's masks of the first exchange's masked bits, packed per element
/// (`⌈bits / 64⌉` words each): bit `i` is the XOR of the low bits of bit form `i`'s words
/// (a word's low bit is an XOR share of the mask it holds). Empty unless that exchange is
/// opened packed (`packed_first`: the plan's [`packed_first_exchange`]).
fn masked_bit_masks(p: &Program, packed_first: bool, words: &[WordColumn], len: usize) -> Vec<u64> {
    if !packed_first {
        return vec![];
    }
    let ex = &p.exchanges[0];
    let zw = words_for(ex.bits.len());
    let mut z = vec![0u64; len * zw];
    for (i, f) in ex.bits.iter().enumerate() {
        for t in f.terms.iter().filter(|t| t.coef & 1 == 1) {
            if let Src::Word(j) = t.src {
                words[j as usize].each_low_bit(len, |e, bit| z[e * zw + i / 64] ^= bit << (i % 64));
            }
        }
    }
    z
}

/// The leaves' terms on one dense run, a bit per leaf: the window's parity table (`LT` and
/// `EQ` masks merged, since only the parity counts), and the wrap corrections.
#[derive(Debug, Default)]
struct RunTables {
    /// Whether some leaf reads the run.
    used: bool,
    window: ParityTable,
    /// `C(S)` per leaf.
    total: Vec<u64>,
    /// `C(u)` per leaf at each window position `u` (`width × lw` words; zero at `u = 0`).
    at: Vec<u64>,
}

/// Every leaf's public terms `1[v < β]` (`v = x̂ mod 2^bits`) of one width, merged: one
/// binary search per element answers all leaves. `suffix[i]` holds (a bit per leaf) the
/// parity of the leaf's thresholds among `betas[i..]`: those above `v` when `i` counts the
/// thresholds `≤ v`.
#[derive(Debug)]
struct BelowGroup {
    bits: u32,
    betas: Vec<u64>,
    /// `(betas.len() + 1) × words` words, `words = ⌈leaves / 64⌉`.
    suffix: Vec<u64>,
    /// `starts[h]`: the thresholds below `h·2^shift` (`2^{bits − shift} + 1` entries), so
    /// that a search covers only the thresholds of `v`'s bucket (usually none: `v` is
    /// uniform, the thresholds clustered).
    starts: Vec<u32>,
    shift: u32,
}

/// Buckets of a [`BelowGroup`]'s search: at most `2^BELOW_BUCKET_BITS`.
const BELOW_BUCKET_BITS: u32 = 12;

impl BelowGroup {
    fn new(bits: u32, betas: Vec<u64>, suffix: Vec<u64>) -> BelowGroup {
        let shift = bits.saturating_sub(BELOW_BUCKET_BITS);
        let top = 1u64 << (bits - shift);
        let starts = (0..=top)
            .map(|h| if h == top { betas.len() } else { betas.partition_point(|&b| b < h << shift) } as u32)
            .collect();
        BelowGroup { bits, betas, suffix, starts, shift }
    }

    /// The number of thresholds `≤ v` (`v < 2^bits`).
    #[inline]
    fn count_upto(&self, v: u64) -> usize {
        let h = (v >> self.shift) as usize;
        let (a, b) = (self.starts[h] as usize, self.starts[h + 1] as usize);
        a + self.betas[a..b].partition_point(|&x| x <= v)
    }
}

impl BelowGroup {
    /// The groups of `leaves`' below terms.
    fn merge(leaves: &[LeafPlan]) -> Vec<BelowGroup> {
        let words = words_for(leaves.len());
        let mut widths: Vec<u32> = leaves.iter().flat_map(|l| l.below.iter().map(|(b, _)| *b)).collect();
        widths.sort_unstable();
        widths.dedup();
        widths
            .into_iter()
            .map(|bits| {
                let mut betas: Vec<u64> = leaves
                    .iter()
                    .flat_map(|l| {
                        l.below.iter().filter(|(b, _)| *b == bits).flat_map(|(_, v)| v.iter().copied())
                    })
                    .collect();
                betas.sort_unstable();
                betas.dedup();
                let mut suffix = vec![0u64; (betas.len() + 1) * words];
                for (li, l) in leaves.iter().enumerate() {
                    for (_, v) in l.below.iter().filter(|(b, _)| *b == bits) {
                        for beta in v {
                            let i = betas.partition_point(|&b| b < *beta);
                            suffix[i * words + li / 64] ^= 1 << (li % 64);
                        }
                    }
                }
                for i in (0..betas.len()).rev() {
                    for w in 0..words {
                        suffix[i * words + w] ^= suffix[(i + 1) * words + w];
                    }
                }
                BelowGroup::new(bits, betas, suffix)
            })
            .collect()
    }
}

/// `Σ a_i·b_i` (wrapping).
fn dot(a: &[u64], b: &[u64]) -> u64 {
    a.iter().zip(b).fold(0u64, |s, (x, y)| s.wrapping_add(x.wrapping_mul(*y)))
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
        let mut leaves: Vec<LeafPlan> = leaves;
        let families: Vec<FamilyPlan> = p
            .families
            .iter()
            .enumerate()
            .map(|(fi, f): (usize, &Family)| {
                let mut groups: Vec<(u64, std::ops::Range<usize>)> = vec![];
                for (k, &(off, _)) in f.points.iter().enumerate() {
                    match groups.last_mut() {
                        Some((o, r)) if *o == off => r.end = k + 1,
                        _ => groups.push((off, k..k + 1)),
                    }
                }
                let mut plan = FamilyPlan {
                    groups,
                    runs: vec![],
                    sparse: (0..f.points.len()).collect(),
                    clusters: vec![],
                };
                if p.cmp == CmpBackend::OneKey && plan.groups.len() == 1 && f.bits > bitdpf::LEAF_BITS {
                    dense_runs(fi, f, &mut plan, &mut leaves);
                }
                plan.cluster(f);
                plan
            })
            .collect();
        let reversed = match &p.lookup {
            LookupPlan::Table(t) if t.shift > 0 => {
                let rows = t.table.len() / t.words;
                (0..t.words).map(|k| (0..rows).rev().map(|r| t.table[r * t.words + k]).collect()).collect()
            }
            _ => vec![],
        };
        let below = BelowGroup::merge(&leaves);
        let lw = words_for(leaves.len());
        let mut konst = vec![0u64; lw];
        for (li, l) in leaves.iter().enumerate() {
            konst[li / 64] ^= (l.konst as u64) << (li % 64);
        }
        let family_table = |fi: usize, eq: bool| {
            let masks: Vec<(usize, &[u64])> = leaves
                .iter()
                .enumerate()
                .flat_map(|(li, l)| {
                    let list = if eq { &l.eq } else { &l.lt };
                    list.iter().filter(move |(g, _)| *g == fi).map(move |(_, m)| (li, &m[..]))
                })
                .collect();
            ParityTable::new(p.families[fi].points.len(), leaves.len(), &masks)
        };
        let lt_tables = (0..p.families.len()).map(|fi| family_table(fi, false)).collect();
        let eq_tables = (0..p.families.len()).map(|fi| family_table(fi, true)).collect();
        let run_tables = families
            .iter()
            .enumerate()
            .map(|(fi, fp): (usize, &FamilyPlan)| {
                fp.runs
                    .iter()
                    .enumerate()
                    .map(|(ri, r)| {
                        let mut t = RunTables {
                            total: vec![0; lw],
                            at: vec![0; r.width * lw],
                            ..RunTables::default()
                        };
                        let mut merged = vec![];
                        for (li, l) in leaves.iter().enumerate() {
                            for (_, _, m) in l.runs.iter().filter(|(g, q, _)| *g == fi && *q == ri) {
                                t.used = true;
                                t.total[li / 64] ^= (m.total as u64) << (li % 64);
                                for u in 1..r.width {
                                    t.at[u * lw + li / 64] ^= ((m.lt[u / 64] >> (u % 64)) & 1) << (li % 64);
                                }
                                let mut both = m.lt.clone();
                                both.iter_mut().zip(&m.eq).for_each(|(a, b)| *a ^= b);
                                merged.push((li, both));
                            }
                        }
                        let refs: Vec<(usize, &[u64])> = merged.iter().map(|(li, m)| (*li, &m[..])).collect();
                        t.window = ParityTable::new(r.width, leaves.len(), &refs);
                        t
                    })
                    .collect()
            })
            .collect();
        EvalPlan {
            families,
            reversed,
            below,
            konst,
            lt_tables,
            eq_tables,
            run_tables,
            packed_leaves: packed_leaves(p),
            packed_first: packed_first_exchange(p),
        }
    }
}

/// Find the dense runs of family `fi` and move the leaves' terms on their points into
/// window masks.
fn dense_runs(fi: usize, f: &Family, plan: &mut FamilyPlan, leaves: &mut [LeafPlan]) {
    let beta = |k: usize| f.points[k].1;
    let users = leaves.iter().filter(|l| l.lt.iter().chain(&l.eq).any(|(g, _)| *g == fi)).count();
    let len = f.points.len();
    // Segments of points without a gap wider than RUN_GAP, as (first, last) indices.
    let mut segments = vec![];
    let mut a = 0;
    for k in 1..=len {
        if k == len || beta(k) - beta(k - 1) > RUN_GAP {
            segments.push((a, k - 1));
            a = k;
        }
    }
    // The ring is a circle: the last segment continues into the first when the gap across
    // 2^bits is small (a signed function's thresholds around 0 make one window, not two).
    if segments.len() >= 2 && (beta(0) + (mask(f.bits) - beta(len - 1)) + 1) <= RUN_GAP {
        let (first, last) = (segments.remove(0), segments.pop().expect("two segments"));
        segments.push((last.0, first.1));
    }
    let mut runs = vec![];
    for (a, b) in segments {
        let width = (beta(b).wrapping_sub(beta(a)) & mask(f.bits)) + 1;
        let count = if a <= b { b - a + 1 } else { len - a + b + 1 };
        if dense(count, width, users) {
            runs.push(Run { a, b, width: width as usize });
        }
    }
    if runs.is_empty() {
        return;
    }
    let mut in_run = vec![usize::MAX; len];
    for (ri, r) in runs.iter().enumerate() {
        // (Circularly: a run that wraps holds a.. and ..=b.)
        let mut k = r.a;
        loop {
            in_run[k] = ri;
            if k == r.b {
                break;
            }
            k = (k + 1) % len;
        }
    }
    for leaf in leaves.iter_mut() {
        let mut masks: Vec<RunMasks> = runs
            .iter()
            .map(|r| RunMasks {
                lt: vec![0; words_for(r.width)],
                eq: vec![0; words_for(r.width)],
                total: false,
            })
            .collect();
        let mut used = vec![false; runs.len()];
        for (list, is_lt) in [(&mut leaf.lt, true), (&mut leaf.eq, false)] {
            for (g, m) in list.iter_mut() {
                if *g != fi {
                    continue;
                }
                for k in 0..f.points.len() {
                    let ri = in_run[k];
                    if ri == usize::MAX || (m[k / 64] >> (k % 64)) & 1 == 0 {
                        continue;
                    }
                    m[k / 64] ^= 1 << (k % 64);
                    used[ri] = true;
                    let r = &runs[ri];
                    let u = (beta(r.b).wrapping_sub(beta(k)) & mask(f.bits)) as usize;
                    if is_lt {
                        // C(u') flips for every u' > u: mark u + 1, prefix-XOR below.
                        masks[ri].total ^= true;
                        if u + 1 < r.width {
                            masks[ri].lt[(u + 1) / 64] ^= 1 << ((u + 1) % 64);
                        }
                    } else {
                        masks[ri].eq[u / 64] ^= 1 << (u % 64);
                    }
                }
            }
        }
        for (ri, mut m) in masks.into_iter().enumerate() {
            if !used[ri] {
                continue;
            }
            let mut carry = 0u64;
            for w in m.lt.iter_mut() {
                let mut x = *w;
                x ^= x << 1;
                x ^= x << 2;
                x ^= x << 4;
                x ^= x << 8;
                x ^= x << 16;
                x ^= x << 32;
                x ^= carry;
                carry = 0u64.wrapping_sub(x >> 63);
                *w = x;
            }
            let tail = runs[ri].width % 64;
            if tail != 0 {
                let last = m.lt.len() - 1;
                m.lt[last] &= (1u64 << tail) - 1;
            }
            if m.eq.iter().all(|&x| x == 0) {
                m.eq.clear();
            }
            leaf.runs.push((fi, ri, m));
        }
    }
    // One by one: the points outside runs. (Each run's first point, whose `LT` anchors the
    // run, is the window's last point: the window walk answers it.)
    plan.sparse = (0..f.points.len()).filter(|&k| in_run[k] == usize::MAX).collect();
    plan.runs = runs;
}

/// The evaluation plan of `program`, built once per program while it lives: a gate is made
/// per layer call (a normalisation's `1/σ` per query), and the plan of a grid read in wide
/// windows takes milliseconds to build.
fn plan_of(program: &Arc<Program>) -> Arc<EvalPlan> {
    type Plans = Vec<(std::sync::Weak<Program>, Arc<EvalPlan>)>;
    static PLANS: std::sync::OnceLock<std::sync::Mutex<Plans>> = std::sync::OnceLock::new();
    let plans = PLANS.get_or_init(Default::default);
    let found = {
        let mut plans = plans.lock().unwrap_or_else(|e| e.into_inner());
        plans.retain(|(p, _)| p.strong_count() > 0);
        plans.iter().find(|(p, _)| std::ptr::eq(p.as_ptr(), Arc::as_ptr(program))).map(|(_, e)| e.clone())
    };
    found.unwrap_or_else(|| {
        let plan = Arc::new(EvalPlan::new(program));
        plans.lock().unwrap_or_else(|e| e.into_inner()).push((Arc::downgrade(program), plan.clone()));
        plan
    })
}

impl CompiledGate {
    /// `len` elements of `program`.
    pub fn new(program: Arc<Program>, len: usize) -> CompiledGate {
        let plan = plan_of(&program);
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
            fss::wipe::wipe(&mut vals);
            words[0].push(WordColumn::new(a, w.width));
            words[1].push(WordColumn::new(b, w.width));
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
        let key = |party, cmp, carries, words: Vec<WordColumn>, table, dcf, dcf_base| CompiledKey {
            party,
            widths: widths.clone(),
            l,
            len: self.len,
            cmp,
            carries,
            zbits: masked_bit_masks(p, self.plan.packed_first, &words, self.len),
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

    /// DCF points, payloads and base values (docs/design/paper.md §3.4): the intervals in `x̂`-space start
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

    /// Party `b`'s comparison: fills the leaves' XOR shares into `locals`, or packed into
    /// `packed` ([`EvalPlan::packed_leaves`]).
    fn comparison(
        &self,
        key: &CompiledKey,
        xh: &[u64],
        locals: &mut [u64],
        packed: &mut [u64],
    ) -> Result<(), GateError> {
        // Buffers kept per thread (MBs for a row's thousands of thresholds): fresh ones would
        // be faulted in again by every gate.
        let mut sc = CMP_SCRATCH.with_borrow_mut(|pool| pool.pop()).unwrap_or_default();
        let out = self.comparison_in(key, xh, locals, packed, &mut sc);
        CMP_SCRATCH.with_borrow_mut(|pool| {
            if pool.len() < 2 {
                pool.push(sc);
            }
        });
        out
    }

    /// With [`EvalPlan::packed_leaves`], the leaves go to `packed` (`lw` words per element)
    /// instead of `locals`.
    fn comparison_in(
        &self,
        key: &CompiledKey,
        xh: &[u64],
        locals: &mut [u64],
        packed: &mut [u64],
        cs: &mut CmpScratch,
    ) -> Result<(), GateError> {
        let p = &*self.program;
        let total: usize = p.families.iter().map(|f| f.points.len()).sum::<usize>().max(1);
        let chunk = ((1 << 17) / total).clamp(64, 4096);
        let party0 = key.party == Party::P0;
        let n = self.n();
        let CmpScratch { scratch, lt, eq, windows } = cs;
        // lt/eq bitsets per family, point order: [element][word]
        lt.resize_with(p.families.len(), Vec::new);
        eq.resize_with(p.families.len(), Vec::new);
        windows.resize_with(p.families.len(), Vec::new);
        for (w, f) in windows.iter_mut().zip(&self.plan.families) {
            w.resize_with(f.runs.len(), Window::default);
        }
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
                        let s = &mut *scratch;
                        s.pts.clear();
                        s.idx.clear();
                        s.split.clear();
                        s.offsets.clear();
                        s.offsets.push(0);
                        let sub = plan.sparse.len();
                        // This chunk's keys, read in place.
                        let (keys, range) = (&key.cmp[fi], e0..e1);
                        if sub <= FEW_POINTS {
                            // A few points per element: one lane each, no trie; a cluster of
                            // points within a leaf block of each other shares its lane. Lane
                            // e evaluates key e: consecutive keys, whose walk reads correction
                            // words as slices and vectorises.
                            let m = mask(f.bits);
                            for c in &plan.clusters {
                                let (off, b) = f.points[c[0].0];
                                s.pts.clear();
                                s.pts.extend(
                                    xh[e0..e1].iter().map(|&x| f.view(n, x, off).wrapping_sub(b) & m),
                                );
                                s.deltas.clear();
                                s.deltas.extend(c.iter().map(|&(_, d)| d));
                                s.cmp.clear();
                                s.cmp.resize(s.pts.len() * c.len(), CmpShares::default());
                                keys.eval_near_of(range.clone(), &s.pts, &s.deltas, &mut s.cmp)?;
                                for (e, shares) in s.cmp.chunks_exact(c.len()).enumerate() {
                                    for (&(k, _), sh) in c.iter().zip(shares) {
                                        lt_f[e * w + k / 64] |= (sh.lt.0 as u64) << (k % 64);
                                        if f.eq {
                                            eq_f[e * w + k / 64] |= (sh.eq.0 as u64) << (k % 64);
                                        }
                                    }
                                }
                            }
                        } else {
                            for &x in &xh[e0..e1] {
                                let a = sorted_points(f, plan, n, x, &mut s.pts, &mut s.idx);
                                s.split.push(a);
                                s.offsets.push(s.pts.len());
                            }
                            let ws = words_for(sub);
                            s.lt.clear();
                            s.lt.resize((e1 - e0) * ws, 0);
                            s.eq.clear();
                            s.eq.resize(if f.eq { (e1 - e0) * ws } else { 0 }, 0);
                            let eqs = if f.eq { Some(&mut s.eq[..]) } else { None };
                            keys.eval_sorted_bits_of(range.clone(), &s.pts, &s.offsets, &mut s.lt, eqs)?;
                            let full = sub == t;
                            for e in 0..e1 - e0 {
                                let (rs, rf) = (e * ws..(e + 1) * ws, e * w..(e + 1) * w);
                                match s.split[e] {
                                    // One group: point order is the sorted order reversed and rotated.
                                    Some(a) if full => {
                                        unsort(&s.lt[rs.clone()], sub, a, &mut lt_f[rf.clone()], &mut s.tmp);
                                        if f.eq {
                                            unsort(&s.eq[rs], sub, a, &mut eq_f[rf], &mut s.tmp);
                                        }
                                    }
                                    Some(a) => {
                                        // A subset: unsort within it, then spread to point order.
                                        s.sub.clear();
                                        s.sub.resize(ws, 0);
                                        for (src, dst) in [(&s.lt, &mut *lt_f), (&s.eq, &mut *eq_f)] {
                                            if dst.is_empty() {
                                                continue;
                                            }
                                            unsort(&src[rs.clone()], sub, a, &mut s.sub, &mut s.tmp);
                                            for (j, &k) in plan.sparse.iter().enumerate() {
                                                dst[e * w + k / 64] |=
                                                    ((s.sub[j / 64] >> (j % 64)) & 1) << (k % 64);
                                            }
                                        }
                                    }
                                    None => {
                                        for j in 0..sub {
                                            let k = s.idx[s.offsets[e] + j] as usize;
                                            let bit = |v: &[u64]| {
                                                ((v[e * ws + j / 64] >> (j % 64)) & 1) << (k % 64)
                                            };
                                            lt_f[e * w + k / 64] |= bit(&s.lt);
                                            if f.eq {
                                                eq_f[e * w + k / 64] |= bit(&s.eq);
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        // Dense runs: equality shares over each run's window.
                        let m = mask(f.bits);
                        let off = plan.groups.first().map_or(0, |g| g.0);
                        for (ri, r) in plan.runs.iter().enumerate() {
                            let (ba, bb) = (f.points[r.a].1, f.points[r.b].1);
                            let starts: Vec<u64> =
                                xh[e0..e1].iter().map(|&x| f.view(n, x, off).wrapping_sub(bb) & m).collect();
                            let rw = words_for(r.width);
                            let win = &mut windows[fi][ri];
                            // (The window walk writes every word.)
                            win.bits.resize((e1 - e0) * rw, 0);
                            s.cmp.clear();
                            s.cmp.resize(starts.len(), CmpShares::default());
                            keys.eval_window_end_of(
                                range.clone(),
                                &starts,
                                r.width,
                                &mut win.bits,
                                &mut s.cmp,
                            )?;
                            // The run's anchor: its first point, at the window's last position.
                            for (e, sh) in s.cmp.iter().enumerate() {
                                lt_f[e * w + r.a / 64] |= (sh.lt.0 as u64) << (r.a % 64);
                                if f.eq {
                                    eq_f[e * w + r.a / 64] |= (sh.eq.0 as u64) << (r.a % 64);
                                }
                            }
                            win.wrap.clear();
                            win.suffix.clear();
                            for (e, &start) in starts.iter().enumerate() {
                                let end = f.view(n, xh[e0 + e], off).wrapping_sub(ba) & m;
                                // The window wraps over 2^bits at u_wrap = 2^bits − start.
                                let u = if start > end { (m - start + 1) as usize } else { 0 };
                                let bits = &win.bits[e * rw..(e + 1) * rw];
                                let suffix = u != 0 && parity_from(bits, u);
                                win.wrap.push(u);
                                win.suffix.push(suffix);
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
            // The leaves, all at once: a bit per leaf in `acc` (parity tables, docs/design/paper.md §3.5).
            let plan = &*self.plan;
            let lw = words_for(p.leaves.len()).max(1);
            let mut own = vec![];
            let accs = if plan.packed_leaves {
                let a = &mut packed[e0 * lw..e1 * lw];
                a.fill(0);
                a
            } else {
                own.resize((e1 - e0) * lw, 0u64);
                &mut own[..]
            };
            for (e, acc) in accs.chunks_exact_mut(lw).enumerate() {
                acc.iter_mut().zip(&plan.konst).for_each(|(a, &k)| *a = if party0 { k } else { 0 });
                for (fi, f) in p.families.iter().enumerate() {
                    let w = words_for(f.points.len());
                    if !plan.lt_tables[fi].is_empty() {
                        plan.lt_tables[fi].apply(&lt[fi][e * w..(e + 1) * w], acc);
                    }
                    if !plan.eq_tables[fi].is_empty() {
                        plan.eq_tables[fi].apply(&eq[fi][e * w..(e + 1) * w], acc);
                    }
                    for (ri, (run, t)) in plan.families[fi].runs.iter().zip(&plan.run_tables[fi]).enumerate()
                    {
                        if !t.used {
                            continue;
                        }
                        let win = &windows[fi][ri];
                        let rw = words_for(run.width);
                        t.window.apply(&win.bits[e * rw..(e + 1) * rw], acc);
                        // Points past the wrap end at 2^bits − 1 (LT = 0), the others at the
                        // run's first point: its LT share, weighted by the LT terms after u.
                        let u = win.wrap[e];
                        let lt_a = (lt[fi][e * w + run.a / 64] >> (run.a % 64)) & 1 == 1;
                        let suffix = win.suffix[e];
                        for (k, a) in acc.iter_mut().enumerate() {
                            let cw = if u > 0 { t.at[u * lw + k] } else { 0 };
                            *a ^= (if lt_a { t.total[k] ^ cw } else { 0 }) ^ (if suffix { cw } else { 0 });
                        }
                    }
                }
                if party0 {
                    let x = xh[e0 + e];
                    for g in &plan.below {
                        let i = g.count_upto(x & mask(g.bits));
                        acc.iter_mut().zip(&g.suffix[i * lw..(i + 1) * lw]).for_each(|(a, s)| *a ^= s);
                    }
                }
            }
            if plan.packed_leaves {
                continue;
            }
            // Column by column: each local's run of elements is written in order.
            for li in 0..p.leaves.len() {
                let col = &mut locals[li * self.len + e0..li * self.len + e1];
                for (o, acc) in col.iter_mut().zip(accs.chunks_exact(lw)) {
                    *o = (acc[li / 64] >> (li % 64)) & 1;
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
                locals[(d.first_local as usize + k) * self.len + e] = v & mask(l);
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
        let l = self.l();
        let size = 1usize << t.domain_bits;
        // About 1 MB of DPF outputs at a time, in one reused buffer.
        let chunk = ((1 << 17) / size).max(1);
        let mut y = vec![0u64; chunk * size];
        for e0 in (0..self.len).step_by(chunk) {
            let e1 = (e0 + chunk).min(self.len);
            keys.full_domain_into(e0..e1, &mut y[..(e1 - e0) * size])?;
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
                    // Σ_{z', i} y(z', i)·T[(u_h − (ĉ ⊕ z') − i) mod 2^k]: for each z', two
                    // contiguous dot products with the reversed table R[j] = T[2^k − 1 − j].
                    let k = self.n() - t.shift;
                    let c = opened[t.opened[0] as usize][e];
                    let uh = (xh[e] >> t.shift) & mask(k);
                    let half = 1usize << k;
                    for z in 0..2u64 {
                        let ys = &ye[z as usize * half..(z as usize + 1) * half];
                        let b = (uh.wrapping_sub(c ^ z) & mask(k)) as usize;
                        let cut = half - 1 - b;
                        for (a, rev) in acc.iter_mut().zip(&self.plan.reversed) {
                            *a = a
                                .wrapping_add(dot(&ys[..=b], &rev[cut..]))
                                .wrapping_add(dot(&ys[b + 1..], &rev[..cut]));
                        }
                    }
                }
                for (k, a) in acc.into_iter().enumerate() {
                    locals[(t.first_local as usize + k) * self.len + e] = a & mask(l);
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
        // Working buffers kept across calls (tens of MB per layer): freshly allocated, their
        // pages would be faulted in again by every gate.
        // (A pool: both parties may run interleaved on one thread, as in the test harness.)
        let mut sc = RUN_SCRATCH.with_borrow_mut(|pool| pool.pop()).unwrap_or_default();
        let out = self.run_in(ctx, key, xh, &mut sc).await;
        RUN_SCRATCH.with_borrow_mut(|pool| {
            if pool.len() < 2 {
                pool.push(sc);
            }
        });
        out
    }

    async fn run_in(
        &self,
        ctx: &Ctx,
        key: &CompiledKey,
        xh: &[u64],
        sc: &mut RunScratch,
    ) -> Result<Vec<u64>, GateError> {
        let p = &*self.program;
        let (n, len) = (self.n(), self.len);
        check("inputs", len, xh.len())?;
        if key.party != ctx.party() {
            return Err(GateError::KeyMismatch("key of the other party"));
        }
        // (A slack spec reads `x̂ + 2^{n−2}`: same mask, so nothing else changes.)
        let offset = p.input_offset();
        let xh: Vec<u64> = xh.iter().map(|&x| x.wrapping_add(offset) & mask(n)).collect();
        // Local-major (`locals[j·len + e]`, `pv[s·len + e]`): each form reads whole columns.
        let nl = p.locals as usize;
        let RunScratch { locals, packed, pv, shares, opened, open_bits } = sc;
        // (Every local is written before it is read: the comparison writes each leaf's column
        // whole, a lookup each of its outputs' columns. No clearing.)
        let locals = at_least(locals, len * nl);
        let lw = words_for(p.leaves.len()).max(1);
        let packed = at_least(packed, if self.plan.packed_leaves { len * lw } else { 0 });
        self.comparison(key, &xh, locals, packed)?;
        self.dcf_lookup(key, &xh, locals)?;
        // The static public variables here; the opened ones are read where their exchange
        // opened them (a buffer per exchange), not copied.
        let pv = at_least(pv, len * p.pvars.len());
        let mut is_static = vec![false; p.pvars.len()];
        for (s, v) in p.pvars.iter().enumerate() {
            if let Some(f) = static_pvar(*v, n) {
                is_static[s] = true;
                for (o, &x) in pv[s * len..(s + 1) * len].iter_mut().zip(&xh) {
                    *o = f(x);
                }
            }
        }
        // Where each opened public variable is: (exchange, form index).
        let at: Vec<Option<(usize, usize)>> = p
            .pvars
            .iter()
            .map(|v| {
                p.exchanges.iter().enumerate().find_map(|(t, ex)| match *v {
                    PVar::Open(j) if (j as usize) < ex.bits.len() => Some((t, j as usize)),
                    PVar::Beaver(i) => {
                        ex.beaver.iter().position(|(k, _)| *k == i).map(|k| (t, ex.bits.len() + k))
                    }
                    _ => None,
                })
            })
            .collect();
        if opened.len() < p.exchanges.len() {
            opened.resize_with(p.exchanges.len(), Vec::new);
        }
        let mut outputs = vec![];
        let mut bits = vec![];
        for (t, ex) in p.exchanges.iter().enumerate() {
            let forms: Vec<&Form> = ex.forms().collect();
            // (Each form writes its column whole: no clearing.)
            if t == 0 && self.plan.packed_first {
                // Masked bits only: computed and opened as one bit vector per element, and
                // read packed by the later forms (unpacked only for a table lookup).
                let ob = at_least(open_bits, len * words_for(ex.bits.len()));
                self.open_masked_bits(ctx, key, packed, ob).await?;
                if matches!(p.lookup, LookupPlan::Table(_)) {
                    let zw = words_for(ex.bits.len());
                    bits.extend((0..ex.bits.len()).map(|j| {
                        ob.chunks_exact(zw).map(|o| (o[j / 64] >> (j % 64)) & 1).collect::<Vec<u64>>()
                    }));
                }
                self.table_lookup(key, &xh, &bits, locals)?;
                continue;
            }
            let shares = at_least(shares, forms.len() * len);
            {
                // The public variables known by now (an exchange's forms read only what
                // earlier exchanges opened; the others stay empty).
                let done = &opened[..t];
                let zw = words_for(p.exchanges[0].bits.len());
                let cols: Vec<PvCol<'_>> = (0..p.pvars.len())
                    .map(|s| match at[s] {
                        _ if is_static[s] => PvCol::Col(&pv[s * len..(s + 1) * len]),
                        Some((0, i)) if t > 0 && self.plan.packed_first => {
                            PvCol::Bit { words: &open_bits[..len * zw], zw, w: i / 64, b: (i % 64) as u32 }
                        }
                        Some((t2, i)) if t2 < t => PvCol::Col(&done[t2][i * len..(i + 1) * len]),
                        _ => PvCol::None,
                    })
                    .collect();
                for (i, f) in forms.iter().enumerate() {
                    let out = &mut shares[i * len..(i + 1) * len];
                    if bit_form(f) {
                        self.eval_bit_form(f, key, locals, packed, out);
                    } else {
                        self.eval_form(f, key, locals, &cols, out);
                    }
                }
            }
            let parts: Vec<(&[u64], u32)> =
                forms.iter().enumerate().map(|(i, f)| (&shares[i * len..(i + 1) * len], f.bits)).collect();
            // (Every value is written by the opening: no clearing.)
            let cur = at_least(&mut opened[t], forms.len() * len);
            ctx.open_many_into(&parts, cur).await?;
            // Opened form `i` (bits, then Beaver differences, then outputs).
            let form = |i: usize| &cur[i * len..(i + 1) * len];
            // (Only a table lookup reads the opened bits again.)
            if matches!(p.lookup, LookupPlan::Table(_)) {
                bits.extend((0..ex.bits.len()).map(|j| form(j).to_vec()));
            }
            for k in 0..ex.outputs.len() {
                outputs.extend_from_slice(form(ex.bits.len() + ex.beaver.len() + k));
            }
            if t == 0 {
                self.table_lookup(key, &xh, &bits, locals)?;
            }
        }
        Ok(outputs)
    }

    /// The first exchange when it opens only masked bits of packed leaves
    /// ([`packed_first_exchange`]): per element, the bit vector `leaves ⊕ masks ⊕ constants`
    /// (bit `i` for bit form `i`), opened in one message of as many bytes as the one-bit
    /// columns took, into `out` (`words_for(bits)` words per element). No share column per
    /// bit, no encoding pass over them.
    async fn open_masked_bits(
        &self,
        ctx: &Ctx,
        key: &CompiledKey,
        packed: &[u64],
        out: &mut [u64],
    ) -> Result<(), GateError> {
        let (p, len) = (&*self.program, self.len);
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
        let identity = zw == lw && reads.iter().enumerate().all(|(i, r)| r.as_slice() == [i]);
        let mut mine = vec![0u64; len * zw];
        for ((m, z), acc) in
            mine.chunks_exact_mut(zw).zip(key.zbits.chunks_exact(zw)).zip(packed.chunks_exact(lw))
        {
            for w in 0..zw {
                m[w] = z[w] ^ konst[w];
            }
            if identity {
                m.iter_mut().zip(acc).for_each(|(m, a)| *m ^= a);
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

    /// A party's XOR shares of a masked bit ([`bit_form`]) for every element: one pass per
    /// term with an odd coefficient, the leaves read from `packed` when they are kept there.
    fn eval_bit_form(&self, f: &Form, key: &CompiledKey, locals: &[u64], packed: &[u64], out: &mut [u64]) {
        let (len, leaves) = (self.len, self.program.leaves.len());
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
                Src::Local(j) if self.plan.packed_leaves && (j as usize) < leaves => {
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

    /// A party's shares of a linear form for every element.
    ///
    /// Term by term over blocks of elements: each public monomial the form uses is computed
    /// once per element of the block, and each term is one multiply-add per element over
    /// contiguous columns (a Φ of a split view has hundreds of terms).
    fn eval_form(&self, f: &Form, key: &CompiledKey, locals: &[u64], pv: &[PvCol<'_>], out: &mut [u64]) {
        const BLOCK: usize = 512;
        let p = &*self.program;
        let nl = p.locals as usize;
        let m = mask(f.bits);
        let party0 = key.party == Party::P0;
        let out = &mut out[..self.len];
        // Column slot of each public monomial the form uses.
        let mut slot = vec![usize::MAX; p.pmonos.len()];
        let mut used = vec![];
        for t in &f.terms {
            if let Some(i) = t.pmono
                && slot[i as usize] == usize::MAX
            {
                slot[i as usize] = used.len();
                used.push(i as usize);
            }
        }
        // Column slot of each local the form reads: gathered once per block, not per term.
        let mut lslot = vec![usize::MAX; nl];
        let mut lused = vec![];
        for t in &f.terms {
            if let Src::Local(j) = t.src
                && lslot[j as usize] == usize::MAX
            {
                lslot[j as usize] = lused.len();
                lused.push(j as usize);
            }
        }
        // Each used monomial's factors; the packed opening they read, if any.
        let mut packed_bits: Option<(&[u64], usize)> = None;
        let factors: Vec<MonoFactors<'_>> = used
            .iter()
            .map(|&i| {
                let (mut bits, mut cols) = (Vec::<(usize, u64)>::new(), vec![]);
                for &(s, x) in &p.pmonos[i] {
                    match pv[s as usize] {
                        PvCol::Bit { words, zw, w, b } => {
                            packed_bits = Some((words, zw));
                            match bits.iter_mut().find(|(w2, _)| *w2 == w) {
                                Some((_, m)) => *m |= 1 << b,
                                None => bits.push((w, 1 << b)),
                            }
                        }
                        PvCol::Col(c) => cols.push((c, x)),
                        PvCol::None => unreachable!("a form reads only public variables opened before it"),
                    }
                }
                MonoFactors { bits, cols }
            })
            .collect();
        let one = if f.bits == 1 { 1 } else { u64::MAX };
        let mut cols = vec![0u64; used.len() * BLOCK];
        let mut lcols = vec![0u64; lused.len() * BLOCK];
        let mut tmp = vec![0u64; BLOCK];
        // A narrow dealer word's block, widened.
        let mut wbuf = vec![0u64; BLOCK];
        // Term indices grouped by public monomial (terms without one first), in term order.
        let mut groups: Vec<(Option<u32>, Vec<usize>)> = vec![(None, vec![])];
        for (ti, t) in f.terms.iter().enumerate() {
            match groups.iter_mut().find(|(p, _)| *p == t.pmono) {
                Some((_, g)) => g.push(ti),
                None => groups.push((t.pmono, vec![ti])),
            }
        }
        // A monomial with one dealer word and constants (the usual case: the compiler folds a
        // monomial's dealer terms into one word) takes one fused pass: its column slot, the
        // word's coefficient and index, and the constants (party 0's).
        let fused: Vec<Option<(usize, u64, usize, u64)>> = groups
            .iter()
            .map(|(pmono, group)| {
                let konst = group
                    .iter()
                    .filter(|&&ti| party0 && f.terms[ti].src == Src::One)
                    .fold(0u64, |k, &ti| k.wrapping_add(f.terms[ti].coef));
                let mut rest = group.iter().map(|&ti| &f.terms[ti]).filter(|t| t.src != Src::One);
                match (pmono, rest.next(), rest.next()) {
                    (Some(i), Some(&FTerm { coef, src: Src::Word(j), .. }), None) => {
                        Some((slot[*i as usize], coef, j as usize, konst))
                    }
                    _ => None,
                }
            })
            .collect();
        // With one word of opened bits per element, a fused monomial that is one opened bit
        // alone is read from the opening in the fused pass, without a column of its own
        // (GeLU: 22 of its 44 monomials; its output form 80 -> 43 M instructions for 2 × 64Ki
        // elements, callgrind).
        let mut lone_bit: Vec<Option<u32>> = vec![None; factors.len()];
        if let Some((_, 1)) = packed_bits {
            for &(sl, ..) in fused.iter().flatten() {
                if let MonoFactors { bits, cols: fc } = &factors[sl]
                    && let ([(0, m)], []) = (bits.as_slice(), fc.as_slice())
                    && m.count_ones() == 1
                {
                    lone_bit[sl] = Some(m.trailing_zeros());
                }
            }
        }
        for e0 in (0..self.len).step_by(BLOCK) {
            let e1 = (e0 + BLOCK).min(self.len);
            let w = e1 - e0;
            for (c, MonoFactors { bits, cols: factors }) in factors.iter().enumerate() {
                if lone_bit[c].is_some() {
                    continue;
                }
                let col = &mut cols[c * BLOCK..c * BLOCK + w];
                match (bits.as_slice(), packed_bits) {
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
                        col.iter_mut()
                            .zip(src)
                            .for_each(|(v, &p)| *v = v.wrapping_mul(p.wrapping_pow(x as u32)));
                    }
                }
            }
            for (c, &j) in lused.iter().enumerate() {
                let col = &mut lcols[c * BLOCK..c * BLOCK + w];
                for (v, e) in col.iter_mut().zip(e0..e1) {
                    *v = locals[j * self.len + e] & one;
                }
            }
            let acc = &mut out[e0..e1];
            acc.fill(0);
            // Terms by public monomial: `Σ_t c_t·pm·v_t = pm·Σ_t c_t·v_t`, one product per
            // term and one per monomial instead of two per term.
            for ((pmono, group), fused) in groups.iter().zip(&fused) {
                if let &Some((sl, c, j, konst)) = fused {
                    let v = key.words[j].block(e0..e1, &mut wbuf);
                    if let (Some(b), Some((words, _))) = (lone_bit[sl], packed_bits) {
                        for ((a, &v), &o) in acc.iter_mut().zip(v).zip(&words[e0..e1]) {
                            let pm = ((o >> b) & 1).wrapping_neg();
                            *a = a.wrapping_add(c.wrapping_mul(v).wrapping_add(konst) & pm);
                        }
                        continue;
                    }
                    let col = &cols[sl * BLOCK..][..w];
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
                        Src::One if !party0 => {}
                        Src::One => sum.iter_mut().for_each(|a| *a = a.wrapping_add(t.coef)),
                        Src::Word(j) => {
                            let v = key.words[j as usize].block(e0..e1, &mut wbuf);
                            for (a, &v) in sum.iter_mut().zip(v) {
                                *a = a.wrapping_add(t.coef.wrapping_mul(v));
                            }
                        }
                        Src::Local(j) => {
                            let c = lslot[j as usize];
                            for (a, &v) in sum.iter_mut().zip(&lcols[c * BLOCK..c * BLOCK + w]) {
                                *a = a.wrapping_add(t.coef.wrapping_mul(v));
                            }
                        }
                    }
                }
                if let Some(i) = pmono {
                    let c = slot[*i as usize];
                    let col = &cols[c * BLOCK..c * BLOCK + w];
                    for ((a, &v), &pm) in acc.iter_mut().zip(&tmp[..w]).zip(col) {
                        *a = a.wrapping_add(pm.wrapping_mul(v));
                    }
                }
            }
        }
        out.iter_mut().for_each(|a| *a &= m);
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
        PVar::XHatBelow(beta) => Some(Box::new(move |x| (x < beta) as u64)),
        PVar::XHatShr { offset, shift } => {
            Some(Box::new(move |x| (x.wrapping_add(offset) & mask(n)) >> shift))
        }
        _ => None,
    }
}

/// A dense run's equality shares for a chunk of elements, where each window wraps, and the
/// parity of its bits from there on.
#[derive(Clone, Default)]
struct Window {
    bits: Vec<u64>,
    wrap: Vec<usize>,
    suffix: Vec<bool>,
}

/// Parity of bits `from..` of `bits`.
fn parity_from(bits: &[u64], from: usize) -> bool {
    let (i, sh) = (from / 64, from % 64);
    let first = bits.get(i).map_or(0, |&x| x >> sh);
    (bits.iter().skip(i + 1).fold(first, |acc, &x| acc ^ x).count_ones() & 1) == 1
}

/// Up to this many points per element are evaluated lane by lane rather than by a trie walk.
const FEW_POINTS: usize = 8;

/// [`CompiledGate::run`]'s working buffers, local-major: locals, public variables, the
/// forms' shares of one exchange and their opened values.
#[derive(Default)]
struct RunScratch {
    locals: Vec<u64>,
    packed: Vec<u64>,
    pv: Vec<u64>,
    shares: Vec<u64>,
    /// Per exchange.
    opened: Vec<Vec<u64>>,
    /// The first exchange's opened bits, packed ([`EvalPlan::packed_first`]).
    open_bits: Vec<u64>,
}

thread_local! {
    static RUN_SCRATCH: std::cell::RefCell<Vec<RunScratch>> = std::cell::RefCell::default();
}

/// Where a form reads a public variable from, element by element.
#[derive(Clone, Copy)]
enum PvCol<'a> {
    /// Not known yet (opened by a later exchange).
    None,
    /// A column of values.
    Col(&'a [u64]),
    /// A bit of the first exchange's packed opening: bit `b` of word `w` of each element's
    /// `zw` words.
    Bit { words: &'a [u64], zw: usize, w: usize, b: u32 },
}

/// A public monomial's factors in [`CompiledGate::eval_form`]: opened bits read packed, as
/// `(word, mask)` pairs whose AND must be all ones (a bit's powers are the bit), and columns
/// with their powers.
struct MonoFactors<'a> {
    bits: Vec<(usize, u64)>,
    cols: Vec<(&'a [u64], u8)>,
}

/// The first `len` words of `v`, grown (never shrunk) to hold them: a gate's buffers are
/// written before they are read, so a larger gate's words left over cost nothing, where
/// shrinking and growing again zero-filled the difference on every larger gate.
fn at_least(v: &mut Vec<u64>, len: usize) -> &mut [u64] {
    if v.len() < len {
        v.resize(len, 0);
    }
    &mut v[..len]
}

/// [`CompiledGate::comparison`]'s buffers, kept per thread: the walks' scratch, and per
/// family the `LT`/`EQ` bitsets and the dense runs' windows.
#[derive(Default)]
struct CmpScratch {
    scratch: Scratch,
    lt: Vec<Vec<u64>>,
    eq: Vec<Vec<u64>>,
    windows: Vec<Vec<Window>>,
}

thread_local! {
    static CMP_SCRATCH: std::cell::RefCell<Vec<CmpScratch>> = std::cell::RefCell::default();
}

/// Buffers reused across chunks of the comparison.
#[derive(Default)]
struct Scratch {
    cmp: Vec<CmpShares>,
    deltas: Vec<u64>,
    sub: Vec<u64>,
    pts: Vec<u64>,
    idx: Vec<u32>,
    offsets: Vec<usize>,
    split: Vec<Option<usize>>,
    lt: Vec<u64>,
    eq: Vec<u64>,
    tmp: Vec<u64>,
}

/// Family `f`'s points (its plan's one-by-one subset) for masked input `x`, sorted. With one
/// group of points (one offset), the sorted order is the subset's order reversed and
/// rotated: returns the rotation, and pushes no indices. Otherwise pushes each sorted point's
/// index and returns `None`.
fn sorted_points(
    f: &Family,
    plan: &FamilyPlan,
    n: u32,
    x: u64,
    pts: &mut Vec<u64>,
    idx: &mut Vec<u32>,
) -> Option<usize> {
    let m = mask(f.bits);
    if let [(off, _)] = plan.groups.as_slice() {
        let v = f.view(n, x, *off);
        let sub = &plan.sparse;
        // β ≤ v gives v − β (descending in β), β > v wraps above v: each part reversed.
        let q = sub.partition_point(|&k| f.points[k].1 <= v);
        pts.extend(sub[..q].iter().rev().map(|&k| v.wrapping_sub(f.points[k].1) & m));
        pts.extend(sub[q..].iter().rev().map(|&k| v.wrapping_sub(f.points[k].1) & m));
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
        let words: Vec<WordColumn> =
            p.words.iter().map(|w| WordColumn::read(r, self.len, w.width)).collect::<Result<_, _>>()?;
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
        let zbits = masked_bit_masks(p, self.plan.packed_first, &words, self.len);
        Ok(CompiledKey {
            party,
            widths,
            l: self.l(),
            len: self.len,
            cmp,
            carries,
            words,
            zbits,
            table,
            dcf,
            dcf_base,
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{CompileOptions, compile};
    use crate::spec::{OperatorSpec, Piece};
    use fss::rng::{DealerRng, Rng, SeedableRng};

    /// Every input under edge masks (and two masks near the clusters), against the reference.
    fn exhaustive_with_masks(program: Arc<Program>, n: u32, out_bits: u32, near: [u64; 2]) {
        let mut r = DealerRng::seed_from_u64(5);
        let nm = mask(n);
        let masks = [0u64, 1, nm, 1 << (n - 1), (1 << (n - 1)) - 1, r.next_u64() & nm, near[0], near[1]];
        let xs: Vec<u64> = masks.iter().flat_map(|_| 0..1u64 << n).collect();
        let ms: Vec<u64> = masks.iter().flat_map(|&m| std::iter::repeat_n(m, 1 << n)).collect();
        let gate = CompiledGate::new(program, xs.len());
        let out: Vec<u64> = (0..xs.len()).map(|_| r.next_u64() & mask(out_bits)).collect();
        let rep = gates::harness::run_with_masks(&gate, &[&xs], &[&ms], &out, &mut r).unwrap();
        assert_eq!(rep.first_mismatch(), None);
    }

    /// An unsigned `n`-bit step function into 16 bits: `value(i)` on interval `i`.
    fn step_spec(name: &str, n: u32, boundaries: Vec<u64>, value: impl Fn(usize) -> i128) -> OperatorSpec {
        let pieces = (0..boundaries.len())
            .map(|i| Piece { polys: vec![vec![value(i)]], ..Piece::default() })
            .collect();
        OperatorSpec {
            name: name.into(),
            in_bits: n,
            out_bits: 16,
            signed: false,
            slack: false,
            scale: None,
            out_scale: None,
            boundaries,
            pieces,
            atoms: vec![],
            kappa: vec![],
            phi: None,
        }
    }

    /// Thresholds dense just below `2^n` and just above 0 make one run that wraps past
    /// `2^n − 1` (as a signed function's rows around 0 do): one window, exact on every input.
    #[test]
    fn a_run_across_the_top_of_the_ring_is_one_window() {
        let n = 13u32;
        let top = 1u64 << n;
        let mut boundaries: Vec<u64> = (0..300).map(|k| 5 + 3 * k).collect();
        boundaries.extend((0..250).map(|k| top - 4 - 2 * k));
        boundaries.push(0);
        boundaries.push(4000);
        boundaries.sort_unstable();
        boundaries.dedup();
        let spec = step_spec("circular", n, boundaries, |i| ((i * 53) % 257) as i128 - 128);
        let program = Arc::new(compile(&spec, CompileOptions::default()).unwrap());
        let plan = EvalPlan::new(&program);
        let runs: Vec<&Run> = plan.families.iter().flat_map(|f| &f.runs).collect();
        assert_eq!(runs.len(), 1, "{:?}", plan.families);
        assert!(runs[0].a > runs[0].b && runs[0].width > 1400, "{:?}", runs[0]);
        exhaustive_with_masks(program, n, 16, [top - 300, 600]);
    }

    /// Dense thresholds at a small width: the windowed path (with wrapping windows) on every
    /// input under edge masks.
    #[test]
    fn dense_runs_use_windows_exactly() {
        let n = 14u32;
        let mut boundaries = vec![0u64];
        let mut x = 100u64;
        while x < 3000 {
            boundaries.push(x);
            x += 1 + (x * 7919) % 5;
        }
        // An isolated threshold and a second dense cluster (gaps wider than RUN_GAP).
        boundaries.push(6000);
        for k in 0..200 {
            boundaries.push(11000 + 3 * k);
        }
        let spec = step_spec("dense", n, boundaries, |i| ((i * 37) % 301) as i128 - 150);
        let program = Arc::new(compile(&spec, CompileOptions::default()).unwrap());
        let plan = EvalPlan::new(&program);
        assert!(plan.families.iter().map(|f| f.runs.len()).sum::<usize>() >= 2, "{:?}", plan.families);
        exhaustive_with_masks(program, n, 16, [150, 11100]);
    }
}
