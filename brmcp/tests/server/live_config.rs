//! `brmcp.json` applied while serving: callers added and removed and the rate changed
//! without dropping the sessions of callers still allowed; a removed caller refused
//! from its next call on, even while it floods; a torn or invalid file (an unknown
//! top-level key included) refused with its file and key, the running settings kept.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use brmcp::adapters::PeerId;
use brmcp::server::{ConfigWatch, Harness, RATE_LIMITED, ServeConfig, follow_config};
use serde_json::json;
use tokio::sync::Notify;

fn write_config(path: &Path, uids: &[PeerId], rate: u32) {
    let uids: Vec<String> = uids.iter().map(PeerId::to_string).collect();
    let text = json!({"allowed_uids": uids, "calls_per_minute": rate}).to_string();
    std::fs::write(path, text).unwrap();
}

/// A harness serving `echo` under the brmcp.json at `dir`, followed, woken by the
/// returned notify.
fn serving(dir: &Path, uids: &[PeerId], rate: u32) -> (Env, ConfigWatch, Arc<Notify>) {
    let path = dir.join("brmcp.json");
    write_config(&path, uids, rate);
    let config = ServeConfig::load(&path).unwrap();
    let (builder, clock, data) = builder();
    let builder = builder
        .config(&config)
        .tool(echo(&Arc::new(Probe::default())));
    let env = env(builder, clock, data);
    let wake = Arc::new(Notify::new());
    let watch = follow_config(&env.harness, path, config, Some(wake.clone()), None);
    (env, watch, wake)
}

/// Whether `client`'s echo call is answered (successfully) within half a second; a
/// refused caller is answered an error (`NOT_ALLOWED`) or nothing.
async fn answered(client: &Client) -> bool {
    let call = client.call_tool(params("echo", json!({"text": "x"}), None));
    tokio::time::timeout(Duration::from_millis(500), call)
        .await
        .is_ok_and(|r| r.is_ok_and(|r| !is_error(&r)))
}

async fn until_applied(harness: &Harness, cond: impl Fn(&Harness) -> bool) {
    let harness = harness.clone();
    until("the reload applied", move || cond(&harness)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_and_removes_callers_and_keeps_the_kept_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let (env, _watch, wake) = serving(dir.path(), &[peer(ALICE), peer(BOB)], 30);
    let alice = client(&env.fabric, ALICE).await;
    let bob = client(&env.fabric, BOB).await;
    assert!(answered(&alice).await && answered(&bob).await);
    let accepted = env.router.stats().sessions_accepted;

    // Bob out, Mallory in, and a rate of 3: applied by a wake (as on SIGHUP).
    write_config(
        &dir.path().join("brmcp.json"),
        &[peer(ALICE), peer(MALLORY)],
        3,
    );
    wake.notify_one();
    until_applied(&env.harness, |h| {
        h.allows(&peer(MALLORY)) && h.rate_limiter().calls_per_minute() == 3
    })
    .await;
    assert!(!env.harness.allows(&peer(BOB)));

    // Alice's session carries on, not re-opened; Bob's is refused from its next call.
    let refused = env.router.stats().dropped_disallowed;
    assert!(
        answered(&alice).await,
        "a kept caller's session keeps working"
    );
    assert!(!answered(&bob).await, "a removed caller is refused");
    assert!(env.router.stats().dropped_disallowed > refused);
    let mallory = client(&env.fabric, MALLORY).await;
    assert!(answered(&mallory).await, "an added caller gets in");
    assert_eq!(env.router.stats().sessions_accepted, accepted + 1);

    // The new rate, 3 a minute (the test clock stands still): Alice spent one token
    // since; two more, and the next is refused.
    assert!(answered(&alice).await && answered(&alice).await);
    let limited = call(&alice, "echo", json!({"text": "x"}), None).await;
    assert_eq!(text(&limited), RATE_LIMITED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_caller_flooding_through_the_reload_is_refused_and_others_served() {
    let dir = tempfile::tempdir().unwrap();
    let (env, _watch, _wake) = serving(dir.path(), &[peer(ALICE), peer(MALLORY)], 100_000);
    let alice = client(&env.fabric, ALICE).await;
    let mallory = Arc::new(client(&env.fabric, MALLORY).await);
    let flood = {
        let mallory = mallory.clone();
        tokio::spawn(async move {
            // Flooding calls, each given a short wait, until the task is stopped.
            let mallory: &Client = &mallory;
            loop {
                let calls = (0..16).map(|_| answered(mallory));
                futures_util::future::join_all(calls).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Removed by the file watch alone (no wake).
    write_config(&dir.path().join("brmcp.json"), &[peer(ALICE)], 100_000);
    until_applied(&env.harness, |h| !h.allows(&peer(MALLORY))).await;
    for _ in 0..5 {
        assert!(answered(&alice).await, "served through the flood");
    }
    assert!(!answered(&mallory).await, "refused after the reload");
    flood.abort();
    let stats = env.router.stats();
    assert!(stats.dropped_disallowed > 0, "{stats:?}");
}

/// A writer into a shared buffer, for a fmt subscriber.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// On the current thread, so the follower's events reach this test's subscriber.
#[tokio::test(flavor = "current_thread")]
async fn a_torn_or_invalid_file_is_refused_naming_file_and_key_and_the_old_config_stays() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("brmcp.json");
    let (env, _watch, wake) = serving(dir.path(), &[peer(ALICE), peer(BOB)], 30);
    let kept = |h: &Harness| h.allows(&peer(BOB)) && h.rate_limiter().calls_per_minute() == 30;

    // Torn mid-write.
    std::fs::write(&path, format!(r#"{{"allowed_uids": ["{}""#, peer(ALICE))).unwrap();
    wake.notify_one();
    let file = path.display().to_string();
    let seen = logs.clone();
    until("the torn file refused", move || {
        seen.text().contains("config not applied")
    })
    .await;
    assert!(kept(&env.harness));
    let text = logs.text();
    assert!(text.contains(&format!("config {file}: EOF")), "{text}");

    // A bad uid, a bad type and an unknown key (in a file that would otherwise drop
    // Bob and change the rate): each names its key.
    let misspelt = json!({"allowed_uids": [peer(ALICE).to_string()], "calls_per_minte": 3});
    for (body, key) in [
        (
            r#"{"allowed_uids": ["abc"]}"#.to_owned(),
            "allowed_uids[0] \"abc\"",
        ),
        (
            r#"{"calls_per_minute": "fast"}"#.to_owned(),
            "calls_per_minute: invalid type",
        ),
        (
            misspelt.to_string(),
            "calls_per_minte: unknown key (known: allowed_uids, calls_per_minute, \
             directory, tell_refused, upstreams)",
        ),
    ] {
        std::fs::write(&path, body).unwrap();
        wake.notify_one();
        let seen = logs.clone();
        let wanted = format!("config {file}: {key}");
        until(key, move || seen.text().contains(&wanted)).await;
        assert!(kept(&env.harness));
    }

    // A good file then applies, with one info line saying what changed.
    write_config(&path, &[peer(ALICE)], 30);
    wake.notify_one();
    until_applied(&env.harness, |h| !h.allows(&peer(BOB))).await;
    let text = logs.text();
    let reloaded: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("config reloaded"))
        .collect();
    assert_eq!(reloaded.len(), 1, "{text}");
    assert!(
        reloaded[0].contains(&format!("allowed -{}", peer(BOB))),
        "{text}"
    );
}
