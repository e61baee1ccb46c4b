//! Which model, shape and implementation a bundle's keys are for, as the dealer writes it
//! into every bundle (`model=bert-tiny seq=128 layers=2 impl=fusefss`), and the shape a
//! client asks for.

use std::fmt;
use std::str::FromStr;

use engine::Impl;
use models::ModelName;

use crate::text;

/// A bundle's model, shape and implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Descriptor {
    /// The model.
    pub model: ModelName,
    /// Tokens per query.
    pub seq: u32,
    /// Layers used.
    pub layers: u32,
    /// Implementation of the nonlinear layers.
    pub imp: Impl,
}

/// The shape a client asks for (the client does not choose the implementation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// The model.
    pub model: ModelName,
    /// Tokens.
    pub seq: u32,
    /// Layers, if the client cares.
    pub layers: Option<u32>,
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at seq {}", self.model, self.seq)?;
        if let Some(l) = self.layers {
            write!(f, " ({l} layers)")?;
        }
        Ok(())
    }
}

impl Descriptor {
    /// Whether keys for this descriptor run a query of `shape`.
    pub fn serves(&self, shape: &Shape) -> bool {
        self.model == shape.model && self.seq == shape.seq && shape.layers.is_none_or(|l| l == self.layers)
    }

    /// For people: `bert-tiny at seq 16 (2 layers, fusefss)`.
    pub fn human(&self) -> String {
        format!("{} at seq {} ({} layers, {})", self.model, self.seq, self.layers, self.imp)
    }
}

/// The machine form, as in bundle headers.
impl fmt::Display for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "model={} seq={} layers={} impl={}", self.model, self.seq, self.layers, self.imp)
    }
}

/// A descriptor that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad descriptor {text:?}: {why}")]
pub struct BadDescriptor {
    /// The text (cleaned for printing).
    pub text: String,
    /// What is wrong.
    pub why: String,
}

impl FromStr for Descriptor {
    type Err = BadDescriptor;

    fn from_str(s: &str) -> Result<Descriptor, BadDescriptor> {
        let bad = |why: String| BadDescriptor { text: text::clean(s, 120), why };
        let (mut model, mut seq, mut layers, mut imp) = (None, None, None, None);
        for part in s.split_whitespace() {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("field {} has no `=`", text::clean(part, 40))))?;
            let num = |v: &str| {
                v.parse::<u32>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| bad(format!("{k} is not a positive number")))
            };
            match k {
                "model" => model = Some(v.parse::<ModelName>().map_err(|e| bad(e.to_string()))?),
                "seq" => seq = Some(num(v)?),
                "layers" => layers = Some(num(v)?),
                "impl" => imp = Some(v.parse::<Impl>().map_err(bad)?),
                _ => {}
            }
        }
        match (model, seq, layers, imp) {
            (Some(model), Some(seq), Some(layers), Some(imp)) => Ok(Descriptor { model, seq, layers, imp }),
            _ => Err(bad("needs model, seq, layers and impl".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip_and_match_shapes() {
        let d = Descriptor { model: ModelName::BertTiny, seq: 16, layers: 2, imp: Impl::Fusefss };
        assert_eq!(d.to_string().parse::<Descriptor>().unwrap(), d);
        let s = |seq, layers| Shape { model: ModelName::BertTiny, seq, layers };
        assert!(d.serves(&s(16, None)) && d.serves(&s(16, Some(2))));
        assert!(!d.serves(&s(8, None)) && !d.serves(&s(16, Some(1))));
        assert!(!d.serves(&Shape { model: ModelName::Gpt2, seq: 16, layers: None }));
        for bad in [
            "model=bert-tiny",
            "model=x seq=1 layers=1 impl=sigma",
            "model=gpt2 seq=0 layers=1 impl=sigma",
            "junk",
        ] {
            assert!(bad.parse::<Descriptor>().is_err(), "{bad}");
        }
    }
}
