//! The bridge page's JSON API, behind the session check of [`super::web`]:
//! `GET /ui/api/state` (everything the page shows), `POST
//! /ui/api/payments/<id>/approve|deny`, `POST /ui/api/settings` (mode and caps,
//! through the settings file's own strict parse).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::{Method, StatusCode};
use axum::response::Response;
use brmcp_adapters::protocol::ToolPrice;
use serde_json::{Value, json};

use super::web::{json as json_answer, text};
use crate::bridge::{
    Bridge, DAY_SECS, Inner, SETTINGS_FILE, Settings, SpendEntry, SpendStatus, lock,
};

/// Days the spending chart covers: 14, two weeks of daily bars, readable at a glance.
pub(crate) const CHART_DAYS: i64 = 14;

/// Spend log rows the page lists, newest first: 200; the command `brmcp bridge spend`
/// shows them all.
pub(crate) const MAX_UI_SPEND_ROWS: usize = 200;

/// The settings keys the page may change: the mode, the caps and the waits. Tokens,
/// bots and agents stay with the commands that manage them.
const EDITABLE: [&str; 5] = [
    "mode",
    "per_call_cap_atoms",
    "per_day_cap_atoms",
    "approval_timeout_secs",
    "tip_wait_secs",
];

/// Answers an API request for `path` (after `/ui/api`).
pub(super) async fn answer(
    inner: &Arc<Inner>,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Response {
    match (method.as_str(), path) {
        ("GET", "/state") => {
            // SQLite reads, off the runtime's threads.
            let inner = inner.clone();
            match tokio::task::spawn_blocking(move || state(&inner)).await {
                Ok(Ok(value)) => json_answer(StatusCode::OK, &value),
                Ok(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, &e),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        ("POST", "/settings") => edit_settings(inner, body).await,
        ("POST", rest) => {
            let decided = rest
                .strip_prefix("/payments/")
                .and_then(|p| p.rsplit_once('/'))
                .and_then(|(id, verb)| match verb {
                    "approve" => Some((id, true)),
                    "deny" => Some((id, false)),
                    _ => None,
                });
            let Some((id, approve)) = decided else {
                return text(StatusCode::NOT_FOUND, "not found");
            };
            if inner.policy.decide(id, approve) {
                json_answer(StatusCode::OK, &json!({"id": id, "approved": approve}))
            } else {
                text(
                    StatusCode::NOT_FOUND,
                    "no such payment waiting (decided already, or timed out)",
                )
            }
        }
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

/// Everything the page shows, at once.
fn state(inner: &Inner) -> Result<Value, String> {
    let settings = inner.settings();
    let now = inner.config.clock.now().secs();
    let spend = &inner.policy.spend;
    let entries = spend.entries().map_err(|e| e.to_string())?;
    let spent_24h = spend
        .spent_today(inner.config.clock.now())
        .map_err(|e| e.to_string())?;
    let label = |uid: &str| short_label(&settings, uid);
    let pending: Vec<Value> = inner
        .policy
        .pending()
        .into_iter()
        .map(|p| {
            json!({
                "id": p.id,
                "bot": label(&p.bot.to_string()),
                "tool": p.tool,
                "atoms": p.atoms,
                "quoted": p.quoted.map(|q| q.to_string()),
                "created": p.created.secs(),
                "agent": p.agent,
            })
        })
        .collect();
    let rows: Vec<Value> = entries
        .iter()
        .rev()
        .take(MAX_UI_SPEND_ROWS)
        .map(|e| {
            json!({
                "id": e.id,
                "ts": e.ts,
                "bot": label(&e.bot),
                "tool": e.tool,
                "atoms": e.atoms,
                "status": e.status.as_str(),
                "unconfirmed": e.unconfirmed,
                "err": e.err,
                "agent": e.agent,
            })
        })
        .collect();
    let chart: Vec<Value> = daily_spend(&entries, now, &label)
        .into_iter()
        .map(|(day, parts)| json!({"day": day, "parts": parts}))
        .collect();
    let mut agents = vec![json!({
        "name": crate::bridge::DEFAULT_AGENT,
        "per_call_cap_atoms": settings.per_call_cap_atoms,
        "per_day_cap_atoms": settings.per_day_cap_atoms,
        "spent_24h": spent_by(&entries, now, crate::bridge::DEFAULT_AGENT),
        "approver": settings.approver_of(&crate::bridge::Caller::Default),
    })];
    agents.extend(settings.agents.iter().map(|a| {
        json!({
            "name": a.name,
            "per_call_cap_atoms": a.per_call_cap_atoms,
            "per_day_cap_atoms": a.per_day_cap_atoms,
            "spent_24h": spent_by(&entries, now, &a.name),
            "bots": a.bots,
            "approver": settings.approver_of(&crate::bridge::Caller::Agent(a.name.clone())),
        })
    }));
    Ok(json!({
        "now": now,
        "settings": {
            "mode": settings.mode,
            "per_call_cap_atoms": settings.per_call_cap_atoms,
            "per_day_cap_atoms": settings.per_day_cap_atoms,
            "approval_timeout_secs": settings.approval_timeout_secs,
            "tip_wait_secs": settings.tip_wait_secs,
            "enabled": settings.enabled,
        },
        "spent_24h": spent_24h,
        "pending": pending,
        "bots": bots(inner, &settings),
        "agents": agents,
        "spend": rows,
        "chart": chart,
    }))
}

/// Uid characters a bot without a name is shown by: 12, as `brmcp bridge spend`
/// would be too wide for a chart's legend with all 64.
const UID_SHOWN: usize = 12;

/// A bot as the page shows it: the user's name for it, else the start of its uid.
fn short_label(settings: &Settings, uid: &str) -> String {
    settings
        .bot_names
        .iter()
        .find(|(_, u)| u.as_str() == uid)
        .map_or_else(
            || format!("{}…", uid.get(..UID_SHOWN).unwrap_or(uid)),
            |(name, _)| name.clone(),
        )
}

/// The allowed bots, each with its link's state and its tools as last listed.
fn bots(inner: &Inner, settings: &Settings) -> Vec<Value> {
    let links = lock(&inner.links).clone();
    settings
        .bots()
        .into_iter()
        .map(|bot| {
            let link = links.get(&bot.uid);
            let (state, error) = link.map_or(("idle", None), |l| l.state());
            let tools: Vec<Value> = link
                .map(|l| l.hub.tools())
                .iter()
                .flat_map(|tools| tools.iter())
                .map(|t| {
                    let price = match ToolPrice::from_meta(t.meta.as_deref()) {
                        Ok(Some(ToolPrice::Free)) => json!("free"),
                        Ok(Some(ToolPrice::Fixed(atoms))) => json!(atoms),
                        Ok(Some(ToolPrice::Dynamic)) => json!("dynamic"),
                        Ok(None) => json!("unpriced"),
                        Err(_) => json!("bad price"),
                    };
                    json!({
                        "name": t.name,
                        "description": t.description,
                        "price": price,
                    })
                })
                .collect();
            json!({
                "uid": bot.uid.to_string(),
                "name": bot.name,
                "state": state,
                "error": error,
                "tools": tools,
            })
        })
        .collect()
}

/// Whether a row counts as spent: paid, or pending (reserved against the cap).
fn counts(entry: &SpendEntry) -> bool {
    matches!(entry.status, SpendStatus::Paid | SpendStatus::Pending)
}

/// What `agent` spent in the 24 hours before `now`.
fn spent_by(entries: &[SpendEntry], now: i64, agent: &str) -> u64 {
    entries
        .iter()
        .filter(|e| counts(e) && e.agent == agent && e.ts > now - DAY_SECS)
        .map(|e| e.atoms)
        .sum()
}

/// The spending of each of the last [`CHART_DAYS`] days (UTC, oldest first, each by
/// its first second), split by `bot · tool` (bots named by `label`).
pub(crate) fn daily_spend(
    entries: &[SpendEntry],
    now: i64,
    label: &dyn Fn(&str) -> String,
) -> Vec<(i64, BTreeMap<String, u64>)> {
    let today = now.div_euclid(DAY_SECS);
    let first = today - (CHART_DAYS - 1);
    let mut days: Vec<(i64, BTreeMap<String, u64>)> = (first..=today)
        .map(|d| (d * DAY_SECS, BTreeMap::new()))
        .collect();
    for entry in entries.iter().filter(|e| counts(e)) {
        let day = entry.ts.div_euclid(DAY_SECS);
        if !(first..=today).contains(&day) {
            continue;
        }
        let Ok(at) = usize::try_from(day - first) else {
            continue;
        };
        let key = format!("{} · {}", label(&entry.bot), entry.tool);
        let sum = days[at].1.entry(key).or_default();
        *sum = sum.saturating_add(entry.atoms);
    }
    days
}

/// `POST /ui/api/settings`: the keys of [`EDITABLE`] laid over the live settings and
/// read as the file is (strict: a bad value is refused naming its key), then applied
/// and written as `brmcp bridge` does, unless the file changed since.
async fn edit_settings(inner: &Arc<Inner>, body: &[u8]) -> Response {
    let Ok(Value::Object(edit)) = serde_json::from_slice::<Value>(body) else {
        return text(StatusCode::BAD_REQUEST, "settings: not a JSON object");
    };
    if let Some(key) = edit.keys().find(|k| !EDITABLE.contains(&k.as_str())) {
        return text(
            StatusCode::BAD_REQUEST,
            &format!("settings: {key:?} cannot be changed here (only {EDITABLE:?})"),
        );
    }
    let base = inner.settings();
    let Ok(Value::Object(mut value)) = serde_json::to_value(&base) else {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "settings not serialized");
    };
    value.extend(edit);
    let path = inner.config.data_dir.join(SETTINGS_FILE);
    let edited = match Settings::parse(&path, Value::Object(value).to_string().as_bytes()) {
        Ok(edited) => edited,
        Err(e) => return text(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let bridge = Bridge {
        inner: inner.clone(),
    };
    match bridge.apply_over(edited, true, Some(&base)).await {
        Ok(_) => json_answer(StatusCode::OK, &json!({"saved": true})),
        Err(e) => text(StatusCode::CONFLICT, &e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ts: i64, bot: &str, tool: &str, atoms: u64, status: SpendStatus) -> SpendEntry {
        SpendEntry {
            id: 0,
            ts,
            bot: bot.into(),
            tool: tool.into(),
            rail: "tip".into(),
            atoms,
            status,
            err: None,
            unconfirmed: false,
            tip_pos: 0,
            outcome: None,
            agent: "default".into(),
        }
    }

    #[test]
    fn the_chart_counts_what_the_cap_counts_by_day_bot_and_tool() {
        let now = 100 * DAY_SECS + 50;
        let label = |b: &str| format!("[{b}]");
        let entries = [
            entry(now - 10, "a", "fortune", 10, SpendStatus::Paid),
            entry(now - 20, "a", "fortune", 5, SpendStatus::Pending),
            entry(now - 30, "a", "fortune", 1000, SpendStatus::Failed),
            entry(now - DAY_SECS, "b", "echo", 7, SpendStatus::Paid),
            // Older than the chart, and in the future (a clock stepped back): left out.
            entry(now - CHART_DAYS * DAY_SECS, "a", "x", 99, SpendStatus::Paid),
            entry(now + DAY_SECS, "a", "x", 99, SpendStatus::Paid),
            entry(now - 5, "a", "fortune", u64::MAX, SpendStatus::Paid),
        ];
        let days = daily_spend(&entries, now, &label);
        assert_eq!(days.len(), CHART_DAYS as usize);
        assert_eq!(days.last().unwrap().0, 100 * DAY_SECS);
        let today = &days.last().unwrap().1;
        assert_eq!(today.get("[a] · fortune"), Some(&u64::MAX), "saturates");
        assert_eq!(today.len(), 1);
        let yesterday = &days[days.len() - 2].1;
        assert_eq!(yesterday.get("[b] · echo"), Some(&7));
        let total: usize = days.iter().map(|d| d.1.len()).sum();
        assert_eq!(total, 2);
    }
}
