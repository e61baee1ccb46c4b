#!/usr/bin/env python3
"""Regenerate the tables of docs/benchmarks.md from the runs kept in results/.

A run is the `--json` output of one `fusefss bench ...` (or `fusefss soak`) invocation, or of
a scripted set of them, kept as results/<YYYY-MM-DD>-<short commit>-<what>.jsonl with one
JSON object per line (results/README.md). In the document, a generated table sits between

    <!-- table:<what> -->
    ...
    <!-- /table -->

and is rewritten from the newest run named `<what>` (by the date in the file name, then by
the time of its commit in git, then by the file name). The renderer follows the kind of the rows: `bench generate`, `soak`,
`bench fss`, `bench ops`, `bench model` or `bench paper`; a single-implementation `bench ops` table also
shows SIGMA's own CPU build from results/data/sigma-cpu-ops.jsonl. A marker with no run yet
keeps what it holds. The prose outside the markers is never touched.

Usage:
    python3 scripts/bench_tables.py            rewrite the document, say which run fed which table
    python3 scripts/bench_tables.py --check    exit 1 if the document is not what the runs give

Python 3.11, standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})-([0-9a-f]{7,40})-([a-z0-9][a-z0-9._-]*)\.jsonl$")
MARKER = re.compile(r"<!-- table:([a-z0-9._-]+) -->(.*?)<!-- /table -->", re.S)
SIGMA_CPU = Path("data") / "sigma-cpu-ops.jsonl"  # SIGMA's own CPU build, measured (reference rows)

# The fields that identify each kind of row, and the ones its table reads.
KINDS = {
    "generate": ({"prompt_len", "per_token_ms"},
                 {"model", "impl", "prompt_len", "new_tokens", "n", "f", "prefill_ms", "per_token_ms",
                  "keygen_ms", "prefill_key_bytes", "key_bytes_per_token", "comm_bytes_per_token",
                  "rounds_per_token", "peak_rss_bytes", "exact", "tokens_match_float"}),
    "soak": ({"queries", "fault_kinds"},
             {"queries", "faults", "ok", "failed", "unfaulted_failed", "bundles_spent",
              "bundles_reused", "max_server_rss_bytes", "servers_up", "fault_kinds", "elapsed_s"}),
    "fss": ({"primitive", "eval_ns"},
            {"primitive", "n", "out_bits", "payload_words", "key_bytes", "keygen_ns", "eval_ns",
             "aes_blocks_per_eval", "aes_ns_per_block", "floor_ratio", "batch", "threads"}),
    "ops": ({"op", "key_bytes_per_elem"},
            {"op", "impl", "n", "f", "elements", "shape", "key_bytes_per_elem", "comm_bytes_per_elem",
             "rounds", "keygen_ns_per_elem", "eval_ns_per_elem", "exact", "max_abs_err", "threads"}),
    "paper": ({"kind", "paper_online_ms", "online_ms"},
              {"kind", "model", "impl", "seq", "net", "online_ms", "keygen_ms", "key_bytes", "comm_bytes",
               "rounds", "exact", "peak_rss_bytes", "keys"}),
    "model": ({"seq", "online_ms", "key_bytes"},
              {"model", "impl", "seq", "layers", "n", "f", "online_ms", "keygen_ms", "key_bytes",
               "comm_bytes", "rounds", "exact", "max_abs_err_vs_float", "cosine_vs_float",
               "transport", "net"}),
}
IMPL_NAMES = {"fusefss": "FuseFSS", "sigma": "SIGMA"}


class DataError(Exception):
    """A results file or the document does not follow the conventions."""


@dataclass
class Run:
    path: Path
    date: str
    commit: str
    what: str
    rows: list[dict]

    @property
    def kind(self) -> str:
        kinds = {row_kind(r, self.path, i) for i, r in enumerate(self.rows, 1)}
        if len(kinds) != 1:
            raise DataError(f"{self.path.name}: rows of several kinds ({', '.join(sorted(kinds))})")
        return kinds.pop()


def row_kind(row: dict, path: Path, line: int) -> str:
    for kind, (marks, needed) in KINDS.items():
        if marks <= row.keys():
            missing = needed - row.keys()
            if missing:
                raise DataError(f"{path.name}:{line}: {kind} row without {', '.join(sorted(missing))}")
            return kind
    raise DataError(f"{path.name}:{line}: not a row of a known kind ({', '.join(KINDS)})")


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path.name}:{i}: not JSON: {e}") from None
        if not isinstance(row, dict):
            raise DataError(f"{path.name}:{i}: not a JSON object")
        rows.append(row)
    if not rows:
        raise DataError(f"{path.name}: no rows")
    return rows


def find_runs(results: Path) -> list[Run]:
    runs = []
    for path in sorted(results.glob("*.jsonl")):
        m = RUN_NAME.match(path.name)
        if not m:
            raise DataError(f"{path.name}: not named <YYYY-MM-DD>-<short commit>-<what>.jsonl")
        runs.append(Run(path, m.group(1), m.group(2), m.group(3), read_jsonl(path)))
    return runs


def commit_time(commit: str, repo: Path) -> int:
    """The commit's time (seconds) in the repository at `repo`, 0 if git cannot tell."""
    try:
        out = subprocess.run(["git", "show", "-s", "--format=%ct", commit], cwd=repo, capture_output=True,
                             text=True, check=False)
        return int(out.stdout.strip() or 0)
    except (OSError, ValueError):
        return 0


def newest(runs: list[Run], what: str) -> Run | None:
    """The newest run named `what`: by date, then by the time of its commit, then by name."""
    named = [r for r in runs if r.what == what]
    if not named:
        return None
    return max(named, key=lambda r: (r.date, commit_time(r.commit, r.path.parent), r.path.name))


# ---------------------------------------------------------------------------- formatting --

def num(x: float, digits: int = 2) -> str:
    """Up to `digits` decimals, trailing zeros dropped; integers as integers."""
    if float(x).is_integer():
        return f"{int(x)}"
    return f"{x:.{digits}f}".rstrip("0").rstrip(".")


def sig3(x: float) -> str:
    """Three significant digits, at least (no exponent)."""
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def size(b: float) -> str:
    """Bytes in decimal units (kB = 10^3 B, MB = 10^6 B, GB = 10^9 B)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= scale:
            v = b / scale
            return f"{v:.2f} {unit}" if v < 10 else f"{v:.1f} {unit}"
    return f"{num(b)} B"


def mib(b: float) -> str:
    return f"{b / 2**20:.0f} MiB"


def ms(t: float) -> str:
    """Milliseconds, switching to seconds from 1 s."""
    if t >= 1000:
        s = t / 1000
        return f"{s:.2f} s" if s < 10 else f"{s:.1f} s" if s < 100 else f"{s:.0f} s"
    return f"{t:.0f} ms" if t >= 100 else f"{t:.1f} ms" if t >= 10 else f"{t:.2f} ms"


def us(t: float) -> str:
    """Microseconds (or any small quantity) with two decimals below 10."""
    return f"{t:.2f}" if t < 10 else f"{t:.1f}" if t < 100 else f"{t:.0f}"


def threads(values) -> str:
    ts = sorted(set(values))
    return "one thread" if ts == [1] else f"{'/'.join(map(str, ts))} threads"


def span(lo: float, hi: float) -> str:
    """A range of milliseconds, the unit written once when both ends share it."""
    a, b = ms(lo), ms(hi)
    if a.split()[1] == b.split()[1]:
        a = a.split()[0]
    return f"{a}–{b}"


def err(x: float | None) -> str:
    if x is None:
        return "–"
    mant, exp = f"{x:.2e}".split("e")
    return f"{mant}e{int(exp)}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return ""
    return f"{a / b:.2f}×"


def yes(b: bool) -> str:
    return "yes" if b else "**no**"


def prose(text: str) -> str:
    """A paragraph wrapped as the document's prose is: no break inside a word, after a number
    or around `=` and `+` (the no-break spaces below are not whitespace to textwrap)."""
    nb = "\u00a0"
    text = re.sub(r" ([=+]) ", nb + r"\1" + nb, text)
    text = re.sub(r"(\d) (?=\S)", r"\1" + nb, text)
    lines = textwrap.wrap(text, width=92, break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines).replace(nb, " ")


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def impl_order(rows: list[dict]) -> list[str]:
    seen = list(dict.fromkeys(r["impl"] for r in rows))
    return sorted(seen, key=lambda i: (["fusefss", "sigma"].index(i) if i in IMPL_NAMES else 2, i))


def paired(impls: list[str]) -> bool:
    return "fusefss" in impls and "sigma" in impls


def source(run: Run) -> str:
    return f"From `results/{run.path.name}` (run of {run.date} at commit `{run.commit}`)"


# ----------------------------------------------------------------------------- renderers --

def render_generate(run: Run, _results: Path) -> str:
    out = []
    groups: dict[tuple, list[dict]] = {}
    for r in run.rows:
        key = (r["model"], r["prompt_len"], r["new_tokens"], r["n"], r["f"],
               r.get("transport", "mem"), r.get("net", "none"), r.get("keys"))
        groups.setdefault(key, []).append(r)
    for (model, plen, new, n, f, transport, net, keys), rows in groups.items():
        by = {}
        for r in rows:
            if r["impl"] in by:
                raise DataError(f"{run.path.name}: two {model} rows for {r['impl']}")
            by[r["impl"]] = r
        impls = impl_order(rows)
        where = f"keys {'on disk' if keys == 'disk' else 'in memory'}, " if keys else ""
        out.append(f"{source(run)}: `{model}`, n = {n}, f = {f}, a prompt of {plen} tokens and "
                   f"{new} new tokens; transport `{transport}`, network `{net}`, {where}"
                   f"sizes in decimal units (MB = 10^6 B).")
        metrics = [
            ("per-token online (median)", "per_token_ms", ms, True),
            ("prefill online", "prefill_ms", ms, True),
            ("rounds per token", "rounds_per_token", num, True),
            ("key per token (one party)", "key_bytes_per_token", size, True),
            ("prefill key", "prefill_key_bytes", size, True),
            ("communication per token", "comm_bytes_per_token", size, True),
            ("key generation, whole session", "keygen_ms", ms, True),
            ("peak memory (process)", "peak_rss_bytes", size, True),
            ("exact (every step)", "exact", yes, False),
            ("argmax as f64 (teacher-forced)", "tokens_match_float", lambda v: f"{v:.3f}", False),
        ]
        header = [""] + [IMPL_NAMES.get(i, i) for i in impls]
        if paired(impls):
            header.append("FuseFSS / SIGMA")
        body = []
        for label, field, fmt, has_ratio in metrics:
            line = [label] + [fmt(by[i][field]) for i in impls]
            if paired(impls):
                line.append(ratio(by["fusefss"][field], by["sigma"][field]) if has_ratio else "")
            body.append(line)
        out.append(table(header, body))
        layers = sorted({l for r in rows for l in r.get("key_bytes_per_token_by_layer", {})}
                        | {l for r in rows for l in r.get("online_ms_per_token_by_layer", {})})
        if layers:
            out.append("Per decode step, by layer type (mean over the steps; computation is the "
                       "slower server's):")
            out.append(by_layer(by, impls, layers, "key_bytes_per_token_by_layer", size,
                                "online_ms_per_token_by_layer", ms, "key per token", "computation per token"))
    return "\n\n".join(out)


def by_layer(by: dict, impls: list[str], layers: list[str], kfield: str, kfmt, tfield: str, tfmt,
             klabel: str, tlabel: str) -> str:
    def cell(impl: str, field: str, layer: str, fmt) -> str:
        v = by[impl].get(field, {}).get(layer)
        return "–" if v is None else fmt(v)

    def value(impl: str, field: str, layer: str):
        return by[impl].get(field, {}).get(layer)

    if paired(impls):
        header = ["layer", f"{klabel} (F / S)", "×", f"{tlabel} (F / S)", "×"]
        body = [[l,
                 f"{cell('fusefss', kfield, l, kfmt)} / {cell('sigma', kfield, l, kfmt)}",
                 ratio(value("fusefss", kfield, l), value("sigma", kfield, l)),
                 f"{cell('fusefss', tfield, l, tfmt)} / {cell('sigma', tfield, l, tfmt)}",
                 ratio(value("fusefss", tfield, l), value("sigma", tfield, l))] for l in layers]
    else:
        header = ["layer"] + [f"{lab}, {IMPL_NAMES.get(i, i)}" for i in impls for lab in (klabel, tlabel)]
        body = [[l] + [c for i in impls for c in (cell(i, kfield, l, kfmt), cell(i, tfield, l, tfmt))]
                for l in layers]
    return table(header, body)


def render_soak(run: Run, _results: Path) -> str:
    rows = run.rows
    header = [""] + ([f"run {i}" for i in range(1, len(rows) + 1)] if len(rows) > 1 else ["value"])
    metrics = [
        ("queries", lambda r: f"{r['queries']}"),
        ("queries with a fault", lambda r: f"{r['faults']}"),
        ("faults by kind", lambda r: ", ".join(f"{k} {v}" for k, v in sorted(r["fault_kinds"].items()))),
        ("answered, matching plaintext", lambda r: f"{r['ok']}"),
        ("failed", lambda r: f"{r['failed']}"),
        ("failed without a fault (must be 0)", lambda r: f"{r['unfaulted_failed']}"),
        ("bundles spent", lambda r: f"{r['bundles_spent']}"),
        ("bundles used twice (must be 0)", lambda r: f"{r['bundles_reused']}"),
        ("servers' peak memory", lambda r: mib(r["max_server_rss_bytes"])),
        ("both servers up at the end", lambda r: yes(r["servers_up"])),
        ("elapsed", lambda r: ms(r["elapsed_s"] * 1000)),
    ]
    body = [[label] + [fmt(r) for r in rows] for label, fmt in metrics]
    return f"{source(run)}:\n\n{table(header, body)}"


def render_fss(run: Run, _results: Path) -> str:
    rows = run.rows
    aes = statistics.median(r["aes_ns_per_block"] for r in rows)
    point_batches = sorted({r["batch"] for r in rows if "full_domain" not in r["primitive"]})
    header = ["primitive", "n", "out", "K", "key B", "keygen ns", "eval ns", "AES/eval", "× floor"]
    body = []
    for r in rows:
        name = r["primitive"] + (f" (e = {r['et_levels']})" if r.get("et_levels") is not None else "")
        full = "full_domain" in r["primitive"]
        body.append([name, f"{r['n']}", f"{r['out_bits']}", f"{r['payload_words']}", f"{r['key_bytes']}",
                     f"{r['keygen_ns']:.0f}", sig3(r["eval_ns"]) + (" per entry" if full else ""),
                     num(r["aes_blocks_per_eval"], 3), f"{r['floor_ratio']:.2f}"])
    batches = ", ".join(str(b) for b in point_batches) or "–"
    return (f"{source(run)}: {threads(r['threads'] for r in rows)}, batches of {batches} keys "
            f"(full-domain rows: enough keys for 2^20 entries), batched fixed-key AES at "
            f"{aes:.2f} ns per block in the same run. One party's key bytes; key generation per key "
            f"(both parties' keys); evaluation per point (full domain: per table entry).\n\n"
            + table(header, body))


def sigma_cpu(results: Path) -> dict[tuple[str, int], dict]:
    path = results / SIGMA_CPU
    if not path.exists():
        return {}
    return {(r["op"], r["n"]): r for r in read_jsonl(path)}


def render_ops(run: Run, results: Path) -> str:
    rows = run.rows
    impls = impl_order(rows)
    ns = sorted({r["n"] for r in rows})
    fs = sorted({r["f"] for r in rows})
    ops = list(dict.fromkeys((r["op"], r["n"]) for r in rows))
    at = {}
    for r in rows:
        if (r["op"], r["n"], r["impl"]) in at:
            raise DataError(f"{run.path.name}: two {r['impl']} rows for {r['op']} at n = {r['n']}")
        at[(r["op"], r["n"], r["impl"])] = r

    def label(op: str, n: int) -> str:
        return f"{op} (n = {n})" if len(ns) > 1 else op
    head = (f"{source(run)}: n = {'/'.join(map(str, ns))}, f = {'/'.join(map(str, fs))}, "
            f"{threads(r['threads'] for r in rows)} per party; per element, one party's key, "
            f"communication sent + received by one party, the slower party's evaluation time; "
            f"max err is the plaintext reference's against f64.")

    def ev(r: dict) -> str:
        return us(r["eval_ns_per_elem"] / 1000)

    if paired(impls):
        header = ["op", "key B/el (F / S)", "×", "comm B/el (F / S)", "×", "rounds (F / S)",
                  "eval µs/el (F / S)", "max err (F / S)", "exact", "FuseFSS backend", "shape"]
        body = []
        for op, n in ops:
            fr, sr = at.get((op, n, "fusefss")), at.get((op, n, "sigma"))

            def both(fmt, field):
                return f"{fmt(fr[field]) if fr else '–'} / {fmt(sr[field]) if sr else '–'}"

            def rat(field):
                return ratio(fr[field], sr[field]) if fr and sr else ""

            present = [r for r in (fr, sr) if r]
            def two(v: float) -> str:
                return f"{v:.2f}"

            body.append([label(op, n),
                         both(two, "key_bytes_per_elem"), rat("key_bytes_per_elem"),
                         both(two, "comm_bytes_per_elem"), rat("comm_bytes_per_elem"),
                         both(str, "rounds"),
                         f"{ev(fr) if fr else '–'} / {ev(sr) if sr else '–'}",
                         both(err, "max_abs_err"),
                         yes(all(r["exact"] for r in present)),
                         (fr or {}).get("backend") or "",
                         (sr or fr)["shape"]])
        return f"{head} F = FuseFSS (compiled), S = the SIGMA baseline, × = F / S.\n\n" + table(header, body)

    ref = sigma_cpu(results)
    with_ref = any((r["op"], r["n"]) in ref for r in rows)
    header = ["op", "key B/el"] + (["SIGMA-CPU"] if with_ref else []) + ["comm B/el"] + \
        (["SIGMA-CPU"] if with_ref else []) + ["rounds"] + (["SIGMA-CPU"] if with_ref else []) + \
        ["eval µs/el"] + (["SIGMA-CPU"] if with_ref else []) + ["exact", "max err", "shape"]
    notes: list[str] = []
    body = []
    for r in rows:
        c = ref.get((r["op"], r["n"]))

        def refcell(field, fmt):
            if not with_ref:
                return []
            if not c:
                return ["–"]
            return [("~" if c.get("approx") else "") + fmt(c[field])]

        mark = ""
        if c and c.get("note"):
            if c["note"] not in notes:
                notes.append(c["note"])
            mark = f" [{notes.index(c['note']) + 1}]"
        body.append([label(r["op"], r["n"]) + mark,
                     f"{r['key_bytes_per_elem']:.2f}", *refcell("key_bytes_per_elem", num),
                     f"{r['comm_bytes_per_elem']:.2f}", *refcell("comm_bytes_per_elem", num),
                     f"{r['rounds']}", *refcell("rounds", str),
                     ev(r), *refcell("eval_us_per_elem", us),
                     yes(r["exact"]), err(r["max_abs_err"]), r["shape"]])
    who = ", ".join(IMPL_NAMES.get(i, i) for i in impls)
    text = f"{head} Implementation: {who}.\n\n" + table(header, body)
    if with_ref:
        text += (f"\n\nSIGMA-CPU: SIGMA's own CPU build, measured on this kind of machine "
                 f"(`results/{SIGMA_CPU.as_posix()}`, from docs/design/baselines.md §6; its times are "
                 f"minimums over runs with two threads per party on a loaded machine, 2–5.5× too "
                 f"high; ~ marks sums of measured parts).")
        text += "".join(f" [{i}] {n}." for i, n in enumerate(notes, 1))
    return text


def render_model(run: Run, _results: Path) -> str:
    rows = run.rows
    header = ["model", "seq", "layers", "impl", "transport", "net", "online", "AES floor", "keygen", "key",
              "comm", "rounds", "exact", "max err vs f64", "cosine vs f64"]
    body = []
    for r in rows:
        runs = r.get("online_ms_runs") or [r["online_ms"]]
        online = ms(r["online_ms"])
        if len(runs) > 1:
            online += f" ({span(min(runs), max(runs))}, {len(runs)} runs)"
        floor = "–"
        if r.get("aes_blocks") is not None and r.get("aes_ns_per_block"):
            floor = ms(r["aes_blocks"] * r["aes_ns_per_block"] / 1e6)
        body.append([r["model"], f"{r['seq']}", f"{r['layers']}", r["impl"], r["transport"], r["net"],
                     online, floor, ms(r["keygen_ms"]), size(r["key_bytes"]), size(r["comm_bytes"]),
                     f"{r['rounds']}", yes(r["exact"]), err(r["max_abs_err_vs_float"]),
                     f"{r['cosine_vs_float']:.6f}"])
    if any("key_bytes_each" in r for r in rows):
        key = ("the larger party's key (FuseFSS keys as stored in a bundle, seeded by the revision of the "
               "run's commit: CHANGELOG.md)")
    else:
        key = "one party's key"
    floor_note = ("; AES floor is the AES blocks one server encrypts online times the AES time per block "
                  "measured in the same run" if any(r.get("aes_blocks") is not None for r in rows) else "")
    out = [f"{source(run)}: both servers in one process; {key} and one party's communication (sent + "
           f"received); online is the median of the timed runs{floor_note}; sizes in decimal units.",
           table(header, body)]

    groups: dict[tuple, dict[str, list[dict]]] = {}
    for r in rows:
        key = (r["model"], r["seq"], r["layers"], r["transport"], r["net"])
        groups.setdefault(key, {}).setdefault(r["impl"], []).append(r)
    pairs = []
    for key, by in groups.items():
        for k, (fr, sr) in enumerate(zip(by.get("fusefss", []), by.get("sigma", [])), 1):
            pairs.append((key, k, fr, sr))
    if pairs:
        ratio_rows = [[m, f"{s}", f"{l}", t, n, f"{k}", ratio(fr["online_ms"], sr["online_ms"]),
                       ratio(fr["keygen_ms"], sr["keygen_ms"]), ratio(fr["key_bytes"], sr["key_bytes"]),
                       ratio(fr["comm_bytes"], sr["comm_bytes"]), ratio(fr["rounds"], sr["rounds"])]
                      for (m, s, l, t, n), k, fr, sr in pairs]
        out.append("FuseFSS / SIGMA (a set is the k-th FuseFSS row with the k-th SIGMA row of a "
                   "configuration):")
        out.append(table(["model", "seq", "layers", "transport", "net", "set", "online", "keygen", "key",
                          "comm", "rounds"], ratio_rows))
        for key, by in groups.items():
            sets = list(zip(by.get("fusefss", []), by.get("sigma", [])))
            if len(sets) > 1:
                rs = [f["online_ms"] / s["online_ms"] for f, s in sets]
                m, s, l, t, n = key
                out.append(f"{m}, seq {s}, `{t}`/`{n}`: online FuseFSS / SIGMA over {len(rs)} sets: median "
                           f"{statistics.median(rs):.3f}×, {sum(x <= 0.8 for x in rs)} of {len(rs)} at or "
                           f"below 0.80×.")
    if len(pairs) == 1:
        _, _, fr, sr = pairs[0]
        by = {"fusefss": fr, "sigma": sr}
        layers = sorted(set(fr.get("time_by_layer_ms", {})) | set(sr.get("time_by_layer_ms", {}))
                        | set(fr.get("key_bytes_by_layer", {})) | set(sr.get("key_bytes_by_layer", {})))
        if layers:
            out.append("By layer type (computation is the slower server's, in the median run):")
            out.append(by_layer(by, ["fusefss", "sigma"], layers, "key_bytes_by_layer", size,
                                "time_by_layer_ms", ms, "key", "computation"))
    return "\n\n".join(out)


def change(sigma: float | None, fusefss: float | None) -> str:
    if not sigma or fusefss is None:
        return "–"
    return f"{100.0 * (fusefss / sigma - 1.0):+.0f} %"


def render_paper(run: Run, _results: Path) -> str:
    """`bench paper`: the paper's Table 1 (SIGMA / FuseFSS side by side, our change next to the
    paper's) and the BERT-base sequence sweep."""
    out = [f"{source(run)}: both servers in one process, one core each; one party's key and "
           f"communication; the paper's figures (GPU, its own LAN) beside ours as changes, "
           f"FuseFSS against SIGMA. Sizes in decimal units."]
    pairs: dict[tuple, dict[str, dict]] = {}
    for r in run.rows:
        pairs.setdefault((r["kind"], r["model"], r["seq"], r["net"]), {})[r["impl"]] = r
    table_rows, sweep_rows = [], []
    for (kind, model, seq, net), by in pairs.items():
        s, f = by.get("sigma"), by.get("fusefss")
        if not s or not f:
            continue
        exact = "yes" if s["exact"] and f["exact"] else "**no**"
        ours_speed = f"{s['online_ms'] / f['online_ms']:.2f}×"
        paper_speed = (f"{s['paper_online_ms'] / f['paper_online_ms']:.2f}×"
                       if s.get("paper_online_ms") and f.get("paper_online_ms") else "–")
        if kind == "sweep":
            sweep_rows.append([f"{seq}", net, ms(s["online_ms"]), ms(f["online_ms"]), ours_speed, paper_speed,
                               size(s["key_bytes"]), size(f["key_bytes"]), f["keys"], exact])
            continue
        table_rows.append([
            model, f"{seq}", net,
            f"{ms(s['online_ms'])} / {ms(f['online_ms'])}", ours_speed, paper_speed,
            f"{size(s['comm_bytes'])} / {size(f['comm_bytes'])}",
            change(s["comm_bytes"], f["comm_bytes"]), change(s.get("paper_comm_bytes"), f.get("paper_comm_bytes")),
            f"{s['rounds']} / {f['rounds']}", ratio(f["rounds"], s["rounds"]),
            f"{size(s['key_bytes'])} / {size(f['key_bytes'])}",
            change(s["key_bytes"], f["key_bytes"]), change(s.get("paper_key_bytes"), f.get("paper_key_bytes")),
            f"{ms(s['keygen_ms'])} / {ms(f['keygen_ms'])}", change(s["keygen_ms"], f["keygen_ms"]),
            exact, size(max(s["peak_rss_bytes"], f["peak_rss_bytes"])), f["keys"]])
    if table_rows:
        out.append(table(["model", "seq", "net", "online S / F", "speed-up", "paper", "comm S / F", "comm",
                          "paper", "rounds S / F", "F/S", "key S / F", "key", "paper", "keygen S / F",
                          "keygen", "exact", "peak RSS", "keys"], table_rows))
    if sweep_rows:
        out.append("BERT-base by sequence length:")
        out.append(table(["seq", "net", "online SIGMA", "online FuseFSS", "speed-up", "paper", "key SIGMA",
                          "key FuseFSS", "keys", "exact"], sweep_rows))
    return "\n\n".join(out)


RENDER = {"generate": render_generate, "soak": render_soak, "fss": render_fss, "ops": render_ops,
          "paper": render_paper, "model": render_model}


# ---------------------------------------------------------------------------------- main --

def regenerate(doc: str, runs: list[Run], results: Path) -> tuple[str, list[str], list[str]]:
    """The document with every table rewritten; what fed what; the tables that changed."""
    report, changed = [], []
    names = [m.group(1) for m in MARKER.finditer(doc)]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise DataError(f"tables marked twice: {', '.join(sorted(dup))}")
    if doc.count("<!-- table:") != len(names):
        raise DataError("a <!-- table:... --> marker without its <!-- /table --> (or a malformed name)")

    def replace(m: re.Match) -> str:
        name, body = m.group(1), m.group(2)
        run = newest(runs, name)
        if run is None:
            report.append(f"table:{name}: no run named '{name}' in results/; kept as written")
            return m.group(0)
        blocks = RENDER[run.kind](run, results).strip("\n").split("\n\n")
        text = "\n\n".join(b if b.startswith("|") else prose(b) for b in blocks)
        new = "\n" + text + "\n\n"
        shown = run.path.relative_to(ROOT) if run.path.is_relative_to(ROOT) else run.path
        report.append(f"table:{name} <- {shown}")
        if new != body:
            changed.append(name)
        return f"<!-- table:{name} -->{new}<!-- /table -->"

    return MARKER.sub(replace, doc), report, changed


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the document is out of date")
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    ap.add_argument("--results", type=Path, default=ROOT / "results")
    a = ap.parse_args(argv)
    try:
        doc = a.doc.read_text(encoding="utf-8")
        runs = find_runs(a.results)
        for r in runs:
            if r.kind not in RENDER:
                raise DataError(f"{r.path.name}: no table for rows of kind {r.kind}")
        new, report, changed = regenerate(doc, runs, a.results)
    except (DataError, OSError) as e:
        print(f"bench_tables: {e}", file=sys.stderr)
        return 2
    for line in report:
        print(line)
    if a.check:
        if new != doc:
            print(f"{a.doc.name} is out of date: {', '.join(changed)}; run python3 scripts/bench_tables.py",
                  file=sys.stderr)
            return 1
        print(f"{a.doc.name} is up to date")
        return 0
    if new != doc:
        a.doc.write_text(new, encoding="utf-8")
        print(f"{a.doc.name}: rewrote {', '.join(changed)}")
    else:
        print(f"{a.doc.name}: up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
