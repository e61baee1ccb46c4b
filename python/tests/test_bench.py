"""`compile_spec`, `bench_ops` and `bench_model`: the CLI's costs and rows as Python data."""

from __future__ import annotations

import json

import pytest

import fusefss

from conftest import run_cli

RELU8 = {
    "name": "relu8",
    "in_bits": 8,
    "out_bits": 12,
    "signed": True,
    "boundaries": [0, 128],
    "pieces": [{"polys": [[0, 1]]}, {"polys": [[0]]}],
}

# Fields that do not depend on timing or randomness.
STABLE_OPS = ["op", "impl", "n", "f", "elements", "shape", "key_bytes_per_elem", "comm_bytes_per_elem", "rounds", "exact", "max_abs_err", "threads", "backend"]
STABLE_MODEL = ["model", "impl", "seq", "layers", "n", "f", "key_bytes", "comm_bytes", "rounds", "exact", "transport", "net", "key_bytes_by_layer"]


def test_compile_spec_returns_costs_per_element() -> None:
    c = fusefss.compile_spec(RELU8)
    assert c["name"] == "relu8" and c["in_bits"] == 8 and c["out_bits"] == 12 and c["intervals"] == 2
    assert c["key_bytes_per_elem"] > 0 and c["comm_bytes_per_elem"] > 0
    assert c["rounds"] == 2
    # JSON text and other backends.
    assert fusefss.compile_spec(json.dumps(RELU8)) == c
    per = fusefss.compile_spec(RELU8, cmp="per-threshold", lookup="dcf")
    assert per["backend"].startswith("per-threshold+dcf")


def test_a_bad_spec_is_a_fusefss_error() -> None:
    with pytest.raises(fusefss.FusefssError, match="boundar"):
        fusefss.compile_spec({**RELU8, "boundaries": [5, 3]})
    with pytest.raises(fusefss.FusefssError, match="spec"):
        fusefss.compile_spec("{not json")
    with pytest.raises(fusefss.FusefssError, match="invalid value"):
        fusefss.compile_spec(RELU8, lookup="telepathy")


def test_bench_ops_rows() -> None:
    rows = fusefss.bench_ops(impl="both", ops=["relu", "tr"], elements=1024, reps=1, spec=RELU8, progress=False)
    assert [(r["op"], r["impl"]) for r in rows] == [
        ("relu", "sigma"),
        ("relu", "fusefss"),
        ("tr", "sigma"),
        ("tr", "fusefss"),
        ("relu8", "fusefss"),
    ]
    assert all(r["exact"] for r in rows)
    with pytest.raises(fusefss.FusefssError, match="unknown operator"):
        fusefss.bench_ops(ops=["nope"])


def test_bench_ops_rows_are_the_cli_rows(fusefss_bin: str) -> None:
    args = dict(impl="both", ops=["relu", "gelu"], elements=512, reps=1)
    ours = fusefss.bench_ops(**args, progress=False)  # type: ignore[arg-type]
    cli = run_cli(fusefss_bin, "bench", "ops", "--impl", "both", "--ops", "relu,gelu", "--elements", "512", "--reps", "1", "--json")
    assert [sorted(r) for r in ours] == [sorted(r) for r in cli]
    assert [[r.get(k) for k in STABLE_OPS] for r in ours] == [[r.get(k) for k in STABLE_OPS] for r in cli]


def test_bench_model_rows_are_the_cli_rows(fusefss_bin: str) -> None:
    ours = fusefss.bench_model(model="bert-tiny", seq=8, layers=1, impl="both", reps=1, warmup=0, progress=False)
    cli = run_cli(fusefss_bin, "bench", "model", "--seq", "8", "--layers", "1", "--impl", "both", "--reps", "1", "--warmup", "0", "--json")
    assert [r["impl"] for r in ours] == ["fusefss", "sigma"]
    assert all(r["exact"] for r in ours)
    assert [sorted(r) for r in ours] == [sorted(r) for r in cli]
    assert [[r[k] for k in STABLE_MODEL] for r in ours] == [[r[k] for k in STABLE_MODEL] for r in cli]


def test_bench_model_refuses_what_the_cli_refuses() -> None:
    with pytest.raises(fusefss.FusefssError, match="reps"):
        fusefss.bench_model(seq=4, layers=1, reps=0, warmup=0, progress=False)
    with pytest.raises(fusefss.FusefssError, match="invalid value"):
        fusefss.bench_model(model="bert-huge")
