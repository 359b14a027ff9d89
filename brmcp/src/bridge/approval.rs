//! The approval secret: the user's credential for deciding payments.
//!
//! Agents hold the bearer token of `mcpclient.json`; an agent (or a prompt that
//! hijacks it) must not approve its own payments, so deciding them takes another
//! credential that no agent configuration carries: a random secret in
//! [`APPROVAL_SECRET_FILE`] of the data directory, made on first need, the owner's
//! only. `brmcp bridge approvals` presents it. It protects against an agent that holds
//! only its token; a process running as the same user can read the file, and then
//! the caps are the protection.
//!
//! An agent the settings make its own approver ([`Approver::Agent`](super::Approver))
//! also decides by answering the question its client is asked; for every other agent
//! only this secret decides.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::random_hex;
use crate::secure_fs;

/// The approval secret's file in the bridge's data directory.
pub const APPROVAL_SECRET_FILE: &str = "approval.secret";

/// Random bytes in a secret: 32, as hex 64 characters, beyond guessing.
const SECRET_BYTES: usize = 32;

/// Bytes read from the file at most: a secret and a newline, with room to spare, so
/// a file planted there cannot make the bridge read without bound per request.
const MAX_SECRET_FILE: u64 = 256;

/// Why the approval secret could not be read or made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalSecretError {
    /// The file could not be read, written or was a symbolic link.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The file holds something other than a secret brmcp made.
    #[error("{0}: not a secret brmcp made; remove it and a new one is made")]
    Malformed(PathBuf),
    /// Others than the owner may read the file, so it may be known.
    #[error("{0}: readable by others than its owner; remove it and a new one is made")]
    Exposed(PathBuf),
}

/// The approval secret of `data_dir`, made first when there is none.
///
/// # Errors
/// [`ApprovalSecretError`]; a symbolic link at the file is refused.
pub fn approval_secret(data_dir: &Path) -> Result<String, ApprovalSecretError> {
    secret_in(data_dir, APPROVAL_SECRET_FILE)
}

/// The secret of the file `name` in `data_dir` (made first when there is none), kept
/// as the approval secret is: the operator page's secret of `serve` too.
pub(crate) fn secret_in(data_dir: &Path, name: &str) -> Result<String, ApprovalSecretError> {
    let path = data_dir.join(name);
    if let Some(secret) = read_secret(&path)? {
        return Ok(secret);
    }
    let io = |source| ApprovalSecretError::Io {
        path: path.clone(),
        source,
    };
    let fresh = random_hex::<SECRET_BYTES>().map_err(|e| io(io::Error::other(e.to_string())))?;
    // Written whole under a temporary name, then linked into place: a linking fails
    // when a file is there, so of two processes making one at once, one secret wins
    // and neither reads a half-written file.
    let tmp = data_dir.join(format!(
        ".{name}.{}.tmp",
        random_hex::<8>().map_err(|e| io(io::Error::other(e.to_string())))?
    ));
    if !secure_fs::write_new(&tmp, format!("{fresh}\n").as_bytes()).map_err(io)? {
        return Err(io(io::ErrorKind::AlreadyExists.into()));
    }
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(fresh),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            read_secret(&path)?.ok_or_else(|| ApprovalSecretError::Malformed(path.clone()))
        }
        Err(e) => Err(io(e)),
    }
}

/// Replaces the approval secret of `data_dir` with a fresh one (atomically: the file
/// holds the old secret or the new, never part of one), as `brmcp bridge ui --rotate`
/// does: every page session the old one opened ends (the page's sessions are opened
/// by login codes made under the secret, see `bridge::ui`), and `/payments` takes the
/// new one only. A missing, malformed or exposed file is replaced too.
///
/// # Errors
/// [`ApprovalSecretError::Io`]; a symbolic link at the file is refused.
pub fn rotate_approval_secret(data_dir: &Path) -> Result<String, ApprovalSecretError> {
    rotate_secret_in(data_dir, APPROVAL_SECRET_FILE)
}

/// Replaces the secret of the file `name` in `data_dir` with a fresh one.
pub(crate) fn rotate_secret_in(data_dir: &Path, name: &str) -> Result<String, ApprovalSecretError> {
    let path = data_dir.join(name);
    let io = |source| ApprovalSecretError::Io {
        path: path.clone(),
        source,
    };
    let fresh = random_hex::<SECRET_BYTES>().map_err(|e| io(io::Error::other(e.to_string())))?;
    secure_fs::write_atomic(&path, format!("{fresh}\n").as_bytes()).map_err(io)?;
    Ok(fresh)
}

/// The secret of `data_dir` if one was made, without making one.
///
/// # Errors
/// As [`approval_secret`].
pub fn existing_approval_secret(data_dir: &Path) -> Result<Option<String>, ApprovalSecretError> {
    existing_secret_in(data_dir, APPROVAL_SECRET_FILE)
}

/// The secret of the file `name` in `data_dir` if one was made.
pub(crate) fn existing_secret_in(
    data_dir: &Path,
    name: &str,
) -> Result<Option<String>, ApprovalSecretError> {
    read_secret(&data_dir.join(name))
}

fn read_secret(path: &Path) -> Result<Option<String>, ApprovalSecretError> {
    let io = |source| ApprovalSecretError::Io {
        path: path.to_owned(),
        source,
    };
    secure_fs::refuse_symlink(path).map_err(io)?;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(ApprovalSecretError::Malformed(path.to_owned()));
    }
    #[cfg(unix)]
    if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o077 != 0 {
        return Err(ApprovalSecretError::Exposed(path.to_owned()));
    }
    let mut text = String::new();
    file.take(MAX_SECRET_FILE)
        .read_to_string(&mut text)
        .map_err(|_| ApprovalSecretError::Malformed(path.to_owned()))?;
    let secret = text.trim();
    let well_formed =
        secret.len() == SECRET_BYTES * 2 && secret.bytes().all(|b| b.is_ascii_hexdigit());
    if !well_formed {
        return Err(ApprovalSecretError::Malformed(path.to_owned()));
    }
    Ok(Some(secret.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert!(existing_approval_secret(dir.path()).unwrap().is_none());
        let made = approval_secret(dir.path()).unwrap();
        assert_eq!(made.len(), 64);
        assert_eq!(approval_secret(dir.path()).unwrap(), made);
        assert_eq!(existing_approval_secret(dir.path()).unwrap(), Some(made));
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [APPROVAL_SECRET_FILE]);
    }

    #[test]
    fn rotating_replaces_the_secret_whatever_was_there() {
        let dir = tempfile::tempdir().unwrap();
        let first = approval_secret(dir.path()).unwrap();
        let second = rotate_approval_secret(dir.path()).unwrap();
        assert_ne!(first, second);
        assert_eq!(approval_secret(dir.path()).unwrap(), second);
        let path = dir.path().join(APPROVAL_SECRET_FILE);
        std::fs::write(&path, b"short").unwrap();
        let third = rotate_approval_secret(dir.path()).unwrap();
        assert_eq!(existing_approval_secret(dir.path()).unwrap(), Some(third));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [APPROVAL_SECRET_FILE], "no temporary file left");
    }

    #[test]
    fn concurrent_makers_agree() {
        let dir = tempfile::tempdir().unwrap();
        let secrets: Vec<String> = std::thread::scope(|s| {
            let makers: Vec<_> = (0..8)
                .map(|_| s.spawn(|| approval_secret(dir.path()).unwrap()))
                .collect();
            makers.into_iter().map(|m| m.join().unwrap()).collect()
        });
        assert!(secrets.windows(2).all(|w| w[0] == w[1]), "{secrets:?}");
    }

    #[test]
    fn a_bad_file_is_named_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(APPROVAL_SECRET_FILE);
        secure_fs::write_new(&path, b"short").unwrap();
        let e = approval_secret(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains(APPROVAL_SECRET_FILE) && e.contains("remove it"),
            "{e}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"short");
    }

    #[cfg(unix)]
    #[test]
    fn the_file_is_the_owners_only_and_never_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(APPROVAL_SECRET_FILE);
        approval_secret(dir.path()).unwrap();
        let mode = std::fs::symlink_metadata(&path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        // Loosened by someone: refused, not used.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = approval_secret(dir.path()).unwrap_err();
        assert!(matches!(e, ApprovalSecretError::Exposed(_)), "{e}");

        // A link planted where the secret belongs is neither followed nor replaced.
        let other = tempfile::tempdir().unwrap();
        let target = other.path().join("elsewhere");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let e = approval_secret(dir.path()).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(!target.exists(), "nothing written through the link");
        let e = existing_approval_secret(dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
    }
}
