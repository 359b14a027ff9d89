//! Crash injection: a child process runs the harness, an in-memory fabric and a client
//! driving a plan of keyed paid calls to a slow tool (two concurrent copies of each call,
//! the second a duplicate); the parent kills it with SIGKILL after a random delay, over
//! and over, restarting it on the same data directory until the plan is done. Kills
//! land before debits, between debit and handler, inside handlers and around outcomes.
//!
//! Afterwards, from the ledger and the fsync'd log:
//! - money is conserved: tips credited = balances + prices of completed calls;
//! - every tip is recorded once, though each start redelivers them all;
//! - nothing is left pending, and every interrupted charge was refunded;
//! - no call ran twice: each key completed at most once, and a handler ran again only
//!   after an interrupted (refunded) run of it;
//! - every call got an answer, and every answer to a key (duplicates, and retries after
//!   restarts) is the same.
//!
//! `crash_injection` (tens of kills) runs in CI; `crash_injection_many` (`--ignored`)
//! does 200. `BRMCP_CRASH_SEED` replays a run's kill delays.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;
use brmcp::adapters::mem::Fabric;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    CallState, Harness, INTERRUPTED, Ledger, TipOutcome, ToolError, ToolSpec, schemars,
};

/// Price of one call, in atoms. [`TIPS`] pay for 2714 calls.
const PRICE: u64 = 7;

/// The tips every start (re)delivers, as a host does until they are acknowledged:
/// (sequence id, milliatoms). The odd remainders check milliatom bookkeeping.
const TIPS: [(u64, u64); 4] = [
    (11, 5_000_333),
    (12, 5_000_333),
    (13, 4_500_001),
    (14, 4_500_001),
];

const GEN_ENV: &str = "BRMCP_CRASH_GEN";
const PLAN_ENV: &str = "BRMCP_CRASH_PLAN";
const SEED_ENV: &str = "BRMCP_CRASH_SEED";

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Work {
    /// The call's number in the plan.
    k: u64,
}

fn failing(k: u64) -> bool {
    k % 7 == 3
}

fn key(k: u64) -> String {
    format!("crash-key-{k:05}")
}

/// The slow paid tool: logs its start and end (synced to disk), sleeps 3 to 14 ms, and
/// fails for every seventh call.
fn work(log: &Path, generation: u64) -> ToolSpec {
    let log = log.to_owned();
    ToolSpec::fixed("work", "Slow paid work", PRICE, move |_, work: Work| {
        let log = log.clone();
        async move {
            let k = work.k;
            log_line(&log, &format!("started {generation} {k}"));
            tokio::time::sleep(Duration::from_millis(3 + (k * 7) % 12)).await;
            if failing(k) {
                log_line(&log, &format!("failed {generation} {k}"));
                return Err(ToolError::new(format!("work {k} failed")));
            }
            log_line(&log, &format!("finished {generation} {k}"));
            Ok(format!("work {k} done in generation {generation}"))
        }
    })
}

/// The child: one life of the server and its caller, until killed or done.
async fn child(dir: &Path) {
    let generation: u64 = std::env::var(GEN_ENV).unwrap().parse().unwrap();
    let plan: u64 = std::env::var(PLAN_ENV).unwrap().parse().unwrap();
    let log = dir.join("log");
    let harness = Harness::builder()
        .data_dir(dir.join("data"))
        .allowed_uids([peer(ALICE)])
        .calls_per_minute(u32::MAX)
        .tool(work(&log, generation))
        .build()
        .unwrap();
    log_line(
        &log,
        &format!("open {generation} refunded={}", harness.refunded_at_open()),
    );
    for (seq, matoms) in TIPS {
        let outcome = tip(&harness, seq, ALICE, matoms).await;
        assert!(matches!(
            outcome,
            TipOutcome::Credited | TipOutcome::Duplicate
        ));
    }
    let fabric = Fabric::new(generation);
    let _router = start(&fabric, &harness);
    let alice = client(&fabric, ALICE).await;

    let done: HashSet<u64> = read_lines(&log)
        .iter()
        .filter_map(|l| l.strip_prefix("done "))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect();
    for k in (0..plan).filter(|k| !done.contains(k)) {
        let key = key(k);
        let args = serde_json::json!({ "k": k });
        let (a, b) = tokio::join!(
            call(&alice, "work", args.clone(), Some(&key)),
            call(&alice, "work", args, Some(&key)),
        );
        if a != b {
            log_line(&log, &format!("mismatch {k}"));
            panic!("duplicate answered differently: {a:?} vs {b:?}");
        }
        log_line(&log, &format!("done {k} {generation} {}", text(&a)));
    }
    log_line(&log, &format!("complete {generation}"));
}

/// SplitMix64, for the kill delays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

/// Where the kill of one generation landed, by the last line it logged.
#[derive(Debug, Default)]
struct Kills {
    /// Before the server opened, or between calls (before a debit, or after a debit
    /// and before its handler logged).
    outside_handlers: usize,
    /// Inside a handler.
    inside_handlers: usize,
    /// After a handler returned, around its outcome being recorded and delivered.
    after_handlers: usize,
}

/// Runs the plan, killing the child `kills` times, then checks the invariants.
fn crash_injection_run(test: &str, kills: usize, plan: u64) {
    let seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("crash injection: {kills} kills over {plan} calls, {SEED_ENV}={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let started = Instant::now();
    let mut killed = Kills::default();
    let mut generation = 0u64;
    loop {
        generation += 1;
        let envs = [
            (GEN_ENV, generation.to_string()),
            (PLAN_ENV, plan.to_string()),
        ];
        let mut process = spawn_child(module_path!(), test, dir.path(), &envs);
        let deadline = if killed.total() < kills {
            Some(Instant::now() + Duration::from_millis(5 + rng.below(150)))
        } else {
            None
        };
        let status = loop {
            if let Some(status) = process.try_wait().unwrap() {
                break Some(status);
            }
            match deadline {
                Some(at) if Instant::now() >= at => break None,
                None if started.elapsed() > Duration::from_secs(120) => {
                    let _ = process.kill();
                    panic!("the last generation did not finish");
                }
                _ => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        let Some(status) = status else {
            process.kill().unwrap();
            let status = process.wait().unwrap();
            if status.success() {
                break; // Finished just before the kill.
            }
            killed.count(&read_lines(&log), generation);
            continue;
        };
        assert!(
            status.success(),
            "generation {generation} failed: {status:?}"
        );
        break;
    }
    let lines = read_lines(&log);
    assert!(
        lines.last().is_some_and(|l| l.starts_with("complete ")),
        "the plan was not completed"
    );
    let interrupted = verify(dir.path(), &lines, plan);
    eprintln!(
        "crash injection: {} generations in {:?}; kills {killed:?}; {interrupted} interrupted \
         charges refunded",
        generation,
        started.elapsed()
    );
    assert!(
        killed.total() >= kills / 2,
        "the plan ran out before the kills did"
    );
    assert!(interrupted >= 1, "no kill left a charge pending");
    assert!(
        killed.inside_handlers >= 1,
        "no kill landed inside a handler"
    );
}

impl Kills {
    fn total(&self) -> usize {
        self.outside_handlers + self.inside_handlers + self.after_handlers
    }

    fn count(&mut self, lines: &[String], generation: u64) {
        let tag = generation.to_string();
        let last = lines.iter().rev().find(|line| {
            let mut words = line.split(' ');
            match words.next() {
                Some("started" | "finished" | "failed" | "open") => words.next() == Some(&tag),
                Some("done") => words.nth(1) == Some(&tag),
                _ => false,
            }
        });
        match last.and_then(|l| l.split(' ').next()) {
            Some("started") => self.inside_handlers += 1,
            Some("finished" | "failed") => self.after_handlers += 1,
            _ => self.outside_handlers += 1,
        }
    }
}

/// Checks every invariant; returns how many charges were refunded as interrupted.
fn verify(dir: &Path, lines: &[String], plan: u64) -> usize {
    assert!(
        !lines.iter().any(|l| l.starts_with("mismatch")),
        "{lines:?}"
    );

    // Every call answered, always the same way, by a run that happened.
    let mut answers: HashMap<u64, HashSet<&str>> = HashMap::new();
    let mut started: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut ended: HashSet<(u64, u64)> = HashSet::new();
    for line in lines {
        let words: Vec<&str> = line.splitn(4, ' ').collect();
        match words[..] {
            ["done", k, _, text] => {
                answers.entry(k.parse().unwrap()).or_default().insert(text);
            }
            ["started", g, k] => started
                .entry(k.parse().unwrap())
                .or_default()
                .push(g.parse().unwrap()),
            ["finished" | "failed", g, k] => {
                ended.insert((g.parse().unwrap(), k.parse().unwrap()));
            }
            _ => {}
        }
    }
    for k in 0..plan {
        let texts = answers
            .get(&k)
            .unwrap_or_else(|| panic!("call {k} never answered"));
        assert_eq!(texts.len(), 1, "call {k} answered differently: {texts:?}");
        let text = *texts.iter().next().unwrap();
        if failing(k) {
            assert_eq!(text, format!("work {k} failed"));
        } else {
            let generation: u64 = text
                .strip_prefix(&format!("work {k} done in generation "))
                .and_then(|g| g.parse().ok())
                .unwrap_or_else(|| panic!("call {k} answered {text:?}"));
            assert!(
                ended.contains(&(generation, k)),
                "call {k}'s answer comes from a run that never finished"
            );
        }
    }

    let opened = Ledger::open(&dir.join("data"), UnixTime(0)).unwrap();
    assert_eq!(
        opened.refunded, 0,
        "the last generation left a charge pending"
    );
    let ledger = opened.ledger;
    let journal = ledger.journal(None, usize::MAX).unwrap();
    let mut interrupted_total = 0;
    let mut completed_atoms = 0;
    for k in 0..plan {
        let rows: Vec<_> = journal
            .iter()
            .filter(|e| e.call_key.as_deref() == Some(key(k).as_str()))
            .collect();
        let count = |state: CallState, reason: Option<&str>| {
            rows.iter()
                .filter(|e| e.state == state && (reason.is_none() || e.reason.as_deref() == reason))
                .count()
        };
        let completed = count(CallState::Completed, None);
        let interrupted = count(CallState::Refunded, Some(INTERRUPTED));
        let handler_errors = count(CallState::Refunded, None) - interrupted;
        assert_eq!(count(CallState::Pending, None), 0, "call {k} pending");
        if failing(k) {
            assert_eq!((completed, handler_errors), (0, 1), "call {k}: {rows:?}");
        } else {
            assert_eq!((completed, handler_errors), (1, 0), "call {k}: {rows:?}");
        }
        // A handler ran again only after an interrupted run, never twice in one life.
        let runs = started.get(&k).map_or(&[][..], Vec::as_slice);
        assert!(
            runs.len() <= 1 + interrupted,
            "call {k} ran {} times with {interrupted} interrupted charges",
            runs.len()
        );
        let lives: HashSet<_> = runs.iter().collect();
        assert_eq!(lives.len(), runs.len(), "call {k} ran twice in one life");
        interrupted_total += interrupted;
        completed_atoms += PRICE * completed as u64;
    }
    assert_eq!(
        journal.len(),
        journal.iter().filter(|e| e.call_key.is_some()).count()
    );

    // Money: every tip credited once; credits = balances + prices of completed calls.
    let mut credits = 0;
    for (seq, matoms) in TIPS {
        let record = ledger.tip(seq).unwrap().expect("tip recorded");
        assert!(record.credited);
        assert_eq!(record.tip.matoms, matoms);
        credits += matoms;
    }
    let balances: u64 = ledger.balances().unwrap().iter().map(|b| b.matoms).sum();
    assert_eq!(credits, balances + completed_atoms * 1000);
    interrupted_total
}

#[test]
fn crash_injection() {
    if let Some(dir) = child_dir() {
        return child_main(&dir);
    }
    crash_injection_run("crash_injection", 40, 240);
}

#[test]
#[ignore = "200 kills: about 20 seconds"]
fn crash_injection_many() {
    if let Some(dir) = child_dir() {
        return child_main(&dir);
    }
    crash_injection_run("crash_injection_many", 200, 1200);
}

fn child_main(dir: &Path) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(child(dir));
}
