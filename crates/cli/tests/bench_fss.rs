//! `fusefss bench fss --json`: the rows and fields other tools script against.

mod common;

use common::{assert_fields, fusefss, json_rows};

#[test]
fn json_rows_have_the_promised_fields() {
    let rows = json_rows(&["bench", "fss", "--json", "--batch", "64", "--reps", "1"]);
    let fields = [
        "primitive",
        "n",
        "out_bits",
        "payload_words",
        "key_bytes",
        "keygen_ns",
        "eval_ns",
        "aes_blocks_per_eval",
        "aes_ns_per_block",
    ];
    assert_fields(&rows, &fields);
    for r in &rows {
        assert!(r["eval_ns"].as_f64().unwrap() > 0.0 && r["aes_ns_per_block"].as_f64().unwrap() > 0.0);
    }
    let has = |p: &str, n: u64, out_bits: u64, k: u64| {
        rows.iter().any(|r| {
            r["primitive"] == p && r["n"] == n && r["out_bits"] == out_bits && r["payload_words"] == k
        })
    };
    assert!(has("dcf", 50, 64, 1) && has("dcf", 50, 64, 4));
    assert!(has("dpf_lt", 50, 1, 1) && has("dpf", 50, 64, 1));
    assert!(has("dpf_full_domain", 8, 64, 1) && has("dpf_full_domain", 13, 64, 1));
    // Key sizes are the formulas of docs/design/fss-building-blocks.md §8.
    let key = |p: &str, n: u64, k: u64| {
        rows.iter().find(|r| r["primitive"] == p && r["n"] == n && r["payload_words"] == k).unwrap()["key_bytes"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(key("dcf", 50, 1), (128 + 50 * 194 + 64u64).div_ceil(8));
    assert_eq!(key("dpf_lt", 50, 1), (130 * 50 - 656u64).div_ceil(8));
}

#[test]
fn help_explains_the_commands_and_bad_flags_fail() {
    let out = fusefss(&["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("bench"));
    let out = fusefss(&["bench", "fss", "--batch", "0"]);
    assert!(!out.status.success());
    let out = fusefss(&["bench", "nonsense"]);
    assert!(!out.status.success());
}
