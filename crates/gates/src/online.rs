//! The online phase, sans-IO.
//!
//! A party's protocol is an `async fn` over a [`Ctx`]: it computes shares locally and calls
//! [`Ctx::open`] whenever the two servers must reconstruct masked values. Opening is the only
//! interaction. The future never touches a socket: when it awaits an opening it stops, and
//! the driver ([`Session`]) takes the outgoing message, gives it to whatever transport it
//! has, and hands back the peer's message. `async` is used purely as a way to write
//! multi-round protocols as straight-line code; no runtime is involved (the driver polls
//! with a no-op waker).
//!
//! Openings registered before a protocol stops (for instance by sub-protocols run with
//! [`join`]) go out together in one round. Both parties run the same program, so each knows
//! the shape of the peer's message: a message of any other length is a [`GateError::PeerMessage`].
//!
//! Values are opened in `Z_{2^bits}` and bit-packed to their width on the wire.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use fss::Party;
use fss::codec::{BitReader, BitWriter};
use fss::ring::mask;

use crate::error::GateError;

/// Communication counted by one party (docs/design/brief.md §4 conventions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Sequential message exchanges.
    pub rounds: u64,
    /// Bytes this party sent.
    pub bytes_sent: u64,
    /// Bytes this party received.
    pub bytes_received: u64,
}

impl Stats {
    /// Bytes sent plus received (the communication figure the papers report).
    pub fn comm_bytes(&self) -> u64 {
        self.bytes_sent + self.bytes_received
    }
}

/// One party's online context: who it is, the openings of the current round and the
/// communication so far.
pub struct Ctx {
    party: Party,
    state: RefCell<State>,
    timing: RefCell<Timing>,
    /// Spent keys, wiped while the peer's next message is on its way ([`Ctx::retire`]).
    spent: RefCell<Vec<Box<dyn std::any::Any + Send>>>,
    /// Time spent dropping them ([`Ctx::wipe_time`]).
    wiping: std::cell::Cell<std::time::Duration>,
}

/// Computation time by label: the driver times each poll, and [`Ctx::set_label`] splits it
/// between the label before and after.
#[derive(Default)]
struct Timing {
    label: &'static str,
    since: Option<std::time::Instant>,
    spent: Vec<(&'static str, std::time::Duration)>,
}

impl Timing {
    fn charge(&mut self) {
        if let Some(t) = self.since.take() {
            let d = t.elapsed();
            match self.spent.iter_mut().find(|(l, _)| *l == self.label) {
                Some((_, s)) => *s += d,
                None => self.spent.push((self.label, d)),
            }
        }
    }
}

#[derive(Default)]
struct State {
    /// Openings registered since the last message: (id, this party's encoded shares).
    registered: Vec<(u64, Vec<u8>)>,
    /// Openings sent and awaiting the peer: (id, byte length).
    in_flight: Vec<(u64, usize)>,
    /// The peer's encoded shares per opening id, until its future takes them.
    delivered: std::collections::BTreeMap<u64, Vec<u8>>,
    next_id: u64,
    stats: Stats,
    /// The same by the label in force when each message was sent ([`Ctx::set_label`]).
    by_label: Vec<(&'static str, Stats)>,
    label: &'static str,
}

impl State {
    fn labelled(&mut self) -> &mut Stats {
        let label = self.label;
        match self.by_label.iter().position(|(l, _)| *l == label) {
            Some(i) => &mut self.by_label[i].1,
            None => {
                self.by_label.push((label, Stats::default()));
                &mut self.by_label.last_mut().expect("just pushed").1
            }
        }
    }
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("party", &self.party).field("stats", &self.stats()).finish()
    }
}

impl Ctx {
    /// A fresh context for `party`.
    pub fn new(party: Party) -> Ctx {
        Ctx {
            party,
            state: RefCell::default(),
            timing: RefCell::default(),
            spent: RefCell::default(),
            wiping: std::cell::Cell::default(),
        }
    }

    /// Hand over a key that will not be used again: it is dropped (and so wiped) by the next
    /// [`Ctx::drop_spent`], which a driver calls after sending a round's message and before
    /// waiting for the peer's, or when the context is dropped. Wiping hundreds of MB of keys
    /// then overlaps the wait instead of adding to the computation.
    pub fn retire(&self, key: Box<dyn std::any::Any + Send>) {
        self.spent.borrow_mut().push(key);
    }

    /// Drop the keys handed to [`Ctx::retire`] so far.
    pub fn drop_spent(&self) {
        let spent = std::mem::take(&mut *self.spent.borrow_mut());
        if spent.is_empty() {
            return;
        }
        let t = std::time::Instant::now();
        drop(spent);
        self.wiping.set(self.wiping.get() + t.elapsed());
    }

    /// Time [`Ctx::drop_spent`] has taken so far: dropping, and so wiping, the spent keys.
    pub fn wipe_time(&self) -> std::time::Duration {
        self.wiping.get()
    }

    /// Charge computation from now on to `label` (a layer type, say) instead of the previous
    /// label.
    pub fn set_label(&self, label: &'static str) {
        self.state.borrow_mut().label = label;
        let mut t = self.timing.borrow_mut();
        let running = t.since.is_some();
        t.charge();
        t.label = label;
        if running {
            t.since = Some(std::time::Instant::now());
        }
    }

    /// Computation time so far by label, in order of first use (exchanges excluded: only
    /// the time the driver spends polling this party's protocol counts).
    pub fn times(&self) -> Vec<(&'static str, std::time::Duration)> {
        self.timing.borrow().spent.clone()
    }

    fn start_clock(&self) {
        self.timing.borrow_mut().since = Some(std::time::Instant::now());
    }

    fn stop_clock(&self) {
        self.timing.borrow_mut().charge();
    }

    /// This party.
    pub fn party(&self) -> Party {
        self.party
    }

    /// Communication so far.
    pub fn stats(&self) -> Stats {
        self.state.borrow().stats
    }

    /// Communication so far by label ([`Ctx::set_label`]), in order of first use: each
    /// round's message and the peer's reply count for the label in force when it was sent.
    pub fn stats_by_label(&self) -> Vec<(&'static str, Stats)> {
        self.state.borrow().by_label.clone()
    }

    /// Reconstruct values from additive shares in `Z_{2^bits}`: send this party's shares, add
    /// the peer's. One round (shared with every other opening registered before the protocol
    /// stops).
    ///
    /// # Errors
    /// [`GateError::PeerMessage`] if the peer's message does not have the expected size.
    pub async fn open(&self, shares: &[u64], bits: u32) -> Result<Vec<u64>, GateError> {
        // (Straight into the result: `open_many` would copy its one part out.)
        let mut out = vec![0u64; shares.len()];
        self.open_many_into(&[(shares, bits)], &mut out).await?;
        Ok(out)
    }

    /// Open XOR-shared bits (additive shares in `Z_2`).
    ///
    /// # Errors
    /// As [`Ctx::open`].
    pub async fn open_bits(&self, shares: &[bool]) -> Result<Vec<bool>, GateError> {
        let words: Vec<u64> = shares.iter().map(|&b| b as u64).collect();
        Ok(self.open(&words, 1).await?.into_iter().map(|b| b == 1).collect())
    }

    /// Open several vectors, each in its own ring, in one message.
    ///
    /// # Errors
    /// As [`Ctx::open`].
    pub async fn open_many(&self, parts: &[(&[u64], u32)]) -> Result<Vec<Vec<u64>>, GateError> {
        let mut all = vec![0u64; parts.iter().map(|(v, _)| v.len()).sum()];
        self.open_many_into(parts, &mut all).await?;
        let mut at = 0;
        Ok(parts
            .iter()
            .map(|(v, _)| {
                at += v.len();
                all[at - v.len()..at].to_vec()
            })
            .collect())
    }

    /// [`Ctx::open_many`] into `out`: the opened parts one after another (`out` holds exactly
    /// their total length), so a caller can reuse one buffer across gates.
    ///
    /// # Errors
    /// As [`Ctx::open`], and [`GateError::Length`] if `out` has the wrong length.
    pub async fn open_many_into(&self, parts: &[(&[u64], u32)], out: &mut [u64]) -> Result<(), GateError> {
        let total: usize = parts.iter().map(|(v, _)| v.len()).sum();
        if out.len() != total {
            return Err(GateError::Length { what: "opened values", expected: total, actual: out.len() });
        }
        let id = {
            let mut st = self.state.borrow_mut();
            let id = st.next_id;
            st.next_id += 1;
            st.registered.push((id, encode(parts)));
            id
        };
        let peer = Delivery { ctx: self, id }.await;
        let expected = parts.iter().map(|(v, b)| packed_len(v.len(), *b)).sum::<usize>();
        if peer.len() != expected {
            let round = self.stats().rounds;
            return Err(GateError::PeerMessage { round, expected, actual: peer.len() });
        }
        let (mut at, mut byte) = (0, 0);
        for &(mine, bits) in parts {
            let len = packed_len(mine.len(), bits);
            add_part(mine, bits, &peer[byte..byte + len], &mut out[at..at + mine.len()])?;
            (at, byte) = (at + mine.len(), byte + len);
        }
        Ok(())
    }

    /// Open XOR-shared bit vectors packed per element: element `e` holds `bits` bits in
    /// `mine[e·w..(e + 1)·w]` (`w = ⌈bits / 64⌉`, bits above `bits` ignored); `out` gets the
    /// XOR with the peer's, in the same layout. The message packs `bits` bits per element,
    /// as many bytes as `bits` one-bit parts of [`Ctx::open_many_into`] (one round, shared
    /// like any opening), without a column per bit on either side.
    ///
    /// # Errors
    /// As [`Ctx::open_many_into`].
    pub async fn open_packed_bits_into(
        &self,
        mine: &[u64],
        bits: u32,
        out: &mut [u64],
    ) -> Result<(), GateError> {
        let w = (bits as usize).div_ceil(64).max(1);
        if out.len() != mine.len() || !mine.len().is_multiple_of(w) {
            return Err(GateError::Length {
                what: "opened bit vectors",
                expected: mine.len(),
                actual: out.len(),
            });
        }
        let count = mine.len() / w;
        let widths: Vec<u32> = (0..w as u32).map(|i| (bits - 64 * i).min(64)).collect();
        let id = {
            let mut wr = BitWriter::with_prefix(Vec::with_capacity(packed_len(count, bits)));
            if w == 1 {
                // One word per element (the usual case): a run of fields.
                wr.put_run(bits, count, |e| mine[e]);
            } else {
                for e in mine.chunks_exact(w) {
                    for (&x, &b) in e.iter().zip(&widths) {
                        wr.put(x & mask(b), b);
                    }
                }
            }
            let mut st = self.state.borrow_mut();
            let id = st.next_id;
            st.next_id += 1;
            st.registered.push((id, wr.finish()));
            id
        };
        let peer = Delivery { ctx: self, id }.await;
        let expected = packed_len(count, bits);
        if peer.len() != expected {
            let round = self.stats().rounds;
            return Err(GateError::PeerMessage { round, expected, actual: peer.len() });
        }
        let mut r = BitReader::new(&peer);
        let short = || GateError::Desync("peer message too short");
        if w == 1 {
            let mut theirs = Vec::with_capacity(count);
            r.get_run(bits, count, &mut theirs).map_err(|_| short())?;
            let m = mask(bits);
            for ((o, &x), &y) in out.iter_mut().zip(mine).zip(&theirs) {
                *o = (x ^ y) & m;
            }
            return Ok(());
        }
        for (o, m) in out.chunks_exact_mut(w).zip(mine.chunks_exact(w)) {
            for ((o, &x), &b) in o.iter_mut().zip(m).zip(&widths) {
                *o = (x ^ r.get(b).map_err(|_| short())?) & mask(b);
            }
        }
        Ok(())
    }

    /// The round's message: every opening registered since the last one.
    fn take_message(&self) -> Option<Vec<u8>> {
        let mut st = self.state.borrow_mut();
        if st.registered.is_empty() {
            return None;
        }
        let registered = std::mem::take(&mut st.registered);
        st.in_flight = registered.iter().map(|(id, b)| (*id, b.len())).collect();
        let msg: Vec<u8> = match registered.len() {
            1 => registered.into_iter().map(|(_, b)| b).next().unwrap_or_default(),
            _ => registered.iter().map(|(_, b)| b.as_slice()).collect::<Vec<_>>().concat(),
        };
        st.stats.rounds += 1;
        st.stats.bytes_sent += msg.len() as u64;
        let l = st.labelled();
        l.rounds += 1;
        l.bytes_sent += msg.len() as u64;
        Some(msg)
    }

    /// Split the peer's round message by this party's own opening sizes.
    fn deliver(&self, peer: &[u8]) -> Result<(), GateError> {
        let mut st = self.state.borrow_mut();
        st.stats.bytes_received += peer.len() as u64;
        st.labelled().bytes_received += peer.len() as u64;
        let expected: usize = st.in_flight.iter().map(|(_, len)| len).sum();
        if peer.len() != expected {
            let round = st.stats.rounds;
            return Err(GateError::PeerMessage { round, expected, actual: peer.len() });
        }
        let mut at = 0;
        for (id, len) in std::mem::take(&mut st.in_flight) {
            st.delivered.insert(id, peer[at..at + len].to_vec());
            at += len;
        }
        Ok(())
    }
}

/// Bytes of `count` values of `bits` bits, byte-padded.
pub fn packed_len(count: usize, bits: u32) -> usize {
    (count as u64 * bits as u64).div_ceil(8) as usize
}

/// The parts packed one after the other, each LSB first and padded to a byte.
fn encode(parts: &[(&[u64], u32)]) -> Vec<u8> {
    let total = parts.iter().map(|(v, b)| packed_len(v.len(), *b)).sum();
    let mut all = Vec::with_capacity(total);
    for &(v, bits) in parts {
        if bits == 1 {
            // Opened bits (most of a compiled gate's message): eight per byte.
            all.extend(v.chunks(8).map(|c| c.iter().rev().fold(0u8, |b, &x| b << 1 | (x & 1) as u8)));
        } else {
            let mut w = BitWriter::with_prefix(all);
            w.put_run(bits, v.len(), |i| v[i]);
            all = w.finish();
        }
    }
    all
}

/// `out[i] = (mine[i] + theirs[i]) mod 2^bits` for one part of a peer's message (`bytes`, as
/// [`encode`] packs it).
fn add_part(mine: &[u64], bits: u32, bytes: &[u8], out: &mut [u64]) -> Result<(), GateError> {
    let short = || GateError::Desync("peer message too short");
    if bytes.len() < packed_len(mine.len(), bits) {
        return Err(short());
    }
    if bits == 1 {
        for ((o, &x), i) in out.iter_mut().zip(mine).zip(0..) {
            *o = (x ^ (bytes[i / 8] >> (i % 8)) as u64) & 1;
        }
    } else {
        // The peer's fields in one run, then added (both loops vectorise).
        let mut theirs = Vec::with_capacity(mine.len());
        BitReader::new(bytes).get_run(bits, mine.len(), &mut theirs).map_err(|_| short())?;
        let m = mask(bits);
        for ((o, &x), &y) in out.iter_mut().zip(mine).zip(&theirs) {
            *o = x.wrapping_add(y) & m;
        }
    }
    Ok(())
}

/// Waits until the driver has delivered the peer's shares for one opening.
struct Delivery<'a> {
    ctx: &'a Ctx,
    id: u64,
}

impl Future for Delivery<'_> {
    type Output = Vec<u8>;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Vec<u8>> {
        match self.ctx.state.borrow_mut().delivered.remove(&self.id) {
            Some(bytes) => Poll::Ready(bytes),
            None => Poll::Pending,
        }
    }
}

/// Run two sub-protocols concurrently: their openings share rounds.
pub async fn join<A, B>(a: impl Future<Output = A>, b: impl Future<Output = B>) -> (A, B) {
    Join { a: MaybeDone::Pending(Box::pin(a)), b: MaybeDone::Pending(Box::pin(b)) }.await
}

enum MaybeDone<'a, T> {
    Pending(Pin<Box<dyn Future<Output = T> + 'a>>),
    Done(Option<T>),
}

impl<T> MaybeDone<'_, T> {
    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        if let MaybeDone::Pending(f) = self {
            match f.as_mut().poll(cx) {
                Poll::Ready(v) => *self = MaybeDone::Done(Some(v)),
                Poll::Pending => return false,
            }
        }
        true
    }

    fn take(&mut self) -> T {
        match self {
            MaybeDone::Done(v) => v.take().expect("taken once"),
            MaybeDone::Pending(_) => unreachable!("polled to completion first"),
        }
    }
}

struct Join<'a, A, B> {
    a: MaybeDone<'a, A>,
    b: MaybeDone<'a, B>,
}

// The sub-futures are boxed and the outputs are never pinned, so moving a `Join` is fine.
impl<A, B> Unpin for Join<'_, A, B> {}

impl<A, B> Future for Join<'_, A, B> {
    type Output = (A, B);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<(A, B)> {
        let this = self.get_mut();
        let a = this.a.poll(cx);
        let b = this.b.poll(cx);
        if a && b { Poll::Ready((this.a.take(), this.b.take())) } else { Poll::Pending }
    }
}

/// What a party's protocol needs next.
#[derive(Debug)]
pub enum Progress<T> {
    /// Send these bytes to the peer, then [`Session::deliver`] the peer's bytes.
    Send(Vec<u8>),
    /// The protocol finished.
    Done(Result<T, GateError>),
}

/// Drives one party's protocol future: the sans-IO boundary between protocol and transport.
pub struct Session<'a, T> {
    ctx: &'a Ctx,
    fut: Pin<Box<dyn Future<Output = Result<T, GateError>> + 'a>>,
}

impl<'a, T> Session<'a, T> {
    /// A session running `fut`, which must use `ctx` for its openings.
    pub fn new(ctx: &'a Ctx, fut: impl Future<Output = Result<T, GateError>> + 'a) -> Session<'a, T> {
        Session { ctx, fut: Box::pin(fut) }
    }

    /// Run the protocol until it finishes or needs the peer.
    pub fn advance(&mut self) -> Progress<T> {
        let mut cx = Context::from_waker(Waker::noop());
        self.ctx.start_clock();
        let poll = self.fut.as_mut().poll(&mut cx);
        self.ctx.stop_clock();
        match poll {
            Poll::Ready(r) => Progress::Done(r),
            Poll::Pending => match self.ctx.take_message() {
                Some(msg) => Progress::Send(msg),
                None => Progress::Done(Err(GateError::Desync("protocol waits without opening anything"))),
            },
        }
    }

    /// Hand over the peer's message for the round [`Session::advance`] asked to send.
    ///
    /// # Errors
    /// [`GateError::PeerMessage`] if its size is not the expected one.
    pub fn deliver(&mut self, peer: &[u8]) -> Result<(), GateError> {
        self.ctx.deliver(peer)
    }
}

/// Run both parties' protocols to completion in memory, exchanging each round's messages.
///
/// # Errors
/// The first error of either protocol, or [`GateError::Desync`] if one finishes while the
/// other still wants to exchange.
pub fn run_pair<'a, T>(mut p0: Session<'a, T>, mut p1: Session<'a, T>) -> Result<(T, T), GateError> {
    loop {
        match (p0.advance(), p1.advance()) {
            (Progress::Send(m0), Progress::Send(m1)) => {
                p0.deliver(&m1)?;
                p1.deliver(&m0)?;
            }
            (Progress::Done(r0), Progress::Done(r1)) => return Ok((r0?, r1?)),
            (Progress::Done(Err(e)), _) | (_, Progress::Done(Err(e))) => return Err(e),
            _ => return Err(GateError::Desync("one party finished while the other exchanges")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A retired key is dropped by `drop_spent`, not before; one still held is dropped with
    /// the context.
    #[test]
    fn retired_keys_drop_when_asked_or_with_the_context() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Key(Arc<AtomicUsize>);
        impl Drop for Key {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicUsize::new(0));
        let ctx = Ctx::new(Party::P0);
        ctx.retire(Box::new(Key(dropped.clone())));
        ctx.retire(Box::new(Key(dropped.clone())));
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        ctx.drop_spent();
        assert_eq!(dropped.load(Ordering::SeqCst), 2);
        ctx.retire(Box::new(Key(dropped.clone())));
        drop(ctx);
        assert_eq!(dropped.load(Ordering::SeqCst), 3);
    }

    async fn two_rounds(ctx: &Ctx, a: u64, b: u64) -> Result<(u64, u64), GateError> {
        let x = ctx.open(&[a], 8).await?[0];
        let (y, z) = join(ctx.open(&[b], 3), ctx.open(&[a ^ b, b], 50)).await;
        Ok((x, y?[0] + z?[1]))
    }

    #[test]
    fn openings_reconstruct_and_joined_openings_share_a_round() {
        let (c0, c1) = (Ctx::new(Party::P0), Ctx::new(Party::P1));
        let s0 = Session::new(&c0, two_rounds(&c0, 200, 5));
        let s1 = Session::new(&c1, two_rounds(&c1, 100, 6));
        let (r0, r1) = run_pair(s0, s1).unwrap();
        assert_eq!(r0, r1);
        assert_eq!(r0, (300 % 256, (11 % 8) + 11));
        let st = c0.stats();
        assert_eq!(st.rounds, 2);
        // Round 1: one byte. Round 2: 3 bits (1 byte) + 2 × 50 bits (13 bytes).
        assert_eq!(st.bytes_sent, 1 + 1 + 13);
        assert_eq!(st.comm_bytes(), 2 * 15);
    }

    #[test]
    fn packing_matches_the_bit_writer_and_opens_every_width() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for len in [0usize, 1, 7, 8, 9, 63, 64, 65, 200, 1000] {
            for bits in [1u32, 2, 7, 13, 64] {
                let a: Vec<u64> = (0..len).map(|_| next()).collect();
                let b: Vec<u64> = (0..len).map(|_| next()).collect();
                let parts = [(&a[..], bits), (&a[..len / 2], 1), (&b[..], 5)];
                // The packing is the generic writer's, part by part (each padded to a byte).
                let mut want = vec![];
                for (v, w) in parts {
                    let mut bw = BitWriter::new();
                    v.iter().for_each(|&x| bw.put(x, w));
                    want.extend(bw.finish());
                }
                assert_eq!(encode(&parts), want, "len {len} bits {bits}");
                // Adding the peer's part reconstructs the sum mod 2^bits.
                let theirs = encode(&[(&b[..], bits)]);
                let mut out = vec![0; len];
                add_part(&a, bits, &theirs, &mut out).unwrap();
                for i in 0..len {
                    assert_eq!(out[i], a[i].wrapping_add(b[i]) & mask(bits));
                }
                if len > 0 {
                    assert!(add_part(&a, bits, &theirs[..theirs.len() - 1], &mut out).is_err());
                }
            }
        }
    }

    #[test]
    fn open_many_into_concatenates_parts_and_checks_its_buffer() {
        async fn parts(ctx: &Ctx, a: u64) -> Result<Vec<u64>, GateError> {
            let mut out = vec![0u64; 3];
            ctx.open_many_into(&[(&[a, 1], 1), (&[a], 16)], &mut out).await?;
            // A buffer of the wrong length is refused before anything is sent.
            let mut wrong = vec![0u64; 3];
            let err = ctx.open_many_into(&[(&[a], 8), (&[a], 8)], &mut wrong).await;
            assert!(matches!(err, Err(GateError::Length { expected: 2, actual: 3, .. })));
            Ok(out)
        }
        let (c0, c1) = (Ctx::new(Party::P0), Ctx::new(Party::P1));
        let (r0, r1) =
            run_pair(Session::new(&c0, parts(&c0, 3)), Session::new(&c1, parts(&c1, 0xffff))).unwrap();
        assert_eq!(r0, r1);
        assert_eq!(r0, vec![0, 0, 2]);
    }

    #[test]
    fn packed_bits_open_to_their_xor() {
        // 70 bits per element (two words), three elements; shares with junk above bit 70.
        async fn open(ctx: &Ctx, mine: Vec<u64>) -> Result<Vec<u64>, GateError> {
            let mut out = vec![0u64; mine.len()];
            ctx.open_packed_bits_into(&mine, 70, &mut out).await?;
            let err = ctx.open_packed_bits_into(&mine, 70, &mut [0u64; 2]).await;
            assert!(matches!(err, Err(GateError::Length { .. })));
            Ok(out)
        }
        let a = vec![u64::MAX, 0xffff_ff80, 5, 0x3f, 0, 1 << 9];
        let b = vec![1, 0xffff_ff00 | 0x3f, 6, 0x40, 7, 0];
        let (c0, c1) = (Ctx::new(Party::P0), Ctx::new(Party::P1));
        let (r0, r1) =
            run_pair(Session::new(&c0, open(&c0, a.clone())), Session::new(&c1, open(&c1, b.clone())))
                .unwrap();
        assert_eq!(r0, r1);
        let want: Vec<u64> = a
            .iter()
            .zip(&b)
            .enumerate()
            .map(|(i, (x, y))| (x ^ y) & if i % 2 == 0 { u64::MAX } else { 0x3f })
            .collect();
        assert_eq!(r0, want);
        // As many bytes as 70 one-bit parts.
        assert_eq!(c0.stats().bytes_sent, packed_len(3, 70) as u64);
    }

    /// One word per element (a run of fields each way), short runs and long ones, junk
    /// above the width; a peer message a byte short is an error.
    #[test]
    fn packed_bits_of_one_word_open_to_their_xor() {
        async fn open(ctx: &Ctx, mine: Vec<u64>, bits: u32) -> Result<Vec<u64>, GateError> {
            let mut out = vec![0u64; mine.len()];
            ctx.open_packed_bits_into(&mine, bits, &mut out).await?;
            Ok(out)
        }
        for (bits, len) in [(1u32, 5usize), (13, 3), (13, 300), (37, 1000), (64, 40)] {
            let a: Vec<u64> = (0..len as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
            let b: Vec<u64> =
                (0..len as u64).map(|i| (i ^ 0x5555).wrapping_mul(0xbf58_476d_1ce4_e5b9)).collect();
            let (c0, c1) = (Ctx::new(Party::P0), Ctx::new(Party::P1));
            let (r0, r1) = run_pair(
                Session::new(&c0, open(&c0, a.clone(), bits)),
                Session::new(&c1, open(&c1, b.clone(), bits)),
            )
            .unwrap();
            assert_eq!(r0, r1);
            let want: Vec<u64> = a.iter().zip(&b).map(|(x, y)| (x ^ y) & mask(bits)).collect();
            assert_eq!(r0, want, "bits {bits} len {len}");
            assert_eq!(c0.stats().bytes_sent, packed_len(len, bits) as u64);
            // A peer that sends a byte less.
            let c = Ctx::new(Party::P0);
            let mut s = Session::new(&c, open(&c, a.clone(), bits));
            let Progress::Send(m) = s.advance() else { panic!("no message") };
            assert!(s.deliver(&m[..m.len() - 1]).is_err() || matches!(s.advance(), Progress::Done(Err(_))));
        }
    }

    #[test]
    fn a_desynchronised_peer_is_an_error() {
        async fn short(ctx: &Ctx) -> Result<(), GateError> {
            ctx.open(&[1], 8).await?;
            Ok(())
        }
        async fn long(ctx: &Ctx) -> Result<(), GateError> {
            ctx.open(&[1, 2], 8).await?;
            Ok(())
        }
        let (c0, c1) = (Ctx::new(Party::P0), Ctx::new(Party::P1));
        let r = run_pair(Session::new(&c0, short(&c0)), Session::new(&c1, long(&c1)));
        assert!(matches!(r, Err(GateError::PeerMessage { .. })));
        let (c0, c1) = (Ctx::new(Party::P0), Ctx::new(Party::P1));
        let r = run_pair(Session::new(&c0, short(&c0)), Session::new(&c1, async { Ok(()) }));
        assert!(matches!(r, Err(GateError::Desync(_))));
    }
}
