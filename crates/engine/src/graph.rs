//! Tensor programs: a model as a straight-line list of layers over fixed-point tensors.
//!
//! Value 0 is the client's input; node `i` produces value `i + 1`. Every value is a
//! row-major `rows × cols` tensor of ring elements in `Z_{2^n}` at a known fixed-point scale.
//! Local nodes (linear maps with public weights, additions, gathers) cost no interaction;
//! gate nodes run a masked-wire gate over the whole tensor, so that everything a layer
//! computes in parallel (every head, every element) shares its rounds.

use std::sync::Arc;

use thiserror::Error;

use crate::weights::Weights;

/// Index of a value: 0 is the input, `i + 1` the output of node `i`.
pub type ValueId = usize;

/// A row-major matrix shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
}

impl Shape {
    /// `rows × cols`.
    pub fn new(rows: usize, cols: usize) -> Shape {
        Shape { rows, cols }
    }

    /// Elements.
    pub fn len(self) -> usize {
        self.rows * self.cols
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// A layer.
#[derive(Clone, Debug)]
pub enum Op {
    /// `x·W + b`: `W` is `cols(x) × out` at scale `f`, `b` (`out` words) at scale `2f`; the
    /// output is at scale `2f` (a [`Op::Trunc`] usually follows).
    Linear {
        /// Input.
        x: ValueId,
        /// Weights, row-major `in × out`.
        w: Weights,
        /// Bias, if any.
        b: Option<Arc<[u64]>>,
        /// Output columns.
        out: usize,
    },
    /// `a + b` (same shape).
    Add {
        /// Left operand.
        a: ValueId,
        /// Right operand.
        b: ValueId,
    },
    /// `out[i] = x[index[i]]`: splitting heads, transposing, slicing.
    Gather {
        /// Input.
        x: ValueId,
        /// Source element of each output element.
        index: Arc<[u32]>,
        /// Output shape.
        shape: Shape,
    },
    /// Sum over rows: a `1 × cols` tensor.
    SumRows {
        /// Input.
        x: ValueId,
    },
    /// `c·x` for a public constant.
    Scale {
        /// Input.
        x: ValueId,
        /// The constant.
        c: u64,
    },
    /// `⌊x / 2^shift⌋` for `|x| < 2^{n−2}` (SIGMA's truncation with slack, both
    /// implementations).
    Trunc {
        /// Input.
        x: ValueId,
        /// Shift.
        shift: u32,
    },
    /// `count` independent products `A_i·B_i` of masked `m × k` and `k × n` matrices, stacked:
    /// `a` is `count·m × k`, `b` is `count·k × n`, the output `count·m × n`.
    MatMul {
        /// Stacked left operands.
        a: ValueId,
        /// Stacked right operands.
        b: ValueId,
        /// Products.
        count: usize,
        /// Rows of each left operand.
        m: usize,
        /// Inner dimension.
        k: usize,
        /// Columns of each right operand.
        n: usize,
    },
    /// Row-wise softmax of a scale-`f` tensor `x` with `|x| < 2^{n−f−2}`, as a truncation
    /// with slack leaves it (SIGMA's gate needs only that `x` fit `n − f` bits); with
    /// `causal`, row `i` sees columns `0..=(i mod cols)` and the others are 0.
    Softmax {
        /// Input.
        x: ValueId,
        /// Causal mask.
        causal: bool,
    },
    /// Row-wise LayerNorm with public gain (scale `f`) and bias (scale `2f`).
    LayerNorm {
        /// Input.
        x: ValueId,
        /// Gain, `cols` words.
        gamma: Arc<[u64]>,
        /// Bias, `cols` words.
        beta: Arc<[u64]>,
    },
    /// A value carried over from the previous program of a session (a KV cache): the
    /// servers keep its masked value, the dealer its mask; slot `slot` of the previous
    /// program's [`Graph::carry`].
    Carried {
        /// Which carried value.
        slot: usize,
        /// Its shape.
        shape: Shape,
    },
    /// The rows of `a`, then the rows of `b` (same columns).
    Concat {
        /// Upper rows.
        a: ValueId,
        /// Lower rows.
        b: ValueId,
    },
    /// `x ⊙ c` with a public tensor `c` of the same shape at scale `f`: the output is at
    /// scale `2f` (rotary position embeddings).
    MulPublic {
        /// Input.
        x: ValueId,
        /// The public factors.
        c: Arc<[u64]>,
    },
    /// `a ⊙ b` of two masked tensors of one shape (a Beaver product): scale `2f` from two
    /// scale-`f` inputs (the gated MLP).
    Mul {
        /// Left operand.
        a: ValueId,
        /// Right operand.
        b: ValueId,
    },
    /// SiLU `x·σ(x)` of a scale-`f` value with `|x| < 2^{n−f−2}` (as a truncation with
    /// slack leaves it).
    Silu {
        /// Input.
        x: ValueId,
    },
    /// Row-wise RMSNorm `x / √(mean(x²) + ε) · γ` with public gain (scale `f`).
    RmsNorm {
        /// Input.
        x: ValueId,
        /// Gain, `cols` words.
        gamma: Arc<[u64]>,
    },
    /// GeLU of a scale-`f` value `x` with `|x| < 2^{n−f−2}`, as a truncation with slack
    /// leaves it (erf form, or tanh form): FuseFSS reads it with slack
    /// (`OperatorSpec::slack`), SIGMA on `n − f` bits.
    Gelu {
        /// Input.
        x: ValueId,
        /// The tanh approximation (GPT-2's `gelu_new`).
        tanh: bool,
    },
    /// A pre-norm block's seam: `x = h + ⌊y / 2^shift⌋` (`y` a block's output at scale
    /// `2f`, `|y| < 2^{n−2}`) and its RMSNorm, stacked: the output is `2·rows × cols`, the
    /// normalised rows over the rows of `x` (select them with [`Op::Rows`]). FuseFSS defers
    /// the truncation's carry into the sum of squares (`gates::residual`); SIGMA runs its
    /// truncation and RMSNorm gates.
    ResidualRmsNorm {
        /// The residual stream.
        h: ValueId,
        /// The block output (before its truncation).
        y: ValueId,
        /// The truncation's shift.
        shift: u32,
        /// Gain, `cols` words.
        gamma: Arc<[u64]>,
    },
    /// Rows `start .. start + count` of `x` (local; [`Graph::chunked`]).
    Rows {
        /// Input.
        x: ValueId,
        /// First row.
        start: usize,
        /// Rows.
        count: usize,
    },
}

impl Op {
    /// The values the node reads.
    pub fn inputs(&self) -> Vec<ValueId> {
        match *self {
            Op::Carried { .. } => vec![],
            Op::Add { a, b } | Op::MatMul { a, b, .. } | Op::Concat { a, b } | Op::Mul { a, b } => vec![a, b],
            Op::ResidualRmsNorm { h, y, .. } => vec![h, y],
            Op::Linear { x, .. }
            | Op::Gather { x, .. }
            | Op::SumRows { x }
            | Op::Scale { x, .. }
            | Op::Trunc { x, .. }
            | Op::Softmax { x, .. }
            | Op::LayerNorm { x, .. }
            | Op::MulPublic { x, .. }
            | Op::Silu { x }
            | Op::RmsNorm { x, .. }
            | Op::Gelu { x, .. }
            | Op::Rows { x, .. } => vec![x],
        }
    }

    /// The same layer reading `f(v)` for each value `v` it reads.
    pub fn map_inputs(&self, mut f: impl FnMut(ValueId) -> ValueId) -> Op {
        let mut op = self.clone();
        match &mut op {
            Op::Carried { .. } => {}
            Op::Add { a, b } | Op::MatMul { a, b, .. } | Op::Concat { a, b } | Op::Mul { a, b } => {
                (*a, *b) = (f(*a), f(*b));
            }
            Op::ResidualRmsNorm { h, y, .. } => (*h, *y) = (f(*h), f(*y)),
            Op::Linear { x, .. }
            | Op::Gather { x, .. }
            | Op::SumRows { x }
            | Op::Scale { x, .. }
            | Op::Trunc { x, .. }
            | Op::Softmax { x, .. }
            | Op::LayerNorm { x, .. }
            | Op::MulPublic { x, .. }
            | Op::Silu { x }
            | Op::RmsNorm { x, .. }
            | Op::Gelu { x, .. }
            | Op::Rows { x, .. } => *x = f(*x),
        }
        op
    }

    /// Whether the gate works row by row (element by element, or over each row alone), so
    /// that it can run on a range of rows at a time ([`Graph::chunked`]).
    pub fn is_row_wise(&self) -> bool {
        matches!(
            self,
            Op::Trunc { .. }
                | Op::Softmax { .. }
                | Op::LayerNorm { .. }
                | Op::Gelu { .. }
                | Op::Mul { .. }
                | Op::Silu { .. }
                | Op::RmsNorm { .. }
        )
    }

    /// Whether the node is a gate (interactive) rather than a local map.
    pub fn is_gate(&self) -> bool {
        matches!(
            self,
            Op::Trunc { .. }
                | Op::MatMul { .. }
                | Op::Softmax { .. }
                | Op::LayerNorm { .. }
                | Op::Gelu { .. }
                | Op::Mul { .. }
                | Op::Silu { .. }
                | Op::RmsNorm { .. }
                | Op::ResidualRmsNorm { .. }
        )
    }
}

/// A node: its layer, output shape and the layer type its cost is charged to.
#[derive(Clone, Debug)]
pub struct Node {
    /// The layer.
    pub op: Op,
    /// Output shape.
    pub shape: Shape,
    /// Layer type for cost accounting (`"linear"`, `"softmax"`, …).
    pub label: &'static str,
}

/// A tensor program.
#[derive(Clone, Debug)]
pub struct Graph {
    /// Ring width.
    pub n: u32,
    /// Fixed-point scale.
    pub f: u32,
    /// The input's shape (at scale `f`).
    pub input: Shape,
    /// The nodes in order.
    pub nodes: Vec<Node>,
    /// The output value.
    pub output: ValueId,
    /// Values the servers keep (masked) for the next program of a session, in slot order.
    pub carry: Vec<ValueId>,
}

/// A program that does not type-check.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("node {node}: {msg}")]
pub struct GraphError {
    /// The offending node.
    pub node: usize,
    /// What is wrong.
    pub msg: String,
}

impl Graph {
    /// An empty program over an input of `input` shape.
    pub fn new(n: u32, f: u32, input: Shape) -> Graph {
        Graph { n, f, input, nodes: vec![], output: 0, carry: vec![] }
    }

    /// Shape of value `v`.
    pub fn shape(&self, v: ValueId) -> Shape {
        if v == 0 { self.input } else { self.nodes[v - 1].shape }
    }

    /// Append a node, check it and return its value; the output is the last node added.
    ///
    /// # Errors
    /// [`GraphError`] if an input does not exist yet or shapes do not fit.
    pub fn push(&mut self, op: Op, label: &'static str) -> Result<ValueId, GraphError> {
        let i = self.nodes.len();
        let bad = |msg: String| Err(GraphError { node: i, msg });
        for v in op.inputs() {
            if v > i {
                return bad(format!("reads value {v}, which does not exist yet"));
            }
        }
        let sh = |v| self.shape(v);
        let shape = match &op {
            Op::Linear { x, w, b, out } => {
                let s = sh(*x);
                if w.len() != s.cols * out || b.as_ref().is_some_and(|b| b.len() != *out) {
                    return bad(format!("weights {} / bias for {} × {out}", w.len(), s.cols));
                }
                Shape::new(s.rows, *out)
            }
            Op::Add { a, b } => {
                if sh(*a) != sh(*b) {
                    return bad(format!("adds {:?} and {:?}", sh(*a), sh(*b)));
                }
                sh(*a)
            }
            Op::Gather { x, index, shape } => {
                let s = sh(*x);
                if index.len() != shape.len() || index.iter().any(|&j| j as usize >= s.len()) {
                    return bad("gather index out of range or of the wrong length".into());
                }
                *shape
            }
            Op::SumRows { x } => Shape::new(1, sh(*x).cols),
            Op::Scale { x, .. } => sh(*x),
            Op::Trunc { x, shift } => {
                if *shift == 0 || *shift + 2 >= self.n {
                    return bad(format!("truncation by {shift} in {} bits", self.n));
                }
                sh(*x)
            }
            Op::MatMul { a, b, count, m, k, n } => {
                if sh(*a).len() != count * m * k || sh(*b).len() != count * k * n {
                    return bad(format!(
                        "{count} products of {m}×{k} by {k}×{n} from {:?} and {:?}",
                        sh(*a),
                        sh(*b)
                    ));
                }
                Shape::new(count * m, *n)
            }
            Op::Softmax { x, causal } => {
                let s = sh(*x);
                if *causal && !s.rows.is_multiple_of(s.cols) {
                    return bad(format!("causal softmax over {s:?}"));
                }
                s
            }
            Op::LayerNorm { x, gamma, beta } => {
                let s = sh(*x);
                if gamma.len() != s.cols || beta.len() != s.cols {
                    return bad(format!("norm parameters for {} columns", s.cols));
                }
                s
            }
            Op::Gelu { x, .. } | Op::Silu { x } => sh(*x),
            Op::Carried { shape, .. } => *shape,
            Op::Concat { a, b } => {
                if sh(*a).cols != sh(*b).cols {
                    return bad(format!("stacks {:?} on {:?}", sh(*a), sh(*b)));
                }
                Shape::new(sh(*a).rows + sh(*b).rows, sh(*a).cols)
            }
            Op::MulPublic { x, c } => {
                if c.len() != sh(*x).len() {
                    return bad(format!("{} public factors for {:?}", c.len(), sh(*x)));
                }
                sh(*x)
            }
            Op::Mul { a, b } => {
                if sh(*a) != sh(*b) {
                    return bad(format!("multiplies {:?} and {:?}", sh(*a), sh(*b)));
                }
                sh(*a)
            }
            Op::RmsNorm { x, gamma } => {
                if gamma.len() != sh(*x).cols {
                    return bad(format!("norm gain for {} columns", sh(*x).cols));
                }
                sh(*x)
            }
            Op::ResidualRmsNorm { h, y, shift, gamma } => {
                let s = sh(*h);
                if s != sh(*y) || gamma.len() != s.cols || *shift == 0 || 2 * *shift > self.n {
                    return bad(format!(
                        "residual {s:?} + {:?} >> {shift} and a gain for {} columns",
                        sh(*y),
                        gamma.len()
                    ));
                }
                Shape::new(2 * s.rows, s.cols)
            }
            Op::Rows { x, start, count } => {
                if *count == 0 || start.checked_add(*count).is_none_or(|end| end > sh(*x).rows) {
                    return bad(format!("rows {start}..+{count} of {:?}", sh(*x)));
                }
                Shape::new(*count, sh(*x).cols)
            }
        };
        self.nodes.push(Node { op, shape, label });
        self.output = i + 1;
        Ok(i + 1)
    }

    /// The shapes of the carried values a program reads, by slot (`None` for a slot it
    /// does not read).
    pub fn carried_in(&self) -> Vec<Option<Shape>> {
        let mut v: Vec<Option<Shape>> = vec![];
        for node in &self.nodes {
            if let Op::Carried { slot, shape } = node.op {
                if v.len() <= slot {
                    v.resize(slot + 1, None);
                }
                v[slot] = Some(shape);
            }
        }
        v
    }

    /// The gate nodes' count.
    pub fn gates(&self) -> usize {
        self.nodes.iter().filter(|n| n.op.is_gate()).count()
    }

    /// The same program with every row-wise gate node ([`Op::is_row_wise`]) of more than
    /// `max_elems` elements split into nodes over consecutive ranges of its rows, run one
    /// after another and stacked again. Each chunk's keys are dealt, handed over and spent
    /// alone, so that streamed dealing ([`crate::deal_into`] while the servers run) never
    /// holds a whole large gate's keys for both parties: BERT-base's softmax at 512 tokens
    /// is ~6 GB of key per party. The outputs are the same; each chunk adds its gate's
    /// rounds. A causal softmax is split at multiples of its columns (whole heads).
    pub fn chunked(&self, max_elems: usize) -> Graph {
        let mut g = Graph::new(self.n, self.f, self.input);
        g.nodes.reserve(self.nodes.len());
        // The new value of each old one.
        let mut new: Vec<ValueId> = Vec::with_capacity(self.nodes.len() + 1);
        new.push(0);
        for node in &self.nodes {
            let op = node.op.map_inputs(|v| new[v]);
            let (rows, cols) = (node.shape.rows, node.shape.cols.max(1));
            let mut per = (max_elems / cols).max(1);
            if let Op::Softmax { causal: true, .. } = op {
                per = (per / cols).max(1) * cols;
            }
            let v = if op.is_row_wise() && node.shape.len() > max_elems && per < rows {
                let mut acc: Option<ValueId> = None;
                for start in (0..rows).step_by(per) {
                    let count = per.min(rows - start);
                    let part = op.map_inputs(|x| {
                        g.push(Op::Rows { x, start, count }, node.label).expect("rows of a checked value")
                    });
                    let y = g.push(part, node.label).expect("a chunk of a checked node");
                    acc = Some(match acc {
                        None => y,
                        Some(a) => g.push(Op::Concat { a, b: y }, node.label).expect("stacked chunks"),
                    });
                }
                acc.expect("at least one chunk")
            } else {
                g.push(op, node.label).expect("a node of a checked program")
            };
            new.push(v);
        }
        g.output = new[self.output];
        g.carry = self.carry.iter().map(|&v| new[v]).collect();
        g
    }
}
