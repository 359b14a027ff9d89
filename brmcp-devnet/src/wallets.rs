//! The wallets of a devnet directory, read from its kept state: always current, as
//! every change is journaled before anyone sees it, so a running devnet need not be
//! asked (`brmcp devnet wallets`).

use std::path::Path;

use super::DevnetError;
use super::durable::{self, Uid};

/// Whether a tip left or reached the wallet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TipDirection {
    /// The wallet's node paid it.
    Sent,
    /// The wallet's node received it.
    Received,
}

impl TipDirection {
    /// `"sent"` or `"received"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Sent => "sent",
            Self::Received => "received",
        }
    }
}

/// One recent tip of a wallet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalletTip {
    /// Sent or received.
    pub direction: TipDirection,
    /// The other side's user id.
    pub peer: [u8; 32],
    /// The other side's nick, when it is a node of the devnet.
    pub peer_nick: Option<String>,
    /// The amount in milliatoms.
    pub matoms: i64,
    /// When it was paid, devnet clock, unix milliseconds.
    pub at_ms: i64,
}

/// One node's wallet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Wallet {
    /// The node's nick.
    pub nick: String,
    /// Its user id.
    pub uid: [u8; 32],
    /// Its balance in milliatoms.
    pub balance_matoms: i64,
    /// Its last tips (at most 20), newest first.
    pub recent_tips: Vec<WalletTip>,
}

/// The wallets of every node the devnet in `dir` ever ran, sorted by nick; `None`
/// when `dir` holds no devnet state (no devnet ran there, or only one that kept
/// none). Safe while the devnet runs.
///
/// # Errors
/// A state file that cannot be read, or a corrupt one ([`DevnetError::CorruptState`]).
pub fn read_wallets(dir: impl AsRef<Path>) -> Result<Option<Vec<Wallet>>, DevnetError> {
    let Some(state) = durable::read_only(dir.as_ref())? else {
        return Ok(None);
    };
    let nick_of = |uid: &Uid| state.nodes.get(uid).map(|n| n.nick.clone());
    let mut wallets: Vec<Wallet> = state
        .nodes
        .iter()
        .map(|(uid, node)| Wallet {
            nick: node.nick.clone(),
            uid: uid.0,
            balance_matoms: state.balances.get(uid).copied().unwrap_or(0),
            recent_tips: node
                .recent_tips
                .iter()
                .rev()
                .map(|t| {
                    let (direction, peer) = if t.payer == *uid {
                        (TipDirection::Sent, t.payee)
                    } else {
                        (TipDirection::Received, t.payer)
                    };
                    WalletTip {
                        direction,
                        peer: peer.0,
                        peer_nick: nick_of(&peer),
                        matoms: t.matoms,
                        at_ms: t.at_ms,
                    }
                })
                .collect(),
        })
        .collect();
    wallets.sort_by(|a, b| a.nick.cmp(&b.nick));
    Ok(Some(wallets))
}
