//! Key bundles on disk (docs/design/brief.md §7): one party's keys for one query, written by the dealer
//! as they are made and read by a server as the program runs, so that a bundle may be larger
//! than memory. [`crate::store::Store`] makes every bundle single-use across crashes.
//!
//! A bundle file (`bundle-RUN-INDEX.fkb`, format version 3, little-endian):
//!
//! | field | bytes |
//! |---|---|
//! | magic `FUSEFSSK` | 8 |
//! | version | 2 |
//! | party, reserved | 1 + 1 |
//! | bundle id: dealer run, index | 16 + 4 |
//! | program fingerprint ([`fingerprint`]) | 32 |
//! | descriptor (UTF-8, say which model and shape) | 2 + len |
//! | section count | 4 |
//! | CRC-32 of the header so far | 4 |
//! | sections: kind, node, length, bytes, CRC-32 | 1 + 4 + 8 + len + 4 |
//! | end marker `FUSEFSSE` | 8 |
//!
//! Sections come in program order: the input mask share, one key per gate node, the output
//! mask share. A gate key's section is a header, the key's side region and its bit stream
//! (`gates::keyio::encode_pair`). The header's first byte is `0` for a key with all its
//! share words, `1` for a FuseFSS key half of whose share words are the pad of the party's
//! own 16-byte seed, which follows seven zero bytes, split at the share bit in the next 8
//! bytes, and whose tree roots come from the root stream of the same seed; its last 8
//! bytes are the side region's length. The side region holds the key's correction words
//! as 64-bit words, 8-byte aligned, which a server reads in place (`fss::words`). CRCs
//! detect corruption, not tampering: the dealer-to-server path is trusted (SECURITY.md).

use std::any::Any;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fss::Party;
use fss::codec::{BitReader, BitWriter};
use fss::words::KeyBuffer;
use gates::GateError;
use sha2::{Digest, Sha256};
use thiserror::Error;

use engine::{DynGate, EngineError, Graph, Impl, KeySink, KeySource, Op, Weights};

use crate::key_bytes::{Buffers, KeyBytes, SharedSection};
use crate::private;

const MAGIC: &[u8; 8] = b"FUSEFSSK";
const END: &[u8; 8] = b"FUSEFSSE";
/// The bundle format version this build reads and writes.
pub const VERSION: u16 = 3;
/// Revision of the gates' protocols and key layouts, part of every fingerprint: bump it when
/// a gate's key changes, so that bundles dealt by an older build are refused as foreign
/// instead of being misread. 2: one-round shift in FuseFSS LayerNorm and small truncations,
/// vector DCF values hashed by direction tweak. 3: FuseFSS softmax max tree in
/// `Z_{2^{cmp_bits+1}}` with one-round upper levels. 4: FuseFSS GeLU as a split row table,
/// rsqrt with a floored grid split at the floor, opened-bit masks read from ring words.
/// 5: FuseFSS softmax's `e^{−x}` as a split row table. 6: compiled gates deal one word per
/// public monomial of a form. 7: FuseFSS GeLU read with slack (one window, no sign walk).
/// 8: FuseFSS GeLU's rows stop where its residual is below their error (178 rows);
/// LayerNorm's `1/σ` grid in runs of `2^12` positions (three runs at n = 37). 9: FuseFSS
/// softmax's `e^{−x}` in rows of 64 ulps. 10: FuseFSS keys seeded (half of each party's share
/// words from a pad). 11: FuseFSS keys' tree roots from the parties' root streams. 12: FuseFSS
/// truncations open only the bits their readers read. 13: pre-norm seams as one gate
/// (`Op::ResidualRmsNorm`), FuseFSS's with the truncation's carry deferred into RMSNorm.
/// 14: FuseFSS softmax's `e^{−x}`, row sums, `1/S` and product in `Z_{2^{2f+3}}`. 15: FuseFSS
/// LayerNorm's `1/σ` grid of 7 mantissa bits. 16: FuseFSS softmax's `e^{−x}` in rows of 32
/// ulps and its `1/S` grid of 8 mantissa bits. 17: FuseFSS LayerNorm's gain between its
/// truncations with the first's carry deferred (`gates::gain`). 18: FuseFSS LayerNorm's mean
/// and centred sums of squares in one round (`gates::centre`). 19: a split step function
/// whose jumps all vanish deals no carry key (a grouped grid's lone first start; no model's
/// key measured to change, bumped to be safe). 20: FuseFSS GeLU with the two rows beside its
/// kink halved, read as a row of the input shifted by half a row (`compiler::program`).
/// 21: FuseFSS truncations (shifts up to 13 bits) read their carry from XOR-shared truth
/// tables (`gates::carry_table`). 22: FuseFSS softmax's `e^{−x}` as joined lines in rows of
/// 128 ulps at 5 more fractional bits (`library::nexp_interp`), `1/S` reading its sum there.
/// 23: FuseFSS truncations' first round opens each element's three masked bits as one
/// 3-bit field (the same bytes, another order: no key changes). 24: FuseFSS softmax's
/// product truncation (and any FuseFSS truncation by 14 to 19 bits) reads its carry from
/// truth tables (`gates::carry_table`: a high chunk of up to 10 bits, or a middle chunk),
/// and every table carry reads a chunk's equality from its comparison table (no table of
/// its own). 25: FuseFSS LayerNorm's deferred gain reads its second carry from truth
/// tables for either value of the first, opened in the first's round (`gates::gain`), and
/// opens its product `x·(1/σ)` in a narrower ring (`composite::norm_product_bits`); the
/// `1/σ` grid's first row reads its top's value.
pub const PROTOCOL_REVISION: u64 = 25;
const KIND_INPUT: u8 = 1;
const KIND_GATE: u8 = 2;
const KIND_OUTPUT: u8 = 3;
/// The largest section a reader accepts (a length beyond it is corruption).
const MAX_SECTION: u64 = 1 << 40;
/// Extension of bundle files.
pub const EXTENSION: &str = "fkb";

/// Why a bundle or a key store cannot be used.
#[derive(Debug, Error)]
pub enum BundleError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The failure.
        source: std::io::Error,
    },
    /// The file is not a bundle, or is damaged.
    #[error("{path}: corrupted bundle: {what}")]
    Corrupted {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
    /// The bundle was written by another version of the format.
    #[error("{path}: bundle format version {found}, this build reads version {VERSION}")]
    Version {
        /// The file.
        path: String,
        /// Its version.
        found: u16,
    },
    /// The bundle holds keys for another program, party or shape.
    #[error("{path}: {what}")]
    Mismatch {
        /// The file.
        path: String,
        /// What differs.
        what: String,
    },
    /// The bundle was used before: it must never be used again.
    #[error("bundle {0} was already used (keys are single-use)")]
    AlreadyUsed(BundleId),
    /// Another server process holds the store.
    #[error(
        "{path}: the key store is in use by another server (process {holder}); one store is served by one process at a time"
    )]
    Locked {
        /// The store.
        path: String,
        /// What the lock file says about its holder.
        holder: String,
    },
    /// The store holds the other party's keys.
    #[error("{path}: this folder holds party {found}'s keys, not party {wanted}'s (check --party and --dir)")]
    WrongParty {
        /// The store.
        path: String,
        /// The party it is for.
        found: u8,
        /// The party that opened it.
        wanted: u8,
    },
    /// A key section did not decode.
    #[error("{path}: node {node}: {source}")]
    Decode {
        /// The file.
        path: String,
        /// The gate node.
        node: usize,
        /// The failure.
        source: fss::DecodeError,
    },
}

impl From<BundleError> for GateError {
    fn from(e: BundleError) -> GateError {
        GateError::Keys(e.to_string())
    }
}

/// Which bundle: the dealer run that wrote it and its number in that run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BundleId {
    /// Random identifier of the dealer run.
    pub run: [u8; 16],
    /// Number of the bundle within the run.
    pub index: u32,
}

impl fmt::Display for BundleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.run {
            write!(f, "{b:02x}")?;
        }
        write!(f, "-{}", self.index)
    }
}

impl std::str::FromStr for BundleId {
    type Err = String;
    fn from_str(s: &str) -> Result<BundleId, String> {
        let (run, index) = s.split_once('-').ok_or("expected RUN-INDEX")?;
        if run.len() != 32 {
            return Err("the run is 32 hex digits".into());
        }
        let mut r = [0u8; 16];
        for (i, b) in r.iter_mut().enumerate() {
            *b = u8::from_str_radix(&run[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
        }
        Ok(BundleId { run: r, index: index.parse().map_err(|e: std::num::ParseIntError| e.to_string())? })
    }
}

impl BundleId {
    /// The file name of this bundle.
    pub fn file_name(&self) -> String {
        let run: String = self.run[..4].iter().map(|b| format!("{b:02x}")).collect();
        format!("bundle-{run}-{:06}.{EXTENSION}", self.index)
    }
}

/// What a bundle says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleHeader {
    /// The party whose keys it holds.
    pub party: Party,
    /// Its id.
    pub id: BundleId,
    /// [`fingerprint`] of the program it was dealt for.
    pub fingerprint: [u8; 32],
    /// Which model and shape (free text chosen by the dealer, for messages and matching).
    pub descriptor: String,
    /// Sections that follow.
    pub sections: u32,
}

/// A hash of everything that determines a program's keys: widths, shapes, every layer with
/// its public weights, the implementation of its gates and [`PROTOCOL_REVISION`]. Keys dealt for one program are
/// useless (and must not be used) for any other.
pub fn fingerprint(g: &Graph, imp: Impl) -> [u8; 32] {
    Fingerprints::default().of(g, imp)
}

/// [`fingerprint`]s of the programs of one model: each weight matrix is hashed once (a
/// session's programs share them; SmolLM2's are 1 GB), then stands in by its digest.
#[derive(Default)]
pub struct Fingerprints {
    /// By the matrix's address and the ring width; the clone kept here keeps the address
    /// from being reused.
    digests: std::collections::HashMap<(usize, u32), (Weights, [u8; 32])>,
}

impl fmt::Debug for Fingerprints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fingerprints").field("matrices", &self.digests.len()).finish()
    }
}

impl Fingerprints {
    fn digest(&mut self, w: &Weights, n: u32) -> [u8; 32] {
        self.digests
            .entry((w.addr(), n))
            .or_insert_with(|| {
                let mut h = Sha256::new();
                h.update((w.len() as u64).to_le_bytes());
                w.ring_words(n).iter().for_each(|v| h.update(v.to_le_bytes()));
                (w.clone(), h.finalize().into())
            })
            .1
    }

    /// The [`fingerprint`] of `g` run with `imp`.
    pub fn of(&mut self, g: &Graph, imp: Impl) -> [u8; 32] {
        fn put(h: &mut Sha256, v: u64) {
            h.update(v.to_le_bytes());
        }
        fn words(h: &mut Sha256, ws: &[u64]) {
            put(h, ws.len() as u64);
            ws.iter().for_each(|&w| put(h, w));
        }
        let mut h = Sha256::new();
        put(&mut h, u64::from(VERSION));
        put(&mut h, PROTOCOL_REVISION);
        put(
            &mut h,
            match imp {
                Impl::Sigma => 1,
                Impl::Fusefss => 2,
            },
        );
        put(&mut h, g.n.into());
        put(&mut h, g.f.into());
        put(&mut h, g.input.rows as u64);
        put(&mut h, g.input.cols as u64);
        put(&mut h, g.output as u64);
        put(&mut h, g.nodes.len() as u64);
        for node in &g.nodes {
            put(&mut h, node.shape.rows as u64);
            put(&mut h, node.shape.cols as u64);
            node.op.inputs().iter().for_each(|&v| put(&mut h, v as u64));
            match &node.op {
                Op::Linear { w, b, out, .. } => {
                    put(&mut h, 1);
                    put(&mut h, *out as u64);
                    h.update(self.digest(w, g.n));
                    words(&mut h, b.as_deref().unwrap_or(&[]));
                }
                Op::Add { .. } => put(&mut h, 2),
                Op::Gather { index, .. } => {
                    put(&mut h, 3);
                    put(&mut h, index.len() as u64);
                    index.iter().for_each(|&j| put(&mut h, j.into()));
                }
                Op::SumRows { .. } => put(&mut h, 4),
                Op::Scale { c, .. } => {
                    put(&mut h, 5);
                    put(&mut h, *c);
                }
                Op::Trunc { shift, .. } => {
                    put(&mut h, 6);
                    put(&mut h, (*shift).into());
                }
                Op::MatMul { count, m, k, n, .. } => {
                    put(&mut h, 7);
                    [*count, *m, *k, *n].iter().for_each(|&v| put(&mut h, v as u64));
                }
                Op::Softmax { causal, .. } => {
                    put(&mut h, 8);
                    put(&mut h, (*causal).into());
                }
                Op::LayerNorm { gamma, beta, .. } => {
                    put(&mut h, 9);
                    words(&mut h, gamma);
                    words(&mut h, beta);
                }
                Op::Gelu { tanh, .. } => {
                    put(&mut h, 10);
                    put(&mut h, (*tanh).into());
                }
                Op::Carried { slot, .. } => {
                    put(&mut h, 11);
                    put(&mut h, *slot as u64);
                }
                Op::Concat { .. } => put(&mut h, 12),
                Op::MulPublic { c, .. } => {
                    put(&mut h, 13);
                    words(&mut h, c);
                }
                Op::Mul { .. } => put(&mut h, 14),
                Op::Silu { .. } => put(&mut h, 15),
                Op::RmsNorm { gamma, .. } => {
                    put(&mut h, 16);
                    words(&mut h, gamma);
                }
                Op::ResidualRmsNorm { shift, gamma, .. } => {
                    put(&mut h, 19);
                    put(&mut h, (*shift).into());
                    words(&mut h, gamma);
                }
                Op::Rows { start, count, .. } => {
                    put(&mut h, 18);
                    put(&mut h, *start as u64);
                    put(&mut h, *count as u64);
                }
            }
        }
        // Programs of a session also differ in what they carry to the next.
        if !g.carry.is_empty() {
            put(&mut h, 17);
            g.carry.iter().for_each(|&v| put(&mut h, v as u64));
        }
        h.finalize().into()
    }
}

pub(crate) fn io_err(path: &Path) -> impl Fn(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io { path: path.display().to_string(), source }
}

fn encode_header(h: &BundleHeader) -> Vec<u8> {
    let mut b = Vec::with_capacity(128);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.push(h.party.bit());
    b.push(0);
    b.extend_from_slice(&h.id.run);
    b.extend_from_slice(&h.id.index.to_le_bytes());
    b.extend_from_slice(&h.fingerprint);
    let d = h.descriptor.as_bytes();
    b.extend_from_slice(&(d.len().min(u16::MAX as usize) as u16).to_le_bytes());
    b.extend_from_slice(&d[..d.len().min(u16::MAX as usize)]);
    b.extend_from_slice(&h.sections.to_le_bytes());
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn encode_mask(share: &[u64], n: u32) -> Vec<u8> {
    let mut w = BitWriter::with_prefix((share.len() as u64).to_le_bytes().to_vec());
    share.iter().for_each(|&v| w.put(v, n));
    w.finish()
}

/// Writes one party's bundle as the dealer makes its keys; it appears under its final name
/// only when complete ([`BundleWriter::finish`]). The file is written by a thread of its
/// own, behind the dealer by at most [`WRITE_BEHIND_BYTES`], so that dealing goes on while
/// the last keys are copied out (bert-tiny's FuseFSS key generation 525–750 → 482–493 ms,
/// `bench model --impl both --reps 7`).
pub struct BundleWriter {
    out: Output,
    partial: PathBuf,
    path: PathBuf,
    n: u32,
    written: u32,
    sections: u32,
    bytes: u64,
}

impl fmt::Debug for BundleWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BundleWriter").field("path", &self.path).finish_non_exhaustive()
    }
}

/// Section bytes a [`BundleWriter`] holds in memory at most, handed over but not yet
/// written (a larger section waits until none are). The dealer hands a batch's sections
/// over at once; with two sections at most it waited for the writer before it could deal
/// the next batch (MiniLM seq 32 to a memory file system, key generation up to the last
/// section handed over, two sets of 5 runs: FuseFSS 203–211 → 184–187 ms, SIGMA 269–276 →
/// 225–232 ms).
pub const WRITE_BEHIND_BYTES: usize = 256 << 20;

/// A section handed to the writing thread: kind, node, body.
type Frame = (u8, u32, KeyBytes);

/// The writing thread of a [`BundleWriter`]: sections go in through `tx`; the thread ends
/// with the file (or the first I/O error) when `tx` is dropped.
struct Output<W = BufWriter<File>> {
    tx: Option<std::sync::mpsc::Sender<Frame>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<W>>>,
    /// The bytes handed over and not yet written ([`WRITE_BEHIND_BYTES`]).
    behind: Arc<ByteBudget>,
}

/// Closes a writer's budget when its thread ends, however it ends: a dealer waiting to
/// hand a section over then finds the thread stopped instead of waiting for ever.
struct CloseOnDrop(Arc<ByteBudget>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Written bytes after which the writing thread has the file's data flushed to disk in the
/// background ([`Flusher`]).
const SYNC_EVERY: u64 = 32 << 20;

impl<W: Write + Send + 'static> Output<W> {
    /// Write into `out`; with `sync` (a handle on the file `out` writes, and a byte count:
    /// [`SYNC_EVERY`]), the data written is flushed to disk every that many bytes while
    /// writing goes on, so that the final `fsync` waits only for the last of it.
    fn spawn(out: W, sync: Option<(File, u64)>) -> Output<W> {
        Output::spawn_behind(out, sync, WRITE_BEHIND_BYTES)
    }

    /// [`Output::spawn`] with at most `limit` bytes handed over and not yet written.
    fn spawn_behind(mut out: W, sync: Option<(File, u64)>, limit: usize) -> Output<W> {
        let (tx, rx) = std::sync::mpsc::channel::<Frame>();
        let behind = Arc::new(ByteBudget::new(limit));
        let written = CloseOnDrop(behind.clone());
        let thread = std::thread::Builder::new()
            .name("bundle-writer".into())
            .spawn(move || {
                let every = sync.as_ref().map_or(u64::MAX, |s| s.1);
                let flusher = sync.map(|s| Flusher::spawn(s.0));
                let mut unsynced = 0u64;
                for (kind, node, body) in rx {
                    write_section(&mut out, kind, node, body.as_slice())?;
                    let len = body.as_slice().len();
                    // (The body is wiped or recycled as it drops.)
                    drop(body);
                    written.0.release(len);
                    unsynced += len as u64;
                    if let Some(f) = flusher.as_ref().filter(|_| unsynced >= every) {
                        out.flush()?;
                        f.sync_soon();
                        unsynced = 0;
                    }
                }
                flusher.map_or(Ok(()), Flusher::join)?;
                Ok(out)
            })
            .expect("start the bundle writer's thread");
        Output { tx: Some(tx), thread: Some(thread), behind }
    }

    /// Hand a section over, once the bytes behind allow it; an error if the thread has
    /// stopped (its I/O error, if any).
    fn send(&mut self, frame: Frame) -> std::io::Result<()> {
        let tx = self.tx.as_ref().ok_or_else(|| std::io::Error::other("the bundle is closed"))?;
        if self.behind.acquire(frame.2.as_slice().len()) && tx.send(frame).is_ok() {
            return Ok(());
        }
        // The thread stopped on an error: its result says which.
        self.close().map(|_| ())?;
        Err(std::io::Error::other("the bundle's writing thread stopped"))
    }

    /// Wait for every section to be written and take the file back.
    fn close(&mut self) -> std::io::Result<W> {
        self.tx = None;
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("the bundle's writing thread panicked")),
            None => Err(std::io::Error::other("the bundle is closed")),
        }
    }
}

/// A thread that flushes a file's written data to disk when asked (`fdatasync`), so that
/// the disk writes the first sections of a bundle while the dealer makes the last: the
/// bundle's closing `fsync` (two per query, one per party: 47–79 ms each for bert-tiny's
/// 161 MB bundles, `strace -T`) then waits for the tail only.
struct Flusher {
    tx: std::sync::mpsc::SyncSender<()>,
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

impl Flusher {
    fn spawn(file: File) -> Flusher {
        // One request waits at most: requests made during a flush are one more flush.
        let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("bundle-flusher".into())
            .spawn(move || {
                for () in rx {
                    file.sync_data()?;
                }
                Ok(())
            })
            .expect("start the bundle flusher's thread");
        Flusher { tx, thread }
    }

    /// Ask for a flush (of everything written so far) unless one is waiting already.
    fn sync_soon(&self) {
        // (A full channel is a flush to come; a closed one a thread stopped on an error,
        // which `join` reports.)
        let _ = self.tx.try_send(());
    }

    /// Wait for the flushes asked for; the first I/O error, if any (an error of a flush
    /// would otherwise be lost to the file's closing `fsync`, which reports it once).
    fn join(self) -> std::io::Result<()> {
        drop(self.tx);
        self.thread.join().map_err(|_| std::io::Error::other("the bundle's flushing thread panicked"))?
    }
}

/// Write one section: kind, node, length, body, CRC-32 of all four.
fn write_section(out: &mut impl Write, kind: u8, node: u32, body: &[u8]) -> std::io::Result<()> {
    let mut head = [0u8; 13];
    head[0] = kind;
    head[1..5].copy_from_slice(&node.to_le_bytes());
    head[5..13].copy_from_slice(&(body.len() as u64).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&head);
    crc.update(body);
    out.write_all(&head)?;
    out.write_all(body)?;
    out.write_all(&crc.finalize().to_le_bytes())
}

impl BundleWriter {
    /// Start `dir/<id file name>` for program `g` (ring width from `g`); `header.sections`
    /// must be `2 + g.gates()`.
    ///
    /// # Errors
    /// [`BundleError::Io`], or [`BundleError::Mismatch`] if the bundle exists already.
    pub fn create(dir: &Path, g: &Graph, header: &BundleHeader) -> Result<BundleWriter, BundleError> {
        BundleWriter::create_in(dir, g.n, header)
    }

    /// Start a bundle of `header.sections` sections over `Z_{2^n}` (a generation session's
    /// programs one after the other, [`crate::session`]).
    ///
    /// # Errors
    /// As [`BundleWriter::create`].
    pub fn create_in(dir: &Path, n: u32, header: &BundleHeader) -> Result<BundleWriter, BundleError> {
        let path = dir.join(header.id.file_name());
        if path.exists() {
            return Err(BundleError::Mismatch {
                path: path.display().to_string(),
                what: "a bundle with this id exists already".into(),
            });
        }
        let partial = path.with_extension("partial");
        let f = private::create_file(&partial).map_err(io_err(&partial))?;
        let flush = f.try_clone().map_err(io_err(&partial))?;
        let mut out = BufWriter::with_capacity(1 << 20, f);
        let h = encode_header(header);
        out.write_all(&h).map_err(io_err(&partial))?;
        Ok(BundleWriter {
            out: Output::spawn(out, Some((flush, SYNC_EVERY))),
            partial,
            path,
            n,
            written: 0,
            sections: header.sections,
            bytes: h.len() as u64,
        })
    }

    /// Hand a section to the writing thread (which reports an I/O error at the next
    /// section or at [`BundleWriter::finish`]).
    fn section(&mut self, kind: u8, node: u32, body: Vec<u8>) -> Result<(), BundleError> {
        let len = body.len() as u64;
        self.out.send((kind, node, KeyBytes::from_vec(body))).map_err(io_err(&self.partial))?;
        self.written += 1;
        self.bytes += 17 + len;
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Close the bundle: end marker, flush to disk, then the final name.
    ///
    /// # Errors
    /// [`BundleError::Io`], or [`BundleError::Corrupted`] if sections are missing.
    pub fn finish(mut self) -> Result<PathBuf, BundleError> {
        if self.written != self.sections {
            return Err(BundleError::Corrupted {
                path: self.partial.display().to_string(),
                what: format!("{} of {} sections written", self.written, self.sections),
            });
        }
        let e = io_err(&self.partial);
        let mut out = self.out.close().map_err(&e)?;
        out.write_all(END).map_err(&e)?;
        let f = out.into_inner().map_err(|x| e(x.into_error()))?;
        f.sync_all().map_err(&e)?;
        std::fs::rename(&self.partial, &self.path).map_err(&e)?;
        sync_dir(self.path.parent().unwrap_or(Path::new(".")));
        Ok(self.path)
    }
}

pub(crate) fn sync_dir(dir: &Path) {
    // Makes a rename or a new file durable on POSIX file systems; best effort elsewhere.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

fn to_engine(e: BundleError) -> EngineError {
    EngineError::Online(e.into())
}

impl KeySink for BundleWriter {
    fn input_mask(&mut self, share: Vec<u64>) -> Result<(), EngineError> {
        let body = encode_mask(&share, self.n);
        self.section(KIND_INPUT, 0, body).map_err(to_engine)
    }

    fn gate_key(&mut self, _: usize, _: &dyn DynGate, _: Box<dyn Any + Send>) -> Result<(), EngineError> {
        Err(EngineError::Online(GateError::Keys("a bundle stores encoded keys (gate_bytes)".into())))
    }

    fn wants_bytes(&self) -> bool {
        true
    }

    fn gate_bytes(&mut self, node: usize, body: Vec<u8>) -> Result<(), EngineError> {
        self.section(KIND_GATE, node as u32, body).map_err(to_engine)
    }

    fn output_mask(&mut self, share: Vec<u64>) -> Result<(), EngineError> {
        let body = encode_mask(&share, self.n);
        self.section(KIND_OUTPUT, 0, body).map_err(to_engine)
    }
}

/// Reads one party's bundle section by section as the online phase asks for keys; with
/// [`BundleReader::read_ahead`], a thread reads and checks the next sections while the
/// online phase computes.
pub struct BundleReader {
    input: Input,
    /// Where the online phase hands each section's buffer back once it is decoded.
    recycle: std::sync::mpsc::Sender<KeyBytes>,
    path: PathBuf,
    header: BundleHeader,
    n: u32,
    read: u32,
    /// The gates its thread decodes the keys with ([`BundleReader::decode_ahead`]).
    decoding: Option<engine::layers::Gates>,
    /// Its reading thread's CPU time, ns: reading and checking sections, decoding keys.
    thread_cpu: Arc<[std::sync::atomic::AtomicU64; 2]>,
    /// How long the online phase waited for that thread's next section.
    waited: std::time::Duration,
    /// The core that thread runs on ([`BundleReader::beside`]).
    core: Option<usize>,
}

/// CPU time of a bundle's reading thread ([`BundleReader::thread_cpu`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderCpu {
    /// Reading sections from the file and checking them (length, checksum).
    pub read: std::time::Duration,
    /// Decoding gates' keys ([`BundleReader::decode_ahead`]).
    pub decode: std::time::Duration,
    /// Not CPU: how long the online phase waited for the thread's next section (reading
    /// then on the online phase's path).
    pub waited: std::time::Duration,
}

/// Section bytes a reader holds ahead of the online phase at most, besides the section
/// it is reading ([`BundleReader::read_ahead`], [`BundleReader::decode_ahead`]): a model's
/// many small gates then find their keys ready when a large gate before them kept the
/// reader busy, while a large model's sections (each past the budget) still come one
/// at a time. Bert-tiny's sections are 4.6 MB on average.
pub const READ_AHEAD_BYTES: usize = 64 << 20;

/// The bytes held between two threads: the producer waits while a section would take
/// them past `limit` (unless none are held), the consumer gives them back as it takes each
/// section, and either side closes it when it stops. A reader's sections read ahead
/// ([`READ_AHEAD_BYTES`]), a writer's handed over but not yet written
/// ([`WRITE_BEHIND_BYTES`]).
struct ByteBudget {
    limit: usize,
    /// (Bytes held, closed.)
    state: std::sync::Mutex<(usize, bool)>,
    freed: std::sync::Condvar,
}

impl ByteBudget {
    fn new(limit: usize) -> ByteBudget {
        ByteBudget { limit, state: std::sync::Mutex::default(), freed: std::sync::Condvar::new() }
    }

    /// Waits until `bytes` more fit; `false` if the budget was closed meanwhile.
    fn acquire(&self, bytes: usize) -> bool {
        let Ok(mut st) = self.state.lock() else { return false };
        while !st.1 && st.0 > 0 && st.0 + bytes > self.limit {
            st = match self.freed.wait(st) {
                Ok(st) => st,
                Err(_) => return false,
            };
        }
        st.0 += bytes;
        !st.1
    }

    fn release(&self, bytes: usize) {
        if let Ok(mut st) = self.state.lock() {
            st.0 = st.0.saturating_sub(bytes);
            self.freed.notify_all();
        }
    }

    fn close(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.1 = true;
            self.freed.notify_all();
        }
    }
}

/// A section as read from the file: its kind, node and body, its checksum checked.
struct RawSection {
    kind: u8,
    node: u32,
    body: Body,
}

/// A section's body: its bytes, or (read by [`BundleReader::decode_ahead`]) the gate key
/// decoded from them, which reads its correction words in place from the bytes.
enum Body {
    Bytes(KeyBytes),
    Key(Result<Box<dyn Any + Send>, fss::DecodeError>),
}

impl RawSection {
    /// A gate section's key decoded with its node's gate of `gates` (other sections, and a
    /// node `gates` has no gate for, stay bytes).
    fn decode(
        &mut self,
        gates: &engine::layers::Gates,
        party: Party,
        recycle: &std::sync::mpsc::Sender<KeyBytes>,
    ) {
        let Some(Some(gate)) = gates.get(self.node as usize).filter(|_| self.kind == KIND_GATE) else {
            return;
        };
        let empty = Body::Bytes(KeyBytes::from_vec(Vec::new()));
        if let Body::Bytes(bytes) = std::mem::replace(&mut self.body, empty) {
            self.body = Body::Key(decode_gate(gate.as_ref(), party, bytes, recycle));
        }
    }
}

impl Body {
    fn len(&self) -> Option<usize> {
        match self {
            Body::Bytes(b) => Some(b.as_slice().len()),
            Body::Key(_) => None,
        }
    }
}

/// Where a reader's sections come from.
enum Input {
    /// Read from the file as asked, into the buffers handed back (unbuffered: a read
    /// buffer would hold a copy of the key bytes that passed through it).
    Direct(File, Buffers),
    /// Read by a thread ahead of time, in order, each with the bytes it holds of the
    /// budget; `None` once the end marker is checked.
    Ahead(std::sync::mpsc::Receiver<(Result<Option<RawSection>, BundleError>, usize)>, Arc<ByteBudget>),
}

/// The next section of `input` (`remaining` of the header's count left), or `None` after
/// the last one once the end marker and the end of the file are checked.
fn next_raw(
    input: &mut File,
    bufs: &mut Buffers,
    path: &Path,
    remaining: u32,
) -> Result<Option<RawSection>, BundleError> {
    if remaining == 0 {
        let mut end = [0u8; 8];
        read_exact(input, &mut end, path, "the end marker")?;
        let mut extra = [0u8; 1];
        let trailing = input.read(&mut extra).map_err(io_err(path))?;
        if &end != END || trailing != 0 {
            return Err(corrupted(path, "bad end of bundle"));
        }
        return Ok(None);
    }
    let mut head = [0u8; 13];
    read_exact(input, &mut head, path, "a section header")?;
    let len = u64::from_le_bytes(head[5..13].try_into().expect("8 bytes"));
    let (kind, node) = (head[0], u32::from_le_bytes(head[1..5].try_into().expect("4 bytes")));
    if len > MAX_SECTION {
        return Err(corrupted(path, format!("a section of {len} bytes (node {node})")));
    }
    // Allocate at once what the file can still hold (a damaged length cannot allocate more),
    // so that a large section is read in one copy instead of growing by doubling.
    let left = input.metadata().map_or(0, |m| m.len()).saturating_sub(input.stream_position().unwrap_or(0));
    // Into a buffer the online phase handed back (the last section's bytes overwritten).
    let capacity = len.min(left) as usize;
    let mut body = bufs.take(capacity);
    let got = body.refill(&mut *input, len, capacity).map_err(io_err(path))?;
    if got as u64 != len {
        return Err(corrupted(path, format!("truncated in the section of node {node}")));
    }
    let mut crc_bytes = [0u8; 4];
    read_exact(input, &mut crc_bytes, path, "a section checksum")?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&head);
    crc.update(body.as_slice());
    if crc.finalize() != u32::from_le_bytes(crc_bytes) {
        return Err(corrupted(path, format!("checksum mismatch in the section of node {node}")));
    }
    Ok(Some(RawSection { kind, node, body: Body::Bytes(body) }))
}

impl Drop for BundleReader {
    /// Wakes a reading thread waiting for room ahead: it stops.
    fn drop(&mut self) {
        if let Input::Ahead(_, budget) = &self.input {
            budget.close();
        }
    }
}

impl fmt::Debug for BundleReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BundleReader")
            .field("path", &self.path)
            .field("id", &self.header.id)
            .finish_non_exhaustive()
    }
}

/// Read and check the header of the bundle at `path`.
///
/// # Errors
/// [`BundleError`] for a missing, foreign, damaged or other-version file.
pub fn read_header(path: &Path) -> Result<BundleHeader, BundleError> {
    let f = File::open(path).map_err(io_err(path))?;
    let mut r = BufReader::new(f);
    header_from(&mut r, path)
}

fn corrupted(path: &Path, what: impl Into<String>) -> BundleError {
    BundleError::Corrupted { path: path.display().to_string(), what: what.into() }
}

fn read_exact(r: &mut impl Read, buf: &mut [u8], path: &Path, what: &str) -> Result<(), BundleError> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => corrupted(path, format!("truncated in {what}")),
        _ => io_err(path)(e),
    })
}

fn header_from(r: &mut impl Read, path: &Path) -> Result<BundleHeader, BundleError> {
    let mut fixed = [0u8; 8 + 2 + 2 + 16 + 4 + 32 + 2];
    read_exact(r, &mut fixed, path, "the header")?;
    if &fixed[..8] != MAGIC {
        return Err(corrupted(path, "not a fusefss key bundle (bad magic)"));
    }
    let version = u16::from_le_bytes([fixed[8], fixed[9]]);
    if version != VERSION {
        return Err(BundleError::Version { path: path.display().to_string(), found: version });
    }
    let party = match fixed[10] {
        0 => Party::P0,
        1 => Party::P1,
        p => return Err(corrupted(path, format!("party {p}"))),
    };
    let mut run = [0u8; 16];
    run.copy_from_slice(&fixed[12..28]);
    let index = u32::from_le_bytes(fixed[28..32].try_into().expect("4 bytes"));
    let mut fp = [0u8; 32];
    fp.copy_from_slice(&fixed[32..64]);
    let dlen = u16::from_le_bytes([fixed[64], fixed[65]]) as usize;
    let mut rest = vec![0u8; dlen + 8];
    read_exact(r, &mut rest, path, "the header")?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&fixed);
    crc.update(&rest[..dlen + 4]);
    let stored = u32::from_le_bytes(rest[dlen + 4..].try_into().expect("4 bytes"));
    if crc.finalize() != stored {
        return Err(corrupted(path, "header checksum mismatch"));
    }
    let descriptor =
        String::from_utf8(rest[..dlen].to_vec()).map_err(|_| corrupted(path, "descriptor is not UTF-8"))?;
    let sections = u32::from_le_bytes(rest[dlen..dlen + 4].try_into().expect("4 bytes"));
    Ok(BundleHeader { party, id: BundleId { run, index }, fingerprint: fp, descriptor, sections })
}

impl BundleReader {
    /// Open a bundle for the online phase of `g`, whose [`fingerprint`] is `fp` (computed
    /// once per program, not per query), as `party`.
    ///
    /// # Errors
    /// [`BundleError`] if the file is unreadable or damaged, or holds keys for another
    /// party or program.
    pub fn open(path: &Path, g: &Graph, fp: &[u8; 32], party: Party) -> Result<BundleReader, BundleError> {
        BundleReader::open_sections(path, g.n, 2 + g.gates(), fp, party)
    }

    /// Open a bundle of `sections` sections over `Z_{2^n}` whose fingerprint is `fp`: one
    /// program's ([`BundleReader::open`]) or a generation session's programs one after the
    /// other, read as each step runs ([`crate::session`]).
    ///
    /// # Errors
    /// As [`BundleReader::open`].
    pub fn open_sections(
        path: &Path,
        n: u32,
        sections: usize,
        fp: &[u8; 32],
        party: Party,
    ) -> Result<BundleReader, BundleError> {
        let mut input = File::open(path).map_err(io_err(path))?;
        let header = header_from(&mut input, path)?;
        let mismatch = |what: String| BundleError::Mismatch { path: path.display().to_string(), what };
        if header.party != party {
            return Err(mismatch(format!(
                "holds the keys of party {}, not {}",
                header.party.bit(),
                party.bit()
            )));
        }
        if &header.fingerprint != fp {
            return Err(mismatch(format!(
                "was dealt for another model or shape ({}) than this program",
                header.descriptor
            )));
        }
        if header.sections as usize != sections {
            return Err(corrupted(
                path,
                format!("{} sections where the program has {sections}", header.sections),
            ));
        }
        let (bufs, recycle) = Buffers::new();
        Ok(BundleReader {
            input: Input::Direct(input, bufs),
            recycle,
            path: path.to_path_buf(),
            header,
            n,
            read: 0,
            decoding: None,
            thread_cpu: Arc::default(),
            waited: std::time::Duration::ZERO,
            core: None,
        })
    }

    /// Its reading thread (started next, by [`BundleReader::read_ahead`] or
    /// [`BundleReader::decode_ahead`]) runs on core `cpu`: its server's, when both servers
    /// share the machine ([`engine::cores::for_party`]), and there in the idle class
    /// ([`engine::cores::idle_this_thread`]). Unpinned, or where the system refuses the
    /// idle class, it runs [`engine::cores::READER_NICE`] steps nicer than the server.
    pub fn beside(&mut self, cpu: Option<usize>) {
        self.core = cpu;
    }

    /// Read the bundle on a thread of its own, ahead of the online phase (at most
    /// [`READ_AHEAD_BYTES`] of sections in memory besides the one being read), so that
    /// reading and checking the keys overlaps the computation and the waits for the other
    /// server instead of adding to them. The keys are still decoded, used and wiped one by
    /// one by the online phase.
    pub fn read_ahead(&mut self) {
        self.ahead(None);
    }

    /// As [`BundleReader::read_ahead`], the thread also decoding each gate's key (with
    /// `gates`, the program's gates by node, as [`engine::build`] makes them): the online
    /// phase then only runs the gates, and a key's decoding overlaps the computation and
    /// the waits for the other server (on a server with cores to spare, or in the gaps of a
    /// network's round trips). The decoded keys waiting are those of at most
    /// [`READ_AHEAD_BYTES`] of sections, and they are wiped as the online phase's are, when
    /// dropped (a key never handed over is dropped with the channel). For one program's
    /// bundle only: a session's programs have gates of their own ([`crate::session`]).
    pub fn decode_ahead(&mut self, gates: engine::layers::Gates) {
        self.decoding = Some(gates.clone());
        self.ahead(Some(gates));
    }

    /// Read the rest of the bundle on a thread, at most [`READ_AHEAD_BYTES`] ahead,
    /// decoding the gates' keys there with `gates` if given.
    fn ahead(&mut self, gates: Option<engine::layers::Gates>) {
        let placeholder =
            Input::Ahead(std::sync::mpsc::channel().1, Arc::new(ByteBudget::new(READ_AHEAD_BYTES)));
        let Input::Direct(mut input, mut bufs) = std::mem::replace(&mut self.input, placeholder) else {
            return;
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let budget = Arc::new(ByteBudget::new(READ_AHEAD_BYTES));
        let (path, mut remaining) = (self.path.clone(), self.header.sections - self.read);
        let (party, recycle, cpu) = (self.header.party, self.recycle.clone(), self.thread_cpu.clone());
        let (held, core) = (budget.clone(), self.core);
        std::thread::Builder::new()
            .name("bundle-reader".into())
            .spawn(move || {
                // In the server's waits rather than its computation: on its core if it has
                // one, in the idle class there (nothing else runs on that core:
                // `engine::cores`), else nicer than the server.
                let idle = core.is_some() && engine::cores::idle_this_thread();
                if !idle {
                    engine::cores::lower_this_thread(engine::cores::READER_NICE);
                }
                if let Some(cpu) = core {
                    engine::cores::pin_this_thread(cpu);
                }
                // The thread's CPU time since `since`, added to `cpu[k]`.
                let charge = |k: usize, since: Option<std::time::Duration>| {
                    if let (Some(a), Some(b)) = (since, crate::cpu_time::thread()) {
                        cpu[k].fetch_add(
                            b.saturating_sub(a).as_nanos() as u64,
                            std::sync::atomic::Ordering::Relaxed,
                        );
                    }
                };
                loop {
                    let t = crate::cpu_time::thread();
                    let mut r = next_raw(&mut input, &mut bufs, &path, remaining);
                    charge(0, t);
                    let bytes = match &r {
                        Ok(Some(s)) => s.body.len().unwrap_or(0),
                        _ => 0,
                    };
                    if let (Some(gates), Ok(Some(s))) = (&gates, &mut r) {
                        let t = crate::cpu_time::thread();
                        s.decode(gates, party, &recycle);
                        charge(1, t);
                    }
                    let last = !matches!(r, Ok(Some(_)));
                    // A dropped reader or a closed channel: the online phase stopped early;
                    // stop reading.
                    if !held.acquire(bytes) || tx.send((r, bytes)).is_err() || last {
                        return;
                    }
                    remaining -= 1;
                }
            })
            .expect("start the bundle reader's thread");
        self.input = Input::Ahead(rx, budget);
    }

    /// The next section, or `None` at the checked end.
    fn next(&mut self) -> Result<Option<RawSection>, BundleError> {
        let remaining = self.header.sections - self.read;
        match &mut self.input {
            Input::Direct(input, bufs) => next_raw(input, bufs, &self.path, remaining),
            Input::Ahead(rx, budget) => {
                let t = std::time::Instant::now();
                let got = rx.recv();
                self.waited += t.elapsed();
                match got {
                    Ok((s, bytes)) => {
                        budget.release(bytes);
                        s
                    }
                    Err(_) => Err(corrupted(&self.path, "the reading thread stopped")),
                }
            }
        }
    }

    /// CPU time its reading thread has taken so far ([`BundleReader::read_ahead`],
    /// [`BundleReader::decode_ahead`]); `None` if none was started (the online phase then
    /// reads the sections itself) or the system does not say.
    pub fn thread_cpu(&self) -> Option<ReaderCpu> {
        use std::sync::atomic::Ordering::Relaxed;
        let started = matches!(self.input, Input::Ahead(..));
        let ns = |k: usize| std::time::Duration::from_nanos(self.thread_cpu[k].load(Relaxed));
        (started && crate::cpu_time::thread().is_some()).then(|| ReaderCpu {
            read: ns(0),
            decode: ns(1),
            waited: self.waited,
        })
    }

    /// The bundle's header.
    pub fn header(&self) -> &BundleHeader {
        &self.header
    }

    fn section(&mut self, kind: u8, node: u32) -> Result<Body, BundleError> {
        let s = match self.next()? {
            Some(s) => s,
            None => {
                return Err(corrupted(&self.path, format!("no section for node {node}: the bundle ends")));
            }
        };
        if s.kind != kind || s.node != node {
            return Err(corrupted(
                &self.path,
                format!(
                    "expected section ({kind}, node {node}), found ({}, node {}, {})",
                    s.kind,
                    s.node,
                    s.body.len().map_or_else(|| "a decoded key".into(), |l| format!("{l} bytes"))
                ),
            ));
        }
        self.read += 1;
        Ok(s.body)
    }

    fn mask(&mut self, kind: u8) -> Result<Vec<u64>, BundleError> {
        let Body::Bytes(section) = self.section(kind, 0)? else {
            // (Only gate sections are decoded ahead.)
            return Err(corrupted(&self.path, "malformed mask section"));
        };
        let body = section.as_slice();
        let path = self.path.clone();
        let bad = |_| corrupted(&path, "malformed mask section");
        if body.len() < 8 {
            return Err(corrupted(&path, "malformed mask section"));
        }
        let count = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
        let mut r = BitReader::new(&body[8..]);
        if r.remaining_bits() / u64::from(self.n.max(1)) < count {
            return Err(corrupted(&path, "malformed mask section"));
        }
        let v = (0..count).map(|_| r.get(self.n)).collect::<Result<Vec<u64>, _>>().map_err(bad)?;
        r.finish().map_err(bad)?;
        Ok(v)
    }
}

/// `gate`'s key for `party` from a section's bytes. The key reads its correction words in
/// place: the buffer goes back to the reader (`recycle`), whose next section overwrites it,
/// when the key is dropped (if the reader is gone by then, it is wiped as it drops).
fn decode_gate(
    gate: &dyn DynGate,
    party: Party,
    body: KeyBytes,
    recycle: &std::sync::mpsc::Sender<KeyBytes>,
) -> Result<Box<dyn Any + Send>, fss::DecodeError> {
    let body: Arc<dyn KeyBuffer> = Arc::new(SharedSection::new(body, recycle.clone()));
    gate.decode_in_place(party, &body)
}

impl KeySource for BundleReader {
    fn party(&self) -> Party {
        self.header.party
    }

    fn input_mask(&mut self) -> Result<Vec<u64>, GateError> {
        Ok(self.mask(KIND_INPUT)?)
    }

    fn gate_key(&mut self, node: usize, gate: &dyn DynGate) -> Result<Box<dyn Any + Send>, GateError> {
        let key = match self.section(KIND_GATE, node as u32)? {
            Body::Bytes(body) => decode_gate(gate, self.header.party, body, &self.recycle),
            // Decoded ahead with this node's gate ([`BundleReader::decode_ahead`]): the
            // gate asked with must be that one.
            Body::Key(key) => {
                let same =
                    self.decoding.as_ref().and_then(|g| g.get(node)).and_then(Option::as_ref).is_some_and(
                        |g| std::ptr::addr_eq(g.as_ref() as *const dyn DynGate, gate as *const dyn DynGate),
                    );
                if !same {
                    return Err(GateError::Keys(format!(
                        "{}: the key of node {node} was decoded ahead with another gate",
                        self.path.display()
                    )));
                }
                key
            }
        };
        key.map_err(|source| {
            GateError::from(BundleError::Decode { path: self.path.display().to_string(), node, source })
        })
    }

    fn output_mask(&mut self) -> Result<Vec<u64>, GateError> {
        let m = self.mask(KIND_OUTPUT)?;
        if self.read < self.header.sections {
            // A session: the next step's sections follow.
            return Ok(m);
        }
        match self.next()? {
            None => Ok(m),
            Some(_) => Err(corrupted(&self.path, "bad end of bundle").into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that takes `left` bytes, then fails every write.
    #[derive(Debug)]
    struct Full {
        taken: Vec<u8>,
        left: usize,
    }

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Err(std::io::Error::other("no space left"));
            }
            let k = buf.len().min(self.left);
            self.taken.extend_from_slice(&buf[..k]);
            self.left -= k;
            Ok(k)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The read-ahead budget: sections within it are taken at once, one past it waits until
    /// the online phase gives bytes back, a section larger than the whole budget passes
    /// when nothing else is held, and closing wakes a waiting reader, which then stops.
    #[test]
    fn the_read_ahead_budget_holds_the_reader_back_until_bytes_come_back() {
        use std::sync::mpsc::RecvTimeoutError;
        use std::time::Duration;
        let budget = Arc::new(ByteBudget::new(READ_AHEAD_BYTES));
        assert!(budget.acquire(READ_AHEAD_BYTES / 2));
        assert!(budget.acquire(READ_AHEAD_BYTES / 4));
        let waiting = |bytes: usize| {
            let (b, (tx, rx)) = (budget.clone(), std::sync::mpsc::channel());
            std::thread::spawn(move || tx.send(b.acquire(bytes)).unwrap());
            rx
        };
        // Past the budget: it waits for a release that makes room.
        let rx = waiting(READ_AHEAD_BYTES / 2);
        assert_eq!(rx.recv_timeout(Duration::from_millis(50)), Err(RecvTimeoutError::Timeout));
        budget.release(READ_AHEAD_BYTES / 4);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
        // Everything given back: a section larger than the budget passes alone.
        budget.release(READ_AHEAD_BYTES);
        assert!(budget.acquire(3 * READ_AHEAD_BYTES));
        // Closed while waiting: the reader is told to stop.
        let rx = waiting(1);
        assert_eq!(rx.recv_timeout(Duration::from_millis(50)), Err(RecvTimeoutError::Timeout));
        budget.close();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(false));
        assert!(!budget.acquire(0), "closed");
    }

    /// Flushed to disk while written: the file holds every section in order, whichever
    /// flushes ran (one per section asked for here, coalesced when one is under way).
    #[test]
    fn sections_flushed_while_written_are_all_in_the_file() {
        let dir = std::env::temp_dir().join(format!("fusefss-flush-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sections");
        let f = File::create(&path).unwrap();
        let sync = Some((f.try_clone().unwrap(), 1));
        let mut out = Output::spawn(BufWriter::new(f), sync);
        let mut want = vec![];
        for k in 0..40u8 {
            let body = vec![k; 1000 + 37 * usize::from(k)];
            write_section(&mut want, k, u32::from(k), &body).unwrap();
            out.send((k, u32::from(k), KeyBytes::from_vec(body))).unwrap();
        }
        out.close().unwrap().flush().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The writer holds at most its budget of bytes handed over and not yet written: a
    /// section past it waits until the sink has taken those before it (a sink held shut
    /// here), then goes through; the file is as if written at once.
    #[test]
    fn a_writer_holds_back_the_dealer_past_its_budget() {
        use std::sync::mpsc::RecvTimeoutError;
        use std::time::Duration;
        /// A sink whose writes wait until it is opened.
        struct Shut(Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>, Vec<u8>);
        impl Write for Shut {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                let (open, cv) = &*self.0;
                let mut g = open.lock().unwrap();
                while !*g {
                    g = cv.wait(g).unwrap();
                }
                self.1.extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let out = Output::spawn_behind(Shut(gate.clone(), vec![]), None, 1000);
        let out = Arc::new(std::sync::Mutex::new(out));
        let frame = |k: u8| (k, u32::from(k), KeyBytes::from_vec(vec![k; 600]));
        out.lock().unwrap().send(frame(1)).unwrap();
        // 600 + 600 bytes behind would pass the budget of 1,000: the second waits.
        let (tx, rx) = std::sync::mpsc::channel();
        let o = out.clone();
        std::thread::spawn(move || tx.send(o.lock().unwrap().send(frame(2)).is_ok()).unwrap());
        assert_eq!(rx.recv_timeout(Duration::from_millis(100)), Err(RecvTimeoutError::Timeout));
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
        let mut want = vec![];
        write_section(&mut want, 1, 1, &[1; 600]).unwrap();
        write_section(&mut want, 2, 2, &[2; 600]).unwrap();
        assert_eq!(out.lock().unwrap().close().unwrap().1, want);
    }

    /// Sections written behind the caller come out as `write_section` writes them, in
    /// order; a write error stops the thread and comes back at a later section or at the
    /// close, never lost.
    #[test]
    fn sections_written_behind_keep_their_order_and_their_errors() {
        let frames: Vec<(u8, u32, Vec<u8>)> =
            (0..6u8).map(|k| (k, u32::from(k) * 7, vec![k; 100 * usize::from(k)])).collect();
        let frame = |(k, n, b): &(u8, u32, Vec<u8>)| (*k, *n, KeyBytes::from_vec(b.clone()));
        let mut want = vec![];
        frames.iter().for_each(|(k, n, b)| write_section(&mut want, *k, *n, b).unwrap());
        let mut out = Output::spawn(Full { taken: vec![], left: usize::MAX }, None);
        frames.iter().for_each(|f| out.send(frame(f)).unwrap());
        assert_eq!(out.close().unwrap().taken, want);
        assert!(out.send(frame(&frames[0])).is_err(), "closed");

        // Room for the first two sections only: the sink's error comes back, at a later
        // section (once the thread has stopped) or at the close.
        let mut out = Output::spawn(Full { taken: vec![], left: 2 * 17 + 100 }, None);
        let failed = frames.iter().find_map(|f| out.send(frame(f)).err());
        let err = failed.unwrap_or_else(|| out.close().expect_err("the sink is full"));
        assert_eq!(err.to_string(), "no space left");
        assert!(out.close().is_err(), "stopped");
    }
}
