//! What a server runs for a descriptor: the program, its gates, and its identity (the
//! [`fingerprint`] over every public weight), built once per process and descriptor instead
//! of once per query.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use engine::{Graph, NodeGates};

use crate::bundle::fingerprint;
use crate::descriptor::{Descriptor, Shape};
use crate::session::{self, SessionShape};

pub use crate::error::ProgramError;

/// A program with its gates and identity; for a generation session, its first step (the
/// prefill) and what builds the others.
pub struct Program {
    /// What it is.
    pub desc: Descriptor,
    /// The program (a session's first step).
    pub graph: Graph,
    /// Its gates (`None` for local nodes), shared with the threads that decode its keys
    /// ahead ([`crate::BundleReader::decode_ahead`]).
    pub gates: engine::layers::Gates,
    /// Its [`fingerprint`] (a session's [`session::identity`]).
    pub fingerprint: [u8; 32],
    /// Sections of a bundle for it.
    pub sections: usize,
    /// The model, for a session's later steps.
    model: Option<Arc<models::registry::Loaded>>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program").field("desc", &self.desc).finish_non_exhaustive()
    }
}

impl Program {
    /// Build the program a descriptor names from this process's copy of the model.
    ///
    /// # Errors
    /// [`ProgramError`] if the model does not load or the program does not build.
    pub fn build(desc: Descriptor) -> Result<Program, ProgramError> {
        let loaded = models::registry::load(desc.model, Some(desc.layers as usize))?;
        if loaded.layers() != desc.layers as usize {
            return Err(ProgramError::Layers { have: loaded.layers(), want: desc.layers });
        }
        let graph = loaded.graph(desc.seq as usize)?;
        let gates = engine::build(&graph, desc.imp)?;
        match desc.new {
            None => {
                let fingerprint = fingerprint(&graph, desc.imp);
                let sections = 2 + graph.gates();
                Ok(Program { desc, graph, gates: Arc::new(gates), fingerprint, sections, model: None })
            }
            Some(_) => {
                let Some(llama) = loaded.llama() else {
                    return Err(ProgramError::Unsupported(format!("{} does not generate text", desc.model)));
                };
                let (fingerprint, sections) = session::identity(
                    &llama.fx,
                    desc.imp,
                    Self::session_shape(&desc),
                    &mut Default::default(),
                )?;
                Ok(Program {
                    desc,
                    graph,
                    gates: Arc::new(gates),
                    fingerprint,
                    sections,
                    model: Some(Arc::new(loaded)),
                })
            }
        }
    }

    fn session_shape(desc: &Descriptor) -> SessionShape {
        SessionShape { prompt_len: desc.seq as usize, new_tokens: desc.steps() }
    }

    /// Open a bundle of this program's keys for `party` (checked against its identity).
    ///
    /// # Errors
    /// As [`crate::BundleReader::open_sections`].
    pub fn open_bundle(
        &self,
        path: &std::path::Path,
        party: fss::Party,
    ) -> Result<crate::BundleReader, crate::BundleError> {
        crate::BundleReader::open_sections(path, self.graph.n, self.sections, &self.fingerprint, party)
    }

    /// Steps: 1, or a session's.
    pub fn steps(&self) -> usize {
        self.desc.steps()
    }

    /// Step `t` (≥ 1) of a session: its program and gates.
    ///
    /// # Errors
    /// [`ProgramError`] if it does not build, or this is not a session.
    pub fn step(&self, t: usize) -> Result<(Graph, NodeGates), ProgramError> {
        match self.model.as_deref().and_then(|m| m.llama()) {
            Some(llama) if t < self.steps() => {
                session::step_program(&llama.fx, self.desc.imp, Self::session_shape(&self.desc), t)
            }
            _ => Err(ProgramError::Unsupported(format!("{} has no step {t}", self.desc.human()))),
        }
    }

    /// The model (for a session: its tokenizer and weights).
    pub fn model(&self) -> Option<&models::registry::Loaded> {
        self.model.as_deref()
    }

    /// Ring words in a client's input share.
    pub fn input_len(&self) -> usize {
        self.graph.input.len()
    }
}

/// The programs a server has built, by descriptor, with the reason for those that failed.
#[derive(Debug, Default)]
pub struct Programs {
    built: HashMap<Descriptor, Result<Arc<Program>, String>>,
    catalog: Catalog,
}

impl Programs {
    /// The program for `desc`, built on first use (a failure is remembered too).
    ///
    /// # Errors
    /// Why it cannot be built.
    pub fn get(&mut self, desc: Descriptor) -> Result<Arc<Program>, String> {
        let catalog = &self.catalog;
        self.built
            .entry(desc)
            .or_insert_with(|| {
                let p = Program::build(desc).map(Arc::new).map_err(|e| e.to_string());
                if let Ok(p) = &p {
                    catalog.add(desc, p.input_len());
                }
                p
            })
            .clone()
    }

    /// The input sizes of the programs built so far, shared with the connection threads.
    pub fn catalog(&self) -> Catalog {
        self.catalog.clone()
    }
}

/// The input length of every program a server can run, readable from any thread: a
/// connection thread limits a query's share frame by it before reading the share
/// (reliability probe, defect 4), and refuses a shape no bundle serves at once.
#[derive(Clone, Debug, Default)]
pub struct Catalog(Arc<RwLock<Vec<(Descriptor, usize)>>>);

impl Catalog {
    fn add(&self, desc: Descriptor, input_len: usize) {
        let mut v = self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !v.iter().any(|(d, _)| *d == desc) {
            v.push((desc, input_len));
        }
    }

    /// What the programs built so far are for, for people (sorted).
    pub fn served(&self) -> Vec<String> {
        let v = self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut s: Vec<String> = v.iter().map(|(d, _)| d.human()).collect();
        s.sort();
        s
    }

    /// The input length of a program that serves `shape`, if any.
    pub fn input_len(&self, shape: &Shape) -> Option<usize> {
        let v = self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        v.iter().find(|(d, _)| d.serves(shape)).map(|&(_, n)| n)
    }
}
