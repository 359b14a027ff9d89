//! A bot's announcement in a Bison Relay post (WIRE.md §13): what it is, its tools with
//! their prices or bounds, and how to reach it, as text a person reads followed by a
//! block a bridge reads.
//!
//! ````text
//! brmcp bot "weather": forecasts for any city
//!
//! Tools:
//! - forecast: 1000 atoms per call. Tomorrow's forecast
//!
//! To use it, add it to your brmcp bridge: `brmcp bridge --datadir DIR bots add weather <uid>`
//!
//! ```brmcp-announcement v1
//! {"version":1,"uid":"<64 hex>","name":"weather","description":"…","issued":1765000000,
//!  "tools":[{"name":"forecast","description":"…","brmcp/priceAtoms":1000}]}
//! ```
//! ````
//!
//! The block is the lines between the marker line [`MARKER`] and the next line that is
//! exactly ```` ``` ````: one JSON object, read strictly (no unknown keys, every bound
//! below), its tools priced with the same keys and rules as a listing's `_meta`. A
//! post without a marker line is no announcement (`Ok(None)`); anything else that is
//! not exactly right is refused as a whole. The text before the block is for people
//! and never read.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::bounds::{PRICE_MAX_META, PRICE_MIN_META, PriceBounds};
use super::money::{PriceMetaError, ToolPrice};
use super::{PRICE_META, PRICING_META};
use crate::PeerId;

/// The version of the block this module reads and writes.
pub const ANNOUNCEMENT_VERSION: u32 = 1;

/// The line that opens the block (a fenced code block's opening, tagged).
pub const MARKER: &str = "```brmcp-announcement v1";

/// What a marker line of any version starts with: a block of another version is
/// refused as such, not read as no announcement.
const MARKER_PREFIX: &str = "```brmcp-announcement";

/// The line that closes the block.
const FENCE: &str = "```";

/// The most bytes a post holding an announcement may have, text included: a few pages,
/// room for [`MAX_ANNOUNCED_TOOLS`] tools with short descriptions, small enough that a
/// bridge keeps many authors' in memory.
pub const MAX_ANNOUNCEMENT_BYTES: usize = 16 * 1024;

/// The most tools one announcement lists: a bot with more lists its main ones (the
/// agent sees them all through `tools/list` once the bot is added).
pub const MAX_ANNOUNCED_TOOLS: usize = 32;

/// The longest bot name, in bytes: a nick-sized label.
pub const MAX_ANNOUNCED_NAME_LEN: usize = 64;

/// The longest description of the bot, in bytes: a paragraph.
pub const MAX_ANNOUNCED_DESCRIPTION_LEN: usize = 1024;

/// The longest tool name, in bytes: MCP's rule for tool names (1 to 128 of
/// `A-Z a-z 0-9 _ - .`).
pub const MAX_ANNOUNCED_TOOL_NAME_LEN: usize = 128;

/// The longest description of one tool, in bytes: a sentence or two.
pub const MAX_ANNOUNCED_TOOL_DESCRIPTION_LEN: usize = 256;

/// How old an announcement may be, in seconds, before it is stale: 30 days; a bot
/// still running announces again well within it.
pub const MAX_ANNOUNCEMENT_AGE_SECS: u64 = 30 * 24 * 3600;

/// How far in the future an announcement's issue time may be, in seconds: 10 minutes
/// of clock skew between the bot's machine and the reader's.
pub const MAX_ANNOUNCEMENT_SKEW_SECS: u64 = 600;

/// Why a post's announcement was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnnouncementError {
    /// The post is over [`MAX_ANNOUNCEMENT_BYTES`].
    #[error("announcement too large")]
    TooLarge,
    /// A marker line of another version.
    #[error("unsupported announcement version")]
    WrongVersion,
    /// More than one marker line, no closing fence, or a block that is not the JSON
    /// object of this version (a missing or unknown key, a value of the wrong type).
    #[error("malformed announcement block")]
    Malformed,
    /// The uid is not 64 lowercase hex digits.
    #[error("announcement uid is not 64 lowercase hex")]
    BadUid,
    /// The bot's name is empty, too long, or has control characters.
    #[error("bad bot name")]
    BadName,
    /// A description (the bot's or a tool's) is too long or has control characters.
    #[error("bad description")]
    BadDescription,
    /// No tools, or more than [`MAX_ANNOUNCED_TOOLS`].
    #[error("bad tool count")]
    ToolCount,
    /// A tool name breaks MCP's rule, or is listed twice.
    #[error("bad tool name")]
    BadToolName,
    /// A tool with no price (neither `brmcp/priceAtoms` nor `brmcp/pricing`).
    #[error("unpriced tool")]
    Unpriced,
    /// A tool's price keys break the rules of a listing's `_meta`.
    #[error("bad tool price: {0}")]
    BadPrice(PriceMetaError),
    /// Issued more than [`MAX_ANNOUNCEMENT_AGE_SECS`] ago.
    #[error("stale announcement")]
    Stale,
    /// Issued more than [`MAX_ANNOUNCEMENT_SKEW_SECS`] in the future.
    #[error("announcement issued in the future")]
    FromTheFuture,
    /// The block names a bot other than the post's author.
    #[error("announcement names another bot")]
    NotItsAuthor,
}

/// One tool an announcement lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnouncedTool {
    /// The tool's MCP name.
    pub name: String,
    /// What it does (may be empty).
    pub description: String,
    /// Its price per call.
    pub price: ToolPrice,
    /// What a dynamically priced call may be quoted ([`PriceBounds::NONE`] otherwise).
    pub bounds: PriceBounds,
}

impl AnnouncedTool {
    /// The price in words: `free`, `1000 atoms per call`, `priced per call, at most 500
    /// atoms`.
    pub fn describe_price(&self) -> String {
        match self.price {
            ToolPrice::Free => "free".into(),
            ToolPrice::Fixed(atoms) => format!("{atoms} atoms per call"),
            ToolPrice::Dynamic if self.bounds.is_none() => "priced per call".into(),
            ToolPrice::Dynamic => format!("priced per call, {}", self.bounds.describe()),
        }
    }
}

/// A bot's announcement: who it is and what it sells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    /// The bot's Bison Relay user id: the author of the post that carries it.
    pub uid: PeerId,
    /// The bot's name.
    pub name: String,
    /// What the bot is (may be empty).
    pub description: String,
    /// When the bot wrote it, in Unix seconds.
    pub issued_secs: u64,
    /// Its tools, at least one.
    pub tools: Vec<AnnouncedTool>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Block {
    version: u32,
    uid: String,
    name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    description: String,
    issued: u64,
    tools: Vec<BlockTool>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockTool {
    name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    description: String,
    #[serde(
        rename = "brmcp/priceAtoms",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    price_atoms: Option<Value>,
    #[serde(
        rename = "brmcp/pricing",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pricing: Option<Value>,
    #[serde(
        rename = "brmcp/priceMinAtoms",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    min_atoms: Option<Value>,
    #[serde(
        rename = "brmcp/priceMaxAtoms",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    max_atoms: Option<Value>,
}

impl Announcement {
    /// The announcement a post's body holds, `Ok(None)` for a post without a marker
    /// line (an ordinary post). Checks everything but the author and the age (see
    /// [`accept`](Self::accept)).
    ///
    /// # Errors
    /// [`AnnouncementError`] for a post that is too large or a block that breaks a
    /// rule.
    pub fn parse(body: &str) -> Result<Option<Self>, AnnouncementError> {
        if body.len() > MAX_ANNOUNCEMENT_BYTES {
            return Err(AnnouncementError::TooLarge);
        }
        let mut lines = body.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let Some(marker) = lines.by_ref().find(|l| l.starts_with(MARKER_PREFIX)) else {
            return Ok(None);
        };
        if marker != MARKER {
            return Err(AnnouncementError::WrongVersion);
        }
        let mut json = String::new();
        let mut closed = false;
        for line in lines.by_ref() {
            if line == FENCE {
                closed = true;
                break;
            }
            json.push_str(line);
            json.push('\n');
        }
        if !closed || lines.any(|l| l.starts_with(MARKER_PREFIX)) {
            return Err(AnnouncementError::Malformed);
        }
        let block: Block = serde_json::from_str(&json).map_err(|_| AnnouncementError::Malformed)?;
        Self::from_block(block).map(Some)
    }

    /// The announcement of a post by `author` read at `now_secs`: as
    /// [`parse`](Self::parse), and refused when it names another bot, is stale or is
    /// issued in the future.
    ///
    /// # Errors
    /// As [`parse`](Self::parse), and [`AnnouncementError::NotItsAuthor`],
    /// [`AnnouncementError::Stale`], [`AnnouncementError::FromTheFuture`].
    pub fn accept(
        body: &str,
        author: &PeerId,
        now_secs: u64,
    ) -> Result<Option<Self>, AnnouncementError> {
        let Some(announcement) = Self::parse(body)? else {
            return Ok(None);
        };
        if announcement.uid != *author {
            return Err(AnnouncementError::NotItsAuthor);
        }
        announcement.check_age(now_secs)?;
        Ok(Some(announcement))
    }

    /// Whether the announcement is fresh at `now_secs`.
    ///
    /// # Errors
    /// [`AnnouncementError::Stale`] or [`AnnouncementError::FromTheFuture`].
    pub fn check_age(&self, now_secs: u64) -> Result<(), AnnouncementError> {
        if self.issued_secs > now_secs.saturating_add(MAX_ANNOUNCEMENT_SKEW_SECS) {
            return Err(AnnouncementError::FromTheFuture);
        }
        if now_secs.saturating_sub(self.issued_secs) > MAX_ANNOUNCEMENT_AGE_SECS {
            return Err(AnnouncementError::Stale);
        }
        Ok(())
    }

    fn from_block(block: Block) -> Result<Self, AnnouncementError> {
        if block.version != ANNOUNCEMENT_VERSION {
            return Err(AnnouncementError::WrongVersion);
        }
        let uid: PeerId = block.uid.parse().map_err(|_| AnnouncementError::BadUid)?;
        if uid.to_string() != block.uid {
            return Err(AnnouncementError::BadUid);
        }
        if block.name.is_empty() || !text_ok(&block.name, MAX_ANNOUNCED_NAME_LEN) {
            return Err(AnnouncementError::BadName);
        }
        if !text_ok(&block.description, MAX_ANNOUNCED_DESCRIPTION_LEN) {
            return Err(AnnouncementError::BadDescription);
        }
        if block.tools.is_empty() || block.tools.len() > MAX_ANNOUNCED_TOOLS {
            return Err(AnnouncementError::ToolCount);
        }
        let mut tools: Vec<AnnouncedTool> = Vec::with_capacity(block.tools.len());
        for tool in block.tools {
            let tool = AnnouncedTool::from_block(tool)?;
            if tools.iter().any(|t| t.name == tool.name) {
                return Err(AnnouncementError::BadToolName);
            }
            tools.push(tool);
        }
        Ok(Self {
            uid,
            name: block.name,
            description: block.description,
            issued_secs: block.issued,
            tools,
        })
    }

    /// The post's body: the text a person reads, then the block.
    ///
    /// # Errors
    /// [`AnnouncementError`] when the announcement breaks a rule (it would not be read
    /// back), among them [`AnnouncementError::TooLarge`].
    pub fn render(&self) -> Result<String, AnnouncementError> {
        let block = Block {
            version: ANNOUNCEMENT_VERSION,
            uid: self.uid.to_string(),
            name: self.name.clone(),
            description: self.description.clone(),
            issued: self.issued_secs,
            tools: self.tools.iter().map(AnnouncedTool::to_block).collect(),
        };
        let json = serde_json::to_string(&block).map_err(|_| AnnouncementError::Malformed)?;
        let mut text = format!("brmcp bot {:?}", self.name);
        if !self.description.is_empty() {
            text.push_str(": ");
            text.push_str(&self.description);
        }
        text.push_str("\n\nTools:\n");
        for tool in &self.tools {
            text.push_str(&format!("- {}: {}", tool.name, tool.describe_price()));
            if !tool.description.is_empty() {
                text.push_str(". ");
                text.push_str(&tool.description);
            }
            text.push('\n');
        }
        // A name a shell takes as one word is suggested as the bridge's name for it.
        let name = if tool_name_ok(&self.name) {
            self.name.as_str()
        } else {
            "NAME"
        };
        text.push_str(&format!(
            "\nTo use it, add it to your brmcp bridge: `brmcp bridge --datadir DIR bots add {name} {}` \
             (or on the bridge's page).\n\n{MARKER}\n{json}\n{FENCE}\n",
            self.uid
        ));
        // What is written is what a reader accepts, or nothing is written.
        match Self::parse(&text)? {
            Some(read) if read == *self => Ok(text),
            _ => Err(AnnouncementError::Malformed),
        }
    }
}

impl AnnouncedTool {
    fn from_block(tool: BlockTool) -> Result<Self, AnnouncementError> {
        if !tool_name_ok(&tool.name) {
            return Err(AnnouncementError::BadToolName);
        }
        if !text_ok(&tool.description, MAX_ANNOUNCED_TOOL_DESCRIPTION_LEN) {
            return Err(AnnouncementError::BadDescription);
        }
        // The keys and rules of a listing's `_meta`, read by the same code.
        let mut meta = rmcp::model::JsonObject::new();
        for (key, value) in [
            (PRICE_META, tool.price_atoms),
            (PRICING_META, tool.pricing),
            (PRICE_MIN_META, tool.min_atoms),
            (PRICE_MAX_META, tool.max_atoms),
        ] {
            if let Some(value) = value {
                meta.insert(key.to_owned(), value);
            }
        }
        let price = ToolPrice::from_meta(Some(&meta))
            .map_err(AnnouncementError::BadPrice)?
            .ok_or(AnnouncementError::Unpriced)?;
        let bounds = PriceBounds::from_meta(Some(&meta)).map_err(AnnouncementError::BadPrice)?;
        Ok(Self {
            name: tool.name,
            description: tool.description,
            price,
            bounds,
        })
    }

    fn to_block(&self) -> BlockTool {
        let mut meta = rmcp::model::JsonObject::new();
        match self.price {
            ToolPrice::Free => {
                meta.insert(PRICE_META.into(), 0.into());
            }
            ToolPrice::Fixed(atoms) => {
                meta.insert(PRICE_META.into(), atoms.into());
            }
            ToolPrice::Dynamic => {
                meta.insert(PRICING_META.into(), super::DYNAMIC_PRICING.into());
                self.bounds.write_meta(&mut meta);
            }
        }
        BlockTool {
            name: self.name.clone(),
            description: self.description.clone(),
            price_atoms: meta.remove(PRICE_META),
            pricing: meta.remove(PRICING_META),
            min_atoms: meta.remove(PRICE_MIN_META),
            max_atoms: meta.remove(PRICE_MAX_META),
        }
    }
}

/// Text shown on one line: within `max` bytes, no control characters.
fn text_ok(text: &str, max: usize) -> bool {
    text.len() <= max && !text.chars().any(char::is_control)
}

/// MCP's rule for a tool name: 1 to 128 of `A-Z a-z 0-9 _ - .`.
fn tool_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_ANNOUNCED_TOOL_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests;
