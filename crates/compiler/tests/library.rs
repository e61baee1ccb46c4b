//! The operator library compiled: every input under edge masks at small widths and scales,
//! random and edge inputs at n = 37 and 50 with the real scale.

mod common;

use common::{all_options, exhaustive, full_width};
use compiler::CompileOptions;
use compiler::library::*;
use compiler::spec::OperatorSpec;

/// `s` with [`OperatorSpec::slack`]: read only on inputs below a quarter of the ring.
fn slack(mut s: OperatorSpec) -> OperatorSpec {
    s.slack = true;
    s
}

fn small() -> Vec<OperatorSpec> {
    vec![
        relu(8, 12),
        slack(relu(8, 12)),
        slack(gelu(10, 14, 4, GeluForm::Erf)),
        slack(gelu_rows(12, 14, 4, GeluForm::Erf, 2)),
        slack(gelu_rows_fine(12, 14, 4, GeluForm::Erf, 2)),
        slack(silu_rows(12, 13, 3, 1)),
        gelu(10, 14, 4, GeluForm::Erf),
        gelu(11, 11, 4, GeluForm::Tanh),
        silu(11, 13, 3),
        gelu_rows(12, 14, 4, GeluForm::Erf, 2),
        silu_rows(12, 13, 3, 1),
        sigmoid(10, 12, 4),
        tanh(9, 12, 4),
        nexp(10, 14, 4),
        nexp_rows(10, 14, 4, 2),
        nexp_rows_nonneg(10, 14, 4, 2),
        nexp_interp(9, 12, 3, 2, 2),
        reciprocal(4, 8, 12),
        reciprocal_grid(4, 8, 12, 2),
        rsqrt(12, 14, 2, 4),
        rsqrt_with_floor(12, 14, 2, 4, 1),
        rsqrt_bits(12, 14, 3, 8, 5),
        rsqrt_grid(12, 13, 2, 4, 4, 2),
        ars(9, 3, false),
        ars(9, 3, true),
        truncate(9, 4),
        clip(8, -9, 17),
    ]
}

#[test]
fn every_backend_on_every_input_at_small_widths() {
    for (i, s) in small().iter().enumerate() {
        s.validate().unwrap();
        exhaustive(s, CompileOptions::default(), i as u64);
        for (j, o) in all_options(s).into_iter().enumerate() {
            exhaustive(s, o, (100 * i + j) as u64);
        }
    }
}

/// Row tables with the comparison split at the rows, as the models compile them, at the
/// smallest widths whose rows are dense enough to be read from windows: GeLU's rows around 0
/// form one window across the top of the ring, `e^{−x}`'s one plain window.
#[test]
fn split_row_tables_read_from_windows_at_small_width() {
    let split = CompileOptions { split: Some(true), ..CompileOptions::default() };
    let specs =
        [gelu_rows(14, 16, 6, GeluForm::Erf, 1), nexp_rows(12, 16, 6, 1), nexp_rows_nonneg(12, 16, 6, 1)];
    for (i, s) in specs.iter().enumerate() {
        exhaustive(s, split, 700 + i as u64);
    }
}

/// With slack, GeLU's rows, its sign and the wrap of its ReLU part are one window of high
/// positions around `2^{n−2}`: no point elsewhere (without slack the sign's threshold sits
/// at the far side of the ring, a walk of its own), and exact on every input it is meant for.
#[test]
fn slack_gelu_reads_one_window() {
    let split = CompileOptions { split: Some(true), ..CompileOptions::default() };
    let (n, f, s) = (14, 6, 1);
    let spec = slack(gelu_rows(n, 16, f, GeluForm::Erf, s));
    let program = compiler::compile(&spec, split).unwrap();
    let high = program.families.iter().find(|fam| fam.shift == s).expect("a high family");
    let betas: Vec<u64> = high.points.iter().map(|p| p.1).collect();
    let (lo, hi) = (*betas.iter().min().unwrap(), *betas.iter().max().unwrap());
    let rows = (8u64 << f) >> s;
    assert!(hi - lo <= rows + 2, "points {lo}..={hi} for {rows} rows");
    let plain = compiler::compile(&gelu_rows(n, 16, f, GeluForm::Erf, s), split).unwrap();
    let far = plain.families.iter().find(|fam| fam.shift == s).unwrap().points.iter().map(|p| p.1);
    assert!(far.clone().max().unwrap() - far.min().unwrap() > 1 << (n - s - 2));
    exhaustive(&spec, split, 710);
    full_width(&spec, CompileOptions::default(), 300, 711);
}

/// GeLU's rows with the two beside its kink halved, as the models read them: the split stays
/// at the rows (the halved rows' edges are a row of the input shifted by half a row, read
/// through two leaves that pick an equality bit by a public bit of `x̂`), exact on every input
/// at a small width and on random and edge inputs at n = 37 and 50.
#[test]
fn halved_kink_rows_keep_the_split_at_the_rows() {
    let split = CompileOptions { split: Some(true), ..CompileOptions::default() };
    let spec = slack(gelu_rows_fine(14, 16, 6, GeluForm::Erf, 2));
    let p = compiler::compile(&spec, split).unwrap();
    assert_eq!(p.full_width, compiler::predicate::FullWidth::Split(2));
    assert_eq!(p.muxes.len(), 2);
    exhaustive(&spec, split, 720);
    for n in [37u32, 50] {
        let spec = slack(gelu_rows_fine(n - 12, n, 12, GeluForm::Erf, 7));
        let p = compiler::compile(&spec, split).unwrap();
        assert_eq!(p.full_width, compiler::predicate::FullWidth::Split(7));
        full_width(&spec, split, 300, 730 + n as u64);
    }
}

/// Rows of 4 on 8 bits with a bump at odd multiples of 2 over one to four rows of the
/// shifted input (split at the rows, with muxes), and with a lone step there (no half
/// rows: split at 2): exact on every input under edge masks, for every lookup.
#[test]
fn half_rows_at_small_width() {
    let (n, l) = (8u32, 10u32);
    let cases: [(&[u64], &[i128], bool); 4] = [
        (&[30, 34], &[9, -9], true),
        (&[30, 46], &[-5, 5], true),
        (&[6, 14, 22], &[2, 3, -5], true),
        (&[30], &[4], false),
    ];
    for (i, (half, jumps, bump)) in cases.into_iter().enumerate() {
        let mut boundaries: Vec<u64> = (0..64).map(|k| k * 4).collect();
        let mut vals: Vec<i128> = (0..64).map(|k| (k * 37 % 23) as i128 - 11).collect();
        for (&p, &j) in half.iter().zip(jumps) {
            let k = boundaries.partition_point(|&b| b < p);
            boundaries.insert(k, p);
            vals.insert(k, vals[k - 1]);
            vals[k..].iter_mut().for_each(|v| *v += j);
        }
        let pieces = vals
            .iter()
            .map(|&v| compiler::spec::Piece { polys: vec![vec![v, 1]], ..Default::default() })
            .collect();
        let spec = OperatorSpec::of_pieces(format!("half-rows-{i}"), n, l, false, boundaries, pieces);
        spec.validate().unwrap();
        let split = CompileOptions { split: Some(true), ..CompileOptions::default() };
        let p = compiler::compile(&spec, split).unwrap();
        let want = if bump { 2 } else { 1 };
        assert_eq!(p.full_width, compiler::predicate::FullWidth::Split(want), "case {i}");
        assert_eq!(!p.muxes.is_empty(), bump, "case {i}");
        exhaustive(&spec, split, 740 + i as u64);
        exhaustive(&spec, CompileOptions::default(), 750 + i as u64);
    }
}

/// A slack spec is signed, and refuses what it does not support.
#[test]
fn slack_specs_validate() {
    let mut s = slack(relu(8, 12));
    s.validate().unwrap();
    assert!(s.slack_holds(63) && s.slack_holds(256 - 64) && !s.slack_holds(64) && !s.slack_holds(127));
    s.signed = false;
    assert!(s.validate().is_err());
    let o = CompileOptions { lookup: Some(compiler::LookupBackend::Dcf), ..CompileOptions::default() };
    assert!(compiler::compile(&slack(relu(8, 12)), o).is_err());
}

/// A grid whose cells widen octave by octave, cut into runs split at their own alignments
/// (LayerNorm's `1/σ`): from one run per octave or less to one run for the whole grid.
#[test]
fn grouped_splits_at_small_width() {
    let grids =
        [rsqrt_grid(12, 13, 2, 4, 4, 2), rsqrt_grid(13, 15, 3, 8, 3, 1), reciprocal_grid(6, 64, 14, 3)];
    for (i, s) in grids.iter().enumerate() {
        let mut shifts = vec![];
        for w in [1, 3, 5, 12] {
            let o = CompileOptions {
                split: Some(true),
                grouped: Some(w),
                lookup: Some(compiler::LookupBackend::StepBits),
                ..CompileOptions::default()
            };
            let p = compiler::compile(s, o).unwrap();
            shifts.push(p.families.iter().filter(|f| f.shift > 0).count());
            exhaustive(s, o, 800 + 10 * i as u64 + w as u64);
        }
        // Narrower runs, more of them (each with its own high key).
        assert!(shifts.windows(2).all(|w| w[0] >= w[1]) && shifts[0] > 2 && shifts[3] == 1, "{shifts:?}");
    }
}

#[test]
fn fitted_specs_compile_exactly() {
    use compiler::fit::fit;
    for (i, (func, k, d)) in
        [(Function::Gelu, 8, 1), (Function::Sigmoid, 16, 0), (Function::Tanh, 5, 2), (Function::NExp, 7, 1)]
            .into_iter()
            .enumerate()
    {
        let s = fit(func, 12, 3, k, d).unwrap().spec;
        exhaustive(&s, CompileOptions::default(), 500 + i as u64);
    }
}

#[test]
fn full_width_at_37_and_50() {
    for n in [37u32, 50] {
        let f = 12;
        let specs = [
            gelu(n - f, n, f, GeluForm::Erf),
            gelu(n, n, f, GeluForm::Tanh),
            silu(n, n, f),
            nexp(n - f + 2, n, f),
            reciprocal(f, 128, n),
            reciprocal_grid(f, 128, n, 7),
            rsqrt(n, n, f, 1024),
            ars(n, f, true),
            truncate(n, f),
        ];
        for (i, s) in specs.iter().enumerate() {
            full_width(s, CompileOptions::default(), 300, (n as u64) << 8 | i as u64);
        }
        // LayerNorm's rsqrt (the models' grid), split at the grid's floor.
        let d = 384;
        use compiler::composite::{RSQRT_MANTISSA_BITS as M, rsqrt_options};
        let q = rsqrt_bits(n, n, f, d, M);
        full_width(&q, rsqrt_options(n, f, d, M), 300, (n as u64) << 8 | 32);
        full_width(&rsqrt(n, n, f, d), rsqrt_options(n, f, d, 7), 100, (n as u64) << 8 | 33);
        // Softmax's 1/S (the models' grid), in runs.
        let o = CompileOptions {
            split: Some(true),
            grouped: Some(compiler::composite::RECIP_RUN_WINDOW_BITS),
            lookup: Some(compiler::LookupBackend::StepBits),
            ..CompileOptions::default()
        };
        full_width(&reciprocal_grid(f, 128, n, 7), o, 300, (n as u64) << 8 | 34);
        // Row tables, with the comparison split at the rows (the smaller key may not be).
        let rows = [
            slack(gelu_rows(n - f, n, f, GeluForm::Erf, compiler::composite::GELU_ROW_BITS)),
            gelu_rows(n - f, n, f, GeluForm::Erf, 6),
            gelu_rows(n - f, n, f, GeluForm::Tanh, compiler::composite::GELU_ROW_BITS),
            silu_rows(n, n, f, 6),
            nexp_rows(n - f + 2, n, f, 3),
            nexp_rows_nonneg(n - f + 2, n, f, compiler::composite::NEXP_ROW_BITS),
        ];
        for (i, s) in rows.iter().enumerate() {
            let split = CompileOptions { split: Some(true), ..CompileOptions::default() };
            full_width(s, split, 300, (n as u64) << 8 | 64 | i as u64);
            full_width(s, CompileOptions::default(), 100, (n as u64) << 8 | 96 | i as u64);
        }
    }
}

/// `e^{−x}` interpolated in joined rows (`nexp_interp`): within `2^{s−1−t}` ulps of scale
/// `f` plus a little (2 ulps with the bench's rows of `2^7` and 5 more bits; rows of 32 read
/// as steps err by 16), 1 on negative inputs, and exact against its spec at full width.
#[test]
fn interpolated_exp() {
    let f = 12;
    for (n, s, t, bound) in [(37u32, 7u32, 5u32, 2.05), (50, 6, 5, 1.05)] {
        let spec = nexp_interp(n - f + 2, n, f, s, t);
        spec.validate().unwrap();
        let one = (1u64 << f) as f64;
        let worst = (0..32u64 << f)
            .map(|x| {
                (spec.eval(x).arith[0] as f64 / (1u64 << t) as f64 - (-(x as f64) / one).exp() * one).abs()
            })
            .fold(0.0, f64::max);
        assert!(worst <= bound, "n = {n}: error {worst} ulps");
        let neg = (1u64 << (n - f + 2)) - 5;
        assert_eq!(spec.eval(neg).arith[0], 1u64 << (f + t));
        let split = CompileOptions { split: Some(true), ..CompileOptions::default() };
        full_width(&spec, split, 300, n as u64);
    }
}

/// Softmax's `e^{−x}` agrees with the signed spec on every non-negative input, reads 0
/// above, and has one interval fewer (no sign boundary).
#[test]
fn nonneg_exp_rows_match_below_the_sign() {
    let (a, b) = (nexp_rows(12, 16, 6, 1), nexp_rows_nonneg(12, 16, 6, 1));
    for x in 0..1u64 << 12 {
        let want = if x < 1 << 11 { a.eval(x).arith } else { vec![0] };
        assert_eq!(b.eval(x).arith, want, "x = {x}");
    }
    assert_eq!(b.boundaries.len() + 1, a.boundaries.len());
}

/// A truncation fused into the residual activations that read it ([`of_product`]): every
/// product in the slack range under every edge mask at small widths, split at the shift and
/// grouped at the rows, exactly `spec(⌊z / 2^f⌋)`.
#[test]
fn activations_of_a_product_at_small_widths() {
    let specs = [
        (slack(gelu_rows(9, 12, 3, GeluForm::Erf, 1)), 3),
        (slack(gelu_rows(8, 12, 3, GeluForm::Tanh, 2)), 4),
        (slack(silu_rows(8, 11, 2, 1)), 3),
        (slack(relu(7, 11)), 4),
    ];
    for (i, (x_spec, f)) in specs.iter().enumerate() {
        let z_spec = of_product(x_spec, *f);
        z_spec.validate().unwrap();
        let n = x_spec.in_bits;
        for z in (0..1u64 << z_spec.in_bits).filter(|&z| z_spec.slack_holds(z)) {
            let x =
                (((z << (64 - z_spec.in_bits)) as i64 >> (64 - z_spec.in_bits)) >> f) as u64 & ((1 << n) - 1);
            assert_eq!(z_spec.eval(z), x_spec.eval(x), "{} at {z}", z_spec.name);
        }
        for (j, w) in [None, Some(4), Some(12)].into_iter().enumerate() {
            let o = CompileOptions { split: Some(true), grouped: w, ..CompileOptions::default() };
            exhaustive(&z_spec, o, 900 + 10 * i as u64 + j as u64);
        }
    }
}

/// A slack spec's shift ([`ars`] with slack: the wrap of `u = x + 2^{n−2}` is local, only
/// the carry is compared) is exact and costs what the hand-written truncation with slack
/// (`gates::shift::ArsSlack`, SIGMA's two rounds) costs: its stored key within 2 % at n = 37
/// and 50, two rounds.
#[test]
fn a_slack_shift_compiles_to_the_truncation_with_slack() {
    use gates::Gate;
    use gates::keyio::KeySizes;
    let len = 1024;
    let mut r = common::rng(17);
    for (n, f) in [(37u32, 12u32), (50, 12), (12, 3)] {
        let spec = slack(ars(n, f, false));
        spec.validate().unwrap();
        if n == 12 {
            exhaustive(&spec, CompileOptions::default(), 1300);
            continue;
        }
        full_width(&spec, CompileOptions::default(), 300, 1300 + n as u64);
        let masks: Vec<u64> = (0..len).map(|_| fss::rng::Rng::next_u64(&mut r) & ((1u64 << n) - 1)).collect();
        let program = compiler::compile(&spec, CompileOptions::default()).unwrap();
        assert_eq!(program.cost().rounds, 2);
        let gate = compiler::CompiledGate::new(std::sync::Arc::new(program), len);
        let (k, _) = gate.keygen(&[&masks], &masks, &mut r).unwrap();
        let compiled = KeySizes::of(&k).stored_bytes(true)[0];
        let ars = gates::shift::ArsSlack { bits: n, shift: f, out_bits: n, len };
        let (k, _) = ars.keygen(&[&masks], &masks, &mut r).unwrap();
        let hand = KeySizes::of(&k).stored_bytes(true)[0];
        assert!(compiled * 100 <= hand * 102, "n = {n}: {compiled} against {hand} bytes");
    }
    // Past `n − 2` bits the slack range has nothing left to shift.
    let mut spec = slack(ars(12, 3, false));
    spec.phi = Some(compiler::spec::Phi {
        nodes: vec![compiler::spec::Node::Shr { bits: 11 }],
        outputs: vec![compiler::spec::Output::Arith(0)],
    });
    assert!(spec.validate().is_err());
}

/// LayerNorm's `1/σ` grid bounds the normalised product: `composite::norm_product_bits`
/// is the smallest `k` with `√(end − 1)·g < 2^{k−2}` on every cell below `2^{n−1}` (so
/// `|x_j|·(1/σ) < 2^{k−2}` for every row, `x_j² ≤ v`), about `1.21·√d·2^{2f}` (the grid's
/// second row), 30 bits for bert-tiny's rows and 31 for MiniLM's at n = 37. The first row
/// (below the floor) reads its top's value; its old mean of the ends (about `v = 1`'s
/// value halved) would need about `floor/2` bits more.
#[test]
fn rsqrt_grid_bounds_the_normalised_product() {
    use compiler::composite::{RSQRT_MANTISSA_BITS as M, norm_product_bits};
    let f = 12;
    for (n, d) in [(37u32, 128u64), (37, 384), (50, 1024), (50, 48), (37, 8), (50, 3), (64, 4096)] {
        let floor = rsqrt_floor_bits(n, f, d, M);
        let spec = rsqrt_grid_out(n, n, f, d, M, floor, 0);
        let k = norm_product_bits(n, &spec);
        let half = 1u64 << (n - 1);
        let mut worst = 0f64;
        for (i, &start) in spec.boundaries.iter().enumerate().take_while(|(_, s)| **s < half) {
            let end = spec.boundaries.get(i + 1).copied().unwrap_or(half).min(half);
            let g = spec.eval(start).arith[0] as f64;
            worst = worst.max(((end - 1).max(1) as f64).sqrt() * g);
        }
        let ratio = worst / 2f64.powi(k as i32 - 2);
        assert!(ratio <= 1.0 && ratio > 0.5, "n {n} d {d}: k {k}, {ratio}");
        // About 1.21·√d·2^{2f} where rounding the cells' values does not matter (at the top
        // of a wide ring with few columns, `1/σ` is a few ulps over long runs of cells).
        let num = 2f64.powi(2 * f as i32) * (d as f64).sqrt();
        if n <= 50 && d >= 8 {
            assert!(worst < 1.21 * num && worst > 1.1 * num, "n {n} d {d}: {}", worst / num);
        }
        match (n, d) {
            (37, 128) => assert_eq!(k, 30),
            (37, 384) => assert_eq!(k, 31),
            _ => {}
        }
        if floor >= 8 {
            // The first row read as the mean of its ends (about `g(1)/2`) would not fit.
            let g1 = (1u128 << f) as f64 * ((d as f64) * (1u128 << (2 * f)) as f64).sqrt();
            let top = ((1u64 << floor) - 1) as f64;
            assert!(top.sqrt() * g1 / 2.0 > 2f64.powi(k as i32 - 2), "n {n} d {d}");
        }
    }
}
