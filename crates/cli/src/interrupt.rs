//! Key folders a command made for itself, removed when the command is interrupted (Ctrl-C,
//! `kill`): a run's bundles are gigabytes (MiniLM seq 128: 13 GB for both parties), and a
//! process stopped by a signal runs none of the clean-up its command does at the end.
//!
//! Only the command-line tool installs the handler ([`crate::model::KeysArgs`]): a library
//! caller (the Python bindings) keeps its own handling of signals.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, PoisonError, RwLock};

/// Folders to remove on an interrupt.
static FOLDERS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// Set, under its write lock, when an interrupt starts removing the folders (and held until
/// the process exits): [`create_dir`] makes no folder after that, so none of the command's
/// threads makes one again between the removal and the exit.
static STOPPING: RwLock<bool> = RwLock::new(false);

/// Exit status after an interrupt (as a shell reports a process stopped by `SIGINT`).
pub const INTERRUPTED: i32 = 130;

/// Remove `dir` and all it holds if the process is interrupted (`SIGINT`, `SIGTERM` or
/// `SIGHUP`) before it exits, then exit with [`INTERRUPTED`]. The handler is installed on
/// the first call; if another one is installed already, the folder is left as before.
pub fn remove_on_interrupt(dir: &Path) {
    HANDLER.call_once(|| {
        // (Runs on a thread of its own, not in the signal handler: removing files is safe
        // there.)
        let _ = ctrlc::set_handler(|| {
            let mut stopping = STOPPING.write().unwrap_or_else(PoisonError::into_inner);
            *stopping = true;
            let dirs = std::mem::take(&mut *FOLDERS.lock().unwrap_or_else(PoisonError::into_inner));
            for d in dirs {
                remove_while_written(&d);
            }
            std::process::exit(INTERRUPTED);
        });
    });
    FOLDERS.lock().unwrap_or_else(PoisonError::into_inner).push(dir.to_path_buf());
}

/// Create `dir` and its parents with [`service::private::create_dir`], unless an interrupt
/// is removing the command's folders: a folder inside one of them (a run's `party0/`) made
/// with its parents after the removal would bring the removed folder back.
///
/// # Errors
/// The file system's error, or [`std::io::ErrorKind::Interrupted`] once an interrupt has
/// begun.
pub fn create_dir(dir: &Path) -> std::io::Result<()> {
    let stopping = STOPPING.read().unwrap_or_else(PoisonError::into_inner);
    if *stopping {
        return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "the command was interrupted"));
    }
    service::private::create_dir(dir)
}

/// Remove `dir` and all it holds while the command's other threads may still be writing
/// bundles into it: a file made during the removal fails it (the folder is not empty), so
/// it is tried again until the folder is gone (for at most a second).
fn remove_while_written(dir: &Path) {
    for _ in 0..100 {
        let _ = std::fs::remove_dir_all(dir);
        if !dir.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
