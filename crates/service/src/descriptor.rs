//! Which model, shape and implementation a bundle's keys are for, as the dealer writes it
//! into every bundle (`model=bert-tiny seq=128 layers=2 impl=fusefss`; a generation
//! session's bundle adds its new tokens: `model=smollm2 seq=32 new=32 layers=30
//! impl=fusefss`, `seq` being the prompt's length), and the shape a client asks for.

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
    /// For a generation session: the tokens it generates at most (its steps: the prefill
    /// over `seq` prompt tokens, then `new − 1` decode steps).
    pub new: Option<u32>,
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
    /// For a generation: the tokens it wants at most.
    pub new: Option<u32>,
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.new {
            Some(g) => write!(f, "{} generating {g} tokens after a prompt of {}", self.model, self.seq)?,
            None => write!(f, "{} at seq {}", self.model, self.seq)?,
        }
        if let Some(l) = self.layers {
            write!(f, " ({l} layers)")?;
        }
        Ok(())
    }
}

impl Descriptor {
    /// Whether keys for this descriptor run a query of `shape`.
    pub fn serves(&self, shape: &Shape) -> bool {
        let steps = match (self.new, shape.new) {
            (None, None) => true,
            (Some(have), Some(want)) => want <= have,
            _ => false,
        };
        steps
            && self.model == shape.model
            && self.seq == shape.seq
            && shape.layers.is_none_or(|l| l == self.layers)
    }

    /// Programs the keys are for: 1, or a session's steps.
    pub fn steps(&self) -> usize {
        self.new.map_or(1, |g| g as usize)
    }

    /// For people: `bert-tiny at seq 16 (2 layers, fusefss)`, `smollm2 generating up to 32
    /// tokens after a prompt of 32 (30 layers, fusefss)`.
    pub fn human(&self) -> String {
        match self.new {
            Some(g) => format!(
                "{} generating up to {g} tokens after a prompt of {} ({} layers, {})",
                self.model, self.seq, self.layers, self.imp
            ),
            None => format!("{} at seq {} ({} layers, {})", self.model, self.seq, self.layers, self.imp),
        }
    }
}

/// The machine form, as in bundle headers.
impl fmt::Display for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "model={} seq={}", self.model, self.seq)?;
        if let Some(g) = self.new {
            write!(f, " new={g}")?;
        }
        write!(f, " layers={} impl={}", self.layers, self.imp)
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
        let (mut model, mut seq, mut layers, mut imp, mut new) = (None, None, None, None, None);
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
                "new" => new = Some(num(v)?),
                "impl" => imp = Some(v.parse::<Impl>().map_err(bad)?),
                _ => {}
            }
        }
        match (model, seq, layers, imp) {
            (Some(model), Some(seq), Some(layers), Some(imp)) => {
                Ok(Descriptor { model, seq, layers, imp, new })
            }
            _ => Err(bad("needs model, seq, layers and impl".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip_and_match_shapes() {
        let d = Descriptor { model: ModelName::BertTiny, seq: 16, layers: 2, imp: Impl::Fusefss, new: None };
        assert_eq!(d.to_string().parse::<Descriptor>().unwrap(), d);
        let s = |seq, layers| Shape { model: ModelName::BertTiny, seq, layers, new: None };
        assert!(d.serves(&s(16, None)) && d.serves(&s(16, Some(2))));
        assert!(!d.serves(&s(8, None)) && !d.serves(&s(16, Some(1))));
        assert!(!d.serves(&Shape { model: ModelName::Gpt2, seq: 16, layers: None, new: None }));
        // A session serves generations of at most its new tokens, and nothing else.
        let g = Descriptor { model: ModelName::Smollm2, seq: 32, layers: 30, imp: Impl::Sigma, new: Some(8) };
        assert_eq!(g.to_string(), "model=smollm2 seq=32 new=8 layers=30 impl=sigma");
        assert_eq!(g.to_string().parse::<Descriptor>().unwrap(), g);
        let want = |new| Shape { model: ModelName::Smollm2, seq: 32, layers: None, new };
        assert!(g.serves(&want(Some(8))) && g.serves(&want(Some(1))));
        assert!(!g.serves(&want(Some(9))) && !g.serves(&want(None)));
        assert!(!d.serves(&Shape { new: Some(1), ..s(16, None) }));
        assert_eq!((d.steps(), g.steps()), (1, 8));
        for bad in [
            "model=bert-tiny",
            "model=x seq=1 layers=1 impl=sigma",
            "model=gpt2 seq=0 layers=1 impl=sigma",
            "model=smollm2 seq=4 new=0 layers=1 impl=sigma",
            "junk",
        ] {
            assert!(bad.parse::<Descriptor>().is_err(), "{bad}");
        }
    }
}
