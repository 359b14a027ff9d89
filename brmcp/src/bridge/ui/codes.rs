//! Login codes: what the `ui` commands print in the login URL instead of the standing
//! secret. A code is random, lives [`LOGIN_CODE_TTL_SECS`] and logs in once, so a
//! browser's history (which keeps the URL, fragment included) holds nothing that
//! logs in again.
//!
//! The command and the serving process are two processes, so the codes live in files:
//! one per code in a private directory of the data directory, named by the SHA-256 of
//! the page's secret and the code, holding the code's expiry (Unix seconds). The name
//! binds a code to the secret it was made under: a rotated secret voids its codes, and
//! the directory alone (without the secret) opens nothing.
//!
//! - Made: written whole under a temporary name and renamed into place (synced), so
//!   the server sees a code entirely or not at all; the URL is printed only after.
//! - Taken: the serving process reads the expiry, then removes the file; only the
//!   process whose removal succeeds logs in, so two logins racing with one code get
//!   one session. The file is gone before the answer is sent: a crash in between
//!   loses the code (the user asks for another), never reuses it.
//! - Kept bounded: each making prunes expired codes and keeps at most
//!   [`MAX_LOGIN_CODES`].
#![cfg_attr(
    not(feature = "cli"),
    allow(
        dead_code,
        reason = "the `ui` commands, of the command line, make the codes"
    )
)]

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::bridge::random_hex;
use crate::secure_fs;

/// How long a login code may be used: 5 minutes, time to open the printed URL, short
/// enough that a copy of it found later has long expired.
pub(crate) const LOGIN_CODE_TTL_SECS: i64 = 5 * 60;

/// Login codes waiting at once: 16; making one past it drops the oldest, so repeated
/// `ui` commands cannot fill the directory.
pub(crate) const MAX_LOGIN_CODES: usize = 16;

/// Random bytes of a code: 16 (32 hex characters), beyond guessing in its lifetime.
const CODE_BYTES: usize = 16;

/// Bytes of a code's file read at most: an expiry and a newline with room to spare.
const MAX_CODE_FILE: u64 = 32;

/// Why a login code could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MintError {
    /// The codes' directory or a code's file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The system's random source failed.
    #[error("no randomness for a login code")]
    Random,
}

/// What a presented code was worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// A live code, now used up: log in.
    Fresh,
    /// A code of ours, past its time (now removed).
    Expired,
    /// Not a code of the current secret, or used already.
    Unknown,
}

/// Makes a login code for the secret `secret` of the page whose codes live in
/// `dir_name` of `data_dir`, valid from `now` (Unix seconds) for
/// [`LOGIN_CODE_TTL_SECS`].
pub(crate) fn mint(
    data_dir: &Path,
    dir_name: &str,
    secret: &str,
    now: i64,
) -> Result<String, MintError> {
    let dir = data_dir.join(dir_name);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| MintError::Io { path, source }
    };
    secure_fs::create_dir(&dir).map_err(io(&dir))?;
    prune(&dir, now, MAX_LOGIN_CODES - 1).map_err(io(&dir))?;
    let code = random_hex::<CODE_BYTES>().map_err(|_| MintError::Random)?;
    let path = dir.join(file_name(secret, &code));
    let expires = now.saturating_add(LOGIN_CODE_TTL_SECS);
    secure_fs::write_atomic(&path, format!("{expires}\n").as_bytes()).map_err(io(&path))?;
    Ok(code)
}

/// Takes the code `presented` for the secret `secret` at `now`: used up whatever it
/// was worth, so it never logs in twice.
pub(crate) fn take(
    data_dir: &Path,
    dir_name: &str,
    secret: &str,
    presented: &str,
    now: i64,
) -> Taken {
    let presented = presented.trim();
    let well_formed = presented.len() == CODE_BYTES * 2
        && presented
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !well_formed || secret.is_empty() {
        return Taken::Unknown;
    }
    let path = data_dir.join(dir_name).join(file_name(secret, presented));
    let Some(expires) = read_expiry(&path) else {
        return Taken::Unknown;
    };
    // Only the one removal that succeeds logs in.
    if std::fs::remove_file(&path).is_err() {
        return Taken::Unknown;
    }
    if now < expires && expires <= now.saturating_add(LOGIN_CODE_TTL_SECS) {
        Taken::Fresh
    } else {
        Taken::Expired
    }
}

/// Removes every code of the page: done when its secret is rotated.
pub(crate) fn clear(data_dir: &Path, dir_name: &str) -> io::Result<()> {
    let dir = data_dir.join(dir_name);
    secure_fs::refuse_symlink(&dir)?;
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Removes expired codes (and temporary files a crashed maker left) from `dir`, then
/// the oldest live ones past `keep`.
fn prune(dir: &Path, now: i64, keep: usize) -> io::Result<()> {
    let mut live: Vec<(i64, PathBuf)> = Vec::new();
    let stale = SystemTime::now()
        .checked_sub(Duration::from_secs(LOGIN_CODE_TTL_SECS.unsigned_abs()))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !entry.file_type()?.is_file() {
            continue;
        }
        if name.starts_with('.') && name.ends_with(".tmp") {
            // Another maker's file being written is younger than this.
            if entry.metadata()?.modified()? < stale {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        if name.len() != 64 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        match read_expiry(&path) {
            Some(expires) if expires > now => live.push((expires, path)),
            _ => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    live.sort();
    let excess = live.len().saturating_sub(keep);
    for (_, path) in live.into_iter().take(excess) {
        let _ = std::fs::remove_file(&path);
    }
    Ok(())
}

/// The expiry a code's file holds; `None` for no file, a link, or anything else.
fn read_expiry(path: &Path) -> Option<i64> {
    secure_fs::refuse_symlink(path).ok()?;
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_CODE_FILE).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// A code's file name: the SHA-256 of the secret and the code, as hex.
fn file_name(secret: &str, code: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"brmcp login code\n");
    hash.update(secret.trim().as_bytes());
    hash.update(b"\n");
    hash.update(code.as_bytes());
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = "test.login";
    const T: i64 = 1_800_000_000;

    fn files(data_dir: &Path) -> usize {
        std::fs::read_dir(data_dir.join(DIR)).unwrap().count()
    }

    #[test]
    fn a_code_logs_in_once() {
        let dir = tempfile::tempdir().unwrap();
        let code = mint(dir.path(), DIR, "secret", T).unwrap();
        assert_eq!(code.len(), 32);
        assert_eq!(take(dir.path(), DIR, "other", &code, T), Taken::Unknown);
        assert_eq!(take(dir.path(), DIR, "secret", &code, T + 1), Taken::Fresh);
        assert_eq!(
            take(dir.path(), DIR, "secret", &code, T + 1),
            Taken::Unknown
        );
        assert_eq!(files(dir.path()), 0, "used up");
        assert_eq!(take(dir.path(), DIR, "secret", "secret", T), Taken::Unknown);
        assert_eq!(take(dir.path(), DIR, "", &code, T), Taken::Unknown);
    }

    #[test]
    fn a_code_expires_and_is_used_up_by_trying_it() {
        let dir = tempfile::tempdir().unwrap();
        let code = mint(dir.path(), DIR, "secret", T).unwrap();
        let late = T + LOGIN_CODE_TTL_SECS;
        assert_eq!(take(dir.path(), DIR, "secret", &code, late), Taken::Expired);
        assert_eq!(take(dir.path(), DIR, "secret", &code, T), Taken::Unknown);
        // A clock far behind the code's making does not stretch its life.
        let code = mint(dir.path(), DIR, "secret", T).unwrap();
        let early = T - LOGIN_CODE_TTL_SECS;
        assert_eq!(
            take(dir.path(), DIR, "secret", &code, early),
            Taken::Expired
        );
    }

    #[test]
    fn racing_logins_with_one_code_get_one_session() {
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..20 {
            let code = mint(dir.path(), DIR, "secret", T).unwrap();
            let fresh = std::thread::scope(|s| {
                let racers: Vec<_> = (0..4)
                    .map(|_| s.spawn(|| take(dir.path(), DIR, "secret", &code, T)))
                    .collect();
                racers
                    .into_iter()
                    .map(|r| r.join().unwrap())
                    .filter(|t| *t == Taken::Fresh)
                    .count()
            });
            assert_eq!(fresh, 1);
        }
    }

    #[test]
    fn making_codes_keeps_the_bound_and_drops_the_expired() {
        let dir = tempfile::tempdir().unwrap();
        let first = mint(dir.path(), DIR, "secret", T).unwrap();
        for i in 1..(MAX_LOGIN_CODES as i64 * 2) {
            mint(dir.path(), DIR, "secret", T + i).unwrap();
            assert!(files(dir.path()) <= MAX_LOGIN_CODES);
        }
        assert_eq!(
            take(dir.path(), DIR, "secret", &first, T + 2),
            Taken::Unknown,
            "dropped"
        );
        mint(dir.path(), DIR, "secret", T + 10 * LOGIN_CODE_TTL_SECS).unwrap();
        assert_eq!(files(dir.path()), 1, "the expired ones are gone");
        clear(dir.path(), DIR).unwrap();
        assert_eq!(files(dir.path()), 0);
        clear(&dir.path().join("none"), DIR).unwrap();
    }
}
