//! The real all-MiniLM-L6-v2 weights and tokenizers that `scripts/fetch-models.sh` fetches.
//! Each test is skipped, with a message, when the files are absent (CI does not fetch them).

use std::time::Instant;

use models::float::{bert_forward, cosine, l2_normalize, mean_pool};
use models::paths::{gpt2_dir, minilm_dir};
use models::{BertConfig, BertWeights, Gpt2Tokenizer, HfTokenizer};

/// The L2-normalised mean-pooled sentence embedding (sentence-transformers' head).
fn embed(w: &BertWeights, tok: &HfTokenizer, text: &str) -> Vec<f64> {
    let ids = tok.encode(text).unwrap();
    let h = bert_forward(w, &ids, None).unwrap();
    l2_normalize(&mean_pool(&h, ids.len(), w.config.hidden))
}

#[test]
fn minilm_embeds_sentences_sensibly() {
    let dir = minilm_dir();
    if !dir.join("model.safetensors").is_file() {
        eprintln!("skipped: no {} (run scripts/fetch-models.sh)", dir.display());
        return;
    }
    let t0 = Instant::now();
    let w = BertWeights::from_safetensors(&dir).unwrap();
    let t_load = t0.elapsed();
    let tok = HfTokenizer::from_dir(&dir).unwrap();
    assert_eq!(w.config, BertConfig::minilm());
    assert_eq!(tok.vocab_size(), 30522);

    let ids = tok.encode("a sentence about secure inference").unwrap();
    // [CLS] a sentence about secure inference [SEP], no padding to 128.
    assert_eq!(ids.len(), 7, "{ids:?}");
    assert_eq!((ids[0], ids[6]), (101, 102));
    assert_eq!(tok.decode(&ids).unwrap(), "a sentence about secure inference");
    let t1 = Instant::now();
    let h = bert_forward(&w, &ids, None).unwrap();
    let t_fwd = t1.elapsed();
    assert!(h.iter().all(|v| v.is_finite()));
    let e = l2_normalize(&mean_pool(&h, ids.len(), 384));
    assert!((e.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-12);
    eprintln!("MiniLM: load {t_load:?}, forward of {} tokens {t_fwd:?}", ids.len());

    let a = embed(&w, &tok, "A cat is sitting on the mat.");
    let b = embed(&w, &tok, "A kitten rests on a rug.");
    let c = embed(&w, &tok, "The stock market fell sharply after the interest rate decision.");
    let (ab, ac, bc) = (cosine(&a, &b), cosine(&a, &c), cosine(&b, &c));
    eprintln!("cosines: similar {ab:.3}, unrelated {ac:.3} / {bc:.3}");
    assert!(ab > ac + 0.2 && ab > bc + 0.2, "{ab} {ac} {bc}");
    let s = embed(&w, &tok, "private inference on secret-shared inputs");
    let u = embed(&w, &tok, "I like to eat pizza on weekends.");
    assert!(cosine(&e, &s) > cosine(&e, &u) + 0.2);
}

#[test]
fn gpt2_tokenizer_gives_the_known_ids() {
    let dir = gpt2_dir();
    if !dir.join("encoder.json").is_file() {
        eprintln!("skipped: no {} (run scripts/fetch-models.sh)", dir.display());
        return;
    }
    let tok = Gpt2Tokenizer::from_dir(&dir).unwrap();
    assert_eq!(tok.vocab_size(), 50257);
    let text = "Hello world! The quick brown fox jumps over the lazy dog.";
    let ids = tok.encode(text).unwrap();
    assert_eq!(ids, [15496, 995, 0, 383, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13]);
    assert_eq!(tok.decode(&ids).unwrap(), text);
    let odd = "naïve café — ✓ 12345";
    assert_eq!(tok.decode(&tok.encode(odd).unwrap()).unwrap(), odd);
}
