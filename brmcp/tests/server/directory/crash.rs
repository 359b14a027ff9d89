//! SIGKILL during funding, crawl, the test payment and approval. A child process runs
//! the directory, the provider and the payer on one data directory each and drives
//! [`ROUNDS`] registrations (a first listing approved by the operator, then renewals);
//! the parent kills it after a random delay, over and over, until the rounds are done.
//!
//! Afterwards, from the ledgers and the directory's store:
//! - no provider is charged twice: one standing fee per round, and every standing
//!   escrow debit is a recorded test payment (and every recorded one stands);
//! - no test runs twice: the provider completed exactly one paid test per round, each
//!   under its own call key;
//! - no listing without a passed test: after every kill, a listing on disk is of a
//!   round whose paid test, and every earlier round's, completed at the provider; at
//!   the end the listing exists and every round's test completed;
//! - money is conserved: the tip = balance + fees + escrow debits, and the provider
//!   received no more than the escrow debits.

use std::path::Path;
use std::time::{Duration, Instant};

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::wire::UnixTime;
use brmcp::directory::{ESCROW_TOOL, FEE_TOOL, SpendState, State, Store};
use brmcp::server::{CallState, Ledger, ManualClock, Tip};
use serde_json::json;

use super::*;
use crate::support::{child_dir, log_line, read_lines, spawn_child};

/// Registrations per run: a first listing, then renewals.
const ROUNDS: u64 = 40;
/// Kills per run.
const KILLS: usize = 30;
/// Most runs the test makes to see [`KILLS`]` / 2` kills land.
const MAX_RUNS: usize = 4;
/// The one tip every start redelivers, in atoms: enough for every round.
const TIP_ATOMS: u64 = 100_000;

/// Replays a run's kill delays.
const SEED_ENV: &str = "BRMCP_DIRECTORY_CRASH_SEED";

/// SplitMix64 over `state`, for the kill delays.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Random bytes' worth of u64, for the child's delays and tip ids.
fn random() -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).unwrap();
    u64::from_le_bytes(b)
}

/// A payer that waits a little around crediting, so kills land inside payments.
#[derive(Clone)]
struct SlowPayer(Harness);

impl Payer for SlowPayer {
    fn pay(&self, payee: PeerId, atoms: u64) -> PayFuture<'_> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(random() % 15)).await;
            self.0
                .record_tip(Tip {
                    seq: random() >> 1,
                    caller: uid(DIR),
                    matoms: atoms * 1000,
                })
                .await
                .map_err(|e| PayError::Failed(BoxError::from(e.to_string())))?;
            assert_eq!(payee, uid(PROVIDER));
            tokio::time::sleep(Duration::from_millis(random() % 15)).await;
            Ok(())
        })
    }
}

async fn child(dir: &Path) {
    let log = dir.join("log");
    let fabric = Fabric::new(random());
    let clock = ManualClock::at_unix(T0);
    // Every crawl and test opens a fresh session, and sessions end only when idle
    // (there is no close frame): room for every round of one generation.
    let mut sessions = RouterConfig::server();
    sessions.max_sessions_per_peer = 4 * ROUNDS as usize;
    let provider_harness = Harness::builder()
        .router_config(sessions)
        .data_dir(dir.join("provider"))
        .clock(clock.clone())
        .allow(|_| true)
        .calls_per_minute(u32::MAX)
        .tool(ToolSpec::fixed(
            "paid_echo",
            "paid",
            PRICE,
            |_, a: EchoArgs| async move { Ok(json!({ "echo": a.text })) },
        ))
        .build()
        .unwrap();
    let provider_router = provider_harness
        .start(fabric.sender(uid(PROVIDER)))
        .unwrap();
    fabric.attach(uid(PROVIDER), &provider_router);
    let directory = Directory::builder()
        .data_dir(dir.join("directory"))
        .policy(Policy {
            calls_per_minute: 100_000,
            ..policy()
        })
        .clock(clock.clone())
        .payer(SlowPayer(provider_harness.clone()))
        .self_uid(uid(DIR))
        .build()
        .unwrap();
    let router = directory.start(fabric.sender(uid(DIR))).unwrap();
    fabric.attach(uid(DIR), &router);
    directory.resume().await.unwrap();
    directory
        .harness()
        .record_tip(Tip {
            seq: 1,
            caller: uid(PROVIDER),
            matoms: TIP_ATOMS * 1000,
        })
        .await
        .unwrap();
    let session = ().serve(provider_router.dial(uid(DIR)).unwrap()).await.unwrap();
    let admin_router = fabric.router(uid(ADMIN), RouterConfig::client());
    let admin = ().serve(admin_router.dial(uid(DIR)).unwrap()).await.unwrap();
    let me = uid(PROVIDER);
    for round in 0..ROUNDS {
        // Each round one hour later, so renewals stamp distinct times.
        clock.set(Duration::from_secs(T0 + round * 3600));
        let description = format!("round {round}");
        let entry = directory.entry(&me).unwrap();
        let round_of = |d: &str| d.strip_prefix("round ").and_then(|n| n.parse::<u64>().ok());
        let listed = entry.live.as_ref().and_then(|l| round_of(&l.description));
        if listed.is_some_and(|n| n >= round) {
            continue;
        }
        let pending = entry
            .reg
            .as_ref()
            .is_some_and(|r| r.description == description);
        if !pending {
            let mut args = registration(2000);
            args["description"] = json!(description);
            ok(&session, "register", args).await;
        }
        loop {
            let entry = directory.entry(&me).unwrap();
            match entry.reg.as_ref().map(|r| (r.state, r.test_err.clone())) {
                None => break,
                Some((State::PendingReview, err)) => {
                    assert_eq!(err, "", "round {round} failed");
                    assert_eq!(round, 0, "a renewal lists without review");
                    ok(&admin, "approve", json!({"uid": me.to_string()})).await;
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        }
        let live = directory.entry(&me).unwrap().live.unwrap();
        assert_eq!(live.description, description);
    }
    log_line(&log, "complete");
}

/// Tests the provider completed for the directory, by call key.
fn completed_tests(provider: &Ledger) -> Vec<String> {
    provider
        .journal(Some(&uid(DIR)), 10_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.tool == "paid_echo" && e.state == CallState::Completed)
        .filter_map(|e| e.call_key)
        .collect()
}

/// After a kill: the listing on disk, if any, is of a round `n` for which `n + 1`
/// paid tests completed at the provider (one per round so far), under distinct keys.
fn verify_listing_backed_by_tests(dir: &Path) {
    let store_dir = dir.join("directory");
    if !store_dir.join(brmcp::directory::STORE_FILE).exists() {
        return;
    }
    let store = Store::open(&store_dir).unwrap();
    let Some(live) = store.get(&uid(PROVIDER).to_string()).unwrap().entry.live else {
        return;
    };
    let round: u64 = live
        .description
        .strip_prefix("round ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a listing of no round: {live:?}"));
    assert_eq!(live.test.tool, "paid_echo");
    assert!(live.last_verified_execution > 0, "{live:?}");
    let provider = Ledger::attach(&dir.join("provider")).unwrap();
    let mut keys = completed_tests(&provider);
    keys.sort();
    keys.dedup();
    assert!(
        keys.len() as u64 > round,
        "round {round} listed after {} completed test(s)",
        keys.len()
    );
}

fn verify_after(dir: &Path) {
    let now = UnixTime(i64::MAX / 2);
    let directory = Ledger::open(&dir.join("directory"), now).unwrap().ledger;
    let provider = Ledger::open(&dir.join("provider"), now).unwrap().ledger;
    let store = Store::open(&dir.join("directory")).unwrap();
    let journal = directory.journal(Some(&uid(PROVIDER)), 10_000).unwrap();
    let standing = |tool: &str| {
        journal
            .iter()
            .filter(|e| e.tool == tool && e.state == CallState::Completed)
            .collect::<Vec<_>>()
    };
    assert!(journal.iter().all(|e| e.state != CallState::Pending));
    let fees = standing(FEE_TOOL);
    assert_eq!(fees.len() as u64, ROUNDS, "one fee per round: {journal:#?}");
    let spends = store.spends().unwrap();
    assert!(
        spends
            .iter()
            .all(|s| matches!(s.state, SpendState::Paid | SpendState::Ambiguous)),
        "every test payment settled: {spends:?}"
    );
    let escrow = standing(ESCROW_TOOL);
    let mut debit_keys: Vec<_> = escrow.iter().filter_map(|e| e.call_key.clone()).collect();
    let mut spend_keys: Vec<_> = spends.iter().map(|s| s.debit_key.clone()).collect();
    debit_keys.sort();
    spend_keys.sort();
    assert_eq!(
        debit_keys, spend_keys,
        "standing escrow debits are the recorded payments"
    );
    let escrow_atoms: u64 = escrow.iter().map(|e| e.price_atoms).sum();
    let fee_atoms: u64 = fees.iter().map(|e| e.price_atoms).sum();
    let balance = directory.balances().unwrap();
    let left = balance
        .iter()
        .find(|b| b.caller == uid(PROVIDER))
        .map_or(0, |b| b.matoms / 1000);
    assert_eq!(
        TIP_ATOMS,
        left + fee_atoms + escrow_atoms,
        "money is conserved"
    );

    let runs = provider.journal(Some(&uid(DIR)), 10_000).unwrap();
    let completed: Vec<_> = runs
        .iter()
        .filter(|e| e.tool == "paid_echo" && e.state == CallState::Completed)
        .collect();
    assert_eq!(
        completed.len() as u64,
        ROUNDS,
        "one completed test per round: {runs:#?}"
    );
    let mut keys: Vec<_> = completed
        .iter()
        .filter_map(|e| e.call_key.clone())
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(
        keys.len() as u64,
        ROUNDS,
        "each round's test under its own key"
    );
    // What reached the provider: what it charged the directory plus what is left.
    let held = provider.balances().unwrap();
    let unspent = held
        .iter()
        .find(|b| b.caller == uid(DIR))
        .map_or(0, |b| b.matoms / 1000);
    let received = unspent + completed.iter().map(|e| e.price_atoms).sum::<u64>();
    assert!(
        received <= escrow_atoms,
        "paid out {received}, debited {escrow_atoms}"
    );
    assert!(received >= ROUNDS * PRICE);
    let entry = store.get(&uid(PROVIDER).to_string()).unwrap().entry;
    assert!(entry.live.is_some() && entry.reg.is_none(), "{entry:?}");
    eprintln!(
        "directory crash: {} payments launched for {ROUNDS} tests",
        spends.len()
    );
}

#[test]
fn directory_crash_injection() {
    if let Some(dir) = child_dir() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(child(&dir));
        return;
    }
    let mut seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(random);
    eprintln!("directory crash: {SEED_ENV}={seed}");
    let started = Instant::now();
    // A fast machine can finish every round within a few kills: such a run is still
    // checked, and another one on a fresh directory adds its kills, until enough landed.
    let mut total_kills = 0;
    for run in 1..=MAX_RUNS {
        total_kills += crash_run(&mut seed, started);
        if total_kills >= KILLS / 2 {
            return;
        }
        eprintln!("directory crash: run {run} ended with {total_kills} kill(s) so far");
    }
    panic!("the rounds ran out before the kills did: {total_kills} kill(s) in {MAX_RUNS} runs");
}

/// One run on a fresh directory: kills the child up to [`KILLS`] times, lets it finish,
/// checks every invariant, and returns how many kills landed.
fn crash_run(seed: &mut u64, started: Instant) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let (mut kills, mut generation) = (0, 0);
    loop {
        generation += 1;
        let mut process = spawn_child(module_path!(), "directory_crash_injection", dir.path(), &[]);
        let deadline =
            (kills < KILLS).then(|| Instant::now() + Duration::from_millis(10 + next(seed) % 150));
        let status = loop {
            if let Some(status) = process.try_wait().unwrap() {
                break Some(status);
            }
            match deadline {
                Some(at) if Instant::now() >= at => break None,
                _ if started.elapsed() > Duration::from_secs(240) => {
                    let _ = process.kill();
                    panic!("the run did not finish");
                }
                _ => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        match status {
            None => {
                process.kill().unwrap();
                if process.wait().unwrap().success() {
                    break;
                }
                kills += 1;
                verify_listing_backed_by_tests(dir.path());
            }
            Some(status) => {
                assert!(
                    status.success(),
                    "generation {generation} failed: {status:?}"
                );
                break;
            }
        }
    }
    assert!(read_lines(&log).last().is_some_and(|l| l == "complete"));
    eprintln!("directory crash: {generation} generations, {kills} kills");
    verify_after(dir.path());
    kills
}
