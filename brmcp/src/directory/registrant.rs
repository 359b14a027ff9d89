//! The provider side: a [`Registrant`] registers the provider's own harness with
//! directories and funds the invoice within an auto-fund policy, and serves the
//! `listing_invite` tool directories call to invite it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use brmcp_adapters::protocol::result_text;
use brmcp_adapters::{PeerId, Router};
use rmcp::model::{CallToolRequestParams, JsonObject};
use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use super::client::{self, PAY_WAIT, Payer};
use super::federation::{InviteIn, InviteOut};
use super::types::{RegisterIn, State, StatusOut, TestSpec};
use crate::server::{CallContext, Clock, SystemClock, ToolError, ToolSpec};

/// A listing with more than this much time left is left alone by [`Registrant::register`].
pub const RENEW_AHEAD: Duration = Duration::from_secs(7 * 86_400);

/// The rolling window of the monthly auto-fund cap.
pub(crate) const FUND_WINDOW: Duration = Duration::from_secs(30 * 86_400);

/// The fund history's file in the registrant's data directory.
pub const FUND_HISTORY_FILE: &str = "registrant.sqlite";

/// `PRAGMA application_id` of the fund history: "brrg" in ASCII.
pub const FUND_HISTORY_APPLICATION_ID: i32 = 0x6272_7267;

/// How long a fund history write waits for another connection's (one short insert).
const HISTORY_BUSY_WAIT: Duration = Duration::from_secs(5);

/// The fund history as [`crate::secure_fs::open_stamped_sqlite`] opens it. Histories
/// made before the stamp have the same table, so they are stamped as they are.
const HISTORY: crate::secure_fs::SqliteKind = crate::secure_fs::SqliteKind {
    what: "registrant fund history",
    application_id: FUND_HISTORY_APPLICATION_ID,
    version: 1,
    schema: "CREATE TABLE IF NOT EXISTS fund_history (
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 ts INTEGER NOT NULL,
                 directory_uid TEXT NOT NULL,
                 atoms INTEGER NOT NULL
             ) STRICT;",
    unstamped_table: "fund_history",
    migrations: &[],
};

/// The MCP client name a registrant dials with, unless configured.
pub const DEFAULT_REGISTRANT_NAME: &str = "registrant";

/// The auto-fund policy (the `directory.auto_fund` block of the Go host's config).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutoFund {
    /// The master switch; off, every spend is declined.
    pub enabled: bool,
    /// The most one spend may be (0: no cap).
    pub max_atoms_per_request: i64,
    /// The most spent in any 30 days (0: no cap).
    pub max_atoms_per_month: i64,
    /// The directories that may be funded (empty: any).
    pub allowed_directory_uids: Vec<String>,
}

/// Told about every registration outcome: the directory, its status, an error.
pub type Notify = Arc<dyn Fn(PeerId, &StatusOut, Option<&str>) + Send + Sync>;

/// What a registrant registers, and how it may pay.
#[derive(Clone)]
pub struct RegistrantConfig {
    /// The registration submitted to every directory.
    pub description: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its test.
    pub test: TestSpec,
    /// The auto-fund policy.
    pub auto_fund: AutoFund,
    /// Where the fund history lives.
    pub data_dir: PathBuf,
    /// How invoices are paid.
    pub payer: Arc<dyn Payer>,
    /// The clock (default: the system's).
    pub clock: Arc<dyn Clock>,
    /// Told about outcomes (default: a log line).
    pub notify: Option<Notify>,
    /// The MCP client name.
    pub name: String,
}

impl RegistrantConfig {
    /// A configuration with the defaults for everything but the registration, the
    /// data directory and the payer.
    pub fn new(
        description: impl Into<String>,
        test: TestSpec,
        data_dir: impl Into<PathBuf>,
        payer: impl Payer,
    ) -> Self {
        Self {
            description: description.into(),
            tags: Vec::new(),
            test,
            auto_fund: AutoFund::default(),
            data_dir: data_dir.into(),
            payer: Arc::new(payer),
            clock: Arc::new(SystemClock),
            notify: None,
            name: DEFAULT_REGISTRANT_NAME.to_owned(),
        }
    }
}

/// Registers the host's harness with directories.
#[derive(Clone)]
pub struct Registrant {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Registrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registrant").finish_non_exhaustive()
    }
}

struct Inner {
    config: RegistrantConfig,
    history: Mutex<Connection>,
    router: OnceLock<Router>,
}

impl Registrant {
    /// Checks the registration and opens the fund history.
    ///
    /// # Errors
    /// The registration's first broken rule, or the history's store, prefixed
    /// `registrant: `.
    pub fn new(config: RegistrantConfig) -> Result<Self, String> {
        let submitted = RegisterIn {
            description: config.description.clone(),
            tags: Some(config.tags.clone()),
            test: config.test.clone(),
        };
        submitted
            .validate(config.test.max_atoms)
            .map_err(|e| format!("registrant: {e}"))?;
        crate::secure_fs::create_dir(&config.data_dir)
            .map_err(|e| format!("registrant: {}: {e}", config.data_dir.display()))?;
        let path = config.data_dir.join(FUND_HISTORY_FILE);
        let conn = crate::secure_fs::open_stamped_sqlite(&path, HISTORY_BUSY_WAIT, &HISTORY)
            .map_err(|e| format!("registrant: fund history {}: {e}", path.display()))?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                history: Mutex::new(conn),
                router: OnceLock::new(),
            }),
        })
    }

    /// The router the host serves its harness on (and dials directories through).
    pub fn attach(&self, router: Router) {
        let _ = self.inner.router.set(router);
    }

    fn now(&self) -> i64 {
        self.inner.config.clock.now().secs()
    }

    fn notify(&self, directory: PeerId, status: &StatusOut, err: Option<&str>) {
        match &self.inner.config.notify {
            Some(notify) => notify(directory, status, err),
            None => tracing::info!(%directory, ?status, error = ?err, "directory registration"),
        }
    }

    /// Atoms funded since `since` (unix seconds).
    ///
    /// # Errors
    /// The history's store.
    pub fn total_since(&self, since: i64) -> Result<i64, String> {
        let conn = self
            .inner
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        conn.query_row(
            "SELECT COALESCE(SUM(atoms), 0) FROM fund_history WHERE ts >= ?1",
            [since],
            |r| r.get(0),
        )
        .map_err(|e| format!("fund history: {e}"))
    }

    /// Records a spend before it is paid.
    ///
    /// # Errors
    /// The history's store.
    pub fn record_fund(&self, ts: i64, directory: &PeerId, atoms: i64) -> Result<(), String> {
        let conn = self
            .inner
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        conn.execute(
            "INSERT INTO fund_history (ts, directory_uid, atoms) VALUES (?1, ?2, ?3)",
            params![ts, directory.to_string(), atoms],
        )
        .map(drop)
        .map_err(|e| format!("fund history: {e}"))
    }

    /// Whether the policy lets this registrant spend `atoms` on `directory`.
    ///
    /// # Errors
    /// The reason it does not.
    pub fn allow_fund(&self, directory: &PeerId, atoms: i64) -> Result<(), String> {
        let policy = &self.inner.config.auto_fund;
        if !policy.enabled {
            return Err("auto-funding is disabled".to_owned());
        }
        if !policy.allowed_directory_uids.is_empty()
            && !policy
                .allowed_directory_uids
                .iter()
                .any(|u| u.parse::<PeerId>().ok().as_ref() == Some(directory))
        {
            return Err("directory not in the allowlist".to_owned());
        }
        let cap = policy.max_atoms_per_request;
        if cap > 0 && atoms > cap {
            return Err(format!("{atoms} atoms exceeds the {cap} per-request cap"));
        }
        let cap = policy.max_atoms_per_month;
        if cap > 0 {
            let window = i64::try_from(FUND_WINDOW.as_secs()).unwrap_or(i64::MAX);
            let spent = self.total_since(self.now() - window)?;
            if spent + atoms > cap {
                return Err(format!(
                    "{atoms} atoms would exceed the {cap} monthly cap ({spent} spent)"
                ));
            }
        }
        Ok(())
    }

    /// Registers with `directory` (leaving a listing with more than [`RENEW_AHEAD`]
    /// left alone) and funds the invoice if the policy allows; every outcome is
    /// notified. Does not wait for verification.
    ///
    /// # Errors
    /// Why it stopped.
    pub async fn register(&self, directory: PeerId) -> Result<StatusOut, String> {
        let result = self.try_register(directory).await;
        match &result {
            Ok(status) => self.notify(directory, status, None),
            Err((status, e)) => self.notify(directory, status, Some(e)),
        }
        result.map_err(|(_, e)| e)
    }

    async fn try_register(&self, directory: PeerId) -> Result<StatusOut, (StatusOut, String)> {
        let none = || StatusOut::of(State::None);
        let config = &self.inner.config;
        let router = self
            .inner
            .router
            .get()
            .ok_or_else(|| (none(), "registrant: not attached to a router".to_owned()))?;
        let session = client::dial(router, directory, &config.name)
            .await
            .map_err(|e| (none(), e))?;
        let call = |tool: &'static str, args: Option<JsonObject>| {
            let session = &session;
            async move {
                let mut params = CallToolRequestParams::new(tool);
                params.arguments = args;
                let result = session
                    .call_tool(params)
                    .await
                    .map_err(|e| format!("{tool}: {e}"))?;
                let text = result_text(&result);
                if result.is_error == Some(true) {
                    return Err(format!("{tool}: {}", client::result_text_capped(&result)));
                }
                serde_json::from_str::<StatusOut>(&text).map_err(|e| format!("{tool}: {e}"))
            }
        };
        let ahead = i64::try_from(RENEW_AHEAD.as_secs()).unwrap_or(i64::MAX);
        if let Ok(status) = call("my_status", None).await
            && status.state == State::Listed
            && status.expires_at > self.now() + ahead
        {
            return Ok(status);
        }
        let args = serde_json::json!({
            "description": config.description,
            "tags": config.tags,
            "test": config.test,
        });
        let serde_json::Value::Object(args) = args else {
            unreachable!("an object")
        };
        let status = call("register", Some(args))
            .await
            .map_err(|e| (none(), e))?;
        let shortfall = status.shortfall_atoms;
        if shortfall <= 0 {
            return Ok(status);
        }
        if let Err(reason) = self.allow_fund(&directory, shortfall) {
            return Err((status, format!("funding declined: {reason}")));
        }
        self.record_fund(self.now(), &directory, shortfall)
            .map_err(|e| (status.clone(), e))?;
        let amount = u64::try_from(shortfall).unwrap_or(0);
        let paid = tokio::time::timeout(PAY_WAIT, config.payer.pay(directory, amount)).await;
        match paid {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err((status, format!("funding payment: {e}"))),
            Err(_) => return Err((status, format!("funding payment: {}", client::UNCONFIRMED))),
        }
        call("my_status", None).await.map_err(|e| (status, e))
    }

    /// The `listing_invite` tool for the host's harness: the calling directory is
    /// invited; with the policy's consent the registrant registers with it.
    pub fn listing_invite(&self) -> ToolSpec {
        let me = self.clone();
        ToolSpec::free(
            "listing_invite",
            "A directory invites this bot to register for listing.",
            move |call: CallContext, input: InviteIn| {
                let me = me.clone();
                async move {
                    let directory = call.caller();
                    let estimate = input.listing_fee_atoms + me.inner.config.test.max_atoms;
                    let out = match me.allow_fund(&directory, estimate) {
                        Err(reason) => {
                            let mut status = StatusOut::of(State::None);
                            status.note = format!("invite declined: {reason}");
                            me.notify(directory, &status, None);
                            InviteOut {
                                accepted: false,
                                note: reason,
                            }
                        }
                        Ok(()) => {
                            tokio::spawn(async move {
                                let _ = me.register(directory).await;
                            });
                            InviteOut {
                                accepted: true,
                                note: String::new(),
                            }
                        }
                    };
                    super::tools::json_out(&out).map_err(|e: ToolError| e)
                }
            },
        )
    }
}
