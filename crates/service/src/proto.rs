//! The messages between a client and the servers, and between the two servers before a
//! query's online phase (which then exchanges the engine's messages on the same link).
//!
//! Binary, length-checked: a tag byte, then the fields; strings and vectors carry their
//! length. Decoding never trusts a length beyond the bytes present, and every frame is
//! limited before it is read by what the protocol expects at that point ([`limits`]).
//!
//! A query: the client sends each server a [`Msg::Query`] (its shape, a few bytes) and then
//! a [`Msg::Share`] (its share of the embedded input, whose length the shape fixes). Party 0
//! proposes a bundle to party 1 ([`Msg::Propose`]); party 1 answers [`Msg::Accept`] only if
//! it holds the same query and the same unused bundle, [`Msg::Unpaired`] while its half has
//! not arrived, or [`Msg::Reject`]. Nothing is spent until then. On `Accept` party 0 marks
//! the bundle used and sends [`Msg::Begin`]; party 1 marks it used and answers
//! [`Msg::Ready`]; the online phase follows; each server sends the client an
//! [`Msg::Answer`] or [`Msg::Failed`]. [`Msg::Withdraw`] tells party 1 that a query it holds
//! will not run (the other half never came, or the client left).

use thiserror::Error;

use crate::bundle::BundleId;
use crate::text;

/// A query's random identifier, chosen by the client.
pub type QueryId = [u8; 16];

/// The frame sizes a server or client accepts.
pub mod limits {
    /// Any message other than a share, an answer or an online round: a query's shape, the
    /// servers' control messages, a refusal.
    pub const CONTROL: u64 = 1 << 16;

    /// A [`super::Msg::Share`] of `words` ring elements.
    pub fn share(words: usize) -> u64 {
        1 + 8 + 8 * words as u64
    }

    /// An [`super::Msg::Answer`] with `words` output elements.
    pub fn answer(words: usize) -> u64 {
        CONTROL + 8 * words as u64
    }
}

/// A message that does not decode.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ProtoError {
    /// Shorter than its fields.
    #[error("the message ends early")]
    Truncated,
    /// Bytes after the last field.
    #[error("{0} unexpected bytes after the message")]
    Trailing(usize),
    /// An unknown tag.
    #[error("unknown message type {0}")]
    UnknownTag(u8),
    /// A string over [`limits::CONTROL`] or not UTF-8.
    #[error("a string field is too long or not UTF-8")]
    BadString,
    /// A vector longer than the message.
    #[error("a vector is longer than the message")]
    BadVector,
    /// A message that does not belong at this point of the protocol.
    #[error("expected {expected}, got {got}")]
    OutOfTurn {
        /// What was expected.
        expected: &'static str,
        /// What came.
        got: &'static str,
    },
}

/// The shape part of a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryHead {
    /// The query's id.
    pub id: QueryId,
    /// The model's name, as the client wrote it (validated by the server).
    pub model: String,
    /// Tokens.
    pub seq: u32,
    /// Layers (`None`: whatever the bundles have).
    pub layers: Option<u32>,
    /// For a generation: the tokens it wants at most (`seq` is then the prompt's length).
    pub new: Option<u32>,
}

/// A server's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The bundle's descriptor.
    pub descriptor: String,
    /// The bundle's id.
    pub bundle: String,
    /// Ring width.
    pub n: u32,
    /// Fixed-point scale.
    pub f: u32,
    /// This server's share of the output.
    pub share: Vec<u64>,
    /// Online rounds.
    pub rounds: u64,
    /// Bytes this server sent to the other.
    pub comm_bytes: u64,
    /// Online time, ms.
    pub online_ms: f64,
}

/// A message.
#[derive(Clone, Debug, PartialEq)]
pub enum Msg {
    /// Client → each server: the query's shape; a [`Msg::Share`] follows.
    Query(QueryHead),
    /// Client → each server: its share of the embedded input.
    Share(Vec<u64>),
    /// Party 0 → party 1: run `query` with `bundle`? Nothing is spent yet.
    Propose {
        /// The query.
        query: QueryId,
        /// The bundle party 0 chose.
        bundle: BundleId,
        /// Its program's fingerprint, as party 0's copy says.
        fingerprint: [u8; 32],
    },
    /// Party 1 → party 0: it holds the query and the bundle; party 0 may start.
    Accept,
    /// Party 1 → party 0: the client's half of this query has not reached party 1 (yet).
    Unpaired,
    /// Party 1 → party 0: the query cannot run; `bundle_unusable` if the bundle itself is
    /// the reason (party 0 then retires its copy).
    Reject {
        /// Whether the bundle cannot be used at party 1.
        bundle_unusable: bool,
        /// Why.
        reason: String,
    },
    /// Party 0 → party 1: the bundle is marked used at party 0; mark it and start.
    Begin {
        /// The query.
        query: QueryId,
        /// The bundle.
        bundle: BundleId,
    },
    /// Party 1 → party 0: the bundle is marked used here too; the online phase starts.
    Ready,
    /// Party 0 → party 1: `query` will not run (nothing was spent); tell its client why.
    Withdraw {
        /// The query.
        query: QueryId,
        /// Why.
        reason: String,
    },
    /// Server → client: its share of the output and what the query cost.
    Answer(Answer),
    /// Server → client: the query failed, and why.
    Failed(String),
    /// Client → each server, in a generation session after a step's answer: the session
    /// ends here (its remaining keys are never used).
    Stop,
    /// Party 0 → party 1, in a generation session: step `index` begins (party 0's client
    /// sent its input share); party 1 answers [`Msg::Ready`] when its client did too, or
    /// [`Msg::Reject`].
    Step {
        /// The step (1 is the first decode step).
        index: u32,
    },
}

impl Msg {
    /// The message's name, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Msg::Query(_) => "Query",
            Msg::Share(_) => "Share",
            Msg::Propose { .. } => "Propose",
            Msg::Accept => "Accept",
            Msg::Unpaired => "Unpaired",
            Msg::Reject { .. } => "Reject",
            Msg::Begin { .. } => "Begin",
            Msg::Ready => "Ready",
            Msg::Withdraw { .. } => "Withdraw",
            Msg::Answer(_) => "Answer",
            Msg::Failed(_) => "Failed",
            Msg::Stop => "Stop",
            Msg::Step { .. } => "Step",
        }
    }
}

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        // Cut on a character boundary below the limit.
        let mut end = s.len().min(limits::CONTROL as usize / 2);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u32(end as u32);
        self.bytes(&s.as_bytes()[..end]);
    }
    fn words(&mut self, v: &[u64]) {
        self.u64(v.len() as u64);
        self.0.reserve(8 * v.len());
        v.iter().for_each(|&x| self.u64(x));
    }
    fn bundle(&mut self, b: &BundleId) {
        self.bytes(&b.run);
        self.u32(b.index);
    }
}

struct R<'a>(&'a [u8]);

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if self.0.len() < n {
            return Err(ProtoError::Truncated);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn str(&mut self) -> Result<String, ProtoError> {
        let n = self.u32()? as usize;
        if n as u64 > limits::CONTROL {
            return Err(ProtoError::BadString);
        }
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| ProtoError::BadString)
    }
    fn words(&mut self) -> Result<Vec<u64>, ProtoError> {
        let n = self.u64()?;
        if n > (self.0.len() / 8) as u64 {
            return Err(ProtoError::BadVector);
        }
        let b = self.take(8 * n as usize)?;
        Ok(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
    }
    fn bundle(&mut self) -> Result<BundleId, ProtoError> {
        Ok(BundleId { run: self.arr()?, index: self.u32()? })
    }
}

impl Msg {
    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = W(Vec::new());
        match self {
            Msg::Query(q) => {
                w.u8(1);
                w.bytes(&q.id);
                w.str(&q.model);
                w.u32(q.seq);
                w.u32(q.layers.unwrap_or(0));
                w.u32(q.new.unwrap_or(0));
            }
            Msg::Share(v) => {
                w.u8(2);
                w.words(v);
            }
            Msg::Propose { query, bundle, fingerprint } => {
                w.u8(3);
                w.bytes(query);
                w.bundle(bundle);
                w.bytes(fingerprint);
            }
            Msg::Accept => w.u8(4),
            Msg::Unpaired => w.u8(5),
            Msg::Reject { bundle_unusable, reason } => {
                w.u8(6);
                w.u8(u8::from(*bundle_unusable));
                w.str(reason);
            }
            Msg::Begin { query, bundle } => {
                w.u8(7);
                w.bytes(query);
                w.bundle(bundle);
            }
            Msg::Ready => w.u8(8),
            Msg::Withdraw { query, reason } => {
                w.u8(9);
                w.bytes(query);
                w.str(reason);
            }
            Msg::Answer(a) => {
                w.u8(10);
                w.str(&a.descriptor);
                w.str(&a.bundle);
                w.u32(a.n);
                w.u32(a.f);
                w.words(&a.share);
                w.u64(a.rounds);
                w.u64(a.comm_bytes);
                w.u64(a.online_ms.to_bits());
            }
            Msg::Failed(s) => {
                w.u8(11);
                w.str(s);
            }
            Msg::Stop => w.u8(12),
            Msg::Step { index } => {
                w.u8(13);
                w.u32(*index);
            }
        }
        w.0
    }

    /// Decode a message.
    ///
    /// # Errors
    /// [`ProtoError`] for anything but exactly one well-formed message.
    pub fn decode(b: &[u8]) -> Result<Msg, ProtoError> {
        let mut r = R(b);
        let m = match r.u8()? {
            1 => Msg::Query(QueryHead {
                id: r.arr()?,
                model: r.str()?,
                seq: r.u32()?,
                layers: Some(r.u32()?).filter(|&l| l != 0),
                new: Some(r.u32()?).filter(|&g| g != 0),
            }),
            2 => Msg::Share(r.words()?),
            3 => Msg::Propose { query: r.arr()?, bundle: r.bundle()?, fingerprint: r.arr()? },
            4 => Msg::Accept,
            5 => Msg::Unpaired,
            6 => Msg::Reject { bundle_unusable: r.u8()? != 0, reason: r.str()? },
            7 => Msg::Begin { query: r.arr()?, bundle: r.bundle()? },
            8 => Msg::Ready,
            9 => Msg::Withdraw { query: r.arr()?, reason: r.str()? },
            10 => Msg::Answer(Answer {
                descriptor: r.str()?,
                bundle: r.str()?,
                n: r.u32()?,
                f: r.u32()?,
                share: r.words()?,
                rounds: r.u64()?,
                comm_bytes: r.u64()?,
                online_ms: f64::from_bits(r.u64()?),
            }),
            11 => Msg::Failed(r.str()?),
            12 => Msg::Stop,
            13 => Msg::Step { index: r.u32()? },
            t => return Err(ProtoError::UnknownTag(t)),
        };
        if !r.0.is_empty() {
            return Err(ProtoError::Trailing(r.0.len()));
        }
        Ok(m)
    }
}

/// A query id for logs: its first 8 hex digits.
pub fn tag(id: &QueryId) -> String {
    hex(&id[..4])
}

/// Lowercase hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A reason from a peer, safe for a log line.
pub fn reason(s: &str) -> String {
    text::clean(s, text::LOG_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Msg> {
        let b = BundleId { run: [9; 16], index: 4 };
        vec![
            Msg::Query(QueryHead { id: [3; 16], model: "gpt2".into(), seq: 32, layers: Some(2), new: None }),
            Msg::Query(QueryHead { id: [0; 16], model: "bert-tiny".into(), seq: 8, layers: None, new: None }),
            Msg::Query(QueryHead {
                id: [0; 16],
                model: "smollm2".into(),
                seq: 8,
                layers: None,
                new: Some(16),
            }),
            Msg::Share(vec![1, 2, u64::MAX]),
            Msg::Share(vec![]),
            Msg::Propose { query: [1; 16], bundle: b, fingerprint: [5; 32] },
            Msg::Accept,
            Msg::Unpaired,
            Msg::Reject { bundle_unusable: true, reason: "no".into() },
            Msg::Begin { query: [1; 16], bundle: b },
            Msg::Ready,
            Msg::Withdraw { query: [2; 16], reason: "gone".into() },
            Msg::Answer(Answer {
                descriptor: "d".into(),
                bundle: "b".into(),
                n: 37,
                f: 12,
                share: vec![4, 5],
                rounds: 9,
                comm_bytes: 100,
                online_ms: 1.5,
            }),
            Msg::Failed("why".into()),
            Msg::Stop,
            Msg::Step { index: 7 },
        ]
    }

    #[test]
    fn messages_round_trip_and_garbage_is_an_error() {
        for m in all() {
            let b = m.encode();
            assert_eq!(Msg::decode(&b).unwrap(), m);
            for cut in 0..b.len() {
                assert!(Msg::decode(&b[..cut]).is_err(), "{} cut at {cut}", m.name());
            }
            let mut longer = b.clone();
            longer.push(0);
            assert_eq!(Msg::decode(&longer), Err(ProtoError::Trailing(1)));
        }
        assert_eq!(Msg::decode(&[99]), Err(ProtoError::UnknownTag(99)));
        // A vector claiming more words than the message holds.
        let mut b = vec![2u8];
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(Msg::decode(&b), Err(ProtoError::BadVector));
    }

    #[test]
    fn frames_fit_their_limits() {
        assert_eq!(Msg::Share(vec![0; 100]).encode().len() as u64, limits::share(100));
        for m in all() {
            if !matches!(m, Msg::Share(_) | Msg::Answer(_)) {
                assert!(m.encode().len() as u64 <= limits::CONTROL);
            }
        }
        let long = Msg::Failed("é".repeat(100_000)).encode();
        assert!(long.len() as u64 <= limits::CONTROL);
        assert!(Msg::decode(&long).is_ok());
    }
}
