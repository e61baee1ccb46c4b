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
use crate::program::{CmpBackend, LookupPlan, Program, TablePlan, shift_poly, table_params};
use crate::spec::{BoolExpr, word};
use crate::sym::SVar;
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
    let [w0, w1] = dealer_words(p, len, &secrets, rout, rng)?;
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

/// The dealer's secrets that dealer words are polynomials in, per element.
struct Secrets<'a> {
    /// Input masks.
    r: &'a [u64],
    /// Masks of the opened bits.
    z: &'a [Vec<bool>],
    /// Masks of the Beaver products.
    u: &'a [Vec<u64>],
    /// The spec's secret constants.
    kappa: &'a [u64],
}

impl Secrets<'_> {
    /// `t[q] ← t[q] · v_e^exp` for variable `v` of the elements `e = at + q` (column by
    /// column, so that the loops vectorise: the dealer's words are evaluated for a chunk of
    /// a gate's elements at once).
    fn multiply(&self, t: &mut [u64], at: usize, v: SVar, exp: u32) -> Result<(), GateError> {
        if exp == 0 {
            return Ok(());
        }
        let pow = |x: u64| if exp == 1 { x } else { x.wrapping_pow(exp) };
        let e = at..at + t.len();
        match v {
            SVar::Z(j) => {
                let z = &self.z[j as usize][e];
                // A bit's power is the bit.
                t.iter_mut().zip(z).for_each(|(a, &b)| *a = if b { *a } else { 0 });
            }
            SVar::R => t.iter_mut().zip(&self.r[e]).for_each(|(a, &x)| *a = a.wrapping_mul(pow(x))),
            SVar::RShr(f) => {
                t.iter_mut().zip(&self.r[e]).for_each(|(a, &x)| *a = a.wrapping_mul(pow(x >> f)))
            }
            SVar::Kappa(k) => {
                let c = pow(self.kappa[k as usize]);
                t.iter_mut().for_each(|a| *a = a.wrapping_mul(c));
            }
            SVar::Beaver(i) => {
                t.iter_mut().zip(&self.u[i as usize][e]).for_each(|(a, &x)| *a = a.wrapping_mul(pow(x)))
            }
            SVar::Local(_) => return Err(GateError::Params("a dealer word uses a local share".into())),
        }
        Ok(())
    }
}

/// Both parties' shares of every dealer word of `p` for `len` elements (plus its output
/// mask from `rout`, where it carries one).
fn dealer_words<R: SplitRng + ?Sized>(
    p: &Program,
    len: usize,
    s: &Secrets<'_>,
    rout: &[u64],
    rng: &mut R,
) -> Result<[Vec<WordColumn>; 2], GateError> {
    /// Elements per chunk: a monomial's running product stays in L1.
    const CHUNK: usize = 512;
    let mut words = [Vec::new(), Vec::new()];
    let mut vals = vec![0u64; len];
    let mut term = [0u64; CHUNK];
    for w in &p.words {
        match w.out_mask {
            Some(o) => vals.copy_from_slice(&rout[o * len..(o + 1) * len]),
            None => vals.fill(0),
        }
        // Chunk by chunk, monomial by monomial over the chunk's elements.
        for (i, v) in vals.chunks_mut(CHUNK).enumerate() {
            let (at, term) = (i * CHUNK, &mut term[..v.len()]);
            for (c, mono) in &w.value {
                term.fill(*c);
                for &(var, exp) in mono {
                    s.multiply(term, at, var, exp as u32)?;
                }
                v.iter_mut().zip(term.iter()).for_each(|(v, t)| *v = v.wrapping_add(*t));
            }
        }
        let m = mask(w.bits) & mask(w.width);
        vals.iter_mut().for_each(|v| *v &= m);
        let [a, b] = WordColumn::share(rng, &vals, w.width);
        words[0].push(a);
        words[1].push(b);
    }
    fss::wipe::wipe(&mut vals);
    zeroize::Zeroize::zeroize(&mut term);
    Ok(words)
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
