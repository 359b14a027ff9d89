//! `directory_add_bot` and `bots add --from-directory`: a provider is added only after
//! the user accepted a question naming its uid, tools and prices; decline and cancel
//! change nothing; a client that cannot be asked gets the command to run and nothing
//! changes; an added bot is callable at once.

use brmcp::adapters::mem::uid;
use brmcp::bridge::{BridgeError, DIRECTORY_ADD_BOT, SETTINGS_FILE, Settings};
use rmcp::model::ElicitationAction;
use serde_json::json;

use super::*;
use crate::common::text;

/// The bots of the settings file on disk.
fn bots_on_disk(w: &World) -> Vec<PeerId> {
    let path = w.data_dir.join(SETTINGS_FILE);
    Settings::load(&path)
        .unwrap()
        .bots()
        .into_iter()
        .map(|b| b.uid)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_add_makes_the_bot_callable_at_once() {
    let w = world(0, settings(10_000, 100_000)).await;
    let user = User::answering(ElicitationAction::Accept);
    let agent = directory_agent(&w.bridge, None, user.clone()).await;
    let provider = uid(PROVIDER);
    let added = tool(
        &agent,
        DIRECTORY_ADD_BOT,
        json!({"uid": provider.to_string(), "name": "echoer"}),
    )
    .await;
    assert_ne!(added.is_error, Some(true), "{added:?}");
    let asked = user.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "one question");
    assert!(asked[0].contains(&provider.to_string()), "{}", asked[0]);
    assert!(
        asked[0].contains(&format!("\"paid_echo\" ({PAID_ECHO} atoms)"))
            && asked[0].contains("\"echo\" (free)"),
        "tools and prices named: {}",
        asked[0]
    );
    let bots = w.bridge.bots();
    assert_eq!(bots.len(), 1);
    assert_eq!(bots[0].uid, provider);
    assert_eq!(bots[0].name.as_deref(), Some("echoer"));
    assert_eq!(bots_on_disk(&w), [provider], "mcpclient.json holds it");

    // Served at once, with the user's policy: the paid tool is paid and runs.
    let bot = crate::common::connect(&w.bridge, provider, ()).await;
    let echoed = bot
        .call_tool(params("paid_echo", json!({"text": "found"})))
        .await
        .unwrap();
    assert_ne!(echoed.is_error, Some(true), "{echoed:?}");
    assert!(text(&echoed).contains("found"), "{echoed:?}");
    assert_eq!(
        *w.payments.made.lock().unwrap(),
        [(provider, PAID_ECHO)],
        "paid once, to the provider"
    );

    let again = tool(
        &agent,
        DIRECTORY_ADD_BOT,
        json!({"uid": provider.to_string()}),
    )
    .await;
    assert_ne!(again.is_error, Some(true));
    assert!(
        text(&again).contains("already one of your bots"),
        "{again:?}"
    );
    assert_eq!(user.asked.lock().unwrap().len(), 1, "not asked again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declined_or_cancelled_add_changes_nothing() {
    let w = world(0, settings(10_000, 100_000)).await;
    for (action, word) in [
        (ElicitationAction::Decline, "declined"),
        (ElicitationAction::Cancel, "cancelled"),
    ] {
        let user = User::answering(action);
        let agent = directory_agent(&w.bridge, Some("dir"), user.clone()).await;
        let refused = tool(
            &agent,
            DIRECTORY_ADD_BOT,
            json!({"uid": uid(PROVIDER).to_string()}),
        )
        .await;
        assert_eq!(refused.is_error, Some(true), "{refused:?}");
        assert!(text(&refused).contains(word), "{refused:?}");
        assert_eq!(user.asked.lock().unwrap().len(), 1);
        assert!(w.bridge.bots().is_empty());
        assert!(bots_on_disk(&w).is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_without_elicitation_refuses_with_the_command() {
    let w = world(0, settings(10_000, 100_000)).await;
    let user = User::default();
    let agent = directory_agent(&w.bridge, None, user.clone()).await;
    let provider = uid(PROVIDER).to_string();
    let refused = tool(
        &agent,
        DIRECTORY_ADD_BOT,
        json!({"uid": provider, "name": "echoer"}),
    )
    .await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let shown = text(&refused);
    assert!(
        shown.contains(&format!(
            "bots add --from-directory {provider} --directory dir --name echoer"
        )),
        "{shown}"
    );
    assert!(user.asked.lock().unwrap().is_empty());
    assert!(w.bridge.bots().is_empty());
    assert!(bots_on_disk(&w).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_add_from_directory_adds_listed_refuses_unlisted() {
    let w = world(0, settings(10_000, 100_000)).await;
    let mut config = crate::common::base_config(&w.data_dir);
    config.settings_poll = Duration::from_millis(20);
    let _watch = w.bridge.watch_settings();
    // The command runs its own bridge on the same data directory.
    let cli = Bridge::new(
        config,
        w.fabric.router(uid(24), RouterConfig::client()),
        w.payments.clone(),
    )
    .unwrap();

    let unlisted = cli
        .add_from_directory(Some("dir"), uid(99), None)
        .await
        .unwrap_err();
    assert!(
        matches!(&unlisted, BridgeError::Directory(m) if m.contains("no listing for that uid")),
        "{unlisted}"
    );
    assert!(bots_on_disk(&w).is_empty(), "nothing added");
    let unknown = cli
        .add_from_directory(Some("elsewhere"), uid(PROVIDER), None)
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, BridgeError::UnknownDirectory(_)),
        "{unknown}"
    );

    let listed = cli
        .add_from_directory(None, uid(PROVIDER), Some("echoer"))
        .await
        .unwrap();
    assert_eq!(listed.uid, uid(PROVIDER));
    assert_eq!(
        listed.tools,
        [
            ("echo".to_owned(), "free".to_owned()),
            ("paid_echo".to_owned(), format!("{PAID_ECHO} atoms"))
        ]
    );
    assert_eq!(bots_on_disk(&w), [uid(PROVIDER)]);
    // The running bridge follows the file: the bot is served without a restart.
    assert!(
        crate::common::eventually(Duration::from_secs(5), || w
            .bridge
            .bots()
            .iter()
            .any(|b| b.uid == uid(PROVIDER)))
        .await
    );
    cli.close().await;
}

/// An edit of `mcpclient.json` the running bridge has not applied yet (its watcher
/// polls), or refused (a typo), is not overwritten by adding a bot: the add is
/// refused and the file keeps the user's edit; once applied, the add keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_a_bot_keeps_an_edit_not_applied_yet() {
    let mut s = settings(10_000, 100_000);
    s = s
        .with_bot("kept", uid(50))
        .unwrap()
        .with_bot("old", uid(51))
        .unwrap();
    let w = world(0, s.clone()).await;
    let path = w.data_dir.join(SETTINGS_FILE);
    // No watcher runs: the edit stays unapplied, as within a poll interval.
    let edited = s.without_bot("old").unwrap();
    edited.save(&path).unwrap();
    let refused = w.bridge.add_bot("new", uid(52)).await.unwrap_err();
    assert!(refused.to_string().contains("changed on disk"), "{refused}");
    assert_eq!(bots_on_disk(&w), [uid(50)], "the edit is kept");
    // Through the directory tool, after the user accepted, likewise.
    let user = User::answering(ElicitationAction::Accept);
    let agent = directory_agent(&w.bridge, None, user.clone()).await;
    let tried = tool(
        &agent,
        DIRECTORY_ADD_BOT,
        json!({"uid": uid(PROVIDER).to_string()}),
    )
    .await;
    assert_eq!(tried.is_error, Some(true), "{tried:?}");
    assert!(text(&tried).contains("changed on disk"), "{tried:?}");
    assert_eq!(bots_on_disk(&w), [uid(50)], "the edit is kept");

    // A refused edit (a typo) stays on disk, unapplied, and is not overwritten.
    std::fs::write(&path, b"{\"mode\": \"autopay\",").unwrap();
    let refused = w.bridge.add_bot("new", uid(52)).await.unwrap_err();
    assert!(refused.to_string().contains("changed on disk"), "{refused}");
    assert_eq!(std::fs::read(&path).unwrap(), b"{\"mode\": \"autopay\",");

    // Once the edit is applied, the add goes through and keeps it.
    edited.save(&path).unwrap();
    w.bridge.reload().await.unwrap();
    w.bridge.add_bot("new", uid(52)).await.unwrap();
    assert_eq!(bots_on_disk(&w), [uid(50), uid(52)]);
}

/// A user who answers the add-bot question after `delay` (never: `None`), recording
/// the questions.
#[derive(Clone, Default)]
struct SlowUser {
    delay: Option<Duration>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for SlowUser {
    fn get_info(&self) -> ClientConfig {
        User::answering(ElicitationAction::Accept).get_info()
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.asked.lock().unwrap().push(message);
        }
        match self.delay {
            Some(delay) => tokio::time::sleep(delay).await,
            None => std::future::pending().await,
        }
        Ok(ElicitResult::new(ElicitationAction::Accept))
    }
}

/// The add-bot question is bounded by the approval timeout: a user who never
/// answers gets the bot not added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_add_times_out_and_adds_nothing() {
    let mut s = settings(10_000, 100_000);
    s.approval_timeout_secs = 1;
    let w = world(0, s).await;
    let user = SlowUser::default();
    let agent = directory_agent(&w.bridge, None, user.clone()).await;
    let refused = tokio::time::timeout(
        Duration::from_secs(20),
        tool(
            &agent,
            DIRECTORY_ADD_BOT,
            json!({"uid": uid(PROVIDER).to_string()}),
        ),
    )
    .await
    .expect("the question is bounded");
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(
        text(&refused).contains("no answer within 1s"),
        "{refused:?}"
    );
    assert_eq!(user.asked.lock().unwrap().len(), 1, "the user was asked");
    assert!(w.bridge.bots().is_empty() && bots_on_disk(&w).is_empty());
}

/// An agent that cancels its `directory_add_bot` call gets nothing added, even when
/// the user accepts afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_add_adds_nothing_even_if_accepted_later() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    use rmcp::service::PeerRequestOptions;

    let w = world(0, settings(10_000, 100_000)).await;
    let user = SlowUser {
        delay: Some(Duration::from_millis(500)),
        asked: Arc::default(),
    };
    let agent = directory_agent(&w.bridge, None, user.clone()).await;
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params(
        DIRECTORY_ADD_BOT,
        json!({"uid": uid(PROVIDER).to_string()}),
    )));
    let handle = agent
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let asked = || !user.asked.lock().unwrap().is_empty();
    assert!(crate::common::eventually(Duration::from_secs(5), asked).await);
    handle.cancel(Some("changed my mind".into())).await.unwrap();
    // The user's accept arrives after the cancel; nothing is added.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(w.bridge.bots().is_empty() && bots_on_disk(&w).is_empty());
}
