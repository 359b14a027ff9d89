//! SIGKILLs of `brmcp devnet` at two edges: right after `brmcp serve`'s
//! acknowledgement of a tip was confirmed (no tip is credited twice), and with PMs
//! the relay accepted for a node off the relay (they wait for it across restarts).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use brmcp::clientrpc::Streams;
use serde_json::json;

use crate::devnet_keep::{
    QUIET, START_MATOMS, Seen, TIP_ATOMS, WAIT, devnet, host, pm_recorder, seen, until, wallets,
};
use crate::processes::{Procs, brmcp, devnet_up, serving};

/// Kill cycles of `sigkill_right_after_a_tip_is_acknowledged`.
const ACK_KILL_CYCLES: usize = 3;

/// One query's single integer over the bot's ledger, read beside `brmcp serve`.
fn ledger_int(dir: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(dir.join("alice").join("brmcp.sqlite")).expect("ledger");
    conn.query_row(sql, [], |r| r.get(0)).expect("query")
}

/// `brmcp serve` credits bob's tips to alice's ledger; the devnet is SIGKILLed the
/// moment the harness recorded that the devnet confirmed its acknowledgement of a
/// tip (the ledger row marked cleared), and restarted on the same directory, three
/// times. No acknowledged tip is delivered and credited again: the ledger holds one
/// row per tip, every one credited, bob's balance at the bot is their sum, and the
/// wallets moved by exactly that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_right_after_a_tip_is_acknowledged() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let (mut procs, alice, bob_uid, _) = serving(dir);
    let bob = host(dir, "bob");
    bob.spawn(Streams::new().tip_progress(false))
        .await
        .expect("bob's client");
    let mut paid_atoms = 0i64;
    for cycle in 0..=ACK_KILL_CYCLES {
        // Distinct amounts, so a second credit of any tip shows in the sum.
        let atoms = TIP_ATOMS + i64::try_from(cycle).expect("small");
        #[allow(clippy::cast_precision_loss)]
        let dcr = atoms as f64 / 1e8;
        bob.call(
            "PaymentsService.TipUser",
            &json!({"user": alice, "dcr_amount": dcr, "max_attempts": 3}),
        )
        .await
        .expect("tip scheduled");
        paid_atoms += atoms;
        let cleared = format!(
            "SELECT count(*) FROM tips WHERE cleared = 1 AND matoms = {}",
            atoms * 1000
        );
        let deadline = tokio::time::Instant::now() + WAIT;
        while ledger_int(dir, &cleared) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "tip {cycle} not acknowledged within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if cycle == ACK_KILL_CYCLES {
            break;
        }
        // The devnet is the first process: SIGKILL it, and it alone.
        let devnet_proc = &mut procs.0[0];
        devnet_proc.kill().expect("SIGKILL the devnet");
        devnet_proc.wait().expect("reaped");
        let (mut restarted, _) = devnet(dir, 2);
        procs.0[0] = restarted.0.pop().expect("the devnet");
    }
    // Time for any redelivery to arrive and be recorded.
    tokio::time::sleep(QUIET * 2).await;
    let sum = |sql: &str| ledger_int(dir, sql);
    let tips = i64::try_from(ACK_KILL_CYCLES + 1).expect("small");
    assert_eq!(sum("SELECT count(*) FROM tips"), tips, "one row per tip");
    assert_eq!(sum("SELECT count(*) FROM tips WHERE credited = 1"), tips);
    assert_eq!(
        sum("SELECT coalesce(sum(matoms), 0) FROM tips"),
        paid_atoms * 1000
    );
    assert_eq!(
        sum(&format!(
            "SELECT coalesce(sum(matoms), 0) FROM balances WHERE caller = '{bob_uid}'"
        )),
        paid_atoms * 1000,
        "bob's credit at the bot is exactly what he paid"
    );
    let w = wallets(dir);
    assert_eq!(w["alice"].0, START_MATOMS + paid_atoms * 1000, "{w:?}");
    assert_eq!(w["bob"].0, START_MATOMS - paid_atoms * 1000, "{w:?}");
    bob.close();
}

/// `brmcp devnet offline|online NAME --dir D`, which must succeed.
fn set_offline(dir: &Path, nick: &str, offline: bool) {
    let verb = if offline { "offline" } else { "online" };
    let out = brmcp(&["devnet", verb, nick, "--dir", dir.to_str().expect("utf-8")])
        .output()
        .expect("devnet offline|online");
    assert!(out.status.success(), "{out:?}");
    // The devnet applies the file within a second.
    std::thread::sleep(Duration::from_secs(1));
}

/// PMs the devnet accepted (`PM` answered) while their receiver was off the relay
/// survive a SIGKILL of the devnet: after a restart that keeps the receiver offline
/// nothing arrives, and once it is back each arrives once, in order; a restart with
/// the receiver online delivers the next ones at once, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pms_accepted_for_an_offline_receiver_survive_a_sigkill() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let (procs, uids) = devnet(dir, 2);
    set_offline(dir, "bob", true);
    let alice = host(dir, "alice");
    alice.spawn(Streams::new()).await.expect("alice's client");
    for text in ["q1", "q2"] {
        alice.pm(&uids["bob"], text).await.expect("pm accepted");
    }
    drop(procs);
    alice.close();

    // Restarted with bob still offline: his mail waits at the relay.
    let mut procs = Procs(Vec::new());
    devnet_up(&mut procs, dir, &["--nodes", "2", "--offline", "bob"]);
    let bob_seen: Seen<(u64, String)> = Arc::default();
    let bob = host(dir, "bob");
    bob.spawn(pm_recorder(&bob_seen, false))
        .await
        .expect("bob's client");
    tokio::time::sleep(QUIET).await;
    assert!(
        seen(&bob_seen).is_empty(),
        "delivered while offline: {:?}",
        seen(&bob_seen)
    );
    set_offline(dir, "bob", false);
    until("q1 and q2", || seen(&bob_seen).len() >= 2).await;
    assert!(bob.flush_acks(WAIT).await);
    let alice = host(dir, "alice");
    alice.spawn(Streams::new()).await.expect("alice's client");
    set_offline(dir, "bob", true);
    alice.pm(&uids["bob"], "q3").await.expect("pm accepted");
    drop(procs);
    bob.close();
    alice.close();

    // Restarted with bob online: q3 arrives at once, and nothing acknowledged again.
    let (_procs, _) = devnet(dir, 2);
    let bob = host(dir, "bob");
    bob.spawn(pm_recorder(&bob_seen, false))
        .await
        .expect("bob's client");
    until("q3", || seen(&bob_seen).len() >= 3).await;
    assert!(bob.flush_acks(WAIT).await);
    tokio::time::sleep(QUIET).await;
    let texts: Vec<String> = seen(&bob_seen).into_iter().map(|(_, t)| t).collect();
    assert_eq!(texts, ["q1", "q2", "q3"], "each once, in order");
    bob.close();
}
