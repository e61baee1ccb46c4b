//! The two-party in-memory harness: dealer, P0 and P1 run one gate over vectors of
//! elements; each round's openings are exchanged in memory and counted.
//!
//! The keys go through their bundle encoding ([`encode_pair`], half of each party's share
//! words from a pad, its tree roots from its root stream) before use, so a run also checks
//! that a key is complete, that its size is what is reported, that the words it marks as
//! shares are shares, and that its trees are written in the order they were dealt.

use std::time::{Duration, Instant};

use fss::Party;
use fss::ring::mask;
use fss::rng::SplitRng;

use crate::dealer::random_words;
use crate::error::{GateError, check_len};
use crate::gate::Gate;
use crate::keyio::{GateKey, KeySizes, decode_keyed, encode_pair};
use crate::online::{Ctx, Progress, Session, Stats};

/// What one run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// The unmasked secure outputs `ŷ − r_out`.
    pub outputs: Vec<u64>,
    /// The plaintext reference outputs.
    pub expected: Vec<u64>,
    /// Each party's key material in bits.
    pub key_bits: [u64; 2],
    /// Each party's communication.
    pub stats: [Stats; 2],
    /// Dealer time (both keys).
    pub keygen: Duration,
    /// The dealer's seeded bundle encoding of both keys ([`encode_pair`]).
    pub encode: Duration,
    /// Each party's decoding of its bundle.
    pub decode: [Duration; 2],
    /// Each party's online computation time (exchanges excluded).
    pub eval: [Duration; 2],
    /// AES blocks one party encrypted online (the mean of the two; the process-wide
    /// [`fss::prg::aes_blocks`] counter, so nothing else may run meanwhile).
    pub aes_blocks: u64,
}

impl Report {
    /// Whether the secure outputs equal the reference bit for bit.
    pub fn exact(&self) -> bool {
        self.outputs == self.expected
    }

    /// Index and values of the first element where secure and reference outputs differ.
    pub fn first_mismatch(&self) -> Option<(usize, u64, u64)> {
        self.outputs
            .iter()
            .zip(&self.expected)
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .map(|(i, (a, b))| (i, *a, *b))
    }
}

/// Run `gate` on plaintext `inputs` with fresh random masks.
///
/// # Errors
/// Any [`GateError`] of the dealer or the parties.
pub fn run<G: Gate, R: SplitRng + ?Sized>(
    gate: &G,
    inputs: &[&[u64]],
    rng: &mut R,
) -> Result<Report, GateError> {
    let masks: Vec<Vec<u64>> =
        gate.input_bits().iter().zip(gate.input_lens()).map(|(&b, l)| random_words(rng, l, b)).collect();
    let masks: Vec<&[u64]> = masks.iter().map(Vec::as_slice).collect();
    let out: Vec<u64> =
        gate.output_wires().into_iter().flat_map(|(bits, len)| random_words(rng, len, bits)).collect();
    run_with_masks(gate, inputs, &masks, &out, rng)
}

/// Run `gate` on plaintext `inputs` under the given input and output masks.
///
/// # Errors
/// Any [`GateError`] of the dealer or the parties.
pub fn run_with_masks<G: Gate, R: SplitRng + ?Sized>(
    gate: &G,
    inputs: &[&[u64]],
    masks_in: &[&[u64]],
    mask_out: &[u64],
    rng: &mut R,
) -> Result<Report, GateError> {
    let bits = gate.input_bits();
    check_len("inputs", bits.len(), inputs.len())?;
    let masked: Vec<Vec<u64>> = inputs
        .iter()
        .zip(masks_in)
        .zip(&bits)
        .map(|((x, r), &b)| x.iter().zip(r.iter()).map(|(&x, &r)| x.wrapping_add(r) & mask(b)).collect())
        .collect();
    let masked: Vec<&[u64]> = masked.iter().map(Vec::as_slice).collect();

    // Through the bundle encoding, half of each party's share words from a pad and its
    // tree roots from its root stream, so that every gate's test also checks which of its
    // words are shares and that its trees are written in the order they were dealt.
    let mut seeds = [[0u8; 16]; 2];
    seeds.iter_mut().for_each(|s| rng.fill_bytes(s));
    let t = Instant::now();
    let (k0, k1) = fss::rng::with_root_seeds(Some(&seeds), || gate.keygen(masks_in, mask_out, rng))?;
    let keygen = t.elapsed();
    let shape = gate.key_shape();
    let t = Instant::now();
    let sizes = KeySizes::of(&k0);
    let [b0, b1] = encode_pair(&k0, &k1, &sizes, Some(seeds));
    let encode = t.elapsed();
    let [s0, s1] = sizes.stored_bytes(true);
    check_len("seeded key bytes of party 0", s0 as usize, b0.len())?;
    check_len("seeded key bytes of party 1", s1 as usize, b1.len())?;
    let t = Instant::now();
    let k0 = decode_keyed::<G::Key>(&shape, Party::P0, &b0)?;
    let t1 = Instant::now();
    let k1 = decode_keyed::<G::Key>(&shape, Party::P1, &b1)?;
    let decode = [t1 - t, t1.elapsed()];
    let key_bits = [k0.bits(), k1.bits()];

    let (c0, c1) = (Ctx::new(Party::P0), Ctx::new(Party::P1));
    let mut s0 = Session::new(&c0, gate.eval(&c0, &k0, &masked));
    let mut s1 = Session::new(&c1, gate.eval(&c1, &k1, &masked));
    let mut eval = [Duration::ZERO; 2];
    let aes_before = fss::prg::aes_blocks();
    let (y0, y1) = loop {
        let t = Instant::now();
        let p0 = s0.advance();
        eval[0] += t.elapsed();
        let t = Instant::now();
        let p1 = s1.advance();
        eval[1] += t.elapsed();
        match (p0, p1) {
            (Progress::Send(m0), Progress::Send(m1)) => {
                s0.deliver(&m1)?;
                s1.deliver(&m0)?;
            }
            (Progress::Done(r0), Progress::Done(r1)) => break (r0?, r1?),
            (Progress::Done(Err(e)), _) | (_, Progress::Done(Err(e))) => return Err(e),
            _ => return Err(GateError::Desync("one party finished while the other exchanges")),
        }
    };
    drop((s0, s1));
    let aes_blocks = (fss::prg::aes_blocks() - aes_before) / 2;
    if y0 != y1 {
        return Err(GateError::Desync("the parties opened different outputs"));
    }
    let widths: Vec<u32> =
        gate.output_wires().into_iter().flat_map(|(bits, len)| std::iter::repeat_n(bits, len)).collect();
    check_len("outputs", widths.len(), y0.len())?;
    check_len("output masks", widths.len(), mask_out.len())?;
    let outputs =
        y0.iter().zip(mask_out).zip(&widths).map(|((&y, &r), &b)| y.wrapping_sub(r) & mask(b)).collect();
    Ok(Report {
        outputs,
        expected: gate.reference(inputs),
        key_bits,
        stats: [c0.stats(), c1.stats()],
        keygen,
        encode,
        decode,
        eval,
        aes_blocks,
    })
}
