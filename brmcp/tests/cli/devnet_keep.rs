//! `brmcp devnet` keeps what a Bison Relay relay and brclient keep, across SIGKILLs of
//! the devnet process, and shows its wallets (`brmcp devnet wallets`).
//!
//! Moments the devnet is killed at, in `sigkill_keeps_mail_acks_and_tips`:
//! 1. with PMs stored for a node whose client never opened its PM stream, and with
//!    PMs a client received but did not acknowledge (its handler never finished);
//! 2. with PMs queued at the relay for a node that is not running (a node of an
//!    earlier run that this run did not start is offline to the relay) and a tip to
//!    that node scheduled (`TipUser` answered) and retrying;
//! 3. after the tip was paid and every item acknowledged.
//!
//! After each restart: what was unacknowledged is delivered again with its id, what
//! was acknowledged is not, queued PMs arrive in order, the tip is paid exactly once
//! (payer debited once, payee credited once, one `ReceivedTip`, one completed
//! outcome), and `devnet wallets --json` shows each wallet exact.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brmcp::clientrpc::{
    BotConfig, ClientRpcConfig, ClientRpcHost, ReceivedPm, ReceivedTip, Streams, TipProgressEvent,
};
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::processes::{Procs, assert_fortune, brmcp, devnet_up, serving, start_bridge};

/// Every node's starting wallet, in milliatoms (10 DCR).
pub(super) const START_MATOMS: i64 = 10 * 100_000_000 * 1000;

/// The tip in flight: 10,000 atoms.
pub(super) const TIP_ATOMS: i64 = 10_000;

/// How long to wait for something that should happen.
pub(super) const WAIT: Duration = Duration::from_secs(30);

/// Bound on one clientrpc call of the test's clients.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to watch for something that should not happen.
pub(super) const QUIET: Duration = Duration::from_secs(2);

/// `brmcp devnet --dir D --nodes n`: the process and each nick's uid.
pub(super) fn devnet(dir: &Path, nodes: u16) -> (Procs, BTreeMap<String, String>) {
    let mut procs = Procs(Vec::new());
    let out = devnet_up(&mut procs, dir, &["--nodes", &nodes.to_string()]);
    assert!(
        out.iter().any(|l| l.contains("brmcp devnet wallets --dir")),
        "the startup lines say how to see the wallets:\n{}",
        out.join("\n")
    );
    let uids = out
        .iter()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let (nick, uid) = (words.next()?, words.next()?);
            (uid.len() == 64 && uid.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| (nick.to_owned(), uid.to_owned()))
        })
        .collect();
    (procs, uids)
}

/// `brmcp devnet wallets --dir D --json`: nick -> (balance in milliatoms, the wallet).
pub(super) fn wallets(dir: &Path) -> BTreeMap<String, (i64, Value)> {
    let out = brmcp(&[
        "devnet",
        "wallets",
        "--dir",
        dir.to_str().expect("utf-8"),
        "--json",
    ])
    .output()
    .expect("devnet wallets");
    assert!(out.status.success(), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    doc["wallets"]
        .as_array()
        .expect("wallets")
        .iter()
        .map(|w| {
            let matoms = w["balance_matoms"].as_i64().expect("balance_matoms");
            assert_eq!(w["balance_atoms"].as_i64(), Some(matoms / 1000), "{w}");
            (
                w["nick"].as_str().expect("nick").to_owned(),
                (matoms, w.clone()),
            )
        })
        .collect()
}

/// A client of one node, as brclient's clientrpc users run it.
pub(super) fn host(dir: &Path, nick: &str) -> ClientRpcHost {
    let bot = BotConfig::load(dir.join(nick).join("brmcp-serve.conf")).expect("conf");
    let mut config = ClientRpcConfig::from_bot_config(&bot);
    // A call made while the devnet is down fails soon, so a killed cycle ends.
    config.request_timeout = Some(REQUEST_TIMEOUT);
    ClientRpcHost::new(config).expect("host")
}

/// What a client's handlers saw: (sequence id, text) of each PM delivery, in order.
pub(super) type Seen<T> = Arc<Mutex<Vec<T>>>;

pub(super) fn seen<T: Clone>(s: &Seen<T>) -> Vec<T> {
    s.lock().expect("lock").clone()
}

/// Waits until `f` holds, for at most [`WAIT`].
pub(super) async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A PM stream consumer that records each delivery and never finishes the ones
/// whose text starts with `hold` (so they, and everything after them, stay
/// unacknowledged).
pub(super) fn pm_recorder(log: &Seen<(u64, String)>, hold: bool) -> Streams {
    let log = log.clone();
    Streams::new().pms(move |pm: ReceivedPm| {
        let log = log.clone();
        async move {
            let text = pm.msg.message.clone();
            log.lock()
                .expect("lock")
                .push((pm.sequence_id, text.clone()));
            if hold && text.starts_with("hold") {
                std::future::pending::<()>().await;
            }
            Ok(())
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_keeps_mail_acks_and_tips() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();

    // Run 1: alice, bob and carol; carol's client never runs.
    let (mut procs, uids) = devnet(dir, 3);
    let carol = uids["carol"].clone();
    let bob_seen: Seen<(u64, String)> = Arc::default();
    let bob = host(dir, "bob");
    bob.spawn(pm_recorder(&bob_seen, true))
        .await
        .expect("bob's client");
    let alice = host(dir, "alice");
    alice.spawn(Streams::new()).await.expect("alice's client");
    alice.pm(&uids["bob"], "b1").await.expect("pm b1");
    until("b1 at bob", || seen(&bob_seen).len() == 1).await;
    assert!(bob.flush_acks(WAIT).await, "b1 acknowledged");
    alice.pm(&uids["bob"], "hold-b2").await.expect("pm b2");
    alice.pm(&uids["bob"], "b3").await.expect("pm b3");
    alice.pm(&carol, "c1").await.expect("pm c1");
    alice.pm(&carol, "c2").await.expect("pm c2");
    until("b2 at bob", || seen(&bob_seen).len() >= 2).await;
    let run1 = seen(&bob_seen);
    // Moment 1.
    drop(procs);
    bob.close();
    alice.close();

    // Run 2: carol is not started, so the relay keeps her mail and her tip waits.
    let (procs2, _) = devnet(dir, 2);
    procs = procs2;
    let bob_seen2: Seen<(u64, String)> = Arc::default();
    let bob = host(dir, "bob");
    bob.spawn(pm_recorder(&bob_seen2, false))
        .await
        .expect("bob's client");
    until("b2 and b3 again", || seen(&bob_seen2).len() >= 2).await;
    assert!(bob.flush_acks(WAIT).await);
    let again = seen(&bob_seen2);
    let texts: Vec<&str> = again.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        texts,
        ["hold-b2", "b3"],
        "the unacknowledged, and only them"
    );
    assert_eq!(again[0], run1[1], "redelivered with its id");
    if let Some(b3) = run1.get(2) {
        assert_eq!(&again[1], b3);
    }
    let alice = host(dir, "alice");
    alice.spawn(Streams::new()).await.expect("alice's client");
    alice
        .pm(&carol, "c3")
        .await
        .expect("pm c3, queued at the relay");
    #[allow(clippy::cast_precision_loss)]
    let dcr = TIP_ATOMS as f64 / 1e8;
    alice
        .call(
            "PaymentsService.TipUser",
            &json!({"user": carol, "dcr_amount": dcr, "max_attempts": 1000}),
        )
        .await
        .expect("tip scheduled");
    tokio::time::sleep(QUIET).await;
    let w = wallets(dir);
    assert_eq!(w["alice"].0, START_MATOMS, "not paid while carol is away");
    assert_eq!(w["carol"].0, START_MATOMS);
    // Moment 2.
    drop(procs);
    bob.close();
    alice.close();

    // Run 3: carol is back; her mail arrives and the tip is paid, once.
    let (procs3, _) = devnet(dir, 3);
    procs = procs3;
    let results: Seen<TipProgressEvent> = Arc::default();
    let alice = host(dir, "alice");
    let r = results.clone();
    alice
        .spawn(Streams::new().tip_results(move |e: TipProgressEvent| {
            let r = r.clone();
            async move {
                r.lock().expect("lock").push(e);
                Ok(())
            }
        }))
        .await
        .expect("alice's client");
    let carol_pms: Seen<(u64, String)> = Arc::default();
    let carol_tips: Seen<ReceivedTip> = Arc::default();
    let ct = carol_tips.clone();
    let carol_host = host(dir, "carol");
    carol_host
        .spawn(pm_recorder(&carol_pms, false).tips(move |t: ReceivedTip| {
            let ct = ct.clone();
            async move {
                ct.lock().expect("lock").push(t);
                Ok(())
            }
        }))
        .await
        .expect("carol's client");
    until("carol's three PMs", || seen(&carol_pms).len() >= 3).await;
    until("the tip at carol", || !seen(&carol_tips).is_empty()).await;
    until("the tip's outcome at alice", || !seen(&results).is_empty()).await;
    assert!(carol_host.flush_acks(WAIT).await);
    assert!(alice.flush_acks(WAIT).await);
    tokio::time::sleep(QUIET).await;
    let texts: Vec<String> = seen(&carol_pms).into_iter().map(|(_, t)| t).collect();
    assert_eq!(texts, ["c1", "c2", "c3"], "in order, each once");
    let tips = seen(&carol_tips);
    assert_eq!(tips.len(), 1, "{tips:?}");
    assert_eq!(tips[0].amount_matoms, TIP_ATOMS * 1000);
    assert_eq!(tips[0].uid.to_string(), uids["alice"]);
    let outcome = seen(&results);
    assert_eq!(outcome.len(), 1, "{outcome:?}");
    assert!(outcome[0].completed, "{outcome:?}");
    assert_eq!(outcome[0].uid.to_string(), carol);
    let paid = wallets(dir);
    assert_eq!(paid["alice"].0, START_MATOMS - TIP_ATOMS * 1000);
    assert_eq!(paid["carol"].0, START_MATOMS + TIP_ATOMS * 1000);
    assert_eq!(paid["bob"].0, START_MATOMS);
    let recent = &paid["alice"].1["recent_tips"];
    assert_eq!(
        (
            recent[0]["direction"].as_str(),
            recent[0]["peer_nick"].as_str()
        ),
        (Some("sent"), Some("carol")),
        "{recent}"
    );
    assert_eq!(recent[0]["atoms"], json!(TIP_ATOMS));
    // Moment 3.
    drop(procs);
    alice.close();
    carol_host.close();

    // Run 4: nothing acknowledged comes back, nothing is paid twice.
    let (_procs4, _) = devnet(dir, 3);
    let carol_again: Seen<(u64, String)> = Arc::default();
    let carol_host = host(dir, "carol");
    carol_host
        .spawn(pm_recorder(&carol_again, false))
        .await
        .expect("carol's client");
    tokio::time::sleep(QUIET).await;
    assert!(seen(&carol_again).is_empty(), "{:?}", seen(&carol_again));
    let after = wallets(dir);
    for nick in ["alice", "bob", "carol"] {
        assert_eq!(after[nick].0, paid[nick].0, "{nick}");
    }
    carol_host.close();
}

/// `devnet wallets --json` before and after a paid call through `brmcp serve` and
/// `brmcp bridge`: the payer (bob's node) down by the price, the bot (alice's) up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wallets_show_a_paid_call_move_exactly_the_price() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let (mut procs, alice, _bob, _) = serving(dir);
    let before = wallets(dir);
    assert_eq!(before["alice"].0, START_MATOMS);
    assert_eq!(before["bob"].0, START_MATOMS);
    assert_eq!(before["alice"].1["balance_dcr"], json!("10.00000000"));
    let (_bridge_dir, listen, token) = start_bridge(&mut procs, dir, &alice, "autopay");
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/{alice}"))
            .auth_header(token),
    );
    let client = ().serve(transport).await.expect("MCP session");
    let fortune = client
        .call_tool(CallToolRequestParams::new("fortune"))
        .await
        .expect("fortune");
    assert_fortune(&fortune);
    let _ = client.cancel().await;
    // The fortune's price, in atoms.
    let price: i64 = 10_000;
    let after = wallets(dir);
    assert_eq!(after["bob"].0, START_MATOMS - price * 1000, "{after:?}");
    assert_eq!(after["alice"].0, START_MATOMS + price * 1000, "{after:?}");
    assert_eq!(after["bob"].1["balance_dcr"], json!("9.99990000"));
    let tip = &after["alice"].1["recent_tips"][0];
    assert_eq!(tip["direction"], json!("received"), "{tip}");
    assert_eq!(tip["peer_nick"], json!("bob"), "{tip}");
    assert_eq!(tip["atoms"], json!(price), "{tip}");
    // The text form lists both nodes with DCR and atoms.
    let out = brmcp(&["devnet", "wallets", "--dir", dir.to_str().expect("utf-8")])
        .output()
        .expect("devnet wallets");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("9.99990000") && text.contains("999990000") && text.contains("10.00010000"),
        "{text}"
    );
}

/// A torn last journal line (a write cut by SIGKILL) is dropped; a corrupt line or
/// snapshot is refused, naming the file, by the devnet and by `devnet wallets`.
#[test]
fn a_torn_tail_is_dropped_and_a_corrupt_state_file_is_named() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let dir_arg = dir.to_str().expect("utf-8");
    let (procs, _) = devnet(dir, 2);
    drop(procs);
    let journal = dir.join("devnet-journal.jsonl");
    let good = std::fs::read(&journal).expect("journal");
    let mut torn = good.clone();
    torn.extend_from_slice(br#"{"seq":99999,"ops":[{"balance""#);
    std::fs::write(&journal, &torn).expect("write");
    let w = wallets(dir);
    assert_eq!(w["alice"].0, START_MATOMS);
    let (procs, _) = devnet(dir, 2);
    drop(procs);
    assert_eq!(wallets(dir)["bob"].0, START_MATOMS);

    let mut bad = std::fs::read(&journal).expect("journal");
    bad.extend_from_slice(b"{\"seq\": \"not a number\"}\n");
    std::fs::write(&journal, &bad).expect("write");
    for args in [
        vec!["devnet", "wallets", "--dir", dir_arg],
        vec!["devnet", "--dir", dir_arg],
    ] {
        let out = brmcp(&args).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains("devnet-journal.jsonl") && err.contains("corrupt"),
            "{args:?}: {err}"
        );
    }
    std::fs::write(&journal, b"").expect("write");
    std::fs::write(dir.join("devnet-state.json"), b"{\"version\": 1, \"seq\"").expect("write");
    let out = brmcp(&["devnet", "wallets", "--dir", dir_arg])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("devnet-state.json"),
        "{err}"
    );
}

/// Kill cycles in `sigkill_at_random_moments_loses_and_doubles_nothing`: each costs
/// a devnet start and up to [`KILL_WITHIN_MS`] of traffic.
const CYCLES: usize = 5;

/// The latest a cycle's SIGKILL lands after its traffic starts.
const KILL_WITHIN_MS: u64 = 1500;

/// A random number below `n`, from the OS.
fn below(n: u64) -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("random");
    u64::from_le_bytes(b) % n.max(1)
}

/// SIGKILLs at random moments of a stream of PMs and tips from alice to bob (no
/// stream is consumed meanwhile, so nothing is acknowledged): afterwards every PM
/// whose `PM` call was answered is in bob's log once, no PM twice, every tip whose
/// `TipUser` was answered paid, none twice, and the wallets match the tips paid to
/// the milliatom.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_and_doubles_nothing() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let mut answered_pms = Vec::new();
    let mut tried_pms = Vec::new();
    let (mut answered_tips, mut tried_tips) = (0usize, 0usize);
    for cycle in 0..CYCLES {
        let (procs, uids) = devnet(dir, 2);
        let alice = host(dir, "alice");
        alice
            .spawn(Streams::new().tip_progress(false))
            .await
            .expect("alice's client");
        let bob = uids["bob"].clone();
        let traffic = {
            let alice = alice.clone();
            tokio::spawn(async move {
                let (mut pms, mut tips) = (Vec::new(), Vec::new());
                for i in 0.. {
                    let text = format!("p{cycle}-{i}");
                    pms.push((text.clone(), false));
                    if alice.pm(&bob, text).await.is_err() {
                        break;
                    }
                    if let Some(last) = pms.last_mut() {
                        last.1 = true;
                    }
                    tips.push(false);
                    #[allow(clippy::cast_precision_loss)]
                    let dcr = TIP_ATOMS as f64 / 1e8;
                    let params = json!({"user": bob, "dcr_amount": dcr, "max_attempts": 3});
                    if alice
                        .call("PaymentsService.TipUser", &params)
                        .await
                        .is_err()
                    {
                        break;
                    }
                    if let Some(last) = tips.last_mut() {
                        *last = true;
                    }
                }
                (pms, tips)
            })
        };
        let at = below(KILL_WITHIN_MS);
        tokio::time::sleep(Duration::from_millis(at)).await;
        drop(procs);
        let (pms, tips) = tokio::time::timeout(WAIT, traffic)
            .await
            .expect("the calls end with the devnet")
            .expect("join");
        eprintln!(
            "cycle {cycle}: killed after {at} ms, {} PMs and {} tips tried",
            pms.len(),
            tips.len()
        );
        alice.close();
        for (text, ok) in pms {
            if ok {
                answered_pms.push(text.clone());
            }
            tried_pms.push(text);
        }
        answered_tips += tips.iter().filter(|ok| **ok).count();
        tried_tips += tips.len();
    }

    // A last run, consumed: bob's mail and tips, alice's tip outcomes.
    let (_procs, _) = devnet(dir, 2);
    let bob_pms: Seen<(u64, String)> = Arc::default();
    let bob_tips: Seen<ReceivedTip> = Arc::default();
    let outcomes: Seen<TipProgressEvent> = Arc::default();
    let bt = bob_tips.clone();
    let bob = host(dir, "bob");
    bob.spawn(pm_recorder(&bob_pms, false).tips(move |t: ReceivedTip| {
        let bt = bt.clone();
        async move {
            bt.lock().expect("lock").push(t);
            Ok(())
        }
    }))
    .await
    .expect("bob's client");
    let o = outcomes.clone();
    let alice = host(dir, "alice");
    alice
        .spawn(Streams::new().tip_results(move |e: TipProgressEvent| {
            let o = o.clone();
            async move {
                o.lock().expect("lock").push(e);
                Ok(())
            }
        }))
        .await
        .expect("alice's client");
    // Until every answered PM arrived and the tip counts stop moving.
    until("every answered PM", || {
        let got: Vec<String> = seen(&bob_pms).into_iter().map(|(_, t)| t).collect();
        answered_pms.iter().all(|t| got.contains(t))
    })
    .await;
    let mut last = (usize::MAX, usize::MAX);
    let distinct = |ids: Vec<u64>| {
        ids.into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    loop {
        tokio::time::sleep(QUIET).await;
        let now = (
            distinct(seen(&bob_tips).iter().map(|t| t.sequence_id).collect()),
            distinct(seen(&outcomes).iter().map(|e| e.sequence_id).collect()),
        );
        if now == last && now.0 >= answered_tips {
            break;
        }
        last = now;
    }
    // Deliveries by id: a stream reopened before its items were acknowledged gets
    // them again, with their ids, as brclient redelivers.
    let pms: BTreeMap<u64, String> = seen(&bob_pms).into_iter().collect();
    let mut texts: Vec<&str> = pms.values().map(String::as_str).collect();
    texts.sort_unstable();
    let before = texts.len();
    texts.dedup();
    assert_eq!(texts.len(), before, "a PM stored twice: {pms:?}");
    assert!(texts.iter().all(|t| tried_pms.iter().any(|s| s == t)));
    let tips: BTreeMap<u64, ReceivedTip> = seen(&bob_tips)
        .into_iter()
        .map(|t| (t.sequence_id, t))
        .collect();
    assert!(tips.values().all(|t| t.amount_matoms == TIP_ATOMS * 1000));
    let paid = tips.len();
    assert!(
        answered_tips <= paid && paid <= tried_tips,
        "{answered_tips} <= {paid} <= {tried_tips}"
    );
    let outcomes: BTreeMap<u64, TipProgressEvent> = seen(&outcomes)
        .into_iter()
        .map(|e| (e.sequence_id, e))
        .collect();
    assert_eq!(outcomes.len(), paid, "one outcome per tip paid");
    assert!(outcomes.values().all(|e| e.completed), "{outcomes:?}");
    let w = wallets(dir);
    let moved = i64::try_from(paid).expect("count") * TIP_ATOMS * 1000;
    assert_eq!(w["alice"].0, START_MATOMS - moved);
    assert_eq!(w["bob"].0, START_MATOMS + moved);
    alice.close();
    bob.close();
}
