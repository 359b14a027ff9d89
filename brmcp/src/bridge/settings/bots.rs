//! The allowed bots and the names the user gave them.

use brmcp_adapters::PeerId;

use super::{MAX_BOT_NAME_LEN, Settings, SettingsError};

/// A bot with the name the user gave it, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NamedBot {
    /// The bot's uid.
    pub uid: PeerId,
    /// The user's name for it.
    pub name: Option<String>,
}

/// Names a bot may not have: `directory` is the path of the directory endpoints
/// (`/mcp/directory`), which would hide a bot's `/mcp/<name>`.
pub const RESERVED_BOT_NAMES: [&str; 1] = ["directory"];

/// What [`Settings::with_named_bot`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BotChange {
    /// The bot was allowed before.
    pub was_allowed: bool,
    /// The bot had this very name before: nothing changed.
    pub was_named: bool,
    /// The bot's name before, when it had another.
    pub renamed_from: Option<String>,
    /// The bot the name was before, when another (it stays allowed, unnamed).
    pub moved_from: Option<PeerId>,
}

impl Settings {
    /// The allowed bots with their names.
    pub fn bots(&self) -> Vec<NamedBot> {
        self.allowed_bots
            .iter()
            .filter_map(|uid| uid.parse::<PeerId>().ok())
            .map(|uid| {
                let text = uid.to_string();
                let name = self
                    .bot_names
                    .iter()
                    .find(|(_, u)| **u == text)
                    .map(|(n, _)| n.clone());
                NamedBot { uid, name }
            })
            .collect()
    }

    /// How the user knows `bot`: `"alice" (<uid>)` when they named it, else its uid.
    /// Every question, progress message and error about a bot shows it so.
    pub fn bot_label(&self, bot: &PeerId) -> String {
        let uid = bot.to_string();
        match self.bot_names.iter().find(|(_, u)| **u == uid) {
            Some((name, _)) => format!("{name:?} ({uid})"),
            None => uid,
        }
    }

    /// The bot a name or a uid designates.
    pub fn resolve(&self, name_or_uid: &str) -> Option<PeerId> {
        if let Some(uid) = self.bot_names.get(name_or_uid) {
            return uid.parse().ok();
        }
        let uid: PeerId = name_or_uid.parse().ok()?;
        self.allows(&uid).then_some(uid)
    }

    /// Adds (or renames) a named bot and allows it.
    ///
    /// # Errors
    /// [`SettingsError::InvalidName`], [`SettingsError::NameTaken`].
    pub fn with_bot(self, name: &str, uid: PeerId) -> Result<Self, SettingsError> {
        let text = uid.to_string();
        if self.bot_names.get(name).is_some_and(|u| *u != text) {
            return Err(SettingsError::NameTaken(name.to_owned()));
        }
        self.with_named_bot(name, uid, true).map(|(s, _)| s)
    }

    /// Allows `uid` under `name`, saying what changed. Without `replace`, a name that
    /// is another bot's ([`SettingsError::NameHeld`]) or a bot that has another name
    /// ([`SettingsError::BotNamed`]) is refused; with it, the name moves (its old bot
    /// stays allowed, unnamed) and the bot is renamed.
    ///
    /// # Errors
    /// [`SettingsError::InvalidName`], [`SettingsError::ReservedName`],
    /// [`SettingsError::NameHeld`], [`SettingsError::BotNamed`].
    pub fn with_named_bot(
        mut self,
        name: &str,
        uid: PeerId,
        replace: bool,
    ) -> Result<(Self, BotChange), SettingsError> {
        check_name(name)?;
        if RESERVED_BOT_NAMES.contains(&name) {
            return Err(SettingsError::ReservedName(name.to_owned()));
        }
        let text = uid.to_string();
        let moved_from = self
            .bot_names
            .get(name)
            .filter(|u| **u != text)
            .and_then(|u| u.parse::<PeerId>().ok());
        let renamed_from = self
            .bot_names
            .iter()
            .find(|(n, u)| **u == text && n.as_str() != name)
            .map(|(n, _)| n.clone());
        if !replace {
            if let Some(holder) = moved_from {
                return Err(SettingsError::NameHeld {
                    name: name.to_owned(),
                    uid: holder,
                });
            }
            if let Some(old) = renamed_from {
                return Err(SettingsError::BotNamed { uid, name: old });
            }
        }
        let change = BotChange {
            was_allowed: self.allowed_bots.contains(&text),
            was_named: self.bot_names.get(name) == Some(&text),
            renamed_from,
            moved_from,
        };
        self.bot_names.retain(|_, u| *u != text);
        self.bot_names.insert(name.to_owned(), text.clone());
        if !change.was_allowed {
            self.allowed_bots.push(text);
        }
        Ok((self, change))
    }

    /// Removes a bot (by name or uid) from the allowed bots and the names.
    ///
    /// # Errors
    /// [`SettingsError::UnknownBot`].
    pub fn without_bot(mut self, name_or_uid: &str) -> Result<Self, SettingsError> {
        let uid = self
            .resolve(name_or_uid)
            .ok_or_else(|| SettingsError::UnknownBot(name_or_uid.to_owned()))?
            .to_string();
        self.allowed_bots.retain(|u| *u != uid);
        self.bot_names.retain(|_, u| *u != uid);
        Ok(self)
    }
}

pub(super) fn check_name(name: &str) -> Result<(), SettingsError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_BOT_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        // A name that is itself a uid would shadow that uid.
        && name.parse::<PeerId>().is_err();
    if ok {
        Ok(())
    } else {
        Err(SettingsError::InvalidName(name.to_owned()))
    }
}
