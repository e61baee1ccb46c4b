//! The messages between the client and the servers, and between the two servers before a
//! query's online phase (which then exchanges the engine's messages on the same link).
//!
//! Binary, length-checked: a tag byte, then the fields; strings and vectors carry their
//! length. Decoding never trusts a length beyond the bytes present.

use engine::bundle::BundleId;

/// Which model and shape a query is for, as the dealer wrote it into every bundle:
/// `model=bert-tiny seq=128 layers=2 impl=fusefss`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Descriptor {
    pub model: String,
    pub seq: u32,
    pub layers: u32,
    pub imp: String,
}

impl Descriptor {
    pub fn render(&self) -> String {
        format!("model={} seq={} layers={} impl={}", self.model, self.seq, self.layers, self.imp)
    }

    pub fn parse(s: &str) -> Result<Descriptor, String> {
        let mut d = Descriptor { model: String::new(), seq: 0, layers: 0, imp: String::new() };
        for part in s.split_whitespace() {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("bad descriptor field {part:?}"))?;
            let num = |v: &str| v.parse::<u32>().map_err(|_| format!("bad number in {part:?}"));
            match k {
                "model" => d.model = v.into(),
                "seq" => d.seq = num(v)?,
                "layers" => d.layers = num(v)?,
                "impl" => d.imp = v.into(),
                _ => {}
            }
        }
        if d.model.is_empty() || d.seq == 0 || d.layers == 0 || d.imp.is_empty() {
            return Err(format!("incomplete descriptor {s:?}"));
        }
        Ok(d)
    }

    /// The query's shape matches (the client does not choose the implementation).
    pub fn serves(&self, model: &str, seq: u32, layers: Option<u32>) -> bool {
        self.model == model && self.seq == seq && layers.is_none_or(|l| l == self.layers)
    }

    pub fn human(&self) -> String {
        format!("{} at seq {} ({} layers, {})", self.model, self.seq, self.layers, self.imp)
    }
}

/// A message.
#[derive(Clone, Debug, PartialEq)]
pub enum Msg {
    /// Client → each server: run the model on this share of the embedded input.
    Query { id: [u8; 16], model: String, seq: u32, layers: Option<u32>, share: Vec<u64> },
    /// Server 0 → server 1: run query `query` with bundle `bundle`.
    Begin { query: [u8; 16], bundle: BundleId, fingerprint: [u8; 32] },
    /// Server 1 → server 0: the bundle is marked used here too; the online phase starts.
    Ready,
    /// Server 1 → server 0: cannot run the query with that bundle, and why.
    Refuse(String),
    /// Server → client: its share of the output and what the query cost.
    Answer(Answer),
    /// Server → client: the query failed, and why.
    Failed(String),
}

/// A server's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub descriptor: String,
    pub bundle: String,
    pub n: u32,
    pub f: u32,
    pub share: Vec<u64>,
    pub rounds: u64,
    pub comm_bytes: u64,
    pub online_ms: f64,
}

const MAX_STRING: usize = 1 << 16;

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
        let b = &s.as_bytes()[..s.len().min(MAX_STRING)];
        self.u32(b.len() as u32);
        self.bytes(b);
    }
    fn words(&mut self, v: &[u64]) {
        self.u64(v.len() as u64);
        self.0.reserve(8 * v.len());
        v.iter().for_each(|&x| self.u64(x));
    }
}

struct R<'a>(&'a [u8]);

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("message ends early".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
    fn str(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        if n > MAX_STRING {
            return Err("string too long".into());
        }
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "string is not UTF-8".into())
    }
    fn words(&mut self) -> Result<Vec<u64>, String> {
        let n = self.u64()?;
        if n > (self.0.len() / 8) as u64 {
            return Err("vector longer than the message".into());
        }
        let b = self.take(8 * n as usize)?;
        Ok(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
    }
    fn f64(&mut self) -> Result<f64, String> {
        Ok(f64::from_bits(self.u64()?))
    }
}

impl Msg {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = W(Vec::new());
        match self {
            Msg::Query { id, model, seq, layers, share } => {
                w.u8(1);
                w.bytes(id);
                w.str(model);
                w.u32(*seq);
                w.u32(layers.unwrap_or(0));
                w.words(share);
            }
            Msg::Begin { query, bundle, fingerprint } => {
                w.u8(2);
                w.bytes(query);
                w.bytes(&bundle.run);
                w.u32(bundle.index);
                w.bytes(fingerprint);
            }
            Msg::Ready => w.u8(3),
            Msg::Refuse(s) => {
                w.u8(4);
                w.str(s);
            }
            Msg::Answer(a) => {
                w.u8(5);
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
                w.u8(6);
                w.str(s);
            }
        }
        w.0
    }

    pub fn decode(b: &[u8]) -> Result<Msg, String> {
        let mut r = R(b);
        let m = match r.u8()? {
            1 => Msg::Query {
                id: r.arr()?,
                model: r.str()?,
                seq: r.u32()?,
                layers: Some(r.u32()?).filter(|&l| l != 0),
                share: r.words()?,
            },
            2 => Msg::Begin {
                query: r.arr()?,
                bundle: BundleId { run: r.arr()?, index: r.u32()? },
                fingerprint: r.arr()?,
            },
            3 => Msg::Ready,
            4 => Msg::Refuse(r.str()?),
            5 => Msg::Answer(Answer {
                descriptor: r.str()?,
                bundle: r.str()?,
                n: r.u32()?,
                f: r.u32()?,
                share: r.words()?,
                rounds: r.u64()?,
                comm_bytes: r.u64()?,
                online_ms: r.f64()?,
            }),
            6 => Msg::Failed(r.str()?),
            t => return Err(format!("unknown message type {t}")),
        };
        if !r.0.is_empty() {
            return Err(format!("{} unexpected bytes after the message", r.0.len()));
        }
        Ok(m)
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_an_error() {
        let msgs = [
            Msg::Query {
                id: [3; 16],
                model: "gpt2".into(),
                seq: 32,
                layers: Some(2),
                share: vec![1, 2, u64::MAX],
            },
            Msg::Query { id: [0; 16], model: "bert-tiny".into(), seq: 8, layers: None, share: vec![] },
            Msg::Begin { query: [1; 16], bundle: BundleId { run: [9; 16], index: 4 }, fingerprint: [5; 32] },
            Msg::Ready,
            Msg::Refuse("no".into()),
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
        ];
        for m in msgs {
            let b = m.encode();
            assert_eq!(Msg::decode(&b).unwrap(), m);
            for cut in 0..b.len() {
                assert!(Msg::decode(&b[..cut]).is_err());
            }
            let mut longer = b.clone();
            longer.push(0);
            assert!(Msg::decode(&longer).is_err());
        }
        assert!(Msg::decode(&[9]).is_err());
        // A vector claiming more words than the message holds.
        let mut b = vec![1u8];
        b.extend_from_slice(&[0; 16]);
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(Msg::decode(&b).is_err());
    }

    #[test]
    fn descriptors_round_trip() {
        let d = Descriptor { model: "bert-tiny".into(), seq: 16, layers: 2, imp: "fusefss".into() };
        assert_eq!(Descriptor::parse(&d.render()).unwrap(), d);
        assert!(d.serves("bert-tiny", 16, None) && d.serves("bert-tiny", 16, Some(2)));
        assert!(!d.serves("bert-tiny", 8, None) && !d.serves("gpt2", 16, None));
        assert!(Descriptor::parse("model=x").is_err());
    }
}
