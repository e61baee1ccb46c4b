//! A small transformer layer shared by the engine's tests.

use engine::blocks::{self, Attention, Mlp, quantize};
use engine::{Graph, Shape, Weights};
use fss::rng::{DealerRng, Rng};

fn weights(r: &mut DealerRng, len: usize, std: f64, scale: u32, n: u32) -> std::sync::Arc<[u64]> {
    let v: Vec<f64> = (0..len).map(|_| ((r.next_u64() % 2001) as f64 / 1000.0 - 1.0) * std * 1.7).collect();
    quantize(&v, scale, n)
}

fn matrix(r: &mut DealerRng, len: usize, std: f64, scale: u32, n: u32) -> Weights {
    Weights::from_ring(&weights(r, len, std, scale, n), n)
}

/// One post-LN encoder layer or one pre-LN causal decoder layer, plus pooling.
#[allow(clippy::too_many_arguments)]
pub fn layer_graph(
    n: u32,
    f: u32,
    seq: usize,
    h: usize,
    heads: usize,
    ffn: usize,
    decoder: bool,
    r: &mut DealerRng,
) -> Graph {
    let mut g = Graph::new(n, f, Shape::new(seq, h));
    let att = Attention {
        w_qkv: matrix(r, h * 3 * h, 1.0 / (h as f64).sqrt(), f, n),
        b_qkv: weights(r, 3 * h, 0.05, 2 * f, n),
        w_o: matrix(r, h * h, 0.5 / (h as f64).sqrt(), f, n),
        b_o: weights(r, h, 0.05, 2 * f, n),
        heads,
    };
    let mlp = Mlp {
        w1: matrix(r, h * ffn, 1.0 / (h as f64).sqrt(), f, n),
        b1: weights(r, ffn, 0.05, 2 * f, n),
        w2: matrix(r, ffn * h, 0.5 / (ffn as f64).sqrt(), f, n),
        b2: weights(r, h, 0.05, 2 * f, n),
        ffn,
        tanh: decoder,
    };
    let gamma = quantize(&vec![1.0; h], f, n);
    let beta = quantize(&vec![0.02; h], 2 * f, n);
    let x = 0;
    let out = if decoder {
        let a = blocks::layer_norm(&mut g, x, &gamma, &beta).unwrap();
        let a = blocks::attention(&mut g, a, &att, true).unwrap();
        let x = blocks::add(&mut g, x, a).unwrap();
        let m = blocks::layer_norm(&mut g, x, &gamma, &beta).unwrap();
        let m = blocks::mlp(&mut g, m, &mlp).unwrap();
        blocks::add(&mut g, x, m).unwrap()
    } else {
        let a = blocks::attention(&mut g, x, &att, false).unwrap();
        let x = blocks::add(&mut g, x, a).unwrap();
        let x = blocks::layer_norm(&mut g, x, &gamma, &beta).unwrap();
        let m = blocks::mlp(&mut g, x, &mlp).unwrap();
        let x = blocks::add(&mut g, x, m).unwrap();
        let x = blocks::layer_norm(&mut g, x, &gamma, &beta).unwrap();
        blocks::mean_pool(&mut g, x).unwrap()
    };
    assert_eq!(g.output, out);
    g
}
