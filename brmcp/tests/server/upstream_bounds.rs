//! Upstreams bounded against a hostile one (`hostile_upstream.py`, raw JSON-RPC): a
//! tool list with a `nextCursor` on every page is read up to the page bound, first and
//! when listed again, and stopping mid-listing returns at once; a command upstream sees
//! only `PATH`, `HOME`, the locale and the variables its entry names, not a secret of
//! serve's environment; the status file is owner-only and follows no planted link.

use std::path::{Path, PathBuf};
use std::time::Duration;

use brmcp::server::DynamicTools;
use brmcp::server::upstream::{
    MAX_LIST_PAGES, STATUS_FILE, UpstreamLimits, UpstreamState, Upstreams, read_status,
};
use serde_json::{Value, json};

use crate::support::{child_dir, read_lines, spawn_child};
use crate::upstream_supervision::{hook, next_in, upstreams};

/// Tools per page of the endless listing (`hostile_upstream.py`).
const PER_PAGE: usize = 10;

/// The hostile upstream script.
pub(crate) fn script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/server/hostile_upstream.py")
        .display()
        .to_string()
}

/// The Python interpreter itself (`python3` may be a wrapper script, such as pyenv's,
/// that adds variables of its own).
fn python() -> &'static str {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    })
}

/// A command entry running the hostile upstream in `mode`, its state in `state`.
pub(crate) fn hostile(name: &str, mode: &str, state: &Path) -> Value {
    json!({
        "name": name, "command": python(), "args": [script(), mode],
        "env": {"STATE": state}, "default_price_atoms": 0
    })
}

/// Waits (blocking, up to 20 s) until `file` has at least `n` lines; returns them.
fn lines_at_least(file: &Path, n: usize) -> usize {
    for _ in 0..2000 {
        let count = read_lines(file).len();
        if count >= n {
            return count;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{} has fewer than {n} lines", file.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_pages_stop_at_the_bound_and_stopping_mid_listing_is_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_owned();
    let config = upstreams(json!([hostile("pages", "pages", &state)]));
    let tools = DynamicTools::new();
    let (hook, rx) = hook();
    let mut limits = UpstreamLimits::default();
    limits.relist_window = Duration::from_millis(100);
    let started = Upstreams::start_with(&config.upstreams, &tools, None, Some(hook), &limits);
    let (up, rx) = tokio::task::spawn_blocking(move || (next_in(&rx, UpstreamState::Up), rx))
        .await
        .unwrap();
    let bound = MAX_LIST_PAGES * PER_PAGE;
    assert_eq!(up.tools, bound, "{up:?}");
    assert_eq!(tools.names("pages").len(), bound);
    let lists = state.join("lists");
    assert_eq!(read_lines(&lists).len(), MAX_LIST_PAGES, "pages read");

    // Listed again after a list change: the same bound, the same tools.
    std::fs::write(state.join("poke"), "").unwrap();
    let lists_file = lists.clone();
    tokio::task::spawn_blocking(move || lines_at_least(&lists_file, 2 * MAX_LIST_PAGES))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        read_lines(&lists).len(),
        2 * MAX_LIST_PAGES,
        "pages read again"
    );
    assert_eq!(tools.names("pages").len(), bound);

    // Slow pages (0.3 s each, so about 20 s to the bound): stopping mid-listing returns
    // at once and the listing goes no further.
    std::fs::write(state.join("slow"), "").unwrap();
    std::fs::write(state.join("poke"), "").unwrap();
    let lists_file = lists.clone();
    tokio::task::spawn_blocking(move || lines_at_least(&lists_file, 2 * MAX_LIST_PAGES + 2))
        .await
        .unwrap();
    let stop = tokio::time::timeout(Duration::from_secs(10), started.shutdown()).await;
    assert!(stop.is_ok(), "stopping waited for the listing");
    let stopped = tokio::task::spawn_blocking(move || next_in(&rx, UpstreamState::Stopped))
        .await
        .unwrap();
    assert_eq!(stopped.pid, None);
    let read = read_lines(&lists).len();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        read < 3 * MAX_LIST_PAGES && read_lines(&lists).len() <= read + 1,
        "the listing went on after the stop: {read} pages"
    );
}

/// Serve's environment holds `BRMCP_TEST_SECRET` (this test runs itself again as a
/// child with it set): the upstream sees only the base variables, the one `pass_env`
/// names and the ones `env` sets.
#[test]
fn an_upstream_sees_a_clean_environment() {
    if let Some(dir) = child_dir() {
        assert_eq!(std::env::var("BRMCP_TEST_SECRET").unwrap(), "s3cret");
        let names = tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(environment_seen(&dir));
        let mut want: Vec<String> = std::env::vars()
            .map(|(k, _)| k)
            .filter(|k| ["PATH", "HOME", "LANG"].contains(&k.as_str()) || k.starts_with("LC_"))
            .chain([
                "BRMCP_TEST_PASSED".into(),
                "SET_BY_ENV".into(),
                "STATE".into(),
            ])
            .collect();
        want.sort();
        assert_eq!(names, want);
        assert!(!names.iter().any(|n| n == "BRMCP_TEST_SECRET"));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_child(
        module_path!(),
        "an_upstream_sees_a_clean_environment",
        dir.path(),
        &[
            ("BRMCP_TEST_SECRET", "s3cret".into()),
            ("BRMCP_TEST_PASSED", "passed".into()),
        ],
    );
    assert!(child.wait().unwrap().success(), "the child's checks failed");
}

/// In the child: the variable names the upstream reported at its start.
async fn environment_seen(dir: &Path) -> Vec<String> {
    let mut entry = hostile("env", "tools", dir);
    entry["pass_env"] = json!(["BRMCP_TEST_PASSED"]);
    entry["env"]["SET_BY_ENV"] = json!("1");
    let mut missing = hostile("missing", "tools", dir);
    missing["pass_env"] = json!(["BRMCP_TEST_NOT_SET"]);
    let config = upstreams(json!([entry, missing]));
    let (hook, rx) = hook();
    let started = Upstreams::start(&config.upstreams, &DynamicTools::new(), None, Some(hook));
    let down = tokio::task::spawn_blocking(move || {
        loop {
            let status = next_in(&rx, UpstreamState::Down);
            if status.name == "missing" {
                return status;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        down.error.as_deref(),
        Some("the variable BRMCP_TEST_NOT_SET named in pass_env is not set")
    );
    let file = dir.join("env");
    let file2 = file.clone();
    tokio::task::spawn_blocking(move || lines_at_least(&file2, 1))
        .await
        .unwrap();
    started.shutdown().await;
    serde_json::from_str(&read_lines(&file)[0]).unwrap()
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_file_is_owner_only_and_follows_no_planted_link() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "untouched").unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    // The name the status file's temporary copy once had, and the file itself in a
    // second data directory.
    std::os::unix::fs::symlink(&victim, data.join(format!("{STATUS_FILE}.tmp"))).unwrap();
    let linked = dir.path().join("linked");
    std::fs::create_dir(&linked).unwrap();
    std::os::unix::fs::symlink(&victim, linked.join(STATUS_FILE)).unwrap();

    let state = dir.path().to_owned();
    let config = upstreams(json!([hostile("plain", "tools", &state)]));
    let statuses: Vec<PathBuf> = [&data, &linked].map(|d| d.join(STATUS_FILE)).into();
    let mut running = Vec::new();
    for file in statuses {
        let (hook, rx) = hook();
        let started = Upstreams::start(
            &config.upstreams,
            &DynamicTools::new(),
            Some(file),
            Some(hook),
        );
        tokio::task::spawn_blocking(move || next_in(&rx, UpstreamState::Up))
            .await
            .unwrap();
        running.push(started);
    }
    let written = data.join(STATUS_FILE);
    let meta = std::fs::symlink_metadata(&written).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(read_status(&data).unwrap()[0].state, UpstreamState::Up);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
    assert!(
        std::fs::symlink_metadata(linked.join(STATUS_FILE))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the planted link was replaced"
    );
    for started in running {
        started.shutdown().await;
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
}
