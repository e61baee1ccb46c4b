//! Party 1's side: the halves of queries that clients sent it, paired with party 0's
//! proposals. Sans-IO: the runtime feeds it the client halves and party 0's messages, and
//! sends what it returns; the check of a proposed bundle against the store is a closure.
//!
//! A proposal for a query whose half has not arrived is answered [`Msg::Unpaired`] (party 0
//! tries again; nothing is spent). An accepted proposal waits for [`Msg::Begin`] of the same
//! query and bundle; any other message, or a lost link, cancels the acceptance.

use std::time::Instant;

use crate::bundle::BundleId;
use crate::proto::{Msg, ProtoError, QueryId};
use crate::queue::{Half, Limits, Queue, Refusal};

/// Why a proposed bundle cannot run a query here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The bundle itself cannot be used (missing, used, damaged, another program's).
    pub bundle_unusable: bool,
    /// Why.
    pub reason: String,
}

/// What to do after a message from party 0.
#[derive(Debug)]
pub struct Step<C> {
    /// The answer for party 0, if any.
    pub reply: Option<Msg>,
    /// A query that ends here, with the reason for its client.
    pub failed: Option<(Half<C>, String)>,
    /// A query to run now: its bundle is to be marked used, then [`Msg::Ready`] sent.
    pub start: Option<(Half<C>, BundleId)>,
}

impl<C> Step<C> {
    fn reply(m: Msg) -> Step<C> {
        Step { reply: Some(m), failed: None, start: None }
    }
}

/// Party 1's waiting queries and the one accepted proposal.
#[derive(Debug)]
pub struct Follower<C> {
    queue: Queue<C>,
    accepted: Option<(QueryId, BundleId)>,
}

impl<C> Follower<C> {
    /// An empty follower.
    pub fn new(limits: Limits) -> Follower<C> {
        Follower { queue: Queue::follower(limits), accepted: None }
    }

    /// A client's half arrived.
    ///
    /// # Errors
    /// The half and why it is refused.
    pub fn admit(&mut self, half: Half<C>) -> Result<(), Box<(Half<C>, Refusal)>> {
        self.queue.admit(half)
    }

    /// Halves that waited too long for party 0 (their clients get an error; nothing spent).
    pub fn expired(&mut self, now: Instant) -> Vec<Half<C>> {
        let keep = self.accepted.map(|(q, _)| q);
        let mut old = self.queue.expired(now);
        // An accepted half stays until Begin or a lost link.
        if let Some(q) = keep
            && let Some(i) = old.iter().position(|h| h.id() == q)
        {
            let h = old.remove(i);
            let _ = self.queue.admit(h);
        }
        old
    }

    /// Queries waiting.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// The link to party 0 is gone: an acceptance not yet begun is void.
    pub fn link_lost(&mut self) {
        self.accepted = None;
    }

    /// A message from party 0. `check` says whether the bundle can run the half here,
    /// without spending it.
    ///
    /// # Errors
    /// [`ProtoError::OutOfTurn`] for a message party 0 never sends here, or a `Begin` that
    /// was not accepted: the runtime drops the link.
    pub fn on_peer(
        &mut self,
        m: Msg,
        check: impl FnOnce(&Half<C>, BundleId, [u8; 32]) -> Result<(), Rejection>,
    ) -> Result<Step<C>, ProtoError> {
        match m {
            Msg::Propose { query, bundle, fingerprint } => {
                self.accepted = None;
                let Some(half) = self.queue.get(&query) else { return Ok(Step::reply(Msg::Unpaired)) };
                match check(half, bundle, fingerprint) {
                    Ok(()) => {
                        self.accepted = Some((query, bundle));
                        Ok(Step::reply(Msg::Accept))
                    }
                    Err(r) => {
                        // A bundle problem leaves the query for another bundle; a query
                        // problem (shape, share length) ends it.
                        let failed = if r.bundle_unusable {
                            None
                        } else {
                            self.queue.take(&query).map(|h| (h, r.reason.clone()))
                        };
                        let reply = Msg::Reject { bundle_unusable: r.bundle_unusable, reason: r.reason };
                        Ok(Step { reply: Some(reply), failed, start: None })
                    }
                }
            }
            Msg::Begin { query, bundle } => {
                if self.accepted.take() != Some((query, bundle)) {
                    return Err(ProtoError::OutOfTurn {
                        expected: "Begin of the accepted proposal",
                        got: "Begin",
                    });
                }
                let half = self
                    .queue
                    .take(&query)
                    .ok_or(ProtoError::OutOfTurn { expected: "Begin of a waiting query", got: "Begin" })?;
                Ok(Step { reply: None, failed: None, start: Some((half, bundle)) })
            }
            Msg::Withdraw { query, reason } => {
                if self.accepted.is_some_and(|(q, _)| q == query) {
                    self.accepted = None;
                }
                let failed = self.queue.take(&query).map(|h| (h, reason));
                Ok(Step { reply: None, failed, start: None })
            }
            m => Err(ProtoError::OutOfTurn { expected: "Propose, Begin or Withdraw", got: m.name() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::Shape;
    use crate::proto::QueryHead;
    use models::ModelName;
    use std::time::Duration;

    const B: BundleId = BundleId { run: [1; 16], index: 3 };

    fn half(id: u8, at: Instant) -> Half<u8> {
        let head = QueryHead { id: [id; 16], model: "bert-tiny".into(), seq: 8, layers: None, new: None };
        let shape = Shape { model: ModelName::BertTiny, seq: 8, layers: None, new: None };
        Half { head, shape, share: vec![1, 2], client: id, arrived: at }
    }

    fn propose(id: u8) -> Msg {
        Msg::Propose { query: [id; 16], bundle: B, fingerprint: [0; 32] }
    }

    fn ok(_: &Half<u8>, _: BundleId, _: [u8; 32]) -> Result<(), Rejection> {
        Ok(())
    }

    #[test]
    fn a_proposal_pairs_with_its_half_then_begins() {
        let now = Instant::now();
        let mut f = Follower::new(Limits::default());
        assert!(matches!(f.on_peer(propose(1), ok).unwrap().reply, Some(Msg::Unpaired)));
        f.admit(half(1, now)).unwrap();
        assert!(matches!(f.on_peer(propose(1), ok).unwrap().reply, Some(Msg::Accept)));
        // A Begin for another bundle is out of turn, and voids the acceptance.
        let wrong = Msg::Begin { query: [1; 16], bundle: BundleId { run: [1; 16], index: 4 } };
        assert!(f.on_peer(wrong, ok).is_err());
        assert!(f.on_peer(Msg::Begin { query: [1; 16], bundle: B }, ok).is_err());
        f.on_peer(propose(1), ok).unwrap();
        let s = f.on_peer(Msg::Begin { query: [1; 16], bundle: B }, ok).unwrap();
        let (h, b) = s.start.unwrap();
        assert_eq!((h.client, b), (1, B));
        assert_eq!(f.waiting(), 0);
    }

    #[test]
    fn rejections_withdrawals_expiry_and_a_lost_link() {
        let now = Instant::now();
        let limits = Limits { queue: 2, pair_timeout: Duration::from_secs(1), ..Limits::default() };
        let mut f = Follower::new(limits);
        f.admit(half(1, now)).unwrap();
        f.admit(half(2, now)).unwrap();
        let e = f.admit(half(3, now)).unwrap_err();
        assert_eq!(e.1, Refusal::Busy(2));
        assert_eq!(f.admit(half(1, now)).unwrap_err().1, Refusal::Duplicate);
        // A bundle problem keeps the query; a query problem ends it.
        let used = |_: &Half<u8>, _, _| Err(Rejection { bundle_unusable: true, reason: "used".into() });
        let s = f.on_peer(propose(1), used).unwrap();
        assert!(matches!(s.reply, Some(Msg::Reject { bundle_unusable: true, .. })) && s.failed.is_none());
        let shape = |_: &Half<u8>, _, _| Err(Rejection { bundle_unusable: false, reason: "shape".into() });
        let s = f.on_peer(propose(1), shape).unwrap();
        assert_eq!(s.failed.unwrap().1, "shape");
        let s = f.on_peer(Msg::Withdraw { query: [2; 16], reason: "gone".into() }, ok).unwrap();
        assert_eq!(s.failed.unwrap().0.client, 2);
        // Expiry after twice the pair timeout, except the accepted half; a lost link voids it.
        f.admit(half(4, now)).unwrap();
        f.admit(half(5, now)).unwrap();
        f.on_peer(propose(4), ok).unwrap();
        let gone = f.expired(now + Duration::from_secs(3));
        assert_eq!(gone.iter().map(|h| h.client).collect::<Vec<_>>(), vec![5]);
        f.link_lost();
        assert!(f.on_peer(Msg::Begin { query: [4; 16], bundle: B }, ok).is_err());
        assert_eq!(f.expired(now + Duration::from_secs(3)).len(), 1);
        assert!(f.on_peer(Msg::Ready, ok).is_err());
    }
}
