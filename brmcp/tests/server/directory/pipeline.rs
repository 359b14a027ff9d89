//! Registration, funding, the paid test, review, renewal, expiry and recrawl sweeps,
//! search and the public refusals (the Go `TestRegistrationE2E` and its siblings).

use std::sync::atomic::Ordering;
use std::time::Duration;

use brmcp::adapters::mem::uid;
use brmcp::directory::{ADMIN_TOOLS, State, payload, verify};
use serde_json::json;

use super::*;

/// Registers, funds in two tips, and reaches `pending_review`.
async fn registered(w: &World, provider: &Session) {
    let status = ok(provider, "register", registration(2000)).await;
    assert_eq!(
        status,
        json!({"state":"awaiting_funding","requiredAtoms":3000,"shortfallAtoms":3000,"feeAtoms":1000,"testBudgetAtoms":2000})
    );
    w.tip(500).await;
    let status = ok(provider, "my_status", json!({})).await;
    assert_eq!(status["state"], "awaiting_funding");
    assert_eq!(status["balanceAtoms"], 500);
    assert_eq!(status["shortfallAtoms"], 2500);
    w.tip(2500).await;
    w.wait_reg(Some(State::PendingReview)).await;
}

async fn approve(admin: &Session) {
    let status = ok(admin, "approve", json!({"uid": provider_uid()})).await;
    assert_eq!(status["state"], "listed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_end_to_end() {
    let w = world().await;
    let provider = w.as_provider().await;
    let (_c, consumer) = w.as_user(CONSUMER).await;
    let (_a, admin) = w.as_user(ADMIN).await;
    assert_eq!(
        ok(&provider, "my_status", json!({})).await,
        json!({"state":"none"})
    );
    registered(&w, &provider).await;
    let status = ok(&provider, "my_status", json!({})).await;
    assert_eq!(
        status,
        json!({"state":"pending_review","feeAtoms":1000,"testBudgetAtoms":2000})
    );
    assert_eq!(
        w.provider.runs.load(Ordering::SeqCst),
        1,
        "one paid execution"
    );
    assert_eq!(w.payer.calls.load(Ordering::SeqCst), 1, "one payment");
    let left = w.provider.harness.balance_matoms(uid(DIR)).await.unwrap();
    assert_eq!(left, 0, "the directory paid exactly the shortfall");
    assert_eq!(
        w.balance().await,
        1500,
        "fee 1000 and the 500 test left 1500"
    );
    assert_eq!(w.directory().stats().unwrap().spend_atoms, 500);

    let hits = ok(&consumer, "search", json!({"query": "paid"})).await;
    assert_eq!(
        hits,
        json!({"hits": [], "total": 0}),
        "not searchable before approval"
    );
    let listed = consumer.list_all_tools().await.unwrap();
    assert!(
        listed
            .iter()
            .all(|t| !ADMIN_TOOLS.contains(&t.name.as_ref()))
    );
    assert!(listed.iter().any(|t| t.name == "introduce"));
    let refusal = consumer
        .call_tool(CallToolRequestParams::new("approve"))
        .await
        .unwrap_err();
    assert!(refusal.to_string().contains("unknown tool"), "{refusal}");
    let names: Vec<_> = listed.iter().map(|t| t.name.to_string()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "tools/list is ordered by name");
    assert_eq!(
        names,
        [
            "get_provider",
            "get_snapshot",
            "introduce",
            "list_categories",
            "my_status",
            "policy",
            "register",
            "search"
        ]
    );
    let snapshot = listed.iter().find(|t| t.name == "get_snapshot").unwrap();
    assert_eq!(
        serde_json::to_value(&snapshot.meta).unwrap(),
        json!({"brmcp/priceAtoms": 50})
    );
    let register = listed.iter().find(|t| t.name == "register").unwrap();
    assert_eq!(
        register.input_schema.get("additionalProperties"),
        Some(&json!(false))
    );
    let admin_tools = admin.list_all_tools().await.unwrap();
    assert!(admin_tools.iter().any(|t| t.name == "approve"));

    let pending = ok(&admin, "pending_registrations", json!({})).await;
    let regs = pending["registrations"].as_array().unwrap();
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0]["uid"], provider_uid());
    assert_eq!(regs[0]["testOutcome"], "ok");
    assert_eq!(regs[0]["paidAtoms"], 500);
    approve(&admin).await;

    let hits = ok(&consumer, "search", json!({"query": "paid"})).await;
    assert_eq!(hits["total"], 1);
    let hit = &hits["hits"][0];
    assert_eq!(hit["providerUid"], provider_uid());
    assert_eq!(hit["tool"], "paid_echo");
    assert_eq!(hit["priceAtoms"], 500);
    assert_eq!(hit["tags"], json!(["echo", "test"]));
    let cheap = ok(&consumer, "search", json!({"maxPriceAtoms": 100})).await;
    assert_eq!(cheap["total"], 1);
    assert_eq!(cheap["hits"][0]["tool"], "echo");
    assert!(
        cheap["hits"][0].get("priceAtoms").is_none(),
        "free tools omit the price"
    );

    let got = ok(&consumer, "get_provider", json!({"uid": provider_uid()})).await;
    assert!(
        got["catalog"].as_array().is_some_and(|c| c.len() == 2),
        "{got}"
    );
    assert_eq!(got["expiresAt"], T0 + 30 * 86_400);
    assert!(got.get("test").is_none() && got.get("renewedAt").is_none());
    let cats = ok(&consumer, "list_categories", json!({})).await;
    assert_eq!(cats, json!({"tags": {"echo": 1, "test": 1}}));
    let status = ok(&provider, "my_status", json!({})).await;
    assert_eq!(
        status,
        json!({"state":"listed","expiresAt": T0 + 30 * 86_400})
    );

    // The snapshot costs 50: unfunded, the consumer gets the harness's quote.
    let quote = refused(&consumer, "get_snapshot", json!({})).await;
    assert!(
        quote.contains(r#""error":"payment_required""#) && quote.contains(r#""priceAtoms":50"#),
        "{quote}"
    );
    // Paid from the provider's residual balance, it verifies under `policy.pubKey`.
    let pub_key = ok(&provider, "policy", json!({})).await["pubKey"]
        .as_str()
        .unwrap()
        .to_owned();
    let signed: brmcp::directory::SignedSnapshot =
        serde_json::from_value(ok(&provider, "get_snapshot", json!({})).await).unwrap();
    let snapshot = verify(&signed, &pub_key).unwrap();
    let listings = snapshot.listings.unwrap();
    assert_eq!(listings.len(), 1);
    assert_eq!(listings[0].uid, provider_uid());
    let other =
        brmcp::directory::Signer::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
    let forged = other.sign(&payload(&[], T0 as i64));
    assert!(
        verify(&forged, &pub_key).is_err(),
        "another key's snapshot does not verify"
    );
    assert_eq!(w.balance().await, 1450);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_below_the_quote_parks_without_paying() {
    let w = world().await;
    let provider = w.as_provider().await;
    let (_a, admin) = w.as_user(ADMIN).await;
    ok(&provider, "register", registration(100)).await;
    w.tip(1100).await;
    let entry = w.wait_reg(Some(State::PendingReview)).await;
    let reg = entry.reg.unwrap();
    assert_eq!(reg.test_err, "quote 500 atoms exceeds the 100 atom budget");
    let status = ok(&provider, "my_status", json!({})).await;
    assert_eq!(
        status["note"],
        "quote 500 atoms exceeds the 100 atom budget"
    );
    assert_eq!(w.provider.runs.load(Ordering::SeqCst), 0);
    assert_eq!(w.payer.calls.load(Ordering::SeqCst), 0);
    assert_eq!(w.balance().await, 100, "only the fee left");
    let refusal = refused(&admin, "approve", json!({"uid": provider_uid()})).await;
    assert_eq!(refusal, "verification has not passed");
    let status = ok(
        &admin,
        "reject",
        json!({"uid": provider_uid(), "reason": "budget too small"}),
    )
    .await;
    assert_eq!(
        status,
        json!({"state":"rejected","note":"budget too small"})
    );
    let status = ok(&provider, "my_status", json!({})).await;
    assert_eq!(
        status,
        json!({"state":"rejected","note":"budget too small"})
    );
    let log = std::fs::read_to_string(w.data.path().join(brmcp::directory::ADMIN_LOG)).unwrap();
    assert!(
        log.contains(r#""action":"reject""#) && log.contains("budget too small"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_payment_refunds_the_escrow() {
    let w = world_with(Mode::Fail).await;
    let provider = w.as_provider().await;
    ok(&provider, "register", registration(2000)).await;
    w.tip(3000).await;
    let entry = w.wait_reg(Some(State::PendingReview)).await;
    assert_eq!(entry.reg.unwrap().test_err, "payment: rail down");
    assert_eq!(
        w.balance().await,
        2000,
        "the 500 debit came back; the fee did not"
    );
    assert_eq!(w.directory().stats().unwrap().spend_entries, 0);
    assert_eq!(w.provider.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_and_public_refusals() {
    let w = world().await;
    let provider = w.as_provider().await;
    let (_c, consumer) = w.as_user(CONSUMER).await;
    let cases = [
        (
            json!({"description": " ", "test": {"tool": "t", "maxAtoms": 1}}),
            "description is required",
        ),
        (
            json!({"description": "d", "test": {"tool": " ", "maxAtoms": 1}}),
            "test.tool is required",
        ),
        (
            json!({"description": "d", "test": {"tool": "t", "maxAtoms": 0}}),
            "test.maxAtoms must be positive",
        ),
        (
            json!({"description": "d", "test": {"tool": "t", "maxAtoms": 200_000}}),
            "test.maxAtoms exceeds the directory's 100000 atom ceiling",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(refused(&provider, "register", args).await, want);
    }
    let unknown = refused(
        &provider,
        "register",
        json!({"description": "d", "x": 1, "test": {"tool": "t", "maxAtoms": 1}}),
    )
    .await;
    assert!(unknown.contains("unknown field"), "{unknown}");
    assert!(
        refused(&provider, "my_status", json!({"x": 1}))
            .await
            .contains("unknown field")
    );
    assert_eq!(w.entry(), Entry::default(), "nothing stored");
    assert_eq!(
        refused(&consumer, "get_provider", json!({"uid": provider_uid()})).await,
        "no listing for that uid"
    );
    assert!(
        refused(&consumer, "introduce", json!({"uid": provider_uid()}))
            .await
            .contains("does not support introductions")
    );
    let policy = ok(&consumer, "policy", json!({})).await;
    assert_eq!(policy["name"], "dir-test");
    assert_eq!(policy["listingFeeAtoms"], 1000);
    assert_eq!(policy["snapshotPriceAtoms"], 50);
    assert_eq!(policy["searchPriceAtoms"], 0);
    assert_eq!(policy["pubKey"].as_str().unwrap().len(), 64);
    assert_eq!(
        ok(&consumer, "list_categories", json!({})).await,
        json!({"tags": {}})
    );
    // Once it knows its own uid (here another identity's), the directory refuses to
    // list itself.
    let (_p, as_self) = w.as_user(PROVIDER + 100).await;
    w.directory().set_self_uid(uid(PROVIDER + 100));
    let refusal = refused(&as_self, "register", registration(10)).await;
    assert_eq!(refusal, "the directory cannot list itself");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_skips_review_and_keeps_the_listing_up() {
    let w = world().await;
    let provider = w.as_provider().await;
    let (_c, consumer) = w.as_user(CONSUMER).await;
    let (_a, admin) = w.as_user(ADMIN).await;
    registered(&w, &provider).await;
    approve(&admin).await;
    let approved_at = w.entry().live.unwrap().approved_at;
    w.clock.advance(Duration::from_secs(3600));
    let mut renewal = registration(2000);
    renewal["description"] = json!("A renewed echo provider");
    let status = ok(&provider, "register", renewal).await;
    assert_eq!(status["state"], "awaiting_funding");
    assert_eq!(status["balanceAtoms"], 1500, "the residual escrow counts");
    assert_eq!(
        ok(&consumer, "search", json!({"query": "paid"})).await["total"],
        1
    );
    w.tip(1500).await;
    let entry = w.wait_reg(None).await;
    let live = entry.live.unwrap();
    assert_eq!(live.approved_at, approved_at);
    assert_eq!(live.renewed_at, approved_at + 3600);
    assert_eq!(live.description, "A renewed echo provider");
    assert_eq!(w.provider.runs.load(Ordering::SeqCst), 2);
    let pending = ok(&admin, "pending_registrations", json!({})).await;
    assert_eq!(pending, json!({"registrations": []}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeps_expire_listings_and_recrawl_for_free() {
    let w = world().await;
    let provider = w.as_provider().await;
    let (_c, consumer) = w.as_user(CONSUMER).await;
    let (_a, admin) = w.as_user(ADMIN).await;
    registered(&w, &provider).await;
    approve(&admin).await;
    let before = w.entry().live.unwrap();
    w.clock.advance(Duration::from_secs(25 * 3600));
    w.directory().sweep().await.unwrap();
    let after = w.entry().live.unwrap();
    assert_eq!(
        after.catalog_checked_at,
        before.catalog_checked_at + 25 * 3600
    );
    assert_eq!(
        after.last_verified_execution,
        before.last_verified_execution
    );
    assert!(after.catalog.as_array().is_some_and(|c| !c.is_empty()));
    assert_eq!(
        w.provider.runs.load(Ordering::SeqCst),
        1,
        "a recrawl runs no test"
    );

    w.clock.advance(Duration::from_secs(30 * 86_400));
    w.directory().sweep().await.unwrap();
    assert_eq!(
        ok(&consumer, "search", json!({})).await,
        json!({"hits": [], "total": 0})
    );
    assert_eq!(
        refused(&consumer, "get_provider", json!({"uid": provider_uid()})).await,
        "no listing for that uid"
    );
    assert_eq!(w.entry(), Entry::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_check_renews_without_a_fee() {
    let w = world().await;
    let provider = w.as_provider().await;
    let (_a, admin) = w.as_user(ADMIN).await;
    registered(&w, &provider).await;
    approve(&admin).await;
    w.clock.advance(Duration::from_secs(100));
    let refusal = refused(&admin, "run_verification", json!({"uid": provider_uid()})).await;
    assert_eq!(
        refusal,
        "provider balance 1500 cannot fund the 2000 atom test"
    );
    w.tip(500).await;
    let status = ok(&admin, "run_verification", json!({"uid": provider_uid()})).await;
    assert_eq!(status, json!({"state":"testing","testBudgetAtoms":2000}));
    let entry = w.wait_reg(None).await;
    let live = entry.live.unwrap();
    assert_eq!(live.renewed_at, T0 as i64 + 100);
    assert_eq!(live.expires_at, T0 as i64 + 100 + 30 * 86_400);
    assert_eq!(w.provider.runs.load(Ordering::SeqCst), 2);
    assert_eq!(w.balance().await, 1500, "500 for the second test, no fee");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payee_that_keeps_refusing_after_payment_is_paid_once() {
    let w = world_with(Mode::Vanish).await;
    let provider = w.as_provider().await;
    ok(&provider, "register", registration(2000)).await;
    w.tip(3000).await;
    // Six retries three seconds apart, then the test fails.
    let entry = w
        .wait_reg_for(Some(State::PendingReview), Duration::from_secs(40))
        .await;
    assert_eq!(
        entry.reg.unwrap().test_err,
        "payment made but the call still refuses; credit did not land"
    );
    assert_eq!(
        w.payer.calls.load(Ordering::SeqCst),
        1,
        "one payment per call"
    );
    assert_eq!(w.provider.runs.load(Ordering::SeqCst), 0);
    let stats = w.directory().stats().unwrap();
    assert_eq!((stats.spend_entries, stats.spend_atoms), (1, 500));
    assert_eq!(
        w.balance().await,
        1500,
        "a confirmed payment is not refunded"
    );
}
