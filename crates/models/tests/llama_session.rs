//! Token-by-token generation with llama-tiny over a secret-shared KV cache: the prefill and
//! every decode step, dealt with the dealer's carried masks and run by two servers that
//! keep the cache as masked values, equal the plaintext fixed-point programs bit for bit,
//! with both implementations; the generated tokens follow the f64 model's.

use engine::blocks::dequantize;
use engine::{Impl, build, deal_carried, plain_step, reconstruct, run_threads_step, share_input};
use fss::rng::{DealerRng, SeedableRng};
use models::graph::Fixed;
use models::llama::{FloatCache, LlamaConfig, LlamaFixed, LlamaWeights, forward_f64};

fn argmax(v: &[f64]) -> u32 {
    v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i as u32).unwrap()
}

#[test]
fn generation_over_a_shared_kv_cache_is_exact() {
    let w = LlamaWeights::random(LlamaConfig::llama_tiny(), 7).unwrap();
    let fx = LlamaFixed::new(&w, Fixed { n: 50, f: 12 });
    let prompt = [3u32, 141, 59, 400];
    for imp in [Impl::Fusefss, Impl::Sigma] {
        let mut rng = DealerRng::seed_from_u64(11);
        // The dealer's masks, the servers' masked values and the plaintext values of the
        // cache, carried from step to step.
        // The dealer's masks, each server's masked values and the plaintext values of the
        // KV cache, carried from step to step.
        let mut masks: Vec<Vec<u64>> = vec![];
        let mut held: [Vec<Vec<u64>>; 2] = [vec![], vec![]];
        let mut plain_cache: Vec<Vec<u64>> = vec![];
        let mut ids: Vec<u32> = prompt.to_vec();
        let mut float_cache = FloatCache::default();
        let mut agree = 0;
        let steps = 4;
        for step in 0..steps {
            let (past, new): (usize, Vec<u32>) =
                if step == 0 { (0, prompt.to_vec()) } else { (ids.len() - 1, vec![*ids.last().unwrap()]) };
            let g = fx.program(past, new.len()).unwrap();
            let gates = build(&g, imp).unwrap();
            let dealt = deal_carried(&g, &gates, &mut rng, &masks, |_, _| {}).unwrap();
            let x = fx.input(&new);
            let (want, next_plain) = plain_step(&g, &gates, &x, &plain_cache).unwrap();
            let (x0, x1) = share_input(&x, g.n, &mut rng);
            let [r0, r1] = run_threads_step(&g, &gates, dealt.keys, [x0, x1], [&held[0], &held[1]]).unwrap();
            let logits = reconstruct(&r0.output, &r1.output, g.n);
            assert_eq!(logits, want, "{imp:?} step {step}");
            // The servers' cache is masked: its values differ from the plaintext ones but
            // agree between the two servers.
            assert_eq!(r0.carried, r1.carried);
            assert_ne!(r0.carried, next_plain);
            masks = dealt.carry;
            held = [r0.carried, r1.carried];
            plain_cache = next_plain;
            // The client: truncate to scale f, pick greedily, compare with the f64 model.
            let real: Vec<f64> = logits.iter().map(|&v| dequantize(v, 2 * g.f, g.n)).collect();
            let float = forward_f64(&w, &new, &mut float_cache);
            let tok = argmax(&real);
            agree += usize::from(tok == argmax(&float));
            let cos = models::float::cosine(&real, &float);
            assert!(cos > 0.99, "{imp:?} step {step}: cosine {cos}");
            ids.push(tok);
        }
        assert!(agree >= steps - 1, "{imp:?}: {agree} of {steps} tokens as the f64 model's");
    }
}
