//! The client's side of a query, sans-IO: the messages for each server, then their answers
//! checked against each other and combined into the output.

use thiserror::Error;

use crate::descriptor::{Descriptor, Shape};
use crate::proto::{Answer, Msg, ProtoError, QueryHead, QueryId, reason};

/// Why a query failed at the client.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum ClientError {
    /// A server said the query failed.
    #[error("server {party}: {reason}")]
    Server {
        /// Which server.
        party: u8,
        /// Its reason (cleaned).
        reason: String,
    },
    /// A server sent something that does not decode.
    #[error("server {party} sent a malformed answer: {error}")]
    Malformed {
        /// Which server.
        party: u8,
        /// Why it does not decode.
        error: ProtoError,
    },
    /// A server sent a message that is not an answer.
    #[error("server {party} sent {got} instead of an answer")]
    Unexpected {
        /// Which server.
        party: u8,
        /// What it sent.
        got: &'static str,
    },
    /// The two answers do not belong together.
    #[error("the servers' answers disagree: {0}")]
    Disagree(String),
}

/// The combined result of a query.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// What the servers ran.
    pub descriptor: Descriptor,
    /// Both answers.
    pub answers: [Answer; 2],
    /// The output (ring elements).
    pub output: Vec<u64>,
}

/// One query in flight.
#[derive(Debug)]
pub struct ClientQuery {
    shape: Shape,
    out_len: usize,
    answers: [Option<Answer>; 2],
}

impl ClientQuery {
    /// A query `id` of `shape` with the two input shares; `out_len` output elements are
    /// expected. Returns the query and, per server, its two messages (shape, then share).
    pub fn new(
        id: QueryId,
        shape: Shape,
        shares: [Vec<u64>; 2],
        out_len: usize,
    ) -> (ClientQuery, [[Msg; 2]; 2]) {
        let head = QueryHead {
            id,
            model: shape.model.name().into(),
            seq: shape.seq,
            layers: shape.layers,
            new: shape.new,
        };
        let [s0, s1] = shares;
        let msgs = [[Msg::Query(head.clone()), Msg::Share(s0)], [Msg::Query(head), Msg::Share(s1)]];
        (ClientQuery { shape, out_len, answers: [None, None] }, msgs)
    }

    /// The answers of a later step of a generation session (the client sent both servers
    /// that step's [`Msg::Share`] itself).
    pub fn awaiting(shape: Shape, out_len: usize) -> ClientQuery {
        ClientQuery { shape, out_len, answers: [None, None] }
    }

    /// A server's reply; `Ok(true)` once both have answered.
    ///
    /// # Errors
    /// [`ClientError`] if the server failed the query or answered badly.
    pub fn on_reply(&mut self, party: u8, bytes: &[u8]) -> Result<bool, ClientError> {
        let m = Msg::decode(bytes).map_err(|error| ClientError::Malformed { party, error })?;
        match m {
            Msg::Answer(a) => {
                if a.share.len() != self.out_len {
                    return Err(ClientError::Disagree(format!(
                        "server {party} sent {} output values, the model has {}",
                        a.share.len(),
                        self.out_len
                    )));
                }
                self.answers[usize::from(party & 1)] = Some(a);
                Ok(self.answers.iter().all(Option::is_some))
            }
            Msg::Failed(why) => Err(ClientError::Server { party, reason: reason(&why) }),
            m => Err(ClientError::Unexpected { party, got: m.name() }),
        }
    }

    /// Both answers combined.
    ///
    /// # Errors
    /// [`ClientError::Disagree`] if an answer is missing or they used different bundles,
    /// rings or programs, or ran another shape than asked.
    pub fn finish(self) -> Result<Reply, ClientError> {
        let [Some(a0), Some(a1)] = self.answers else {
            return Err(ClientError::Disagree("a server did not answer".into()));
        };
        if a0.bundle != a1.bundle || a0.n != a1.n || a0.f != a1.f || a0.descriptor != a1.descriptor {
            return Err(ClientError::Disagree(format!(
                "bundle {} vs {}",
                reason(&a0.bundle),
                reason(&a1.bundle)
            )));
        }
        let descriptor: Descriptor =
            a0.descriptor.parse().map_err(|e| ClientError::Disagree(format!("{e}")))?;
        if !descriptor.serves(&self.shape) {
            return Err(ClientError::Disagree(format!(
                "they ran {}, not {}",
                descriptor.human(),
                self.shape
            )));
        }
        if !(1..=64).contains(&a0.n) {
            return Err(ClientError::Disagree(format!("ring width {}", a0.n)));
        }
        let output = engine::reconstruct(&a0.share, &a1.share, a0.n);
        Ok(Reply { descriptor, answers: [a0, a1], output })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use models::ModelName;

    fn answer(bundle: &str, share: Vec<u64>) -> Vec<u8> {
        Msg::Answer(Answer {
            descriptor: "model=bert-tiny seq=8 layers=2 impl=fusefss".into(),
            bundle: bundle.into(),
            n: 37,
            f: 12,
            share,
            rounds: 1,
            comm_bytes: 2,
            online_ms: 3.0,
        })
        .encode()
    }

    fn query() -> ClientQuery {
        let shape = Shape { model: ModelName::BertTiny, seq: 8, layers: None, new: None };
        let (q, msgs) = ClientQuery::new([1; 16], shape, [vec![1], vec![2]], 2);
        assert!(matches!(&msgs[1][1], Msg::Share(s) if s == &vec![2]));
        q
    }

    #[test]
    fn two_matching_answers_reconstruct() {
        let mut q = query();
        assert_eq!(q.on_reply(0, &answer("b", vec![5, 1 << 36])), Ok(false));
        assert_eq!(q.on_reply(1, &answer("b", vec![2, 1 << 36])), Ok(true));
        assert_eq!(q.finish().unwrap().output, vec![7, 0]);
    }

    #[test]
    fn failures_and_disagreements_are_errors() {
        let mut q = query();
        let e = q.on_reply(0, &Msg::Failed("no\nbundle".into()).encode()).unwrap_err();
        assert_eq!(e, ClientError::Server { party: 0, reason: "no\\u{a}bundle".into() });
        assert!(matches!(q.on_reply(1, &[200]), Err(ClientError::Malformed { .. })));
        assert!(matches!(q.on_reply(1, &Msg::Ready.encode()), Err(ClientError::Unexpected { .. })));
        assert!(matches!(q.on_reply(1, &answer("b", vec![1])), Err(ClientError::Disagree(_))));
        let mut q = query();
        q.on_reply(0, &answer("a", vec![0, 0])).unwrap();
        q.on_reply(1, &answer("b", vec![0, 0])).unwrap();
        assert!(matches!(q.finish(), Err(ClientError::Disagree(_))));
    }
}
