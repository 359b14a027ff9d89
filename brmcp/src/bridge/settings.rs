//! The user's spending policy and endpoint switch: `mcpclient.json`, with the Go
//! bridge's field names so a user can switch implementations.
//!
//! Parsing is strict and fail-closed: a file that does not parse, has a key this
//! version does not know, a value of the wrong type, a negative amount, an unknown
//! mode, a token under [`MIN_TOKEN_LEN`] characters, an invalid uid, or a name for a
//! bot that is not allowed is an error naming the file, the key and the reason, never
//! "allow all" nor a silent default. Writes are atomic (temporary file, fsync, rename),
//! so a crash leaves the old file or the new one.
//!
//! The caps default to 0, which means "never pay": a new bridge pays nothing until
//! the user sets `per_call_cap_atoms` and `per_day_cap_atoms`.
//!
//! `directories` (a key the Go bridge does not have, left out of the file while empty)
//! lists the directory bots the user trusts to find providers: `{"uid": ..., "name":
//! ...}` objects, the name optional; the first is the default one.
//!
//! `agents` (see [`agents`]) gives agents their own tokens, kept as hashes, and caps;
//! `allowed_ips` (see [`ips`]) the addresses remote agents may come from. Both are
//! left out of the file while empty. `approver` (`"user"` or `"agent"`, see
//! [`Approver`]), also a key of each agent, says who may approve payments in approval
//! mode; left out, it is the user for the agents of `agents` and the agent itself for
//! the default agent (see [`Settings::approver_of`]).

mod agents;
mod bots;
mod error;
mod ips;

pub use agents::{AgentEntry, Approver, Caller, DEFAULT_AGENT, token_hash};
pub(crate) use agents::{agent_of, same_digest};
use bots::check_name;
pub use bots::{BotChange, NamedBot, RESERVED_BOT_NAMES};
pub use error::SettingsError;
pub use ips::IpRange;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use brmcp_adapters::PeerId;
use serde::{Deserialize, Serialize};

/// The settings file's name inside the data directory.
pub const SETTINGS_FILE: &str = "mcpclient.json";

/// Approval wait used when the file gives none (or a non-positive one): 120 s, as Go.
pub const DEFAULT_APPROVAL_TIMEOUT_SECS: u64 = 120;

/// Payment wait used when the file gives none (or a non-positive one): 180 s, as Go.
pub const DEFAULT_TIP_WAIT_SECS: u64 = 180;

/// Shortest bearer token accepted: 32 characters, as the minted ones (16 random bytes
/// in hex). A shorter one was typed by hand and may be guessed.
pub const MIN_TOKEN_LEN: usize = 32;

/// Longest bot name, in bytes: enough for a label, short enough for a log line.
const MAX_BOT_NAME_LEN: usize = 64;

/// How payments are decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every payment waits for the user's decision (the default).
    #[default]
    Approval,
    /// Payments within the caps are made without asking.
    Autopay,
}

/// `mcpclient.json`: whether the endpoint is on, its token, and the spending policy.
///
/// Amounts are atoms. A cap of 0 means "never pay".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Settings {
    /// Whether the local HTTP endpoint serves.
    #[serde(default)]
    pub enabled: bool,
    /// The bearer token agents present. Minted when the endpoint is enabled without one.
    #[serde(default)]
    pub token: String,
    /// Approval or autopay.
    #[serde(default)]
    pub mode: Mode,
    /// Most one payment may be; 0: never pay.
    #[serde(default)]
    pub per_call_cap_atoms: u64,
    /// Most all payments of the last 24 hours may add up to; 0: never pay.
    #[serde(default)]
    pub per_day_cap_atoms: u64,
    /// Bots (64-hex uids, lowercase) the endpoints serve.
    #[serde(default)]
    pub allowed_bots: Vec<String>,
    /// How long a payment waits for the user's decision.
    #[serde(default)]
    pub approval_timeout_secs: u64,
    /// How long a payment may take to be confirmed.
    #[serde(default)]
    pub tip_wait_secs: u64,
    /// Names the user gave bots: name to uid. Every named bot is allowed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bot_names: BTreeMap<String, String>,
    /// Directory bots the user trusts to find providers; the first is the default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub directories: Vec<DirectoryEntry>,
    /// Agents with their own tokens (as hashes) and caps, beside the default agent of
    /// `token`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<AgentEntry>,
    /// Addresses and CIDR ranges remote agents may come from; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_ips: Vec<String>,
    /// Who approves payments in approval mode: of the default agent, and of each agent
    /// of `agents` that names none itself. Left out of the file: see
    /// [`approver_of`](Self::approver_of).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<Approver>,
}

/// A directory bot of [`Settings::directories`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DirectoryEntry {
    /// The directory's 64-hex uid (lowercase once normalized).
    pub uid: String,
    /// The user's name for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl DirectoryEntry {
    /// The directory `uid`, named `name`.
    pub fn new(uid: PeerId, name: Option<String>) -> Self {
        Self {
            uid: uid.to_string(),
            name,
        }
    }

    /// The uid (checked by [`Settings::normalized`]).
    pub fn peer(&self) -> Option<PeerId> {
        self.uid.parse().ok()
    }

    /// The name, or the uid when it has none.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.uid)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            enabled: false,
            token: String::new(),
            mode: Mode::Approval,
            per_call_cap_atoms: 0,
            per_day_cap_atoms: 0,
            allowed_bots: Vec::new(),
            approval_timeout_secs: DEFAULT_APPROVAL_TIMEOUT_SECS,
            tip_wait_secs: DEFAULT_TIP_WAIT_SECS,
            bot_names: BTreeMap::new(),
            directories: Vec::new(),
            agents: Vec::new(),
            allowed_ips: Vec::new(),
            approver: None,
        }
    }
}

/// Each key's value alone, so a refusal can name the key.
fn check_value(key: &str, value: &serde_json::Value) -> Result<(), String> {
    let checked = match key {
        "enabled" => bool::deserialize(value).map(drop),
        "token" => String::deserialize(value).map(drop),
        "mode" => Mode::deserialize(value).map(drop),
        "per_call_cap_atoms" | "per_day_cap_atoms" | "approval_timeout_secs" | "tip_wait_secs" => {
            match value.as_i64() {
                Some(n) if n < 0 => return Err(format!("{n} is negative")),
                _ => u64::deserialize(value).map(drop),
            }
        }
        "allowed_bots" => Vec::<String>::deserialize(value).map(drop),
        "bot_names" => BTreeMap::<String, String>::deserialize(value).map(drop),
        "directories" => Vec::<DirectoryEntry>::deserialize(value).map(drop),
        "agents" => Vec::<AgentEntry>::deserialize(value).map(drop),
        "allowed_ips" => Vec::<String>::deserialize(value).map(drop),
        "approver" => Approver::deserialize(value).map(drop),
        _ => return Err("unknown key".into()),
    };
    checked.map_err(|e| e.to_string())
}

/// The key an error of [`Settings::normalized`] is about.
fn key_of(e: &SettingsError) -> String {
    match e {
        SettingsError::InvalidBot(_) => "allowed_bots".into(),
        SettingsError::TokenTooShort => "token".into(),
        SettingsError::Directory(_) => "directories".into(),
        SettingsError::Agent(_) => "agents".into(),
        SettingsError::AllowedIp { index, .. } => format!("allowed_ips[{index}]"),
        _ => "bot_names".into(),
    }
}

impl Settings {
    /// Defaults applied, uids checked and lowercased, names checked.
    ///
    /// # Errors
    /// [`SettingsError::InvalidBot`], [`SettingsError::InvalidName`],
    /// [`SettingsError::NameNotAllowed`], [`SettingsError::TokenTooShort`].
    pub fn normalized(mut self) -> Result<Self, SettingsError> {
        if !self.token.is_empty() && self.token.chars().count() < MIN_TOKEN_LEN {
            return Err(SettingsError::TokenTooShort);
        }
        if self.approval_timeout_secs == 0 {
            self.approval_timeout_secs = DEFAULT_APPROVAL_TIMEOUT_SECS;
        }
        if self.tip_wait_secs == 0 {
            self.tip_wait_secs = DEFAULT_TIP_WAIT_SECS;
        }
        let mut bots = Vec::with_capacity(self.allowed_bots.len());
        for bot in &self.allowed_bots {
            let uid = parse_uid(bot)?.to_string();
            if !bots.contains(&uid) {
                bots.push(uid);
            }
        }
        self.allowed_bots = bots;
        let mut names = BTreeMap::new();
        for (name, uid) in &self.bot_names {
            check_name(name)?;
            let uid = parse_uid(uid)?.to_string();
            if !self.allowed_bots.contains(&uid) {
                return Err(SettingsError::NameNotAllowed {
                    name: name.clone(),
                    uid,
                });
            }
            names.insert(name.clone(), uid);
        }
        self.bot_names = names;
        let mut directories: Vec<DirectoryEntry> = Vec::with_capacity(self.directories.len());
        for entry in &self.directories {
            let refused = || SettingsError::Directory(entry.label().to_owned());
            let uid = entry
                .uid
                .parse::<PeerId>()
                .map_err(|_| refused())?
                .to_string();
            if let Some(name) = &entry.name {
                check_name(name).map_err(|_| refused())?;
            }
            let repeated = directories
                .iter()
                .any(|d| d.uid == uid || (d.name.is_some() && d.name == entry.name));
            if repeated {
                return Err(refused());
            }
            directories.push(DirectoryEntry {
                uid,
                name: entry.name.clone(),
            });
        }
        self.directories = directories;
        self.agents = agents::normalized(std::mem::take(&mut self.agents))?;
        for (index, entry) in self.allowed_ips.iter().enumerate() {
            IpRange::parse(entry).map_err(|reason| SettingsError::AllowedIp { index, reason })?;
        }
        Ok(self)
    }

    /// The agent named `name`.
    pub fn agent(&self, name: &str) -> Option<&AgentEntry> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// Who approves `caller`'s payments: its entry's `approver`, else the file's
    /// `approver`, else the user for an agent of `agents` (made for another program,
    /// often unattended) and the agent itself for the default agent. An agent no
    /// longer listed has the user. The default agent holds the file's own `token`: it
    /// is most often `bridge stdio` or a local host the user runs (Claude Code), which
    /// shows the question to the user, so files written before this setting keep
    /// working.
    pub fn approver_of(&self, caller: &Caller) -> Approver {
        match caller {
            Caller::Default => self.approver.unwrap_or(Approver::Agent),
            Caller::Agent(name) => match self.agent(name) {
                Some(agent) => agent.approver.or(self.approver).unwrap_or(Approver::User),
                None => Approver::User,
            },
        }
    }

    /// Whether a remote agent at `ip` may connect: any when `allowed_ips` is empty.
    pub fn allows_ip(&self, ip: std::net::IpAddr) -> bool {
        self.allowed_ips.is_empty()
            || self
                .allowed_ips
                .iter()
                .filter_map(|e| IpRange::parse(e).ok())
                .any(|r| r.contains(ip))
    }

    /// The directory `name_or_uid` designates, or the first one for `None`.
    pub fn directory(&self, name_or_uid: Option<&str>) -> Option<&DirectoryEntry> {
        let Some(wanted) = name_or_uid else {
            return self.directories.first();
        };
        let uid = wanted.parse::<PeerId>().ok().map(|u| u.to_string());
        self.directories
            .iter()
            .find(|d| d.name.as_deref() == Some(wanted) || uid.as_ref() == Some(&d.uid))
    }

    /// Whether `uid` is one of the directories.
    pub fn is_directory(&self, uid: &PeerId) -> bool {
        let uid = uid.to_string();
        self.directories.iter().any(|d| d.uid == uid)
    }

    /// Whether `bot` is allowed.
    pub fn allows(&self, bot: &PeerId) -> bool {
        let uid = bot.to_string();
        self.allowed_bots.contains(&uid)
    }

    /// Reads `path`; a missing file gives the defaults.
    ///
    /// # Errors
    /// [`SettingsError::Io`], [`SettingsError::Syntax`], [`SettingsError::Invalid`]
    /// (which also carries the errors of [`normalized`](Self::normalized)).
    pub fn load(path: &Path) -> Result<Self, SettingsError> {
        let text = match crate::secure_fs::refuse_symlink(path).and_then(|()| fs::read(path)) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(SettingsError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        Self::parse(path, &text)
    }

    /// The settings `text` of the file `path` holds.
    pub(crate) fn parse(path: &Path, text: &[u8]) -> Result<Self, SettingsError> {
        let invalid = |key: &str, reason: String| SettingsError::Invalid {
            path: path.to_owned(),
            key: key.to_owned(),
            reason,
        };
        let value: serde_json::Value =
            serde_json::from_slice(text).map_err(|source| SettingsError::Syntax {
                path: path.to_owned(),
                source,
            })?;
        let Some(object) = value.as_object() else {
            return Err(invalid("top level", "not a JSON object".into()));
        };
        agents::check_approvers(object.get("agents")).map_err(|(key, why)| invalid(&key, why))?;
        for (key, value) in object {
            check_value(key, value).map_err(|reason| invalid(key, reason))?;
        }
        let settings: Self =
            serde_json::from_value(value).map_err(|e| invalid("top level", e.to_string()))?;
        settings
            .normalized()
            .map_err(|e| invalid(&key_of(&e), e.to_string()))
    }

    /// Writes the settings to `path` atomically, readable by the owner only.
    ///
    /// # Errors
    /// [`SettingsError::Io`].
    pub fn save(&self, path: &Path) -> Result<(), SettingsError> {
        let io = |source| SettingsError::Io {
            path: path.to_owned(),
            source,
        };
        let mut text = serde_json::to_vec_pretty(self).map_err(SettingsError::Parse)?;
        text.push(b'\n');
        crate::secure_fs::write_atomic(path, &text).map_err(io)
    }
}

fn parse_uid(text: &str) -> Result<PeerId, SettingsError> {
    text.parse()
        .map_err(|_| SettingsError::InvalidBot(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(c: char) -> String {
        c.to_string().repeat(64)
    }

    #[test]
    fn nonsense_is_refused_naming_file_key_and_reason() {
        let path = Path::new("/data/mcpclient.json");
        let token = "t".repeat(MIN_TOKEN_LEN);
        for (text, key, reason) in [
            (
                r#"{"mode":"auto"}"#.to_owned(),
                "mode",
                "unknown variant `auto`",
            ),
            (
                r#"{"per_call_cap_atoms":-5}"#.into(),
                "per_call_cap_atoms",
                "-5 is negative",
            ),
            (
                r#"{"tip_wait_secs":-1}"#.into(),
                "tip_wait_secs",
                "negative",
            ),
            (r#"{"per_day_cap":5}"#.into(), "per_day_cap", "unknown key"),
            (
                r#"{"enabled":"yes"}"#.into(),
                "enabled",
                "expected a boolean",
            ),
            (
                r#"{"per_day_cap_atoms":"5"}"#.into(),
                "per_day_cap_atoms",
                "expected u64",
            ),
            (
                r#"{"per_day_cap_atoms":1.5}"#.into(),
                "per_day_cap_atoms",
                "expected u64",
            ),
            (r#"{"token":"abcde"}"#.into(), "token", "shorter than 32"),
            (r#"{"allowed_bots":["x"]}"#.into(), "allowed_bots", "64-hex"),
            ("[]".into(), "top level", "not a JSON object"),
        ] {
            let err = Settings::parse(path, text.as_bytes()).unwrap_err();
            let shown = err.to_string();
            assert!(
                shown.starts_with("/data/mcpclient.json: ")
                    && shown.contains(&format!("{key}: "))
                    && shown.contains(reason),
                "{text}: {shown}"
            );
        }
        let err = Settings::parse(path, b"{\"mode\": ").unwrap_err();
        assert!(matches!(err, SettingsError::Syntax { .. }));
        assert!(
            err.to_string()
                .starts_with("/data/mcpclient.json: not valid JSON"),
            "{err}"
        );
        let ok = format!(
            r#"{{"mode":"autopay","per_call_cap_atoms":5,"approval_timeout_secs":0,"token":"{token}"}}"#
        );
        let s = Settings::parse(path, ok.as_bytes()).unwrap();
        assert_eq!(s.mode, Mode::Autopay);
        assert_eq!(s.per_call_cap_atoms, 5);
        assert_eq!(s.approval_timeout_secs, DEFAULT_APPROVAL_TIMEOUT_SECS);
        assert_eq!(s.tip_wait_secs, DEFAULT_TIP_WAIT_SECS);
    }

    #[test]
    fn directories_are_strict() {
        let path = Path::new("/data/mcpclient.json");
        let (a, b) = (uid('a'), uid('b'));
        for (text, reason) in [
            (r#"{"directories":{}}"#.to_owned(), "expected a sequence"),
            (
                format!(r#"{{"directories":[{{"uid":"{a}","url":"x"}}]}}"#),
                "unknown field `url`",
            ),
            (
                r#"{"directories":[{"name":"d"}]}"#.into(),
                "missing field `uid`",
            ),
            (
                format!(r#"{{"directories":[{{"uid":"{a}","name":7}}]}}"#),
                "expected a string",
            ),
            (r#"{"directories":[{"uid":"abc"}]}"#.into(), "64-hex"),
            (
                format!(r#"{{"directories":[{{"uid":"{a}","name":"a b"}}]}}"#),
                "64-hex uid with a unique name",
            ),
            (
                format!(
                    r#"{{"directories":[{{"uid":"{a}"}},{{"uid":"{}"}}]}}"#,
                    a.to_uppercase()
                ),
                "unique",
            ),
            (
                format!(
                    r#"{{"directories":[{{"uid":"{a}","name":"d"}},{{"uid":"{b}","name":"d"}}]}}"#
                ),
                "unique",
            ),
        ] {
            let shown = Settings::parse(path, text.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(
                shown.starts_with("/data/mcpclient.json: directories: ") && shown.contains(reason),
                "{text}: {shown}"
            );
        }
        let text = format!(
            r#"{{"directories":[{{"uid":"{}","name":"main"}},{{"uid":"{b}"}}]}}"#,
            a.to_uppercase()
        );
        let s = Settings::parse(path, text.as_bytes()).unwrap();
        assert_eq!(s.directories[0].uid, a, "lowercased");
        assert_eq!(s.directory(None).map(|d| d.uid.as_str()), Some(a.as_str()));
        assert_eq!(
            s.directory(Some("main")).map(|d| d.uid.as_str()),
            Some(a.as_str())
        );
        assert_eq!(
            s.directory(Some(&b)).map(|d| d.uid.as_str()),
            Some(b.as_str())
        );
        assert!(s.directory(Some("other")).is_none());
        let saved = serde_json::to_string(&Settings::default()).unwrap();
        assert!(
            !saved.contains("directories"),
            "left out while empty: {saved}"
        );
    }

    #[test]
    fn uids_are_checked_and_lowercased() {
        let s = Settings {
            allowed_bots: vec![uid('A'), uid('a')],
            ..Settings::default()
        };
        assert_eq!(s.normalized().unwrap().allowed_bots, vec![uid('a')]);
        let bad = Settings {
            allowed_bots: vec!["abc".into()],
            ..Settings::default()
        };
        assert!(matches!(
            bad.normalized(),
            Err(SettingsError::InvalidBot(b)) if b == "abc"
        ));
    }

    #[test]
    fn a_name_moves_and_a_bot_is_renamed_only_when_asked() {
        let (a, b): (PeerId, PeerId) = (uid('a').parse().unwrap(), uid('b').parse().unwrap());
        let (s, added) = Settings::default()
            .with_named_bot("alice", a, false)
            .unwrap();
        assert!(!added.was_allowed && added.renamed_from.is_none() && added.moved_from.is_none());
        let (_, same) = s.clone().with_named_bot("alice", a, false).unwrap();
        assert!(same.was_named);
        assert!(matches!(
            s.clone().with_named_bot("alice", b, false),
            Err(SettingsError::NameHeld { uid, .. }) if uid == a
        ));
        assert!(matches!(
            s.clone().with_named_bot("zed", a, false),
            Err(SettingsError::BotNamed { name, .. }) if name == "alice"
        ));
        let (renamed, change) = s.clone().with_named_bot("zed", a, true).unwrap();
        assert_eq!(change.renamed_from.as_deref(), Some("alice"));
        assert_eq!(renamed.resolve("zed"), Some(a));
        assert_eq!(renamed.resolve("alice"), None);
        let (moved, change) = s.clone().with_named_bot("alice", b, true).unwrap();
        assert_eq!(change.moved_from, Some(a));
        assert!(!change.was_allowed);
        assert_eq!(moved.resolve("alice"), Some(b));
        assert!(moved.allows(&a), "the name's old bot stays allowed");
        assert!(matches!(
            s.with_named_bot("directory", b, true),
            Err(SettingsError::ReservedName(_))
        ));
    }

    #[test]
    fn a_bot_is_labelled_by_its_name_and_uid_or_its_uid() {
        let (named, unnamed) = (PeerId::from_bytes([1; 32]), PeerId::from_bytes([2; 32]));
        let settings = Settings::default().with_bot("oracle", named).unwrap();
        assert_eq!(settings.bot_label(&named), format!("\"oracle\" ({named})"));
        assert_eq!(settings.bot_label(&unnamed), unnamed.to_string());
    }

    #[test]
    fn names_must_be_allowed_and_well_formed() {
        let s = Settings {
            bot_names: BTreeMap::from([("x".into(), uid('b'))]),
            ..Settings::default()
        };
        assert!(matches!(
            s.normalized(),
            Err(SettingsError::NameNotAllowed { .. })
        ));
        let id: PeerId = uid('c').parse().unwrap();
        for bad in ["", "a b", &"n".repeat(65), &uid('d')] {
            assert!(matches!(
                Settings::default().with_bot(bad, id),
                Err(SettingsError::InvalidName(_))
            ));
        }
        let s = Settings::default().with_bot("fortune", id).unwrap();
        assert_eq!(s.resolve("fortune"), Some(id));
        assert_eq!(s.resolve(&uid('c')), Some(id));
        let other: PeerId = uid('e').parse().unwrap();
        assert!(matches!(
            s.clone().with_bot("fortune", other),
            Err(SettingsError::NameTaken(_))
        ));
        let renamed = s.clone().with_bot("oracle", id).unwrap();
        assert_eq!(renamed.bot_names.len(), 1);
        assert_eq!(renamed.bots()[0].name.as_deref(), Some("oracle"));
        let removed = s.without_bot("fortune").unwrap();
        assert!(removed.allowed_bots.is_empty() && removed.bot_names.is_empty());
    }
}
