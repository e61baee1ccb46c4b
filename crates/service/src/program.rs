//! What a server runs for a descriptor: the program, its gates, and its identity (the
//! [`fingerprint`] over every public weight), built once per process and descriptor instead
//! of once per query.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use engine::{DynGate, Graph};
use thiserror::Error;

use crate::bundle::fingerprint;
use crate::descriptor::{Descriptor, Shape};

/// A program that cannot be built for a descriptor.
#[derive(Debug, Error)]
pub enum ProgramError {
    /// The model does not load.
    #[error("{0}")]
    Model(#[from] models::ModelError),
    /// A compiled operator does not build.
    #[error("{0}")]
    Gates(#[from] compiler::spec::SpecError),
    /// The model has fewer layers than the bundles.
    #[error("the model has {have} layers, the bundles {want}")]
    Layers {
        /// The model's.
        have: usize,
        /// The descriptor's.
        want: u32,
    },
}

/// A program with its gates and identity.
pub struct Program {
    /// What it is.
    pub desc: Descriptor,
    /// The program.
    pub graph: Graph,
    /// Its gates (`None` for local nodes).
    pub gates: Vec<Option<Box<dyn DynGate>>>,
    /// Its [`fingerprint`].
    pub fingerprint: [u8; 32],
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
        let fingerprint = fingerprint(&graph, desc.imp);
        Ok(Program { desc, graph, gates, fingerprint })
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
