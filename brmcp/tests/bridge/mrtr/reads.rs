//! The reads of agents on protocol 2026-07-28: a bot's elicitation during
//! `prompts/get` or `resources/read` reaches the agent as `input_required`, its answer
//! (accept or decline) the bot's one request; a replayed or another read's state is a
//! new request, one unanswered past the hold an error at the bot; agents on 2025-11-25
//! are asked directly.

use super::*;

/// The text of a prompt's first message.
fn prompt_text(r: &GetPromptResult) -> String {
    serde_json::to_value(&r.messages[0]).unwrap()["content"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The text of a resource's first contents.
fn resource_text(r: &ReadResourceResult) -> String {
    match &r.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bots_elicitation_in_a_prompt_or_resource_reaches_the_agent_and_its_answer_the_bot() {
    let env = env(autopay).await;
    let mut user = User::answering(ElicitationAction::Accept);
    user.content = Some(json!({"name": "ada"}));
    let agent = agent_2026(&env, user.clone()).await;
    let prompt = agent
        .get_prompt(GetPromptRequestParams::new("ask"))
        .await
        .unwrap();
    assert_eq!(
        prompt_text(&prompt),
        r#"user said: "accept" {"name":"ada"}"#
    );
    let resource = agent
        .read_resource(ReadResourceRequestParams::new("test://ask"))
        .await
        .unwrap();
    assert_eq!(
        resource_text(&resource),
        r#"user said: "accept" {"name":"ada"}"#
    );
    assert_eq!(user.asked(), vec!["whom to greet?", "whose resource?"]);
    assert_eq!(env.bot.reads_of("prompt:ask"), 1, "one request to the bot");
    assert_eq!(env.bot.reads_of("resource:test://ask"), 1);
    assert!(env.bot.elicit_errors.lock().unwrap().is_empty());

    // Reads that ask nothing answer at once, as before.
    let hello = agent
        .read_resource(ReadResourceRequestParams::new("test://hello"))
        .await
        .unwrap();
    assert_eq!(resource_text(&hello), "contents of test://hello");
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decline_in_a_prompt_or_resource_reaches_the_bot() {
    let env = env(autopay).await;
    let user = User::answering(ElicitationAction::Decline);
    let agent = agent_2026(&env, user.clone()).await;
    let prompt = agent
        .get_prompt(GetPromptRequestParams::new("ask"))
        .await
        .unwrap();
    assert_eq!(prompt_text(&prompt), r#"user said: "decline" null"#);
    let resource = agent
        .read_resource(ReadResourceRequestParams::new("test://ask"))
        .await
        .unwrap();
    assert_eq!(resource_text(&resource), r#"user said: "decline" null"#);
    assert_eq!(user.asked().len(), 2);
    assert_eq!(env.bot.reads_of("prompt:ask"), 1);
    assert_eq!(env.bot.reads_of("resource:test://ask"), 1);

    // An agent that declared no elicitation is not asked: the bot hears so.
    let plain = agent_2026(&env, undeclared()).await;
    let prompt = plain
        .get_prompt(GetPromptRequestParams::new("ask"))
        .await
        .unwrap();
    assert!(
        prompt_text(&prompt).starts_with("no elicitation:"),
        "{}",
        prompt_text(&prompt)
    );
    agent.cancel().await.unwrap();
    plain.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reads_state_serves_once_and_only_its_read() {
    let env = env(autopay).await;
    let agent = agent_2026(&env, User::answering(ElicitationAction::Accept)).await;
    let prompt = |state: Option<&str>, responses: Option<InputResponses>| {
        let mut p = GetPromptRequestParams::new("ask");
        p.request_state = state.map(str::to_owned);
        p.input_responses = responses;
        p
    };
    let GetPromptResponse::InputRequired(asked) =
        agent.get_prompt_once(prompt(None, None)).await.unwrap()
    else {
        panic!("not asked");
    };
    let state = asked.request_state.clone().expect("a state");
    let responses = answer_bot(&asked, "bo");

    // The prompt's state on a resource read is not that read's: a new read at the bot.
    let mut read = ReadResourceRequestParams::new("test://ask");
    read.request_state = Some(state.clone());
    read.input_responses = Some(responses.clone());
    let ReadResourceResponse::InputRequired(other) = agent.read_resource_once(read).await.unwrap()
    else {
        panic!("another read's state was taken");
    };
    assert_ne!(other.request_state.as_deref(), Some(state.as_str()));
    assert_eq!(env.bot.reads_of("resource:test://ask"), 1);

    // A forged state is a new request too.
    let forged = "0".repeat(state.len());
    let again = agent
        .get_prompt_once(prompt(Some(&forged), Some(responses.clone())))
        .await
        .unwrap();
    assert!(
        matches!(again, GetPromptResponse::InputRequired(_)),
        "{again:?}"
    );
    assert_eq!(env.bot.reads_of("prompt:ask"), 2);

    // The real state completes the bot's first request with the answer.
    let done = agent
        .get_prompt_once(prompt(Some(&state), Some(responses.clone())))
        .await
        .unwrap();
    let GetPromptResponse::Complete(done) = done else {
        panic!("not completed: {done:?}");
    };
    assert_eq!(prompt_text(&done), r#"user said: "accept" {"name":"bo"}"#);
    assert_eq!(
        env.bot.reads_of("prompt:ask"),
        2,
        "no request more to the bot"
    );

    // Replayed: a new request at the bot, which asks again.
    let replayed = agent
        .get_prompt_once(prompt(Some(&state), Some(responses)))
        .await
        .unwrap();
    assert!(
        matches!(replayed, GetPromptResponse::InputRequired(_)),
        "{replayed:?}"
    );
    assert_eq!(env.bot.reads_of("prompt:ask"), 3);

    // The resource read held above still takes its own state and answer.
    let other_state = other.request_state.clone().unwrap();
    let mut read = ReadResourceRequestParams::new("test://ask");
    read.request_state = Some(other_state);
    read.input_responses = Some(answer_bot(&other, "cy"));
    let ReadResourceResponse::Complete(read) = agent.read_resource_once(read).await.unwrap() else {
        panic!("the read's own state was not taken");
    };
    assert_eq!(resource_text(&read), r#"user said: "accept" {"name":"cy"}"#);
    assert_eq!(env.bot.reads_of("resource:test://ask"), 1);
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_on_2025_11_25_is_asked_directly_in_a_prompt_or_resource() {
    let env = env(autopay).await;
    let mut user = User::answering(ElicitationAction::Accept);
    user.content = Some(json!({"name": "ada"}));
    let agent = agent_with(&env, user.clone()).await;
    let version = agent.peer_info().map(|i| i.protocol_version.clone());
    assert!(
        version
            .as_ref()
            .is_some_and(|v| *v < ProtocolVersion::V_2026_07_28),
        "{version:?}"
    );
    let prompt = agent
        .get_prompt_once(GetPromptRequestParams::new("ask"))
        .await
        .unwrap();
    let GetPromptResponse::Complete(prompt) = prompt else {
        panic!("input_required on {version:?}: {prompt:?}");
    };
    assert_eq!(
        prompt_text(&prompt),
        r#"user said: "accept" {"name":"ada"}"#
    );
    let resource = agent
        .read_resource_once(ReadResourceRequestParams::new("test://ask"))
        .await
        .unwrap();
    let ReadResourceResponse::Complete(resource) = resource else {
        panic!("input_required on {version:?}: {resource:?}");
    };
    assert_eq!(
        resource_text(&resource),
        r#"user said: "accept" {"name":"ada"}"#
    );
    assert_eq!(user.asked(), vec!["whom to greet?", "whose resource?"]);
    assert_eq!(env.bot.reads_of("prompt:ask"), 1);
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_read_expires_with_an_error_at_the_bot() {
    let env = env_with(autopay, |mut c| {
        c.input_hold = Duration::from_millis(300);
        c
    })
    .await;
    let agent = agent_2026(&env, User::answering(ElicitationAction::Accept)).await;
    let first = agent
        .read_resource_once(ReadResourceRequestParams::new("test://ask"))
        .await
        .unwrap();
    let ReadResourceResponse::InputRequired(asked) = first else {
        panic!("not asked: {first:?}");
    };
    // No retry: past the hold the bot's request gets its error.
    bot_request_expires(&env).await;

    // The expired state's retry is a new read, which the bot asks again.
    let mut late = ReadResourceRequestParams::new("test://ask");
    late.request_state = asked.request_state.clone();
    late.input_responses = Some(answer_bot(&asked, "late"));
    let late = agent.read_resource_once(late).await.unwrap();
    assert!(
        matches!(late, ReadResourceResponse::InputRequired(_)),
        "{late:?}"
    );
    assert_eq!(env.bot.reads_of("resource:test://ask"), 2);
    agent.cancel().await.unwrap();
}
