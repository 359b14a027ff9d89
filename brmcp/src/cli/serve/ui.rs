//! The operator's page of `brmcp serve`: calls and revenue per day (charts by tool),
//! callers with their balances, callers refused, upstream MCP servers and their
//! health, the router's counters. Off by default; `--ui-listen ADDR` starts it on a
//! loopback address (another only with `--ui-allow-remote`), and `brmcp serve ui`
//! prints its login URL, carrying the operator secret of [`OPERATOR_SECRET_FILE`].
//!
//! The page's front (assets, login, sessions, CSRF) is the bridge page's
//! ([`crate::bridge::ui::web`]); this module holds its listener and its data, read
//! from the harness.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::now;
use crate::bridge::HttpLimits;
use crate::bridge::approval::{existing_secret_in, secret_in};
use crate::bridge::ui::session::UiSessions;
use crate::bridge::ui::web::{
    Front, LOOPBACK_HOSTS, MAX_UI_BODY, PageAssets, front, host_allowed, json as json_answer,
    origin_allowed, run_listener, text,
};
use crate::cli::CliError;
use crate::server::Harness;
use crate::server::upstream::Upstreams;
use crate::status::router_counters;

/// The operator secret's file in the server's data directory, the owner's only.
pub(crate) const OPERATOR_SECRET_FILE: &str = "operator.secret";

/// Days the charts cover: 14, as the bridge page's.
const CHART_DAYS: i64 = 14;

/// Callers the page lists by balance, largest first: 200; `brmcp serve balances`
/// lists them all.
const MAX_BALANCE_ROWS: usize = 200;

/// Connections to the page at once: 32, an operator's browser tabs with room to
/// spare; past it, the next waits in the kernel's backlog. Each must send its headers
/// within the bridge's [`HttpLimits::header_read_timeout`] default.
const MAX_PAGE_CONNECTIONS: usize = 32;

/// Journal entries the page lists, newest first: 50.
const JOURNAL_ROWS: usize = 50;

const SERVE_PAGE: PageAssets = PageAssets {
    html: include_str!("ui/serve.html"),
    script: include_str!("ui/serve.js"),
    login_command: "brmcp serve --datadir DIR ui",
};

/// The page's listener state.
struct Page {
    harness: Harness,
    upstreams: Arc<Upstreams>,
    datadir: PathBuf,
    /// Host names (and the address) the `Host` and `Origin` headers may name.
    hosts: Vec<String>,
    sessions: UiSessions,
}

/// The running page: its address, and the token that stops it.
pub(super) struct OperatorPage {
    pub(super) addr: SocketAddr,
    stop: CancellationToken,
}

impl OperatorPage {
    /// Stops the listener.
    pub(super) fn stop(&self) {
        self.stop.cancel();
    }
}

/// Starts the page on `listen`, making the operator secret if there is none.
pub(super) async fn start(
    datadir: &Path,
    listen: SocketAddr,
    allow_remote: bool,
    harness: &Harness,
    upstreams: &Arc<Upstreams>,
) -> Result<OperatorPage, CliError> {
    if !listen.ip().is_loopback() && !allow_remote {
        return Err(CliError(format!(
            "refusing to serve the operator page on non-loopback {listen} without \
             --ui-allow-remote"
        )));
    }
    secret_in(datadir, OPERATOR_SECRET_FILE)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| CliError(format!("operator page: listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError(format!("operator page: {e}")))?;
    let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
    if !addr.ip().is_unspecified() {
        hosts.push(addr.ip().to_canonical().to_string());
    }
    let page = Arc::new(Page {
        harness: harness.clone(),
        upstreams: upstreams.clone(),
        datadir: datadir.to_owned(),
        hosts,
        sessions: UiSessions::default(),
    });
    let stop = CancellationToken::new();
    let limits = HttpLimits {
        max_connections: MAX_PAGE_CONNECTIONS,
        ..HttpLimits::default()
    };
    let classifying = page.clone();
    tokio::spawn(run_listener(
        listener,
        move |_, _, request| answer(page.clone(), request),
        move |parts: &axum::http::request::Parts| credentialed(&classifying, parts),
        limits,
        stop.clone(),
    ));
    Ok(OperatorPage { addr, stop })
}

/// The login URL of the page of the server running on `datadir`.
pub(super) fn login_url(datadir: &Path) -> Result<String, CliError> {
    let snapshot = crate::status::read(datadir)
        .map_err(CliError)?
        .filter(|s| s.role == "serve" && !s.stopped);
    let Some(snapshot) = snapshot else {
        return Err(CliError(format!(
            "no brmcp serve runs on {} (start it with --ui-listen 127.0.0.1:PORT)",
            datadir.display()
        )));
    };
    let Some(addr) = snapshot.ui else {
        return Err(CliError(format!(
            "the server of {} serves no operator page: start it with --ui-listen \
             127.0.0.1:PORT",
            datadir.display()
        )));
    };
    let secret = secret_in(datadir, OPERATOR_SECRET_FILE)?;
    Ok(format!(
        "http://{addr}{}/login#{secret}",
        crate::bridge::ui::UI_PATH
    ))
}

async fn answer(page: Arc<Page>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if !host_allowed(&page.hosts, &parts.headers) {
        return text(StatusCode::FORBIDDEN, "forbidden: host not allowed");
    }
    if !origin_allowed(&page.hosts, &parts.headers) {
        return text(StatusCode::FORBIDDEN, "forbidden: origin not allowed");
    }
    if !crate::bridge::ui::is_ui_path(parts.uri.path()) {
        return text(StatusCode::NOT_FOUND, "not found: the operator page is /ui");
    }
    let Ok(body) = axum::body::to_bytes(body, MAX_UI_BODY).await else {
        return text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large");
    };
    let secret = match existing_secret_in(&page.datadir, OPERATOR_SECRET_FILE) {
        Ok(secret) => secret,
        Err(e) => {
            tracing::warn!(error = %e, "operator secret not read");
            None
        }
    };
    // No agent token exists here; any bearer credential is refused as one would be.
    let bearer = parts
        .headers
        .contains_key(axum::http::header::AUTHORIZATION);
    match front(
        &SERVE_PAGE,
        &page.sessions,
        secret.as_deref(),
        bearer,
        &parts,
        &body,
    ) {
        Front::Answered(response) => response,
        Front::Api("/state") if parts.method == axum::http::Method::GET => {
            // SQLite reads, off the runtime's threads.
            let page = page.clone();
            match tokio::task::spawn_blocking(move || page.state()).await {
                Ok(Ok(value)) => json_answer(StatusCode::OK, &value),
                Ok(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, &e),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        Front::Api(_) => text(StatusCode::NOT_FOUND, "not found"),
    }
}

impl Page {
    /// Everything the page shows.
    fn state(&self) -> Result<Value, String> {
        let now = now();
        let harness = &self.harness;
        let stats = harness
            .router()
            .map(brmcp_adapters::Router::stats)
            .unwrap_or_default();
        let refused: Vec<Value> = harness
            .router()
            .map(brmcp_adapters::Router::refused)
            .unwrap_or_default()
            .iter()
            .rev()
            .map(|p| json!({"uid": p.to_string(), "allowed_now": harness.gate().allows(p)}))
            .collect();
        let mut value = json!({
            "now": now.secs(),
            "allowed_callers": harness.gate().uids().map_or(0, |u| u.len()),
            "calls_per_minute": harness.rate_limiter().calls_per_minute(),
            "sessions_open": stats.sessions_open,
            "router": router_counters(&stats),
            "refused": refused,
            "upstreams": self.upstreams.status(),
        });
        if let Some(ledger) = harness.ledger() {
            let e = |e: crate::server::LedgerError| e.to_string();
            let mut balances = ledger.balances().map_err(e)?;
            balances.sort_by_key(|b| std::cmp::Reverse(b.matoms));
            let balances: Vec<Value> = balances
                .iter()
                .take(MAX_BALANCE_ROWS)
                .map(|b| json!({"caller": b.caller.to_string(), "matoms": b.matoms}))
                .collect();
            let journal: Vec<Value> = ledger
                .journal(None, JOURNAL_ROWS)
                .map_err(e)?
                .iter()
                .map(|j| {
                    json!({
                        "id": j.id.get(),
                        "caller": j.caller.to_string(),
                        "tool": j.tool,
                        "atoms": j.price_atoms,
                        "state": j.state.as_str(),
                        "started": j.started_at.secs(),
                    })
                })
                .collect();
            value["totals"] = json!(ledger.totals(now).map_err(e)?);
            value["daily"] = json!(ledger.daily_revenue(now, CHART_DAYS).map_err(e)?);
            value["balances"] = json!(balances);
            value["journal"] = json!(journal);
        }
        Ok(value)
    }
}

/// Whether the request `parts` carries a live session of the page: the listener
/// keeps the connections of such requests.
fn credentialed(page: &Page, parts: &axum::http::request::Parts) -> bool {
    let cookie = parts
        .headers
        .get(axum::http::header::COOKIE)
        .and_then(|v| v.to_str().ok());
    page.sessions
        .check(cookie, std::time::Instant::now())
        .is_some()
}
