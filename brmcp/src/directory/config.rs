//! The operator's policy file, `brmcpdir.json` (the Go directory's names and defaults).

use std::path::{Path, PathBuf};

use brmcp_adapters::PeerId;
use serde::{Deserialize, Serialize};

/// The policy file's name inside the data directory.
pub const POLICY_FILE: &str = "brmcpdir.json";

/// Default listing fee, in atoms.
pub const DEFAULT_LISTING_FEE_ATOMS: i64 = 100_000;
/// Default snapshot price, in atoms.
pub const DEFAULT_SNAPSHOT_PRICE_ATOMS: i64 = 10_000;
/// Default listing lifetime, in days.
pub const DEFAULT_EXPIRY_DAYS: i64 = 30;
/// Default ceiling on a provider's test budget, in atoms.
pub const DEFAULT_TEST_BUDGET_MAX_ATOMS: i64 = 10_000_000;
/// Default catalog age that triggers a free recrawl, in hours.
pub const DEFAULT_RECRAWL_HOURS: i64 = 24;
/// Default name announced to peers and in `policy`.
pub const DEFAULT_NAME: &str = "brmcpdir";

/// The directory's terms, as read from [`POLICY_FILE`] (a value ≤ 0 or an empty name
/// selects the default; `search_price_atoms` has none: 0 is free).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    /// Operators: the only callers who see and may call the admin tools.
    pub admin_uids: Vec<String>,
    /// The fee debited when a registration is funded.
    pub listing_fee_atoms: i64,
    /// The price of `get_snapshot`.
    pub snapshot_price_atoms: i64,
    /// The price of `search` (0: free).
    pub search_price_atoms: i64,
    /// How long a listing lives.
    pub expiry_days: i64,
    /// The per-caller rate limit (0: the harness default).
    pub calls_per_minute: i64,
    /// The largest test budget a provider may nominate.
    pub test_budget_max_atoms: i64,
    /// The catalog age at which the sweep recrawls for free.
    pub recrawl_hours: i64,
    /// The directory's name.
    pub name: String,
}

/// Why the policy file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// It cannot be read or written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// It is not a valid policy (the message names the key).
    #[error("parse {}: {message}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// serde's message, naming the field.
        message: String,
    },
    /// An admin uid is not 64 hex characters.
    #[error("parse {}: admin_uids: {uid:?} is not a Bison Relay uid", .path.display())]
    BadAdmin {
        /// The file.
        path: PathBuf,
        /// The value.
        uid: String,
    },
}

fn or(value: i64, default: i64) -> i64 {
    if value <= 0 { default } else { value }
}

impl Policy {
    /// Parses a policy file's text (`path` names it in errors), with the defaults applied.
    ///
    /// # Errors
    /// [`PolicyError::Parse`] for bad JSON, an unknown key or a wrong type;
    /// [`PolicyError::BadAdmin`].
    pub fn parse(text: &str, path: &Path) -> Result<Self, PolicyError> {
        let policy: Self = serde_json::from_str(text).map_err(|e| PolicyError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        for uid in &policy.admin_uids {
            if uid.parse::<PeerId>().is_err() {
                return Err(PolicyError::BadAdmin {
                    path: path.to_owned(),
                    uid: uid.clone(),
                });
            }
        }
        Ok(policy.with_defaults())
    }

    /// Reads `<dir>/`[`POLICY_FILE`], writing the empty template first if it is
    /// missing; returns the policy and whether the template was written.
    ///
    /// # Errors
    /// [`PolicyError`].
    pub fn load_or_create(dir: &Path) -> Result<(Self, bool), PolicyError> {
        let path = dir.join(POLICY_FILE);
        let io = |source| PolicyError::Io {
            path: path.clone(),
            source,
        };
        let created = match std::fs::read_to_string(&path) {
            Ok(text) => return Ok((Self::parse(&text, &path)?, false)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let template =
                    serde_json::to_string_pretty(&Self::default()).expect("the policy serializes");
                // A file made since the read above is the operator's: read it.
                if !crate::secure_fs::write_new(&path, template.as_bytes()).map_err(io)? {
                    return Self::load_or_create(dir);
                }
                true
            }
            Err(e) => return Err(io(e)),
        };
        Ok((Self::default().with_defaults(), created))
    }

    /// The same policy with every unset value at its default.
    #[must_use]
    pub fn with_defaults(mut self) -> Self {
        self.listing_fee_atoms = or(self.listing_fee_atoms, DEFAULT_LISTING_FEE_ATOMS);
        self.snapshot_price_atoms = or(self.snapshot_price_atoms, DEFAULT_SNAPSHOT_PRICE_ATOMS);
        self.expiry_days = or(self.expiry_days, DEFAULT_EXPIRY_DAYS);
        self.test_budget_max_atoms = or(self.test_budget_max_atoms, DEFAULT_TEST_BUDGET_MAX_ATOMS);
        self.recrawl_hours = or(self.recrawl_hours, DEFAULT_RECRAWL_HOURS);
        self.search_price_atoms = self.search_price_atoms.max(0);
        self.calls_per_minute = self.calls_per_minute.max(0);
        if self.name.trim().is_empty() {
            DEFAULT_NAME.clone_into(&mut self.name);
        }
        self
    }

    /// The admin uids (validated at parse).
    pub fn admins(&self) -> Vec<PeerId> {
        self.admin_uids
            .iter()
            .filter_map(|u| u.parse().ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply_to_unset_values() {
        let p = Policy::parse(r#"{"listing_fee_atoms": -1, "name": " "}"#, "p".as_ref()).unwrap();
        assert_eq!(p.listing_fee_atoms, DEFAULT_LISTING_FEE_ATOMS);
        assert_eq!(p.name, DEFAULT_NAME);
        assert_eq!(p.search_price_atoms, 0);
    }

    #[test]
    fn errors_name_the_file_and_key() {
        let e = Policy::parse(r#"{"listing_fee": 1}"#, "/d/brmcpdir.json".as_ref()).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with("parse /d/brmcpdir.json: ") && e.contains("listing_fee"),
            "{e}"
        );
        let e = Policy::parse(r#"{"expiry_days": "x"}"#, "f".as_ref()).unwrap_err();
        assert!(e.to_string().contains("expiry_days") || e.to_string().contains("string"));
        let e = Policy::parse(r#"{"admin_uids": ["zz"]}"#, "f".as_ref()).unwrap_err();
        assert!(e.to_string().contains("admin_uids"), "{e}");
    }
}
