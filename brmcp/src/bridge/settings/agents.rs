//! Agents of `mcpclient.json`'s `agents`: each its own bearer token, kept only as a
//! SHA-256 hash, its own caps on top of the global ones, optionally its own bots, and
//! who approves its payments ([`Approver`]).
//!
//! The file's `token` stays the default agent's (named [`DEFAULT_AGENT`]): it is kept
//! as written, in clear, because `bridge stdio`, `token show` and the Go bridge read it.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{SettingsError, check_name, parse_uid};

/// The name the spend log and the approvals give the agent of the file's `token`
/// (and of a loopback bind that waives the token).
pub const DEFAULT_AGENT: &str = "default";

/// Most agents one file may list: each request compares its token with every hash,
/// so the list stays short.
const MAX_AGENTS: usize = 64;

/// One agent of [`Settings::agents`](super::Settings::agents).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AgentEntry {
    /// The agent's name, as the spend log and the approvals show it.
    pub name: String,
    /// The SHA-256 of its bearer token, 64 lowercase hex digits. The token itself is
    /// shown once, when made, and never stored.
    pub token_sha256: String,
    /// Most one payment of this agent may be; 0: never pay.
    #[serde(default)]
    pub per_call_cap_atoms: u64,
    /// Most this agent's payments of the last 24 hours may add up to; 0: never pay.
    #[serde(default)]
    pub per_day_cap_atoms: u64,
    /// The bots (uids) this agent may use; empty: every allowed bot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bots: Vec<String>,
    /// Who approves this agent's payments in approval mode; left out: the file's
    /// `approver`, else [`Approver::User`] (see
    /// [`Settings::approver_of`](super::Settings::approver_of)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<Approver>,
}

/// Who may approve an agent's payments in approval mode (`"user"` or `"agent"`, the
/// settings' `approver` keys).
///
/// The user's channels, the page (`/ui`) and `brmcp bridge approvals` (`/payments`),
/// take the approval secret, which no agent's token passes; they decide in both modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Approver {
    /// Only the user. The agent's client is never asked (neither by elicitation nor
    /// by `input_required`) and no answer of it pays: the call waits for the user's
    /// decision, as a client without elicitation does. For an agent that runs
    /// unattended, or anywhere its token may be read by a process that is not the
    /// user's host.
    User,
    /// The agent's client too: where it declared form elicitation it is asked (by
    /// elicitation before protocol 2026-07-28, by `input_required` from it on), and
    /// its `accept` pays, whichever of it and the user answers first. Trusts whatever
    /// holds the agent's token to be the user: for a host that shows the question to
    /// a person (Claude Code, an IDE).
    Agent,
}

/// Who presented a request's credential.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    /// The file's `token` (or a waived token on a loopback bind).
    Default,
    /// The agent of this name.
    Agent(String),
}

impl Caller {
    /// The name shown and recorded for it.
    pub fn name(&self) -> &str {
        match self {
            Self::Default => DEFAULT_AGENT,
            Self::Agent(name) => name,
        }
    }
}

/// The hex SHA-256 of `token`, as [`AgentEntry::token_sha256`] holds it.
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `a` and `b` are equal, in time independent of where they differ.
pub(crate) fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The 32 bytes of a 64-hex digest.
fn digest_of(hex: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl AgentEntry {
    /// The agent `name` of `token`, with its caps and bots, whose approver is the
    /// file's default (see [`with_approver`](Self::with_approver)).
    pub fn new(name: &str, token: &str, per_call: u64, per_day: u64, bots: Vec<String>) -> Self {
        Self {
            name: name.to_owned(),
            token_sha256: token_hash(token),
            per_call_cap_atoms: per_call,
            per_day_cap_atoms: per_day,
            bots,
            approver: None,
        }
    }

    /// This agent, its payments approved by `approver`.
    #[must_use]
    pub fn with_approver(mut self, approver: Approver) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Whether this agent may use `bot` (lowercase uid).
    pub fn allows_bot(&self, bot: &str) -> bool {
        self.bots.is_empty() || self.bots.iter().any(|b| b == bot)
    }
}

/// The agent whose hash is `presented`'s, comparing with every hash in constant time
/// (no early exit, so the time says nothing about which or whether one matched).
pub(crate) fn agent_of<'a>(agents: &'a [AgentEntry], presented: &[u8; 32]) -> Option<&'a str> {
    let mut found = None;
    for agent in agents {
        let stored = digest_of(&agent.token_sha256).unwrap_or([0; 32]);
        if same_digest(&stored, presented) && found.is_none() {
            found = Some(agent.name.as_str());
        }
    }
    found
}

/// The `approver` of each entry of the file's `agents` (its JSON, if any) read alone,
/// so a refusal names its key, `agents[INDEX].approver`; the rest of an entry is read
/// with the entry.
pub(super) fn check_approvers(agents: Option<&serde_json::Value>) -> Result<(), (String, String)> {
    let Some(entries) = agents.and_then(serde_json::Value::as_array) else {
        return Ok(());
    };
    for (index, entry) in entries.iter().enumerate() {
        if let Some(value) = entry.get("approver") {
            Approver::deserialize(value)
                .map_err(|e| (format!("agents[{index}].approver"), e.to_string()))?;
        }
    }
    Ok(())
}

/// The agents checked: names well-formed, unique and not [`DEFAULT_AGENT`], hashes 64
/// hex (lowercased) and unique, bots uids (lowercased).
pub(super) fn normalized(agents: Vec<AgentEntry>) -> Result<Vec<AgentEntry>, SettingsError> {
    if agents.len() > MAX_AGENTS {
        return Err(SettingsError::Agent(format!(
            "more than {MAX_AGENTS} agents"
        )));
    }
    let mut out: Vec<AgentEntry> = Vec::with_capacity(agents.len());
    for mut agent in agents {
        let refused = |why: &str| SettingsError::Agent(format!("{:?}: {why}", agent.name));
        if check_name(&agent.name).is_err() {
            return Err(refused("not 1 to 64 letters, digits, '.', '_' or '-'"));
        }
        if agent.name == DEFAULT_AGENT {
            return Err(refused("the name of the file's `token`"));
        }
        agent.token_sha256 = agent.token_sha256.to_ascii_lowercase();
        if digest_of(&agent.token_sha256).is_none() {
            return Err(refused("token_sha256 is not 64 hex digits"));
        }
        if out.iter().any(|a| a.name == agent.name) {
            return Err(refused("named twice"));
        }
        if out.iter().any(|a| a.token_sha256 == agent.token_sha256) {
            return Err(refused("same token as another agent"));
        }
        let mut bots = Vec::with_capacity(agent.bots.len());
        for bot in &agent.bots {
            let uid = parse_uid(bot)
                .map_err(|_| refused(&format!("bot {bot:?} is not a 64-hex uid")))?
                .to_string();
            if !bots.contains(&uid) {
                bots.push(uid);
            }
        }
        agent.bots = bots;
        out.push(agent);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_finds_its_agent_only() {
        let agents = vec![
            AgentEntry::new("a", "token-a", 1, 1, Vec::new()),
            AgentEntry::new("b", "token-b", 1, 1, Vec::new()),
        ];
        let key = |t: &str| -> [u8; 32] { Sha256::digest(t.as_bytes()).into() };
        assert_eq!(agent_of(&agents, &key("token-b")), Some("b"));
        assert_eq!(agent_of(&agents, &key("token-a")), Some("a"));
        assert_eq!(agent_of(&agents, &key("token-c")), None);
        assert_eq!(agents[0].token_sha256.len(), 64);
        assert!(!agents[0].token_sha256.contains("token"));
    }

    #[test]
    fn bad_agents_are_refused() {
        let hash = token_hash("x");
        let agent = |name: &str, hash: &str| AgentEntry {
            name: name.into(),
            token_sha256: hash.into(),
            per_call_cap_atoms: 0,
            per_day_cap_atoms: 0,
            bots: Vec::new(),
            approver: None,
        };
        for (agents, why) in [
            (vec![agent("a b", &hash)], "letters"),
            (vec![agent(DEFAULT_AGENT, &hash)], "`token`"),
            (vec![agent("a", "abc")], "64 hex"),
            (
                vec![agent("a", &hash), agent("a", &token_hash("y"))],
                "twice",
            ),
            (vec![agent("a", &hash), agent("b", &hash)], "same token"),
        ] {
            let err = normalized(agents).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
        }
        let upper = normalized(vec![agent("a", &hash.to_uppercase())]).unwrap();
        assert_eq!(upper[0].token_sha256, hash);
    }

    #[test]
    fn approvers_are_read_strictly_and_default_by_agent() {
        use crate::bridge::Settings;
        use std::path::Path;
        let path = Path::new("/data/mcpclient.json");
        let hash = token_hash("x");
        let entry = |extra: &str| format!(r#"{{"name":"ci","token_sha256":"{hash}"{extra}}}"#);
        for (text, key, reason) in [
            (
                r#"{"approver":"boss"}"#.to_owned(),
                "approver",
                "unknown variant `boss`, expected `user` or `agent`",
            ),
            (
                r#"{"approver":"User"}"#.into(),
                "approver",
                "unknown variant `User`",
            ),
            (r#"{"approver":true}"#.into(), "approver", "expected"),
            (
                format!(
                    r#"{{"agents":[{},{}]}}"#,
                    entry(""),
                    entry(r#","approver":"anyone""#)
                ),
                "agents[1].approver",
                "unknown variant `anyone`, expected `user` or `agent`",
            ),
            (
                format!(r#"{{"agents":[{}]}}"#, entry(r#","approver":null"#)),
                "agents[0].approver",
                "expected",
            ),
            (
                format!(r#"{{"agents":[{}]}}"#, entry(r#","approves":"agent""#)),
                "agents",
                "unknown field `approves`",
            ),
        ] {
            let shown = Settings::parse(path, text.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(
                shown.starts_with(&format!("/data/mcpclient.json: {key}: "))
                    && shown.contains(reason),
                "{text}: {shown}"
            );
        }

        let (default, ci, own) = (
            Caller::Default,
            Caller::Agent("ci".into()),
            Caller::Agent("own".into()),
        );
        let gone = Caller::Agent("gone".into());
        let agents = |global: &str| {
            let hash2 = token_hash("y");
            format!(
                r#"{{{global}"agents":[{},{{"name":"own","token_sha256":"{hash2}","approver":"agent"}}]}}"#,
                entry("")
            )
        };
        // Left out: the default agent approves itself (as before), an agent of
        // `agents` does not.
        let s = Settings::parse(path, agents("").as_bytes()).unwrap();
        assert_eq!(s.approver, None);
        assert_eq!(s.approver_of(&default), Approver::Agent);
        assert_eq!(s.approver_of(&ci), Approver::User);
        assert_eq!(s.approver_of(&own), Approver::Agent);
        assert_eq!(s.approver_of(&gone), Approver::User);
        // The file's `approver` is every agent's that names none.
        let s = Settings::parse(path, agents(r#""approver":"user","#).as_bytes()).unwrap();
        assert_eq!(s.approver_of(&default), Approver::User);
        assert_eq!(s.approver_of(&ci), Approver::User);
        assert_eq!(s.approver_of(&own), Approver::Agent);
        let s = Settings::parse(path, agents(r#""approver":"agent","#).as_bytes()).unwrap();
        assert_eq!(s.approver_of(&ci), Approver::Agent);
        assert_eq!(
            s.approver_of(&gone),
            Approver::User,
            "a removed agent never"
        );
        // Written back as read; left out while unset.
        let saved = serde_json::to_value(&s).unwrap();
        assert_eq!(saved["approver"], "agent");
        assert_eq!(saved["agents"][1]["approver"], "agent");
        assert!(saved["agents"][0].get("approver").is_none(), "{saved}");
        let empty = serde_json::to_value(Settings::default()).unwrap();
        assert!(empty.get("approver").is_none(), "{empty}");
    }
}
