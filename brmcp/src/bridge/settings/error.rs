//! Why settings were refused or could not be read or written.

use std::path::PathBuf;

use brmcp_adapters::PeerId;

use super::MIN_TOKEN_LEN;

/// Why settings were refused or could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// A bot entry is not a 64-hex uid.
    #[error("allowed bot {0:?} is not a 64-hex uid")]
    InvalidBot(String),
    /// A bot name is empty, too long, or has characters other than letters, digits,
    /// `.`, `_` and `-`.
    #[error("bot name {0:?} is not 1 to 64 letters, digits, '.', '_' or '-'")]
    InvalidName(String),
    /// A named bot is not in `allowed_bots`.
    #[error("bot name {name:?} names {uid}, which is not an allowed bot")]
    NameNotAllowed {
        /// The name.
        name: String,
        /// The uid it names.
        uid: String,
    },
    /// No bot has this name or uid.
    #[error("no bot named {0:?}")]
    UnknownBot(String),
    /// The name is taken by another bot.
    #[error("bot name {0:?} is already used for another bot")]
    NameTaken(String),
    /// The name is another bot's.
    #[error("bot name {name:?} is bot {uid}'s")]
    NameHeld {
        /// The name.
        name: String,
        /// The bot that has it.
        uid: PeerId,
    },
    /// The bot has another name.
    #[error("bot {uid} is named {name:?}")]
    BotNamed {
        /// The bot.
        uid: PeerId,
        /// Its name.
        name: String,
    },
    /// The name is one of [`RESERVED_BOT_NAMES`](super::RESERVED_BOT_NAMES).
    #[error("bot name {0:?} is reserved (it is the path of the directory endpoints)")]
    ReservedName(String),
    /// The token is shorter than [`MIN_TOKEN_LEN`].
    #[error(
        "the token is shorter than {MIN_TOKEN_LEN} characters (delete it and a new one is made)"
    )]
    TokenTooShort,
    /// An agent of `agents` is malformed or repeats another.
    #[error("agent {0}")]
    Agent(String),
    /// An entry of `allowed_ips` is not a canonical address or range.
    #[error("{reason}")]
    AllowedIp {
        /// Its index in the list.
        index: usize,
        /// Why.
        reason: String,
    },
    /// The settings could not be encoded.
    #[error("the settings do not encode: {0}")]
    Parse(#[source] serde_json::Error),
    /// The file is not JSON.
    #[error("{}: not valid JSON: {source}", .path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// Where and why.
        #[source]
        source: serde_json::Error,
    },
    /// A key of the file was refused.
    #[error("{}: {key}: {reason}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key (`top level` for the file as a whole).
        key: String,
        /// Why.
        reason: String,
    },
    /// A directory entry has a bad uid or name, or repeats another's.
    #[error(
        "directory {0:?}: not a 64-hex uid with a unique name of 1 to 64 letters, digits, '.', '_' or '-'"
    )]
    Directory(String),
    /// The file holds other settings than the ones in use (an edit not applied
    /// yet, or refused), or they changed meanwhile: writing would lose that edit.
    #[error("{}: changed on disk (not applied yet, or refused); retry", .0.display())]
    ChangedOnDisk(PathBuf),
    /// Reading or writing the file failed.
    #[error("settings file {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}
