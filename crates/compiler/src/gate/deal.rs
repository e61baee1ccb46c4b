//! The dealer: a compiled gate's keys for given input and output masks.

use fss::Party;
use fss::bitdpf::{self, BitDpfKeys};
use fss::dcf::{self, DcfKeys};
use fss::ring::mask;
use fss::rng::SplitRng;
use gates::GateError;
use gates::dealer::{random_bits, random_words, share, share_bits};

use super::check;
use super::key::{CompiledKey, dcf_params, family_params, masked_bit_masks};
use super::plan::GateRef;
use super::words::{Secrets, deal_words};
use crate::program::{CmpBackend, LookupPlan, Program, TablePlan, shift_poly, table_params};
use crate::spec::{BoolExpr, word};
use crate::word_column::WordColumn;

/// Both parties' keys of `g` for input masks `r` and output masks `rout` (output-major).
/// Only the low `in_bits` bits of each input mask are used.
pub(super) fn deal<R: SplitRng + ?Sized>(
    g: GateRef<'_>,
    r: &[u64],
    rout: &[u64],
    rng: &mut R,
) -> Result<(CompiledKey, CompiledKey), GateError> {
    let p = g.p;
    let (n, l, len) = (g.n(), g.l(), g.len);
    check("input masks", len, r.len())?;
    check("output masks", len * p.outputs.len(), rout.len())?;
    // The gate reads the low n bits of its wire (a width contract when the wire is wider).
    let r: Vec<u64> = r.iter().map(|&v| v & mask(n)).collect();
    let r = &r[..];
    let ([k0, k1], [c0, c1]) = comparison_keys(p, r, rng)?;
    // Masks of the opened bits and of the Beaver products.
    let z: Vec<Vec<bool>> = p.opened.iter().map(|_| random_bits(rng, len)).collect();
    let nb = p.beaver_round.len();
    let u: Vec<Vec<u64>> = (0..nb).map(|_| random_words(rng, len, l)).collect();
    let kappa: Vec<u64> = p.spec.kappa.iter().map(|&k| word(k, l)).collect();
    let secrets = Secrets { r, z: &z, u: &u, kappa: &kappa };
    let [w0, w1] = deal_words(p, &g.plan.words, len, &secrets, rout, rng)?;
    let [t0, t1] = match &p.lookup {
        LookupPlan::Table(t) => {
            let alphas: Vec<u64> = (0..len).map(|e| table_point(n, t, r[e], &z, e)).collect();
            let (k0, k1) = fss::adpf::keygen(table_params(t.domain_bits, l), &alphas, &vec![1; len], rng)?;
            [Some(k0), Some(k1)]
        }
        _ => [None, None],
    };
    let ([d0, d1], [b0, b1]) = lookup_dcf_keys(g, r, rng)?;
    let widths: Vec<u32> = p.words.iter().map(|w| w.width).collect();
    let key = |party, cmp, carries, words: Vec<WordColumn>, table, dcf, dcf_base| CompiledKey {
        party,
        widths: widths.clone(),
        l,
        len,
        cmp,
        carries,
        zbits: masked_bit_masks(p, g.plan.packed_first, &words, len),
        words,
        table,
        dcf,
        dcf_base,
    };
    Ok((key(Party::P0, k0, c0, w0, t0, d0, b0), key(Party::P1, k1, c1, w1, t1, d1, b1)))
}

/// Per family, both parties' comparison keys for input masks `r`, and (per-threshold
/// keying only) their XOR shares of the carries.
#[allow(clippy::type_complexity)]
fn comparison_keys<R: SplitRng + ?Sized>(
    p: &Program,
    r: &[u64],
    rng: &mut R,
) -> Result<([Vec<BitDpfKeys>; 2], [Vec<Vec<bool>>; 2]), GateError> {
    let mut keys = [Vec::new(), Vec::new()];
    let mut carries = [Vec::new(), Vec::new()];
    for f in &p.families {
        let params = family_params(f);
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
                let mut alphas = Vec::with_capacity(r.len() * f.points.len());
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
    Ok((keys, carries))
}

/// The point of element `e`'s table DPF (input width `n`): the index mask, or (carry mask,
/// row mask).
fn table_point(n: u32, t: &TablePlan, r: u64, z: &[Vec<bool>], e: usize) -> u64 {
    if t.shift == 0 {
        t.opened.iter().enumerate().fold(0u64, |acc, (i, &j)| acc | (z[j as usize][e] as u64) << i)
    } else {
        let k = n - t.shift;
        (z[t.opened[0] as usize][e] as u64) << k | ((r >> t.shift) & mask(k))
    }
}

/// Both parties' DCF lookup keys and base shares (none without a DCF lookup).
#[allow(clippy::type_complexity)]
fn lookup_dcf_keys<R: SplitRng + ?Sized>(
    g: GateRef<'_>,
    r: &[u64],
    rng: &mut R,
) -> Result<([Option<DcfKeys>; 2], [Vec<u64>; 2]), GateError> {
    let Some((params, per)) = dcf_params(g.p) else { return Ok(([None, None], [vec![], vec![]])) };
    let (alphas, betas, base) = dcf_payloads(g, r, per)?;
    let (k0, k1) = dcf::keygen(params, &alphas, &betas, rng)?;
    let (b0, b1) = share(rng, &base, g.l());
    Ok(([Some(k0), Some(k1)], [b0, b1]))
}

/// DCF points, payloads and base values (docs/design/paper.md §3.4): the intervals in
/// `x̂`-space start at `α_i + r`; interval `t` carries the coefficients of `P_i(X_u)`
/// re-expanded in `x̂`.
#[allow(clippy::type_complexity)]
fn dcf_payloads(g: GateRef<'_>, r: &[u64], per: usize) -> Result<(Vec<u64>, Vec<u64>, Vec<u64>), GateError> {
    let p = g.p;
    let LookupPlan::Dcf(d) = &p.lookup else { unreachable!("dcf lookup") };
    let s = &p.norm;
    let (n, l) = (g.n(), g.l());
    let nm = mask(n);
    let (mut alphas, mut betas, mut base) = (vec![], vec![], vec![]);
    for &re in r {
        let cuts = interval_starts(&s.boundaries, re, n, per);
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

/// The starts of the intervals in `x̂`-space for input mask `re` (`n` bits): the
/// `boundaries` shifted by `re`, and 0, sorted; always `per + 1` of them (a dummy split
/// where a boundary lands on 0).
fn interval_starts(boundaries: &[u64], re: u64, n: u32, per: usize) -> Vec<u64> {
    let mut cuts: Vec<u64> = boundaries.iter().map(|&a| a.wrapping_add(re) & mask(n)).collect();
    cuts.push(0);
    cuts.sort_unstable();
    cuts.dedup();
    let domain = 1u128 << n;
    while cuts.len() < per + 1 {
        let end = |i: usize| cuts.get(i + 1).map_or(domain, |&c| c as u128);
        let i =
            (0..cuts.len()).find(|&i| end(i) - cuts[i] as u128 >= 2).expect("fewer intervals than points");
        cuts.insert(i + 1, cuts[i] + 1);
    }
    cuts
}
