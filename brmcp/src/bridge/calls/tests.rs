//! The journal's steps, bounds, retention and files.

use super::bounds::Bounds;
use super::journal::{
    CALLS_FILE, HELD_SECS, Handing, Journal, JournalError, MAX_KEPT_OUTCOME_BYTES, NewCall,
    Outcome, Recorded,
};
use super::state::State;

const T0: i64 = 1_800_000_000;
const BOT: &str = "0101010101010101010101010101010101010101010101010101010101010101";

fn call<'a>(agent: &'a str, key: &'a str, run: &'a str, args: u8) -> NewCall<'a> {
    NewCall {
        agent,
        session: Some("s1"),
        request: "7",
        key,
        own_key: false,
        bot: BOT,
        tool: "slow",
        args: [args; 32],
        params: r#"{"name":"slow","arguments":{"n":1}}"#,
        run,
    }
}

fn new(journal: &Journal, call: &NewCall<'_>, now: i64) -> i64 {
    match journal.record(call, now).unwrap() {
        Recorded::New(id) => id,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_paid_calls_steps_survive_a_reopen_and_it_is_resumed_by_the_next_run_only() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), T0).unwrap();
    let id = new(&journal, &call("ci", "k1k1k1k1", "run1", 1), T0);
    assert_eq!(journal.sent(id, T0).unwrap(), Some(State::Sent));
    assert_eq!(
        journal.paying(id, 2_000, 2_000, T0).unwrap(),
        Some(State::Paying)
    );
    assert_eq!(journal.paid(id, Some(9), T0).unwrap(), Some(State::Paid));
    assert_eq!(journal.sent(id, T0 + 1).unwrap(), Some(State::Paid));
    drop(journal);

    let journal = Journal::open(dir.path(), T0 + 2).unwrap();
    let row = journal.by_key(BOT, "k1k1k1k1").unwrap().expect("kept");
    assert_eq!(
        (row.state, row.paid_atoms, row.price_atoms, row.spend_id),
        (State::Paid, 2_000, 2_000, Some(9))
    );
    assert!(row.paid());
    assert!(
        journal.in_flight_before("run1").unwrap().is_empty(),
        "its own run runs it"
    );
    let left = journal.in_flight_before("run2").unwrap();
    assert_eq!(left.iter().map(|r| r.id).collect::<Vec<_>>(), [id]);

    journal
        .answer(
            id,
            Outcome::Result(r#"{"content":[]}"#.into()),
            Handing::Held,
            T0 + 3,
        )
        .unwrap();
    assert!(
        journal.in_flight_before("run2").unwrap().is_empty(),
        "answered"
    );
    // An outcome is never replaced, and a finished call not cancelled.
    assert_eq!(
        journal
            .answer(id, Outcome::Error("{}".into()), Handing::Now, T0 + 4)
            .unwrap(),
        None
    );
    assert_eq!(journal.cancel(id, T0 + 4).unwrap(), None);
    assert_eq!(journal.deliver(id, T0 + 5).unwrap(), Some(State::Delivered));
    let row = journal.get(id).unwrap().unwrap();
    assert_eq!(
        row.outcome,
        Some(Outcome::Result(r#"{"content":[]}"#.into()))
    );
}

#[test]
fn a_payment_whose_end_was_not_recorded_counts_as_made() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), T0).unwrap();
    let id = new(&journal, &call("ci", "k2k2k2k2", "run1", 1), T0);
    journal.sent(id, T0).unwrap();
    journal.paying(id, 100, 100, T0).unwrap();
    // The process dies here; the next run takes the call over.
    let row = journal.get(id).unwrap().unwrap();
    assert!(row.paid(), "never paid again automatically");
    assert_eq!(
        journal.reopen(id, "run2", T0 + 1).unwrap(),
        Some(State::Paid)
    );
    // A refused payment leaves an unpaid call unpaid.
    let other = new(&journal, &call("ci", "k3k3k3k3", "run1", 2), T0);
    journal.sent(other, T0).unwrap();
    journal.paying(other, 100, 100, T0).unwrap();
    assert_eq!(journal.unpaid(other, T0).unwrap(), Some(State::Sent));
    assert!(!journal.get(other).unwrap().unwrap().paid());
}

#[test]
fn a_retry_takes_an_undelivered_call_of_an_earlier_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), T0).unwrap();
    let old = new(&journal, &call("ci", "aaaaaaaa", "run1", 1), T0);
    journal.sent(old, T0).unwrap();
    let delivered = new(&journal, &call("ci", "bbbbbbbb", "run1", 2), T0);
    journal
        .answer(delivered, Outcome::Result("{}".into()), Handing::Now, T0)
        .unwrap();
    let own = new(
        &journal,
        &NewCall {
            own_key: true,
            ..call("ci", "cccccccc", "run1", 3)
        },
        T0,
    );
    journal.sent(own, T0).unwrap();
    let current = new(&journal, &call("ci", "dddddddd", "run2", 4), T0);
    journal.sent(current, T0).unwrap();

    let claim = |agent: &str, args: u8| {
        journal
            .claim_retry(agent, BOT, "slow", &[args; 32], "run2", T0 + 10)
            .unwrap()
            .map(|r| r.id)
    };
    assert_eq!(claim("chat", 1), None, "another agent's call");
    assert_eq!(claim("ci", 9), None, "other arguments");
    assert_eq!(claim("ci", 2), None, "delivered: a repeat is a new call");
    assert_eq!(claim("ci", 3), None, "found by its own key only");
    assert_eq!(claim("ci", 4), None, "a call of this run is not a retry's");
    assert_eq!(claim("ci", 1), Some(old));
    assert_eq!(claim("ci", 1), None, "taken once");
    journal.release(old).unwrap();
    assert_eq!(
        claim("ci", 1),
        Some(old),
        "given back by a retry that stopped waiting"
    );
    // Past the replay window, nothing is found.
    journal.release(old).unwrap();
    let late = journal
        .claim_retry("ci", BOT, "slow", &[1; 32], "run2", T0 + HELD_SECS + 1)
        .unwrap();
    assert_eq!(late, None);
}

#[test]
fn a_claim_dies_with_its_process() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), T0).unwrap();
    let id = new(&journal, &call("ci", "eeeeeeee", "run1", 1), T0);
    journal.sent(id, T0).unwrap();
    journal.paying(id, 100, 100, T0).unwrap();
    journal.paid(id, Some(3), T0).unwrap();
    // Answered and held for the agent (its response was never written).
    journal
        .answer(id, Outcome::Result("{}".into()), Handing::Held, T0 + 1)
        .unwrap();
    // Run 2's retry claims the answered call, and the process is killed before its
    // response ends: nothing gives the claim back.
    let claim = |journal: &Journal, run: &str| {
        journal
            .claim_retry("ci", BOT, "slow", &[1; 32], run, T0 + 10)
            .unwrap()
            .map(|r| r.id)
    };
    assert_eq!(claim(&journal, "run2"), Some(id));
    drop(journal);

    // The next process holds no claims: run 3's retry gets the answer, once.
    let journal = Journal::open(dir.path(), T0 + 5).unwrap();
    assert!(!journal.get(id).unwrap().unwrap().claimed);
    assert_eq!(claim(&journal, "run3"), Some(id));
    assert_eq!(claim(&journal, "run3"), None);
    // A delivered call stays delivered across a reopen.
    journal.deliver(id, T0 + 11).unwrap();
    drop(journal);
    let journal = Journal::open(dir.path(), T0 + 12).unwrap();
    assert_eq!(journal.get(id).unwrap().unwrap().state, State::Delivered);
    assert_eq!(claim(&journal, "run4"), None);
}

#[test]
fn over_its_bounds_an_agent_loses_finished_calls_first_and_paid_outcomes_last() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), T0).unwrap().with_bounds(Bounds {
        calls: 4,
        bytes: 1 << 20,
    });
    let keys = [
        "k0k0k0k0", "k1k1k1k1", "k2k2k2k2", "k3k3k3k3", "k4k4k4k4", "k5k5k5k5",
    ];
    // Oldest first: a paid undelivered outcome, an unpaid one, a delivered one, and
    // a call in flight.
    let paid = new(&journal, &call("ci", keys[0], "r", 0), T0);
    journal.sent(paid, T0).unwrap();
    journal.paying(paid, 5, 5, T0).unwrap();
    journal.paid(paid, None, T0).unwrap();
    journal
        .answer(paid, Outcome::Result("{}".into()), Handing::Held, T0)
        .unwrap();
    let unpaid = new(&journal, &call("ci", keys[1], "r", 1), T0);
    journal
        .answer(unpaid, Outcome::Result("{}".into()), Handing::Held, T0)
        .unwrap();
    let delivered = new(&journal, &call("ci", keys[2], "r", 2), T0);
    journal
        .answer(delivered, Outcome::Result("{}".into()), Handing::Now, T0)
        .unwrap();
    let flying = new(&journal, &call("ci", keys[3], "r", 3), T0);
    // Another agent's calls do not count.
    new(&journal, &call("chat", "c0c0c0c0", "r", 0), T0);

    let ids = |j: &Journal| {
        j.all()
            .unwrap()
            .into_iter()
            .filter(|r| r.agent == "ci")
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    let fifth = new(&journal, &call("ci", keys[4], "r", 4), T0);
    assert_eq!(
        ids(&journal),
        [paid, unpaid, flying, fifth],
        "delivered went first"
    );
    let sixth = new(&journal, &call("ci", keys[5], "r", 5), T0);
    assert_eq!(
        ids(&journal),
        [paid, flying, fifth, sixth],
        "then the unpaid outcome"
    );
    let seventh = new(&journal, &call("ci", "k6k6k6k6", "r", 6), T0);
    assert_eq!(
        ids(&journal),
        [flying, fifth, sixth, seventh],
        "the paid outcome last"
    );
    assert!(
        matches!(
            journal.record(&call("ci", "k7k7k7k7", "r", 7), T0).unwrap(),
            Recorded::Full
        ),
        "calls in flight are never evicted"
    );
}

#[test]
fn an_outcome_over_the_bounds_is_kept_as_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), T0).unwrap();
    let id = new(&journal, &call("ci", "bigbigbig", "r", 1), T0);
    let big = format!(
        r#"{{"content":[{{"type":"text","text":"{}"}}]}}"#,
        "x".repeat(MAX_KEPT_OUTCOME_BYTES)
    );
    journal
        .answer(id, Outcome::Result(big.clone()), Handing::Held, T0)
        .unwrap();
    let row = journal.get(id).unwrap().unwrap();
    assert_eq!(row.outcome, Some(Outcome::TooLarge(big.len() as u64)));
    let held = super::begin::held_outcome(row.outcome.as_ref()).expect_err("an error");
    assert!(
        held.message.contains("larger than the bridge keeps"),
        "{held:?}"
    );

    // Within the count bound but not the bytes: kept as its size too.
    let small = Journal::open(dir.path(), T0).unwrap().with_bounds(Bounds {
        calls: 100,
        bytes: 200,
    });
    let id = new(&small, &call("chat", "smallsmall", "r", 1), T0);
    small
        .answer(id, Outcome::Result("y".repeat(300)), Handing::Held, T0)
        .unwrap();
    assert_eq!(
        small.get(id).unwrap().unwrap().outcome,
        Some(Outcome::TooLarge(300))
    );
}

#[test]
fn calls_past_the_replay_window_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), T0).unwrap();
    let id = new(&journal, &call("ci", "oldoldold", "r", 1), T0);
    journal
        .answer(id, Outcome::Result("{}".into()), Handing::Held, T0 + 10)
        .unwrap();
    drop(journal);
    let journal = Journal::open(dir.path(), T0 + 10 + HELD_SECS).unwrap();
    assert!(
        journal.get(id).unwrap().is_some(),
        "kept for the whole window"
    );
    drop(journal);
    let journal = Journal::open(dir.path(), T0 + 11 + HELD_SECS).unwrap();
    assert!(journal.get(id).unwrap().is_none());
}

#[test]
fn a_torn_or_foreign_file_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(CALLS_FILE);
    std::fs::write(
        &path,
        b"SQLite format 3\0 torn here, then garbage: \xff\xfe".repeat(64),
    )
    .unwrap();
    let error = Journal::open(dir.path(), T0).expect_err("garbage");
    assert!(matches!(error, JournalError::Sqlite { .. }), "{error:?}");
    assert!(
        error.to_string().contains(&path.display().to_string()),
        "{error}"
    );

    let other = tempfile::tempdir().unwrap();
    let foreign = rusqlite::Connection::open(other.path().join(CALLS_FILE)).unwrap();
    foreign.execute_batch("CREATE TABLE t (x);").unwrap();
    drop(foreign);
    let error = Journal::open(other.path(), T0).expect_err("foreign");
    assert!(matches!(error, JournalError::Foreign(_)), "{error:?}");
    assert!(error.to_string().contains(CALLS_FILE), "{error}");
}

#[test]
fn each_paid_call_records_the_spend_row_its_own_payment_wrote() {
    use std::sync::Arc;

    use brmcp_adapters::PeerId;
    use brmcp_adapters::SystemClock;
    use brmcp_adapters::wire::UnixTime;

    use super::{Calls, Journaled};
    use crate::bridge::quote::Paid;
    use crate::bridge::spend::{Payment, SpendLog, Spender};

    let dir = tempfile::tempdir().unwrap();
    let calls = Calls::open(dir.path(), Arc::new(SystemClock)).unwrap();
    let spend = SpendLog::open(dir.path(), UnixTime(T0)).unwrap();
    let bot: PeerId = BOT.parse().unwrap();
    // Two calls of one agent, paying the same atoms to the same bot for the same tool,
    // their payments settling in the order they were made: the first call's row is
    // not the newest when it settles.
    let ids = [1u8, 2].map(|n| {
        let key = format!("k{n}k{n}k{n}k{n}");
        new(&calls.journal, &call("ci", &key, "run1", n), T0)
    });
    let rows = [0, 1].map(|pos| {
        spend
            .reserve_as(
                UnixTime(T0),
                &Spender::agent("ci", None),
                Payment::new(&bot, "slow", 2_000),
                100_000,
                pos,
            )
            .unwrap()
            .unwrap()
    });
    assert_ne!(rows[0], rows[1]);
    let journaled = ids.map(|id| {
        let mut call = Journaled::of(&calls, id);
        calls.sent(&mut call);
        let paid = Paid {
            price_atoms: 2_000,
            atoms: 2_000,
        };
        calls.paying(&call, paid);
        call
    });
    for (call, row) in journaled.iter().zip(rows) {
        spend.settle(row, Ok(())).unwrap();
        calls.paid(call, row);
    }
    for (n, row) in rows.iter().enumerate() {
        let key = format!("k{0}k{0}k{0}k{0}", n + 1);
        let kept = calls.journal.by_key(BOT, &key).unwrap().expect("kept");
        assert_eq!(kept.spend_id, Some(*row), "call {key}");
    }
}

#[test]
fn a_payment_the_journal_was_about_to_make_and_never_reserved_is_recorded_unpaid() {
    use std::sync::Arc;

    use brmcp_adapters::PeerId;
    use brmcp_adapters::SystemClock;
    use brmcp_adapters::wire::UnixTime;

    use super::{Calls, Journaled, unpaid_unreserved};
    use crate::bridge::quote::Paid;
    use crate::bridge::spend::{Payment, SpendLog, Spender};

    let dir = tempfile::tempdir().unwrap();
    let calls = Calls::open(dir.path(), Arc::new(SystemClock)).unwrap();
    let spend = SpendLog::open(dir.path(), UnixTime(T0)).unwrap();
    let bot: PeerId = BOT.parse().unwrap();
    let paid = Paid {
        price_atoms: 100,
        atoms: 100,
    };
    let reserve = |key: &str| {
        let spender = Spender::agent("ci", None).for_call(key);
        spend
            .reserve_as(
                UnixTime(T0),
                &spender,
                Payment::new(&bot, "slow", 100),
                100_000,
                0,
            )
            .unwrap()
            .unwrap()
    };
    // An earlier run's calls, each stopped about to pay: one before its payment was
    // reserved, one after, and one paying again after a settled payment.
    let keys = ["k1k1k1k1", "k2k2k2k2", "k3k3k3k3"];
    let ids = [0u8, 1, 2].map(|n| {
        new(
            &calls.journal,
            &call("ci", keys[usize::from(n)], "run1", n),
            T0,
        )
    });
    let [never, reserved, again] = ids.map(|id| {
        let mut call = Journaled::of(&calls, id);
        calls.sent(&mut call);
        call
    });
    calls.paying(&never, paid);
    calls.paying(&reserved, paid);
    reserve(keys[1]);
    calls.paying(&again, paid);
    let first = reserve(keys[2]);
    spend.settle(first, Ok(())).unwrap();
    calls.paid(&again, first);
    calls.paying(&again, paid);

    unpaid_unreserved(&calls, &spend);
    let row = |key| calls.journal.by_key(BOT, key).unwrap().expect("kept");
    let never = row(keys[0]);
    assert_eq!(
        (never.state, never.paying_atoms, never.paid_atoms),
        (State::Sent, 0, 0)
    );
    let reserved = row(keys[1]);
    assert_eq!(
        (reserved.state, reserved.paying_atoms),
        (State::Paying, 100),
        "may be paid"
    );
    let again = row(keys[2]);
    assert_eq!(
        (again.state, again.paying_atoms, again.paid_atoms),
        (State::Paid, 0, 100),
        "paid once, not twice"
    );
}
