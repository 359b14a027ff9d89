//! The operator's settings file, `brmcp.json`, with the Go harness's field names:
//!
//! ```json
//! {"allowed_uids": ["<64 hex>", "..."], "calls_per_minute": 30, "upstreams": []}
//! ```
//!
//! `upstreams` (this implementation's own) lists the MCP servers `brmcp serve` sells;
//! see [`UpstreamConfig`] for its strict format.
//!
//! `tell_refused` (ours, default `true`): a caller not on `allowed_uids` is answered a
//! JSON-RPC `NOT_ALLOWED` error at once (at most once per 10 s per caller); `false`
//! keeps the bot silent to it, as the Go harness is.
//!
//! `directory` (the Go host's block, read by the directory's `RegistrantBlock`) makes `brmcp serve` a
//! registrant with directories; absent, it is none.
//!
//! Read fail-closed: a file that does not parse, names a uid that is not 64 hex
//! characters, or holds a top-level key other than [`CONFIG_KEYS`] (a misspelt
//! `allowed_uid` would otherwise leave the allowlist empty without a word) is an error
//! naming the file and the key, never an empty (or open) allowlist. A live reload of
//! such a file keeps the running settings. `calls_per_minute` absent means the
//! default (30); 0 or below is refused (the Go harness silently took 30 for it, so a
//! typo meant to stop callers let them in at full rate). Uids match case-insensitively (the Go harness compared
//! them as strings, so an upper-case entry never matched).

use std::path::{Path, PathBuf};

use brmcp_adapters::PeerId;

use super::rate_limit::DEFAULT_CALLS_PER_MINUTE;
use super::upstream::{UpstreamConfig, parse_upstreams};

/// The settings file's name in the data directory.
pub const CONFIG_FILE: &str = "brmcp.json";

/// What [`ServeConfig::load_or_create`] writes when there is no file: nobody allowed.
pub const CONFIG_TEMPLATE: &str = "{\"allowed_uids\": [], \"calls_per_minute\": 30}\n";

/// The top-level keys of `brmcp.json`: the Go harness's three, then ours. Any other
/// key is refused ([`ConfigError::UnknownKey`]).
pub const CONFIG_KEYS: [&str; 5] = [
    "allowed_uids",
    "calls_per_minute",
    "directory",
    "tell_refused",
    "upstreams",
];

/// The serving harness's settings.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServeConfig {
    /// Callers allowed to use the tools (and whose tips are credited).
    pub allowed_uids: Vec<PeerId>,
    /// Calls per minute per caller.
    pub calls_per_minute: u32,
    /// The upstream MCP servers whose tools are sold (none: the example tools).
    pub upstreams: Vec<UpstreamConfig>,
    /// The registrant's block as written (none: `brmcp serve` registers nowhere); the
    /// directory reads it (`RegistrantBlock::from_config`), failing with
    /// [`ConfigError::BadDirectory`].
    pub directory: Option<serde_json::Value>,
    /// Whether a caller not on `allowed_uids` is told so at once (a JSON-RPC
    /// `NOT_ALLOWED` error, rate limited per caller) instead of hearing nothing;
    /// `"tell_refused": false` keeps the bot silent to it. Default: `true`. Read at
    /// start.
    pub tell_refused: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            allowed_uids: Vec::new(),
            calls_per_minute: DEFAULT_CALLS_PER_MINUTE,
            upstreams: Vec::new(),
            directory: None,
            tell_refused: true,
        }
    }
}

/// Why the settings could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file cannot be read or created.
    #[error("config {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not the settings JSON.
    #[error("config {}: {source}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What serde_json said.
        #[source]
        source: serde_json::Error,
    },
    /// An entry of `allowed_uids` is not a uid.
    #[error("config {}: allowed_uids[{index}] {value:?}: {source}", .path.display())]
    BadUid {
        /// The file.
        path: PathBuf,
        /// The entry's index.
        index: usize,
        /// The entry.
        value: String,
        /// Why it is not a uid.
        #[source]
        source: brmcp_adapters::PeerIdError,
    },
    /// An entry of `upstreams` is wrong.
    #[error("config {}: {key}: {reason}", .path.display())]
    BadUpstream {
        /// The file.
        path: PathBuf,
        /// The entry's key, as `upstreams[0].tools.echo`.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The `directory` block is wrong.
    #[error("config {}: {key}: {reason}", .path.display())]
    BadDirectory {
        /// The file.
        path: PathBuf,
        /// The key, as `directory.auto_fund.enabled`.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A top-level key is none of [`CONFIG_KEYS`].
    #[error(
        "config {}: {key}: unknown key (known: {})",
        .path.display(),
        CONFIG_KEYS.join(", ")
    )]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The key, as written.
        key: String,
    },
    /// A top-level key holds a value of the wrong type.
    #[error("config {}: {key}: {reason}", .path.display())]
    BadKey {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// What serde_json said about its value.
        reason: String,
    },
    /// `calls_per_minute` is 0 or below, or above what a `u32` holds.
    #[error(
        "config {}: calls_per_minute {value} is out of range (1 to {})",
        .path.display(),
        u32::MAX
    )]
    BadRate {
        /// The file.
        path: PathBuf,
        /// The value.
        value: i64,
    },
}

/// The file as written, before uids are checked.
struct Raw {
    allowed_uids: Option<Vec<String>>,
    calls_per_minute: Option<i64>,
    upstreams: Option<serde_json::Value>,
    directory: Option<serde_json::Value>,
    tell_refused: Option<bool>,
}

impl Raw {
    /// The keys of a JSON object, each decoded on its own so that a wrong type names
    /// its key; a key that is none of [`CONFIG_KEYS`] is refused.
    fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let mut object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text)
            .map_err(|source| ConfigError::Parse {
                path: path.to_owned(),
                source,
            })?;
        if let Some(key) = object.keys().find(|k| !CONFIG_KEYS.contains(&k.as_str())) {
            return Err(ConfigError::UnknownKey {
                path: path.to_owned(),
                key: key.clone(),
            });
        }
        let mut take = |key: &'static str| object.remove(key).filter(|v| !v.is_null());
        fn field<T: serde::de::DeserializeOwned>(
            path: &Path,
            key: &'static str,
            value: Option<serde_json::Value>,
        ) -> Result<Option<T>, ConfigError> {
            value
                .map(|v| {
                    serde_json::from_value(v).map_err(|e| ConfigError::BadKey {
                        path: path.to_owned(),
                        key,
                        reason: e.to_string(),
                    })
                })
                .transpose()
        }
        let allowed_uids = take("allowed_uids");
        let calls_per_minute = take("calls_per_minute");
        let tell_refused = take("tell_refused");
        Ok(Self {
            allowed_uids: field(path, "allowed_uids", allowed_uids)?,
            calls_per_minute: field(path, "calls_per_minute", calls_per_minute)?,
            tell_refused: field(path, "tell_refused", tell_refused)?,
            upstreams: take("upstreams"),
            directory: take("directory"),
        })
    }
}

impl ServeConfig {
    /// Parses the settings JSON; `path` only names the source in errors.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Parse`], [`ConfigError::UnknownKey`], [`ConfigError::BadKey`],
    /// [`ConfigError::BadUid`],
    /// [`ConfigError::BadRate`], [`ConfigError::BadUpstream`],
    /// [`ConfigError::BadDirectory`].
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let raw = Raw::parse(text, path)?;
        let allowed_uids = raw
            .allowed_uids
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(index, value)| {
                value.parse().map_err(|source| ConfigError::BadUid {
                    path: path.to_owned(),
                    index,
                    value,
                    source,
                })
            })
            .collect::<Result<_, _>>()?;
        let calls_per_minute = match raw.calls_per_minute {
            None => DEFAULT_CALLS_PER_MINUTE,
            Some(n) => u32::try_from(n)
                .ok()
                .filter(|&n| n > 0)
                .ok_or(ConfigError::BadRate {
                    path: path.to_owned(),
                    value: n,
                })?,
        };
        let upstreams = match &raw.upstreams {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(value) => {
                parse_upstreams(value).map_err(|(key, reason)| ConfigError::BadUpstream {
                    path: path.to_owned(),
                    key,
                    reason,
                })?
            }
        };
        let directory = match &raw.directory {
            None | Some(serde_json::Value::Null) => None,
            Some(value) => Some(value.clone()),
        };
        // Without the directory feature, a block is refused rather than ignored: the
        // operator asked for a registration this build cannot make.
        #[cfg(not(feature = "directory"))]
        if let Some(value) = &raw.directory
            && !value.is_null()
        {
            return Err(ConfigError::BadDirectory {
                path: path.to_owned(),
                key: "directory".into(),
                reason: "this brmcp is built without the directory feature".into(),
            });
        }
        Ok(Self {
            allowed_uids,
            calls_per_minute,
            upstreams,
            directory,
            tell_refused: raw.tell_refused.unwrap_or(true),
        })
    }

    /// Reads the settings file at `path`; a missing file is an error, and so is a
    /// symbolic link, which the reload follower refuses too.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Io`] or any error of [`parse`](Self::parse).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = crate::secure_fs::refuse_symlink(path)
            .and_then(|()| std::fs::read_to_string(path))
            .map_err(|source| ConfigError::Io {
                path: path.to_owned(),
                source,
            })?;
        Self::parse(&text, path)
    }

    /// Reads the settings file at `path`, first writing [`CONFIG_TEMPLATE`] (owner-only)
    /// if there is none; `true` with the settings when it was just created.
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load), or [`ConfigError::Io`] when the template cannot be
    /// written.
    pub fn load_or_create(path: &Path) -> Result<(Self, bool), ConfigError> {
        let io = |source| ConfigError::Io {
            path: path.to_owned(),
            source,
        };
        let created = crate::secure_fs::write_new(path, CONFIG_TEMPLATE.as_bytes()).map_err(io)?;
        Ok((Self::load(path)?, created))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ServeConfig, ConfigError> {
        ServeConfig::parse(text, Path::new("brmcp.json"))
    }

    #[test]
    fn tell_refused_defaults_on_and_must_be_a_boolean() {
        assert!(parse("{}").unwrap().tell_refused);
        assert!(!parse(r#"{"tell_refused": false}"#).unwrap().tell_refused);
        let err = parse(r#"{"tell_refused": "no"}"#).unwrap_err().to_string();
        assert!(
            err.starts_with("config brmcp.json: tell_refused: "),
            "{err}"
        );
    }

    #[test]
    fn reads_go_field_names_in_either_case_of_hex() {
        let upper = "AB".repeat(32);
        let config = parse(&format!(
            r#"{{"allowed_uids": ["{upper}"], "calls_per_minute": 12}}"#
        ))
        .unwrap();
        assert_eq!(config.allowed_uids, [PeerId::from_bytes([0xab; 32])]);
        assert_eq!(config.calls_per_minute, 12);
    }

    #[test]
    fn missing_rate_is_the_default_and_zero_or_negative_is_refused() {
        for text in [
            r#"{"allowed_uids": []}"#,
            r#"{"allowed_uids": null, "calls_per_minute": null}"#,
        ] {
            assert_eq!(parse(text).unwrap(), ServeConfig::default(), "{text}");
        }
        for (value, text) in [
            (0, r#"{"calls_per_minute": 0}"#),
            (-5, r#"{"calls_per_minute": -5}"#),
        ] {
            let err = parse(text).unwrap_err();
            assert!(
                matches!(err, ConfigError::BadRate { value: v, .. } if v == value),
                "{text}"
            );
            assert_eq!(
                err.to_string(),
                format!(
                    "config brmcp.json: calls_per_minute {value} is out of range (1 to 4294967295)"
                )
            );
        }
    }

    #[test]
    fn broken_files_are_errors_not_open_doors() {
        let err = parse(r#"{"allowed_uids": ["abc"]}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "config brmcp.json: allowed_uids[0] \"abc\": peer id is 3 characters, not 64"
        );
        assert!(matches!(parse("{"), Err(ConfigError::Parse { .. })));
        assert!(matches!(parse("[]"), Err(ConfigError::Parse { .. })));
        assert_eq!(
            parse(r#"{"allowed_uids": "x"}"#).unwrap_err().to_string(),
            "config brmcp.json: allowed_uids: invalid type: string \"x\", expected a sequence"
        );
        assert_eq!(
            parse(r#"{"calls_per_minute": 1.5}"#)
                .unwrap_err()
                .to_string(),
            "config brmcp.json: calls_per_minute: invalid type: floating point `1.5`, \
             expected i64"
        );
        assert!(matches!(
            parse(r#"{"calls_per_minute": 99999999999}"#),
            Err(ConfigError::BadRate { .. })
        ));
        assert_eq!(
            parse(r#"{"upstreams": [{"name": "a", "command": "x", "tools": {"t": "9"}}]}"#)
                .unwrap_err()
                .to_string(),
            "config brmcp.json: upstreams[0].tools.t: expected a price in atoms \
             (0 to 9223372036854775), \"off\" or {\"priced_by\": ...}"
        );
        assert_eq!(
            parse(r#"{"upstreams": [{"name": "a", "command": "x", "tools": {"t": {"priced_by": "p", "max_price_atoms": 5, "min_price_atoms": 6}}}]}"#)
                .unwrap_err()
                .to_string(),
            "config brmcp.json: upstreams[0].tools.t.min_price_atoms: above max_price_atoms"
        );
    }

    #[test]
    fn unknown_top_level_keys_are_refused_naming_file_key_and_known_keys() {
        let err = parse(r#"{"allowed_uid": [], "calls_per_minute": 30}"#).unwrap_err();
        assert!(
            matches!(&err, ConfigError::UnknownKey { key, .. } if key == "allowed_uid"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "config brmcp.json: allowed_uid: unknown key \
             (known: allowed_uids, calls_per_minute, directory, tell_refused, upstreams)"
        );
        // Refused whatever its value, null included, and beside every known key.
        let uid = "ab".repeat(32);
        // A build without the directory feature reads only a null block.
        let directory = if cfg!(feature = "directory") {
            r#"{"description": "d", "test": {"tool": "t", "maxAtoms": 5}}"#
        } else {
            "null"
        };
        let all = format!(
            r#""allowed_uids": ["{uid}"], "calls_per_minute": 5, "upstreams": [],
               "directory": {directory}"#
        );
        for extra in [r#""x": null"#, r#""x": 1"#, r#""x": {}"#] {
            let err = parse(&format!("{{{all}, {extra}}}")).unwrap_err();
            assert!(
                matches!(&err, ConfigError::UnknownKey { key, .. } if key == "x"),
                "{extra}: {err:?}"
            );
        }
        // Every known key, the Go harness's and ours, still reads.
        let config = parse(&format!("{{{all}}}")).unwrap();
        assert_eq!(config.allowed_uids, [PeerId::from_bytes([0xab; 32])]);
        assert_eq!(config.calls_per_minute, 5);
        assert!(config.upstreams.is_empty());
        #[cfg(feature = "directory")]
        assert!(config.directory.is_some());
    }

    /// A build without the directory feature refuses the block rather than serving
    /// without the registration the operator asked for.
    #[cfg(not(feature = "directory"))]
    #[test]
    fn a_directory_block_is_refused_without_the_directory_feature() {
        assert!(parse(r#"{"directory": null}"#).is_ok());
        let err = parse(r#"{"directory": {"description": "d"}}"#).unwrap_err();
        assert!(matches!(&err, ConfigError::BadDirectory { key, .. } if key == "directory"));
        assert_eq!(
            err.to_string(),
            "config brmcp.json: directory: this brmcp is built without the directory feature"
        );
    }

    #[cfg(feature = "directory")]
    #[test]
    fn load_or_create_writes_the_template_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CONFIG_FILE);
        let (config, created) = ServeConfig::load_or_create(&path).unwrap();
        assert!(created);
        assert_eq!(config, ServeConfig::default());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), CONFIG_TEMPLATE);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, r#"{"calls_per_minute": 7}"#).unwrap();
        let (config, created) = ServeConfig::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(config.calls_per_minute, 7);
        assert!(matches!(
            ServeConfig::load(&dir.path().join("missing.json")),
            Err(ConfigError::Io { .. })
        ));
    }

    /// A symlinked file is refused at start, as the reload follower refuses it, rather
    /// than loaded once and then refused on every poll; `load_or_create` neither
    /// follows it nor replaces it.
    #[cfg(unix)]
    #[test]
    fn a_symlinked_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        std::fs::write(&real, r#"{"calls_per_minute": 7}"#).unwrap();
        let path = dir.path().join(CONFIG_FILE);
        std::os::unix::fs::symlink(&real, &path).unwrap();
        for err in [
            ServeConfig::load(&path).unwrap_err(),
            ServeConfig::load_or_create(&path).unwrap_err(),
        ] {
            let text = err.to_string();
            assert!(matches!(err, ConfigError::Io { .. }), "{text}");
            let file = path.display().to_string();
            assert!(text.starts_with(&format!("config {file}: ")), "{text}");
            assert!(text.contains("is a symbolic link"), "{text}");
        }
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(
            std::fs::read_to_string(&real).unwrap(),
            r#"{"calls_per_minute": 7}"#
        );
    }
}
