//! `fusefss compile`: a spec's costs per element, or a refusal that says why (non-zero exit,
//! and with `--json` one object with `ok: false` and the kind of failure).

mod common;

use common::{assert_fields, fusefss, json_rows};

const SELECT20: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../compiler/tests/specs/select20.json");

#[test]
fn a_spec_compiles_and_its_costs_are_printed() {
    let rows = json_rows(&["compile", SELECT20, "--json"]);
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_fields(
        &rows,
        &[
            "ok",
            "name",
            "key_bytes_per_elem",
            "comm_bytes_per_elem",
            "rounds",
            "compile_ms",
            "comparison",
            "lookup",
        ],
    );
    assert_eq!(r["ok"], true);
    assert_eq!(r["name"], "select20");
    assert!(r["rounds"].as_u64().unwrap() >= 1);
    assert!(r["key_bytes_per_elem"].as_f64().unwrap() > 0.0);
    let text = fusefss(&["compile", SELECT20]);
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("per element: key"));
}

#[test]
fn a_spec_past_the_limit_is_refused_with_the_reason() {
    let out = fusefss(&["compile", SELECT20, "--json", "--max-terms", "200"]);
    assert!(!out.status.success());
    let r: serde_json::Value =
        serde_json::from_slice(out.stdout.split(|&b| b == b'\n').next().expect("one line")).expect("JSON");
    assert_eq!(r["ok"], false);
    assert_eq!(r["kind"], "limit");
    assert!(r["error"].as_str().unwrap().contains("exceed the limit of 200"), "{r}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(stderr.contains("too large to compile"), "{stderr}");
}

#[test]
fn a_file_that_is_not_a_spec_is_refused() {
    let dir = std::env::temp_dir().join(format!("fusefss-compile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"name": 1}"#).unwrap();
    let out = fusefss(&["compile", bad.to_str().unwrap(), "--json"]);
    assert!(!out.status.success());
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(r["kind"], "json");
    let missing = fusefss(&["compile", dir.join("missing.json").to_str().unwrap()]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("missing.json"));
    std::fs::remove_dir_all(&dir).unwrap();
}
