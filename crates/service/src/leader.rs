//! Party 0's side of one query's start, as a state machine: propose a bundle, and only when
//! party 1 holds the same query and bundle mark it used and begin. Sans-IO: the runtime
//! sends the messages this returns and feeds back what party 1 answered.
//!
//! ```text
//! Proposed --Accept--> Accepted --begin()--> Begun --Ready--> (online phase)
//!    |--Unpaired--> try again later (nothing spent)
//!    `--Reject----> fail the query (nothing spent; retire the bundle if it is the reason)
//! ```

use crate::bundle::BundleId;
use crate::proto::{Msg, ProtoError, QueryId};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Proposed,
    Accepted,
    Begun,
    Started,
}

/// What party 1 said to a proposal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It holds the query and the bundle: mark the bundle used, then [`Proposal::begin`].
    Accepted,
    /// Its half of the query has not arrived: propose again later.
    Unpaired,
    /// The query cannot run.
    Rejected {
        /// The bundle cannot be used at party 1: retire it here too.
        bundle_unusable: bool,
        /// Why (from party 1: clean it before printing).
        reason: String,
    },
}

/// One query's start at party 0.
#[derive(Debug)]
pub struct Proposal {
    query: QueryId,
    bundle: BundleId,
    stage: Stage,
}

fn out_of_turn(expected: &'static str, got: &Msg) -> ProtoError {
    ProtoError::OutOfTurn { expected, got: got.name() }
}

impl Proposal {
    /// Propose `bundle` (of a program with fingerprint `fp`) for `query`: the proposal and
    /// the message for party 1.
    pub fn new(query: QueryId, bundle: BundleId, fp: [u8; 32]) -> (Proposal, Msg) {
        (Proposal { query, bundle, stage: Stage::Proposed }, Msg::Propose { query, bundle, fingerprint: fp })
    }

    /// The bundle proposed.
    pub fn bundle(&self) -> BundleId {
        self.bundle
    }

    /// Party 1's answer to the proposal.
    ///
    /// # Errors
    /// [`ProtoError::OutOfTurn`] for any other message or a second answer.
    pub fn on_answer(&mut self, m: Msg) -> Result<Verdict, ProtoError> {
        if self.stage != Stage::Proposed {
            return Err(out_of_turn("nothing", &m));
        }
        match m {
            Msg::Accept => {
                self.stage = Stage::Accepted;
                Ok(Verdict::Accepted)
            }
            Msg::Unpaired => Ok(Verdict::Unpaired),
            Msg::Reject { bundle_unusable, reason } => Ok(Verdict::Rejected { bundle_unusable, reason }),
            m => Err(out_of_turn("Accept, Unpaired or Reject", &m)),
        }
    }

    /// After the bundle is marked used here: the message that starts the query.
    ///
    /// # Errors
    /// [`ProtoError::OutOfTurn`] unless party 1 accepted.
    pub fn begin(&mut self) -> Result<Msg, ProtoError> {
        if self.stage != Stage::Accepted {
            return Err(ProtoError::OutOfTurn { expected: "Accept before Begin", got: "Begin" });
        }
        self.stage = Stage::Begun;
        Ok(Msg::Begin { query: self.query, bundle: self.bundle })
    }

    /// Party 1's answer to [`Msg::Begin`]: `Ok(())` starts the online phase.
    ///
    /// # Errors
    /// `Err(Some(reason))` if party 1 refused at the last moment, `Err(None)` for a message
    /// out of turn (the link is then unusable).
    pub fn on_ready(&mut self, m: Msg) -> Result<(), Option<String>> {
        match (self.stage, m) {
            (Stage::Begun, Msg::Ready) => {
                self.stage = Stage::Started;
                Ok(())
            }
            (Stage::Begun, Msg::Reject { reason, .. }) => Err(Some(reason)),
            _ => Err(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: BundleId = BundleId { run: [1; 16], index: 0 };

    #[test]
    fn a_query_starts_only_after_accept_then_ready() {
        let (mut p, m) = Proposal::new([7; 16], B, [3; 32]);
        assert_eq!(m, Msg::Propose { query: [7; 16], bundle: B, fingerprint: [3; 32] });
        assert!(p.begin().is_err(), "no Begin before Accept");
        assert_eq!(p.on_answer(Msg::Unpaired), Ok(Verdict::Unpaired));
        assert_eq!(p.on_answer(Msg::Accept), Ok(Verdict::Accepted));
        assert!(p.on_answer(Msg::Accept).is_err(), "one answer only");
        assert_eq!(p.begin(), Ok(Msg::Begin { query: [7; 16], bundle: B }));
        assert_eq!(p.on_ready(Msg::Ready), Ok(()));
        assert_eq!(p.on_ready(Msg::Ready), Err(None));
    }

    #[test]
    fn rejections_and_messages_out_of_turn() {
        let (mut p, _) = Proposal::new([7; 16], B, [3; 32]);
        let r = Msg::Reject { bundle_unusable: true, reason: "used".into() };
        assert_eq!(p.on_answer(r), Ok(Verdict::Rejected { bundle_unusable: true, reason: "used".into() }));
        let (mut p, _) = Proposal::new([7; 16], B, [3; 32]);
        assert!(matches!(p.on_answer(Msg::Ready), Err(ProtoError::OutOfTurn { .. })));
        let (mut p, _) = Proposal::new([7; 16], B, [3; 32]);
        p.on_answer(Msg::Accept).unwrap();
        p.begin().unwrap();
        assert_eq!(
            p.on_ready(Msg::Reject { bundle_unusable: false, reason: "x".into() }),
            Err(Some("x".into()))
        );
    }
}
