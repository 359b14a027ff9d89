//! The spend log against concurrent, late, replayed and hand-made outcomes.

use super::*;

fn bot(n: u8) -> PeerId {
    PeerId::from_bytes([n; 32])
}

/// A payment of 100 atoms to bot 1 for tool `t`, reserved at `now` within a wide cap.
fn reserved(log: &SpendLog, spender: &Spender<'_>, now: UnixTime) -> i64 {
    log.reserve_as(now, spender, Payment::new(&bot(1), "t", 100), 100_000, 0)
        .unwrap()
        .unwrap()
}

#[test]
fn an_agent_is_held_to_its_own_cap_and_to_the_global_one() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = UnixTime(1_000_000);
    let log = SpendLog::open(dir.path(), t0).unwrap();
    let reserve = |agent: &str, cap: Option<u64>, atoms: u64| {
        log.reserve_as(
            t0,
            &Spender::agent(agent, cap),
            Payment::new(&bot(1), "t", atoms),
            1000,
            0,
        )
        .unwrap()
    };
    assert!(reserve("a", Some(500), 400).is_ok());
    assert_eq!(
        reserve("a", Some(500), 200),
        Err(OverCap::Agent(OverDailyCap { spent: 400 }))
    );
    assert!(
        reserve("b", Some(500), 500).is_ok(),
        "b's own budget is free"
    );
    assert_eq!(
        reserve("c", Some(500), 200),
        Err(OverCap::Daily(OverDailyCap { spent: 900 })),
        "the global cap binds the sum"
    );
    let agents: Vec<_> = log
        .entries()
        .unwrap()
        .into_iter()
        .map(|e| e.agent)
        .collect();
    assert_eq!(agents, ["a", "b"]);
    assert_eq!(log.spent_today_by(t0, "a").unwrap(), 400);
}

#[test]
fn reserve_respects_the_rolling_window_and_failures_free_budget() {
    let dir = tempfile::tempdir().unwrap();
    let log = SpendLog::open(dir.path(), UnixTime(1_000_000)).unwrap();
    let t0 = UnixTime(1_000_000);
    let a = log
        .reserve(t0, &bot(1), "t", 600, 1000, 0)
        .unwrap()
        .unwrap();
    assert_eq!(
        log.reserve(t0, &bot(1), "t", 500, 1000, 0).unwrap(),
        Err(OverDailyCap { spent: 600 })
    );
    assert!(log.settle(a, Err("no route")).unwrap());
    assert!(!log.settle(a, Ok(())).unwrap(), "settled once");
    let b = log
        .reserve(t0, &bot(1), "t", 1000, 1000, 0)
        .unwrap()
        .unwrap();
    assert!(log.settle(b, Ok(())).unwrap());
    assert_eq!(log.spent_today(t0).unwrap(), 1000);
    // 24 h later the paid row has left the window.
    let t1 = UnixTime(t0.0 + DAY_SECS);
    assert_eq!(log.spent_today(t1).unwrap(), 0);
    assert!(
        log.reserve(t1, &bot(1), "t", 1000, 1000, 0)
            .unwrap()
            .is_ok()
    );
    assert_eq!(
        log.reserve(t1, &bot(1), "t", 1, 0, 0).unwrap(),
        Err(OverDailyCap { spent: 1000 }),
        "a cap of 0 never pays"
    );
}

fn outcome(id: u64, bot: PeerId, atoms: u64, outcome: Result<(), &str>) -> TipOutcomeEvent<'_> {
    TipOutcomeEvent {
        id,
        bot,
        atoms,
        outcome,
    }
}

#[test]
fn an_outcome_settles_the_oldest_unconfirmed_row_it_can_belong_to() {
    let dir = tempfile::tempdir().unwrap();
    let t = UnixTime(5_000_000);
    let log = SpendLog::open(dir.path(), t).unwrap();
    let first = log.reserve(t, &bot(1), "t", 5, 100, 10).unwrap().unwrap();
    let second = log.reserve(t, &bot(1), "t", 5, 100, 20).unwrap().unwrap();
    assert!(log.unconfirm(first).unwrap());
    assert!(log.unconfirm(second).unwrap());
    for other in [
        outcome(31, bot(2), 5, Ok(())),
        outcome(32, bot(1), 6, Ok(())),
        outcome(10, bot(1), 5, Ok(())),
    ] {
        assert_eq!(log.resolve_outcome(&other).unwrap(), Resolution::NotOurs);
    }
    // Outcomes carry no time: however late, they land.
    assert_eq!(
        log.resolve_outcome(&outcome(40, bot(1), 5, Err("expired")))
            .unwrap(),
        Resolution::Settled(first)
    );
    assert_eq!(
        log.resolve_outcome(&outcome(40, bot(1), 5, Err("expired")))
            .unwrap(),
        Resolution::Replay,
        "a replay settles nothing"
    );
    let entries = log.entries().unwrap();
    assert_eq!(entries[0].status, SpendStatus::Failed);
    assert_eq!(entries[0].err.as_deref(), Some("expired"));
    assert_eq!(entries[0].outcome, Some(40));
    assert_eq!(entries[1].status, SpendStatus::Pending);
    assert_eq!(log.spent_today(t).unwrap(), 5);
    drop(log);
    // Reopened: a bridge starting on the log takes what was left pending as
    // unconfirmed; a new payment's position is never below what was recorded.
    let log = SpendLog::open(dir.path(), t).unwrap();
    log.unconfirm_left_pending().unwrap();
    let third = log.reserve(t, &bot(1), "t", 5, 100, 0).unwrap().unwrap();
    assert_eq!(log.entries().unwrap()[2].tip_pos, 40);
    log.unconfirm(third).unwrap();
    assert_eq!(
        log.resolve_outcome(&outcome(25, bot(1), 5, Ok(())))
            .unwrap(),
        Resolution::Settled(second),
        "older than the third payment's position: only the second's"
    );
    assert_eq!(
        log.resolve_outcome(&outcome(35, bot(1), 5, Ok(())))
            .unwrap(),
        Resolution::NotOurs
    );
    assert_eq!(
        log.resolve_outcome(&outcome(41, bot(1), 5, Ok(())))
            .unwrap(),
        Resolution::Settled(third)
    );
}

#[test]
fn an_outcome_recorded_in_flight_settles_once_whoever_records_first() {
    let dir = tempfile::tempdir().unwrap();
    let t = UnixTime(6_000_000);
    let log = SpendLog::open(dir.path(), t).unwrap();
    // The stream records first; the payer's settlement by the same outcome agrees.
    let x = log.reserve(t, &bot(1), "t", 5, 100, 10).unwrap().unwrap();
    assert_eq!(
        log.resolve_outcome(&outcome(15, bot(1), 5, Ok(())))
            .unwrap(),
        Resolution::Settled(x),
        "in flight, still settled"
    );
    assert!(!log.settle_with(x, Ok(()), Some(15)).unwrap());
    // The payer records first; the stream's record of it is a replay.
    let y = log.reserve(t, &bot(1), "t", 5, 100, 0).unwrap().unwrap();
    assert_eq!(log.entries().unwrap()[1].tip_pos, 15);
    assert!(log.settle_with(y, Err("no route"), Some(25)).unwrap());
    assert_eq!(
        log.resolve_outcome(&outcome(25, bot(1), 5, Err("no route")))
            .unwrap(),
        Resolution::Replay
    );
    let entries = log.entries().unwrap();
    assert_eq!(
        (entries[0].status, entries[0].outcome),
        (SpendStatus::Paid, Some(15))
    );
    assert_eq!(
        (entries[1].status, entries[1].outcome),
        (SpendStatus::Failed, Some(25))
    );
    assert_eq!(log.spent_today(t).unwrap(), 5, "counted once");
    // Two in flight, paired the other way round by the payers: each outcome
    // settles one row, and the totals agree.
    let a = log.reserve(t, &bot(1), "t", 5, 100, 30).unwrap().unwrap();
    let b = log.reserve(t, &bot(1), "t", 5, 100, 30).unwrap().unwrap();
    assert_eq!(
        log.resolve_outcome(&outcome(31, bot(1), 5, Ok(())))
            .unwrap(),
        Resolution::Settled(a)
    );
    assert!(!log.settle_with(b, Ok(()), Some(31)).unwrap());
    assert_eq!(log.spent_today(t).unwrap(), 15, "b still pending");
    assert_eq!(
        log.resolve_outcome(&outcome(32, bot(1), 5, Err("expired")))
            .unwrap(),
        Resolution::Settled(b)
    );
    assert!(!log.settle_with(a, Err("expired"), Some(32)).unwrap());
    assert_eq!(log.spent_today(t).unwrap(), 10);
    // Recorded in flight, then a crash before the payer settled: reopened, the
    // payment is settled, not left pending.
    let c = log.reserve(t, &bot(1), "t", 5, 100, 40).unwrap().unwrap();
    assert_eq!(
        log.resolve_outcome(&outcome(41, bot(1), 5, Ok(())))
            .unwrap(),
        Resolution::Settled(c)
    );
    drop(log);
    let log = SpendLog::open(dir.path(), t).unwrap();
    assert_eq!(log.unconfirm_left_pending().unwrap(), 0);
    assert_eq!(log.entries().unwrap()[4].status, SpendStatus::Paid);
    assert_eq!(log.spent_today(t).unwrap(), 15);
    assert_eq!(
        log.resolve_outcome(&outcome(41, bot(1), 5, Ok(())))
            .unwrap(),
        Resolution::Replay
    );
}

#[test]
fn pending_rows_count_whatever_their_age_until_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let t = UnixTime(7_000_000);
    let log = SpendLog::open(dir.path(), t).unwrap();
    let id = log.reserve(t, &bot(1), "t", 600, 1000, 0).unwrap().unwrap();
    log.unconfirm(id).unwrap();
    let much_later = UnixTime(t.0 + KEEP_SECS + 1);
    assert_eq!(log.spent_today(much_later).unwrap(), 600);
    assert_eq!(
        log.reserve(much_later, &bot(1), "t", 500, 1000, 0).unwrap(),
        Err(OverDailyCap { spent: 600 })
    );
    drop(log);
    let log = SpendLog::open(dir.path(), much_later).unwrap();
    assert_eq!(
        log.entries().unwrap().len(),
        1,
        "never pruned while pending"
    );
    assert!(log.resolve_by_user(id, false).unwrap());
    assert!(!log.resolve_by_user(id, true).unwrap(), "resolved once");
    assert_eq!(log.spent_today(much_later).unwrap(), 0);
    assert_eq!(
        log.entries().unwrap()[0].err.as_deref(),
        Some("marked failed by the user")
    );
}

#[test]
fn open_prunes_old_settled_rows_but_keeps_pending_ones() {
    let dir = tempfile::tempdir().unwrap();
    let t = UnixTime(10_000_000);
    let log = SpendLog::open(dir.path(), t).unwrap();
    let paid = log.reserve(t, &bot(1), "t", 1, 10, 0).unwrap().unwrap();
    log.settle(paid, Ok(())).unwrap();
    log.reserve(t, &bot(1), "t", 2, 10, 0).unwrap().unwrap();
    drop(log);
    let later = UnixTime(t.0 + KEEP_SECS + 1);
    let log = SpendLog::open(dir.path(), later).unwrap();
    let entries = log.entries().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].atoms, 2);
}

#[test]
fn a_call_collects_its_own_payment_first_then_its_agents_then_records_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = UnixTime(1_000_000);
    let log = SpendLog::open(dir.path(), t0).unwrap();
    let pay = |agent: &str, atoms: u64| {
        let id = log
            .reserve_as(
                t0,
                &Spender::agent(agent, Some(10_000)),
                Payment::new(&bot(1), "t", atoms),
                100_000,
                0,
            )
            .unwrap()
            .unwrap();
        assert!(log.settle(id, Ok(())).unwrap());
        id
    };
    let a1 = pay("a", 100);
    let a2 = pay("a", 100);
    let b1 = pay("b", 100);
    let failed = reserved(&log, &Spender::agent("a", None), t0);
    log.settle(failed, Err("no route")).unwrap();
    assert_eq!(log.left_of(failed).unwrap(), 0, "a failed tip left nothing");
    assert_eq!(log.uncollected(Some(&bot(1))).unwrap().len(), 3);

    // a2's call collects its own payment, not the older a1.
    let c = log.collect(t0, &bot(1), "a", "t", Some(a2), 100).unwrap();
    assert_eq!(
        c,
        Collected {
            own: 100,
            others: vec![]
        }
    );
    assert_eq!(
        (log.left_of(a1).unwrap(), log.left_of(a2).unwrap()),
        (100, 0)
    );
    // A call of a answered without paying takes a1; one more takes b's, then credit
    // nobody paid: recorded, counted against a's own cap only.
    let spent_a = log.spent_today_by(t0, "a").unwrap();
    let spent = log.spent_today(t0).unwrap();
    assert_eq!(
        log.collect(t0, &bot(1), "a", "t", None, 100).unwrap().own,
        100
    );
    let c = log.collect(t0, &bot(1), "a", "t", None, 150).unwrap();
    assert_eq!(
        c.others,
        vec![(Some("b".to_owned()), 100), (None, 50)],
        "{c:?}"
    );
    assert_eq!(log.left_of(b1).unwrap(), 0);
    assert!(log.uncollected(None).unwrap().is_empty());
    assert_eq!(log.spent_today_by(t0, "a").unwrap(), spent_a + 150);
    assert_eq!(log.spent_today(t0).unwrap(), spent, "no new money left");
    let uses = log.credit_uses().unwrap();
    assert_eq!(uses.len(), 2);
    assert_eq!(uses[0].credit_of.as_deref(), Some("b"));
    assert_eq!(uses[1].credit_of, None);
    // A day later the use no longer counts; past the history kept it is pruned.
    assert_eq!(
        log.spent_today_by(UnixTime(t0.0 + DAY_SECS + 1), "a")
            .unwrap(),
        0
    );
    drop(log);
    let log = SpendLog::open(dir.path(), UnixTime(t0.0 + KEEP_SECS + 1)).unwrap();
    assert!(log.credit_uses().unwrap().is_empty());
}

#[test]
fn credit_survives_a_restart_and_a_late_outcome_settles_it() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = UnixTime(1_000_000);
    let log = SpendLog::open(dir.path(), t0).unwrap();
    let id = log
        .reserve_as(
            t0,
            &Spender::agent("a", None),
            Payment::new(&bot(2), "t", 40),
            1000,
            5,
        )
        .unwrap()
        .unwrap();
    log.unconfirm(id).unwrap();
    drop(log);
    let log = SpendLog::open(dir.path(), t0).unwrap();
    let left = log.uncollected(None).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(
        (left[0].agent.as_str(), left[0].atoms, left[0].pending),
        ("a", 40, true)
    );
    log.resolve_outcome(&TipOutcomeEvent {
        id: 9,
        bot: bot(2),
        atoms: 40,
        outcome: Err("no route"),
    })
    .unwrap();
    assert!(
        log.uncollected(None).unwrap().is_empty(),
        "failed: no credit"
    );
}

#[test]
fn a_calls_payment_is_the_row_that_names_it_never_another_of_its_kind() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = UnixTime(1_000_000);
    let log = SpendLog::open(dir.path(), t0).unwrap();
    let reserve = |key: &str| reserved(&log, &Spender::agent("a", None).for_call(key), t0);
    let earlier = reserve("k1");
    assert!(log.settle(earlier, Ok(())).unwrap());
    let (one, two) = (bot(1), bot(2));
    let call = |key| CallPayment {
        bot: &one,
        key,
        agent: "a",
        tool: "t",
        atoms: 100,
        since: t0.0,
    };
    // Same agent, bot, tool, atoms and second: still not this call's payment.
    assert_eq!(log.payment_for_call(&call("k2")).unwrap(), None);
    let first = reserve("k2");
    assert!(log.settle(first, Err("no route")).unwrap());
    let again = reserve("k2");
    let found = log.payment_for_call(&call("k2")).unwrap().unwrap();
    assert_eq!(found.id, again, "the call's latest payment");
    assert_eq!(
        log.payment_for_call(&call("k1")).unwrap().unwrap().id,
        earlier
    );
    let elsewhere = CallPayment {
        bot: &two,
        ..call("k2")
    };
    assert_eq!(
        log.payment_for_call(&elsewhere).unwrap(),
        None,
        "another bot's"
    );
}

#[test]
fn a_payment_is_read_by_its_row_id_alone() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = UnixTime(1_000_000);
    let log = SpendLog::open(dir.path(), t0).unwrap();
    let first = reserved(&log, &Spender::agent("a", None).for_call("k1"), t0);
    let second = reserved(&log, &Spender::agent("b", None).for_call("k2"), t0);
    assert!(log.settle(first, Err("no route")).unwrap());
    let read = log.payment(first).unwrap().unwrap();
    assert_eq!(
        (read.id, read.agent.as_str(), read.status),
        (first, "a", SpendStatus::Failed)
    );
    assert_eq!(
        log.payment(second).unwrap().unwrap().status,
        SpendStatus::Pending
    );
    assert_eq!(log.payment(second + 1).unwrap(), None, "no such row");
}

#[test]
fn a_row_written_before_rows_named_their_call_may_be_its_payment() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = UnixTime(1_000_000);
    let log = SpendLog::open(dir.path(), t0).unwrap();
    // As an older bridge wrote it: no call named.
    let legacy = reserved(&log, &Spender::agent("a", None), t0);
    let one = bot(1);
    let call = |since: i64, atoms: u64| CallPayment {
        bot: &one,
        key: "k",
        agent: "a",
        tool: "t",
        atoms,
        since,
    };
    let found = log.payment_for_call(&call(t0.0, 100)).unwrap();
    assert_eq!(found.map(|e| e.id), Some(legacy), "it may be the call's");
    assert_eq!(
        log.payment_for_call(&call(t0.0 + 1, 100)).unwrap(),
        None,
        "reserved before the call began"
    );
    assert_eq!(
        log.payment_for_call(&call(t0.0, 101)).unwrap(),
        None,
        "another amount"
    );
    // A row that names the call wins over one that may be it.
    let named = reserved(&log, &Spender::agent("a", None).for_call("k"), t0);
    let found = log.payment_for_call(&call(t0.0, 100)).unwrap();
    assert_eq!(found.map(|e| e.id), Some(named));
}

#[test]
fn a_damaged_status_is_an_error_never_taken_for_failed() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = UnixTime(1_000_000);
    let log = SpendLog::open(dir.path(), t0).unwrap();
    let id = log.reserve(t0, &bot(1), "t", 5, 100, 0).unwrap().unwrap();
    log.db()
        .execute_batch(&format!(
            "PRAGMA ignore_check_constraints = ON; UPDATE spend SET status = 'lost' WHERE id = {id}"
        ))
        .unwrap();
    let err = log.entries().unwrap_err().to_string();
    assert!(err.contains("spend status \"lost\""), "{err}");
    assert!(log.status(id).is_err());
}

#[test]
fn a_call_whose_own_payment_is_pending_collects_its_agents_confirmed_credit_first() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = UnixTime(1_000_000);
    let log = SpendLog::open(dir.path(), t0).unwrap();
    let reserve = |key: &str| reserved(&log, &Spender::agent("a", None).for_call(key), t0);
    // Credit a refunded call left, confirmed; then a call whose tip's outcome went to
    // another payment: still pending.
    let refunded = reserve("k1");
    assert!(log.settle(refunded, Ok(())).unwrap());
    let own = reserve("k2");
    log.unconfirm(own).unwrap();
    let collected = log.collect(t0, &bot(1), "a", "t", Some(own), 100).unwrap();
    assert_eq!(collected.own, 100);
    assert!(collected.others.is_empty());
    assert_eq!(
        log.left_of(refunded).unwrap(),
        0,
        "the credit the bot charged"
    );
    assert_eq!(log.left_of(own).unwrap(), 100, "what its outcome decides");
    // Its tip never arrived: nothing is left with the bot.
    assert!(log.settle(own, Err("lost")).unwrap());
    assert!(log.uncollected(None).unwrap().is_empty());

    // A confirmed own payment still goes first.
    let older = reserve("k3");
    assert!(log.settle(older, Ok(())).unwrap());
    let mine = reserve("k4");
    assert!(log.settle(mine, Ok(())).unwrap());
    log.collect(t0, &bot(1), "a", "t", Some(mine), 100).unwrap();
    assert_eq!(
        (log.left_of(older).unwrap(), log.left_of(mine).unwrap()),
        (100, 0)
    );
}

#[test]
fn a_payment_left_pending_for_an_older_ones_outcome_is_uncertain_since_the_older_one() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = UnixTime(1_000_000);
    let log = SpendLog::open(dir.path(), t0).unwrap();
    let spender = Spender::agent("a", None);
    // A tip lost as the host went down, then one whose outcome (7) the stream gives
    // the lost one, then another whose outcome (9) the stream gives the second.
    let lost = reserved(&log, &spender, t0);
    log.unconfirm(lost).unwrap();
    let second = reserved(&log, &spender, UnixTime(t0.0 + 100));
    assert_eq!(
        log.resolve_outcome(&outcome(7, bot(1), 100, Ok(())))
            .unwrap(),
        Resolution::Settled(lost)
    );
    log.unconfirm(second).unwrap();
    assert!(log.stays_pending_for(second, 7).unwrap());
    let third = reserved(&log, &spender, UnixTime(t0.0 + 200));
    assert_eq!(
        log.resolve_outcome(&outcome(9, bot(1), 100, Ok(())))
            .unwrap(),
        Resolution::Settled(second)
    );
    log.unconfirm(third).unwrap();
    assert!(log.stays_pending_for(third, 9).unwrap());
    let since = |id: i64| {
        log.uncollected(None)
            .unwrap()
            .into_iter()
            .find(|u| u.id == id)
            .map(|u| (u.ts, u.since))
    };
    assert_eq!(
        since(third),
        Some((t0.0 + 200, t0.0)),
        "the lost tip's uncertainty, passed on twice, keeps its date"
    );
    // Never made younger, and only a pending row or a recorded outcome counts.
    assert!(!log.stays_pending_for(third, 7).unwrap());
    assert!(!log.stays_pending_for(third, 99).unwrap());
    assert!(!log.stays_pending_for(lost, 9).unwrap());
    assert_eq!(since(lost), Some((t0.0, t0.0)));
    // Reopened: the date is kept.
    drop(log);
    let log = SpendLog::open(dir.path(), t0).unwrap();
    let row = log.uncollected(None).unwrap();
    assert_eq!(row.last().map(|u| (u.id, u.since)), Some((third, t0.0)));
}
