//! What the CLI tests share: run the binary and read its `--json` rows.

use std::process::{Command, Output};

/// Run `fusefss args…`.
pub fn fusefss(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fusefss")).args(args).output().expect("run fusefss")
}

/// Run `fusefss args…`, require success, and parse one JSON object per stdout line.
pub fn json_rows(args: &[&str]) -> Vec<serde_json::Value> {
    let out = fusefss(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .expect("UTF-8 output")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// Every row has every one of `fields` (the names scripts rely on).
pub fn assert_fields(rows: &[serde_json::Value], fields: &[&str]) {
    for r in rows {
        for f in fields {
            assert!(r.get(f).is_some(), "row {r} lacks {f}");
        }
    }
}
