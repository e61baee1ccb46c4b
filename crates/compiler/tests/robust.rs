//! Compilation on any spec: random specs compiled within their time and run exact on every
//! input; specs past a limit refused at once with [`SpecError::Limit`]; no panic on any JSON
//! text or on any spec that validates.
//!
//! The random specs come from a tape of numbers (`common::random`): widths up to 10 bits run on
//! every input under the edge masks (0, 1, N−1, N/2, N/2−1) and random ones; widths up to 24
//! bits compile within 2 s (or are refused within 1 s) and run on random and edge inputs.
//! `PROPTEST_CASES` sets the cases of the `#[ignore]`d long runs (default 4,000).

mod common;

use std::time::{Duration, Instant};

use common::random::{self, FULL, SMALL, Tape, WIDE};
use common::{exhaustive, full_width, rng, run};
use compiler::compile;
use compiler::program::{CmpBackend, CompileOptions, Limits, LookupBackend, reduced_view_shift};
use compiler::spec::{Measure, OperatorSpec, Site, SpecError};
use fss::rng::Rng;
use proptest::collection::vec;
use proptest::prelude::*;

/// Longest a spec may take to compile, and to be refused.
const COMPILE_TIME: Duration = Duration::from_secs(2);
const REFUSE_TIME: Duration = Duration::from_secs(1);

/// Compile `spec` with `options`: within [`COMPILE_TIME`], or refused with a limit within
/// [`REFUSE_TIME`]. The program, if any.
fn timed_compile(spec: &OperatorSpec, options: CompileOptions) -> Option<compiler::Program> {
    let t = Instant::now();
    let p = compile(spec, options);
    let took = t.elapsed();
    match p {
        Ok(p) => {
            assert!(took <= COMPILE_TIME, "compiled in {took:?}: {}", spec.to_json());
            Some(p)
        }
        Err(e @ SpecError::Limit { .. }) => {
            assert!(took <= REFUSE_TIME, "refused in {took:?} ({e}): {}", spec.to_json());
            None
        }
        Err(e) => panic!("{e}: {}", spec.to_json()),
    }
}

/// Backends forced by `pick` (the default choice for 0): comparison keying, lookup, split.
fn variant(spec: &OperatorSpec, pick: u64) -> CompileOptions {
    let cmp = if pick & 1 == 1 { CmpBackend::PerThreshold } else { CmpBackend::OneKey };
    let lookup = match (pick >> 1) % 5 {
        0 => None,
        1 => Some(LookupBackend::StepBits),
        2 => Some(LookupBackend::IndexLut),
        3 => Some(LookupBackend::Dcf),
        _ => reduced_view_shift(spec).map(|shift| LookupBackend::ReducedView { shift }),
    };
    let split = [None, Some(false), Some(true)][(pick >> 4) as usize % 3];
    CompileOptions { cmp, lookup, split, ..CompileOptions::default() }
}

/// Run `f`; if it panics, panic again with the spec's JSON.
fn showing(spec: &OperatorSpec, f: impl FnOnce()) {
    if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        let msg =
            e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
        panic!("{}\nspec: {}", msg.unwrap_or_default(), serde_json::to_string(spec).unwrap_or_default());
    }
}

/// A small spec on every input under the edge masks, with the default backends and with
/// the variant `pick` when it applies.
fn check_small(spec: &OperatorSpec, pick: u64, seed: u64) {
    showing(spec, || {
        let o = CompileOptions::default();
        if timed_compile(spec, o).is_some() {
            exhaustive(spec, o, seed);
        }
        let v = variant(spec, pick);
        if v != o && compile(spec, v).is_ok() {
            exhaustive(spec, v, seed + 1);
        }
    });
}

/// A wide spec compiled in time, then on random and edge inputs.
fn check_wide(spec: &OperatorSpec, seed: u64) {
    showing(spec, || {
        let o = CompileOptions::default();
        if timed_compile(spec, o).is_some() {
            full_width(spec, o, 200, seed);
        }
    });
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// Cases of a long run: `PROPTEST_CASES`, else `default`.
fn long(default: u32) -> ProptestConfig {
    config(std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default))
}

fn tape() -> impl Strategy<Value = Vec<u64>> {
    vec(any::<u64>(), 60..500)
}

fn small(t: &[u64]) -> OperatorSpec {
    random::spec(&mut Tape::new(t), SMALL)
}

fn wide(t: &[u64]) -> OperatorSpec {
    random::spec(&mut Tape::new(t), WIDE)
}

proptest! {
    #![proptest_config(config(600))]

    #[test]
    fn random_small_specs_are_exact_on_every_input(t in tape(), pick in any::<u64>()) {
        check_small(&small(&t), pick, pick);
    }
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn random_wide_specs_compile_in_time_and_are_exact(t in tape(), seed in any::<u64>()) {
        check_wide(&wide(&t), seed);
    }
}

proptest! {
    #![proptest_config(config(100))]

    #[test]
    fn random_full_width_specs_are_exact(t in tape(), seed in any::<u64>()) {
        check_wide(&random::spec(&mut Tape::new(&t), FULL), seed);
    }
}

proptest! {
    #![proptest_config(long(4000))]

    #[test]
    #[ignore = "long run: cargo test --release -p compiler --test robust -- --ignored"]
    fn long_random_small_specs(t in tape(), pick in any::<u64>()) {
        check_small(&small(&t), pick, pick);
    }

    #[test]
    #[ignore = "long run: cargo test --release -p compiler --test robust -- --ignored"]
    fn long_random_wide_specs(t in tape(), seed in any::<u64>()) {
        check_wide(&wide(&t), seed);
    }

    #[test]
    #[ignore = "long run: cargo test --release -p compiler --test robust -- --ignored"]
    fn long_random_full_width_specs(t in tape(), seed in any::<u64>()) {
        check_wide(&random::spec(&mut Tape::new(&t), FULL), seed);
    }
}

/// The spec of issue 27: signed, 20 bits, 4 intervals, piece formulas over `lt_low`, `msb`,
/// `msb_add` and `lt`, and a `Φ` selecting between `κ` and a piece constant by a formula.
#[test]
fn select_over_piece_formulas_compiles_at_once_and_is_exact() {
    let spec = OperatorSpec::from_json(include_str!("specs/select20.json")).unwrap();
    let p = timed_compile(&spec, CompileOptions::default()).expect("compiles");
    assert_eq!(p.cost().rounds, 2);
    full_width(&spec, CompileOptions::default(), 2000, 27);
}

/// `msb_add` with offset 0 on a 64-bit input is the sign, up to the top input.
#[test]
fn msb_add_of_zero_at_full_width() {
    let mut spec = wide(&[0]);
    spec.in_bits = 64;
    spec.atoms = vec![compiler::spec::Atom::MsbAdd { offset: 0 }, compiler::spec::Atom::MsbAdd { offset: 5 }];
    spec.phi = Some(compiler::spec::Phi {
        nodes: vec![compiler::spec::Node::Atom { index: 0 }, compiler::spec::Node::Atom { index: 1 }],
        outputs: vec![compiler::spec::Output::Bool(0), compiler::spec::Output::Bool(1)],
    });
    spec.validate().unwrap();
    full_width(&spec, CompileOptions::default(), 100, 64);
}

/// A spec whose step functions would take long is refused at once, naming the pieces.
#[test]
fn large_pieces_are_refused_at_once() {
    let n = 24;
    let mut t = rng(1);
    let mut spec = wide(&[0]);
    spec.in_bits = n;
    spec.out_bits = 64;
    spec.boundaries = (0..1u64 << 15).map(|i| i << (n - 15)).collect();
    spec.pieces = spec
        .boundaries
        .iter()
        .map(|_| compiler::spec::Piece {
            polys: (0..8).map(|_| (0..5).map(|_| t.next_u64() as i128).collect()).collect(),
            ..Default::default()
        })
        .collect();
    spec.phi = None;
    spec.validate().unwrap();
    let start = Instant::now();
    let e = compile(&spec, CompileOptions::default()).unwrap_err();
    assert!(start.elapsed() <= REFUSE_TIME, "{:?}", start.elapsed());
    assert!(matches!(e, SpecError::Limit { site: Site::Pieces, measure: Measure::Terms, .. }), "{e}");
}

/// Under a small limit the error names the `Φ` node being lowered, its estimate and the limit.
#[test]
fn limits_name_the_node() {
    let spec = OperatorSpec::from_json(include_str!("specs/select20.json")).unwrap();
    let limits = Limits { terms: 300, ..Limits::default() };
    let e = compile(&spec, CompileOptions { limits, ..CompileOptions::default() }).unwrap_err();
    let SpecError::Limit { site, measure, estimate, limit } = e.clone() else { panic!("{e}") };
    assert_eq!((measure, limit), (Measure::Terms, 300));
    assert!(estimate > limit);
    assert!(matches!(site, Site::Formula(0) | Site::Node { .. } | Site::Pieces), "{e}");
    let words = Limits { words: 3, ..Limits::default() };
    let e = compile(&spec, CompileOptions { limits: words, ..CompileOptions::default() }).unwrap_err();
    assert!(matches!(e, SpecError::Limit { site: Site::Program, measure: Measure::Words, .. }), "{e}");
    let key = Limits { key_bytes: 100, ..Limits::default() };
    let e = compile(&spec, CompileOptions { limits: key, ..CompileOptions::default() }).unwrap_err();
    assert!(matches!(e, SpecError::Limit { measure: Measure::KeyBytes, .. }), "{e}");
    assert!(e.to_string().contains("key bytes"), "{e}");
}

/// Numbers a mutation puts in place of a number: edges of the widths and of the integer
/// types, and values that are not integers.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "7",
    "8",
    "31",
    "32",
    "63",
    "64",
    "65",
    "255",
    "256",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "170141183460469231731687303715884105727",
    "1e309",
    "0.5",
];

/// Other text a mutation inserts: wrong types and stray syntax.
const TOKENS: &[&str] = &[
    "null",
    "true",
    "[]",
    "{}",
    "\"x\"",
    "[0]",
    "[[0]]",
    "{\"atom\": 0}",
    "{\"not\": {\"atom\": 99}}",
    "{\"op\": \"x\"}",
    "{\"op\": \"shr\", \"bits\": 0}",
    ",",
    "]",
    "}",
    "\"",
];

/// `text` with the number runs, characters or slices `t` picks changed.
fn mutate(text: &str, t: &mut Tape) -> String {
    let mut s = text.to_string();
    for _ in 0..1 + t.below(3) {
        let numbers: Vec<(usize, usize)> = number_runs(&s);
        match t.below(5) {
            0..=2 if !numbers.is_empty() => {
                let (a, b) = numbers[t.below(numbers.len() as u64) as usize];
                s.replace_range(a..b, NUMBERS[t.below(NUMBERS.len() as u64) as usize]);
            }
            3 if !s.is_empty() => {
                let at = t.below(s.len() as u64) as usize;
                s.replace_range(at..at + 1, "");
            }
            _ => {
                let at = t.below(s.len() as u64 + 1) as usize;
                s.insert_str(at, TOKENS[t.below(TOKENS.len() as u64) as usize]);
            }
        }
    }
    s
}

/// Byte ranges of the runs of digits and minus signs (the JSON is ASCII).
fn number_runs(s: &str) -> Vec<(usize, usize)> {
    let b = s.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() || b[i] == b'-' {
            let j = (i..b.len()).find(|&j| !(b[j].is_ascii_digit() || b[j] == b'-')).unwrap_or(b.len());
            out.push((i, j));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// Whatever `text` is: parsed, and if it validates, compiled, and if it compiles, run on a
/// few inputs and checked exact.
fn parse_compile_run(text: &str, seed: u64) {
    let Ok(spec) = OperatorSpec::from_json(text) else { return };
    let Some(p) = timed_compile(&spec, CompileOptions::default()) else { return };
    // (Table keys of wide lookups are expanded whole: run small programs only.)
    if p.cost().key_bits > 1 << 16 {
        return;
    }
    let mut r = rng(seed);
    let n = spec.in_bits;
    let m = fss::ring::mask(n);
    let x: Vec<u64> =
        (0..16).map(|i| if i < 4 { (i as u64).wrapping_sub(2) & m } else { r.next_u64() & m }).collect();
    let k: Vec<u64> = (0..16).map(|i| if i % 4 == 0 { m } else { r.next_u64() & m }).collect();
    let x: Vec<u64> = x.into_iter().filter(|&v| spec.slack_holds(v)).collect();
    if !x.is_empty() {
        run(&spec, CompileOptions::default(), &x, &k[..x.len()], &mut r);
    }
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn mutated_specs_never_panic(t in tape(), edits in vec(any::<u64>(), 1..16), wide_spec in any::<bool>()) {
        let spec = if wide_spec { wide(&t) } else { small(&t) };
        let text = mutate(&spec.to_json(), &mut Tape::new(&edits));
        if let Err(e) = std::panic::catch_unwind(|| parse_compile_run(&text, edits[0])) {
            let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
            panic!("{msg}\ntext: {text}");
        }
    }

    #[test]
    fn random_json_never_panics(v in json_value()) {
        let _ = OperatorSpec::from_json(&v.to_string());
    }

    #[test]
    fn specs_of_random_fields_never_panic(v in spec_like()) {
        parse_compile_run(&v.to_string(), 1);
    }
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        "[a-z_]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            vec(("[a-z_]{1,10}", inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// An object with a spec's fields, each a small number, an edge number or an array of them.
fn spec_like() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{Value, json};
    let num = prop_oneof![0u64..70, Just(u64::MAX), Just(1u64 << 63), any::<u64>()].prop_map(Value::from);
    let nums = vec(num.clone(), 0..5).prop_map(Value::Array);
    (num.clone(), num.clone(), any::<bool>(), nums.clone(), vec(nums, 0..4), num).prop_map(
        |(n, l, signed, boundaries, polys, beta)| {
            let pieces: Vec<Value> = match &boundaries {
                Value::Array(b) => b.iter().map(|_| json!({ "polys": polys.clone() })).collect(),
                _ => vec![],
            };
            json!({
                "name": "fields", "in_bits": n, "out_bits": l, "signed": signed,
                "boundaries": boundaries, "pieces": pieces,
                "atoms": [{"kind": "lt", "beta": beta}, {"kind": "msb_add", "offset": beta}],
                "phi": {"nodes": [{"op": "x"}, {"op": "atom", "index": 1}, {"op": "b2a", "a": 1},
                                  {"op": "mul", "a": 0, "b": 2}],
                        "outputs": [{"arith": 3}, {"bool": 1}]}
            })
        },
    )
}
