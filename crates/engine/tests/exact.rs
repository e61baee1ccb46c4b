//! Small transformer layers run securely equal their plaintext fixed-point reference.

mod common;

use common::layer_graph;
use engine::blocks::quantize;
use engine::{Impl, build, deal, plain, reconstruct, run_threads, share_input};
use fss::rng::{DealerRng, SeedableRng};

#[test]
fn layers_are_exact_for_both_implementations() {
    let mut r = DealerRng::seed_from_u64(9);
    for (n, decoder, seq) in [(37u32, false, 5usize), (37, true, 4), (50, true, 3)] {
        let f = 12;
        let g = layer_graph(n, f, seq, 8, 2, 16, decoder, &mut r);
        let x =
            quantize(&(0..seq * 8).map(|i| ((i * 37 % 41) as f64 / 10.0) - 2.0).collect::<Vec<_>>(), f, n);
        for imp in [Impl::Sigma, Impl::Fusefss] {
            let gates = build(&g, imp).unwrap();
            let want = plain(&g, &gates, &x);
            let (k0, k1, report) = deal(&g, &gates, &mut r, |_, _| {}).unwrap();
            assert!(report.key_bits > 0);
            let (x0, x1) = share_input(&x, n, &mut r);
            let [p0, p1] = run_threads(&g, &gates, [k0, k1], [x0, x1]).unwrap();
            assert_eq!(reconstruct(&p0.output, &p1.output, n), want, "{imp:?} n {n} decoder {decoder}");
            assert_eq!(p0.stats.rounds, p1.stats.rounds);
            assert_eq!(p0.stats.comm_bytes(), p1.stats.comm_bytes());
            assert!(p0.times.iter().any(|(l, _)| *l == "softmax"));
        }
    }
}

#[test]
fn chunked_programs_equal_the_whole_and_are_exact() {
    let mut r = DealerRng::seed_from_u64(11);
    let (n, f, max) = (50u32, 12, 12usize);
    for (decoder, seq) in [(false, 5usize), (true, 4)] {
        let g = layer_graph(n, f, seq, 8, 2, 16, decoder, &mut r);
        let c = g.chunked(max);
        assert!(c.gates() > g.gates(), "decoder {decoder}: nothing was split");
        for node in c.nodes.iter().filter(|node| node.op.is_row_wise()) {
            let whole_heads = matches!(node.op, engine::Op::Softmax { causal: true, .. })
                && node.shape.rows == node.shape.cols;
            let one_row = node.shape.rows == 1;
            assert!(node.shape.len() <= max || one_row || whole_heads, "a chunk of {:?} remains", node.shape);
        }
        let x =
            quantize(&(0..seq * 8).map(|i| ((i * 29 % 43) as f64 / 10.0) - 2.1).collect::<Vec<_>>(), f, n);
        for imp in [Impl::Sigma, Impl::Fusefss] {
            let (gates, cgates) = (build(&g, imp).unwrap(), build(&c, imp).unwrap());
            let want = plain(&g, &gates, &x);
            assert_eq!(plain(&c, &cgates, &x), want, "{imp:?} decoder {decoder}");
            let run = |g: &engine::Graph, gates: &engine::NodeGates, r: &mut DealerRng| {
                let (k0, k1, _) = deal(g, gates, r, |_, _| {}).unwrap();
                let (x0, x1) = share_input(&x, n, r);
                run_threads(g, gates, [k0, k1], [x0, x1]).unwrap()
            };
            let [w0, _] = run(&g, &gates, &mut r);
            let [p0, p1] = run(&c, &cgates, &mut r);
            assert_eq!(reconstruct(&p0.output, &p1.output, n), want, "{imp:?} decoder {decoder}");
            assert!(p0.stats.rounds > w0.stats.rounds, "chunks run one after another");
        }
    }
}

/// FuseFSS's truncations open only the bits their readers read: the programs' results are
/// those of full-width truncations (SIGMA's gates in their place) on inputs across the range.
#[test]
fn narrow_truncations_change_no_result() {
    let mut r = DealerRng::seed_from_u64(13);
    for (n, decoder, seq) in [(37u32, false, 5usize), (37, true, 4), (50, true, 3), (50, false, 4)] {
        let f = 12;
        let g = layer_graph(n, f, seq, 8, 2, 16, decoder, &mut r);
        let narrow = build(&g, Impl::Fusefss).unwrap();
        let mut full = build(&g, Impl::Fusefss).unwrap();
        let mut sigma = build(&g, Impl::Sigma).unwrap();
        for (i, node) in g.nodes.iter().enumerate() {
            if matches!(node.op, engine::Op::Trunc { .. }) {
                full[i] = sigma[i].take();
            }
        }
        for scale in [0.3, 2.0, 9.0] {
            let x: Vec<f64> =
                (0..seq * 8).map(|i| (((i * 53 + 7) % 61) as f64 / 30.0 - 1.0) * scale).collect();
            let x = quantize(&x, f, n);
            assert_eq!(plain(&g, &narrow, &x), plain(&g, &full, &x), "n {n} decoder {decoder} scale {scale}");
        }
    }
}
