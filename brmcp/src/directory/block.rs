//! The `directory` block of `brmcp.json` (the Go host's names): what `brmcp serve`'s
//! [`Registrant`](super::Registrant) registers, its auto-fund policy, and the
//! directories it registers with at startup. Read strictly: an unknown key, a wrong
//! type or a broken registration rule is an error naming the key.

use std::path::Path;

use brmcp_adapters::PeerId;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::registrant::AutoFund;
use super::types::{RegisterIn, TestSpec};
use crate::server::{ConfigError, ServeConfig};

/// The keys of the `directory` block.
const KEYS: [&str; 5] = [
    "description",
    "tags",
    "test",
    "auto_fund",
    "register_at_uids",
];

/// The keys of its `auto_fund` block.
const AUTO_FUND_KEYS: [&str; 4] = [
    "enabled",
    "max_atoms_per_request",
    "max_atoms_per_month",
    "allowed_directory_uids",
];

/// The `directory` block: present, `brmcp serve` serves `listing_invite` and registers.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistrantBlock {
    /// The registration's description.
    pub description: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its test.
    pub test: TestSpec,
    /// The auto-fund policy (absent: off).
    pub auto_fund: AutoFund,
    /// The directories registered with at every start.
    pub register_at_uids: Vec<PeerId>,
}

/// `(key, reason)`, the key as `directory.auto_fund.enabled`.
type BlockError = (String, String);

fn object<'a>(
    value: &'a Value,
    key: &str,
    known: &[&str],
) -> Result<&'a Map<String, Value>, BlockError> {
    let map = value
        .as_object()
        .ok_or_else(|| (key.to_owned(), "expected an object".to_owned()))?;
    if let Some(unknown) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err((format!("{key}.{unknown}"), "unknown key".to_owned()));
    }
    Ok(map)
}

fn field<T: DeserializeOwned>(
    map: &Map<String, Value>,
    prefix: &str,
    key: &str,
) -> Result<Option<T>, BlockError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| (format!("{prefix}.{key}"), e.to_string())),
    }
}

fn required<T: DeserializeOwned>(
    map: &Map<String, Value>,
    prefix: &str,
    key: &str,
) -> Result<T, BlockError> {
    field(map, prefix, key)?.ok_or_else(|| (format!("{prefix}.{key}"), "missing".to_owned()))
}

fn uids(list: Vec<String>, key: &str) -> Result<Vec<PeerId>, BlockError> {
    list.into_iter()
        .enumerate()
        .map(|(i, u)| {
            u.parse()
                .map_err(|e: brmcp_adapters::PeerIdError| (format!("{key}[{i}]"), e.to_string()))
        })
        .collect()
}

impl RegistrantBlock {
    /// The block of `config`, read from the file at `path` (named in errors); `None`
    /// when there is none.
    ///
    /// # Errors
    /// [`ConfigError::BadDirectory`] naming the file and the key at fault.
    pub fn from_config(config: &ServeConfig, path: &Path) -> Result<Option<Self>, ConfigError> {
        config
            .directory
            .as_ref()
            .map(|value| {
                Self::parse(value).map_err(|(key, reason)| ConfigError::BadDirectory {
                    path: path.to_owned(),
                    key,
                    reason,
                })
            })
            .transpose()
    }

    /// Reads the block.
    ///
    /// # Errors
    /// The key at fault and why.
    pub fn parse(value: &Value) -> Result<Self, BlockError> {
        const D: &str = "directory";
        const F: &str = "directory.auto_fund";
        let map = object(value, D, &KEYS)?;
        let auto_fund = match map.get("auto_fund") {
            None | Some(Value::Null) => AutoFund::default(),
            Some(v) => {
                let m = object(v, F, &AUTO_FUND_KEYS)?;
                let allowed: Vec<String> =
                    field(m, F, "allowed_directory_uids")?.unwrap_or_default();
                uids(
                    allowed.clone(),
                    "directory.auto_fund.allowed_directory_uids",
                )?;
                AutoFund {
                    enabled: field(m, F, "enabled")?.unwrap_or(false),
                    max_atoms_per_request: field(m, F, "max_atoms_per_request")?.unwrap_or(0),
                    max_atoms_per_month: field(m, F, "max_atoms_per_month")?.unwrap_or(0),
                    allowed_directory_uids: allowed,
                }
            }
        };
        let block = Self {
            description: required(map, D, "description")?,
            tags: field(map, D, "tags")?.unwrap_or_default(),
            test: required(map, D, "test")?,
            auto_fund,
            register_at_uids: uids(
                field(map, D, "register_at_uids")?.unwrap_or_default(),
                "directory.register_at_uids",
            )?,
        };
        let submitted = RegisterIn {
            description: block.description.clone(),
            tags: Some(block.tags.clone()),
            test: block.test.clone(),
        };
        submitted
            .validate(block.test.max_atoms)
            .map_err(|e| (D.to_owned(), e.to_string()))?;
        Ok(block)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn err(v: Value) -> String {
        let (key, reason) = RegistrantBlock::parse(&v).unwrap_err();
        format!("{key}: {reason}")
    }

    #[test]
    fn the_directory_block_is_read_strictly_naming_file_and_key() {
        let parse = |text: &str| {
            let path = Path::new("brmcp.json");
            RegistrantBlock::from_config(&ServeConfig::parse(text, path).unwrap(), path)
        };
        assert_eq!(parse("{}").unwrap(), None);
        let ok =
            parse(r#"{"directory": {"description": "d", "test": {"tool": "t", "maxAtoms": 5}}}"#)
                .unwrap();
        let block = ok.unwrap();
        assert!(!block.auto_fund.enabled, "auto-funding is off by default");
        assert!(block.register_at_uids.is_empty());
        assert_eq!(
            parse(r#"{"directory": {"description": "d", "test": {"tool": "t", "maxAtoms": 5}, "auto_fund": {"enabled": 1}}}"#)
                .unwrap_err()
                .to_string(),
            "config brmcp.json: directory.auto_fund.enabled: invalid type: integer `1`, \
             expected a boolean"
        );
        assert_eq!(
            parse(r#"{"directory": {"tags": []}}"#)
                .unwrap_err()
                .to_string(),
            "config brmcp.json: directory.description: missing"
        );
    }

    #[test]
    fn reads_the_go_block_with_auto_funding_off_by_default() {
        let dir = "ab".repeat(32);
        let block = RegistrantBlock::parse(&json!({
            "description": "fortunes",
            "tags": ["fun"],
            "test": {"tool": "fortune", "maxAtoms": 10000},
            "register_at_uids": [dir],
        }))
        .unwrap();
        assert_eq!(block.auto_fund, AutoFund::default());
        assert!(!block.auto_fund.enabled);
        assert_eq!(block.register_at_uids, [PeerId::from_bytes([0xab; 32])]);
        assert_eq!(block.test.max_atoms, 10_000);
    }

    #[test]
    fn unknown_keys_wrong_types_and_broken_rules_name_the_key() {
        let test = json!({"tool": "fortune", "maxAtoms": 10});
        assert_eq!(
            err(json!({"description": "d", "test": test, "auto_fnd": {}})),
            "directory.auto_fnd: unknown key"
        );
        assert_eq!(
            err(json!({"description": "d", "test": test, "auto_fund": {"enabled": "yes"}})),
            "directory.auto_fund.enabled: invalid type: string \"yes\", expected a boolean"
        );
        assert_eq!(
            err(json!({"description": "d", "test": test, "auto_fund": {"max": 1}})),
            "directory.auto_fund.max: unknown key"
        );
        assert_eq!(
            err(json!({"description": "d", "test": test, "register_at_uids": ["x"]})),
            "directory.register_at_uids[0]: peer id is 1 characters, not 64"
        );
        assert_eq!(
            err(json!({"description": "d", "test": test,
                "auto_fund": {"allowed_directory_uids": ["x"]}})),
            "directory.auto_fund.allowed_directory_uids[0]: peer id is 1 characters, not 64"
        );
        assert_eq!(err(json!({"test": test})), "directory.description: missing");
        assert!(
            err(json!({"description": "d", "test": {"tool": "t", "maxAtoms": 0}}))
                .starts_with("directory: ")
        );
        assert_eq!(err(json!([])), "directory: expected an object");
    }
}
