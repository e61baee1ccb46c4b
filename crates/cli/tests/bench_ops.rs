//! `fusefss bench ops --impl sigma --json`: every operator row, exact, with SIGMA's rounds.

mod common;

use common::{assert_fields, fusefss, json_rows};

#[test]
fn sigma_rows_are_exact_with_sigma_round_counts() {
    let rows = json_rows(&["bench", "ops", "--impl", "sigma", "--json", "--elements", "1024", "--reps", "1"]);
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
        "aes_blocks_per_elem",
        "exact",
        "max_abs_err",
    ];
    assert_fields(&rows, &fields);
    for r in &rows {
        assert_eq!(r["impl"], "sigma");
        assert_eq!(r["exact"], true, "{r}");
    }
    // Every gate but the products evaluates FSS keys online.
    for r in &rows {
        let aes = r["aes_blocks_per_elem"].as_f64().unwrap();
        if ["mul", "select"].contains(&r["op"].as_str().unwrap()) {
            assert_eq!(aes, 0.0, "{r}");
        } else {
            assert!(aes >= 1.0, "{r}");
        }
    }
    let rounds = |op: &str| {
        rows.iter().find(|r| r["op"] == op).unwrap_or_else(|| panic!("no row {op}"))["rounds"]
            .as_u64()
            .unwrap()
    };
    // At most SIGMA's CPU rounds (docs/design/baselines.md §6).
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
    let bad = fusefss(&["bench", "ops", "--ops", "nonsense"]);
    assert!(!bad.status.success());
}

/// `--impl both`: rows pair by op, every row exact, and the compiled operators meet the
/// paper's claims against the SIGMA rows (per-element key, communication and rounds do not
/// depend on the element count).
#[test]
fn compiled_rows_beat_sigma_rows() {
    let ops = "ars_slack,ars_exact,ars_sign,gelu,gelu_models,silu,silu_models,nexp,nexp_interp,reciprocal,\
               rsqrt,softmax,layernorm";
    let rows = json_rows(&[
        "bench",
        "ops",
        "--impl",
        "both",
        "--json",
        "--elements",
        "256",
        "--reps",
        "1",
        "--ops",
        ops,
    ]);
    for r in &rows {
        assert_eq!(r["exact"], true, "{r}");
    }
    let get = |op: &str, imp: &str| {
        rows.iter()
            .find(|r| r["op"] == op && r["impl"] == imp)
            .unwrap_or_else(|| panic!("no row {op} {imp}"))
            .clone()
    };
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    for op in ["gelu", "silu", "nexp", "reciprocal", "rsqrt"] {
        let (s, c) = (get(op, "sigma"), get(op, "fusefss"));
        assert!(f(&c, "key_bytes_per_elem") <= 0.8 * f(&s, "key_bytes_per_elem"), "{op}: {c} vs {s}");
        assert!(f(&c, "comm_bytes_per_elem") <= 0.9 * f(&s, "comm_bytes_per_elem"), "{op}");
        assert!(f(&c, "rounds") < f(&s, "rounds"), "{op}");
        assert!(f(&c, "max_abs_err") <= f(&s, "max_abs_err"), "{op}");
    }
    // The truncation with its carry from truth tables: under half of SIGMA's key, same rounds.
    let (s, c) = (get("ars_slack", "sigma"), get("ars_slack", "fusefss"));
    assert!(f(&c, "key_bytes_per_elem") <= 0.5 * f(&s, "key_bytes_per_elem"), "{c} vs {s}");
    assert_eq!(f(&c, "rounds"), f(&s, "rounds"));
    // GeLU and SiLU as the models run them: in SIGMA's error class, at or below its error,
    // for less key, communication and rounds.
    for (op, models) in [("gelu", "gelu_models"), ("silu", "silu_models")] {
        let (s, c) = (get(op, "sigma"), get(models, "fusefss"));
        assert!(f(&c, "key_bytes_per_elem") <= 0.8 * f(&s, "key_bytes_per_elem"), "{c} vs {s}");
        assert!(f(&c, "comm_bytes_per_elem") <= 0.5 * f(&s, "comm_bytes_per_elem"), "{c} vs {s}");
        assert!(f(&c, "rounds") < f(&s, "rounds"), "{c} vs {s}");
        assert!(f(&c, "max_abs_err") <= f(&s, "max_abs_err"), "{c} vs {s}");
        assert!(c["shape"].as_str().unwrap().contains("the models'"), "{c}");
    }
    // `e^{−x}` interpolated in rows: below SIGMA's error too, for less key.
    let (s, c) = (get("nexp", "sigma"), get("nexp_interp", "fusefss"));
    assert!(f(&c, "key_bytes_per_elem") <= 0.8 * f(&s, "key_bytes_per_elem"), "{c} vs {s}");
    assert!(f(&c, "rounds") < f(&s, "rounds"));
    assert!(f(&c, "max_abs_err") <= f(&s, "max_abs_err"), "{c} vs {s}");
    let (s, c) = (get("ars_exact", "sigma"), get("ars_exact", "fusefss"));
    assert!(f(&c, "key_bytes_per_elem") <= f(&s, "key_bytes_per_elem"));
    assert!(f(&c, "comm_bytes_per_elem") <= 0.9 * f(&s, "comm_bytes_per_elem"));
    assert!(f(&c, "rounds") < f(&s, "rounds"));
    let (s, c) = (get("ars_sign", "sigma"), get("ars_sign", "fusefss"));
    assert!(f(&c, "key_bytes_per_elem") <= 0.8 * f(&s, "key_bytes_per_elem"));
    assert!(f(&c, "comm_bytes_per_elem") <= 0.9 * f(&s, "comm_bytes_per_elem"));
    for op in ["softmax", "layernorm"] {
        assert!(f(&get(op, "fusefss"), "rounds") < f(&get(op, "sigma"), "rounds"), "{op}");
    }
}

/// `fusefss fit` writes a spec that `bench ops --spec` compiles and runs exactly.
#[test]
fn fit_writes_a_spec_that_runs() {
    let dir = std::env::temp_dir().join(format!("fusefss-fit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gelu.json");
    let p = path.to_str().unwrap();
    let summary = json_rows(&[
        "fit",
        "--function",
        "gelu",
        "--n",
        "37",
        "--f",
        "12",
        "--intervals",
        "32",
        "--degree",
        "1",
        "--out",
        p,
        "--json",
    ]);
    assert_eq!(summary.len(), 1);
    let s = &summary[0];
    assert!(s["max_abs_err"].as_f64().unwrap() < 0.05, "{s}");
    assert_eq!(s["out_scale"], 24);
    let spec: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(spec["in_bits"], 37);
    let rows = json_rows(&[
        "bench",
        "ops",
        "--impl",
        "fusefss",
        "--json",
        "--elements",
        "512",
        "--reps",
        "1",
        "--ops",
        "relu",
        "--spec",
        p,
    ]);
    let row = rows.iter().find(|r| r["op"] == spec["name"]).expect("a row for the spec");
    assert_eq!(row["exact"], true);
    assert_eq!(row["rounds"], 2);
    let bad = fusefss(&["fit", "--function", "cosh"]);
    assert!(!bad.status.success());
    std::fs::remove_dir_all(&dir).ok();
}
