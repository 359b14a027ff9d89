//! The admin tools: listed and callable only for the policy's `admin_uids`, and
//! re-checked in every handler. Mutations append one line to the audit log
//! ([`ADMIN_LOG`]) after they succeed.

use std::io::Write as _;
use std::sync::Arc;

use brmcp_adapters::PeerId;
use serde::Serialize;

use super::money;
use super::service::{Core, promote, status_of};
use super::store::{DirError, refuse};
use super::tools::{NO_LISTING, json_out, need_listing, tool};
use super::types::{Empty, FlagIn, PendingOut, ProviderOut, Registration, RejectIn, State, UidIn};
use crate::server::{CallContext, Price, ToolError, ToolSpec};

/// The admin tools this directory has (hidden from everyone else).
pub const ADMIN_TOOLS: &[&str] = &[
    "pending_registrations",
    "approve",
    "reject",
    "run_verification",
    "recrawl",
    "unlist",
    "flag",
    "stats",
    "leads",
    "pursue_lead",
    "add_peer",
    "remove_peer",
    "verify_peer",
];

/// The audit log's file name in the data directory: one JSON object per line.
pub const ADMIN_LOG: &str = "adminlog.json";

fn tool_err(e: DirError) -> ToolError {
    ToolError::new(e.to_string())
}

pub(crate) fn check(core: &Core, call: &CallContext) -> Result<PeerId, ToolError> {
    let caller = call.caller();
    if core.policy.admins().contains(&caller) {
        Ok(caller)
    } else {
        Err(ToolError::new("admin only"))
    }
}

/// Appends one audit line (best effort, as the reference does).
pub(crate) fn audit(core: &Core, actor: PeerId, action: &str, args: &impl Serialize) {
    let line = serde_json::json!({
        "ts": core.now(),
        "actor": actor.to_string(),
        "action": action,
        "args": args,
    });
    let written = crate::secure_fs::open_append(&core.data_dir.join(ADMIN_LOG))
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        tracing::warn!(error = %e, "audit line not written");
    }
}

/// The admin tools.
pub(crate) fn tools(core: &Arc<Core>) -> Vec<ToolSpec> {
    let weak = Arc::downgrade(core);
    vec![
        tool!(
            weak,
            "pending_registrations",
            "Every registration in progress or waiting for review.",
            Price::Free,
            |core, call, _input: Empty| {
                check(&core, &call)?;
                let registrations: Vec<PendingOut> = core
                    .store
                    .all()
                    .map_err(tool_err)?
                    .iter()
                    .filter_map(|(uid, s)| s.entry.reg.as_ref().map(|r| PendingOut::of(uid, r)))
                    .collect();
                json_out(&serde_json::json!({ "registrations": registrations }))
            }
        ),
        tool!(
            weak,
            "approve",
            "List a registration whose paid test passed.",
            Price::Free,
            |core, call, input: UidIn| {
                let actor = check(&core, &call)?;
                let (now, days) = (core.now(), core.policy.expiry_days);
                let entry = {
                    let _index = core.lock.lock().await;
                    core.store
                        .update(&input.uid, |s| {
                            if s.entry
                                .reg
                                .as_ref()
                                .is_none_or(|r| r.state != State::PendingReview)
                            {
                                return refuse("nothing pending review for that uid");
                            }
                            promote(s, now, days)?;
                            Ok(s.entry.clone())
                        })
                        .map_err(tool_err)?
                };
                audit(&core, actor, "approve", &input);
                json_out(&status_of(&entry, 0))
            }
        ),
        tool!(
            weak,
            "reject",
            "Drop a registration in any state, optionally with a reason kept as its flag.",
            Price::Free,
            |core, call, input: RejectIn| {
                let actor = check(&core, &call)?;
                let entry = {
                    let _index = core.lock.lock().await;
                    core.store
                        .update(&input.uid, |s| {
                            if s.entry.reg.is_none() {
                                return refuse("no registration for that uid");
                            }
                            s.entry.reg = None;
                            s.fund_key.clear();
                            if !input.reason.is_empty() {
                                s.entry.flag.clone_from(&input.reason);
                            }
                            Ok(s.entry.clone())
                        })
                        .map_err(tool_err)?
                };
                audit(&core, actor, "reject", &input);
                json_out(&status_of(&entry, 0))
            }
        ),
        tool!(
            weak,
            "run_verification",
            "Spot-check a listed provider: a new paid test, no fee; a pass extends the listing.",
            Price::Free,
            |core, call, input: UidIn| {
                let actor = check(&core, &call)?;
                let uid: PeerId = input.uid.parse().map_err(|_| ToolError::new(NO_LISTING))?;
                let (now, key) = (core.now(), money::new_key().map_err(tool_err)?);
                let fund_key = money::new_key().map_err(tool_err)?;
                let entry = {
                    let _index = core.lock.lock().await;
                    let balance = money::balance_atoms(core.harness(), uid)
                        .await
                        .map_err(tool_err)?;
                    core.store
                        .update(&input.uid, |s| {
                            need_listing(s)?;
                            if s.entry.reg.is_some() {
                                return refuse("a registration is already in flight");
                            }
                            let live = s.entry.live.as_ref().expect("checked");
                            if balance < live.test.max_atoms {
                                return refuse(format!(
                                    "provider balance {balance} cannot fund the {} atom test",
                                    live.test.max_atoms
                                ));
                            }
                            s.entry.reg = Some(Registration {
                                state: State::Testing,
                                description: live.description.clone(),
                                tags: live.tags.clone(),
                                test: live.test.clone(),
                                fee_atoms: 0,
                                budget_atoms: live.test.max_atoms,
                                call_key: key,
                                paid_atoms: 0,
                                renewal: true,
                                created_at: now,
                                catalog: Some(live.catalog.clone()),
                                test_outcome: None,
                                test_err: String::new(),
                                test_latency_ms: 0,
                            });
                            s.fund_key = fund_key;
                            Ok(s.entry.clone())
                        })
                        .map_err(tool_err)?
                };
                core.clone().spawn_pipeline(uid);
                audit(&core, actor, "run_verification", &input);
                json_out(&status_of(&entry, 0))
            }
        ),
        tool!(
            weak,
            "recrawl",
            "Read a listed provider's catalog again now.",
            Price::Free,
            |core, call, input: UidIn| {
                let actor = check(&core, &call)?;
                let uid: PeerId = input.uid.parse().map_err(|_| ToolError::new(NO_LISTING))?;
                need_listing(&core.store.get(&input.uid).map_err(tool_err)?).map_err(tool_err)?;
                if let Err(e) = core.recrawl(uid).await {
                    tracing::info!(provider = %uid, error = %e, "recrawl failed");
                }
                audit(&core, actor, "recrawl", &input);
                let stored = core.store.get(&input.uid).map_err(tool_err)?;
                match &stored.entry.live {
                    Some(live) => json_out(&ProviderOut::of(&input.uid, live)),
                    None => Err(ToolError::new("listing vanished during recrawl")),
                }
            }
        ),
        tool!(
            weak,
            "unlist",
            "Remove a live listing.",
            Price::Free,
            |core, call, input: UidIn| {
                let actor = check(&core, &call)?;
                {
                    let _index = core.lock.lock().await;
                    core.store
                        .update(&input.uid, |s| {
                            need_listing(s)?;
                            s.entry.live = None;
                            Ok(())
                        })
                        .map_err(tool_err)?;
                }
                audit(&core, actor, "unlist", &input);
                json_out(&serde_json::json!({ "unlisted": true }))
            }
        ),
        tool!(
            weak,
            "flag",
            "Set (or, with an empty note, clear) a provider's flag.",
            Price::Free,
            |core, call, input: FlagIn| {
                let actor = check(&core, &call)?;
                {
                    let _index = core.lock.lock().await;
                    core.store
                        .update(&input.uid, |s| {
                            s.entry.flag.clone_from(&input.note);
                            Ok(())
                        })
                        .map_err(tool_err)?;
                }
                audit(&core, actor, "flag", &input);
                json_out(&serde_json::json!({ "flagged": true }))
            }
        ),
        tool!(
            weak,
            "stats",
            "Counts of listings, registrations, leads, peers and test spending.",
            Price::Free,
            |core, call, _input: Empty| {
                check(&core, &call)?;
                json_out(&core.stats().map_err(tool_err)?)
            }
        ),
    ]
}
