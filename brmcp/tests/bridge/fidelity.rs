//! The proxy forwards everything an MCP server offers, not only tools: resources and
//! templates, prompts, completions, logging, tool-list changes (the cache refreshed),
//! progress with token mapping, cancellation, and the bot's sampling requests to an
//! agent that declared sampling.
#![allow(deprecated)] // sampling and logging are SEP-2577-deprecated; still relayed

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{agent, agent_with, autopay, call, env, eventually, text};
use rmcp::ClientHandler;
use rmcp::model::{
    ArgumentInfo, CallToolRequest, ClientCapabilities, ClientConfig, ClientRequest,
    CompleteRequestParams, CreateMessageRequestParams, CreateMessageResult, GetPromptRequestParams,
    Implementation, LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam,
    ReadResourceRequestParams, Reference, Role, SamplingMessage, SetLevelRequestParams,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext};
use rmcp::{ErrorData, RoleClient};
use serde_json::json;

/// An agent that records what the bridge relays to it, and answers sampling.
#[derive(Clone, Default)]
struct Recorder {
    logs: Arc<Mutex<Vec<LoggingMessageNotificationParam>>>,
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    tools_changed: Arc<Mutex<usize>>,
    sampling_cancelled: Arc<Mutex<usize>>,
    sampling: bool,
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities = if self.sampling {
            serde_json::from_value(json!({"sampling": {}})).unwrap()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(capabilities, Implementation::new("recorder", "1"))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let asked = serde_json::to_value(&params.messages[0]).unwrap()["content"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if asked == "hang" {
            tokio::select! {
                () = context.ct.cancelled() => {
                    *self.sampling_cancelled.lock().unwrap() += 1;
                    return Err(ErrorData::internal_error("cancelled", None));
                }
                () = tokio::time::sleep(Duration::from_secs(10)) => {}
            }
        }
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text(format!("42 ({asked})")),
            "test-model".into(),
        ))
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.logs.lock().unwrap().push(params);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        *self.tools_changed.lock().unwrap() += 1;
    }
}

#[tokio::test]
async fn resources_prompts_and_completions() {
    let env = env(autopay).await;
    let agent = agent(&env).await;
    let info = agent.peer_info().unwrap();
    assert!(info.capabilities.resources.is_some());
    assert!(info.capabilities.prompts.is_some());
    assert!(info.capabilities.completions.is_some());

    let resources = agent.list_all_resources().await.unwrap();
    assert_eq!(
        serde_json::to_value(&resources).unwrap(),
        json!([{"uri": "test://hello", "name": "hello", "mimeType": "text/plain", "_meta": {"x-test": 1}}])
    );
    let templates = agent.list_all_resource_templates().await.unwrap();
    assert_eq!(templates[0].uri_template, "test://items/{id}");
    let read = agent
        .read_resource(ReadResourceRequestParams::new("test://items/7"))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&read.contents).unwrap(),
        json!([{"uri": "test://items/7", "mimeType": "text/plain", "text": "contents of test://items/7"}])
    );
    let missing = agent
        .read_resource(ReadResourceRequestParams::new("test://nope"))
        .await
        .expect_err("no such resource");
    assert!(
        missing.to_string().contains("no such resource"),
        "{missing}"
    );

    let prompts = agent.list_all_prompts().await.unwrap();
    assert_eq!(prompts[0].name, "greet");
    let mut args = serde_json::Map::new();
    args.insert("name".into(), json!("Ada"));
    let prompt = agent
        .get_prompt(GetPromptRequestParams::new("greet").with_arguments(args))
        .await
        .unwrap();
    assert_eq!(prompt.description.as_deref(), Some("a greeting"));
    assert_eq!(prompt.messages[0].role, Role::User);
    assert_eq!(
        serde_json::to_value(&prompt.messages[0].content).unwrap()["text"],
        json!("Hello, Ada!")
    );

    let completion = agent
        .complete(CompleteRequestParams::new(
            Reference::for_prompt("greet"),
            ArgumentInfo::new("name", "al"),
        ))
        .await
        .unwrap();
    assert_eq!(completion.completion.values, vec!["alice", "albert"]);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn logging_is_relayed() {
    let env = env(autopay).await;
    let recorder = Recorder::default();
    let agent = agent_with(&env, recorder.clone()).await;
    agent
        .set_level(SetLevelRequestParams::new(LoggingLevel::Debug))
        .await
        .unwrap();
    let r = agent
        .call_tool(call("log", json!({"line": "disk almost full"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "logged");
    let logs = recorder.logs.clone();
    assert!(eventually(Duration::from_secs(5), || !logs.lock().unwrap().is_empty()).await);
    let log = recorder.logs.lock().unwrap()[0].clone();
    assert_eq!(log.level, LoggingLevel::Warning);
    assert_eq!(log.logger.as_deref(), Some("testbot"));
    assert_eq!(log.data, json!("disk almost full"));
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn tool_list_changes_refresh_the_mirror() {
    let env = env(autopay).await;
    let recorder = Recorder::default();
    let agent = agent_with(&env, recorder.clone()).await;
    assert!(
        !agent
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .any(|t| t.name == "grown")
    );
    agent.call_tool(call("grow", json!({}))).await.unwrap();
    let changed = recorder.tools_changed.clone();
    assert!(eventually(Duration::from_secs(5), || *changed.lock().unwrap() == 1).await);
    let tools = agent.list_all_tools().await.unwrap();
    let grown = tools
        .iter()
        .find(|t| t.name == "grown")
        .expect("new tool listed");
    assert_eq!(
        grown.meta.as_ref().unwrap().get("brmcp/priceAtoms"),
        Some(&json!(7))
    );
    let r = agent.call_tool(call("grown", json!({}))).await.unwrap();
    assert_eq!(text(&r), "hello from grown");
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn progress_is_relayed_with_the_agents_token() {
    let env = env(autopay).await;
    let recorder = Recorder::default();
    let agent = agent_with(&env, recorder.clone()).await;
    let request =
        ClientRequest::CallToolRequest(CallToolRequest::new(call("progress", json!({"steps": 5}))));
    let handle = agent
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let token = handle.progress_token.clone();
    let result = handle.await_response().await.unwrap();
    assert!(format!("{result:?}").contains("done 5"));
    let progress = recorder.progress.clone();
    assert!(
        eventually(Duration::from_secs(5), || progress.lock().unwrap().len()
            == 5)
        .await
    );
    let seen = recorder.progress.lock().unwrap().clone();
    for (i, p) in seen.iter().enumerate() {
        assert_eq!(p.progress_token, token, "the agent's token, not the bot's");
        assert_eq!(p.progress, (i + 1) as f64);
        assert_eq!(p.total, Some(5.0));
        assert_eq!(
            p.message.as_deref(),
            Some(format!("step {}", i + 1).as_str())
        );
    }
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn cancellation_reaches_the_bot() {
    let env = env(autopay).await;
    let agent = agent(&env).await;
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call("wait", json!({}))));
    let handle = agent
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), env.bot.wait_started.notified())
        .await
        .expect("the bot never started");
    handle.cancel(Some("enough".into())).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), env.bot.cancel_seen.notified())
        .await
        .expect("the bot never saw the cancellation");
    assert_eq!(env.bot.cancelled.load(Ordering::SeqCst), 1);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn sampling_goes_to_an_agent_that_supports_it() {
    let env = env(autopay).await;
    let agent = agent_with(
        &env,
        Recorder {
            sampling: true,
            ..Recorder::default()
        },
    )
    .await;
    let r = agent
        .call_tool(call("sample", json!({"prompt": "meaning?"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "model said: 42 (meaning?)");
    agent.cancel().await.unwrap();

    // An agent without sampling: the bot's request is refused, the bot says so.
    let plain = agent_with(&env, Recorder::default()).await;
    let r = plain
        .call_tool(call("sample", json!({"prompt": "meaning?"})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).starts_with("no sampling:"), "{}", text(&r));
    plain.cancel().await.unwrap();
}

#[tokio::test]
async fn a_bots_cancellation_reaches_the_agent() {
    let env = env(autopay).await;
    let recorder = Recorder {
        sampling: true,
        ..Recorder::default()
    };
    let agent = agent_with(&env, recorder.clone()).await;
    let r = agent
        .call_tool(call("sample_cancel", json!({})))
        .await
        .unwrap();
    assert_eq!(text(&r), "sampling cancelled");
    let cancelled = recorder.sampling_cancelled.clone();
    assert!(
        eventually(Duration::from_secs(5), || *cancelled.lock().unwrap() == 1).await,
        "the agent's sampling was never cancelled"
    );
    agent.cancel().await.unwrap();
}
