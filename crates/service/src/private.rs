//! Files only their owner can read: key bundles, their folders, the ledger and the lock are
//! created `0600` (folders `0700`) whatever the umask, and existing ones are narrowed to
//! those modes (reliability probe, defect 8). On other platforms the modes are left alone.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_: &Path, _: u32) -> io::Result<()> {
    Ok(())
}

/// Create `dir` (and its parents) if needed and make it `0700`.
///
/// # Errors
/// The file system's error.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    set_mode(dir, 0o700)
}

fn options() -> OpenOptions {
    #[allow(unused_mut)]
    let mut o = OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o
}

/// Create (or truncate) `path` for writing, `0600`.
///
/// # Errors
/// The file system's error.
pub fn create_file(path: &Path) -> io::Result<File> {
    let f = options().write(true).create(true).truncate(true).open(path)?;
    set_mode(path, 0o600)?;
    Ok(f)
}

/// Open `path` for appending (created if missing), `0600`.
///
/// # Errors
/// The file system's error.
pub fn append_file(path: &Path) -> io::Result<File> {
    let f = options().append(true).create(true).open(path)?;
    set_mode(path, 0o600)?;
    Ok(f)
}

/// Open `path` for reading and writing (created if missing, not truncated), `0600`.
///
/// # Errors
/// The file system's error.
pub fn open_file(path: &Path) -> io::Result<File> {
    let f = options().read(true).write(true).create(true).truncate(false).open(path)?;
    set_mode(path, 0o600)?;
    Ok(f)
}

/// Narrow an existing folder to `0700` and the files directly in it to `0600`.
///
/// # Errors
/// The file system's error.
pub fn restrict_dir(dir: &Path) -> io::Result<()> {
    set_mode(dir, 0o700)?;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_file() {
            set_mode(&e.path(), 0o600)?;
        }
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn modes_are_private_whatever_was_there() {
        let d = std::env::temp_dir().join(format!("fusefss-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        set_mode(&d, 0o755).unwrap();
        let f = d.join("k");
        std::fs::write(&f, b"x").unwrap();
        set_mode(&f, 0o644).unwrap();
        restrict_dir(&d).unwrap();
        assert_eq!((mode(&d), mode(&f)), (0o700, 0o600));
        set_mode(&f, 0o666).unwrap();
        drop(create_file(&f).unwrap());
        assert_eq!(mode(&f), 0o600);
        let sub = d.join("a/b");
        create_dir(&sub).unwrap();
        assert_eq!(mode(&sub), 0o700);
        drop(append_file(&sub.join("log")).unwrap());
        assert_eq!(mode(&sub.join("log")), 0o600);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
