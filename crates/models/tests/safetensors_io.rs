//! Loading Hugging Face checkpoints: synthetic tiny BERT and GPT-2 files written here with the
//! Hugging Face tensor names and layouts, loaded back, and broken in the ways a real file can be.

use std::path::{Path, PathBuf};

use models::float::{bert_forward, gpt2_forward};
use models::{BertConfig, BertWeights, Gpt2Config, Gpt2Weights, ModelError};
use safetensors::Dtype;
use safetensors::tensor::TensorView;

/// A fresh, empty folder under the system's temp folder.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fusefss-models-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One tensor to write: name, dtype, shape, little-endian bytes.
struct T {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn f32_tensor(name: String, shape: &[usize], v: &[f64]) -> T {
    assert_eq!(v.len(), shape.iter().product::<usize>());
    let bytes = v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect();
    T { name, dtype: Dtype::F32, shape: shape.to_vec(), bytes }
}

fn f64_tensor(name: String, shape: &[usize], v: &[f64]) -> T {
    let bytes = v.iter().flat_map(|&x| x.to_le_bytes()).collect();
    T { name, dtype: Dtype::F64, shape: shape.to_vec(), bytes }
}

/// `in × out` (this crate) to PyTorch Linear's `[out, in]`.
fn to_out_in(w: &[f64], fan_in: usize, fan_out: usize) -> Vec<f64> {
    let mut t = vec![0.0; w.len()];
    for i in 0..fan_in {
        for o in 0..fan_out {
            t[o * fan_in + i] = w[i * fan_out + o];
        }
    }
    t
}

fn write(path: &Path, tensors: &[T]) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|t| (t.name.clone(), TensorView::new(t.dtype, t.shape.clone(), &t.bytes).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

/// Rounds every weight to f32, as a checkpoint stores them.
fn round_bert(w: &mut BertWeights) {
    let r = |v: &mut Vec<f64>| v.iter_mut().for_each(|x| *x = f64::from(*x as f32));
    for v in [&mut w.word, &mut w.position, &mut w.token_type, &mut w.emb_ln_g, &mut w.emb_ln_b] {
        r(v);
    }
    for l in &mut w.layers {
        for v in [
            &mut l.wq,
            &mut l.bq,
            &mut l.wk,
            &mut l.bk,
            &mut l.wv,
            &mut l.bv,
            &mut l.wo,
            &mut l.bo,
            &mut l.ln1_g,
            &mut l.ln1_b,
            &mut l.w1,
            &mut l.b1,
            &mut l.w2,
            &mut l.b2,
            &mut l.ln2_g,
            &mut l.ln2_b,
        ] {
            r(v);
        }
    }
}

fn tiny_bert_config() -> BertConfig {
    BertConfig {
        vocab: 40,
        hidden: 64,
        layers: 2,
        heads: 2,
        ffn: 96,
        max_positions: 16,
        type_vocab: 2,
        ln_eps: 1e-12,
    }
}

/// `w` as a Hugging Face `BertModel` file (F32, `[out, in]` Linear weights), plus the extra
/// tensors real files carry (`position_ids`, the pooler).
fn bert_hf(w: &BertWeights, prefix: &str) -> Vec<T> {
    let c = &w.config;
    let (h, f) = (c.hidden, c.ffn);
    let n = |s: &str| format!("{prefix}{s}");
    let mut ts = vec![
        f32_tensor(n("embeddings.word_embeddings.weight"), &[c.vocab, h], &w.word),
        f32_tensor(n("embeddings.position_embeddings.weight"), &[c.max_positions, h], &w.position),
        f32_tensor(n("embeddings.token_type_embeddings.weight"), &[c.type_vocab, h], &w.token_type),
        f32_tensor(n("embeddings.LayerNorm.weight"), &[h], &w.emb_ln_g),
        f32_tensor(n("embeddings.LayerNorm.bias"), &[h], &w.emb_ln_b),
        T {
            name: n("embeddings.position_ids"),
            dtype: Dtype::I64,
            shape: vec![1, c.max_positions],
            bytes: (0..c.max_positions as i64).flat_map(i64::to_le_bytes).collect(),
        },
        f32_tensor(n("pooler.dense.weight"), &[h, h], &vec![0.5; h * h]),
        f32_tensor(n("pooler.dense.bias"), &[h], &vec![0.0; h]),
    ];
    for (i, l) in w.layers.iter().enumerate() {
        let p = |s: &str| n(&format!("encoder.layer.{i}.{s}"));
        ts.extend([
            f32_tensor(p("attention.self.query.weight"), &[h, h], &to_out_in(&l.wq, h, h)),
            f32_tensor(p("attention.self.query.bias"), &[h], &l.bq),
            f32_tensor(p("attention.self.key.weight"), &[h, h], &to_out_in(&l.wk, h, h)),
            f32_tensor(p("attention.self.key.bias"), &[h], &l.bk),
            f32_tensor(p("attention.self.value.weight"), &[h, h], &to_out_in(&l.wv, h, h)),
            f32_tensor(p("attention.self.value.bias"), &[h], &l.bv),
            f32_tensor(p("attention.output.dense.weight"), &[h, h], &to_out_in(&l.wo, h, h)),
            f32_tensor(p("attention.output.dense.bias"), &[h], &l.bo),
            f32_tensor(p("attention.output.LayerNorm.weight"), &[h], &l.ln1_g),
            f32_tensor(p("attention.output.LayerNorm.bias"), &[h], &l.ln1_b),
            f32_tensor(p("intermediate.dense.weight"), &[f, h], &to_out_in(&l.w1, h, f)),
            f32_tensor(p("intermediate.dense.bias"), &[f], &l.b1),
            f32_tensor(p("output.dense.weight"), &[h, f], &to_out_in(&l.w2, f, h)),
            f32_tensor(p("output.dense.bias"), &[h], &l.b2),
            f32_tensor(p("output.LayerNorm.weight"), &[h], &l.ln2_g),
            f32_tensor(p("output.LayerNorm.bias"), &[h], &l.ln2_b),
        ]);
    }
    ts
}

fn tiny_bert() -> BertWeights {
    let mut w = BertWeights::random(tiny_bert_config(), 3).unwrap();
    round_bert(&mut w);
    w
}

#[test]
fn bert_round_trip_with_and_without_prefix() {
    let w = tiny_bert();
    let ids = [2, 7, 39, 11, 3];
    let reference = bert_forward(&w, &ids, None).unwrap();

    // No prefix, no config.json: heads = hidden / 32 = 2, eps = 1e-12.
    let dir = scratch("bert-plain");
    write(&dir.join("model.safetensors"), &bert_hf(&w, ""));
    let loaded = BertWeights::from_safetensors(&dir).unwrap();
    assert_eq!(loaded, w);
    assert_eq!(bert_forward(&loaded, &ids, None).unwrap(), reference);

    // `bert.` prefix, the file path given directly, config.json beside it overriding heads
    // and eps.
    let dir2 = scratch("bert-prefixed");
    let file = dir2.join("weights.safetensors");
    write(&file, &bert_hf(&w, "bert."));
    std::fs::write(dir2.join("config.json"), r#"{"num_attention_heads": 4, "layer_norm_eps": 1e-6}"#)
        .unwrap();
    let loaded = BertWeights::from_safetensors(&file).unwrap();
    assert_eq!((loaded.config.heads, loaded.config.ln_eps), (4, 1e-6));
    assert_eq!(loaded.layers, w.layers);
    assert_eq!(loaded.word, w.word);

    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&dir2).unwrap();
}

#[test]
fn bert_f64_checkpoint_loads_exactly() {
    let w = BertWeights::random(tiny_bert_config().with_layers(1), 8).unwrap();
    let ts: Vec<T> = bert_hf(&w, "")
        .into_iter()
        .map(|t| {
            if t.dtype != Dtype::F32 {
                return t;
            }
            // Rebuild from the original f64 values rather than the rounded f32 bytes.
            let v: Vec<f64> = t
                .bytes
                .chunks_exact(4)
                .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect();
            f64_tensor(t.name, &t.shape, &v)
        })
        .collect();
    let dir = scratch("bert-f64");
    write(&dir.join("model.safetensors"), &ts);
    let loaded = BertWeights::from_safetensors(&dir).unwrap();
    let mut rounded = w.clone();
    round_bert(&mut rounded);
    assert_eq!(loaded, rounded);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes `tensors` to a fresh folder and loads it, expecting an error.
fn load_err(name: &str, tensors: &[T]) -> ModelError {
    let dir = scratch(name);
    write(&dir.join("model.safetensors"), tensors);
    let e = BertWeights::from_safetensors(&dir).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    e
}

#[test]
fn bert_load_errors_are_typed() {
    let w = tiny_bert();

    let dir = scratch("bert-missing-file");
    let e = BertWeights::from_safetensors(&dir).unwrap_err();
    assert!(matches!(&e, ModelError::MissingFile { path } if path.ends_with("model.safetensors")), "{e}");
    assert!(e.to_string().contains("scripts/fetch-models.sh"));

    std::fs::write(dir.join("model.safetensors"), b"not a safetensors file").unwrap();
    assert!(matches!(BertWeights::from_safetensors(&dir), Err(ModelError::Safetensors { .. })));
    write(&dir.join("model.safetensors"), &bert_hf(&w, ""));
    std::fs::write(dir.join("config.json"), "{ not json").unwrap();
    assert!(matches!(BertWeights::from_safetensors(&dir), Err(ModelError::Json { .. })));
    std::fs::write(dir.join("config.json"), r#"{"num_attention_heads": "twelve"}"#).unwrap();
    assert!(matches!(BertWeights::from_safetensors(&dir), Err(ModelError::Json { .. })));
    std::fs::write(dir.join("config.json"), r#"{"num_attention_heads": 5}"#).unwrap();
    assert!(matches!(BertWeights::from_safetensors(&dir), Err(ModelError::InvalidConfig(_))));
    std::fs::remove_dir_all(&dir).unwrap();

    let missing: Vec<T> =
        bert_hf(&w, "").into_iter().filter(|t| t.name != "encoder.layer.1.output.LayerNorm.bias").collect();
    match load_err("bert-missing-tensor", &missing) {
        ModelError::MissingTensor { name } => assert_eq!(name, "encoder.layer.1.output.LayerNorm.bias"),
        e => panic!("{e}"),
    }
    let no_embedding: Vec<T> =
        bert_hf(&w, "bert.").into_iter().filter(|t| !t.name.contains("word_embeddings")).collect();
    assert!(matches!(load_err("bert-no-embedding", &no_embedding), ModelError::MissingTensor { .. }));

    let mut wrong_shape = bert_hf(&w, "");
    let t = wrong_shape.iter_mut().find(|t| t.name == "encoder.layer.0.attention.self.key.weight").unwrap();
    t.shape = vec![32, 128];
    match load_err("bert-wrong-shape", &wrong_shape) {
        ModelError::TensorShape { name, expected, actual } => {
            assert_eq!(name, "encoder.layer.0.attention.self.key.weight");
            assert_eq!((expected, actual), (vec![64, 64], vec![32, 128]));
        }
        e => panic!("{e}"),
    }

    let mut wrong_dtype = bert_hf(&w, "");
    let t = wrong_dtype.iter_mut().find(|t| t.name == "embeddings.LayerNorm.weight").unwrap();
    t.dtype = Dtype::I32;
    assert!(matches!(load_err("bert-wrong-dtype", &wrong_dtype), ModelError::TensorDtype { .. }));

    let mut not_2d = bert_hf(&w, "");
    let t = not_2d.iter_mut().find(|t| t.name == "embeddings.word_embeddings.weight").unwrap();
    t.shape = vec![40 * 64];
    assert!(matches!(load_err("bert-not-2d", &not_2d), ModelError::TensorRank { rank: 2, .. }));
}

fn tiny_gpt2_config() -> Gpt2Config {
    Gpt2Config { vocab: 30, hidden: 32, layers: 2, heads: 4, ffn: 128, max_positions: 12, ln_eps: 1e-5 }
}

/// `w` as a Hugging Face `GPT2LMHeadModel` file: Conv1D weights `[in, out]`, mask buffers,
/// a tied `lm_head.weight`.
fn gpt2_hf(w: &Gpt2Weights, prefix: &str) -> Vec<T> {
    let c = &w.config;
    let (h, f) = (c.hidden, c.ffn);
    let n = |s: &str| format!("{prefix}{s}");
    let mut ts = vec![
        f64_tensor(n("wte.weight"), &[c.vocab, h], &w.wte),
        f64_tensor(n("wpe.weight"), &[c.max_positions, h], &w.wpe),
        f64_tensor(n("ln_f.weight"), &[h], &w.lnf_g),
        f64_tensor(n("ln_f.bias"), &[h], &w.lnf_b),
        f64_tensor("lm_head.weight".into(), &[c.vocab, h], &w.wte),
    ];
    for (i, l) in w.layers.iter().enumerate() {
        let p = |s: &str| n(&format!("h.{i}.{s}"));
        let mask: Vec<f64> = (0..c.max_positions * c.max_positions)
            .map(|k| f64::from(k % c.max_positions <= k / c.max_positions))
            .collect();
        ts.extend([
            f64_tensor(p("ln_1.weight"), &[h], &l.ln1_g),
            f64_tensor(p("ln_1.bias"), &[h], &l.ln1_b),
            f64_tensor(p("attn.bias"), &[1, 1, c.max_positions, c.max_positions], &mask),
            f64_tensor(p("attn.c_attn.weight"), &[h, 3 * h], &l.w_qkv),
            f64_tensor(p("attn.c_attn.bias"), &[3 * h], &l.b_qkv),
            f64_tensor(p("attn.c_proj.weight"), &[h, h], &l.w_proj),
            f64_tensor(p("attn.c_proj.bias"), &[h], &l.b_proj),
            f64_tensor(p("ln_2.weight"), &[h], &l.ln2_g),
            f64_tensor(p("ln_2.bias"), &[h], &l.ln2_b),
            f64_tensor(p("mlp.c_fc.weight"), &[h, f], &l.w_fc),
            f64_tensor(p("mlp.c_fc.bias"), &[f], &l.b_fc),
            f64_tensor(p("mlp.c_proj.weight"), &[f, h], &l.w_out),
            f64_tensor(p("mlp.c_proj.bias"), &[h], &l.b_out),
        ]);
    }
    ts
}

#[test]
fn gpt2_round_trip() {
    let w = Gpt2Weights::random(tiny_gpt2_config(), 4).unwrap();
    let dir = scratch("gpt2");
    write(&dir.join("model.safetensors"), &gpt2_hf(&w, "transformer."));
    std::fs::write(dir.join("config.json"), r#"{"n_head": 4, "layer_norm_epsilon": 1e-5, "n_embd": 32}"#)
        .unwrap();
    let loaded = Gpt2Weights::from_safetensors(&dir).unwrap();
    assert_eq!(loaded, w);
    let ids = [1, 29, 4, 4, 17];
    assert_eq!(gpt2_forward(&loaded, &ids).unwrap(), gpt2_forward(&w, &ids).unwrap());

    // Without config.json the heads default to hidden / 64, which 32 is not a multiple of.
    std::fs::remove_file(dir.join("config.json")).unwrap();
    assert!(matches!(Gpt2Weights::from_safetensors(&dir), Err(ModelError::InvalidConfig(_))));

    let mut wrong = gpt2_hf(&w, "");
    let t = wrong.iter_mut().find(|t| t.name == "h.1.mlp.c_proj.weight").unwrap();
    t.shape = vec![32, 128]; // stored [out, in] by mistake
    write(&dir.join("model.safetensors"), &wrong);
    std::fs::write(dir.join("config.json"), r#"{"n_head": 4}"#).unwrap();
    assert!(matches!(Gpt2Weights::from_safetensors(&dir), Err(ModelError::TensorShape { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A WordLevel `tokenizer.json` over a few words.
const TINY_TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
"model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"private":2,"world":3},"unk_token":"[UNK]"}}"#;

#[test]
fn a_model_folder_loads_by_its_architecture_or_says_what_is_wrong() {
    use models::registry::{Loaded, load_dir};
    let w = tiny_bert();
    let dir = scratch("folder");
    write(&dir.join("model.safetensors"), &bert_hf(&w, "bert."));
    // Missing files are named, one at a time.
    let e = load_dir(&dir, None).unwrap_err();
    assert!(matches!(&e, ModelError::IncompleteFolder { missing: "config.json", .. }), "{e}");
    std::fs::write(dir.join("config.json"), r#"{"architectures": ["BertModel"], "num_attention_heads": 2}"#)
        .unwrap();
    let e = load_dir(&dir, None).unwrap_err();
    assert!(matches!(&e, ModelError::IncompleteFolder { missing: "tokenizer.json", .. }), "{e}");
    std::fs::write(dir.join("tokenizer.json"), TINY_TOKENIZER).unwrap();
    // A BERT folder: the weights, the tokenizer, a program.
    let m = load_dir(&dir, None).unwrap();
    assert!(matches!(&m, Loaded::Bert(b, ..) if **b == w));
    let ids = m.tokens(Some("hello private world"), None).unwrap();
    assert_eq!(ids, [1, 2, 3]);
    let g = m.graph(ids.len()).unwrap();
    assert_eq!(g.input.len(), 3 * 64);
    assert_eq!(load_dir(&dir, Some(1)).unwrap().layers(), 1);
    // An architecture fusefss does not run: named, with the ones it does.
    std::fs::write(dir.join("config.json"), r#"{"architectures": ["T5ForConditionalGeneration"]}"#).unwrap();
    let e = load_dir(&dir, None).unwrap_err().to_string();
    assert!(e.contains("T5ForConditionalGeneration") && e.contains("LlamaForCausalLM"), "{e}");
    std::fs::write(dir.join("config.json"), "{not json").unwrap();
    assert!(matches!(load_dir(&dir, None), Err(ModelError::InvalidConfig(_))));
    std::fs::remove_dir_all(&dir).unwrap();
}
