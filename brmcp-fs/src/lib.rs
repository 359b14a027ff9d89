//! Files in a data directory: the one place brmcp creates them.
//!
//! Data directories hold tokens, private keys, `rpcpass` and money records, so every
//! directory is [`DIR_MODE`] and every file [`FILE_MODE`], whatever the umask (modes
//! are set explicitly, not left to `open`'s masked mode). Nothing here follows a
//! symbolic link where a file of ours belongs: one planted there (at
//! `mcpclient.json.tmp`, a key, `brmcp.sqlite`) would make us write a secret or the
//! ledger wherever it points, so it is refused with [`SymlinkRefused`]. Temporary
//! files are created exclusively (`O_EXCL`, which never follows a link) under
//! unpredictable names.
//!
//! SQLite opens its files itself: [`prepare_sqlite`] before the open and
//! [`seal_sqlite`] after it check the database and its `-wal`, `-shm` and `-journal`
//! files the same way (feature `sqlite`).

#![cfg_attr(docsrs, feature(doc_cfg))]

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sqlite::{
    SqliteAccess, SqliteIdentity, SqliteKind, StampError, StampedOpen, open_sqlite,
    open_stamped_sqlite,
};

/// Mode of every data directory: the owner's only.
pub const DIR_MODE: u32 = 0o700;

/// Mode of every file in a data directory: the owner's only.
pub const FILE_MODE: u32 = 0o600;

#[cfg(feature = "sqlite")]
/// The suffixes of SQLite's sidecar files, which it creates next to the database.
const SQLITE_SIDECARS: [&str; 3] = ["-wal", "-shm", "-journal"];

/// Random bytes in a temporary file's name (as hex): 8, so a name cannot be guessed
/// and planted in advance.
const TMP_NAME_ENTROPY: usize = 8;

/// A symbolic link stands where a file of ours belongs.
#[derive(Debug)]
pub struct SymlinkRefused(pub PathBuf);

impl std::fmt::Display for SymlinkRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is a symbolic link; refusing to follow it (remove it, brmcp writes a file there)",
            self.0.display()
        )
    }
}

impl std::error::Error for SymlinkRefused {}

/// `Err` when `path` is a symbolic link; a missing path is fine.
///
/// # Errors
/// [`SymlinkRefused`] (as an [`io::Error`]), or the `lstat` failure.
pub fn refuse_symlink(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            SymlinkRefused(path.to_owned()),
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Tightens an existing file of ours to [`FILE_MODE`] (refusing a link there); a
/// missing one is fine.
///
/// # Errors
/// [`SymlinkRefused`], or the operating system's.
pub fn seal_file(path: &Path) -> io::Result<()> {
    refuse_symlink(path)?;
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() => set_mode(path, &meta, FILE_MODE),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(unix)]
fn set_mode(path: &Path, meta: &fs::Metadata, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if meta.permissions().mode() & 0o777 != mode {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn set_mode(_: &Path, _: &fs::Metadata, _: u32) -> io::Result<()> {
    Ok(())
}

/// Creates `dir` (and missing parents) and makes `dir` itself [`DIR_MODE`], tightening
/// one an older version made looser.
///
/// # Errors
/// The operating system's.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(dir)?;
    set_mode(dir, &fs::metadata(dir)?, DIR_MODE)
}

/// Opens a new file at `path`, exclusively ([`FILE_MODE`]); `None` if one exists.
fn create_exclusive(path: &Path) -> io::Result<Option<fs::File>> {
    refuse_symlink(path)?;
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    match options.open(path) {
        Ok(file) => {
            set_mode(path, &file.metadata()?, FILE_MODE)?;
            Ok(Some(file))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // A link planted since the check above is refused as such.
            refuse_symlink(path)?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Writes `bytes` at `path` if nothing is there: `true` when it wrote. (Templates:
/// an existing file is the user's.)
///
/// # Errors
/// [`SymlinkRefused`], or the operating system's.
pub fn write_new(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_dir(dir)?;
    }
    let Some(mut file) = create_exclusive(path)? else {
        return Ok(false);
    };
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(true)
}

/// Replaces `path` with `bytes` atomically: a temporary file of an unpredictable name
/// beside it, created exclusively, synced and renamed over `path`, then the directory
/// synced. The result is [`FILE_MODE`].
///
/// # Errors
/// [`SymlinkRefused`] when `path` is a link, or the operating system's; on error
/// `path` is as it was.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    create_dir(dir)?;
    refuse_symlink(path)?;
    let (tmp, mut file) = loop {
        let mut name = std::ffi::OsString::from(".");
        name.push(path.file_name().unwrap_or_default());
        name.push(format!(".{}.tmp", random_hex()?));
        let tmp = dir.join(name);
        if let Some(file) = create_exclusive(&tmp)? {
            break (tmp, file);
        }
    };
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if let Ok(dir) = fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

fn random_hex() -> io::Result<String> {
    let mut bytes = [0u8; TMP_NAME_ENTROPY];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(feature = "sqlite")]
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(feature = "sqlite")]
fn sqlite_error(path: &Path, e: &io::Error) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
        Some(format!("{}: {e}", path.display())),
    )
}

#[cfg(feature = "sqlite")]
/// Before SQLite opens the database at `path`: refuses a link at it or at a sidecar,
/// creates the database file [`FILE_MODE`] when missing (SQLite gives its sidecars the
/// database's mode) and tightens existing ones.
///
/// # Errors
/// As an SQLite "cannot open" error naming the file, so callers report it as any
/// other open failure.
pub fn prepare_sqlite(path: &Path) -> Result<(), rusqlite::Error> {
    let checked = (|| {
        seal_sqlite_files(path)?;
        match create_exclusive(path) {
            Ok(_) => Ok(()),
            // A directory, say: SQLite's open reports it.
            Err(e) if e.kind() != io::ErrorKind::InvalidInput => Ok(()),
            Err(e) => Err(e),
        }
    })();
    checked.map_err(|e| sqlite_error(path, &e))
}

/// Opens `path` for appending (a log of ours), creating it [`FILE_MODE`] and its
/// directory [`DIR_MODE`] when missing, tightening an existing one, never through a
/// link.
///
/// # Errors
/// [`SymlinkRefused`], or the operating system's.
pub fn open_append(path: &Path) -> io::Result<fs::File> {
    write_new(path, b"")?;
    seal_file(path)?;
    let file = fs::OpenOptions::new().append(true).open(path)?;
    // A link planted between the check and the open is refused as such.
    refuse_symlink(path)?;
    Ok(file)
}

#[cfg(feature = "sqlite")]
/// After SQLite opened the database at `path` (and set its journal mode): the
/// sidecars it made are checked and tightened too.
///
/// # Errors
/// As [`prepare_sqlite`].
pub fn seal_sqlite(path: &Path) -> Result<(), rusqlite::Error> {
    seal_sqlite_files(path).map_err(|e| sqlite_error(path, &e))
}

#[cfg(feature = "sqlite")]
fn seal_sqlite_files(path: &Path) -> io::Result<()> {
    seal_file(path)?;
    for suffix in SQLITE_SIDECARS {
        seal_file(&sidecar(path, suffix))?;
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn atomic_writes_refuse_links_and_leave_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        let path = dir.path().join("mcpclient.json");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let err = write_atomic(&path, b"secret").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!target.exists());
        fs::remove_file(&path).unwrap();
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(mode(&path), FILE_MODE);
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left");
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_files_are_sealed_and_links_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.sqlite");
        let target = dir.path().join("target");
        std::os::unix::fs::symlink(&target, sidecar(&db, "-wal")).unwrap();
        let err = prepare_sqlite(&db).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        fs::remove_file(sidecar(&db, "-wal")).unwrap();
        fs::write(sidecar(&db, "-shm"), b"").unwrap();
        fs::set_permissions(sidecar(&db, "-shm"), fs::Permissions::from_mode(0o666)).unwrap();
        prepare_sqlite(&db).unwrap();
        assert_eq!(mode(&db), FILE_MODE);
        assert_eq!(mode(&sidecar(&db, "-shm")), FILE_MODE);
    }
}
