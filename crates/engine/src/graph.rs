//! Tensor programs: a model as a straight-line list of layers over fixed-point tensors.
//!
//! Value 0 is the client's input; node `i` produces value `i + 1`. Every value is a
//! row-major `rows × cols` tensor of ring elements in `Z_{2^n}` at a known fixed-point scale.
//! Local nodes (linear maps with public weights, additions, gathers) cost no interaction;
//! gate nodes run a masked-wire gate over the whole tensor, so that everything a layer
//! computes in parallel (every head, every element) shares its rounds.

use std::sync::Arc;

use thiserror::Error;

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
        w: Arc<[u64]>,
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
    /// GeLU of a scale-`f` value `x` with `|x| < 2^{n−f−2}`, as a truncation with slack
    /// leaves it (erf form, or tanh form): FuseFSS reads it with slack
    /// (`OperatorSpec::slack`), SIGMA on `n − f` bits.
    Gelu {
        /// Input.
        x: ValueId,
        /// The tanh approximation (GPT-2's `gelu_new`).
        tanh: bool,
    },
}

impl Op {
    /// The values the node reads.
    pub fn inputs(&self) -> Vec<ValueId> {
        match *self {
            Op::Add { a, b } | Op::MatMul { a, b, .. } => vec![a, b],
            Op::Linear { x, .. }
            | Op::Gather { x, .. }
            | Op::SumRows { x }
            | Op::Scale { x, .. }
            | Op::Trunc { x, .. }
            | Op::Softmax { x, .. }
            | Op::LayerNorm { x, .. }
            | Op::Gelu { x, .. } => vec![x],
        }
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
        Graph { n, f, input, nodes: vec![], output: 0 }
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
            Op::Gelu { x, .. } => sh(*x),
        };
        self.nodes.push(Node { op, shape, label });
        self.output = i + 1;
        Ok(i + 1)
    }

    /// The gate nodes' count.
    pub fn gates(&self) -> usize {
        self.nodes.iter().filter(|n| n.op.is_gate()).count()
    }
}
