//! Compiled gates against their specs' references: every input under edge masks at small
//! widths, for every backend the spec allows.

mod common;

use std::sync::Arc;

use common::{all_options, exhaustive, rng};
use compiler::program::{CmpBackend, CompileOptions, LookupBackend};
use compiler::spec::{Atom, BoolExpr, Node, OperatorSpec, Output, Phi, Piece};
use compiler::{CompiledGate, compile};
use fss::rng::Rng;

/// Every backend combination that compiles `spec`; returns how many there were.
fn all_backends(spec: &OperatorSpec) -> usize {
    let options = all_options(spec);
    for (i, &o) in options.iter().enumerate() {
        exhaustive(spec, o, i as u64 + 1);
    }
    exhaustive(spec, CompileOptions::default(), 99);
    options.len()
}
fn pieces(polys: &[&[i128]]) -> Vec<Piece> {
    polys.iter().map(|c| Piece { polys: vec![c.to_vec()], ..Piece::default() }).collect()
}

#[test]
fn relu_same_width() {
    // Step bits and DCF, each with both comparison keyings, each whole or split at the
    // boundaries' alignment (2^5); step bits also with the split in runs.
    assert_eq!(
        all_backends(&OperatorSpec::of_pieces("relu", 6, 6, true, vec![0, 32], pieces(&[&[0, 1], &[0]]))),
        10
    );
}

#[test]
fn relu_lifted_to_a_wider_ring() {
    all_backends(&OperatorSpec::of_pieces("relu-lift", 6, 11, true, vec![0, 32], pieces(&[&[0, 1], &[0]])));
    all_backends(&OperatorSpec::of_pieces("id-unsigned-lift", 5, 9, false, vec![0], pieces(&[&[3, 1]])));
}

#[test]
fn polynomials_of_degree_two() {
    let s = OperatorSpec::of_pieces(
        "quad",
        6,
        8,
        true,
        vec![0, 7, 20, 40, 50],
        pieces(&[&[1, 2, 3], &[-5, 0, 1], &[9], &[0, -1], &[4, 4, 4]]),
    );
    all_backends(&s);
}

#[test]
fn step_functions_use_tables() {
    let vals: Vec<i128> = (0..9).map(|i| (i * i * 7 % 23) - 11).collect();
    let b: Vec<u64> = vec![0, 3, 9, 17, 22, 31, 40, 41, 60];
    let p: Vec<Piece> = vals
        .iter()
        .map(|&v| Piece { polys: vec![vec![v]], consts: vec![v * 3], ..Piece::default() })
        .collect();
    assert_eq!(all_backends(&OperatorSpec::of_pieces("steps", 6, 10, false, b, p)), 6);
    // Rows of 2^3 covering the whole domain: a reduced view applies, and every backend
    // but the DCF also runs split at 2^3 (step bits also in runs).
    let b: Vec<u64> = (0..8).map(|i| i * 8).collect();
    let p: Vec<Piece> =
        (0..8).map(|i| Piece { polys: vec![vec![(i * 37 % 50) as i128]], ..Piece::default() }).collect();
    assert_eq!(all_backends(&OperatorSpec::of_pieces("rows", 6, 9, false, b, p)), 16);
}

#[test]
fn boolean_outputs_and_atoms() {
    let mut s = OperatorSpec::of_pieces("bools", 6, 6, false, vec![0, 10, 33], pieces(&[&[1], &[2], &[3]]));
    s.atoms =
        vec![Atom::Lt { beta: 21 }, Atom::LtLow { bits: 3, gamma: 5 }, Atom::Msb, Atom::MsbAdd { offset: 7 }];
    s.pieces[0].bools = vec![BoolExpr::Const(true), BoolExpr::Atom(1)];
    s.pieces[1].bools =
        vec![BoolExpr::Const(false), BoolExpr::And(vec![BoolExpr::Atom(0), BoolExpr::Atom(1)])];
    s.pieces[2].bools = vec![
        BoolExpr::Const(true),
        BoolExpr::Or(vec![BoolExpr::Atom(2), BoolExpr::Not(Box::new(BoolExpr::Atom(3)))]),
    ];
    all_backends(&s);
}

fn phi(nodes: Vec<Node>, outputs: Vec<Output>) -> Option<Phi> {
    Some(Phi { nodes, outputs })
}

#[test]
fn exact_shifts() {
    for (n, f) in [(8u32, 3u32), (7, 1), (9, 5)] {
        for signed in [true, false] {
            let mut s = OperatorSpec::of_pieces("shr", n, n, signed, vec![0], vec![Piece::default()]);
            s.phi = phi(vec![Node::Shr { bits: f }], vec![Output::Arith(0)]);
            all_backends(&s);
            // With the sign (ARS + sign from one opening).
            s.atoms = vec![Atom::Msb];
            s.phi = phi(
                vec![Node::Shr { bits: f }, Node::Atom { index: 0 }, Node::Not { a: 1 }],
                vec![Output::Arith(0), Output::Bool(2)],
            );
            all_backends(&s);
        }
    }
    // Truncate-reduce: an unsigned shift into a narrower ring.
    let mut s = OperatorSpec::of_pieces("tr", 9, 5, false, vec![0], vec![Piece::default()]);
    s.phi = phi(vec![Node::Shr { bits: 4 }], vec![Output::Arith(0)]);
    all_backends(&s);
}

#[test]
fn phi_products_selects_and_kappa() {
    let mut s = OperatorSpec::of_pieces(
        "phi",
        6,
        8,
        true,
        vec![0, 16, 32, 48],
        pieces(&[&[3, 1], &[-2, 2], &[0, -1], &[5]]),
    );
    s.kappa = vec![77];
    s.atoms = vec![Atom::Lt { beta: 40 }, Atom::Msb];
    s.pieces.iter_mut().for_each(|p| p.consts = vec![7]);
    s.phi = phi(
        vec![
            Node::Poly { index: 0 },             // 0
            Node::X,                             // 1
            Node::Mul { a: 0, b: 1 },            // 2: P·X
            Node::Atom { index: 0 },             // 3
            Node::Kappa { index: 0 },            // 4
            Node::Select { bit: 3, a: 2, b: 4 }, // 5
            Node::Aux { index: 0 },              // 6
            Node::Add { a: 5, b: 6 },            // 7
            Node::Atom { index: 1 },             // 8
            Node::And { a: 3, b: 8 },            // 9
            Node::B2a { a: 9 },                  // 10
            Node::Scale { a: 10, by: -3 },       // 11
            Node::Sub { a: 7, b: 11 },           // 12
            Node::Mul { a: 0, b: 0 },            // 13: P²
        ],
        vec![Output::Arith(12), Output::Bool(9), Output::Arith(13)],
    );
    all_backends(&s);
}

#[test]
fn key_shapes_do_not_depend_on_the_mask() {
    let mut s = OperatorSpec::of_pieces(
        "shape",
        8,
        8,
        true,
        vec![0, 5, 128, 200],
        pieces(&[&[1, 1], &[2], &[0, 3], &[4]]),
    );
    s.atoms = vec![Atom::Lt { beta: 9 }];
    s.pieces.iter_mut().for_each(|p| p.bools = vec![BoolExpr::Atom(0)]);
    let mut d = s.clone();
    d.atoms.clear();
    d.pieces.iter_mut().for_each(|p| p.polys = vec![vec![p.polys[0][0] * 5]]);
    d.pieces.iter_mut().enumerate().for_each(|(i, p)| p.bools = vec![BoolExpr::Const(i % 2 == 0)]);
    for (s, options) in [
        (&s, CompileOptions::default()),
        (&d, CompileOptions { lookup: Some(LookupBackend::Dcf), ..CompileOptions::default() }),
        (&d, CompileOptions { lookup: Some(LookupBackend::IndexLut), ..CompileOptions::default() }),
        (&s, CompileOptions { cmp: CmpBackend::PerThreshold, ..CompileOptions::default() }),
    ] {
        let program = Arc::new(compile(s, options).unwrap());
        let gate = CompiledGate::new(program.clone(), 1);
        let mut r = rng(5);
        let sizes: Vec<usize> = [0u64, 1, 127, 128, 251, 255, 56, 200]
            .iter()
            .map(|&m| {
                let (k0, k1) = gate.deal(&[m], &[r.next_u64() & 255, r.next_u64() & 1], &mut r).unwrap();
                use gates::GateKey;
                assert_eq!(k0.to_bytes().len(), k1.to_bytes().len());
                k0.to_bytes().len()
            })
            .collect();
        assert!(sizes.windows(2).all(|w| w[0] == w[1]), "{options:?}: {sizes:?}");
        assert_eq!(sizes[0] as u64, program.cost().key_bits.div_ceil(8));
    }
}

/// FuseFSS's softmax is exact with every level of its max tree in one round (at most
/// `ONE_ROUND_MAX_TREE_MAX` entries) and with the `TWO_ROUND_MAX_LEVELS` widest levels in
/// two (more): rounds fewer, key larger, rows that sum to about one.
#[test]
fn composite_softmax_small_and_large() {
    use compiler::composite::{ONE_ROUND_MAX_TREE_MAX, TWO_ROUND_MAX_LEVELS as TWO, softmax};
    use fss::ring::Ring;
    let mut r = rng(41);
    let (bits, f) = (37u32, 12u32);
    let ring = Ring::new(bits).unwrap();
    // (A causal softmax's rows are whole heads: a multiple of its columns.)
    for (causal, shapes) in [(false, [(9, 64), (24, 64)]), (true, [(32, 32), (64, 32)])] {
        let mut reports = vec![];
        for (rows, cols) in shapes {
            let large = rows * cols > ONE_ROUND_MAX_TREE_MAX;
            let g = softmax(bits, bits - f, f, rows, cols, causal).unwrap();
            let levels = cols.trailing_zeros() as usize;
            assert_eq!(g.max_dcf_levels, if large { levels - TWO } else { levels });
            let x: Vec<u64> = (0..rows * cols)
                .map(|_| ring.from_signed((r.next_u64() % (20 << f)) as i64 - (10 << f)))
                .collect();
            let rep = gates::harness::run(&g, &[&x[..]], &mut r).unwrap();
            assert_eq!(rep.first_mismatch(), None, "{rows}x{cols} causal {causal}");
            for i in 0..rows {
                let s: f64 = (0..cols).map(|j| ring.to_signed(rep.outputs[i * cols + j]) as f64).sum::<f64>()
                    / (1u64 << f) as f64;
                assert!((s - 1.0).abs() < 0.05, "row {i} sums to {s}");
            }
            reports.push((rep.stats[0].rounds, rep.key_bits[0] / (rows * cols) as u64));
        }
        let ((small_rounds, small_key), (large_rounds, large_key)) = (reports[0], reports[1]);
        assert_eq!(small_rounds + TWO as u64, large_rounds, "causal {causal}");
        assert!(small_key > large_key, "causal {causal}: {small_key} vs {large_key} bits per entry");
    }
}

/// The FuseFSS softmax keeps `e^{−x}`, the row sums, `1/S` and their product in
/// `Z_{2^{2f+3}}`: its results equal those of the same composite in the full ring, on rows
/// with one dominant entry (`e = 2^f` alone), all-equal rows (the largest row sums), mixed
/// rows and causal rows, and the secure run equals its reference.
#[test]
fn composite_softmax_in_a_narrow_ring_changes_no_value() {
    use compiler::composite::{softmax, softmax_tables};
    use fss::ring::Ring;
    let mut r = rng(43);
    for (bits, f) in [(37u32, 12u32), (50, 12), (30, 9)] {
        let ring = Ring::new(bits).unwrap();
        for (rows, cols, causal) in [(8, 64, false), (64, 64, true), (6, 100, false)] {
            let narrow = softmax(bits, bits - f, f, rows, cols, causal).unwrap();
            let extra = compiler::composite::NEXP_INTERP_EXTRA_BITS;
            assert_eq!(narrow.prob_bits, (2 * f + 3 + extra).min(bits));
            // The same composite with every inner value a full ring word.
            let cols2 = (cols as u64).next_power_of_two();
            let mut wide = narrow.clone();
            wide.prob_bits = bits;
            (wide.exp, wide.recip) = softmax_tables(bits, bits - f, f, cols2, bits).unwrap();
            let bound = 1i64 << (bits - f - 3);
            let x: Vec<u64> = (0..rows * cols)
                .map(|k| {
                    let (i, j) = (k / cols, k % cols);
                    let v = match i % 4 {
                        0 => {
                            if j == i % cols {
                                bound - 1
                            } else {
                                -bound
                            }
                        }
                        1 => 5 << f,
                        2 => (r.next_u64() % (40 << f)) as i64 - (20 << f),
                        _ => (r.next_u64() % (2 * bound as u64)) as i64 - bound,
                    };
                    ring.from_signed(v)
                })
                .collect();
            assert_eq!(narrow.plain(&x), wide.plain(&x), "n = {bits}, {rows}x{cols} causal {causal}");
            let rep = gates::harness::run(&narrow, &[&x[..]], &mut r).unwrap();
            assert_eq!(rep.first_mismatch(), None, "n = {bits}, {rows}x{cols} causal {causal}");
        }
    }
}

/// The softmax with `e^{−x}` interpolated in rows (`SoftmaxExp::Interp`: 5 more fractional
/// bits, `1/S` reading its sum there, a final truncation by `f + 5`): the secure run equals
/// its reference, and the reference is closer to the f64 softmax than the models' rows.
#[test]
fn softmax_with_interpolated_exp() {
    use compiler::composite::{SoftmaxExp, softmax_with};
    use fss::ring::Ring;
    let mut r = rng(47);
    let (bits, f) = (37u32, 12u32);
    let ring = Ring::new(bits).unwrap();
    for (rows, cols, causal) in [(8, 64, false), (64, 64, true), (6, 100, false)] {
        let x: Vec<u64> = (0..rows * cols)
            .map(|_| ring.from_signed((r.next_u64() % (16 << f)) as i64 - (8 << f)))
            .collect();
        let worst =
            |g: &gates::softmax::Softmax<compiler::composite::Compiled, compiler::composite::Compiled>| {
                let y = g.plain(&x);
                let mut w = 0f64;
                for i in 0..rows {
                    let n = if causal { i % cols + 1 } else { cols };
                    let v: Vec<f64> =
                        (0..n).map(|j| ring.to_signed(x[i * cols + j]) as f64 / 4096.0).collect();
                    let m = v.iter().copied().fold(f64::MIN, f64::max);
                    let z: f64 = v.iter().map(|a| (a - m).exp()).sum();
                    for j in 0..n {
                        let got = ring.to_signed(y[i * cols + j]) as f64 / 4096.0;
                        w = w.max((got - (v[j] - m).exp() / z).abs());
                    }
                }
                w
            };
        let lines = softmax_with(bits, bits - f, f, rows, cols, causal, SoftmaxExp::Interp).unwrap();
        let steps = softmax_with(bits, bits - f, f, rows, cols, causal, SoftmaxExp::Rows).unwrap();
        assert!(worst(&lines) < worst(&steps), "{rows}x{cols}: {} against {}", worst(&lines), worst(&steps));
        let rep = gates::harness::run(&lines, &[&x[..]], &mut r).unwrap();
        assert_eq!(rep.first_mismatch(), None, "{rows}x{cols} causal {causal}");
    }
}

/// A table in rows of `2^f` interpolated linearly (`Node::Interp`): values `v` and slopes
/// `s` per row, one interval per row but where a flat row repeats the one before it.
fn interp_table(name: &str, n: u32, f: u32, l: u32, v: &[i128], s: &[i128]) -> OperatorSpec {
    let (mut starts, mut p): (Vec<u64>, Vec<Piece>) = (vec![], vec![]);
    for k in 0..v.len() {
        let piece = Piece { consts: vec![v[k], s[k]], ..Piece::default() };
        if s[k] == 0 && p.last() == Some(&piece) {
            continue;
        }
        starts.push((k as u64) << f);
        p.push(piece);
    }
    let mut spec = OperatorSpec::of_pieces(name, n, l, false, starts, p);
    spec.phi = phi(vec![Node::Interp { value: 0, slope: 1, bits: f }], vec![Output::Arith(0)]);
    spec
}

/// Values and slopes of rows that join up, cyclically: `v_{k+1} = v_k − 2^f·s_k`, the last
/// slope closing the loop; a run of flat rows in the middle.
fn joined_rows(rows: usize, f: u32, seed: u64) -> (Vec<i128>, Vec<i128>) {
    let mut r = rng(seed);
    let mut s: Vec<i128> = (0..rows - 1)
        .map(|k| if (rows / 3..rows / 2).contains(&k) { 0 } else { (r.next_u64() % 7) as i128 - 3 })
        .collect();
    s.push(-s.iter().sum::<i128>());
    let mut v = vec![(r.next_u64() % 200) as i128];
    for k in 0..rows - 1 {
        v.push(v[k] - (s[k] << f));
    }
    (v, s)
}

#[test]
fn interpolated_rows() {
    let (n, f, l) = (7u32, 3u32, 12u32);
    let (v, s) = joined_rows(1 << (n - f), f, 5);
    let joined = interp_table("interp-joined", n, f, l, &v, &s);
    all_backends(&joined);
    // One row's value moved: the rows no longer join and the carry is read.
    let mut v2 = v.clone();
    v2[5] += 3;
    all_backends(&interp_table("interp-apart", n, f, l, &v2, &s));
    // The offset in the row in `Φ` next to other nodes: `3·(x mod 8) + c` and a product.
    let mut lo =
        OperatorSpec::of_pieces("low", 6, 10, true, vec![0, 8, 40], pieces(&[&[1, 2], &[5], &[0, -1]]));
    lo.pieces.iter_mut().enumerate().for_each(|(i, p)| p.consts = vec![i as i128 * 11 - 7]);
    lo.phi = phi(
        vec![
            Node::Low { bits: 3 },       // 0
            Node::Scale { a: 0, by: 3 }, // 1
            Node::Aux { index: 0 },      // 2
            Node::Add { a: 1, b: 2 },    // 3
            Node::Poly { index: 0 },     // 4
            Node::Mul { a: 0, b: 4 },    // 5
        ],
        vec![Output::Arith(3), Output::Arith(5)],
    );
    all_backends(&lo);
}

/// A slack `e^{−x}` read from joined rows (`library::nexp_interp` at small widths).
#[test]
fn interpolated_exp_with_slack() {
    let spec = compiler::library::nexp_interp(8, 10, 2, 2, 2);
    spec.validate().unwrap();
    all_backends(&spec);
}

/// With rows that join up, a split reads the value without its carry: fewer opened bits
/// and fewer words than the same table written as `v − s·(x mod 2^f)` node by node, or
/// with rows that do not join.
#[test]
fn joined_rows_read_no_carry_term() {
    let (n, f, l) = (10u32, 4u32, 16u32);
    let (v, s) = joined_rows(1 << (n - f), f, 9);
    let split = CompileOptions {
        split: Some(true),
        lookup: Some(LookupBackend::StepBits),
        ..CompileOptions::default()
    };
    let joined = interp_table("joined", n, f, l, &v, &s);
    let mut spelled = joined.clone();
    spelled.phi = phi(
        vec![
            Node::Aux { index: 0 },
            Node::Aux { index: 1 },
            Node::Low { bits: f },
            Node::Mul { a: 1, b: 2 },
            Node::Sub { a: 0, b: 3 },
        ],
        vec![Output::Arith(4)],
    );
    let mut v2 = v.clone();
    v2[7] += 1;
    let apart = interp_table("apart", n, f, l, &v2, &s);
    let cost = |spec: &OperatorSpec| {
        let p = compile(spec, split).unwrap();
        assert_eq!(p.cost().rounds, 2, "{}", spec.name);
        (p.opened.len(), p.words.len())
    };
    let (fast, slow, other) = (cost(&joined), cost(&spelled), cost(&apart));
    assert!(fast.0 < slow.0 && fast.1 < slow.1, "joined {fast:?} against spelled out {slow:?}");
    assert!(fast.0 < other.0, "joined {fast:?} against rows apart {other:?}");
    for spec in [&joined, &spelled, &apart] {
        exhaustive(spec, split, 3);
    }
}

/// The models' LayerNorm (`composite::norm`) opens its product `x·(1/σ)` in `Z_{2^k}`,
/// `k < n` from the `1/σ` grid's bound: it equals its reference under edge masks on
/// ordinary rows, a constant row (`v = 0`), a row with one channel alone (`|x_j|/σ` at its
/// largest, about `√cols`), rows below and at the grid's floor and random rows.
#[test]
fn layer_norm_opens_its_product_in_a_narrow_ring() {
    use compiler::composite::{norm, norm_product_bits};
    use fss::ring::Ring;
    use gates::harness::run_with_masks;
    let mut r = rng(77);
    let f = 12;
    for (n, cols) in [(37u32, 128usize), (50, 48), (37, 8)] {
        let ring = Ring::new(n).unwrap();
        let gamma: Arc<[u64]> =
            (0..cols).map(|j| ring.from_signed(4096 + (j as i64 % 7) * 300 - 900)).collect();
        let beta: Arc<[u64]> = (0..cols).map(|j| ring.from_signed(((j as i64 % 5) - 2) << 20)).collect();
        let mut rows: Vec<Vec<i64>> = vec![
            (0..cols).map(|j| ((j * 37 % 41) as i64 - 20) * 300).collect(),
            vec![5000; cols],
            (0..cols).map(|j| if j == cols / 3 { 40_000 } else { -3 }).collect(),
            (0..cols).map(|j| 6 + (j % 2) as i64).collect(),
            (0..cols).map(|j| (j as i64 % 3) * 20 - 20).collect(),
        ];
        for _ in 0..3 {
            rows.push((0..cols).map(|_| (r.next_u64() % 40_000) as i64 - 20_000).collect());
        }
        let x: Vec<u64> = rows.iter().flatten().map(|&v| ring.from_signed(v)).collect();
        let g = norm(n, f, rows.len(), cols, true, gamma, beta).unwrap();
        let k = norm_product_bits(n, &g.rsqrt.0.spec);
        assert!(k < n && g.product_bits == k, "n {n} cols {cols}: k {k}");
        for (round, &m) in common::edge_masks(n, &mut r).iter().enumerate() {
            let masks: Vec<u64> = (0..x.len()).map(|i| ring.add(m, (i * round) as u64)).collect();
            let out: Vec<u64> = (0..x.len()).map(|_| r.next_u64() & ring.mask()).collect();
            let rep = run_with_masks(&g, &[&x], &[&masks], &out, &mut r).unwrap();
            if let Some((i, got, want)) = rep.first_mismatch() {
                panic!("n {n} cols {cols} mask {m:#x}: element {i}: secure {got:#x} != reference {want:#x}");
            }
        }
    }
}
