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
            let [mut k0, mut k1] = dealt.keys;
            let [r0, r1] =
                run_threads_step(&g, &gates, [&mut k0, &mut k1], [x0, x1], [&held[0], &held[1]]).unwrap();
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

/// Every message each server sends at each step of a session (prefill and `steps − 1`
/// decode steps on the same tokens), dealt from `dealer_seed`, with the client's shares
/// from a fixed seed.
fn openings(imp: Impl, dealer_seed: u64, steps: usize) -> Vec<[Vec<Vec<u8>>; 2]> {
    use std::sync::mpsc;
    let w = LlamaWeights::random(LlamaConfig::llama_tiny(), 7).unwrap();
    let fx = LlamaFixed::new(&w, Fixed { n: 50, f: 12 });
    let prompt = [3u32, 141, 59, 400];
    let tokens = [17u32, 250, 9];
    let mut dealer = DealerRng::seed_from_u64(dealer_seed);
    let mut client = DealerRng::seed_from_u64(99);
    let (mut masks, mut held): (Vec<Vec<u64>>, [Vec<Vec<u64>>; 2]) = (vec![], [vec![], vec![]]);
    let mut sent = vec![];
    for t in 0..steps {
        let new: Vec<u32> = if t == 0 { prompt.to_vec() } else { vec![tokens[t - 1]] };
        let g = fx.step(prompt.len(), t).unwrap();
        let gates = build(&g, imp).unwrap();
        let dealt = deal_carried(&g, &gates, &mut dealer, &masks, |_, _| {}).unwrap();
        let (x0, x1) = share_input(&fx.input(&new), g.n, &mut client);
        let (tx0, rx1) = mpsc::channel::<Vec<u8>>();
        let (tx1, rx0) = mpsc::channel::<Vec<u8>>();
        let logs = [std::sync::Mutex::new(vec![]), std::sync::Mutex::new(vec![])];
        fn link(
            tx: mpsc::Sender<Vec<u8>>,
            rx: mpsc::Receiver<Vec<u8>>,
            log: &std::sync::Mutex<Vec<Vec<u8>>>,
        ) -> impl FnMut(Vec<u8>, &mut dyn FnMut()) -> Result<Vec<u8>, gates::GateError> + Send + '_ {
            move |m: Vec<u8>, idle: &mut dyn FnMut()| {
                log.lock().unwrap().push(m.clone());
                tx.send(m).unwrap();
                idle();
                Ok(rx.recv().unwrap())
            }
        }
        let [mut k0, mut k1] = dealt.keys;
        let [r0, r1] = engine::run_pair(
            &g,
            &gates,
            [&mut k0, &mut k1],
            [x0, x1],
            [&held[0], &held[1]],
            [link(tx0, rx0, &logs[0]), link(tx1, rx1, &logs[1])],
        )
        .unwrap();
        let [l0, l1] = logs;
        sent.push([l0.into_inner().unwrap(), l1.into_inner().unwrap()]);
        masks = dealt.carry;
        held = [r0.carried, r1.carried];
    }
    sent
}

#[test]
fn every_opening_is_masked_by_fresh_dealer_randomness() {
    // Two runs of one session on the same tokens and the same client shares, dealt from
    // different randomness: what the servers send has the same shape (it depends on the
    // public shapes only), and no message repeats between the runs beyond chance — a value
    // opened without a fresh mask (the KV cache, or anything computed from the tokens alone)
    // would be equal in both.
    for imp in [Impl::Fusefss, Impl::Sigma] {
        let (a, b) = (openings(imp, 1, 4), openings(imp, 2, 4));
        let (mut same_all, mut bytes_all) = (0, 0);
        for (t, (sa, sb)) in a.iter().zip(&b).enumerate() {
            for p in 0..2 {
                assert_eq!(sa[p].len(), sb[p].len(), "{imp:?} step {t}: rounds");
                for (i, (ma, mb)) in sa[p].iter().zip(&sb[p]).enumerate() {
                    assert_eq!(ma.len(), mb.len(), "{imp:?} step {t} party {p} round {i}: length");
                    let same = ma.iter().zip(mb).filter(|(x, y)| x == y).count();
                    // Uniform bytes repeat with probability 1/256 (a packed message's last
                    // byte may have fixed padding bits).
                    assert!(
                        ma.len() < 64 || same * 16 < ma.len(),
                        "{imp:?} step {t} party {p} round {i}: {same} of {} bytes repeat",
                        ma.len()
                    );
                    same_all += same;
                    bytes_all += ma.len();
                }
            }
        }
        assert!(same_all * 50 < bytes_all, "{imp:?}: {same_all} of {bytes_all} bytes repeat");
    }
    // The comparison sees what it should: with the same dealer randomness, every message
    // repeats.
    assert!(openings(Impl::Fusefss, 1, 2) == openings(Impl::Fusefss, 1, 2));
}
