//! The journal's rows: a call to record ([`NewCall`]), a call as kept ([`Row`]) with
//! its outcome ([`Outcome`], bounded by [`MAX_KEPT_OUTCOME_BYTES`]), and the reading
//! of a row that refuses what the journal never writes.

use super::MAX_KEPT_OUTCOME_BYTES;
use crate::bridge::calls::state::State;

/// A call's outcome as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The bot's `CallToolResult`, as JSON.
    Result(String),
    /// The JSON-RPC error the agent got, as JSON.
    Error(String),
    /// An outcome larger than [`MAX_KEPT_OUTCOME_BYTES`]: its size only.
    TooLarge(u64),
}

impl Outcome {
    pub(super) fn columns(&self) -> (&'static str, String) {
        match self {
            Self::Result(json) => ("result", json.clone()),
            Self::Error(json) => ("error", json.clone()),
            Self::TooLarge(n) => ("too_large", n.to_string()),
        }
    }

    /// The outcome as kept: over the bound, its size.
    pub(super) fn bounded(self) -> Self {
        match &self {
            Self::Result(json) | Self::Error(json) if json.len() > MAX_KEPT_OUTCOME_BYTES => {
                Self::TooLarge(json.len() as u64)
            }
            _ => self,
        }
    }
}

/// A call to record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewCall<'a> {
    /// The agent's name.
    pub agent: &'a str,
    /// The agent's MCP session, if it has one.
    pub session: Option<&'a str>,
    /// The agent's request id, as JSON.
    pub request: &'a str,
    /// The key sent to the bot.
    pub key: &'a str,
    /// Whether the key is derived from the agent's own.
    pub own_key: bool,
    /// The bot (lowercase uid).
    pub bot: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The digest of the arguments.
    pub args: [u8; 32],
    /// The `tools/call` params as sent (name and arguments), as JSON.
    pub params: &'a str,
    /// The process's run.
    pub run: &'a str,
}

/// One journaled call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub id: i64,
    pub agent: String,
    pub key: String,
    pub own_key: bool,
    pub bot: String,
    pub tool: String,
    pub args: [u8; 32],
    pub params: String,
    pub state: State,
    pub price_atoms: u64,
    /// Atoms of a payment whose end was not recorded: it may have been made.
    pub paying_atoms: u64,
    pub paid_atoms: u64,
    pub spend_id: Option<i64>,
    pub outcome: Option<Outcome>,
    pub run: String,
    pub claimed: bool,
    pub created: i64,
    pub updated: i64,
}

impl Row {
    /// Paid, or a payment may have been made: never paid again automatically.
    pub(crate) const fn paid(&self) -> bool {
        self.paid_atoms > 0 || self.paying_atoms > 0
    }
}

pub(super) const COLUMNS: &str = "id, agent, call_key, own_key, bot, tool, args, params, state, \
    price_atoms, paying_atoms, paid_atoms, spend_id, outcome_kind, outcome, run, claimed, \
    updated, created";

pub(super) fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) fn u64_of(n: i64) -> u64 {
    u64::try_from(n).unwrap_or_default()
}

/// A row as read, or what is wrong with it.
pub(super) fn read_row(
    r: &rusqlite::Row<'_>,
) -> rusqlite::Result<Result<Row, (i64, &'static str)>> {
    let id: i64 = r.get(0)?;
    let args: Vec<u8> = r.get(6)?;
    let Ok(args) = <[u8; 32]>::try_from(args) else {
        return Ok(Err((id, "arguments digest is not 32 bytes")));
    };
    let state: String = r.get(8)?;
    let Some(state) = State::parse(&state) else {
        return Ok(Err((id, "unknown state")));
    };
    let kind: Option<String> = r.get(13)?;
    let text: Option<String> = r.get(14)?;
    let outcome = match (kind.as_deref(), text) {
        (None, _) => None,
        (Some("result"), Some(t)) => Some(Outcome::Result(t)),
        (Some("error"), Some(t)) => Some(Outcome::Error(t)),
        (Some("too_large"), Some(t)) => match t.parse() {
            Ok(n) => Some(Outcome::TooLarge(n)),
            Err(_) => return Ok(Err((id, "outcome size is not a number"))),
        },
        _ => return Ok(Err((id, "outcome without its text"))),
    };
    Ok(Ok(Row {
        id,
        agent: r.get(1)?,
        key: r.get(2)?,
        own_key: r.get(3)?,
        bot: r.get(4)?,
        tool: r.get(5)?,
        args,
        params: r.get(7)?,
        state,
        price_atoms: u64_of(r.get(9)?),
        paying_atoms: u64_of(r.get(10)?),
        paid_atoms: u64_of(r.get(11)?),
        spend_id: r.get(12)?,
        outcome,
        run: r.get(15)?,
        claimed: r.get(16)?,
        updated: r.get(17)?,
        created: r.get(18)?,
    }))
}
