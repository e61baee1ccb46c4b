//! A party's online evaluation: the comparison and the DCF lookup, then exchange by
//! exchange the forms' shares opened (the table lookup after the first), and the outputs.

use gates::{Ctx, GateError};

use super::check;
use super::compare::comparison;
use super::form::{PvCol, eval_bit_form, eval_form, open_masked_bits, static_pvar};
use super::key::CompiledKey;
use super::lookup::{dcf_lookup, table_lookup};
use super::plan::{GateRef, bit_form};
use crate::parity::words_for;
use crate::program::{Form, LookupPlan};
use crate::sym::PVar;
use fss::ring::mask;

/// The masked outputs of `g` for masked inputs `xh`, output-major.
pub(super) async fn run(
    g: GateRef<'_>,
    ctx: &Ctx,
    key: &CompiledKey,
    xh: &[u64],
) -> Result<Vec<u64>, GateError> {
    // Working buffers kept across calls (tens of MB per layer): freshly allocated, their
    // pages would be faulted in again by every gate.
    // (A pool: both parties may run interleaved on one thread, as in the test harness.)
    let mut sc = RUN_SCRATCH.with_borrow_mut(|pool| pool.pop()).unwrap_or_default();
    let out = run_in(g, ctx, key, xh, &mut sc).await;
    RUN_SCRATCH.with_borrow_mut(|pool| {
        if pool.len() < 2 {
            pool.push(sc);
        }
    });
    out
}

/// [`run`] with its buffers.
async fn run_in(
    g: GateRef<'_>,
    ctx: &Ctx,
    key: &CompiledKey,
    xh: &[u64],
    sc: &mut RunScratch,
) -> Result<Vec<u64>, GateError> {
    let p = g.p;
    let (n, len) = (g.n(), g.len);
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
    let packed = at_least(packed, if g.plan.packed_leaves { len * lw } else { 0 });
    comparison(g, key, &xh, locals, packed)?;
    dcf_lookup(g, key, &xh, locals)?;
    let pv = at_least(pv, len * p.pvars.len());
    let sites = PvSites::new(g, &xh, pv);
    if opened.len() < p.exchanges.len() {
        opened.resize_with(p.exchanges.len(), Vec::new);
    }
    let mut outputs = vec![];
    let mut bits = vec![];
    for (t, ex) in p.exchanges.iter().enumerate() {
        let forms: Vec<&Form> = ex.forms().collect();
        // (Each form writes its column whole: no clearing.)
        if t == 0 && g.plan.packed_first {
            // Masked bits only: computed and opened as one bit vector per element, and
            // read packed by the later forms (unpacked only for a table lookup).
            let ob = at_least(open_bits, len * words_for(ex.bits.len()));
            open_masked_bits(g, ctx, key, packed, ob).await?;
            if matches!(p.lookup, LookupPlan::Table(_)) {
                let zw = words_for(ex.bits.len());
                bits.extend(
                    (0..ex.bits.len()).map(|j| {
                        ob.chunks_exact(zw).map(|o| (o[j / 64] >> (j % 64)) & 1).collect::<Vec<u64>>()
                    }),
                );
            }
            table_lookup(g, key, &xh, &bits, locals)?;
            continue;
        }
        let shares = at_least(shares, forms.len() * len);
        {
            let cols = sites.columns(g, t, pv, &opened[..t], open_bits);
            for (i, f) in forms.iter().enumerate() {
                let out = &mut shares[i * len..(i + 1) * len];
                if bit_form(f) {
                    eval_bit_form(g, f, key, locals, packed, out);
                } else {
                    eval_form(g, f, key, locals, &cols, out);
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
            table_lookup(g, key, &xh, &bits, locals)?;
        }
    }
    Ok(outputs)
}

/// Where each public variable is read: the static ones from their column of `pv`, the
/// opened ones where their exchange opened them (a buffer per exchange), not copied.
struct PvSites {
    is_static: Vec<bool>,
    /// Where each opened public variable is: (exchange, form index).
    at: Vec<Option<(usize, usize)>>,
}

impl PvSites {
    /// The sites of `g`'s public variables; computes the static ones' columns into `pv`
    /// from the masked inputs `xh`.
    fn new(g: GateRef<'_>, xh: &[u64], pv: &mut [u64]) -> PvSites {
        let (p, len) = (g.p, g.len);
        let mut is_static = vec![false; p.pvars.len()];
        for (s, v) in p.pvars.iter().enumerate() {
            if let Some(f) = static_pvar(*v, g.n()) {
                is_static[s] = true;
                for (o, &x) in pv[s * len..(s + 1) * len].iter_mut().zip(xh) {
                    *o = f(x);
                }
            }
        }
        let at = p
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
        PvSites { is_static, at }
    }

    /// The public variables known to exchange `t`'s forms (they read only what earlier
    /// exchanges opened, `done`; the others stay [`PvCol::None`]).
    fn columns<'a>(
        &self,
        g: GateRef<'_>,
        t: usize,
        pv: &'a [u64],
        done: &'a [Vec<u64>],
        open_bits: &'a [u64],
    ) -> Vec<PvCol<'a>> {
        let (p, len) = (g.p, g.len);
        let zw = words_for(p.exchanges[0].bits.len());
        (0..p.pvars.len())
            .map(|s| match self.at[s] {
                _ if self.is_static[s] => PvCol::Col(&pv[s * len..(s + 1) * len]),
                Some((0, i)) if t > 0 && g.plan.packed_first => {
                    PvCol::Bit { words: &open_bits[..len * zw], zw, w: i / 64, b: (i % 64) as u32 }
                }
                Some((t2, i)) if t2 < t => PvCol::Col(&done[t2][i * len..(i + 1) * len]),
                _ => PvCol::None,
            })
            .collect()
    }
}

/// [`run`]'s working buffers, local-major: locals, public variables, the forms' shares of
/// one exchange and their opened values.
#[derive(Default)]
struct RunScratch {
    locals: Vec<u64>,
    packed: Vec<u64>,
    pv: Vec<u64>,
    shares: Vec<u64>,
    /// Per exchange.
    opened: Vec<Vec<u64>>,
    /// The first exchange's opened bits, packed ([`EvalPlan::packed_first`](super::plan::EvalPlan)).
    open_bits: Vec<u64>,
}

thread_local! {
    static RUN_SCRATCH: std::cell::RefCell<Vec<RunScratch>> = std::cell::RefCell::default();
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
