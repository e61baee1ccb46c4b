//! The secure path: BERT and GPT-2 (cut to small sizes) run by two servers equal the
//! plaintext fixed-point reference bit for bit, for both implementations, and stay close to
//! the f64 model.

use engine::blocks::dequantize;
use engine::{Impl, build, deal, plain, reconstruct, run_threads, share_input};
use fss::rng::{DealerRng, SeedableRng};
use models::graph::{self, Fixed};
use models::{BertConfig, BertWeights, BuiltinTokenizer, Gpt2Config, Gpt2Weights, float};

fn secure(g: &engine::Graph, x: &[u64], imp: Impl, seed: u64) -> (Vec<u64>, Vec<u64>, u64) {
    let mut rng = DealerRng::seed_from_u64(seed);
    let gates = build(g, imp).unwrap();
    let want = plain(g, &gates, x);
    let (k0, k1, _) = deal(g, &gates, &mut rng, |_, _| {}).unwrap();
    let (x0, x1) = share_input(x, g.n, &mut rng);
    let [p0, p1] = run_threads(g, &gates, [k0, k1], [x0, x1]).unwrap();
    (reconstruct(&p0.output, &p1.output, g.n), want, p0.stats.rounds)
}

#[test]
fn bert_tiny_is_exact_and_close_to_f64() {
    let w = BertWeights::random(BertConfig::bert_tiny(), 3).unwrap();
    let ids =
        BuiltinTokenizer::new(w.config.vocab).unwrap().encode("two servers compute on shares of my text");
    let fx = Fixed { n: 37, f: 12 };
    let g = graph::bert(&w, ids.len(), fx).unwrap();
    let x = graph::bert_input(&w, &ids, fx);
    let want_f = float::mean_pool(&float::bert_forward(&w, &ids, None).unwrap(), ids.len(), w.config.hidden);
    let mut rounds = vec![];
    for imp in [Impl::Fusefss, Impl::Sigma] {
        let (got, want, r) = secure(&g, &x, imp, 11);
        assert_eq!(got, want, "{imp:?}");
        let dec: Vec<f64> = got.iter().map(|&v| dequantize(v, fx.f, fx.n)).collect();
        let err = dec.iter().zip(&want_f).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(err < 0.05, "{imp:?}: max error {err}");
        assert!(float::cosine(&dec, &want_f) > 0.9995, "{imp:?}");
        rounds.push(r);
    }
    assert!(rounds[0] < rounds[1], "FuseFSS takes fewer rounds: {rounds:?}");
}

#[test]
fn gpt2_two_layers_is_exact_and_close_to_f64() {
    let mut c = Gpt2Config::gpt2().with_layers(2);
    c.vocab = 1000;
    let w = Gpt2Weights::random(c, 5).unwrap();
    let ids: Vec<u32> = vec![17, 401, 9, 999, 250];
    let fx = Fixed { n: 50, f: 12 };
    let g = graph::gpt2(&w, ids.len(), fx).unwrap();
    let x = graph::gpt2_input(&w, &ids, fx);
    let h = float::gpt2_forward(&w, &ids).unwrap();
    let want_f = &h[(ids.len() - 1) * w.config.hidden..];
    for imp in [Impl::Fusefss, Impl::Sigma] {
        let (got, want, _) = secure(&g, &x, imp, 12);
        assert_eq!(got, want, "{imp:?}");
        let dec: Vec<f64> = got.iter().map(|&v| dequantize(v, fx.f, fx.n)).collect();
        let err = dec.iter().zip(want_f).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(err < 0.1, "{imp:?}: max error {err}");
        assert!(float::cosine(&dec, want_f) > 0.999, "{imp:?}");
    }
}
