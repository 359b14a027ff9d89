//! The operator's page of `brmcp serve`: calls and revenue per day (charts by tool),
//! callers with their balances, callers refused, upstream MCP servers and their
//! health, the router's counters. Off by default; `--ui-listen ADDR` starts it on a
//! loopback address (another only with `--ui-allow-remote`), and `brmcp serve ui`
//! prints its login URL, carrying a single-use login code made under the operator
//! secret of [`OPERATOR_SECRET_FILE`] (`ui --rotate` replaces the secret first,
//! ending every session the old one opened).
//!
//! The page's front (assets, login codes, sessions bound to the page's origin, bodies
//! under a deadline) is the bridge page's ([`crate::bridge::ui::web`]); this module
//! holds its listener and its data, read from the harness.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::now;
use crate::bridge::HttpLimits;
use crate::bridge::approval::secret_in;
use crate::bridge::ui::session::UiSessions;
use crate::bridge::ui::web::{
    Front, LOOPBACK_HOSTS, PageAssets, PageGate, front, host_allowed, json as json_answer,
    login_code, origin_allowed, run_listener, text,
};
use crate::cli::CliError;
use crate::server::Harness;
use crate::server::upstream::Upstreams;
use crate::status::router_counters;

/// The operator secret's file in the server's data directory, the owner's only.
pub(crate) const OPERATOR_SECRET_FILE: &str = "operator.secret";

/// The login codes' directory in the server's data directory.
pub(crate) const OPERATOR_LOGIN_CODES: &str = "operator.login";

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
    name: "serve",
    html: include_str!("ui/serve.html"),
    script: include_str!("ui/serve.js"),
    login_command: "brmcp serve --datadir DIR ui",
    secret_file: OPERATOR_SECRET_FILE,
    codes_dir: OPERATOR_LOGIN_CODES,
};

/// The page's listener state.
pub(crate) struct Page {
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
        move |parts: &Parts| credentialed(&classifying, parts),
        limits,
        stop.clone(),
    ));
    Ok(OperatorPage { addr, stop })
}

/// The login URL of the page of the server running on `datadir`, with a fresh
/// single-use code; `rotate`: after replacing the operator secret.
pub(super) fn login_url(datadir: &Path, rotate: bool) -> Result<String, CliError> {
    if rotate {
        // Even with no server running: the old secret's sessions end at its start.
        login_code(&SERVE_PAGE, datadir, true, now().secs())?;
        eprintln!("operator secret rotated: every page session it opened has ended");
    }
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
    let code = login_code(&SERVE_PAGE, datadir, false, now().secs())?;
    Ok(format!(
        "http://{addr}{}/login#{code}",
        crate::bridge::ui::UI_PATH
    ))
}

impl Page {
    fn gate(&self) -> PageGate<'_> {
        PageGate {
            assets: &SERVE_PAGE,
            sessions: &self.sessions,
            data_dir: &self.datadir,
        }
    }
}

/// Whether the request `parts` carries a live session of the operator page (its
/// session header, of a session the current operator secret opened), changing
/// nothing: for the listener to tell the operator's requests from others (the
/// bridge page's [`crate::bridge::ui::credentialed`] for this page).
pub(crate) fn credentialed(page: &Page, parts: &Parts) -> bool {
    page.gate().credentialed(parts)
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
    // No agent token exists here; any bearer credential is refused as one would be.
    let bearer = parts
        .headers
        .contains_key(axum::http::header::AUTHORIZATION);
    match front(&page.gate(), bearer, &parts, body, now().secs()).await {
        Front::Answered(response) => response,
        Front::Api("/state", _) if parts.method == axum::http::Method::GET => {
            // SQLite reads, off the runtime's threads.
            let page = page.clone();
            match tokio::task::spawn_blocking(move || page.state()).await {
                Ok(Ok(value)) => json_answer(StatusCode::OK, &value),
                Ok(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, &e),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        Front::Api(..) => text(StatusCode::NOT_FOUND, "not found"),
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
