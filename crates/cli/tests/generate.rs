//! `fusefss generate` and `bench generate` on llama-tiny: every step of both
//! implementations equals the plaintext fixed-point model, with the fields scripts use.

mod common;

use common::{assert_fields, json_rows};

#[test]
fn generation_is_exact_for_both_implementations() {
    let rows = json_rows(&[
        "generate",
        "--prompt",
        "a private prompt",
        "--max-new-tokens",
        "3",
        "--impl",
        "both",
        "--check",
        "--json",
    ]);
    assert_eq!(rows.len(), 2);
    assert_fields(
        &rows,
        &["model", "impl", "prompt_tokens", "tokens", "exact", "tokens_match_float", "steps"],
    );
    for r in &rows {
        assert_eq!(r["exact"], true, "{r}");
        assert_eq!(r["steps"].as_array().unwrap().len(), 3, "{r}");
        assert_eq!(r["tokens"].as_array().unwrap().len(), 3, "{r}");
    }
    // Sampling from the client's own RNG still runs exact steps.
    let rows =
        json_rows(&["generate", "--max-new-tokens", "2", "--temperature", "0.8", "--top-p", "0.9", "--json"]);
    assert_eq!(rows[0]["exact"], true);
}

/// Keys streamed gate by gate beside the servers (the default), dealt in memory before each
/// step, or dealt ahead into bundles on disk: every step exact, and the same tokens
/// (greedy sampling).
#[test]
fn generation_with_keys_streamed_in_memory_or_on_disk() {
    let run = |keys: &str, at: &str| {
        let mut args = vec!["generate", "--prompt", "a private prompt", "--max-new-tokens", "3", "--json"];
        if !keys.is_empty() {
            args.push(keys);
        }
        let rows = json_rows(&args);
        assert_eq!(rows[0]["exact"], true, "{keys}: {}", rows[0]);
        assert_eq!(rows[0]["keys"], at, "{keys}");
        assert_eq!(rows[0]["steps"].as_array().unwrap().len(), 3, "{keys}");
        rows[0]["tokens"].clone()
    };
    let streamed = run("", "stream");
    assert_eq!(run("--keys-streamed", "stream"), streamed);
    assert_eq!(run("--keys-in-memory", "memory"), streamed);
    assert_eq!(run("--keys-on-disk", "disk"), streamed);
}

#[test]
fn bench_generate_reports_per_token_costs() {
    let rows = json_rows(&["bench", "generate", "--prompt-len", "6", "--new-tokens", "3", "--json"]);
    assert_eq!(rows.len(), 2);
    assert_fields(
        &rows,
        &[
            "model",
            "impl",
            "prompt_len",
            "new_tokens",
            "n",
            "f",
            "prefill_ms",
            "per_token_ms",
            "keygen_ms",
            "prefill_key_bytes",
            "key_bytes_per_token",
            "comm_bytes_per_token",
            "rounds_per_token",
            "peak_rss_bytes",
            "exact",
            "tokens_match_float",
        ],
    );
    for r in &rows {
        assert_eq!(r["exact"], true, "{r}");
        assert!(r["rounds_per_token"].as_f64().unwrap() > 10.0);
    }
}
