//! The lookups that fill the locals a piece's polynomials read: a DCF over the intervals
//! (before any exchange), or a table DPF at the opened index (after the first).

use fss::AddShare;
use fss::ring::mask;
use gates::GateError;

use super::key::{CompiledKey, dcf_params};
use super::plan::GateRef;
use crate::program::{LookupPlan, TablePlan};

/// The DCF lookup: suffix sums of the payloads at `x̂`, into the lookup's locals.
pub(super) fn dcf_lookup(
    g: GateRef<'_>,
    key: &CompiledKey,
    xh: &[u64],
    locals: &mut [u64],
) -> Result<(), GateError> {
    let LookupPlan::Dcf(d) = &g.p.lookup else { return Ok(()) };
    let (_, per) = dcf_params(g.p).expect("dcf");
    let keys = key.dcf.as_ref().ok_or(GateError::KeyMismatch("missing DCF keys"))?;
    let l = g.l();
    let pts: Vec<u64> = xh.iter().flat_map(|&x| std::iter::repeat_n(x, per)).collect();
    let mut out = vec![AddShare::default(); pts.len() * d.words];
    keys.eval(&pts, &mut out)?;
    for e in 0..g.len {
        for k in 0..d.words {
            let mut v = key.dcf_base[e * d.words + k];
            for t in 0..per {
                v = v.wrapping_add(out[(e * per + t) * d.words + k].0);
            }
            locals[(d.first_local as usize + k) * g.len + e] = v & mask(l);
        }
    }
    Ok(())
}

/// The table lookup after the opening: `[T[I]] = Σ_j y(j)·T[Î ⊕ j]` (or the reduced view's
/// row sum), into the lookup's locals. `opened[j]` is opened bit `j` of every element.
pub(super) fn table_lookup(
    g: GateRef<'_>,
    key: &CompiledKey,
    xh: &[u64],
    opened: &[Vec<u64>],
    locals: &mut [u64],
) -> Result<(), GateError> {
    let LookupPlan::Table(t) = &g.p.lookup else { return Ok(()) };
    let keys = key.table.as_ref().ok_or(GateError::KeyMismatch("missing table keys"))?;
    let l = g.l();
    let size = 1usize << t.domain_bits;
    // About 1 MB of DPF outputs at a time, in one reused buffer.
    let chunk = ((1 << 17) / size).max(1);
    let mut y = vec![0u64; chunk * size];
    for e0 in (0..g.len).step_by(chunk) {
        let e1 = (e0 + chunk).min(g.len);
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
                indexed_rows(t, idx, ye, &mut acc);
            } else {
                let k = g.n() - t.shift;
                let c = opened[t.opened[0] as usize][e];
                let uh = (xh[e] >> t.shift) & mask(k);
                reduced_rows(k, c, uh, ye, &g.plan.reversed, &mut acc);
            }
            for (k, a) in acc.into_iter().enumerate() {
                locals[(t.first_local as usize + k) * g.len + e] = a & mask(l);
            }
        }
    }
    Ok(())
}

/// `acc += Σ_j y(j)·T[idx ⊕ j]`: the table's rows at the opened index `idx`.
fn indexed_rows(t: &TablePlan, idx: usize, ye: &[u64], acc: &mut [u64]) {
    for (j, &yj) in ye.iter().enumerate() {
        let r = idx ^ j;
        let row = &t.table[r * t.words..(r + 1) * t.words];
        for (a, &v) in acc.iter_mut().zip(row) {
            *a = a.wrapping_add(yj.wrapping_mul(v));
        }
    }
}

/// A reduced view's row sum `Σ_{z', i} y(z', i)·T[(u_h − (ĉ ⊕ z') − i) mod 2^k]` (opened
/// carry `ĉ`, high bits `u_h`): for each `z'`, two contiguous dot products with the
/// reversed table `R[j] = T[2^k − 1 − j]` (`reversed`, one per word).
fn reduced_rows(k: u32, c: u64, uh: u64, ye: &[u64], reversed: &[Vec<u64>], acc: &mut [u64]) {
    let half = 1usize << k;
    for z in 0..2u64 {
        let ys = &ye[z as usize * half..(z as usize + 1) * half];
        let b = (uh.wrapping_sub(c ^ z) & mask(k)) as usize;
        let cut = half - 1 - b;
        for (a, rev) in acc.iter_mut().zip(reversed) {
            *a = a.wrapping_add(dot(&ys[..=b], &rev[cut..])).wrapping_add(dot(&ys[b + 1..], &rev[..cut]));
        }
    }
}

/// `Σ a_i·b_i` (wrapping).
fn dot(a: &[u64], b: &[u64]) -> u64 {
    a.iter().zip(b).fold(0u64, |s, (x, y)| s.wrapping_add(x.wrapping_mul(*y)))
}
