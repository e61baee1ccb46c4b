//! A server's key store: one folder of one party's bundles, served by one process at a time,
//! with a durable record of every bundle used.
//!
//! | file | what |
//! |---|---|
//! | `party` | which party's keys the folder holds (`party 0`), written by the dealer |
//! | `store.lock` | exclusively locked by the server for its whole life; holds its pid |
//! | `consumed.log` | one line per used bundle, fsync'd before the bundle's first message |
//! | `bundle-*.fkb` | the bundles ([`crate::bundle`]) |
//!
//! A bundle is marked used ([`Store::consume`]) before any message that depends on it leaves
//! the server, and is deleted when its query ends. A bundle listed as used is refused forever,
//! also after a crash or a restart, and also if its file comes back (say, from a backup).
//! The lock makes two server processes on one folder impossible (reliability probe, defect 1:
//! two pairs of servers on the same folders served one bundle to two clients); the party
//! marker refuses the other party's folder (defect 7).

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use fss::Party;

use crate::bundle::{BundleError, BundleHeader, BundleId, EXTENSION, io_err, read_header, sync_dir};
use crate::private;

const LEDGER: &str = "consumed.log";
const LOCK: &str = "store.lock";
const MARKER: &str = "party";

/// A server's folder of bundles, locked for this process, and its ledger of used ones.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    party: Party,
    consumed: HashSet<BundleId>,
    ledger: File,
    /// Held (locked) for the life of the store.
    _lock: File,
}

/// What [`Store::scan`] found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Usable bundles, by id.
    pub ready: Vec<(PathBuf, BundleHeader)>,
    /// Bundles already used (their files are deleted).
    pub spent: Vec<BundleId>,
    /// Files that are not usable bundles here (damaged, another party's), with the reason;
    /// they are left in place.
    pub bad: Vec<(PathBuf, String)>,
    /// Used bundles whose files could not be deleted, with the reason.
    pub undeletable: Vec<(BundleId, String)>,
}

fn marker_text(party: Party) -> String {
    format!("party {}\n", party.bit())
}

/// The party a folder's marker names, if it has one.
fn marker(dir: &Path) -> Result<Option<u8>, BundleError> {
    let path = dir.join(MARKER);
    match std::fs::read_to_string(&path) {
        Ok(t) => match t.trim() {
            "party 0" => Ok(Some(0)),
            "party 1" => Ok(Some(1)),
            _ => Err(BundleError::Corrupted {
                path: path.display().to_string(),
                what: "expected `party 0` or `party 1`".into(),
            }),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(&path)(e)),
    }
}

fn write_marker(dir: &Path, party: Party) -> Result<(), BundleError> {
    let path = dir.join(MARKER);
    let mut f = private::create_file(&path).map_err(io_err(&path))?;
    f.write_all(marker_text(party).as_bytes()).map_err(io_err(&path))?;
    f.sync_all().map_err(io_err(&path))?;
    sync_dir(dir);
    Ok(())
}

fn bundle_files(dir: &Path) -> Result<Vec<PathBuf>, BundleError> {
    let mut v = vec![];
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let p = entry.map_err(io_err(dir))?.path();
        if p.extension().and_then(|e| e.to_str()) == Some(EXTENSION) {
            v.push(p);
        }
    }
    v.sort();
    Ok(v)
}

/// The dealer's side: make `dir` a private folder for `party`'s bundles (created `0700`,
/// existing files narrowed to `0600`), marked with its party.
///
/// # Errors
/// [`BundleError::WrongParty`] if the folder holds the other party's keys, or
/// [`BundleError::Io`].
pub fn prepare(dir: &Path, party: Party) -> Result<(), BundleError> {
    private::create_dir(dir).map_err(io_err(dir))?;
    private::restrict_dir(dir).map_err(io_err(dir))?;
    match marker(dir)? {
        Some(p) if p != party.bit() => {
            Err(BundleError::WrongParty { path: dir.display().to_string(), found: p, wanted: party.bit() })
        }
        Some(_) => Ok(()),
        None => write_marker(dir, party),
    }
}

impl Store {
    /// Open the key store in `dir` as `party`'s server: take its lock, check its party,
    /// check that it is writable, and read its ledger.
    ///
    /// # Errors
    /// [`BundleError::Locked`] if another process serves it, [`BundleError::WrongParty`] if
    /// it holds the other party's keys, [`BundleError::Io`] if it is missing, unreadable or
    /// not writable (used bundles could not be recorded or deleted).
    pub fn open(dir: &Path, party: Party) -> Result<Store, BundleError> {
        if !dir.is_dir() {
            return Err(BundleError::Io {
                path: dir.display().to_string(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such folder"),
            });
        }
        let not_writable = |path: &Path, e: std::io::Error| BundleError::Io {
            path: path.display().to_string(),
            source: std::io::Error::new(
                e.kind(),
                format!("{e}: a key store must be writable (used bundles are recorded and deleted there)"),
            ),
        };
        let lock_path = dir.join(LOCK);
        let mut lock = private::open_file(&lock_path).map_err(|e| not_writable(&lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = lock.read_to_string(&mut holder);
                let holder = crate::text::clean(holder.trim(), 32);
                return Err(BundleError::Locked { path: dir.display().to_string(), holder });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err(&lock_path)(e)),
        }
        let _ = lock.set_len(0).and_then(|()| lock.rewind());
        let _ = writeln!(lock, "{}", std::process::id());
        private::restrict_dir(dir).map_err(|e| not_writable(dir, e))?;
        // Deleting a used bundle needs a writable folder, not only a writable ledger.
        let probe = dir.join(".write-check");
        private::create_file(&probe)
            .and_then(|_| std::fs::remove_file(&probe))
            .map_err(|e| not_writable(dir, e))?;
        let wrong = |found: u8| BundleError::WrongParty {
            path: dir.display().to_string(),
            found,
            wanted: party.bit(),
        };
        match marker(dir)? {
            Some(p) if p != party.bit() => return Err(wrong(p)),
            Some(_) => {}
            None => {
                // A folder from before markers: its bundles say whose they are.
                for p in bundle_files(dir)? {
                    if let Ok(h) = read_header(&p)
                        && h.party != party
                    {
                        return Err(wrong(h.party.bit()));
                    }
                }
                write_marker(dir, party)?;
            }
        }
        let ledger_path = dir.join(LEDGER);
        let new = !ledger_path.exists();
        let ledger = private::append_file(&ledger_path).map_err(|e| not_writable(&ledger_path, e))?;
        if new {
            sync_dir(dir);
        }
        let mut consumed = HashSet::new();
        match std::fs::read_to_string(&ledger_path) {
            Ok(text) => {
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    // A torn last line (crash while appending) still names a used bundle
                    // if it parses; otherwise it never reached disk in full and the
                    // bundle's messages never left.
                    if let Ok(id) = line.trim().parse() {
                        consumed.insert(id);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&ledger_path)(e)),
        }
        Ok(Store { dir: dir.to_path_buf(), party, consumed, ledger, _lock: lock })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The party whose keys the store holds.
    pub fn party(&self) -> Party {
        self.party
    }

    /// Every bundle file in the folder: usable ones sorted by id; used ones are deleted and
    /// reported; damaged ones and the other party's reported and left alone.
    ///
    /// # Errors
    /// [`BundleError::Io`] if the folder cannot be listed.
    pub fn scan(&self) -> Result<Scan, BundleError> {
        let mut s = Scan::default();
        for p in bundle_files(&self.dir)? {
            match read_header(&p) {
                Ok(h) if h.party != self.party => {
                    s.bad.push((
                        p,
                        format!("holds party {}'s keys, not party {}'s", h.party.bit(), self.party.bit()),
                    ));
                }
                Ok(h) if self.consumed.contains(&h.id) => {
                    if let Err(e) = std::fs::remove_file(&p) {
                        s.undeletable.push((h.id, e.to_string()));
                    }
                    s.spent.push(h.id);
                }
                Ok(h) => s.ready.push((p, h)),
                Err(e) => s.bad.push((p, e.to_string())),
            }
        }
        s.ready.sort_by_key(|(_, h)| h.id);
        Ok(s)
    }

    /// Whether `id` was used.
    pub fn is_consumed(&self, id: &BundleId) -> bool {
        self.consumed.contains(id)
    }

    /// How many bundles the ledger lists.
    pub fn consumed_count(&self) -> usize {
        self.consumed.len()
    }

    /// Record durably that `id` is used; call before any message that depends on it leaves.
    ///
    /// # Errors
    /// [`BundleError::AlreadyUsed`] if it was used, [`BundleError::Io`] if the record cannot
    /// be made durable (then the bundle must not be used).
    pub fn consume(&mut self, id: BundleId) -> Result<(), BundleError> {
        if self.consumed.contains(&id) {
            return Err(BundleError::AlreadyUsed(id));
        }
        let ledger = self.dir.join(LEDGER);
        self.ledger.write_all(format!("{id}\n").as_bytes()).map_err(io_err(&ledger))?;
        self.ledger.sync_data().map_err(io_err(&ledger))?;
        self.consumed.insert(id);
        Ok(())
    }

    /// Delete a used bundle's file (a missing file is not an error).
    ///
    /// # Errors
    /// [`BundleError::Io`] if the file stays: its keys are still on disk, though the ledger
    /// refuses them.
    pub fn discard(&self, id: &BundleId) -> Result<(), BundleError> {
        let p = self.path_of(id);
        match std::fs::remove_file(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&p)(e)),
        }
    }

    /// The path a bundle with `id` has in this store.
    pub fn path_of(&self, id: &BundleId) -> PathBuf {
        self.dir.join(id.file_name())
    }
}

/// The bundles a store's ledger lists, in order, duplicates included (for audits: a
/// correct store never lists one twice).
///
/// # Errors
/// [`BundleError::Io`] if the ledger exists but cannot be read.
pub fn ledger(dir: &Path) -> Result<Vec<String>, BundleError> {
    let path = dir.join(LEDGER);
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok(t.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(vec![]),
        Err(e) => Err(io_err(&path)(e)),
    }
}
