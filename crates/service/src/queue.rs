//! Queries waiting at a server: admitted up to a bound (the excess is refused at once,
//! reliability probe, defect 3), expired without spending a bundle when their other half
//! never comes (defect 5).

use std::time::{Duration, Instant};

use crate::descriptor::Shape;
use crate::proto::{QueryHead, QueryId};

/// How many queries wait and for how long.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Queries waiting at most (running ones not counted).
    pub queue: usize,
    /// How long party 0 tries to pair a query with party 1's half before it fails it (no
    /// bundle spent); party 1 keeps an unpaired half twice as long.
    pub pair_timeout: Duration,
    /// How long party 0 waits before proposing an unpaired query again.
    pub retry: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { queue: 16, pair_timeout: Duration::from_secs(10), retry: Duration::from_millis(20) }
    }
}

/// One server's half of a query, with whatever the runtime keeps with it (its client's
/// connection).
#[derive(Debug)]
pub struct Half<C> {
    /// The query as the client sent it.
    pub head: QueryHead,
    /// Its shape, validated.
    pub shape: Shape,
    /// This server's share of the input.
    pub share: Vec<u64>,
    /// The runtime's handle on the client.
    pub client: C,
    /// When it arrived.
    pub arrived: Instant,
}

impl<C> Half<C> {
    /// The query's id.
    pub fn id(&self) -> QueryId {
        self.head.id
    }
}

/// Why a query was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The queue is full.
    #[error("the server is busy ({0} queries waiting): try again later")]
    Busy(usize),
    /// A query with this id is waiting already.
    #[error("a query with this id is waiting already")]
    Duplicate,
}

/// Queries in arrival order, each with the time it may be tried next.
#[derive(Debug)]
pub struct Queue<C> {
    limits: Limits,
    waiting: Vec<(Half<C>, Instant)>,
    /// How long a half lives unpaired.
    life: Duration,
}

impl<C> Queue<C> {
    /// Party 0's queue.
    pub fn leader(limits: Limits) -> Queue<C> {
        Queue { limits, waiting: vec![], life: limits.pair_timeout }
    }

    /// Party 1's queue: halves live twice as long, so that party 0 decides first.
    pub fn follower(limits: Limits) -> Queue<C> {
        Queue { limits, waiting: vec![], life: 2 * limits.pair_timeout }
    }

    /// Queries waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Admit a query, or give it back with the reason.
    ///
    /// # Errors
    /// The half and the [`Refusal`].
    pub fn admit(&mut self, half: Half<C>) -> Result<(), Box<(Half<C>, Refusal)>> {
        if self.waiting.iter().any(|(h, _)| h.id() == half.id()) {
            return Err(Box::new((half, Refusal::Duplicate)));
        }
        if self.waiting.len() >= self.limits.queue {
            return Err(Box::new((half, Refusal::Busy(self.waiting.len()))));
        }
        let at = half.arrived;
        self.waiting.push((half, at));
        Ok(())
    }

    /// Remove and return the halves that waited past their life.
    pub fn expired(&mut self, now: Instant) -> Vec<Half<C>> {
        let life = self.life;
        let (old, keep) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(h, _)| now.saturating_duration_since(h.arrived) >= life);
        self.waiting = keep;
        old.into_iter().map(|(h, _)| h).collect()
    }

    /// Take the oldest query that may be tried now.
    pub fn next(&mut self, now: Instant) -> Option<Half<C>> {
        let i = self.waiting.iter().position(|(_, at)| *at <= now)?;
        Some(self.waiting.remove(i).0)
    }

    /// Put a query back (in its place by arrival) to be tried again after the retry delay.
    pub fn later(&mut self, half: Half<C>, now: Instant) {
        let i = self.waiting.iter().position(|(h, _)| h.arrived > half.arrived).unwrap_or(self.waiting.len());
        self.waiting.insert(i, (half, now + self.limits.retry));
    }

    /// Take the query `id`, if it waits.
    pub fn take(&mut self, id: &QueryId) -> Option<Half<C>> {
        let i = self.waiting.iter().position(|(h, _)| h.id() == *id)?;
        Some(self.waiting.remove(i).0)
    }

    /// The query `id`, if it waits.
    pub fn get(&self, id: &QueryId) -> Option<&Half<C>> {
        self.waiting.iter().map(|(h, _)| h).find(|h| h.id() == *id)
    }

    /// The earliest time something may change (a retry or an expiry), if any waits.
    pub fn next_due(&self) -> Option<Instant> {
        self.waiting.iter().map(|(h, at)| (*at).min(h.arrived + self.life)).min()
    }
}
