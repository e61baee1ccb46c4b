//! FuseFSS composites: SIGMA's softmax and normalisations with their nonlinearities
//! compiled (docs/design/paper.md §4). The row max stays a comparison tree and the
//! products and truncations are the shared sub-protocols; `e^{−x}`, the reciprocal and the
//! reciprocal square root are [`library`](crate::library) specs, and the mean's shift is a
//! one-round shift with slack.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use gates::GateError;
use gates::norm::Norm;
use gates::softmax::Softmax;
use gates::unary::{SlackShift, UnaryFamily};

use crate::gate::CompiledGate;
use crate::library;
use crate::program::{CompileOptions, LookupBackend, Program, compile};
use crate::spec::{Kind, OperatorSpec, SpecError};

/// A compiled one-input, one-output operator, for any element count.
#[derive(Clone, Debug)]
pub struct Compiled(pub Arc<Program>);

impl Compiled {
    /// Compile (or reuse) `spec` with the default options.
    ///
    /// # Errors
    /// [`SpecError`] if the spec is invalid or not unary with one arithmetic output.
    pub fn new(spec: &OperatorSpec) -> Result<Compiled, SpecError> {
        Compiled::with_options(spec, CompileOptions::default())
    }

    /// Compile (or reuse) `spec` with `options`.
    ///
    /// # Errors
    /// As [`Compiled::new`], and if the options do not apply to the spec.
    pub fn with_options(spec: &OperatorSpec, options: CompileOptions) -> Result<Compiled, SpecError> {
        let p = compile_cached(spec, options)?;
        if p.outputs != [Kind::Arith] {
            return Err(SpecError::Phi {
                node: 0,
                msg: format!("{} is not a one-output operator", spec.name),
            });
        }
        Ok(Compiled(p))
    }
}

impl UnaryFamily for Compiled {
    type Gate = CompiledGate;

    fn gate(&self, len: usize) -> Result<CompiledGate, GateError> {
        Ok(CompiledGate::new(self.0.clone(), len))
    }
}

/// Compiled programs by spec (JSON) and options.
type Cache = HashMap<(String, CompileOptions), Arc<Program>>;

/// A composite's compiled operator, by the parameters its spec is built from.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Made {
    /// `e^{−x}` of [`softmax_tables`]: input bits, ring, scale.
    Nexp(u32, u32, u32),
    /// `1/S` of [`softmax_tables`]: input scale, scale, columns, ring.
    Recip(u32, u32, u64, u32),
    /// `e^{−x}` of [`softmax_tables_with`], interpolated: input bits, ring, scale.
    NexpInterp(u32, u32, u32),
    /// [`gelu`]: ring, scale, form.
    Gelu(u32, u32, library::GeluForm),
    /// [`silu`]: ring, scale.
    Silu(u32, u32),
    /// [`rsqrt`]: ring, scale, columns, mantissa bits.
    Rsqrt(u32, u32, u64, u32),
    /// [`norm`]'s `1/σ`: ring, scale, columns, mantissa bits, extra bits.
    NormRsqrt(u32, u32, u64, u32, u32),
}

/// `make`'s operator, made once per process for `key`. [`compile_cached`] compiles a spec
/// once, but finds it by the spec itself: building RMSNorm's `1/σ` spec and serialising it
/// took ~2 ms, paid by every normalisation of every program (SmolLM2's 61 per decode step:
/// `perf` of `fusefss bench generate`, most of a step's program build).
fn made(key: Made, make: impl FnOnce() -> Result<Compiled, SpecError>) -> Result<Compiled, SpecError> {
    static MADE: OnceLock<Mutex<HashMap<Made, Compiled>>> = OnceLock::new();
    let all = MADE.get_or_init(Default::default);
    if let Some(c) = all.lock().expect("made lock").get(&key) {
        return Ok(c.clone());
    }
    let c = make()?;
    all.lock().expect("made lock").insert(key, c.clone());
    Ok(c)
}

/// Compile `spec` once per process for each option set: the program is public and
/// mask-independent, so every instance (layer, query) reuses it (docs/design/paper.md §3.8).
///
/// # Errors
/// As [`compile`].
pub fn compile_cached(spec: &OperatorSpec, options: CompileOptions) -> Result<Arc<Program>, SpecError> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let key = (serde_json::to_string(spec).expect("a spec serialises"), options);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache.lock().expect("cache lock").get(&key) {
        return Ok(p.clone());
    }
    let p = Arc::new(compile(spec, options)?);
    cache.lock().expect("cache lock").insert(key, p.clone());
    Ok(p)
}

/// Rows of `2^NEXP_ROW_BITS` ulps for softmax's `e^{−x}` read as steps ([`SoftmaxExp::Rows`],
/// the models' before protocol revision 22; [`library::nexp_rows`]): error
/// at most 16 ulps (3.9e-3 at f = 12; SIGMA's two tables: 6.5e-4), for a window of 32×
/// fewer positions than the exactly rounded [`library::nexp`]. With [`RECIP_MANTISSA_BITS`]
/// = 8 the whole softmax's error is below SIGMA's (`fusefss bench ops --ops softmax --impl
/// both --reps 3`: 1.29e-3 against 2.13e-3 at n = 37, 1.27e-3 against 2.09e-3 at n = 50).
/// Rows of 64 ulps (error 32 ulps) were ~25 % faster (536 against 706 ns per element at
/// n = 37, one run each) for 12 B less key per element, but put the softmax's error above
/// SIGMA's: 2.3e-3–2.7e-3 against 2.1e-3–2.5e-3, and still 2.16e-3 against 2.13e-3 with a
/// 10-bit `1/S` grid. A floating grid (rows of 32 ulps below 0.5, then 64 cells per
/// octave, grouped windows) had rows of 32's error and needed more key and time (n = 37:
/// 1,266 against 971 B and 986 against 706 ns per element), or with one window the same
/// key and time.
pub const NEXP_ROW_BITS: u32 = 5;

/// Mantissa bits of softmax's `1/S` grid ([`library::reciprocal_grid`]): relative error
/// about `2^{−9}`; the grid is read once per row, so 8 bits against 7 cost ~1.5 B of key
/// per element in rows of 128 (`fusefss bench ops --n 37 --ops softmax`: 957.0 → 958.5 B).
pub const RECIP_MANTISSA_BITS: u32 = 8;

/// Runs of softmax's `1/S` grid span at most `2^10` high positions (three runs at n = 37:
/// 678 B of key per row; faster than the reduced view's table, CHANGELOG.md).
pub const RECIP_RUN_WINDOW_BITS: u32 = 10;

/// Softmaxes of at most this many entries run every level of the max tree in one round:
/// the widest level's larger one-round key is small there (a decode step of SmolLM2: 9 heads
/// × up to 113 positions), and the round it saves pays for a two-round truncation elsewhere
/// in the step (`engine::layers::ONE_ROUND_TRUNC_MAX`).
pub const ONE_ROUND_MAX_TREE_MAX: usize = 1024;

/// Levels of a large softmax's max tree (the widest) that keep SIGMA's two-round key: the
/// one-round key ([`gates::cmp::ReluDcf`]) of the second widest cost 65 B per entry more
/// (bert-tiny: 4.3 MB of each server's key; `fusefss bench model`, keys on disk, ~3 ms
/// slower in process) for the round per layer it saves. Three would leave MiniLM at seq 32
/// one round within the rounds FuseFSS is held to (0.55× SIGMA's).
pub const TWO_ROUND_MAX_LEVELS: usize = 2;

/// The softmax of [`Softmax::sigma`] with a compiled `e^{−x}` ([`MODELS_SOFTMAX_EXP`]: on
/// `cmp_bits + 1` bits with slack, `max − x` never being negative nor past `2^{cmp_bits−1}`,
/// joined lines in rows of `2^NEXP_INTERP_ROW_BITS` at [`NEXP_INTERP_EXTRA_BITS`] more
/// fractional bits, [`library::nexp_interp`], the comparison split at the rows), a compiled
/// reciprocal (an octave grid of [`RECIP_MANTISSA_BITS`] read in runs,
/// [`library::reciprocal_grid_in`], on `scale + extra + log2 cols` bits, `cols` rounded up
/// to a power of two), `e^{−x}`, the row sums, `1/S` and their product in
/// `Z_{2^{2·scale + extra + 3}}` ([`Softmax::prob_bits`]: their values stay at most
/// `2^{2·scale + extra}`, so only the final truncation's output is a full ring word:
/// narrower openings and words), and a max tree that runs in `Z_{2^{cmp_bits + 1}}` (all
/// `e^{−x}` reads) with every level but the [`TWO_ROUND_MAX_LEVELS`] widest in one round
/// ([`gates::cmp::ReluDcf`]): those hold three quarters of the comparisons, so they keep
/// SIGMA's smaller two-round key, but in a softmax of at most [`ONE_ROUND_MAX_TREE_MAX`]
/// entries. The product's truncation
/// (by `scale + 5` bits) reads its carry from truth tables with a 10-bit high chunk
/// ([`gates::carry_table::ArsSlackTable`]; a middle chunk would shrink bert-tiny's key by
/// 7 MB more but open two more bits per entry, past the communication FuseFSS is held to).
///
/// # Errors
/// [`SpecError`] for unsupported widths.
pub fn softmax(
    bits: u32,
    cmp_bits: u32,
    scale: u32,
    rows: usize,
    cols: usize,
    causal: bool,
) -> Result<Softmax<Compiled, Compiled>, SpecError> {
    softmax_with(bits, cmp_bits, scale, rows, cols, causal, MODELS_SOFTMAX_EXP)
}

/// How the models' softmax reads `e^{−x}`: joined lines (error 4.9e-4 at f = 12 against
/// SIGMA's 6.5e-4 and 3.9e-3 for rows of 32 ulps read as steps). Against the rows, `fusefss
/// bench ops --ops softmax --softmax-exp rows|interp`: 113 B more key per entry, ~10 %
/// faster, softmax error 1.28e-3 → 5.9e-4 at n = 37 (CHANGELOG.md, twenty-third session).
pub const MODELS_SOFTMAX_EXP: SoftmaxExp = SoftmaxExp::Interp;

/// How a compiled softmax reads `e^{−x}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SoftmaxExp {
    /// Rows of `2^NEXP_ROW_BITS` ulps read as steps, at the softmax's scale (the models'
    /// before protocol revision 22).
    Rows,
    /// Joined lines in rows of `2^NEXP_INTERP_ROW_BITS` ulps at `NEXP_INTERP_EXTRA_BITS`
    /// more fractional bits ([`library::nexp_interp`]): `e^{−x}` within ~2 ulps, for a
    /// wider ring and a final truncation by `scale + NEXP_INTERP_EXTRA_BITS`.
    Interp,
}

/// Rows of [`SoftmaxExp::Interp`]'s `e^{−x}` (`2^7` ulps) and its extra fractional bits
/// (5): error about 2 ulps at the softmax's scale.
pub const NEXP_INTERP_ROW_BITS: u32 = 7;
/// See [`NEXP_INTERP_ROW_BITS`].
pub const NEXP_INTERP_EXTRA_BITS: u32 = 5;

/// [`softmax`] with `e^{−x}` read as `exp` says.
///
/// # Errors
/// [`SpecError`] for unsupported widths.
pub fn softmax_with(
    bits: u32,
    cmp_bits: u32,
    scale: u32,
    rows: usize,
    cols: usize,
    causal: bool,
    exp: SoftmaxExp,
) -> Result<Softmax<Compiled, Compiled>, SpecError> {
    let cols2 = (cols.max(2) as u64).next_power_of_two();
    let extra = if exp == SoftmaxExp::Interp { NEXP_INTERP_EXTRA_BITS } else { 0 };
    // `e^{−x}`, its row sums, `1/S` and their product below `2^{2·scale + extra}` and
    // `cols2·2^{scale + extra}`: a ring of `2·scale + extra + 3` bits (the product's
    // truncation has slack), or one more than the reciprocal reads.
    let prob_bits = (2 * scale + extra + 3).max(scale + extra + cols2.trailing_zeros() + 1).min(bits);
    let (exp, recip) = softmax_tables_with(bits, cmp_bits, scale, cols2, prob_bits, exp)?;
    let levels = (cols.max(1) as u64).next_power_of_two().trailing_zeros() as usize;
    // A small softmax (a decode step's row per head) runs its widest levels in one round too.
    let two_round_levels = if rows * cols > ONE_ROUND_MAX_TREE_MAX { TWO_ROUND_MAX_LEVELS } else { 0 };
    Ok(Softmax {
        bits,
        cmp_bits,
        scale,
        rows,
        cols,
        causal,
        exp,
        recip,
        max_bits: (cmp_bits + 1).min(bits),
        max_dcf_levels: levels.saturating_sub(two_round_levels),
        prob_bits,
        exp_extra: extra,
        table_carry: gates::carry_table::ArsSlackTable::supports(scale + extra),
    })
}

/// The softmax's compiled `e^{−x}` (read on `cmp_bits + 1` bits, as the models read it,
/// [`MODELS_SOFTMAX_EXP`]) and `1/S` (rows summing up to `cols2 = 2^k` entries), both with
/// outputs in `Z_{2^{ring}}` ([`softmax`] passes its narrow ring).
///
/// # Errors
/// [`SpecError`] for unsupported widths.
pub fn softmax_tables(
    bits: u32,
    cmp_bits: u32,
    scale: u32,
    cols2: u64,
    ring: u32,
) -> Result<(Compiled, Compiled), SpecError> {
    softmax_tables_with(bits, cmp_bits, scale, cols2, ring, MODELS_SOFTMAX_EXP)
}

/// [`softmax_tables`] with `e^{−x}` read as `exp` says (with [`SoftmaxExp::Interp`] on
/// `cmp_bits + 1` bits with slack: `max − x < 2^{cmp_bits − 1}` for inputs that fit
/// `cmp_bits − 1` bits; and `1/S` reading its sum at the extra bits' scale).
///
/// # Errors
/// [`SpecError`] for unsupported widths.
pub fn softmax_tables_with(
    bits: u32,
    cmp_bits: u32,
    scale: u32,
    cols2: u64,
    ring: u32,
    exp: SoftmaxExp,
) -> Result<(Compiled, Compiled), SpecError> {
    let split = CompileOptions { split: Some(true), ..CompileOptions::default() };
    let nexp_bits = (cmp_bits + 1).min(bits);
    let (exp, f_in) = match exp {
        SoftmaxExp::Rows => {
            let exp = made(Made::Nexp(nexp_bits, ring, scale), || {
                Compiled::with_options(
                    &library::nexp_rows_nonneg(nexp_bits, ring, scale, NEXP_ROW_BITS),
                    split,
                )
            })?;
            (exp, scale)
        }
        SoftmaxExp::Interp => {
            let (s, t) = (NEXP_INTERP_ROW_BITS, NEXP_INTERP_EXTRA_BITS);
            let exp = made(Made::NexpInterp(nexp_bits, ring, scale), || {
                Compiled::with_options(&library::nexp_interp(nexp_bits, ring, scale, s, t), split)
            })?;
            (exp, scale + t)
        }
    };
    let recip = made(Made::Recip(f_in, scale, cols2, ring), || {
        Compiled::with_options(
            &library::reciprocal_grid_in(f_in, scale, cols2, ring, RECIP_MANTISSA_BITS),
            CompileOptions {
                split: Some(true),
                grouped: Some(RECIP_RUN_WINDOW_BITS),
                lookup: Some(LookupBackend::StepBits),
                ..CompileOptions::default()
            },
        )
    })?;
    Ok((exp, recip))
}

/// Rows of `2^GELU_ROW_BITS` ulps for the models' GeLU: error 7.7e-3, SIGMA's class (its
/// 8-bit table: 7.6e-3). Rows of `2^6` halve the error (3.9e-3) but double the window
/// (514 against 258 high positions: one more subtree level and a key one level longer
/// per element), and are slower (`fusefss bench ops --n 37 --ops gelu --rows 6|7 --split
/// true`; figures in CHANGELOG.md) for the same cosine against f64 (bert-tiny seq 128:
/// 0.999955 with either; MiniLM seq 32: 0.999926 / 0.999927).
pub const GELU_ROW_BITS: u32 = 7;

/// The models' GeLU on inputs that fit `n − f` bits: [`library::gelu_rows_fine`] (the
/// residual from rows of `2^GELU_ROW_BITS` ulps, minimax per row, the two rows beside the
/// residual's kink at 0 halved) with the comparison split at the rows. Against the exactly
/// rounded [`library::gelu`] it reads one window of ~180 high positions (its rows around
/// 0) instead of ~33k positions per element (several times faster, CHANGELOG.md). The
/// halved rows' edges at ±64 ulps are read as one row of the input shifted by half a row
/// (`program::half_rows`: the carry key at one more point, two equality bits of the high
/// key's window): error 7.23e-3 against 7.67e-3 with whole rows (SIGMA's 8-bit table:
/// 7.60e-3), for 23 B more key per element and ~5 % more evaluation at n = 37 (`fusefss
/// bench ops --n 37 --ops gelu,gelu_whole --rows 7 --split true --slack`, CHANGELOG.md).
///
/// # Errors
/// [`SpecError`] for unsupported widths.
pub fn gelu(n: u32, f: u32, form: library::GeluForm) -> Result<Compiled, SpecError> {
    made(Made::Gelu(n, f, form), || {
        let spec = OperatorSpec { slack: true, ..library::gelu_rows_fine(n - f, n, f, form, GELU_ROW_BITS) };
        Compiled::with_options(&spec, CompileOptions { split: Some(true), ..CompileOptions::default() })
    })
}

/// SiLU as the models run it: the residual `ReLU(x) − SiLU(x)` from rows of
/// `2^GELU_ROW_BITS` ulps over `[−8, 8)`, read with slack from a truncation's output, the
/// comparison split like [`gelu`]'s.
///
/// # Errors
/// [`SpecError`] if the widths do not fit.
pub fn silu(n: u32, f: u32) -> Result<Compiled, SpecError> {
    made(Made::Silu(n, f), || {
        let spec = OperatorSpec { slack: true, ..library::silu_rows(n - f, n, f, GELU_ROW_BITS) };
        Compiled::with_options(&spec, CompileOptions { split: Some(true), ..CompileOptions::default() })
    })
}

/// Mantissa bits of LayerNorm's `1/σ` grid ([`library::rsqrt_bits`]): 7, so that
/// LayerNorm's error is below SIGMA's (`fusefss bench ops --impl both --ops layernorm
/// --reps 5`: 3.7e-3 against 6.7e-3 at n = 50, 5.0e-3 against 9.1e-3 at n = 37). With 6 the
/// grid had half the thresholds and LayerNorm's error was a little above SIGMA's (6.4e-3–
/// 6.9e-3 against 5.8e-3–6.5e-3 at n = 50); 7 costs ~1 B of key per element at n = 50
/// (bert-tiny: 152.2 → 152.5 MB) and no measurable time (its LayerNorm layers 29.7 ms
/// either way; the `1/σ` grid is read once per row). RMSNorm keeps more bits
/// ([`RMS_RSQRT_MANTISSA_BITS`]).
pub const RSQRT_MANTISSA_BITS: u32 = 7;

/// Mantissa bits of RMSNorm's `1/σ` grid: 9, for SIGMA's error on rows of an LLM's
/// residual stream (`σ` from ~0.08 to ~10^3 in SmolLM2; 7 bits gave 3.4× SIGMA's error).
pub const RMS_RSQRT_MANTISSA_BITS: u32 = 9;

/// Extra fractional bits of RMSNorm's `1/σ` ([`Norm::rsqrt_extra`]): at an attention sink
/// (`σ ≈ 10^3`) `1/σ` is 4 ulps at scale 12, a 2 % error on the row; with 8 more bits 0.1 %.
pub const RMS_RSQRT_EXTRA_BITS: u32 = 8;

/// Runs of LayerNorm's `1/σ` grid ([`CompileOptions::grouped`]) span at most `2^12` high
/// positions: the 17 octaves at n = 37 are three runs. Two runs (`2^15`) were much faster
/// than one split for ~570 B more key per row; `2^12` adds a run for ~700 B more per row
/// (bert-tiny: +362 KB of 190.6 MB) and is faster again, `2^10` no faster for 1 MB more
/// (`fusefss bench model --impl fusefss`, alternating builds; figures in CHANGELOG.md).
pub const RSQRT_RUN_WINDOW_BITS: u32 = 12;

/// The options a normalisation compiles its `1/σ` grid of `m` mantissa bits with
/// ([`rsqrt`]): the comparison split at the grid's floor when it has one: a key ~15 % larger
/// (~130 B more per row at n = 50, next to ~290 B per *element* for the rest of LayerNorm),
/// evaluation ~1.5× faster (the uniform rows are one window of high positions, and every
/// lone path is shorter).
pub fn rsqrt_options(n: u32, f: u32, d: u64, m: u32) -> CompileOptions {
    let split = (library::rsqrt_floor_bits(n, f, d, m) > 0).then_some(true);
    CompileOptions { split, grouped: split.map(|_| RSQRT_RUN_WINDOW_BITS), ..CompileOptions::default() }
}

/// `1/σ` of rows of `cols` at scale `scale` from their sum of squares, on a grid of `m`
/// mantissa bits ([`library::rsqrt_bits`]).
///
/// # Errors
/// [`SpecError`] for unsupported widths.
pub fn rsqrt(bits: u32, scale: u32, cols: usize, m: u32) -> Result<Compiled, SpecError> {
    let d = cols as u64;
    made(Made::Rsqrt(bits, scale, d, m), || {
        Compiled::with_options(
            &library::rsqrt_bits(bits, bits, scale, d, m),
            rsqrt_options(bits, scale, d, m),
        )
    })
}

/// LayerNorm (`normalize`) or RMSNorm with the mean's shift in one round (a DCF carry with
/// slack, [`SlackShift`]: the row sum, like every truncated value, is below `2^{n−2}`; SIGMA
/// takes 4 rounds, an exact compiled shift 2) and a compiled reciprocal square root (2
/// rounds instead of 5). LayerNorm opens its mean with the centred rows' sums of squares
/// (`gates::centre`, one round for both) and runs its gain between the two truncations with
/// the first's carry deferred (`gates::gain`: one round and one opening per element less):
/// 7 rounds against SIGMA's 15. RMSNorm keeps its separate truncations: the deferred gain
/// costs a second 1-bit DPF and four words per element (~100 B at n = 37), which a decode
/// step's RMSNorm rows would add to issue 24's key per token.
///
/// # Errors
/// [`SpecError`] for unsupported widths, [`GateError`] (as a message) for parameter vectors
/// of the wrong length.
pub fn norm(
    bits: u32,
    scale: u32,
    rows: usize,
    cols: usize,
    normalize: bool,
    gamma: Arc<[u64]>,
    beta: Arc<[u64]>,
) -> Result<Norm<SlackShift, Compiled>, SpecError> {
    let mean = SlackShift { bits, shift: Norm::mean_shift(scale, cols) };
    let (m, extra) =
        if normalize { (RSQRT_MANTISSA_BITS, 0) } else { (RMS_RSQRT_MANTISSA_BITS, RMS_RSQRT_EXTRA_BITS) };
    let d = cols as u64;
    let rsqrt = made(Made::NormRsqrt(bits, scale, d, m, extra), || {
        let floor = library::rsqrt_floor_bits(bits, scale, d, m);
        let spec = library::rsqrt_grid_out(bits, bits, scale, d, m, floor, extra);
        Compiled::with_options(&spec, rsqrt_options(bits, scale, d, m))
    })?;
    let product = if normalize { norm_product_bits(bits, &rsqrt.0.spec) } else { bits };
    Norm::with(bits, scale, rows, cols, normalize, gamma, beta, mean, rsqrt)
        .and_then(|n| n.with_rsqrt_extra(extra).with_centred_sum_sq(normalize).with_deferred_gain(normalize))
        .and_then(|n| n.with_product_bits(product))
        .map_err(|e| SpecError::Width(e.to_string()))
}

/// The ring LayerNorm's product `x_j·(1/σ)` is opened in: the smallest `k ≤ bits` with
/// `(v_end − 1)·g² < 4^{k−2}` on every cell `[v, v_end)` of its `1/σ` grid `grid` below
/// `2^{bits−1}` (`g` the cell's value). A row's `x_j² ≤ v` (its sum of squares), so
/// `|x_j·(1/σ)| < 2^{k−2}`: the slack the deferred gain lifts it back with. The grid reads
/// each cell at the mean of its ends' values and its first row at its top's
/// ([`library::rsqrt_grid_out`]), so the bound is about `1.21·√cols·2^{2s+e}` (row 1, one
/// to two times the floor): 30 of 37 bits for bert-tiny's rows of 128, 31 for MiniLM's
/// 384; seven and six bits fewer per element than opening it in `Z_{2^n}`.
pub fn norm_product_bits(bits: u32, grid: &crate::spec::OperatorSpec) -> u32 {
    let half = 1u64 << (bits - 1);
    let worst = grid
        .boundaries
        .iter()
        .enumerate()
        .take_while(|&(_, &start)| start < half)
        .map(|(i, &start)| {
            let end = grid.boundaries.get(i + 1).map_or(half, |&e| e.min(half));
            let g = grid.eval(start).arith[0] as u128;
            ((end - 1).max(1) as u128).saturating_mul(g * g)
        })
        .max()
        .unwrap_or(0);
    (2..bits).find(|&k| worst < 1u128 << (2 * (k - 2)).min(127)).unwrap_or(bits)
}
