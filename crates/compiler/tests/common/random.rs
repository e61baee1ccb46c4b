//! Random valid specs from a tape of numbers: each choice reads the next number (0 once the
//! tape runs out) and 0 is always the simplest choice, so proptest, shrinking the tape
//! towards shorter and smaller, shrinks the spec too.

use compiler::spec::{Atom, BoolExpr, Node, OperatorSpec, Output, Phi, Piece, word};

/// The numbers the choices read.
pub struct Tape<'a> {
    v: &'a [u64],
    i: usize,
}

impl<'a> Tape<'a> {
    pub fn new(v: &'a [u64]) -> Tape<'a> {
        Tape { v, i: 0 }
    }

    /// A number below `bound` (0 for a bound of 0 or 1).
    pub fn below(&mut self, bound: u64) -> u64 {
        let x = self.v.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        if bound <= 1 { 0 } else { x % bound }
    }

    /// A number in `0..=max` (`max` may be `u64::MAX`).
    pub fn upto(&mut self, max: u64) -> u64 {
        match max.checked_add(1) {
            Some(b) => self.below(b),
            None => self.below(u64::MAX),
        }
    }

    fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }
}

/// What a random spec may use.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Input widths `1..=max_bits`, at least `min_bits`.
    pub min_bits: u32,
    pub max_bits: u32,
    /// At most this many intervals.
    pub max_pieces: usize,
    /// At most this many `Φ` nodes.
    pub max_nodes: usize,
}

/// Small widths, every input checkable.
pub const SMALL: Shape = Shape { min_bits: 1, max_bits: 10, max_pieces: 8, max_nodes: 24 };

/// Widths up to 24 bits.
pub const WIDE: Shape = Shape { min_bits: 11, max_bits: 24, max_pieces: 64, max_nodes: 24 };

/// Widths up to 64 bits.
pub const FULL: Shape = Shape { min_bits: 25, max_bits: 64, max_pieces: 64, max_nodes: 24 };

fn domain(n: u32) -> u64 {
    if n == 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// A value that fits `l` bits: small and signed half the time, else any `l`-bit word.
fn constant(t: &mut Tape, l: u32) -> i128 {
    if t.below(2) == 0 {
        let v = t.below(9) as i128 - 4;
        if v >= -(1i128 << (l - 1)) && v < 1i128 << l { v } else { word(v, l) as i128 }
    } else {
        t.upto(domain(l)) as i128
    }
}

fn atom(t: &mut Tape, n: u32) -> Atom {
    match t.below(4) {
        0 => Atom::Lt { beta: t.upto(domain(n)).saturating_add((t.below(2) == 1 && n < 64) as u64) },
        1 if n >= 2 => {
            let bits = 1 + t.below(n as u64 - 1) as u32;
            Atom::LtLow { bits, gamma: t.upto(1u64 << bits) }
        }
        2 => Atom::Msb,
        _ => Atom::MsbAdd { offset: t.upto(domain(n)) },
    }
}

fn formula(t: &mut Tape, atoms: usize, depth: u32) -> BoolExpr {
    let leaf = |t: &mut Tape| {
        if atoms > 0 && t.below(3) > 0 {
            BoolExpr::Atom(t.index(atoms))
        } else {
            BoolExpr::Const(t.below(2) == 1)
        }
    };
    if depth == 0 {
        return leaf(t);
    }
    match t.below(5) {
        0 => leaf(t),
        1 => BoolExpr::Not(Box::new(formula(t, atoms, depth - 1))),
        k => {
            let v: Vec<BoolExpr> = (0..1 + t.below(3)).map(|_| formula(t, atoms, depth - 1)).collect();
            match k {
                2 => BoolExpr::Xor(v),
                3 => BoolExpr::And(v),
                _ => BoolExpr::Or(v),
            }
        }
    }
}

fn boundaries(t: &mut Tape, n: u32, max_pieces: usize) -> Vec<u64> {
    let cuts = t.below(max_pieces as u64);
    let mut b: Vec<u64> = (0..cuts).map(|_| t.upto(domain(n))).collect();
    b.push(0);
    b.sort_unstable();
    b.dedup();
    b
}

/// A random valid spec.
pub fn spec(t: &mut Tape, shape: Shape) -> OperatorSpec {
    let n = shape.min_bits + t.below((shape.max_bits - shape.min_bits + 1) as u64) as u32;
    let l = match t.below(4) {
        0 => n,
        1 => 1 + t.below(24) as u32,
        2 => (n + 1 + t.below(12) as u32).min(64),
        _ => 64,
    };
    let signed = t.below(2) == 1;
    // A slack spec has no atoms and no formulas.
    let slack = signed && (3..64).contains(&n) && t.below(6) == 0;
    let boundaries = boundaries(t, n, shape.max_pieces);
    let (np, nc) = (t.below(3) as usize, t.below(3) as usize);
    let nb = if slack { 0 } else { t.below(3) as usize };
    let atoms: Vec<Atom> = if slack { vec![] } else { (0..t.below(7)).map(|_| atom(t, n)).collect() };
    let pieces = boundaries
        .iter()
        .map(|_| Piece {
            polys: (0..np).map(|_| (0..=t.below(5)).map(|_| constant(t, l)).collect()).collect(),
            consts: (0..nc).map(|_| constant(t, l)).collect(),
            bools: (0..nb).map(|_| formula(t, atoms.len(), 3)).collect(),
        })
        .collect();
    let kappa = (0..t.below(3)).map(|_| constant(t, l)).collect();
    let mut s = OperatorSpec {
        name: "random".into(),
        in_bits: n,
        out_bits: l,
        signed,
        slack,
        scale: None,
        out_scale: None,
        boundaries,
        pieces,
        atoms,
        kappa,
        phi: None,
    };
    if t.below(5) > 0 {
        s.phi = Some(phi(t, &s, shape.max_nodes));
    }
    if let Err(e) = s.validate() {
        panic!("the generator made an invalid spec ({e}): {}", s.to_json());
    }
    s
}

/// Earlier nodes by kind while `Φ` is generated.
#[derive(Default)]
struct Made {
    arith: Vec<usize>,
    bools: Vec<usize>,
}

impl Made {
    fn a(&self, t: &mut Tape) -> Option<usize> {
        (!self.arith.is_empty()).then(|| self.arith[t.index(self.arith.len())])
    }

    fn b(&self, t: &mut Tape) -> Option<usize> {
        (!self.bools.is_empty()).then(|| self.bools[t.index(self.bools.len())])
    }
}

/// A `Φ` of up to `max_nodes` nodes that uses every node type; where a type's operands do not
/// exist yet, a leaf takes its place.
fn phi(t: &mut Tape, s: &OperatorSpec, max_nodes: usize) -> Phi {
    let (l, n) = (s.out_bits, s.in_bits);
    let mut made = Made::default();
    let mut nodes = vec![];
    for i in 0..1 + t.below(max_nodes as u64) as usize {
        let x = Node::X;
        let bit = Node::Bit { value: t.below(2) == 1 };
        let node = match t.below(19) {
            0 => Node::Const { value: constant(t, l) },
            2 if s.poly_count() > 0 => Node::Poly { index: t.index(s.poly_count()) },
            3 if s.const_count() > 0 => Node::Aux { index: t.index(s.const_count()) },
            4 if !s.kappa.is_empty() => Node::Kappa { index: t.index(s.kappa.len()) },
            k @ 5..=7 => match (made.a(t), made.a(t)) {
                (Some(a), Some(b)) => {
                    [Node::Add { a, b }, Node::Sub { a, b }, Node::Mul { a, b }][k as usize - 5].clone()
                }
                _ => x,
            },
            8 => match made.a(t) {
                Some(a) => Node::Scale { a, by: constant(t, l) },
                None => x,
            },
            9 => made.b(t).map_or(x, |a| Node::B2a { a }),
            10 => match (made.b(t), made.a(t), made.a(t)) {
                (Some(bit), Some(a), Some(b)) => Node::Select { bit, a, b },
                _ => x,
            },
            11 if n >= 2 && !s.slack => Node::Shr { bits: 1 + t.below(n as u64 - 1) as u32 },
            12 if s.bool_count() > 0 => Node::Bool { index: t.index(s.bool_count()) },
            13 if !s.atoms.is_empty() => Node::Atom { index: t.index(s.atoms.len()) },
            15 => made.b(t).map_or(bit, |a| Node::Not { a }),
            k @ 16..=18 => match (made.b(t), made.b(t)) {
                (Some(a), Some(b)) => {
                    [Node::Xor { a, b }, Node::And { a, b }, Node::Or { a, b }][k as usize - 16].clone()
                }
                _ => bit,
            },
            12..=14 => bit,
            _ => x,
        };
        match node.kind() {
            compiler::spec::Kind::Arith => made.arith.push(i),
            compiler::spec::Kind::Bool => made.bools.push(i),
        }
        nodes.push(node);
    }
    let outputs = (0..1 + t.below(3))
        .map(|_| {
            let k = t.index(nodes.len());
            match nodes[k].kind() {
                compiler::spec::Kind::Arith => Output::Arith(k),
                compiler::spec::Kind::Bool => Output::Bool(k),
            }
        })
        .collect();
    Phi { nodes, outputs }
}
