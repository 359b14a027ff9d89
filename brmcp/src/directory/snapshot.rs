//! Signed snapshots of the live listings: ed25519 over the exact payload bytes, with
//! the key kept in the data directory (`snapshotkey.json`, the Go file's format).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::store::Stored;

/// The key file's name inside the data directory.
pub const KEY_FILE: &str = "snapshotkey.json";

/// The snapshot format this code writes and reads.
pub const SNAPSHOT_VERSION: i64 = 1;

/// The signed envelope: the `get_snapshot` output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedSnapshot {
    /// Standard base64 (with padding) of the payload bytes.
    pub payload: String,
    /// Hex ed25519 signature over the payload bytes.
    pub sig: String,
    /// Hex public key.
    #[serde(rename = "pub")]
    pub pub_key: String,
}

/// One listing in a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotListing {
    /// The provider.
    pub uid: String,
    /// As registered.
    pub description: String,
    /// Normalised tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The crawled `tools` array.
    pub catalog: Value,
    /// Stamp.
    #[serde(rename = "catalogCheckedAt")]
    pub catalog_checked_at: i64,
    /// Stamp.
    #[serde(rename = "lastVerifiedExecution")]
    pub last_verified_execution: i64,
    /// Expiry.
    #[serde(rename = "expiresAt")]
    pub expires_at: i64,
}

/// The signed payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// [`SNAPSHOT_VERSION`].
    pub v: i64,
    /// When built.
    #[serde(rename = "generatedAt")]
    pub generated_at: i64,
    /// Live listings by uid; `null` when there are none (as Go writes it).
    pub listings: Option<Vec<SnapshotListing>>,
}

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// It cannot be read or written.
    #[error("signer key {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Not JSON of the expected shape.
    #[error("signer key {} corrupt: {message}", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// serde's message.
        message: String,
    },
    /// `pub` is not 32 hex bytes.
    #[error("signer key {}: bad public key", .path.display())]
    BadPublic {
        /// The file.
        path: PathBuf,
    },
    /// `priv` is not 64 hex bytes (seed and public key), or does not match `pub`.
    #[error("signer key {}: bad private key", .path.display())]
    BadPrivate {
        /// The file.
        path: PathBuf,
    },
}

#[derive(Serialize, Deserialize)]
struct KeyFile {
    #[serde(rename = "pub")]
    public: String,
    #[serde(rename = "priv")]
    private: String,
}

/// The directory's snapshot signer.
#[derive(Debug)]
pub struct Signer {
    key: SigningKey,
}

impl Signer {
    /// Loads `<dir>/`[`KEY_FILE`], creating it (mode 0600) with a fresh key if missing.
    /// A link there is refused (a planted one would make the directory sign with a key
    /// of someone else's choosing), and an existing key file is tightened to 0600.
    ///
    /// # Errors
    /// [`KeyError`].
    pub fn load_or_create(dir: &Path) -> Result<Self, KeyError> {
        let path = dir.join(KEY_FILE);
        let read = crate::secure_fs::seal_file(&path).and_then(|()| std::fs::read_to_string(&path));
        match read {
            Ok(text) => Self::parse(&text, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut seed = [0u8; 32];
                getrandom::fill(&mut seed).map_err(|e| KeyError::Io {
                    path: path.clone(),
                    source: std::io::Error::other(e.to_string()),
                })?;
                let key = SigningKey::from_bytes(&seed);
                let file = KeyFile {
                    public: hex::encode(key.verifying_key().as_bytes()),
                    private: hex::encode(key.to_keypair_bytes()),
                };
                let text = serde_json::to_string_pretty(&file).expect("a key file serializes");
                let wrote =
                    crate::secure_fs::write_new(&path, text.as_bytes()).map_err(|source| {
                        KeyError::Io {
                            path: path.clone(),
                            source,
                        }
                    })?;
                if !wrote {
                    // Another process made it meanwhile: that key is the directory's.
                    return Self::load_or_create(dir);
                }
                Ok(Self { key })
            }
            Err(source) => Err(KeyError::Io { path, source }),
        }
    }

    fn parse(text: &str, path: &Path) -> Result<Self, KeyError> {
        let file: KeyFile = serde_json::from_str(text).map_err(|e| KeyError::Corrupt {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let public: [u8; 32] = hex::decode(&file.public)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| KeyError::BadPublic {
                path: path.to_owned(),
            })?;
        let bad_private = || KeyError::BadPrivate {
            path: path.to_owned(),
        };
        let private: [u8; 64] = hex::decode(&file.private)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(bad_private)?;
        let key = SigningKey::from_keypair_bytes(&private).map_err(|_| bad_private())?;
        if key.verifying_key().as_bytes() != &public {
            return Err(bad_private());
        }
        Ok(Self { key })
    }

    /// A signer of the key from `seed`: deterministic, for the fuzz harness.
    #[cfg(any(fuzzing, test))]
    pub(crate) fn from_seed(seed: [u8; 32]) -> Self {
        Self {
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// The public key as 64 hex characters (`policy.pubKey`).
    pub fn public_hex(&self) -> String {
        hex::encode(self.key.verifying_key().as_bytes())
    }

    /// Signs `payload` as it is.
    pub fn sign(&self, payload: &[u8]) -> SignedSnapshot {
        SignedSnapshot {
            payload: STANDARD.encode(payload),
            sig: hex::encode(self.key.sign(payload).to_bytes()),
            pub_key: self.public_hex(),
        }
    }
}

/// The payload of the live listings among `entries` (sorted by uid), generated at `now`.
pub fn payload(entries: &[(String, Stored)], now: i64) -> Vec<u8> {
    let listings: Vec<SnapshotListing> = entries
        .iter()
        .filter_map(|(uid, s)| {
            let live = s.entry.live.as_ref()?;
            Some(SnapshotListing {
                uid: uid.clone(),
                description: live.description.clone(),
                tags: live.tags.clone(),
                catalog: live.catalog.clone(),
                catalog_checked_at: live.catalog_checked_at,
                last_verified_execution: live.last_verified_execution,
                expires_at: live.expires_at,
            })
        })
        .collect();
    let snapshot = Snapshot {
        v: SNAPSHOT_VERSION,
        generated_at: now,
        listings: (!listings.is_empty()).then_some(listings),
    };
    serde_json::to_vec(&snapshot).expect("a snapshot serializes")
}

/// Why a snapshot does not verify: the reference's checks, in its order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// No trust root.
    #[error("no trusted key for snapshot verification")]
    NoTrustedKey,
    /// `pub` is not the trusted key (exact string comparison).
    #[error("snapshot signed by an unexpected key")]
    UnexpectedKey,
    /// `pub` is not 32 hex bytes.
    #[error("snapshot public key malformed")]
    BadPublicKey,
    /// `sig` is not hex of a signature.
    #[error("snapshot signature malformed")]
    BadSignature,
    /// The signature does not verify (or the payload is not base64).
    #[error("snapshot signature invalid")]
    Invalid,
    /// The signed payload is not a snapshot.
    #[error("snapshot payload corrupt: {0}")]
    Corrupt(String),
    /// Another version.
    #[error("snapshot version {0} unsupported")]
    Version(i64),
}

/// Verifies `signed` against the trusted key `want_pub` (hex), then decodes it.
///
/// # Errors
/// [`VerifyError`], checked in this order: trust root, key match, key form, signature
/// form, signature, payload, version.
pub fn verify(signed: &SignedSnapshot, want_pub: &str) -> Result<Snapshot, VerifyError> {
    if want_pub.is_empty() {
        return Err(VerifyError::NoTrustedKey);
    }
    if signed.pub_key != want_pub {
        return Err(VerifyError::UnexpectedKey);
    }
    let public: [u8; 32] = hex::decode(&signed.pub_key)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(VerifyError::BadPublicKey)?;
    let public = VerifyingKey::from_bytes(&public).map_err(|_| VerifyError::BadPublicKey)?;
    let sig: [u8; 64] = hex::decode(&signed.sig)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(VerifyError::BadSignature)?;
    let payload = STANDARD
        .decode(&signed.payload)
        .map_err(|_| VerifyError::Invalid)?;
    public
        .verify(&payload, &Signature::from_bytes(&sig))
        .map_err(|_| VerifyError::Invalid)?;
    let snapshot: Snapshot =
        serde_json::from_slice(&payload).map_err(|e| VerifyError::Corrupt(e.to_string()))?;
    if snapshot.v != SNAPSHOT_VERSION {
        return Err(VerifyError::Version(snapshot.v));
    }
    Ok(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_verify_and_every_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let signer = Signer::load_or_create(dir.path()).unwrap();
        let again = Signer::load_or_create(dir.path()).unwrap();
        assert_eq!(signer.public_hex(), again.public_hex(), "the key persists");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let payload = payload(&[], 7);
        assert_eq!(payload, br#"{"v":1,"generatedAt":7,"listings":null}"#);
        let signed = signer.sign(&payload);
        let want = signer.public_hex();
        assert_eq!(verify(&signed, &want).unwrap().generated_at, 7);

        assert_eq!(verify(&signed, ""), Err(VerifyError::NoTrustedKey));
        let other = Signer::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        assert_eq!(
            verify(&signed, &other.public_hex()),
            Err(VerifyError::UnexpectedKey)
        );
        let by_other = other.sign(&payload);
        assert_eq!(verify(&by_other, &want), Err(VerifyError::UnexpectedKey));
        let mut forged = by_other.clone();
        forged.pub_key.clone_from(&want);
        assert_eq!(verify(&forged, &want), Err(VerifyError::Invalid));
        let mut flipped = payload.clone();
        flipped[3] ^= 1;
        let mut bad = signed.clone();
        bad.payload = STANDARD.encode(&flipped);
        assert_eq!(verify(&bad, &want), Err(VerifyError::Invalid));
        let mut bad = signed.clone();
        bad.sig
            .replace_range(0..2, if &bad.sig[0..2] == "00" { "11" } else { "00" });
        assert_eq!(verify(&bad, &want), Err(VerifyError::Invalid));
        bad.sig = "zz".into();
        assert_eq!(verify(&bad, &want), Err(VerifyError::BadSignature));
        let v2 = signer.sign(br#"{"v":2,"generatedAt":1,"listings":null}"#);
        assert_eq!(verify(&v2, &want), Err(VerifyError::Version(2)));
        let junk = signer.sign(b"not json");
        assert!(matches!(verify(&junk, &want), Err(VerifyError::Corrupt(_))));
    }

    #[test]
    fn a_broken_key_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(KEY_FILE), r#"{"pub":"00","priv":"00"}"#).unwrap();
        let e = Signer::load_or_create(dir.path()).unwrap_err().to_string();
        assert!(e.ends_with("snapshotkey.json: bad public key"), "{e}");
        std::fs::write(dir.path().join(KEY_FILE), "{").unwrap();
        let e = Signer::load_or_create(dir.path()).unwrap_err().to_string();
        assert!(e.contains("snapshotkey.json corrupt: "), "{e}");
    }
}
