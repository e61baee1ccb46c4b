//! The evaluation plan: what the parties precompute once per program (and reuse across
//! gates) to answer every leaf of the comparison at once.
//!
//! - each family's points grouped by offset, its dense runs read from windows
//!   ([`FamilyPlan`], [`dense_runs`]), and the points still compared one by one in clusters;
//! - the leaves' terms as parity tables over a family's bits ([`EvalPlan::lt_tables`],
//!   [`EvalPlan::eq_tables`]) and over a run's window ([`RunTables`]);
//! - the leaves' public `1[v < β]` terms merged per width ([`BelowGroup`]);
//! - whether the leaves and the first exchange stay packed, a bit per leaf
//!   ([`EvalPlan::packed_leaves`], [`EvalPlan::packed_first`]).
//!
//! [`plan_of`] caches the plan per program.

use std::sync::Arc;

use fss::bitdpf;
use fss::ring::mask;

use super::words::WordPlan;
use crate::parity::{ParityTable, words_for};
use crate::predicate::{Family, LinBit, Term};
use crate::program::{CmpBackend, Form, LookupPlan, Program, Src};

/// A borrowed compiled gate, as every phase reads it: the program, its evaluation plan and
/// the element count.
#[derive(Clone, Copy)]
pub(super) struct GateRef<'a> {
    pub(super) p: &'a Program,
    pub(super) plan: &'a EvalPlan,
    pub(super) len: usize,
}

impl GateRef<'_> {
    /// Input ring width.
    pub(super) fn n(&self) -> u32 {
        self.p.in_bits()
    }

    /// Output ring width.
    pub(super) fn l(&self) -> u32 {
        self.p.out_bits()
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

impl LeafPlan {
    /// Leaf `b`'s terms, as bitmasks over the points of `p`'s families.
    fn new(p: &Program, b: &LinBit) -> LeafPlan {
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
    }
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
pub(super) struct Run {
    pub(super) a: usize,
    pub(super) b: usize,
    pub(super) width: usize,
}

/// Per family: the points grouped by offset, each group sorted by `β`; for a one-group
/// family, its dense runs and the points still evaluated one by one (each run's first
/// point, whose `LT` anchors the run, comes with the run's window).
#[derive(Clone, Debug)]
pub(super) struct FamilyPlan {
    pub(super) groups: Vec<(u64, std::ops::Range<usize>)>,
    pub(super) runs: Vec<Run>,
    pub(super) sparse: Vec<usize>,
    /// The one-by-one points in clusters of one offset whose `β`s lie within a leaf block of
    /// the first's (a split comparison's `β` and `β + 1`): `(point, β − β_first)` per member.
    pub(super) clusters: Vec<Vec<(usize, u64)>>,
}

impl FamilyPlan {
    /// Family `fi` (`f`) of `p`: its groups, its dense runs (moving the leaves' terms on
    /// their points into window masks) and its clusters.
    fn new(p: &Program, fi: usize, f: &Family, leaves: &mut [LeafPlan]) -> FamilyPlan {
        let mut groups: Vec<(u64, std::ops::Range<usize>)> = vec![];
        for (k, &(off, _)) in f.points.iter().enumerate() {
            match groups.last_mut() {
                Some((o, r)) if *o == off => r.end = k + 1,
                _ => groups.push((off, k..k + 1)),
            }
        }
        let mut plan =
            FamilyPlan { groups, runs: vec![], sparse: (0..f.points.len()).collect(), clusters: vec![] };
        if p.cmp == CmpBackend::OneKey && plan.groups.len() == 1 && f.bits > bitdpf::LEAF_BITS {
            dense_runs(fi, f, &mut plan, leaves);
        }
        plan.cluster(f);
        plan
    }

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

/// A run is read from a window when its points would cost more one by one than the window:
/// a cost model in ns per point (8), per window position for the tree (0.05) and per
/// position and leaf (0.005). (Fitted before the parity tables; a model with narrower gaps
/// and cheaper leaves made GeLU and `e^{−x}` slower, so it stays.)
fn dense(count: usize, width: u64, leaves: usize) -> bool {
    count >= 32 && (count as f64) * 8.0 > width as f64 * (0.05 + 0.005 * leaves as f64) + 200.0
}

/// What evaluation precomputes from a program.
#[derive(Debug)]
pub(super) struct EvalPlan {
    pub(super) families: Vec<FamilyPlan>,
    /// A reduced view's table per word, rows reversed.
    pub(super) reversed: Vec<Vec<u64>>,
    /// The leaves' public low-bit terms, merged per width.
    pub(super) below: Vec<BelowGroup>,
    /// The leaves' constants, a bit per leaf (party 0 adds them).
    pub(super) konst: Vec<u64>,
    /// Per family: the leaves' `LT` and `EQ` terms outside dense runs, as parity tables
    /// over the family's bits in point order.
    pub(super) lt_tables: Vec<ParityTable>,
    pub(super) eq_tables: Vec<ParityTable>,
    /// Per family and dense run: the leaves' terms on the run's window.
    pub(super) run_tables: Vec<Vec<RunTables>>,
    /// Whether only masked-bit forms ([`bit_form`]) read the leaves: then the leaves stay
    /// packed (a bit per leaf) and are not stored as locals.
    pub(super) packed_leaves: bool,
    /// Whether the first exchange is opened packed ([`packed_first_exchange`]).
    pub(super) packed_first: bool,
    /// The dealer words as sums over their distinct monomials (the dealer's part).
    pub(super) words: WordPlan,
}

/// Whether `f` is a one-bit form without public factors (a masked bit: a leaf, its mask's
/// low bit and constants, XORed).
pub(super) fn bit_form(f: &Form) -> bool {
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
/// ([`open_masked_bits`](super::form::open_masked_bits)).
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

/// The leaves' terms on one dense run, a bit per leaf: the window's parity table (`LT` and
/// `EQ` masks merged, since only the parity counts), and the wrap corrections.
#[derive(Debug, Default)]
pub(super) struct RunTables {
    /// Whether some leaf reads the run.
    pub(super) used: bool,
    pub(super) window: ParityTable,
    /// `C(S)` per leaf.
    pub(super) total: Vec<u64>,
    /// `C(u)` per leaf at each window position `u` (`width × lw` words; zero at `u = 0`).
    pub(super) at: Vec<u64>,
}

impl RunTables {
    /// The tables of run `ri` (`r`) of family `fi`, from the leaves' window masks.
    fn new(leaves: &[LeafPlan], fi: usize, ri: usize, r: &Run) -> RunTables {
        let lw = words_for(leaves.len());
        let mut t = RunTables { total: vec![0; lw], at: vec![0; r.width * lw], ..RunTables::default() };
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
    }
}

/// Every leaf's public terms `1[v < β]` (`v = x̂ mod 2^bits`) of one width, merged: one
/// binary search per element answers all leaves. `suffix[i]` holds (a bit per leaf) the
/// parity of the leaf's thresholds among `betas[i..]`: those above `v` when `i` counts the
/// thresholds `≤ v`.
#[derive(Debug)]
pub(super) struct BelowGroup {
    pub(super) bits: u32,
    betas: Vec<u64>,
    /// `(betas.len() + 1) × words` words, `words = ⌈leaves / 64⌉`.
    pub(super) suffix: Vec<u64>,
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
    pub(super) fn count_upto(&self, v: u64) -> usize {
        let h = (v >> self.shift) as usize;
        let (a, b) = (self.starts[h] as usize, self.starts[h + 1] as usize);
        a + self.betas[a..b].partition_point(|&x| x <= v)
    }

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

impl EvalPlan {
    pub(super) fn new(p: &Program) -> EvalPlan {
        let mut leaves: Vec<LeafPlan> = p.leaves.iter().map(|b| LeafPlan::new(p, b)).collect();
        let families: Vec<FamilyPlan> =
            p.families.iter().enumerate().map(|(fi, f)| FamilyPlan::new(p, fi, f, &mut leaves)).collect();
        let below = BelowGroup::merge(&leaves);
        let mut konst = vec![0u64; words_for(leaves.len())];
        for (li, l) in leaves.iter().enumerate() {
            konst[li / 64] ^= (l.konst as u64) << (li % 64);
        }
        let lt_tables = (0..p.families.len()).map(|fi| family_table(p, &leaves, fi, false)).collect();
        let eq_tables = (0..p.families.len()).map(|fi| family_table(p, &leaves, fi, true)).collect();
        let run_tables = families
            .iter()
            .enumerate()
            .map(|(fi, fp)| {
                fp.runs.iter().enumerate().map(|(ri, r)| RunTables::new(&leaves, fi, ri, r)).collect()
            })
            .collect();
        EvalPlan {
            families,
            reversed: reversed_tables(p),
            below,
            konst,
            lt_tables,
            eq_tables,
            run_tables,
            packed_leaves: packed_leaves(p),
            packed_first: packed_first_exchange(p),
            words: WordPlan::new(p),
        }
    }
}

/// A reduced view's table per word, rows reversed (empty for other lookups).
fn reversed_tables(p: &Program) -> Vec<Vec<u64>> {
    match &p.lookup {
        LookupPlan::Table(t) if t.shift > 0 => {
            let rows = t.table.len() / t.words;
            (0..t.words).map(|k| (0..rows).rev().map(|r| t.table[r * t.words + k]).collect()).collect()
        }
        _ => vec![],
    }
}

/// The leaves' `LT` (or, with `eq`, `EQ`) terms on family `fi` outside dense runs, as a
/// parity table over the family's bits.
fn family_table(p: &Program, leaves: &[LeafPlan], fi: usize, eq: bool) -> ParityTable {
    let masks: Vec<(usize, &[u64])> = leaves
        .iter()
        .enumerate()
        .flat_map(|(li, l)| {
            let list = if eq { &l.eq } else { &l.lt };
            list.iter().filter(move |(g, _)| *g == fi).map(move |(_, m)| (li, &m[..]))
        })
        .collect();
    ParityTable::new(p.families[fi].points.len(), leaves.len(), &masks)
}

/// Find the dense runs of family `fi` and move the leaves' terms on their points into
/// window masks.
fn dense_runs(fi: usize, f: &Family, plan: &mut FamilyPlan, leaves: &mut [LeafPlan]) {
    let users = leaves.iter().filter(|l| l.lt.iter().chain(&l.eq).any(|(g, _)| *g == fi)).count();
    let len = f.points.len();
    let runs: Vec<Run> = segments(f)
        .into_iter()
        .filter_map(|(a, b)| {
            let width = (f.points[b].1.wrapping_sub(f.points[a].1) & mask(f.bits)) + 1;
            let count = if a <= b { b - a + 1 } else { len - a + b + 1 };
            dense(count, width, users).then_some(Run { a, b, width: width as usize })
        })
        .collect();
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
        move_to_windows(fi, f, &runs, &in_run, leaf);
    }
    // One by one: the points outside runs. (Each run's first point, whose `LT` anchors the
    // run, is the window's last point: the window walk answers it.)
    plan.sparse = (0..f.points.len()).filter(|&k| in_run[k] == usize::MAX).collect();
    plan.runs = runs;
}

/// Family `f`'s points (sorted by `β`) in segments without a gap wider than [`RUN_GAP`], as
/// (first, last) indices; the last segment continues into the first across `2^bits`.
fn segments(f: &Family) -> Vec<(usize, usize)> {
    let beta = |k: usize| f.points[k].1;
    let len = f.points.len();
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
    segments
}

/// Move `leaf`'s terms on the points of family `fi`'s dense `runs` (`in_run[k]`: point
/// `k`'s run, or `usize::MAX`) out of its point masks into window masks, one per run it
/// reads.
fn move_to_windows(fi: usize, f: &Family, runs: &[Run], in_run: &[usize], leaf: &mut LeafPlan) {
    let beta = |k: usize| f.points[k].1;
    let mut masks: Vec<RunMasks> = runs
        .iter()
        .map(|r| RunMasks { lt: vec![0; words_for(r.width)], eq: vec![0; words_for(r.width)], total: false })
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
        prefix_xor(&mut m.lt, runs[ri].width);
        if m.eq.iter().all(|&x| x == 0) {
            m.eq.clear();
        }
        leaf.runs.push((fi, ri, m));
    }
}

/// Bit `u` of `bits` (`width` bits) becomes the XOR of bits `0..=u`.
fn prefix_xor(bits: &mut [u64], width: usize) {
    let mut carry = 0u64;
    for w in bits.iter_mut() {
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
    let tail = width % 64;
    if tail != 0 {
        let last = bits.len() - 1;
        bits[last] &= (1u64 << tail) - 1;
    }
}

/// The evaluation plan of `program`, built once per program while it lives: a gate is made
/// per layer call (a normalisation's `1/σ` per query), and the plan of a grid read in wide
/// windows takes milliseconds to build.
pub(super) fn plan_of(program: &Arc<Program>) -> Arc<EvalPlan> {
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
