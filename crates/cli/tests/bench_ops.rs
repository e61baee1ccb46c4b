//! `fusefss bench ops --impl sigma --json`: every operator row, exact, with SIGMA's rounds.

use std::process::Command;

#[test]
fn sigma_rows_are_exact_with_sigma_round_counts() {
    let out = Command::new(env!("CARGO_BIN_EXE_fusefss"))
        .args(["bench", "ops", "--impl", "sigma", "--json", "--elements", "1024", "--reps", "1"])
        .output()
        .expect("run fusefss");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let fields = [
        "op",
        "impl",
        "n",
        "f",
        "elements",
        "shape",
        "key_bytes_per_elem",
        "comm_bytes_per_elem",
        "rounds",
        "keygen_ns_per_elem",
        "eval_ns_per_elem",
        "exact",
        "max_abs_err",
    ];
    for r in &rows {
        for f in fields {
            assert!(r.get(f).is_some(), "{r} lacks {f}");
        }
        assert_eq!(r["impl"], "sigma");
        assert_eq!(r["exact"], true, "{r}");
    }
    let rounds = |op: &str| {
        rows.iter().find(|r| r["op"] == op).unwrap_or_else(|| panic!("no row {op}"))["rounds"]
            .as_u64()
            .unwrap()
    };
    // At most SIGMA's CPU rounds (baselines-sigma-crypten.md §6).
    for (op, max) in [
        ("mul", 1),
        ("select", 1),
        ("drelu", 1),
        ("relu", 2),
        ("tr", 2),
        ("ars_slack", 2),
        ("ars_exact", 4),
        ("lut8", 2),
        ("gelu", 8),
        ("silu", 8),
        ("nexp", 10),
        ("reciprocal", 3),
        ("rsqrt", 5),
        ("layernorm", 16),
    ] {
        assert!(rounds(op) <= max, "{op}: {} rounds", rounds(op));
    }
    // 1024 elements = 8 rows of 128: the tree has 7 levels.
    assert_eq!(rounds("softmax"), 30);
    for r in &rows {
        if ["gelu", "silu", "nexp", "reciprocal", "rsqrt", "softmax", "layernorm"]
            .contains(&r["op"].as_str().unwrap())
        {
            assert!(r["max_abs_err"].as_f64().unwrap() < 0.05, "{r}");
        }
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_fusefss"))
        .args(["bench", "ops", "--ops", "nonsense"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
}
