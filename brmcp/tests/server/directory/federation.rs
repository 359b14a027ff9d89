//! Federation and the Registrant (the Go `TestFederationE2E`,
//! `TestFederationIntroducerFallback`, `TestRegistrant*`, `TestListingInvitePolicy`,
//! `TestFundHistory`): two directories A and B, a provider listed on B whose
//! Registrant answers A's invite.

use std::collections::HashMap;
use std::sync::Mutex;

use brmcp::directory::{
    AutoFund, IntroduceFuture, Introducer, InviteIn, MAX_KX_INVITE_TRIES, Registrant,
    RegistrantConfig, StatusOut, TestSpec,
};
use brmcp::server::{CallContext, NoArgs};

use super::*;

const DIR_B: u32 = 20;

/// What a Registrant's notify saw: each status and error.
type Notified = Arc<Mutex<Vec<(StatusOut, Option<String>)>>>;

/// A provider with its Registrant: harness, router, registrant, test runs, notices.
type ProviderParts = (Harness, Router, Registrant, Arc<AtomicUsize>, Notified);

/// Tips from `from` land in the payee's harness.
#[derive(Clone)]
struct RoutingPayer {
    from: PeerId,
    to: Arc<Mutex<HashMap<PeerId, Harness>>>,
    calls: Arc<AtomicUsize>,
}

impl Payer for RoutingPayer {
    fn pay(&self, payee: PeerId, atoms: u64) -> PayFuture<'_> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let harness = self.to.lock().unwrap().get(&payee).cloned();
            let harness = harness.ok_or_else(|| PayError::Failed("unknown payee".into()))?;
            let seq = u64::from(u32::from_le_bytes(
                self.from.as_bytes()[28..32].try_into().unwrap(),
            )) << 32
                | self.calls.load(Ordering::SeqCst) as u64;
            harness
                .record_tip(Tip {
                    seq,
                    caller: self.from,
                    matoms: atoms * 1000,
                })
                .await
                .map_err(|e| PayError::Failed(e.to_string().into()))?;
            Ok(())
        })
    }
}

#[derive(Clone, Default)]
struct FakeIntroducer(Arc<Mutex<Vec<(PeerId, PeerId)>>>);

impl Introducer for FakeIntroducer {
    fn introduce(&self, mediator: PeerId, target: PeerId) -> IntroduceFuture<'_> {
        self.0.lock().unwrap().push((mediator, target));
        Box::pin(async { Ok(()) })
    }
}

struct Fed {
    fabric: Fabric,
    clock: ManualClock,
    payees: Arc<Mutex<HashMap<PeerId, Harness>>>,
    a: Directory,
    b: Directory,
    provider: Harness,
    provider_router: Router,
    registrant: Registrant,
    runs: Arc<AtomicUsize>,
    notified: Notified,
    introducer: FakeIntroducer,
    _dirs: Vec<tempfile::TempDir>,
}

fn payer(from: u32, payees: &Arc<Mutex<HashMap<PeerId, Harness>>>) -> RoutingPayer {
    RoutingPayer {
        from: uid(from),
        to: payees.clone(),
        calls: Arc::new(AtomicUsize::new(0)),
    }
}

async fn directory_on(
    fabric: &Fabric,
    clock: &ManualClock,
    me: u32,
    payees: &Arc<Mutex<HashMap<PeerId, Harness>>>,
    introducer: Option<FakeIntroducer>,
) -> (Directory, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let mut builder = Directory::builder()
        .data_dir(data.path())
        .policy(policy())
        .clock(clock.clone())
        .payer(payer(me, payees))
        .self_uid(uid(me));
    if let Some(introducer) = introducer {
        builder = builder.introducer(introducer);
    }
    let directory = builder.build().unwrap();
    let router = directory.start(fabric.sender(uid(me))).unwrap();
    fabric.attach(uid(me), &router);
    directory.resume().await.unwrap();
    payees
        .lock()
        .unwrap()
        .insert(uid(me), directory.harness().clone());
    (directory, data)
}

fn test_spec() -> TestSpec {
    TestSpec {
        tool: "paid_echo".into(),
        args: serde_json::from_value(json!({"text": "hi"})).unwrap(),
        max_atoms: 2000,
    }
}

/// The provider, with a Registrant whose policy is `auto_fund`, and `invite` deciding
/// whether it serves `listing_invite`.
fn provider_with(
    fabric: &Fabric,
    clock: &ManualClock,
    payees: &Arc<Mutex<HashMap<PeerId, Harness>>>,
    auto_fund: AutoFund,
    invite: bool,
    dirs: &mut Vec<tempfile::TempDir>,
) -> ProviderParts {
    let data = tempfile::tempdir().unwrap();
    let notified = Arc::new(Mutex::new(Vec::new()));
    let seen = notified.clone();
    let mut config = RegistrantConfig::new(
        "An echo provider",
        test_spec(),
        data.path().join("reg"),
        payer(PROVIDER, payees),
    );
    config.tags = vec!["echo".into()];
    config.auto_fund = auto_fund;
    config.clock = Arc::new(clock.clone());
    config.notify = Some(Arc::new(move |_, status: &StatusOut, err: Option<&str>| {
        seen.lock()
            .unwrap()
            .push((status.clone(), err.map(str::to_owned)));
    }));
    let registrant = Registrant::new(config).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let mut builder = Harness::builder()
        .data_dir(data.path())
        .clock(clock.clone())
        .allow(|_| true)
        .calls_per_minute(10_000)
        .tool(ToolSpec::fixed(
            "paid_echo",
            "Echo, paid",
            PRICE,
            move |_, a: EchoArgs| {
                counter.fetch_add(1, Ordering::SeqCst);
                async move { Ok(json!({ "echo": a.text })) }
            },
        ))
        .tool(ToolSpec::free("noop", "Nothing", |_, _: NoArgs| async {
            Ok("ok")
        }));
    if invite {
        builder = builder.tool(registrant.listing_invite());
    }
    let harness = builder.build().unwrap();
    let router = harness.start(fabric.sender(uid(PROVIDER))).unwrap();
    fabric.attach(uid(PROVIDER), &router);
    registrant.attach(router.clone());
    payees
        .lock()
        .unwrap()
        .insert(uid(PROVIDER), harness.clone());
    dirs.push(data);
    (harness, router, registrant, runs, notified)
}

fn allow_a() -> AutoFund {
    AutoFund {
        enabled: true,
        allowed_directory_uids: vec![uid(DIR).to_string()],
        ..AutoFund::default()
    }
}

async fn fed(invite: bool) -> Fed {
    let fabric = Fabric::new(3);
    let clock = ManualClock::at_unix(T0);
    let payees = Arc::new(Mutex::new(HashMap::new()));
    let introducer = FakeIntroducer::default();
    let mut dirs = Vec::new();
    let (a, d) = directory_on(&fabric, &clock, DIR, &payees, Some(introducer.clone())).await;
    dirs.push(d);
    let (b, d) = directory_on(&fabric, &clock, DIR_B, &payees, None).await;
    dirs.push(d);
    let auto_fund = AutoFund {
        enabled: true,
        ..AutoFund::default()
    };
    let (provider, provider_router, registrant, runs, notified) =
        provider_with(&fabric, &clock, &payees, auto_fund, invite, &mut dirs);
    let _ = allow_a();
    Fed {
        fabric,
        clock,
        payees,
        a,
        b,
        provider,
        provider_router,
        registrant,
        runs,
        notified,
        introducer,
        _dirs: dirs,
    }
}

async fn session_to(fabric: &Fabric, who: u32, to: u32) -> (Router, Session) {
    let router = fabric.router(uid(who), RouterConfig::client());
    let session = ().serve(router.dial(uid(to)).unwrap()).await.unwrap();
    (router, session)
}

async fn wait_for(directory: &Directory, state: Option<State>) {
    for _ in 0..1000 {
        if directory
            .entry(&uid(PROVIDER))
            .unwrap()
            .reg
            .as_ref()
            .map(|r| r.state)
            == state
        {
            directory.settle().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "never reached {state:?}: {:?}",
        directory.entry(&uid(PROVIDER))
    );
}

/// The provider lists on B through its Registrant.
async fn list_on_b(f: &Fed) {
    f.registrant.register(uid(DIR_B)).await.unwrap();
    wait_for(&f.b, Some(State::PendingReview)).await;
    let (_r, admin_b) = session_to(&f.fabric, ADMIN, DIR_B).await;
    assert_eq!(
        ok(&admin_b, "approve", json!({"uid": provider_uid()})).await["state"],
        "listed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn federation_end_to_end() {
    let f = fed(true).await;
    list_on_b(&f).await;
    assert_eq!(f.runs.load(Ordering::SeqCst), 1);
    let (_r, admin) = session_to(&f.fabric, ADMIN, DIR).await;
    let b = uid(DIR_B).to_string();
    assert_eq!(
        refused(&admin, "verify_peer", json!({"uid": b})).await,
        "not a curated peer; add_peer first"
    );
    ok(
        &admin,
        "add_peer",
        json!({"uid": b, "pubKey": "00".repeat(32)}),
    )
    .await;
    assert_eq!(
        refused(&admin, "verify_peer", json!({"uid": b})).await,
        "snapshot signed by an unexpected key"
    );
    assert_eq!(ok(&admin, "leads", json!({})).await, json!({"leads": []}));
    assert_eq!(
        ok(&admin, "remove_peer", json!({"uid": b})).await,
        json!({"removed": true})
    );
    ok(
        &admin,
        "add_peer",
        json!({"uid": b, "pubKey": f.b.public_key()}),
    )
    .await;
    assert_eq!(
        ok(&admin, "verify_peer", json!({"uid": b})).await,
        json!({"newLeads": 1})
    );
    assert_eq!(
        ok(&admin, "verify_peer", json!({"uid": b})).await,
        json!({"newLeads": 0}),
        "known leads are skipped"
    );
    let leads = ok(&admin, "leads", json!({})).await;
    let lead = &leads["leads"][0];
    assert_eq!(lead["providerUid"], provider_uid());
    assert_eq!(lead["peerUid"], b);
    assert_eq!(lead["state"], "new");
    assert!(
        f.a.entry(&uid(PROVIDER)).unwrap().live.is_none(),
        "a lead is not a listing"
    );

    let lead = ok(&admin, "pursue_lead", json!({"uid": provider_uid()})).await;
    // The accepted invite's registration may already have converted the lead.
    assert!(
        lead["state"] == "invited" || lead["state"] == "converted",
        "{lead}"
    );
    assert!(
        f.introducer.0.lock().unwrap().is_empty(),
        "no introduction needed"
    );
    wait_for(&f.a, Some(State::PendingReview)).await;
    assert_eq!(
        ok(&admin, "approve", json!({"uid": provider_uid()})).await["state"],
        "listed"
    );
    let leads = ok(&admin, "leads", json!({})).await;
    assert_eq!(leads["leads"][0]["state"], "converted");
    assert_eq!(f.runs.load(Ordering::SeqCst), 2, "one test at B, one at A");
    let (_c, consumer) = session_to(&f.fabric, CONSUMER, DIR).await;
    assert_eq!(
        ok(&consumer, "search", json!({"query": "paid"})).await["total"],
        1
    );
    let stats = ok(&admin, "stats", json!({})).await;
    assert_eq!(
        (stats["leads"].clone(), stats["peers"].clone()),
        (json!(1), json!(1))
    );
    let _ = (
        &f.clock,
        &f.payees,
        &f.provider,
        &f.provider_router,
        &f.notified,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_listing_invite_the_peer_introduces_then_kx_invites_once() {
    let mut f = fed(false).await;
    list_on_b(&f).await;
    let (_r, admin) = session_to(&f.fabric, ADMIN, DIR).await;
    let b = uid(DIR_B).to_string();
    ok(
        &admin,
        "add_peer",
        json!({"uid": b, "pubKey": f.b.public_key()}),
    )
    .await;
    ok(&admin, "verify_peer", json!({"uid": b})).await;
    let lead = ok(&admin, "pursue_lead", json!({"uid": provider_uid()})).await;
    assert_eq!(lead["state"], "pursuing");
    assert_eq!(lead["note"], "awaiting key exchange via peer");
    assert_eq!(
        *f.introducer.0.lock().unwrap(),
        vec![(uid(DIR_B), uid(PROVIDER))]
    );

    // The provider restarts with listing_invite; the exchange completes.
    f.provider.close();
    let (provider, router, registrant, runs, notified) = provider_with(
        &f.fabric,
        &f.clock,
        &f.payees,
        AutoFund {
            enabled: true,
            ..AutoFund::default()
        },
        true,
        &mut f._dirs,
    );
    runs.store(f.runs.load(Ordering::SeqCst), Ordering::SeqCst);
    f.a.notify_kx(uid(PROVIDER)).await.unwrap();
    wait_for(&f.a, Some(State::PendingReview)).await;
    let leads = ok(&admin, "leads", json!({})).await;
    assert_eq!(leads["leads"][0]["state"], "converted");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let _ = (provider, router, registrant, notified);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrant_funds_skips_fresh_listings_renews_near_expiry() {
    let f = fed(true).await;
    f.registrant.register(uid(DIR_B)).await.unwrap();
    let (status, err) = f.notified.lock().unwrap().last().cloned().unwrap();
    assert_eq!((status.shortfall_atoms, err), (0, None));
    wait_for(&f.b, Some(State::PendingReview)).await;
    let (_r, admin_b) = session_to(&f.fabric, ADMIN, DIR_B).await;
    ok(&admin_b, "approve", json!({"uid": provider_uid()})).await;
    assert_eq!(f.runs.load(Ordering::SeqCst), 1);

    let status = f.registrant.register(uid(DIR_B)).await.unwrap();
    assert_eq!(status.state, State::Listed, "a fresh listing is left alone");
    assert!(f.b.entry(&uid(PROVIDER)).unwrap().reg.is_none());
    assert_eq!(f.registrant.total_since(0).unwrap(), 3000);

    f.clock.advance(Duration::from_secs(24 * 86_400));
    f.registrant.register(uid(DIR_B)).await.unwrap();
    wait_for(&f.b, None).await;
    let live = f.b.entry(&uid(PROVIDER)).unwrap().live.unwrap();
    assert_eq!(live.renewed_at, T0 as i64 + 24 * 86_400);
    assert_eq!(f.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrant_caps_and_invite_policy() {
    let fabric = Fabric::new(4);
    let clock = ManualClock::at_unix(T0);
    let payees = Arc::new(Mutex::new(HashMap::new()));
    let mut dirs = Vec::new();
    let (a, d) = directory_on(&fabric, &clock, DIR, &payees, None).await;
    dirs.push(d);
    let capped = AutoFund {
        enabled: true,
        max_atoms_per_request: 2999,
        ..AutoFund::default()
    };
    let (_h, _r, registrant, _runs, notified) =
        provider_with(&fabric, &clock, &payees, capped, true, &mut dirs);
    let e = registrant.register(uid(DIR)).await.unwrap_err();
    assert_eq!(
        e,
        "funding declined: 3000 atoms exceeds the 2999 per-request cap"
    );
    assert_eq!(
        notified.lock().unwrap().last().unwrap().1.as_deref(),
        Some(e.as_str())
    );
    assert_eq!(
        a.entry(&uid(PROVIDER)).unwrap().reg.unwrap().state,
        State::AwaitingFunding
    );
    assert_eq!(a.harness().balance_matoms(uid(PROVIDER)).await.unwrap(), 0);
    assert_eq!(
        registrant.total_since(0).unwrap(),
        0,
        "nothing recorded, nothing paid"
    );
    let monthly = AutoFund {
        enabled: true,
        max_atoms_per_month: 4000,
        ..AutoFund::default()
    };
    let (_h2, _r2, reg2, _runs2, _n2) =
        provider_with(&fabric, &clock, &payees, monthly, true, &mut dirs);
    reg2.record_fund(T0 as i64, &uid(DIR), 2000).unwrap();
    assert_eq!(
        reg2.allow_fund(&uid(DIR), 3000).unwrap_err(),
        "3000 atoms would exceed the 4000 monthly cap (2000 spent)"
    );
    clock.advance(Duration::from_secs(30 * 86_400 + 1));
    assert_eq!(reg2.allow_fund(&uid(DIR), 3000), Ok(()), "the window rolls");
    let (_h3, _r3, off, _runs3, _n3) = provider_with(
        &fabric,
        &clock,
        &payees,
        AutoFund::default(),
        true,
        &mut dirs,
    );
    assert_eq!(
        off.register(uid(DIR)).await.unwrap_err(),
        "funding declined: auto-funding is disabled"
    );

    // An invite from a directory outside the allowlist is declined, not an error.
    let (_h4, router, _reg4, _runs4, notified) =
        provider_with(&fabric, &clock, &payees, allow_a(), true, &mut dirs);
    let other = fabric.router(uid(DIR_B), RouterConfig::client());
    let _ = router;
    let session = ().serve(other.dial(uid(PROVIDER)).unwrap()).await.unwrap();
    let out = ok(
        &session,
        "listing_invite",
        json!({"directory": "x", "listingFeeAtoms": 1000}),
    )
    .await;
    assert_eq!(
        out,
        json!({"accepted": false, "note": "directory not in the allowlist"})
    );
    let (status, _) = notified.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        status.note,
        "invite declined: directory not in the allowlist"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fund_history_sums_a_window_and_survives_a_reopen() {
    let fabric = Fabric::new(5);
    let clock = ManualClock::at_unix(T0);
    let payees = Arc::new(Mutex::new(HashMap::new()));
    let data = tempfile::tempdir().unwrap();
    let config = || RegistrantConfig::new("d", test_spec(), data.path(), payer(PROVIDER, &payees));
    let registrant = Registrant::new(config()).unwrap();
    registrant.record_fund(1000, &uid(DIR), 300).unwrap();
    registrant.record_fund(2000, &uid(DIR), 200).unwrap();
    let sums = |r: &Registrant| [0, 1500, 2001].map(|t| r.total_since(t).unwrap());
    assert_eq!(sums(&registrant), [500, 200, 0]);
    drop(registrant);
    let registrant = Registrant::new(config()).unwrap();
    assert_eq!(sums(&registrant), [500, 200, 0]);
    let _ = (fabric, clock);
    let bad = RegistrantConfig::new(" ", test_spec(), data.path(), payer(PROVIDER, &payees));
    assert_eq!(
        Registrant::new(bad).unwrap_err(),
        "registrant: description is required"
    );
}

/// A lead of A, `pursuing` after its introduction, and the old provider gone; the admin
/// session to A.
async fn pursuing_lead(f: &Fed) -> (Router, Session) {
    list_on_b(f).await;
    let (r, admin) = session_to(&f.fabric, ADMIN, DIR).await;
    let b = uid(DIR_B).to_string();
    ok(
        &admin,
        "add_peer",
        json!({"uid": b, "pubKey": f.b.public_key()}),
    )
    .await;
    ok(&admin, "verify_peer", json!({"uid": b})).await;
    let lead = ok(&admin, "pursue_lead", json!({"uid": provider_uid()})).await;
    assert_eq!(lead["state"], "pursuing");
    f.provider.close();
    (r, admin)
}

/// The provider again, its `listing_invite` replaced: `invite` serves it, and every
/// call's key is noted in the returned list.
fn invitee(
    f: &mut Fed,
    invite: impl Fn(Arc<Mutex<Vec<String>>>) -> ToolSpec,
) -> (Harness, Router, Arc<Mutex<Vec<String>>>) {
    let data = tempfile::tempdir().unwrap();
    let keys = Arc::new(Mutex::new(Vec::new()));
    let harness = Harness::builder()
        .data_dir(data.path())
        .clock(f.clock.clone())
        .allow(|_| true)
        .calls_per_minute(10_000)
        .tool(invite(keys.clone()))
        .build()
        .unwrap();
    let router = harness.start(f.fabric.sender(uid(PROVIDER))).unwrap();
    f.fabric.attach(uid(PROVIDER), &router);
    f._dirs.push(data);
    (harness, router, keys)
}

/// The key of a call, noted in `keys`.
fn note_key(keys: &Mutex<Vec<String>>, call: &CallContext) {
    let key = call
        .call_key()
        .map(|k| k.as_str().to_owned())
        .unwrap_or_default();
    keys.lock().unwrap().push(key);
}

async fn lead_of(admin: &Session) -> Value {
    ok(admin, "leads", json!({})).await["leads"][0].clone()
}

/// A crash after the invite reached the provider and before the lead was recorded: the
/// completion, offered again at restart, sends the invite under the same call key, so
/// the provider sees one invite, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_redelivered_after_a_crash_reuses_the_invite_key() {
    let mut f = fed(false).await;
    let (_r, admin) = pursuing_lead(&f).await;
    let (_provider, _router, keys) = invitee(&mut f, |keys| {
        ToolSpec::free(
            "listing_invite",
            "Accepts, slowly",
            move |call: CallContext, _: InviteIn| {
                note_key(&keys, &call);
                async {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok(json!({"accepted": true}))
                }
            },
        )
    });

    // The invite is delivered; the directory dies before it hears the answer.
    let a = f.a.clone();
    let first = tokio::spawn(async move { a.notify_kx(uid(PROVIDER)).await });
    for _ in 0..500 {
        if !keys.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    assert_eq!(lead_of(&admin).await["state"], "pursuing");
    tokio::time::sleep(Duration::from_secs(1)).await;

    f.a.notify_kx(uid(PROVIDER))
        .await
        .expect("the replayed invite");
    assert_eq!(lead_of(&admin).await["state"], "invited");
    let keys = keys.lock().unwrap().clone();
    assert!(!keys.is_empty() && !keys[0].is_empty(), "{keys:?}");
    assert!(
        keys.iter().all(|k| *k == keys[0]),
        "two invites under different keys: {keys:?}"
    );
}

/// A provider whose invite cannot be delivered (it quotes a price for it, beyond the
/// invite's budget of nothing): the completion is not acknowledged (`notify_kx` fails,
/// so the host offers it again), nothing is paid, and after [`MAX_KX_INVITE_TRIES`] it
/// is acknowledged anyway, the lead still `pursuing` with the failure noted, so one
/// bad provider does not hold every later exchange back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undelivered_invite_holds_the_completion_then_gives_up() {
    let mut f = fed(false).await;
    let (_r, admin) = pursuing_lead(&f).await;
    let (provider, _router, keys) = invitee(&mut f, |keys| {
        ToolSpec::fixed(
            "listing_invite",
            "Quotes a price",
            5,
            move |call: CallContext, _: InviteIn| {
                note_key(&keys, &call);
                async { Ok(json!({"accepted": true})) }
            },
        )
    });
    for _ in 1..MAX_KX_INVITE_TRIES {
        let held = f.a.notify_kx(uid(PROVIDER)).await;
        assert!(held.is_err(), "an undelivered invite was acknowledged");
        let lead = lead_of(&admin).await;
        assert_eq!(lead["state"], "pursuing", "{lead}");
    }
    f.a.notify_kx(uid(PROVIDER))
        .await
        .expect("given up after the last try");
    let lead = lead_of(&admin).await;
    assert_eq!(lead["state"], "pursuing", "{lead}");
    assert!(
        lead["note"]
            .as_str()
            .unwrap()
            .contains("invite after KX failed"),
        "{lead}"
    );
    assert!(keys.lock().unwrap().is_empty(), "the paid invite ran");
    assert_eq!(
        provider.balance_matoms(uid(DIR)).await.unwrap(),
        0,
        "the directory paid for an invite"
    );
}
