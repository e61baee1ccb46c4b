//! What each layer computes: local maps, and the gates of each implementation.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use compiler::composite;
use compiler::library::GeluForm;
use compiler::{CompiledGate, SpecError};
use fss::pad::PadSeed;
use fss::ring::mask;
use fss::rng::DealerRng;
use fss::words::KeyBuffer;
use fss::{DecodeError, Party};
use gates::arith::{BatchedMatMul, Mul};
use gates::carry_table::ArsSlackTable;
use gates::keyio::{KeySizes, decode_keyed, decode_keyed_in_place, encode_pair};
use gates::linalg::matmul_mod_weights;
use gates::nonlinear::{Activation, ArsSlackDcf, ReluResidual};
use gates::norm::Norm;
use gates::residual::{DeferredResidualNorm, ResidualNorm};
use gates::shift::ArsSlack;
use gates::softmax::Softmax;
use gates::{Ctx, Gate, GateError};

use crate::graph::{Graph, Op, Shape};

/// Which protocols run the nonlinear layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Impl {
    /// SIGMA's hand-written protocols (`crates/gates`).
    Sigma,
    /// Operators compiled from specs (`crates/compiler`).
    Fusefss,
}

impl Impl {
    /// Both, FuseFSS first.
    pub const ALL: [Impl; 2] = [Impl::Fusefss, Impl::Sigma];

    /// `"sigma"` or `"fusefss"`.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Sigma => "sigma",
            Impl::Fusefss => "fusefss",
        }
    }
}

impl std::fmt::Display for Impl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Impl {
    type Err = String;

    /// `"fusefss"` or `"sigma"`.
    fn from_str(s: &str) -> Result<Impl, String> {
        Impl::ALL.into_iter().find(|i| i.name() == s).ok_or_else(|| {
            format!("unknown implementation {:?} (fusefss or sigma)", s.chars().take(32).collect::<String>())
        })
    }
}

/// The output of a local node from its inputs (masked values, masks or plaintext): for a
/// linear map, the bias is added only when `bias` is set (masks carry none).
pub fn local(op: &Op, shape: Shape, inputs: &[&[u64]], n: u32, bias: bool) -> Vec<u64> {
    let m = mask(n);
    match op {
        Op::Linear { w, b, out, .. } => {
            let x = inputs[0];
            let k = x.len() / shape.rows;
            let mut y = matmul_mod_weights(x, w.slice(), shape.rows, k, *out, n);
            if let (true, Some(b)) = (bias, b) {
                for row in y.chunks_mut(*out) {
                    for (v, bb) in row.iter_mut().zip(b.iter()) {
                        *v = v.wrapping_add(*bb);
                    }
                }
            }
            y.iter_mut().for_each(|v| *v &= m);
            y
        }
        Op::Add { .. } => inputs[0].iter().zip(inputs[1]).map(|(a, b)| a.wrapping_add(*b) & m).collect(),
        Op::Gather { index, .. } => index.iter().map(|&j| inputs[0][j as usize]).collect(),
        Op::SumRows { .. } => {
            let mut s = vec![0u64; shape.cols];
            for row in inputs[0].chunks(shape.cols) {
                for (a, &v) in s.iter_mut().zip(row) {
                    *a = a.wrapping_add(v);
                }
            }
            s.iter_mut().for_each(|v| *v &= m);
            s
        }
        Op::Scale { c, .. } => inputs[0].iter().map(|&v| v.wrapping_mul(*c) & m).collect(),
        Op::Concat { .. } => inputs[0].iter().chain(inputs[1]).copied().collect(),
        Op::Rows { start, .. } => inputs[0][start * shape.cols..(start + shape.rows) * shape.cols].to_vec(),
        Op::MulPublic { c, .. } => {
            inputs[0].iter().zip(c.iter()).map(|(&v, &c)| v.wrapping_mul(c) & m).collect()
        }
        Op::Carried { .. } => unreachable!("a carried value comes from the previous program"),
        _ => unreachable!("a gate is not a local map"),
    }
}

/// A boxed online evaluation.
pub type EvalFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<u64>, GateError>> + 'a>>;

/// A gate with its key type erased: what the dealer, the parties and the plaintext backend
/// need from every gate node.
pub trait DynGate: Send + Sync {
    /// Both parties' keys (and one party's key bits).
    ///
    /// # Errors
    /// As [`Gate::keygen`].
    fn keygen(&self, masks: &[&[u64]], out: &[u64], rng: &mut DealerRng) -> Result<KeyPair, GateError>;
    /// Both parties' keys of `pair` encoded for a bundle ([`gates::keyio::encode_pair`]):
    /// with `seeds`, half of each party's share words come from the pad of its seed.
    fn encode_pair(&self, pair: &KeyPair, seeds: Option<[PadSeed; 2]>) -> [Vec<u8>; 2];
    /// Decode a key that [`DynGate::encode_pair`] wrote for `party`.
    ///
    /// # Errors
    /// [`DecodeError`] for malformed bytes.
    fn decode(&self, party: Party, bytes: &[u8]) -> Result<Box<dyn Any + Send>, DecodeError>;
    /// As [`DynGate::decode`], from `buf`, with the key's correction words read in place
    /// (the key keeps `buf` alive: [`gates::keyio::decode_keyed_in_place`]).
    ///
    /// # Errors
    /// As [`DynGate::decode`].
    fn decode_in_place(
        &self,
        party: Party,
        buf: &Arc<dyn KeyBuffer>,
    ) -> Result<Box<dyn Any + Send>, DecodeError> {
        self.decode(party, buf.key_bytes())
    }
    /// Online evaluation with this party's key.
    fn eval<'a>(&'a self, ctx: &'a Ctx, key: &'a dyn Any, inputs: Vec<&'a [u64]>) -> EvalFuture<'a>;
    /// The plaintext result.
    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64>;
    /// Whether the dealer takes half of each party's share words from a pad ([`fss::pad`]):
    /// the FuseFSS implementation's gates; SIGMA's keep its key format.
    fn seeds_shares(&self) -> bool {
        false
    }
}

/// Both parties' keys of one gate node, type-erased, and their sizes.
pub struct KeyPair {
    /// Party 0's key.
    pub k0: Box<dyn Any + Send>,
    /// Party 1's key.
    pub k1: Box<dyn Any + Send>,
    /// Sizes of one key (both have the same).
    pub sizes: KeySizes,
}

struct Erased<G: Gate>(G);

impl<G: Gate + Send + Sync> DynGate for Erased<G>
where
    G::Key: Send + 'static,
{
    fn keygen(&self, masks: &[&[u64]], out: &[u64], rng: &mut DealerRng) -> Result<KeyPair, GateError> {
        let (k0, k1) = self.0.keygen(masks, out, rng)?;
        let sizes = KeySizes::of(&k0);
        Ok(KeyPair { k0: Box::new(k0), k1: Box::new(k1), sizes })
    }

    fn encode_pair(&self, pair: &KeyPair, seeds: Option<[PadSeed; 2]>) -> [Vec<u8>; 2] {
        fn key<K: 'static>(k: &dyn Any) -> &K {
            k.downcast_ref::<K>().expect("a key of this gate")
        }
        encode_pair(key::<G::Key>(pair.k0.as_ref()), key::<G::Key>(pair.k1.as_ref()), &pair.sizes, seeds)
    }

    fn decode(&self, party: Party, bytes: &[u8]) -> Result<Box<dyn Any + Send>, DecodeError> {
        Ok(Box::new(decode_keyed::<G::Key>(&self.0.key_shape(), party, bytes)?))
    }

    fn decode_in_place(
        &self,
        party: Party,
        buf: &Arc<dyn KeyBuffer>,
    ) -> Result<Box<dyn Any + Send>, DecodeError> {
        Ok(Box::new(decode_keyed_in_place::<G::Key>(&self.0.key_shape(), party, buf)?))
    }

    fn eval<'a>(&'a self, ctx: &'a Ctx, key: &'a dyn Any, inputs: Vec<&'a [u64]>) -> EvalFuture<'a> {
        Box::pin(async move {
            let key = key.downcast_ref::<G::Key>().ok_or(GateError::KeyMismatch("a key of another gate"))?;
            self.0.eval(ctx, key, &inputs).await
        })
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        self.0.reference(inputs)
    }
}

/// A gate whose keys the dealer stores seeded ([`DynGate::seeds_shares`]).
struct SeedsShares(Box<dyn DynGate>);

impl DynGate for SeedsShares {
    fn keygen(&self, masks: &[&[u64]], out: &[u64], rng: &mut DealerRng) -> Result<KeyPair, GateError> {
        self.0.keygen(masks, out, rng)
    }

    fn encode_pair(&self, pair: &KeyPair, seeds: Option<[PadSeed; 2]>) -> [Vec<u8>; 2] {
        self.0.encode_pair(pair, seeds)
    }

    fn decode(&self, party: Party, bytes: &[u8]) -> Result<Box<dyn Any + Send>, DecodeError> {
        self.0.decode(party, bytes)
    }

    fn decode_in_place(
        &self,
        party: Party,
        buf: &Arc<dyn KeyBuffer>,
    ) -> Result<Box<dyn Any + Send>, DecodeError> {
        self.0.decode_in_place(party, buf)
    }

    fn eval<'a>(&'a self, ctx: &'a Ctx, key: &'a dyn Any, inputs: Vec<&'a [u64]>) -> EvalFuture<'a> {
        self.0.eval(ctx, key, inputs)
    }

    fn reference(&self, inputs: &[&[u64]]) -> Vec<u64> {
        self.0.reference(inputs)
    }

    fn seeds_shares(&self) -> bool {
        true
    }
}

/// Truncations of at most this many elements take the one-round shift in the FuseFSS
/// implementation: its DCF carry costs about 2.5× the two-round key (295 against 118 B per
/// element at `n = 56`), which matters little for pooling and a decode step's small
/// tensors, but does for a decode step's MLP (3,072 and 1,536 elements in SmolLM2), its
/// query-key-value projection (960), whose second round the step's max tree pays for
/// (`compiler::composite::ONE_ROUND_MAX_TREE_MAX`), and its rotary embedding (768), whose
/// round SmolLM2's step can spare (1,389 rounds per token against SIGMA's 2,322: 0.598×;
/// BERT-base's pooling, 768 elements, takes the second round too).
pub const ONE_ROUND_TRUNC_MAX: usize = 700;

/// How many low bits of each value its readers read: the FuseFSS GeLU and SiLU read their
/// input mod `2^{n−f}` (slack specs), its softmax mod `2^{n−f+1}` (max tree and `e^{−x}`);
/// rows, gathers and stacks as many as the readers of what they make; every other reader,
/// the program's output and a carried value read all `n`. A truncation whose readers all
/// read fewer bits opens only those ([`ArsSlack::out_bits`]); in the SIGMA implementation
/// every reader reads `n`.
fn read_bits(g: &Graph, imp: Impl) -> Vec<u32> {
    let (n, f) = (g.n, g.f);
    let mut bits = vec![0u32; g.nodes.len() + 1];
    bits[g.output] = n;
    g.carry.iter().for_each(|&v| bits[v] = n);
    for (i, node) in g.nodes.iter().enumerate().rev() {
        let reads = match node.op {
            Op::Gelu { .. } | Op::Silu { .. } if imp == Impl::Fusefss => n - f,
            Op::Softmax { .. } if imp == Impl::Fusefss => n - f + 1,
            Op::Rows { .. } | Op::Gather { .. } | Op::Concat { .. } => bits[i + 1],
            _ => n,
        };
        for v in node.op.inputs() {
            bits[v] = bits[v].max(reads);
        }
    }
    bits
}

/// The gate of every gate node of `g` for `imp` (`None` for local nodes).
///
/// # Errors
/// [`SpecError`] if a compiled operator cannot be built for these widths.
pub fn build(g: &Graph, imp: Impl) -> Result<Vec<Option<Box<dyn DynGate>>>, SpecError> {
    let (n, f) = (g.n, g.f);
    let reads = read_bits(g, imp);
    let mut out: Vec<Option<Box<dyn DynGate>>> = Vec::with_capacity(g.nodes.len());
    for (i, node) in g.nodes.iter().enumerate() {
        let len = node.shape.len();
        let s = node.shape;
        let gate: Option<Box<dyn DynGate>> = match &node.op {
            // FuseFSS takes one round for small tensors (pooling), where the larger key of
            // the DCF carry does not matter; products' truncations keep SIGMA's two rounds.
            // Either opens only the bits its readers read.
            Op::Trunc { shift, .. } if imp == Impl::Fusefss && len <= ONE_ROUND_TRUNC_MAX => {
                let out_bits = reads[i + 1].max(n - shift);
                Some(Box::new(Erased(ArsSlackDcf { bits: n, shift: *shift, out_bits, len })))
            }
            // FuseFSS reads the carry of a shift of up to 19 bits from truth tables
            // (`gates::carry_table`: no DPF, well under half the key).
            Op::Trunc { shift, .. } if imp == Impl::Fusefss && ArsSlackTable::supports(*shift) => {
                let out_bits = reads[i + 1].max(n - shift);
                Some(Box::new(Erased(ArsSlackTable { bits: n, shift: *shift, out_bits, len })))
            }
            Op::Trunc { shift, .. } => {
                let out_bits = reads[i + 1].max(n - shift);
                Some(Box::new(Erased(ArsSlack { bits: n, shift: *shift, out_bits, len })))
            }
            Op::MatMul { count, m, k, n: cols, .. } => {
                Some(Box::new(Erased(BatchedMatMul { bits: n, count: *count, m: *m, k: *k, n: *cols })))
            }
            Op::Softmax { causal, .. } => Some(match imp {
                // SIGMA's comparisons take n − f + 1 bits (inputs that fit n − f bits);
                // FuseFSS reads scores truncated with slack, |x| < 2^{n−f−2}: their row
                // differences fit n − f bits, a bit less for the max tree and `e^{−x}`.
                Impl::Sigma => Box::new(Erased(Softmax::sigma(n, n - f + 1, f, s.rows, s.cols, *causal))),
                Impl::Fusefss => Box::new(Erased(composite::softmax(n, n - f, f, s.rows, s.cols, *causal)?)),
            }),
            Op::LayerNorm { gamma, beta, .. } => Some(match imp {
                Impl::Sigma => Box::new(Erased(
                    Norm::layer_norm(n, f, s.rows, s.cols, gamma.clone(), beta.clone())
                        .map_err(|e| SpecError::Width(e.to_string()))?,
                )),
                Impl::Fusefss => Box::new(Erased(composite::norm(
                    n,
                    f,
                    s.rows,
                    s.cols,
                    true,
                    gamma.clone(),
                    beta.clone(),
                )?)),
            }),
            Op::Mul { .. } => Some(Box::new(Erased(Mul { bits: n, len }))),
            Op::Silu { .. } => Some(match imp {
                Impl::Sigma => Box::new(Erased(
                    ReluResidual::new(Activation::Silu, n, n - f, len)
                        .map_err(|e| SpecError::Width(e.to_string()))?,
                )),
                Impl::Fusefss => Box::new(Erased(CompiledGate::new(composite::silu(n, f)?.0, len))),
            }),
            Op::RmsNorm { gamma, .. } => Some(match imp {
                Impl::Sigma => Box::new(Erased(
                    Norm::rms_norm(n, f, s.rows, s.cols, gamma.clone())
                        .map_err(|e| SpecError::Width(e.to_string()))?,
                )),
                Impl::Fusefss => {
                    let zero: Arc<[u64]> = vec![0; s.cols].into();
                    Box::new(Erased(composite::norm(n, f, s.rows, s.cols, false, gamma.clone(), zero)?))
                }
            }),
            Op::ResidualRmsNorm { shift, gamma, .. } => {
                // The stacked output has twice the rows of each input.
                let rows = s.rows / 2;
                let err = |e: GateError| SpecError::Width(e.to_string());
                Some(match imp {
                    Impl::Sigma => Box::new(Erased(ResidualNorm {
                        shift: *shift,
                        norm: Norm::rms_norm(n, f, rows, s.cols, gamma.clone()).map_err(err)?,
                    })),
                    Impl::Fusefss => {
                        let zero: Arc<[u64]> = vec![0; s.cols].into();
                        let norm = composite::norm(n, f, rows, s.cols, false, gamma.clone(), zero)?;
                        Box::new(Erased(DeferredResidualNorm::new(*shift, norm).map_err(err)?))
                    }
                })
            }
            Op::Gelu { tanh, .. } => Some(match imp {
                Impl::Sigma => Box::new(Erased(
                    ReluResidual::new(Activation::Gelu, n, n - f, len)
                        .map_err(|e| SpecError::Width(e.to_string()))?,
                )),
                Impl::Fusefss => {
                    let form = if *tanh { GeluForm::Tanh } else { GeluForm::Erf };
                    let c = composite::gelu(n, f, form)?;
                    Box::new(Erased(CompiledGate::new(c.0, len)))
                }
            }),
            _ => None,
        };
        // FuseFSS stores half of each party's share words of a key as a seed (`fss::pad`).
        let gate = match imp {
            Impl::Fusefss => gate.map(|g| Box::new(SeedsShares(g)) as Box<dyn DynGate>),
            Impl::Sigma => gate,
        };
        out.push(gate);
    }
    Ok(out)
}

/// The gate of every node of a program (`None` for local nodes), as [`build`] makes them.
pub type NodeGates = Vec<Option<Box<dyn DynGate>>>;

/// Shared handle to the gates of a program.
pub type Gates = Arc<Vec<Option<Box<dyn DynGate>>>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Shape;
    use crate::weights::Weights;

    /// A truncation read only by FuseFSS's GeLU (through rows and a stack) or softmax opens
    /// only their bits; read by anything else, or in the SIGMA implementation, all `n`.
    #[test]
    fn truncations_open_the_bits_their_readers_read() {
        let (n, f) = (37, 12);
        let mut g = Graph::new(n, f, Shape::new(4, 4));
        let w = Weights::from_ring(&[1; 16], n);
        let y = g.push(Op::Linear { x: 0, w, b: None, out: 4 }, "linear").unwrap();
        let t1 = g.push(Op::Trunc { x: y, shift: f }, "truncation").unwrap();
        let top = g.push(Op::Rows { x: t1, start: 0, count: 2 }, "rows").unwrap();
        let bottom = g.push(Op::Rows { x: t1, start: 2, count: 2 }, "rows").unwrap();
        let both = g.push(Op::Concat { a: top, b: bottom }, "rows").unwrap();
        let a = g.push(Op::Gelu { x: both, tanh: false }, "gelu").unwrap();
        let t2 = g.push(Op::Trunc { x: a, shift: f }, "truncation").unwrap();
        let s = g.push(Op::Softmax { x: t2, causal: false }, "softmax").unwrap();
        let t3 = g.push(Op::Trunc { x: s, shift: f }, "truncation").unwrap();
        let t4 = g.push(Op::Trunc { x: t3, shift: f }, "truncation").unwrap();
        g.output = g.push(Op::Add { a: t4, b: t2 }, "residual").unwrap();
        let fuse = read_bits(&g, Impl::Fusefss);
        assert_eq!([fuse[t1], fuse[top], fuse[both]], [n - f; 3]);
        // Read by the softmax and by an addition: all bits.
        assert_eq!([fuse[t2], fuse[t3], fuse[t4]], [n; 3]);
        assert!(read_bits(&g, Impl::Sigma).iter().skip(1).all(|&b| b == n));
        // Read by the softmax alone: its bits.
        g.output = s;
        g.nodes.truncate(s);
        let fuse = read_bits(&g, Impl::Fusefss);
        assert_eq!(fuse[t2], n - f + 1);
    }
}
