//! The three backends over a [`Graph`]: plaintext fixed-point reference, dealer and online
//! party, and the client's input sharing and output reconstruction.
//!
//! Wires are masked: the parties hold `x̂ = x + r` for every value. Local nodes map masked
//! values and masks alike (a linear map's output mask is `r·W`, so `x̂·W + b` is the new
//! masked value); gate nodes take the masks of their inputs and a fresh output mask.

use std::any::Any;
use std::time::{Duration, Instant};

use fss::Party;
use fss::ring::mask;
use fss::rng::{DealerRng, Rng};
use gates::dealer::{random_words, share};
use gates::{Ctx, GateError};

use crate::error::EngineError;
use crate::graph::Graph;
use crate::layers::{DynGate, local};

/// One party's keys for a whole program.
pub struct PartyKeys {
    /// The party.
    pub party: Party,
    /// Its share of the input wire's mask.
    pub input_mask: Vec<u64>,
    /// Its share of the output wire's mask.
    pub output_mask: Vec<u64>,
    /// One key per gate node (`None` for local nodes).
    pub gates: Vec<Option<Box<dyn Any + Send>>>,
}

impl std::fmt::Debug for PartyKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartyKeys").field("party", &self.party).finish_non_exhaustive()
    }
}

/// What key generation produced.
#[derive(Clone, Debug, Default)]
pub struct DealReport {
    /// Key bits of one party (gates plus the input and output mask shares).
    pub key_bits: u64,
    /// Key bits of one party by layer type.
    pub by_label: Vec<(&'static str, u64)>,
    /// Dealer time.
    pub time: Duration,
}

fn charge<T: Copy + std::ops::AddAssign>(list: &mut Vec<(&'static str, T)>, label: &'static str, v: T) {
    match list.iter_mut().find(|(l, _)| *l == label) {
        Some((_, s)) => *s += v,
        None => list.push((label, v)),
    }
}

/// The dealer: masks for every value and both parties' keys, node by node; `progress` is
/// called after each node with (done, total).
///
/// # Errors
/// [`EngineError`] if a gate rejects its masks.
pub fn deal(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    rng: &mut DealerRng,
    mut progress: impl FnMut(usize, usize),
) -> Result<(PartyKeys, PartyKeys, DealReport), EngineError> {
    let t = Instant::now();
    let n = g.n;
    let mut masks: Vec<Vec<u64>> = Vec::with_capacity(g.nodes.len() + 1);
    masks.push(random_words(rng, g.input.len(), n));
    let (mut k0, mut k1) = (vec![], vec![]);
    let mut report = DealReport::default();
    for (i, node) in g.nodes.iter().enumerate() {
        let ins: Vec<&[u64]> = node.op.inputs().iter().map(|&v| masks[v].as_slice()).collect();
        match &gates[i] {
            Some(gate) => {
                let out = random_words(rng, node.shape.len(), n);
                let pair = gate.keygen(&ins, &out, rng).map_err(|e| EngineError::at(i, e))?;
                charge(&mut report.by_label, node.label, pair.bits);
                report.key_bits += pair.bits;
                k0.push(Some(pair.k0));
                k1.push(Some(pair.k1));
                masks.push(out);
            }
            None => {
                let out = local(&node.op, node.shape, &ins, n, false);
                k0.push(None);
                k1.push(None);
                masks.push(out);
            }
        }
        // Masks no later node reads can go.
        progress(i + 1, g.nodes.len());
    }
    let (i0, i1) = share(rng, &masks[0], n);
    let (o0, o1) = share(rng, &masks[g.output], n);
    report.key_bits += (g.input.len() + g.shape(g.output).len()) as u64 * n as u64;
    report.time = t.elapsed();
    Ok((
        PartyKeys { party: Party::P0, input_mask: i0, output_mask: o0, gates: k0 },
        PartyKeys { party: Party::P1, input_mask: i1, output_mask: o1, gates: k1 },
        report,
    ))
}

/// The plaintext fixed-point reference: the output the secure run must equal.
pub fn plain(g: &Graph, gates: &[Option<Box<dyn DynGate>>], x: &[u64]) -> Vec<u64> {
    let mut vals: Vec<Vec<u64>> = vec![x.iter().map(|&v| v & mask(g.n)).collect()];
    for (i, node) in g.nodes.iter().enumerate() {
        let ins: Vec<&[u64]> = node.op.inputs().iter().map(|&v| vals[v].as_slice()).collect();
        let out = match &gates[i] {
            Some(gate) => gate.reference(&ins),
            None => local(&node.op, node.shape, &ins, g.n, true),
        };
        vals.push(out);
    }
    vals.swap_remove(g.output)
}

/// The client's additive shares of its input.
pub fn share_input(x: &[u64], n: u32, rng: &mut impl Rng) -> (Vec<u64>, Vec<u64>) {
    let a: Vec<u64> = x.iter().map(|_| rng.next_u64() & mask(n)).collect();
    let b = x.iter().zip(&a).map(|(&x, &a)| x.wrapping_sub(a) & mask(n)).collect();
    (a, b)
}

/// The client's output from the two servers' shares.
pub fn reconstruct(y0: &[u64], y1: &[u64], n: u32) -> Vec<u64> {
    y0.iter().zip(y1).map(|(a, b)| a.wrapping_add(*b) & mask(n)).collect()
}

/// One server's online phase: open the masked input, run every node, and return its share
/// of the output (`ŷ − r_out` for party 0, `−r_out` for party 1).
///
/// # Errors
/// [`GateError`] if an exchange or a gate fails.
pub async fn online(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    ctx: &Ctx,
    keys: &PartyKeys,
    x_share: &[u64],
) -> Result<Vec<u64>, GateError> {
    let n = g.n;
    let m = mask(n);
    if x_share.len() != g.input.len() || keys.input_mask.len() != g.input.len() {
        return Err(GateError::Length {
            what: "input shares",
            expected: g.input.len(),
            actual: x_share.len(),
        });
    }
    ctx.set_label("input");
    let mine: Vec<u64> = x_share.iter().zip(&keys.input_mask).map(|(a, b)| a.wrapping_add(*b) & m).collect();
    let mut vals: Vec<Vec<u64>> = vec![ctx.open(&mine, n).await?];
    for (i, node) in g.nodes.iter().enumerate() {
        ctx.set_label(node.label);
        let ins: Vec<&[u64]> = node.op.inputs().iter().map(|&v| vals[v].as_slice()).collect();
        let out = match (&gates[i], &keys.gates[i]) {
            (Some(gate), Some(key)) => gate.eval(ctx, key.as_ref(), ins).await?,
            (None, None) => local(&node.op, node.shape, &ins, n, true),
            _ => return Err(GateError::KeyMismatch("keys of another program")),
        };
        vals.push(out);
    }
    ctx.set_label("output");
    let y = &vals[g.output];
    if keys.output_mask.len() != y.len() {
        return Err(GateError::KeyMismatch("output mask of another program"));
    }
    Ok(y.iter()
        .zip(&keys.output_mask)
        .map(|(&v, &r)| if keys.party == Party::P0 { v.wrapping_sub(r) & m } else { r.wrapping_neg() & m })
        .collect())
}
