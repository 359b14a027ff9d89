//! `mcpclient.json` edited while the bridge runs (by hand, `token rotate` or `bots
//! add|remove`) is applied without a restart: a new token refuses the old one, an
//! added bot is served, a removed one answers 404 and its sessions close, a refused
//! edit keeps the last good settings, and sessions of kept bots survive.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{Env, autopay, env_with, initialize, post_on_session};
use brmcp::bridge::{BridgeError, Reload, SETTINGS_FILE, Settings, SettingsError};

const TOKEN: &str = "first-token-first-token-first-token";
const ROTATED: &str = "second-token-second-token-second-token";

/// How long a test waits for the watcher to pick an edit up (it polls every 20 ms).
const PICKUP: Duration = Duration::from_secs(5);

/// A running, watching bridge with `settings` (enabled, [`TOKEN`]).
async fn running(settings: impl FnOnce(brmcp::adapters::PeerId) -> Settings) -> Env {
    let env = env_with(
        |bot| {
            let mut s = settings(bot);
            s.enabled = true;
            s.token = TOKEN.into();
            s
        },
        |mut c| {
            c.settings_poll = Duration::from_millis(20);
            c
        },
    )
    .await;
    env.bridge.start().await.unwrap();
    env.bridge.watch_settings();
    env
}

/// Writes `settings` to the file as an editor would (not through the bridge).
fn edit(env: &Env, settings: &Settings) {
    let text = serde_json::to_vec_pretty(settings).unwrap();
    std::fs::write(env.dir.path().join(SETTINGS_FILE), text).unwrap();
}

fn addr(env: &Env) -> SocketAddr {
    env.bridge.listen_addr().expect("listening")
}

/// POSTs `body` on an open session; the status.
async fn on_session(addr: SocketAddr, bot: &str, session: &str, body: &str) -> u16 {
    post_on_session(addr, bot, TOKEN, session, body).await.0
}

/// Waits until the bridge's settings satisfy `cond`.
async fn picked_up(env: &Env, cond: impl Fn(&Settings) -> bool) {
    let deadline = tokio::time::Instant::now() + PICKUP;
    while !cond(&env.bridge.settings()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the edit was not applied"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_written_to_the_file_replaces_the_old_one_at_once() {
    let env = running(autopay).await;
    let bot = env.bot_id.to_string();
    assert_eq!(initialize(addr(&env), &bot, TOKEN).await.0, 200);

    let mut rotated = env.bridge.settings();
    rotated.token = ROTATED.into();
    edit(&env, &rotated);
    picked_up(&env, |s| s.token == ROTATED).await;
    assert_eq!(
        initialize(addr(&env), &bot, TOKEN).await.0,
        401,
        "the old token is refused"
    );
    assert_eq!(initialize(addr(&env), &bot, ROTATED).await.0, 200);
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_added_to_the_file_are_served_and_removed_ones_are_not() {
    let env = running(|bot| {
        let mut s = autopay(bot);
        s.allowed_bots.clear();
        s
    })
    .await;
    let bot = env.bot_id.to_string();
    assert_eq!(initialize(addr(&env), &bot, TOKEN).await.0, 404);

    let added = env
        .bridge
        .settings()
        .with_bot("fortune", env.bot_id)
        .unwrap();
    edit(&env, &added);
    picked_up(&env, |s| s.allows(&env.bot_id)).await;
    let (status, session) = initialize(addr(&env), &bot, TOKEN).await;
    assert_eq!(status, 200, "an added bot is served");
    let session = session.expect("a session id");
    let agent = crate::common::agent(&env).await;

    edit(&env, &added.without_bot("fortune").unwrap());
    picked_up(&env, |s| !s.allows(&env.bot_id)).await;
    assert_eq!(initialize(addr(&env), &bot, TOKEN).await.0, 404);
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    assert_eq!(
        on_session(addr(&env), &bot, &session, ping).await,
        404,
        "the removed bot's HTTP session is closed"
    );
    let closed = tokio::time::timeout(Duration::from_secs(5), agent.waiting()).await;
    assert!(
        closed.is_ok(),
        "the removed bot's agent session stayed open"
    );
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_edit_keeps_the_last_good_settings_and_says_why() {
    let env = running(autopay).await;
    let bot = env.bot_id.to_string();
    let good = env.bridge.settings();
    let path = env.dir.path().join(SETTINGS_FILE);
    let broken = serde_json::to_string(&good)
        .unwrap()
        .replace(r#""mode":"autopay""#, r#""mode":"auto""#)
        .replace(TOKEN, ROTATED);
    std::fs::write(&path, &broken).unwrap();
    let err = env.bridge.reload().await.unwrap_err();
    let shown = err.to_string();
    assert!(
        matches!(
            err,
            BridgeError::Settings(SettingsError::Invalid { ref key, .. }) if key == "mode"
        ) && shown.contains(&path.display().to_string())
            && shown.contains("unknown variant `auto`"),
        "{shown}"
    );
    // The watcher had the same file: give it several polls, then nothing changed.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(env.bridge.settings(), good);
    assert_eq!(initialize(addr(&env), &bot, TOKEN).await.0, 200);
    assert_eq!(initialize(addr(&env), &bot, ROTATED).await.0, 401);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        broken,
        "left as is"
    );

    // Fixing the file applies it.
    let mut fixed = good.clone();
    fixed.token = ROTATED.into();
    edit(&env, &fixed);
    picked_up(&env, |s| s.token == ROTATED).await;
    assert_eq!(env.bridge.reload().await.unwrap(), Reload::Unchanged);
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_bots_session_survives_a_reload_and_new_caps_apply() {
    let env = running(autopay).await;
    let bot = env.bot_id.to_string();
    let (status, session) = initialize(addr(&env), &bot, TOKEN).await;
    assert_eq!(status, 200);
    let session = session.expect("a session id");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(
        on_session(addr(&env), &bot, &session, initialized).await,
        202
    );

    let mut capped = env.bridge.settings();
    capped.per_call_cap_atoms = 7;
    capped.mode = brmcp::bridge::Mode::Approval;
    edit(&env, &capped);
    picked_up(&env, |s| s.per_call_cap_atoms == 7).await;
    assert_eq!(env.bridge.settings().mode, brmcp::bridge::Mode::Approval);
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    assert_eq!(
        on_session(addr(&env), &bot, &session, ping).await,
        200,
        "the session of a kept bot was dropped"
    );
    env.bridge.close().await;
}
