//! Federation: curated peer directories whose verified snapshots yield leads (never
//! listings), pursued through the provider's `listing_invite`, with a transitive key
//! exchange through the peer as the fallback.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use brmcp_adapters::protocol::result_text;
use brmcp_adapters::{BoxError, PeerId};
use serde::{Deserialize, Serialize};

use super::admin::{audit, check};
use super::client;
use super::money;
use super::pipeline::Budget;
use super::service::Core;
use super::snapshot::{SignedSnapshot, verify};
use super::store::{DirError, Table, refuse};
use super::tools::{json_out, tool};
use super::types::{Empty, UidIn, is_zero};
use crate::server::schemars::JsonSchema;
use crate::server::{Price, ToolError, ToolSpec};

/// A snapshot purchase may cost at most this many times the directory's own snapshot
/// price: a peer cannot drain the wallet with a lying quote.
pub(crate) const PEER_SNAPSHOT_BUDGET_FACTOR: i64 = 10;

/// The note of a lead waiting for the key exchange through its peer.
pub(crate) const AWAITING_KX: &str = "awaiting key exchange via peer";

/// The boxed future of an [`Introducer`].
pub type IntroduceFuture<'a> = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send + 'a>>;

/// Asks `mediator` (a peer directory that knows both sides) to mediate a key exchange
/// between this directory and `target` (clientrpc's `MediateKX`).
pub trait Introducer: Send + Sync + 'static {
    /// Requests the exchange; `Ok` once the request is accepted (not completed).
    fn introduce(&self, mediator: PeerId, target: PeerId) -> IntroduceFuture<'_>;
}

/// Where a lead is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeadState {
    /// From a verified snapshot.
    New,
    /// Waiting for a key exchange through the peer.
    Pursuing,
    /// The invite was delivered (accepted or declined).
    Invited,
    /// The provider registered here. Terminal.
    Converted,
}

/// A provider another directory lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lead {
    /// The provider.
    #[serde(rename = "providerUid")]
    pub provider_uid: String,
    /// The peer directory whose snapshot named it.
    #[serde(rename = "peerUid")]
    pub peer_uid: String,
    /// From the snapshot.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// From the snapshot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Where it is.
    pub state: LeadState,
    /// The last remark (sticky).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// When found.
    #[serde(rename = "createdAt")]
    pub created_at: i64,
    /// When last changed.
    #[serde(rename = "updatedAt")]
    pub updated_at: i64,
    /// The call key of this pursuit's invite, stored before it is sent: an invite sent
    /// again (a key exchange redelivered after a crash) replays the first one's outcome
    /// at the provider instead of inviting twice.
    #[serde(
        rename = "inviteKey",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub invite_key: String,
    /// Undelivered invites after this pursuit's key exchange (see
    /// [`MAX_KX_INVITE_TRIES`]).
    #[serde(rename = "kxInviteTries", default, skip_serializing_if = "is_zero_u32")]
    pub kx_invite_tries: u32,
}

/// Undelivered invites tried after one completed key exchange before the exchange is
/// acknowledged without one: 8. Every completed exchange arrives on one stream, in
/// order, and one is acknowledged only once handled; a provider that stays unreachable
/// (or keeps failing the call) must not hold every later exchange back for ever. The
/// lead stays `pursuing`, the failure in its note, for the operator to pursue again.
pub const MAX_KX_INVITE_TRIES: u32 = 8;

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// Why an invite was not delivered: the provider never answered it (the call failed
/// or timed out), as opposed to answering it with a refusal or a decline.
#[derive(Debug)]
struct Undelivered(String);

/// A curated peer directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// The hex snapshot key its snapshots must carry.
    #[serde(rename = "pubKey")]
    pub pub_key: String,
    /// When curated.
    #[serde(rename = "addedAt")]
    pub added_at: i64,
    /// When its snapshot last verified.
    #[serde(rename = "lastVerifiedAt", default, skip_serializing_if = "is_zero")]
    pub last_verified_at: i64,
}

/// The input of `add_peer`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct AddPeerIn {
    /// The peer directory's uid.
    pub uid: String,
    /// Its snapshot key (`policy.pubKey`).
    #[serde(rename = "pubKey")]
    pub pub_key: String,
}

/// The input of the provider's `listing_invite`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct InviteIn {
    /// The inviting directory's name (informational).
    pub directory: String,
    /// Its listing fee.
    #[serde(rename = "listingFeeAtoms")]
    pub listing_fee_atoms: i64,
    /// A remark.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// The output of `listing_invite`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InviteOut {
    /// Whether the provider registers.
    pub accepted: bool,
    /// Why not, or a remark.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

fn tool_err(e: DirError) -> ToolError {
    ToolError::new(e.to_string())
}

/// The federation admin tools.
pub(crate) fn tools(core: &Arc<Core>) -> Vec<ToolSpec> {
    let weak = Arc::downgrade(core);
    vec![
        tool!(
            weak,
            "leads",
            "Providers found in peer snapshots.",
            Price::Free,
            |core, call, _input: Empty| {
                check(&core, &call)?;
                let leads: Vec<Lead> = core
                    .store
                    .list_json::<Lead>(Table::Leads)
                    .map_err(tool_err)?
                    .into_iter()
                    .map(|(_, lead)| lead)
                    .collect();
                json_out(&serde_json::json!({ "leads": leads }))
            }
        ),
        tool!(
            weak,
            "add_peer",
            "Curate a peer directory and its snapshot key.",
            Price::Free,
            |core, call, input: AddPeerIn| {
                let actor = check(&core, &call)?;
                if input.uid.len() != 64 || input.pub_key.is_empty() {
                    return Err(ToolError::new("uid (64-hex) and pubKey are required"));
                }
                let peer = Peer {
                    pub_key: input.pub_key.clone(),
                    added_at: core.now(),
                    last_verified_at: 0,
                };
                core.store
                    .put_json(Table::Peers, &input.uid, Some(&peer))
                    .map_err(tool_err)?;
                audit(&core, actor, "add_peer", &input);
                json_out(&serde_json::json!({ "added": true }))
            }
        ),
        tool!(
            weak,
            "remove_peer",
            "Forget a peer directory (its leads stay).",
            Price::Free,
            |core, call, input: UidIn| {
                let actor = check(&core, &call)?;
                core.store
                    .put_json::<Peer>(Table::Peers, &input.uid, None)
                    .map_err(tool_err)?;
                audit(&core, actor, "remove_peer", &input);
                json_out(&serde_json::json!({ "removed": true }))
            }
        ),
        tool!(
            weak,
            "verify_peer",
            "Buy and verify a peer's snapshot; its unknown providers become leads.",
            Price::Free,
            |core, call, input: UidIn| {
                let actor = check(&core, &call)?;
                let n = core.verify_peer(&input.uid).await.map_err(tool_err)?;
                audit(&core, actor, "verify_peer", &input);
                json_out(&serde_json::json!({ "newLeads": n }))
            }
        ),
        tool!(
            weak,
            "pursue_lead",
            "Invite a lead to register here (listing_invite), or ask its peer for an introduction.",
            Price::Free,
            |core, call, input: UidIn| {
                let actor = check(&core, &call)?;
                let lead = core.pursue_lead(&input.uid).await.map_err(tool_err)?;
                audit(&core, actor, "pursue_lead", &input);
                json_out(&lead)
            }
        ),
    ]
}

impl Core {
    /// `verify_peer`: buys the peer's snapshot, verifies it against the curated key and
    /// stores its unknown providers as leads; returns how many.
    pub(crate) async fn verify_peer(&self, peer_uid: &str) -> Result<i64, DirError> {
        let Some(mut peer) = self.store.get_json::<Peer>(Table::Peers, peer_uid)? else {
            return refuse("not a curated peer; add_peer first");
        };
        let Ok(peer_id) = peer_uid.parse::<PeerId>() else {
            return refuse("not a curated peer; add_peer first");
        };
        let max_atoms = self.policy.snapshot_price_atoms * PEER_SNAPSHOT_BUDGET_FACTOR;
        let key = money::new_key()?;
        let answer = self
            .paid_call(peer_id, "get_snapshot", None, &key, Budget::own(max_atoms))
            .await
            .map_err(|e| DirError::Refused(format!("snapshot purchase: {e}")))?;
        let text = result_text(&answer.result);
        if answer.result.is_error == Some(true) {
            return refuse(format!(
                "snapshot refused: {}",
                client::result_text_capped(&answer.result)
            ));
        }
        let signed: SignedSnapshot = serde_json::from_str(&text)
            .map_err(|e| DirError::Refused(format!("snapshot malformed: {e}")))?;
        let snapshot =
            verify(&signed, &peer.pub_key).map_err(|e| DirError::Refused(e.to_string()))?;
        let own = self.self_uid.get().map(PeerId::to_string);
        let now = self.now();
        let mut new = 0;
        for listing in snapshot.listings.unwrap_or_default() {
            let uid = &listing.uid;
            if uid.len() != 64
                || Some(uid) == own.as_ref()
                || uid == peer_uid
                || self
                    .store
                    .get(uid)
                    .is_ok_and(|s| s.entry != Default::default())
                || self.store.get_json::<Lead>(Table::Leads, uid)?.is_some()
            {
                continue;
            }
            let lead = Lead {
                provider_uid: uid.clone(),
                peer_uid: peer_uid.to_owned(),
                description: listing.description,
                tags: listing.tags,
                state: LeadState::New,
                note: String::new(),
                created_at: now,
                updated_at: now,
                invite_key: String::new(),
                kx_invite_tries: 0,
            };
            self.store.put_json(Table::Leads, uid, Some(&lead))?;
            new += 1;
        }
        peer.last_verified_at = now;
        self.store.put_json(Table::Peers, peer_uid, Some(&peer))?;
        Ok(new)
    }

    /// Sets a lead's state (never out of `converted`); an empty note keeps the old one.
    fn set_lead(&self, uid: &str, state: LeadState, note: &str) -> Result<Option<Lead>, DirError> {
        let now = self.now();
        self.store
            .update_json(Table::Leads, uid, |lead: &mut Lead| {
                if lead.state == LeadState::Converted {
                    return;
                }
                lead.state = state;
                if !note.is_empty() {
                    note.clone_into(&mut lead.note);
                }
                lead.updated_at = now;
            })
    }

    /// A `register` by `uid` converts its lead.
    pub(crate) fn convert_lead(&self, uid: &str) -> Result<(), DirError> {
        self.set_lead(uid, LeadState::Converted, "").map(drop)
    }

    /// Sends `listing_invite` to `uid` under `call_key`: `Ok(Ok(note))` when it was
    /// delivered (a decline's note is `declined: …`), `Ok(Err(why))` when the provider
    /// refused it, `Err` when it was not delivered.
    async fn invite(
        &self,
        uid: PeerId,
        call_key: &str,
    ) -> Result<Result<String, String>, Undelivered> {
        let args = serde_json::json!({
            "directory": self.policy.name,
            "listingFeeAtoms": self.policy.listing_fee_atoms,
        });
        let serde_json::Value::Object(args) = args else {
            unreachable!("an object")
        };
        let answer = self
            .paid_call(uid, "listing_invite", Some(&args), call_key, Budget::own(0))
            .await
            .map_err(Undelivered)?;
        if answer.result.is_error == Some(true) {
            return Ok(Err(format!(
                "invite refused: {}",
                client::result_text_capped(&answer.result)
            )));
        }
        let out: InviteOut = match serde_json::from_str(&result_text(&answer.result)) {
            Ok(out) => out,
            Err(e) => return Ok(Err(format!("invite reply malformed: {e}"))),
        };
        Ok(Ok(if out.accepted {
            String::new()
        } else {
            format!("declined: {}", out.note)
        }))
    }

    /// Starts a pursuit of `uid`'s lead: a fresh invite call key, stored before any
    /// invite goes out. `None` when there is no lead (or it converted).
    fn start_pursuit(&self, uid: &str) -> Result<Option<String>, DirError> {
        let key = money::new_key().map_err(|e| DirError::Ledger(e.to_string()))?;
        let lead = self
            .store
            .update_json(Table::Leads, uid, |lead: &mut Lead| {
                if lead.state != LeadState::Converted {
                    lead.invite_key.clone_from(&key);
                    lead.kx_invite_tries = 0;
                }
            })?;
        Ok(lead
            .filter(|l| l.state != LeadState::Converted)
            .map(|_| key))
    }

    /// `pursue_lead`.
    pub(crate) async fn pursue_lead(&self, uid: &str) -> Result<Lead, DirError> {
        let Some(lead) = self.store.get_json::<Lead>(Table::Leads, uid)? else {
            return refuse("no lead for that uid");
        };
        if lead.state == LeadState::Converted {
            return Ok(lead);
        }
        let Ok(provider) = uid.parse::<PeerId>() else {
            return refuse("no lead for that uid");
        };
        let Some(call_key) = self.start_pursuit(uid)? else {
            return Ok(lead);
        };
        let invite_err = match self.invite(provider, &call_key).await {
            Ok(Ok(note)) => {
                return Ok(self
                    .set_lead(uid, LeadState::Invited, &note)?
                    .unwrap_or(lead));
            }
            Ok(Err(e)) | Err(Undelivered(e)) => e,
        };
        let Some(introducer) = &self.introducer else {
            return refuse(format!(
                "invite failed and no introducer is configured: {invite_err}"
            ));
        };
        let Ok(mediator) = lead.peer_uid.parse::<PeerId>() else {
            return refuse(format!(
                "invite failed ({invite_err}); introduction failed: bad peer uid"
            ));
        };
        // Pursuing before the introduction is asked for: the exchange may complete
        // before `introduce` returns, and must find the lead waiting for it. The
        // invite after it is a new one, under a key of its own.
        if self.start_pursuit(uid)?.is_none() {
            return Ok(lead);
        }
        let pursuing = self
            .set_lead(uid, LeadState::Pursuing, AWAITING_KX)?
            .unwrap_or(lead.clone());
        if let Err(e) = introducer.introduce(mediator, provider).await {
            let why = format!("invite failed ({invite_err}); introduction failed: {e}");
            self.set_lead(uid, lead.state, &why)?;
            return refuse(why);
        }
        Ok(pursuing)
    }

    /// A key exchange with `uid` completed: one invite if its lead is `pursuing`, under
    /// the pursuit's stored call key (a redelivered exchange replays it).
    ///
    /// # Errors
    /// A store error, or an invite not delivered (at most [`MAX_KX_INVITE_TRIES`]
    /// times): the exchange is to be offered again, not acknowledged.
    pub(crate) async fn notify_kx(&self, uid: PeerId) -> Result<(), DirError> {
        let key = uid.to_string();
        let Some(lead) = self.store.get_json::<Lead>(Table::Leads, &key)? else {
            return Ok(());
        };
        if lead.state != LeadState::Pursuing {
            return Ok(());
        }
        let call_key = if lead.invite_key.is_empty() {
            match self.start_pursuit(&key)? {
                Some(call_key) => call_key,
                None => return Ok(()),
            }
        } else {
            lead.invite_key
        };
        let (state, note) = match self.invite(uid, &call_key).await {
            Ok(Ok(note)) => (LeadState::Invited, note),
            Ok(Err(e)) => (LeadState::Pursuing, format!("invite after KX failed: {e}")),
            Err(Undelivered(e)) => {
                let note = format!("invite after KX failed: {e}");
                let tries = self
                    .store
                    .update_json(Table::Leads, &key, |lead: &mut Lead| {
                        lead.kx_invite_tries = lead.kx_invite_tries.saturating_add(1);
                        note.clone_into(&mut lead.note);
                    })?
                    .map_or(0, |l| l.kx_invite_tries);
                if tries < MAX_KX_INVITE_TRIES {
                    return Err(DirError::Refused(note));
                }
                tracing::warn!(provider = %uid, tries, error = %e, "invite after KX undelivered; giving up");
                (LeadState::Pursuing, note)
            }
        };
        self.set_lead(&key, state, &note).map(drop)
    }
}
