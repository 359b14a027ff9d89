//! The public tools: `register`, `my_status`, `search`, `get_provider`, `introduce`,
//! `list_categories`, `policy`, `get_snapshot`.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;

use super::money;
use super::search::{SearchIn, search};
use super::service::{BUSY_NOTE, Core};
use super::store::{DirError, refuse};
use super::types::{Empty, ProviderOut, RegisterIn, Registration, State, UidIn, normalize_tags};
use crate::server::{CallContext, Price, ToolError, ToolSpec};

/// The refusal of every tool asked about a uid without a live listing.
pub const NO_LISTING: &str = "no listing for that uid";

/// The answer of `introduce` on a host that cannot suggest a key exchange (clientrpc
/// has no such call).
pub const NO_INTRODUCTIONS: &str = "this directory does not support introductions";

/// A tool result: the JSON, in field order, as the one text content, and as the
/// structured content.
pub(crate) fn json_out<T: Serialize>(out: &T) -> Result<CallToolResult, ToolError> {
    let value = serde_json::to_value(out).map_err(|e| ToolError::new(e.to_string()))?;
    let text = serde_json::to_string(out).map_err(|e| ToolError::new(e.to_string()))?;
    let mut result = CallToolResult::structured(value);
    result.content = vec![ContentBlock::text(text)];
    Ok(result)
}

fn tool_err(e: DirError) -> ToolError {
    ToolError::new(e.to_string())
}

/// Defines a tool whose handler gets the directory core.
macro_rules! tool {
    ($weak:expr, $name:expr, $desc:expr, $price:expr, |$core:ident, $call:ident, $input:ident: $ty:ty| $body:block) => {{
        let weak: std::sync::Weak<Core> = $weak.clone();
        ToolSpec::new(
            $name,
            $desc,
            $price,
            move |$call: $crate::server::CallContext, $input: $ty| {
                let weak = weak.clone();
                async move {
                    let $core = Core::upgrade(&weak)?;
                    $body
                }
            },
        )
    }};
}
pub(crate) use tool;

/// The public tools.
pub(crate) fn public(core: &Arc<Core>) -> Vec<ToolSpec> {
    let weak = Arc::downgrade(core);
    let search_price = u64::try_from(core.policy.search_price_atoms).unwrap_or(0);
    let snapshot_price = u64::try_from(core.policy.snapshot_price_atoms).unwrap_or(0);
    vec![
        tool!(
            weak,
            "register",
            "Register (or renew) your bot for listing; the reply is the funding invoice. The directory crawls your catalog and pays for one test call before listing.",
            Price::Free,
            |core, call, input: RegisterIn| { register(&core, &call, input).await }
        ),
        tool!(
            weak,
            "my_status",
            "Your listing or registration status.",
            Price::Free,
            |core, call, _input: Empty| {
                json_out(&core.status_for(call.caller()).await.map_err(tool_err)?)
            }
        ),
        tool!(
            weak,
            "search",
            "Search the verified tools of listed providers by text, tags and price.",
            Price::Fixed(search_price),
            |core, _call, input: SearchIn| {
                json_out(&search(&core.store.all().map_err(tool_err)?, &input))
            }
        ),
        tool!(
            weak,
            "get_provider",
            "A listed provider's verified catalog and stamps.",
            Price::Free,
            |core, _call, input: UidIn| {
                let stored = core.store.get(&input.uid).map_err(tool_err)?;
                match &stored.entry.live {
                    Some(live) => json_out(&ProviderOut::of(&input.uid, live)),
                    None => Err(ToolError::new(NO_LISTING)),
                }
            }
        ),
        tool!(
            weak,
            "introduce",
            "Ask for a key exchange with a listed provider.",
            Price::Free,
            |_core, _call, _input: UidIn| {
                Err::<CallToolResult, _>(ToolError::new(NO_INTRODUCTIONS))
            }
        ),
        tool!(
            weak,
            "list_categories",
            "Tags of the listed providers, with how many carry each.",
            Price::Free,
            |core, _call, _input: Empty| {
                let mut tags: BTreeMap<String, i64> = BTreeMap::new();
                for (_, stored) in core.store.all().map_err(tool_err)? {
                    if let Some(live) = &stored.entry.live {
                        for tag in &live.tags {
                            *tags.entry(tag.clone()).or_default() += 1;
                        }
                    }
                }
                json_out(&serde_json::json!({ "tags": tags }))
            }
        ),
        tool!(
            weak,
            "policy",
            "The directory's terms: fees, prices, budgets, expiry and the snapshot key.",
            Price::Free,
            |core, _call, _input: Empty| { json_out(&PolicyOut::of(&core)) }
        ),
        tool!(
            weak,
            "get_snapshot",
            "A signed snapshot of every live listing.",
            Price::Fixed(snapshot_price),
            |core, _call, _input: Empty| {
                let entries = core.store.all().map_err(tool_err)?;
                json_out(
                    &core
                        .signer
                        .sign(&super::snapshot::payload(&entries, core.now())),
                )
            }
        ),
    ]
}

/// The output of `policy`.
#[derive(Debug, Serialize)]
struct PolicyOut {
    name: String,
    #[serde(rename = "listingFeeAtoms")]
    listing_fee_atoms: i64,
    #[serde(rename = "snapshotPriceAtoms")]
    snapshot_price_atoms: i64,
    #[serde(rename = "searchPriceAtoms")]
    search_price_atoms: i64,
    #[serde(rename = "testBudgetMaxAtoms")]
    test_budget_max_atoms: i64,
    #[serde(rename = "expiryDays")]
    expiry_days: i64,
    #[serde(rename = "pubKey")]
    pub_key: String,
}

impl PolicyOut {
    fn of(core: &Core) -> Self {
        let p = &core.policy;
        Self {
            name: p.name.clone(),
            listing_fee_atoms: p.listing_fee_atoms,
            snapshot_price_atoms: p.snapshot_price_atoms,
            search_price_atoms: p.search_price_atoms,
            test_budget_max_atoms: p.test_budget_max_atoms,
            expiry_days: p.expiry_days,
            pub_key: core.signer.public_hex(),
        }
    }
}

async fn register(
    core: &Arc<Core>,
    call: &CallContext,
    input: RegisterIn,
) -> Result<CallToolResult, ToolError> {
    let caller = call.caller();
    if core.self_uid.get() == Some(&caller) {
        return Err(ToolError::new("the directory cannot list itself"));
    }
    input
        .validate(core.policy.test_budget_max_atoms)
        .map_err(|e| ToolError::new(e.to_string()))?;
    let uid = caller.to_string();
    let fund_key = money::new_key().map_err(tool_err)?;
    let (now, fee) = (core.now(), core.policy.listing_fee_atoms);
    let busy = {
        let _index = core.lock.lock().await;
        core.store
            .update(&uid, |s| {
                if s.entry
                    .reg
                    .as_ref()
                    .is_some_and(|r| matches!(r.state, State::Crawling | State::Testing))
                {
                    return Ok(true);
                }
                s.entry.reg = Some(Registration {
                    state: State::AwaitingFunding,
                    description: input.description,
                    tags: normalize_tags(input.tags.as_deref().unwrap_or_default()),
                    fee_atoms: fee,
                    budget_atoms: input.test.max_atoms,
                    test: input.test,
                    call_key: String::new(),
                    paid_atoms: 0,
                    renewal: s.entry.live.is_some(),
                    created_at: now,
                    catalog: None,
                    test_outcome: None,
                    test_err: String::new(),
                    test_latency_ms: 0,
                });
                s.fund_key = fund_key;
                Ok::<_, DirError>(false)
            })
            .map_err(tool_err)?
    };
    if !busy {
        core.convert_lead(&uid).map_err(tool_err)?;
        core.clone().poke_funding(caller).await;
    }
    let mut status = core.status_for(caller).await.map_err(tool_err)?;
    if busy {
        BUSY_NOTE.clone_into(&mut status.note);
    }
    json_out(&status)
}

/// A refusal unless `uid` has a live listing.
pub(crate) fn need_listing(stored: &super::store::Stored) -> Result<(), DirError> {
    if stored.entry.live.is_none() {
        return refuse(NO_LISTING);
    }
    Ok(())
}
