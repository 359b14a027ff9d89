//! Shared setup of the serving harness's integration tests: a harness on an in-memory
//! Bison Relay fabric, rmcp clients for other identities, and a few tools that count
//! their runs.
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod ledger;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::wire::UnixTime;
use brmcp::adapters::{PeerId, Router, RouterConfig};
use brmcp::server::{
    CALL_KEY_META, CallContext, Harness, HarnessBuilder, ManualClock, NoArgs, Tip, TipOutcome,
    ToolError, ToolSpec,
};
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::{RoleClient, RunningService};
use rmcp::{ServiceError, ServiceExt, schemars};

/// The serving harness's identity.
pub const SERVER: u32 = 1;
/// An allowed caller.
pub const ALICE: u32 = 2;
/// Another allowed caller.
pub const BOB: u32 = 3;
/// A caller nobody allowed.
pub const MALLORY: u32 = 4;

/// 2026-01-01T00:00:00Z: where every test clock starts.
pub const T0: u64 = 1_767_225_600;

/// What the test tools saw.
#[derive(Debug, Default)]
pub struct Probe {
    /// Runs of any counting tool.
    pub runs: AtomicUsize,
}

impl Probe {
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    /// The text to echo back.
    pub text: String,
}

/// `echo` (free): returns `{"echo": text}` as structured content.
pub fn echo(probe: &Arc<Probe>) -> ToolSpec {
    let probe = probe.clone();
    ToolSpec::free("echo", "Echo the text back", move |_, args: EchoArgs| {
        probe.runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok(serde_json::json!({ "echo": args.text })) }
    })
}

/// `fortune` at `price` atoms: its text names the caller and counts the runs, so two
/// runs never answer alike.
pub fn fortune(probe: &Arc<Probe>, price: u64) -> ToolSpec {
    let probe = probe.clone();
    ToolSpec::fixed(
        "fortune",
        "A fortune",
        price,
        move |call: CallContext, _: NoArgs| {
            let n = probe.runs.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                Ok::<_, ToolError>(format!(
                    "fortune #{n} for {} ({} atoms)",
                    call.caller(),
                    call.price_atoms()
                ))
            }
        },
    )
}

/// `fail` at `price` atoms: always fails with `out of fortunes`.
pub fn fail(probe: &Arc<Probe>, price: u64) -> ToolSpec {
    let probe = probe.clone();
    ToolSpec::fixed("fail", "Always fails", price, move |_, _: NoArgs| {
        probe.runs.fetch_add(1, Ordering::SeqCst);
        async { Err::<String, _>(ToolError::new("out of fortunes")) }
    })
}

/// A harness on a fabric, with a manual clock and a data directory.
pub struct Env {
    pub fabric: Fabric,
    pub harness: Harness,
    pub router: Router,
    pub clock: ManualClock,
    pub dir: tempfile::TempDir,
}

/// A builder with a fresh data directory and a manual clock at [`T0`], allowing
/// [`ALICE`] and [`BOB`].
pub fn builder() -> (HarnessBuilder, ManualClock, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at_unix(T0);
    let builder = Harness::builder()
        .data_dir(dir.path())
        .clock(clock.clone())
        .allowed_uids([uid(ALICE), uid(BOB)]);
    (builder, clock, dir)
}

/// Starts `harness` as [`SERVER`] on `fabric`.
/// `slow` at `price`: says it started on `started`, then never finishes.
pub fn hanging_at(price: u64, started: tokio::sync::mpsc::UnboundedSender<()>) -> ToolSpec {
    ToolSpec::fixed("slow", "Slow paid work", price, move |_, _: NoArgs| {
        let _ = started.send(());
        async {
            std::future::pending::<()>().await;
            Ok::<_, ToolError>("unreachable")
        }
    })
}

/// A harness in `dir` at [`T0`] selling `tool` to [`ALICE`] only.
pub fn alice_harness(dir: &std::path::Path, tool: ToolSpec) -> Harness {
    Harness::builder()
        .data_dir(dir)
        .clock(ManualClock::at_unix(T0))
        .allowed_uids([peer(ALICE)])
        .tool(tool)
        .build()
        .unwrap()
}

/// `server`, just started, refunded nothing at open and owes nobody a notice at `now`.
pub fn nothing_interrupted(server: &Harness, now: UnixTime) {
    assert_eq!(server.refunded_at_open(), 0);
    assert!(
        server
            .ledger()
            .unwrap()
            .interrupted(now)
            .unwrap()
            .is_empty()
    );
}

pub fn start(fabric: &Fabric, harness: &Harness) -> Router {
    let router = harness.start(fabric.sender(uid(SERVER))).unwrap();
    fabric.attach(uid(SERVER), &router);
    router
}

/// Builds and starts the harness on a fresh fabric.
pub fn env(builder: HarnessBuilder, clock: ManualClock, dir: tempfile::TempDir) -> Env {
    let fabric = Fabric::new(7);
    let harness = builder.build().unwrap();
    let router = start(&fabric, &harness);
    Env {
        fabric,
        harness,
        router,
        clock,
        dir,
    }
}

/// A client session and the router it runs over (the fabric holds routers weakly).
pub struct Client {
    pub router: Router,
    pub service: RunningService<RoleClient, ()>,
}

impl std::ops::Deref for Client {
    type Target = RunningService<RoleClient, ()>;
    fn deref(&self) -> &Self::Target {
        &self.service
    }
}

/// An initialized client session from identity `who` to the server.
pub async fn client(fabric: &Fabric, who: u32) -> Client {
    let router = fabric.router(uid(who), RouterConfig::client());
    let transport = router.dial(uid(SERVER)).unwrap();
    let service = ().serve(transport).await.expect("initialize");
    Client { router, service }
}

/// `tools/call` params with JSON arguments and an optional call key.
pub fn params(
    name: &'static str,
    args: serde_json::Value,
    key: Option<&str>,
) -> CallToolRequestParams {
    let serde_json::Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    let mut params = CallToolRequestParams::new(name).with_arguments(args);
    if let Some(key) = key {
        let mut meta = RequestMetaObject::default();
        meta.insert(CALL_KEY_META.into(), key.into());
        params.meta = Some(meta);
    }
    params
}

/// Calls `name` and returns the result; a JSON-RPC error panics.
pub async fn call(
    client: &Client,
    name: &'static str,
    args: serde_json::Value,
    key: Option<&str>,
) -> CallToolResult {
    client
        .call_tool(params(name, args, key))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Calls `name` expecting a JSON-RPC error.
pub async fn call_err(client: &Client, name: &'static str) -> ServiceError {
    client
        .call_tool(params(name, serde_json::json!({}), None))
        .await
        .expect_err("a JSON-RPC error")
}

pub use brmcp_test_support::text;

/// Whether the result is a tool error.
pub fn is_error(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
}

/// Records a tip of `matoms` from `who` with sequence id `seq`.
pub async fn tip(harness: &Harness, seq: u64, who: u32, matoms: u64) -> TipOutcome {
    harness
        .record_tip(Tip {
            seq,
            caller: uid(who),
            matoms,
        })
        .await
        .unwrap()
}

/// A caller's balance in milliatoms.
pub async fn balance(harness: &Harness, who: u32) -> u64 {
    harness.balance_matoms(uid(who)).await.unwrap()
}

/// Polls `cond` every millisecond for up to five seconds.
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..5_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("timed out waiting for {what}");
}

pub fn peer(who: u32) -> PeerId {
    uid(who)
}

/// Set (to a directory) in a child process of a crash test: selects the child's role.
pub const CHILD_DIR_ENV: &str = "BRMCP_SERVER_TEST_CHILD_DIR";

/// The child's directory, when this process is a crash test's child.
pub fn child_dir() -> Option<std::path::PathBuf> {
    std::env::var_os(CHILD_DIR_ENV).map(Into::into)
}

/// The name libtest gives the test `name` defined in the module `module` (a
/// `module_path!()`): the path without the crate's name.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

/// Runs this test binary again as a child running only the test `name` of the module
/// `module` (a `module_path!()`), with `dir` and the extra environment `envs`.
pub fn spawn_child(
    module: &str,
    name: &str,
    dir: &std::path::Path,
    envs: &[(&str, String)],
) -> std::process::Child {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            &test_name(module, name),
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_ENV, dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    for (key, value) in envs {
        command.env(key, value);
    }
    command.spawn().unwrap()
}

/// Appends `line` to the file at `path` and syncs it to disk before returning, so a
/// SIGKILL right after cannot lose it.
pub fn log_line(path: &std::path::Path, line: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
    file.sync_data().unwrap();
}

/// The lines of the file at `path` (none if it does not exist).
pub fn read_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Waits (blocking) until the file at `path` has a line equal to `line`.
pub fn wait_for_line(path: &std::path::Path, line: &str) {
    for _ in 0..10_000 {
        if read_lines(path).iter().any(|l| l == line) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("timed out waiting for {line:?} in {}", path.display());
}

/// Kills the child with SIGKILL and reaps it.
pub fn kill(child: &mut std::process::Child) {
    child.kill().unwrap();
    let status = child.wait().unwrap();
    #[cfg(unix)]
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "SIGKILL, not an earlier exit: {status:?}"
    );
}
