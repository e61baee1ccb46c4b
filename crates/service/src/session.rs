//! Generation sessions as key bundles: the keys of a whole session (the prefill over a
//! prompt of `P` tokens and `G − 1` decode steps) dealt ahead into one bundle per party,
//! the steps' programs one after the other, and read back step by step as the session runs
//! (never all in memory). The dealer carries the masks of the KV cache from one step's
//! dealing to the next ([`engine::deal_step`]); the servers carry its masked values
//! ([`engine::run_party_step`]). A session is one bundle: single-use like any other, spent
//! as a whole when it begins.

use engine::{DealReport, Graph, Impl, KeySink, NodeGates};
use fss::rng::DealerRng;
use models::llama::LlamaFixed;
use sha2::{Digest, Sha256};

use crate::bundle::Fingerprints;
use crate::error::ProgramError;

/// The shape of a session: its prompt's tokens and the tokens it generates at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionShape {
    /// Prompt tokens (the prefill's rows).
    pub prompt_len: usize,
    /// New tokens at most: the prefill picks the first, each decode step one more.
    pub new_tokens: usize,
}

impl SessionShape {
    /// Programs in the session: the prefill and `new_tokens − 1` decode steps.
    pub fn steps(&self) -> usize {
        self.new_tokens
    }
}

/// Step `t`'s program and gates.
///
/// # Errors
/// [`ProgramError`] if the program or a compiled gate does not build.
pub fn step_program(
    fx: &LlamaFixed,
    imp: Impl,
    s: SessionShape,
    t: usize,
) -> Result<(Graph, NodeGates), ProgramError> {
    let g = fx.step(s.prompt_len, t).map_err(models::ModelError::from)?;
    let gates = engine::build(&g, imp)?;
    Ok((g, gates))
}

/// The identity of a session's keys: a hash over every step's program fingerprint (so a
/// session bundle is refused by a server whose model, shapes or protocols differ in any
/// step), and the bundle sections it has.
///
/// # Errors
/// [`ProgramError`] if a step's program does not build.
pub fn identity(
    fx: &LlamaFixed,
    imp: Impl,
    s: SessionShape,
    fps: &mut Fingerprints,
) -> Result<([u8; 32], usize), ProgramError> {
    let mut h = Sha256::new();
    h.update(b"fusefss generation session");
    h.update((s.prompt_len as u64).to_le_bytes());
    h.update((s.steps() as u64).to_le_bytes());
    let mut sections = 0;
    for t in 0..s.steps() {
        let g = fx.step(s.prompt_len, t).map_err(models::ModelError::from)?;
        h.update(fps.of(&g, imp));
        sections += 2 + g.gates();
    }
    Ok((h.finalize().into(), sections))
}

/// Deal a whole session into `sinks` (one party's keys each, step after step), carrying the
/// KV cache's masks from step to step; `each` sees every step's report as it is dealt.
///
/// # Errors
/// [`ProgramError`] if a step does not build, or a sink fails.
pub fn deal(
    fx: &LlamaFixed,
    imp: Impl,
    s: SessionShape,
    rng: &mut DealerRng,
    sinks: [&mut dyn KeySink; 2],
    mut each: impl FnMut(usize, &DealReport),
) -> Result<Vec<DealReport>, ProgramError> {
    let [s0, s1] = sinks;
    let mut masks: Vec<Vec<u64>> = vec![];
    let mut reports = Vec::with_capacity(s.steps());
    for t in 0..s.steps() {
        let (g, gates) = step_program(fx, imp, s, t)?;
        let (report, carry) = engine::deal_step(&g, &gates, rng, [&mut *s0, &mut *s1], &masks, |_, _| {})
            .map_err(ProgramError::Deal)?;
        each(t, &report);
        reports.push(report);
        masks = carry;
    }
    Ok(reports)
}
