//! Requests: responses matched by id when they come back out of order; the exact PM
//! request shape; PMs to one peer one at a time; the server's error texts kept; at
//! most 16 requests in flight, streams included; basic auth.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{Certs, Fake, FakeOptions, Reply, default_reply, eventually, uid};
use base64::Engine as _;
use brmcp_adapters::PmSender;
use brmcp_clientrpc::{ClientRpcError, ClientRpcHost, Streams};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

const WAIT: Duration = Duration::from_secs(5);

async fn connected(certs: &Certs, fake: &Fake) -> ClientRpcHost {
    let host = ClientRpcHost::new(certs.config(fake)).unwrap();
    host.connect(Streams::new()).await.unwrap();
    host
}

#[tokio::test]
async fn responses_are_matched_by_id_when_out_of_order() {
    let (certs, fake) = Fake::brclient().await;
    // Each Version answer waits for its own gate and names the id it answers.
    let gates: Arc<std::sync::Mutex<Vec<Arc<Semaphore>>>> = Arc::default();
    let handler_gates = gates.clone();
    fake.set_handler(move |call| {
        if call.method != "VersionService.Version" {
            return default_reply(call);
        }
        let gate = Arc::new(Semaphore::new(0));
        handler_gates.lock().unwrap().push(gate.clone());
        let id = call.id.clone();
        Reply::later(async move {
            gate.acquire().await.unwrap().forget();
            Reply::Result(json!({"appVersion": format!("for-{id}"), "appName": "brclient"}))
        })
    });
    let host = connected(&certs, &fake).await;

    let first = tokio::spawn({
        let host = host.clone();
        async move { host.version().await }
    });
    eventually("first request", WAIT, || gates.lock().unwrap().len() == 1).await;
    let second = tokio::spawn({
        let host = host.clone();
        async move { host.version().await }
    });
    eventually("second request", WAIT, || gates.lock().unwrap().len() == 2).await;

    // Answer the second first.
    gates.lock().unwrap()[1].add_permits(1);
    let second = second.await.unwrap().unwrap();
    assert!(!first.is_finished(), "the first call must still wait");
    gates.lock().unwrap()[0].add_permits(1);
    let first = first.await.unwrap().unwrap();

    let ids: Vec<Value> = fake
        .requests_of("VersionService.Version")
        .iter()
        .map(|r| r.id())
        .collect();
    assert_eq!(first.app_version, format!("for-{}", ids[0]));
    assert_eq!(second.app_version, format!("for-{}", ids[1]));
    // Numeric ids, counting up per connection (the stream open took 1).
    assert_eq!(ids, [json!(2), json!(3)]);
    host.close();
}

#[tokio::test]
async fn pm_request_has_the_exact_shape() {
    let (certs, fake) = Fake::brclient().await;
    let host = connected(&certs, &fake).await;
    host.send_pm(&uid(0x22), "hello there".into())
        .await
        .unwrap();

    let sent = fake.requests_of("ChatService.PM");
    assert_eq!(sent.len(), 1);
    let id = sent[0].id();
    assert!(id.is_u64(), "numeric id: {id}");
    assert_eq!(
        sent[0].raw,
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "ChatService.PM",
            "params": {"user": "22".repeat(32), "msg": {"message": "hello there"}}
        }),
        "lowercase hex uid, no zero-valued or unknown fields"
    );
    // The TipProgress stream opened fresh: empty params, decimal suffix.
    let opens = fake.opens(crate::common::TIP_PROGRESS);
    assert_eq!(opens.len(), 1);
    assert_eq!(opens[0].method, "PaymentsService.TipProgress[1]");
    assert_eq!(opens[0].params, json!({}));
    host.close();
}

#[tokio::test]
async fn pms_to_one_peer_leave_one_at_a_time_in_order() {
    let (certs, fake) = Fake::brclient().await;
    let gate = Arc::new(Semaphore::new(0));
    let held = gate.clone();
    fake.set_handler(move |call| {
        if call.method == "ChatService.PM" && call.params["msg"]["message"] == "first" {
            let held = held.clone();
            return Reply::later(async move {
                held.acquire().await.unwrap().forget();
                Reply::Result(json!({}))
            });
        }
        default_reply(call)
    });
    let host = connected(&certs, &fake).await;
    let messages = |fake: &Fake| -> Vec<(String, String)> {
        fake.requests_of("ChatService.PM")
            .iter()
            .map(|r| {
                (
                    r.params["user"].as_str().unwrap()[..2].to_owned(),
                    r.params["msg"]["message"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };

    let first = tokio::spawn({
        let host = host.clone();
        async move { host.send_pm(&uid(0x22), "first".into()).await }
    });
    eventually("first PM at the server", WAIT, || {
        messages(&fake).len() == 1
    })
    .await;
    let second = tokio::spawn({
        let host = host.clone();
        async move { host.send_pm(&uid(0x22), "second".into()).await }
    });
    let other = tokio::spawn({
        let host = host.clone();
        async move { host.send_pm(&uid(0x33), "other peer".into()).await }
    });
    other.await.unwrap().unwrap();
    // Another peer's PM went through; this peer's second waits for the first's answer.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        messages(&fake),
        [
            ("22".to_owned(), "first".to_owned()),
            ("33".to_owned(), "other peer".to_owned())
        ]
    );
    gate.add_permits(1);
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(messages(&fake)[2], ("22".to_owned(), "second".to_owned()));
    host.close();
}

#[tokio::test]
async fn server_error_texts_are_kept() {
    const TOO_LARGE: &str = "cannot enqueue message rpc.RMPrivateMessage estimated as larger \
        than max message size 1887950 > 1887437: RM is too large";
    let (certs, fake) = Fake::brclient().await;
    fake.set_handler(|call| {
        let known = ["user", "msg"];
        if let Some(field) = call
            .params
            .as_object()
            .and_then(|o| o.keys().find(|k| !known.contains(&k.as_str())))
        {
            return Reply::Error(
                -32602,
                format!("unable to decode params: proto: unknown field \"{field}\""),
            );
        }
        let user = call.params["user"].as_str().unwrap_or_default();
        let message = call.params["msg"]["message"].as_str().unwrap_or_default();
        match (user, message) {
            ("carol", _) => Reply::Error(-32603, "user carol not found".into()),
            (_, "") => Reply::Error(-32603, "msg is empty".into()),
            (_, m) if m.len() > 1000 => Reply::Error(-32603, TOO_LARGE.into()),
            _ => Reply::Result(json!({})),
        }
    });
    let host = connected(&certs, &fake).await;

    let err = host.pm("carol", "hi").await.unwrap_err();
    assert_eq!(err.server_message(), Some("user carol not found"));
    assert_eq!(err.code(), Some(-32603));
    assert_eq!(
        err.to_string(),
        "ChatService.PM: user carol not found (code -32603)"
    );

    let err = host.send_pm(&uid(0x22), String::new()).await.unwrap_err();
    assert_eq!(err.server_message(), Some("msg is empty"));

    let err = host
        .send_pm(&uid(0x22), "x".repeat(2000))
        .await
        .unwrap_err();
    assert_eq!(err.server_message(), Some(TOO_LARGE));

    // A raw call sends what it is given, so the server's -32602 can be seen.
    let err = host
        .call(
            "ChatService.PM",
            &json!({"user": "bob", "msg": {"message": "hi"}, "bogus": 1}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientRpcError::Rpc { code: -32602, message, .. }
            if message == "unable to decode params: proto: unknown field \"bogus\""),
        "{err:?}"
    );
    host.close();
}

#[tokio::test]
async fn at_most_16_requests_in_flight_streams_included() {
    let (certs, fake) = Fake::brclient().await;
    let gate = Arc::new(Semaphore::new(0));
    let held = gate.clone();
    fake.set_handler(move |call| {
        let held = held.clone();
        let reply = default_reply(call);
        Reply::later(async move {
            held.acquire().await.unwrap().forget();
            reply
        })
    });
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    // Three open streams hold three of the sixteen.
    host.connect(
        Streams::new()
            .pms(|_pm| async { Ok(()) })
            .tips(|_tip| async { Ok(()) }),
    )
    .await
    .unwrap();
    let calls: Vec<_> = (0..40)
        .map(|_| {
            let host = host.clone();
            tokio::spawn(async move { host.version().await })
        })
        .collect();
    let versions = || fake.requests_of("VersionService.Version").len();
    eventually("13 requests beside 3 streams", WAIT, || versions() == 13).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(versions(), 13, "the 17th must wait for a slot");
    assert_eq!(fake.max_in_flight(), 16);

    gate.add_permits(1000);
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(versions(), 40);
    assert_eq!(fake.max_in_flight(), 16, "never more than 16");
    host.close();
}

#[tokio::test]
async fn basic_auth_is_sent_and_refusals_surface_as_auth_errors() {
    let certs = Certs::brclient();
    let fake = Fake::start(
        &certs,
        FakeOptions {
            basic_auth: Some(("bot".into(), "s3cret".into())),
            ..FakeOptions::default()
        },
    )
    .await;
    let good = ClientRpcHost::new(certs.config(&fake).with_basic_auth("bot", "s3cret")).unwrap();
    good.connect(Streams::new()).await.unwrap();
    good.version().await.unwrap();
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("bot:s3cret")
    );
    assert_eq!(fake.auth_headers(), [Some(expected)]);
    good.close();

    let wrong = ClientRpcHost::new(certs.config(&fake).with_basic_auth("bot", "guess")).unwrap();
    let err = wrong.connect(Streams::new()).await.unwrap_err();
    assert!(
        matches!(err, ClientRpcError::Auth { status: 403 }),
        "{err:?}"
    );

    let none = ClientRpcHost::new(certs.config(&fake)).unwrap();
    let err = none.connect(Streams::new()).await.unwrap_err();
    assert!(
        matches!(err, ClientRpcError::Auth { status: 401 }),
        "{err:?}"
    );

    // In the background, a refusal is retried with backoff, not in a tight loop, and
    // shows in the status.
    let background =
        ClientRpcHost::new(certs.config(&fake).with_basic_auth("bot", "guess")).unwrap();
    let before = fake.accepts().len();
    background.spawn(Streams::new()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let attempts = fake.accepts().len() - before;
    // 20, 40, 80, 160 ms of backoff fit about five attempts in 400 ms.
    assert!((2..=7).contains(&attempts), "{attempts} attempts");
    let status = background.status();
    assert!(!status.connected);
    assert_eq!(
        status.last_error.as_deref(),
        Some("authentication refused (http 403)")
    );
    background.close();
}

#[tokio::test]
async fn no_authorization_header_without_credentials() {
    let (certs, fake) = Fake::brclient().await;
    let host = connected(&certs, &fake).await;
    assert_eq!(fake.auth_headers(), [None]);
    host.close();
}
