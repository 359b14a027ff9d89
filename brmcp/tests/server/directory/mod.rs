//! The directory (`brmcp::directory`) over the in-memory fabric: the Go directory's
#![allow(dead_code, unreachable_pub, missing_docs)]
//! acceptance scenarios with the same observable results, restarts, and the snapshot
//! signature rules. One directory, one provider with a free `echo` and a 500-atom
//! `paid_echo`, a consumer and an operator; a fake payer tips the provider's harness.

mod answer_fit;
mod bounds;
mod crash;
mod federation;
mod files;
mod pipeline;
mod restart;

use brmcp::adapters::protocol::result_text as text_of;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{BoxError, PeerId, Router, RouterConfig};
use brmcp::directory::{Directory, Entry, PayError, PayFuture, Payer, Policy, State};
use brmcp::server::{Harness, HarnessBuilder, ManualClock, Tip, ToolSpec};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};

use crate::support::{EchoArgs, T0};

pub const DIR: u32 = 10;
pub const PROVIDER: u32 = 11;
pub const CONSUMER: u32 = 12;
pub const ADMIN: u32 = 13;

/// The price of the provider's `paid_echo`.
pub const PRICE: u64 = 500;

/// The Go tests' fixture policy.
pub fn policy() -> Policy {
    Policy {
        admin_uids: vec![uid(ADMIN).to_string()],
        listing_fee_atoms: 1000,
        snapshot_price_atoms: 50,
        expiry_days: 30,
        calls_per_minute: 1000,
        test_budget_max_atoms: 100_000,
        name: "dir-test".into(),
        ..Policy::default()
    }
}

/// How long a [`Mode::Slow`] payment takes: well inside the grace a stopping
/// directory gives a payment on its way (5 s).
pub const SLOW_PAYMENT: Duration = Duration::from_millis(500);

/// How the fake payer behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Tips the provider's harness and confirms.
    Pay,
    /// Never resolves (a payment stuck on the rail).
    Hang,
    /// Tips the provider's harness and confirms after [`SLOW_PAYMENT`].
    Slow,
    /// Fails definitively without paying.
    Fail,
    /// Confirms without paying (a rail that lies, or a payee that keeps the tip and
    /// still refuses).
    Vanish,
}

/// A payer that credits the provider's harness directly.
#[derive(Clone)]
pub struct FakePayer {
    pub provider: Harness,
    pub calls: Arc<AtomicUsize>,
    pub seq: Arc<AtomicU64>,
    pub mode: Mode,
}

impl Payer for FakePayer {
    fn pay(&self, payee: PeerId, atoms: u64) -> PayFuture<'_> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            assert_eq!(payee, uid(PROVIDER));
            match self.mode {
                Mode::Pay => {}
                Mode::Slow => tokio::time::sleep(SLOW_PAYMENT).await,
                Mode::Hang => std::future::pending::<()>().await,
                Mode::Fail => return Err(PayError::Failed(BoxError::from("rail down"))),
                Mode::Vanish => return Ok(()),
            }
            let seq = self.seq.fetch_add(1, Ordering::SeqCst);
            self.provider
                .record_tip(Tip {
                    seq,
                    caller: uid(DIR),
                    matoms: atoms * 1000,
                })
                .await
                .map_err(|e| PayError::Failed(BoxError::from(e.to_string())))?;
            Ok(())
        })
    }
}

/// The provider: `echo` (free) and `paid_echo` (counting its runs).
pub struct Provider {
    pub harness: Harness,
    pub router: Router,
    pub runs: Arc<AtomicUsize>,
    pub _dir: tempfile::TempDir,
}

pub fn provider(fabric: &Fabric, clock: &ManualClock) -> Provider {
    provider_selling(fabric, clock, |harness, counter| {
        harness
            .tool(ToolSpec::free(
                "echo",
                "Echo the text back",
                |_, a: EchoArgs| async move { Ok(json!({ "echo": a.text })) },
            ))
            .tool(ToolSpec::fixed(
                "paid_echo",
                "Echo the text back, paid",
                PRICE,
                move |_, a: EchoArgs| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    async move { Ok(json!({ "echo": a.text })) }
                },
            ))
    })
}

/// A provider on `fabric` allowing every caller 10 000 calls a minute, selling the
/// tools `tools` adds to its harness (given the counter of [`Provider::runs`]).
pub fn provider_selling(
    fabric: &Fabric,
    clock: &ManualClock,
    tools: impl FnOnce(HarnessBuilder, Arc<AtomicUsize>) -> HarnessBuilder,
) -> Provider {
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let harness = Harness::builder()
        .data_dir(dir.path())
        .clock(clock.clone())
        .allow(|_| true)
        .calls_per_minute(10_000);
    let harness = tools(harness, runs.clone()).build().unwrap();
    let router = harness.start(fabric.sender(uid(PROVIDER))).unwrap();
    fabric.attach(uid(PROVIDER), &router);
    Provider {
        harness,
        router,
        runs,
        _dir: dir,
    }
}

/// The whole setup.
pub struct World {
    pub fabric: Fabric,
    pub clock: ManualClock,
    pub provider: Provider,
    pub payer: FakePayer,
    pub dir: Option<Directory>,
    pub dir_router: Router,
    pub data: tempfile::TempDir,
    pub tips: AtomicU64,
}

pub async fn start_directory(
    fabric: &Fabric,
    clock: &ManualClock,
    data: &Path,
    payer: FakePayer,
) -> (Directory, Router) {
    let directory = Directory::builder()
        .data_dir(data)
        .policy(policy())
        .clock(clock.clone())
        .payer(payer)
        .build()
        .unwrap();
    let router = directory.start(fabric.sender(uid(DIR))).unwrap();
    fabric.attach(uid(DIR), &router);
    directory.resume().await.unwrap();
    (directory, router)
}

pub async fn world_with(mode: Mode) -> World {
    world_selling(provider, mode).await
}

/// The whole setup, with the provider `make_provider` makes and a payer in `mode`.
pub async fn world_selling(
    make_provider: impl FnOnce(&Fabric, &ManualClock) -> Provider,
    mode: Mode,
) -> World {
    let fabric = Fabric::new(12);
    let clock = ManualClock::at_unix(T0);
    let provider = make_provider(&fabric, &clock);
    let payer = FakePayer {
        provider: provider.harness.clone(),
        calls: Arc::new(AtomicUsize::new(0)),
        seq: Arc::new(AtomicU64::new(1)),
        mode,
    };
    let data = tempfile::tempdir().unwrap();
    let (directory, dir_router) =
        start_directory(&fabric, &clock, data.path(), payer.clone()).await;
    World {
        fabric,
        clock,
        provider,
        payer,
        dir: Some(directory),
        dir_router,
        data,
        tips: AtomicU64::new(1),
    }
}

pub async fn world() -> World {
    world_with(Mode::Pay).await
}

pub type Session = RunningService<RoleClient, ()>;

impl World {
    /// The running directory.
    pub fn directory(&self) -> &Directory {
        self.dir.as_ref().expect("a directory runs")
    }

    /// A session from the provider (through its own router) to the directory.
    pub async fn as_provider(&self) -> Session {
        ().serve(self.provider.router.dial(uid(DIR)).unwrap())
            .await
            .unwrap()
    }

    /// A session from `who` (a plain client) to the directory.
    pub async fn as_user(&self, who: u32) -> (Router, Session) {
        let router = self.fabric.router(uid(who), RouterConfig::client());
        let session = ().serve(router.dial(uid(DIR)).unwrap()).await.unwrap();
        (router, session)
    }

    /// The provider tips the directory.
    pub async fn tip(&self, atoms: u64) {
        let seq = self.tips.fetch_add(1, Ordering::SeqCst);
        self.directory()
            .harness()
            .record_tip(Tip {
                seq,
                caller: uid(PROVIDER),
                matoms: atoms * 1000,
            })
            .await
            .unwrap();
    }

    pub fn entry(&self) -> Entry {
        self.directory().entry(&uid(PROVIDER)).unwrap()
    }

    /// Waits until the provider's registration reaches `state` (or has gone).
    pub async fn wait_reg(&self, state: Option<State>) -> Entry {
        self.wait_reg_for(state, Duration::from_secs(10)).await
    }

    /// [`wait_reg`](Self::wait_reg) for up to `limit`.
    pub async fn wait_reg_for(&self, state: Option<State>, limit: Duration) -> Entry {
        let polls = limit.as_millis() / 10;
        for _ in 0..polls {
            let entry = self.entry();
            if entry.reg.as_ref().map(|r| r.state) == state {
                self.directory().settle().await;
                return self.entry();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("registration never reached {state:?}: {:?}", self.entry());
    }

    /// The directory's ledger balance of the provider, in atoms.
    pub async fn balance(&self) -> u64 {
        self.directory()
            .harness()
            .balance_matoms(uid(PROVIDER))
            .await
            .unwrap()
            / 1000
    }
}

/// The standard registration: `paid_echo` as the test with `budget`.
pub fn registration(budget: i64) -> Value {
    json!({
        "description": "An echo provider",
        "tags": ["Echo", "test", "echo"],
        "test": {"tool": "paid_echo", "args": {"text": "hi"}, "maxAtoms": budget},
    })
}

pub async fn raw(session: &Session, tool: &'static str, args: Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(tool);
    if let Value::Object(args) = args {
        params = params.with_arguments(args);
    }
    session.call_tool(params).await.unwrap()
}

/// Calls `tool` and returns its JSON text (a tool error panics).
pub async fn ok(session: &Session, tool: &'static str, args: Value) -> Value {
    let result = raw(session, tool, args).await;
    let text = text_of(&result);
    assert_ne!(result.is_error, Some(true), "{tool}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{tool}: {e}: {text}"))
}

/// Calls `tool` expecting a tool error; returns its text.
pub async fn refused(session: &Session, tool: &'static str, args: Value) -> String {
    let result = raw(session, tool, args).await;
    assert_eq!(result.is_error, Some(true), "{tool}: {}", text_of(&result));
    text_of(&result)
}

pub fn provider_uid() -> String {
    uid(PROVIDER).to_string()
}
