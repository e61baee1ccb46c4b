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
pub use fss::rng::Split;
use fss::rng::{DealerRng, Rng, SplitRng};
use gates::dealer::{random_words, share};
use gates::{Ctx, GateError};

use crate::error::EngineError;
use crate::graph::{Graph, Op};
use crate::layers::{DynGate, local};

/// One party's keys for a whole program, in memory.
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

/// Where the online phase takes one party's keys from, in program order: the input mask
/// share, one key per gate node, the output mask share. Each key is handed out once (keys
/// are single-use); a source may read them from disk as the program runs.
pub trait KeySource {
    /// The party whose keys these are.
    fn party(&self) -> Party;
    /// This party's share of the input mask.
    ///
    /// # Errors
    /// [`GateError`] if the keys cannot be read.
    fn input_mask(&mut self) -> Result<Vec<u64>, GateError>;
    /// The key of gate node `node` (asked in increasing node order).
    ///
    /// # Errors
    /// [`GateError`] if the key is missing, corrupted or for another gate.
    fn gate_key(&mut self, node: usize, gate: &dyn DynGate) -> Result<Box<dyn Any + Send>, GateError>;
    /// This party's share of the output mask (asked last).
    ///
    /// # Errors
    /// [`GateError`] if the keys cannot be read.
    fn output_mask(&mut self) -> Result<Vec<u64>, GateError>;
}

impl KeySource for PartyKeys {
    fn party(&self) -> Party {
        self.party
    }

    fn input_mask(&mut self) -> Result<Vec<u64>, GateError> {
        Ok(std::mem::take(&mut self.input_mask))
    }

    fn gate_key(&mut self, node: usize, _gate: &dyn DynGate) -> Result<Box<dyn Any + Send>, GateError> {
        self.gates
            .get_mut(node)
            .and_then(Option::take)
            .ok_or(GateError::KeyMismatch("no key for this node (keys of another program, or used already)"))
    }

    fn output_mask(&mut self) -> Result<Vec<u64>, GateError> {
        Ok(std::mem::take(&mut self.output_mask))
    }
}

/// Where the dealer puts one party's keys, in program order (see [`KeySource`]).
pub trait KeySink {
    /// This party's share of the input mask (first).
    ///
    /// # Errors
    /// [`EngineError`] if the keys cannot be stored.
    fn input_mask(&mut self, share: Vec<u64>) -> Result<(), EngineError>;
    /// The key of gate node `node`.
    ///
    /// # Errors
    /// [`EngineError`] if the key cannot be stored.
    fn gate_key(
        &mut self,
        node: usize,
        gate: &dyn DynGate,
        key: Box<dyn Any + Send>,
    ) -> Result<(), EngineError>;
    /// This party's share of the output mask (last).
    ///
    /// # Errors
    /// [`EngineError`] if the keys cannot be stored.
    fn output_mask(&mut self, share: Vec<u64>) -> Result<(), EngineError>;
    /// Whether this sink stores encoded keys ([`KeySink::gate_bytes`]) rather than key
    /// objects ([`KeySink::gate_key`]).
    fn wants_bytes(&self) -> bool {
        false
    }
    /// The encoded key of gate node `node` ([`DynGate::encode_pair`]), for a sink that
    /// [`KeySink::wants_bytes`].
    ///
    /// # Errors
    /// [`EngineError`] if the key cannot be stored.
    fn gate_bytes(&mut self, node: usize, bytes: Vec<u8>) -> Result<(), EngineError> {
        let _ = (node, bytes);
        Err(EngineError::Online(GateError::Keys("this key sink stores key objects, not bytes".into())))
    }
}

impl KeySink for PartyKeys {
    fn input_mask(&mut self, share: Vec<u64>) -> Result<(), EngineError> {
        self.input_mask = share;
        Ok(())
    }

    fn gate_key(
        &mut self,
        node: usize,
        _gate: &dyn DynGate,
        key: Box<dyn Any + Send>,
    ) -> Result<(), EngineError> {
        if self.gates.len() <= node {
            self.gates.resize_with(node + 1, || None);
        }
        self.gates[node] = Some(key);
        Ok(())
    }

    fn output_mask(&mut self, share: Vec<u64>) -> Result<(), EngineError> {
        self.output_mask = share;
        Ok(())
    }
}

/// What key generation produced.
#[derive(Clone, Debug, Default)]
pub struct DealReport {
    /// Key bits of the party with the larger key (gates as stored, plus the input and
    /// output mask shares).
    pub key_bits: u64,
    /// Key bits of each party.
    pub party_key_bits: [u64; 2],
    /// Key bits by layer type (the mean of the two parties').
    pub by_label: Vec<(&'static str, u64)>,
    /// Dealer time.
    pub time: Duration,
    /// The dealer's CPU time by layer type: making the keys (each gate's `keygen`, summed
    /// over the gates dealt in parallel) ...
    pub deal_cpu_by_label: Vec<(&'static str, Duration)>,
    /// ... and encoding them for bundles (empty when keys are handed over in memory).
    pub encode_cpu_by_label: Vec<(&'static str, Duration)>,
    /// AES blocks the process encrypted while dealing: the keys' trees
    /// ([`fss::prg::aes_blocks`]) and the dealer's randomness, pads and root streams
    /// ([`fss::prg::stream_blocks`]) — the dealer's AES floor, if nothing else ran.
    pub aes_blocks: u64,
}

fn charge<T: Copy + std::ops::AddAssign>(list: &mut Vec<(&'static str, T)>, label: &'static str, v: T) {
    match list.iter_mut().find(|(l, _)| *l == label) {
        Some((_, s)) => *s += v,
        None => list.push((label, v)),
    }
}

/// The dealer, in memory: masks for every value and both parties' keys; `progress` is
/// called after each node with (done, total).
///
/// # Errors
/// [`EngineError`] if a gate rejects its masks.
pub fn deal(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    rng: &mut DealerRng,
    progress: impl FnMut(usize, usize),
) -> Result<(PartyKeys, PartyKeys, DealReport), EngineError> {
    let Dealt { keys: [k0, k1], report, .. } = deal_carried(g, gates, rng, &[], progress)?;
    Ok((k0, k1, report))
}

/// One program of a session, dealt in memory ([`deal_carried`]).
#[derive(Debug)]
pub struct Dealt {
    /// Both parties' keys.
    pub keys: [PartyKeys; 2],
    /// What key generation produced.
    pub report: DealReport,
    /// The masks of the program's [`Graph::carry`], for the next program.
    pub carry: Vec<Vec<u64>>,
}

/// One program of a session dealt in memory: as [`deal`], with the masks of the values
/// carried over from the previous program ([`deal_step`]).
///
/// # Errors
/// As [`deal_step`].
pub fn deal_carried(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    rng: &mut DealerRng,
    carried_masks: &[Vec<u64>],
    progress: impl FnMut(usize, usize),
) -> Result<Dealt, EngineError> {
    let empty = |party| PartyKeys { party, input_mask: vec![], output_mask: vec![], gates: vec![] };
    let (mut k0, mut k1) = (empty(Party::P0), empty(Party::P1));
    let (report, carry) = deal_step(g, gates, rng, [&mut k0, &mut k1], carried_masks, progress)?;
    k0.gates.resize_with(g.nodes.len(), || None);
    k1.gates.resize_with(g.nodes.len(), || None);
    Ok(Dealt { keys: [k0, k1], report, carry })
}

/// The dealer, streaming: masks for every value, and both parties' keys handed to `sinks`
/// node by node (so that they can go to disk as they are made); `progress` is called after
/// each node with (done, total).
///
/// # Errors
/// [`EngineError`] if a gate rejects its masks or a sink fails.
pub fn deal_into(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    rng: &mut DealerRng,
    sinks: [&mut dyn KeySink; 2],
    progress: impl FnMut(usize, usize),
) -> Result<DealReport, EngineError> {
    Ok(deal_step(g, gates, rng, sinks, &[], progress)?.0)
}

/// [`deal_into`] with the values of the gates whose keys are encoded seeded split as
/// `seeded` says (the dealer's own choice is [`Split::Resplit`]): for the test that their
/// bundles are the same as with a random split ([`Split::Random`] against
/// [`Split::ResplitDrawing`]).
///
/// # Errors
/// As [`deal_into`].
#[doc(hidden)]
pub fn deal_into_split(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    rng: &mut DealerRng,
    sinks: [&mut dyn KeySink; 2],
    seeded: Split,
) -> Result<DealReport, EngineError> {
    Ok(deal_step_split(g, gates, rng, sinks, &[], |_, _| {}, seeded)?.0)
}

/// Carried value `slot` of `shape`.
fn carried(slot: usize, shape: crate::graph::Shape, carried: &[Vec<u64>]) -> Result<&[u64], String> {
    match carried.get(slot) {
        Some(v) if v.len() == shape.len() => Ok(v),
        Some(v) => {
            Err(format!("carried value {slot} has {} elements, the program reads {}", v.len(), shape.len()))
        }
        None => Err(format!("no carried value {slot}")),
    }
}

/// One program of a session, dealt: as [`deal_into`], with the masks of the values carried
/// over from the previous program (`carried`, by slot; the dealer keeps them between
/// programs); returns the report and the masks of this program's [`Graph::carry`].
///
/// # Errors
/// As [`deal_into`], or [`EngineError::Program`] if a carried mask is missing or of
/// another shape.
pub fn deal_step(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    rng: &mut DealerRng,
    sinks: [&mut dyn KeySink; 2],
    carried_masks: &[Vec<u64>],
    progress: impl FnMut(usize, usize),
) -> Result<(DealReport, Vec<Vec<u64>>), EngineError> {
    deal_step_split(g, gates, rng, sinks, carried_masks, progress, Split::Resplit)
}

/// [`deal_step`] with the values of the gates whose keys are encoded seeded split as
/// `seeded` says; every other gate's, and every key handed over as dealt, at random.
fn deal_step_split(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    rng: &mut DealerRng,
    sinks: [&mut dyn KeySink; 2],
    carried_masks: &[Vec<u64>],
    mut progress: impl FnMut(usize, usize),
    seeded: Split,
) -> Result<(DealReport, Vec<Vec<u64>>), EngineError> {
    let [s0, s1] = sinks;
    // The masks' shares are stored as they are dealt: the dealer's own generator splits at
    // random (only a gate's generator may say otherwise, below).
    if rng.split() != Split::Random {
        return Err(EngineError::Dealer("its generator must split values at random".into()));
    }
    // Keys handed over as dealt, not encoded, keep the dealt split: it must be random.
    let seeded = if s0.wants_bytes() && s1.wants_bytes() { seeded } else { Split::Random };
    let t = Instant::now();
    let aes = || fss::prg::aes_blocks() + fss::prg::stream_blocks();
    let aes_before = aes();
    let n = g.n;
    // Masks of values that later nodes still read (freed after their last reader, once the
    // keys that read them are dealt).
    let last_use = last_uses(g);
    let mut masks: Vec<Vec<u64>> = Vec::with_capacity(g.nodes.len() + 1);
    masks.push(random_words(rng, g.input.len(), n));
    let (i0, i1) = share(rng, &masks[0], n);
    s0.input_mask(i0)?;
    s1.input_mask(i1)?;
    let mut report = DealReport::default();
    // Gate nodes whose masks are drawn and whose keys are still to be made: a batch of them
    // is dealt at once, in parallel (each with its own generator seeded from `rng`), then
    // handed to the sinks in node order. Up to 16 gates per thread, so that a large gate
    // and small ones do not leave a thread idle (one per thread, bert-tiny's key generation
    // took 482–493 ms for FuseFSS and 723–755 ms for SIGMA against 427–472 and 524–584 with
    // four, `bench model --impl both --reps 7`; four against 16, keys to a memory file
    // system, `--keys-dir /dev/shm/…`: bert-tiny 98–102 → 81–86 ms for FuseFSS and 122–129
    // → 108–116 ms for SIGMA, MiniLM seq 32 233 → 202 and 298–340 → 260–273 ms), but fewer
    // when they are large (`BATCH_ELEMENTS`): a batch's keys wait in memory (bert-tiny's
    // peak resident memory ~750 MB → ~1.05 GB).
    let batch = (16 * rayon::current_num_threads()).clamp(1, 64);
    let mut pending: Vec<Pending> = Vec::with_capacity(batch);
    let mut pending_elements = 0;
    let mut done = 0;
    for (i, node) in g.nodes.iter().enumerate() {
        let out = match &gates[i] {
            _ if matches!(node.op, Op::Carried { .. }) => {
                let Op::Carried { slot, shape } = node.op else { unreachable!() };
                carried(slot, shape, carried_masks).map_err(|e| EngineError::program(i, e))?.to_vec()
            }
            Some(gate) => {
                let mut seed = [0u8; 32];
                rng.fill_bytes(&mut seed);
                // Half of each party's share words from a pad, its tree roots from a root
                // stream of the same seed (FuseFSS).
                let pads = gate.seeds_shares().then(|| {
                    let mut seeds = [[0u8; 16]; 2];
                    seeds.iter_mut().for_each(|s| rng.fill_bytes(s));
                    seeds
                });
                pending.push((i, seed, pads));
                pending_elements += node.shape.len();
                random_words(rng, node.shape.len(), n)
            }
            None => {
                let ins: Vec<&[u64]> = node.op.inputs().iter().map(|&v| masks[v].as_slice()).collect();
                local(&node.op, node.shape, &ins, n, false)
            }
        };
        masks.push(out);
        if pending.len() == batch || pending_elements >= BATCH_ELEMENTS || i + 1 == g.nodes.len() {
            pending_elements = 0;
            let dealt = deal_batch(g, gates, &masks, &pending, seeded, s0.wants_bytes())?;
            // Each party's key bytes: as encoded, or as the encoding would store them.
            let mut account = |node: usize, [b0, b1]: [u64; 2]| {
                report.party_key_bits[0] += 8 * b0;
                report.party_key_bits[1] += 8 * b1;
                charge(&mut report.by_label, g.nodes[node].label, 4 * (b0 + b1));
            };
            for ((node, _, pads), (keys, took)) in pending.drain(..).zip(dealt) {
                charge(&mut report.deal_cpu_by_label, g.nodes[node].label, took);
                match keys {
                    BatchKeys::Encoded([b0, b1], d) => {
                        charge(&mut report.encode_cpu_by_label, g.nodes[node].label, d);
                        account(node, [b0.len() as u64, b1.len() as u64]);
                        s0.gate_bytes(node, b0)?;
                        s1.gate_bytes(node, b1)?;
                    }
                    BatchKeys::Keys(pair) => {
                        account(node, pair.sizes.stored_bytes(pads.is_some()));
                        let gate = gates[node].as_deref().expect("a gate node");
                        s0.gate_key(node, gate, pair.k0)?;
                        s1.gate_key(node, gate, pair.k1)?;
                    }
                }
            }
            // Free the masks no later node reads (all keys that read them are dealt).
            for (j, node) in g.nodes.iter().enumerate().take(i + 1).skip(done) {
                for v in node.op.inputs() {
                    if last_use[v] == j && v != g.output && !g.carry.contains(&v) {
                        masks[v] = vec![];
                    }
                }
            }
            done = i + 1;
        }
        progress(i + 1, g.nodes.len());
    }
    let (o0, o1) = share(rng, &masks[g.output], n);
    s0.output_mask(o0)?;
    s1.output_mask(o1)?;
    let masks_bits = (g.input.len() + g.shape(g.output).len()) as u64 * n as u64;
    report.party_key_bits.iter_mut().for_each(|b| *b += masks_bits);
    report.key_bits = report.party_key_bits[0].max(report.party_key_bits[1]);
    report.time = t.elapsed();
    report.aes_blocks = aes() - aes_before;
    let carry = g.carry.iter().map(|&v| masks[v].clone()).collect();
    Ok((report, carry))
}

/// Output elements of the gates dealt in one batch at most ([`deal_step`]), unless one gate
/// has more.
const BATCH_ELEMENTS: usize = 1 << 20;

/// A gate node whose keys are to be made: the node, the seed of its own generator, and the
/// seeds of the parties' pads and root streams if its keys are stored seeded.
type Pending = (usize, [u8; 32], Option<[fss::pad::PadSeed; 2]>);

/// A gate's keys as [`deal_batch`] hands them over: as dealt, or encoded for a bundle
/// ([`DynGate::encode_pair`]) with the encoding's time.
enum BatchKeys {
    Keys(crate::layers::KeyPair),
    Encoded([Vec<u8>; 2], Duration),
}

/// The keys of the gate nodes `pending`, made in parallel from the masks of their inputs
/// and outputs (each encoded as soon as it is made if `encode`: one parallel pass, no
/// thread waiting between the dealing and the encoding of a batch, and a dealt key
/// wiped as soon as it is encoded), and each gate's time to make them.
fn deal_batch(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    masks: &[Vec<u64>],
    pending: &[Pending],
    seeded: Split,
    encode: bool,
) -> Result<Vec<(BatchKeys, Duration)>, EngineError> {
    use fss::rng::SeedableRng;
    use rayon::prelude::*;
    let one = |(i, seed, pads): &Pending| {
        let t = Instant::now();
        let (i, node) = (*i, &g.nodes[*i]);
        let gate = gates[i].as_deref().expect("a gate node");
        let ins: Vec<&[u64]> = node.op.inputs().iter().map(|&v| masks[v].as_slice()).collect();
        // A gate whose keys are encoded seeded has its values split by its pads; the
        // generator carries the mode into the gate's dealing (and nowhere else).
        let split = if pads.is_some() { seeded } else { Split::Random };
        let mut rng = DealerRng::from_seed(*seed).with_split(split);
        let pair = fss::rng::with_root_seeds(pads.as_ref(), || gate.keygen(&ins, &masks[i + 1], &mut rng))
            .map_err(|e| EngineError::at(i, e))?;
        let took = t.elapsed();
        if !encode {
            return Ok((BatchKeys::Keys(pair), took));
        }
        let t = Instant::now();
        let bytes = gate.encode_pair(&pair, *pads);
        // (The dealt keys wipe themselves as they drop, part of the encoding's time.)
        drop(pair);
        Ok((BatchKeys::Encoded(bytes, t.elapsed()), took))
    };
    if pending.len() <= 1 { pending.iter().map(one).collect() } else { pending.par_iter().map(one).collect() }
}

/// For every value, the last node that reads it.
fn last_uses(g: &Graph) -> Vec<usize> {
    let mut last = vec![0usize; g.nodes.len() + 1];
    for (i, node) in g.nodes.iter().enumerate() {
        for v in node.op.inputs() {
            last[v] = i;
        }
    }
    last
}

/// The plaintext fixed-point reference: the output the secure run must equal.
pub fn plain(g: &Graph, gates: &[Option<Box<dyn DynGate>>], x: &[u64]) -> Vec<u64> {
    plain_step(g, gates, x, &[]).map(|(y, _)| y).unwrap_or_default()
}

/// One program of a session in plaintext: the output and the values of [`Graph::carry`],
/// from the values carried over from the previous program.
///
/// # Errors
/// [`EngineError::Program`] if a carried value is missing or of another shape.
pub fn plain_step(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    x: &[u64],
    carried_values: &[Vec<u64>],
) -> Result<(Vec<u64>, Vec<Vec<u64>>), EngineError> {
    let mut vals: Vec<Vec<u64>> = vec![x.iter().map(|&v| v & mask(g.n)).collect()];
    for (i, node) in g.nodes.iter().enumerate() {
        let ins: Vec<&[u64]> = node.op.inputs().iter().map(|&v| vals[v].as_slice()).collect();
        let out = match &gates[i] {
            _ if matches!(node.op, Op::Carried { .. }) => {
                let Op::Carried { slot, shape } = node.op else { unreachable!() };
                carried(slot, shape, carried_values).map_err(|e| EngineError::program(i, e))?.to_vec()
            }
            Some(gate) => gate.reference(&ins),
            None => local(&node.op, node.shape, &ins, g.n, true),
        };
        vals.push(out);
    }
    let carry = g.carry.iter().map(|&v| vals[v].clone()).collect();
    Ok((vals.swap_remove(g.output), carry))
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
    keys: &mut dyn KeySource,
    x_share: &[u64],
) -> Result<Vec<u64>, GateError> {
    Ok(online_step(g, gates, ctx, keys, x_share, &[]).await?.0)
}

/// One program of a session online: as [`online`], reading the masked values carried over
/// from the previous program (by slot), and returning also the masked values of this
/// program's [`Graph::carry`] (kept by the server for the next program, never opened).
///
/// # Errors
/// As [`online`], or [`GateError::Length`] if a carried value is missing or of another
/// shape.
pub async fn online_step(
    g: &Graph,
    gates: &[Option<Box<dyn DynGate>>],
    ctx: &Ctx,
    keys: &mut dyn KeySource,
    x_share: &[u64],
    carried_values: &[Vec<u64>],
) -> Result<(Vec<u64>, Vec<Vec<u64>>), GateError> {
    let n = g.n;
    let m = mask(n);
    if x_share.len() != g.input.len() {
        return Err(GateError::Length {
            what: "input shares",
            expected: g.input.len(),
            actual: x_share.len(),
        });
    }
    ctx.set_label("input");
    let input_mask = keys.input_mask()?;
    if input_mask.len() != g.input.len() {
        return Err(GateError::KeyMismatch("input mask of another program"));
    }
    let mine: Vec<u64> = x_share.iter().zip(&input_mask).map(|(a, b)| a.wrapping_add(*b) & m).collect();
    let last_use = last_uses(g);
    let mut vals: Vec<Vec<u64>> = vec![ctx.open(&mine, n).await?];
    for (i, node) in g.nodes.iter().enumerate() {
        ctx.set_label(node.label);
        let ins: Vec<&[u64]> = node.op.inputs().iter().map(|&v| vals[v].as_slice()).collect();
        let out = match &gates[i] {
            _ if matches!(node.op, Op::Carried { .. }) => {
                let Op::Carried { slot, shape } = node.op else { unreachable!() };
                carried(slot, shape, carried_values)
                    .map_err(|_| GateError::Length {
                        what: "carried values",
                        expected: shape.len(),
                        actual: carried_values.get(slot).map_or(0, Vec::len),
                    })?
                    .to_vec()
            }
            Some(gate) => {
                let key = keys.gate_key(i, gate.as_ref())?;
                let out = gate.eval(ctx, key.as_ref(), ins).await?;
                // Wiped while the next exchange is in flight (see `Ctx::retire`).
                ctx.retire(key);
                out
            }
            None => local(&node.op, node.shape, &ins, n, true),
        };
        vals.push(out);
        for v in node.op.inputs() {
            if last_use[v] == i && v != g.output && !g.carry.contains(&v) {
                vals[v] = vec![];
            }
        }
    }
    ctx.set_label("output");
    let output_mask = keys.output_mask()?;
    let y = &vals[g.output];
    if output_mask.len() != y.len() {
        return Err(GateError::KeyMismatch("output mask of another program"));
    }
    let p0 = keys.party() == Party::P0;
    let share = y
        .iter()
        .zip(&output_mask)
        .map(|(&v, &r)| if p0 { v.wrapping_sub(r) & m } else { r.wrapping_neg() & m })
        .collect();
    let carry = g.carry.iter().map(|&v| vals[v].clone()).collect();
    Ok((share, carry))
}
