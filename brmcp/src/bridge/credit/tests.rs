//! The credit rules' cases: the pure rule 2, first payments, and admissions.

use super::*;

#[test]
fn another_agents_calls_or_credit_hold_a_call_back_and_its_own_do_not() {
    let mut in_flight = HashMap::new();
    in_flight.insert("a".to_owned(), 2);
    assert_eq!(
        blocker(
            "a",
            Some(&in_flight),
            (&[("a".into(), 5)], &[]),
            false,
            None
        ),
        None
    );
    assert_eq!(
        blocker("b", Some(&in_flight), (&[], &[]), false, None),
        Some(Blocker::Calls { agent: "a".into() })
    );
    assert_eq!(
        blocker(
            "b",
            None,
            (&[("b".into(), 3), ("a".into(), 7)], &[]),
            false,
            None
        ),
        Some(Blocker::Credit {
            agent: "a".into(),
            atoms: 7,
            pending: false
        })
    );
    in_flight.insert("a".to_owned(), 0);
    assert_eq!(
        blocker(
            "b",
            Some(&in_flight),
            (&[("a".into(), 0)], &[]),
            false,
            None
        ),
        None
    );
}

#[test]
fn at_a_reserving_bot_calls_under_way_hold_no_call_back_and_credit_left_over_does() {
    let mut in_flight = HashMap::new();
    in_flight.insert("a".to_owned(), 1);
    let credit = [("a".to_owned(), 7)];
    assert_eq!(blocker("b", Some(&in_flight), (&[], &[]), true, None), None);
    // The credit given here is of payments whose calls ended (`credit_at` drops
    // the others).
    assert_eq!(
        blocker("b", Some(&in_flight), (&credit, &[]), true, None),
        Some(Blocker::Credit {
            agent: "a".into(),
            atoms: 7,
            pending: false
        })
    );
    assert_eq!(
        blocker("b", None, (&credit, &[]), true, None),
        Some(Blocker::Credit {
            agent: "a".into(),
            atoms: 7,
            pending: false
        })
    );
    assert_eq!(blocker("a", None, (&credit, &[]), true, None), None);
}

#[test]
fn credit_of_a_tip_whose_outcome_is_not_known_says_so() {
    let credit = [("a".to_owned(), 7), ("c".to_owned(), 2)];
    let unconfirmed = ["a".to_owned()];
    for reserves in [false, true] {
        assert_eq!(
            blocker("b", None, (&credit, &unconfirmed), reserves, None),
            Some(Blocker::Credit {
                agent: "a".into(),
                atoms: 7,
                pending: true
            })
        );
        assert_eq!(
            blocker("a", None, (&credit, &unconfirmed), reserves, None),
            Some(Blocker::Credit {
                agent: "c".into(),
                atoms: 2,
                pending: false
            })
        );
    }
}

#[test]
fn an_agents_own_credit_covering_its_call_lets_it_past_anothers() {
    // Both agents hold credit a refunded call left: each call collects its own.
    let credit = [("a".to_owned(), 1000), ("b".to_owned(), 1000)];
    for reserves in [false, true] {
        assert_eq!(
            blocker("a", None, (&credit, &[]), reserves, Some(1000)),
            None
        );
        assert_eq!(
            blocker("b", None, (&credit, &[]), reserves, Some(1000)),
            None
        );
        // Not when the call may cost more than the agent's credit, or its cost is
        // not known.
        for most in [Some(1001), None] {
            assert_eq!(
                blocker("a", None, (&credit, &[]), reserves, most),
                Some(Blocker::Credit {
                    agent: "b".into(),
                    atoms: 1000,
                    pending: false
                })
            );
        }
    }
    // The agent's own calls under way may take its credit first.
    let mut in_flight = HashMap::new();
    in_flight.insert("a".to_owned(), 1);
    assert!(blocker("a", Some(&in_flight), (&credit, &[]), true, Some(1000)).is_some());
    assert_eq!(
        blocker("a", Some(&in_flight), (&credit, &[]), true, Some(500)),
        None
    );
    // Another agent's calls under way still hold it back at a bot keeping one balance.
    let mut in_flight = HashMap::new();
    in_flight.insert("b".to_owned(), 1);
    assert_eq!(
        blocker("a", Some(&in_flight), (&credit, &[]), false, Some(1000)),
        Some(Blocker::Calls { agent: "b".into() })
    );
}

#[test]
fn a_first_payment_does_not_count_on_other_agents_credit() {
    // Nothing held: the price.
    assert_eq!(first_payment(2000, 2000, 500), 2000);
    // The bot holds 100 another agent paid: paid, not spent.
    assert_eq!(first_payment(1900, 2000, 100), 2000);
    // It holds more than others paid: the rest (a hand tip, say) is counted on.
    assert_eq!(first_payment(1500, 2000, 100), 1600);
    // Others paid more than it holds: never more than the price.
    assert_eq!(first_payment(1900, 2000, 5000), 2000);
    assert_eq!(first_payment(6, 10, 0), 6);
}

/// Pays nothing: the admission tests make no payment.
struct NoPayer;

impl crate::bridge::Payer for NoPayer {
    async fn pay(&self, _bot: PeerId, _atoms: u64) -> Result<(), brmcp_adapters::BoxError> {
        Err("no payments here".into())
    }
}

fn policy(dir: &std::path::Path) -> (Policy, Settings) {
    let clock: Arc<dyn brmcp_adapters::Clock> = Arc::new(brmcp_adapters::SystemClock);
    let spend = SpendLog::open(dir, clock.now()).unwrap();
    (
        Policy::new(Arc::new(NoPayer), spend, clock),
        Settings::default(),
    )
}

const WAIT: Duration = Duration::from_millis(50);

#[tokio::test]
async fn a_call_admitted_alone_holds_other_agents_back_at_a_reserving_bot() {
    let dir = tempfile::tempdir().unwrap();
    let (policy, settings) = policy(dir.path());
    let bot = brmcp_adapters::mem::uid(1);
    let side = (WAIT, Admission::SideBySide);

    // Side by side, two agents' calls run at once.
    let a = policy
        .admit(&settings, &bot, "a", side, Some(5))
        .await
        .unwrap();
    let b = policy
        .admit(&settings, &bot, "b", side, Some(5))
        .await
        .unwrap();
    // A call sent unpaid by an earlier run waits for the other agent's call...
    let refused = policy
        .admit(&settings, &bot, "a", (WAIT, Admission::Alone), Some(5))
        .await
        .unwrap_err();
    assert!(
        refused.contains("agent \"b\" has paid calls under way"),
        "{refused}"
    );
    drop((a, b));
    // ...and once alone there, no other agent's call is admitted beside it.
    let alone = policy
        .admit(&settings, &bot, "a", (WAIT, Admission::Alone), Some(5))
        .await
        .unwrap();
    let refused = policy
        .admit(&settings, &bot, "b", side, Some(5))
        .await
        .unwrap_err();
    assert!(
        refused.contains("agent \"a\" has paid calls under way"),
        "{refused}"
    );
    // Its own agent's calls go on, and another bot is not held.
    let own = policy
        .admit(&settings, &bot, "a", side, Some(5))
        .await
        .unwrap();
    let elsewhere = brmcp_adapters::mem::uid(2);
    let other = policy
        .admit(&settings, &elsewhere, "b", side, Some(5))
        .await
        .unwrap();
    // Its slot's end lets the others in.
    drop(alone);
    let b = policy
        .admit(&settings, &bot, "b", side, Some(5))
        .await
        .unwrap();
    drop((own, other, b));
    assert!(policy.credit.bots().is_empty(), "every slot let go");
}

#[tokio::test]
async fn a_waiting_call_is_admitted_when_the_alone_call_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (policy, settings) = policy(dir.path());
    let policy = Arc::new(policy);
    let bot = brmcp_adapters::mem::uid(1);
    let alone = policy
        .admit(&settings, &bot, "a", (WAIT, Admission::Alone), Some(5))
        .await
        .unwrap();
    let waiting = {
        let (policy, settings) = (policy.clone(), settings.clone());
        tokio::spawn(async move {
            let side = (Duration::from_secs(60), Admission::SideBySide);
            policy
                .admit(&settings, &bot, "b", side, Some(5))
                .await
                .map(drop)
        })
    };
    tokio::time::sleep(WAIT).await;
    assert!(!waiting.is_finished(), "admitted beside a call alone there");
    drop(alone);
    waiting.await.unwrap().unwrap();
}

#[test]
fn only_sold_tools_are_checked_and_held() {
    assert_eq!(least_price(Some(ToolPrice::Fixed(100))), Some(100));
    assert_eq!(least_price(Some(ToolPrice::Dynamic)), Some(1));
    assert_eq!(least_price(Some(ToolPrice::Free)), None);
    assert_eq!(least_price(None), None);
    assert_eq!(hold_secs(Mode::Approval), APPROVED_CREDIT_HOLD_SECS);
    assert_eq!(hold_secs(Mode::Autopay), CREDIT_HOLD_SECS);
}

/// A payment of the default agent's of 100 atoms to `bot`, reserved at `at` and left
/// pending, the bridge no longer waiting for it.
fn pending_payment(spend: &SpendLog, bot: &PeerId, at: i64) -> i64 {
    let payer = crate::bridge::spend::Spender::agent(DEFAULT_AGENT, None);
    let id = spend
        .reserve_as(
            brmcp_adapters::wire::UnixTime(at),
            &payer,
            crate::bridge::spend::Payment::new(bot, "t", 100),
            100_000,
            0,
        )
        .unwrap()
        .unwrap();
    spend.unconfirm(id).unwrap();
    id
}

/// The credit at `bot` that holds other agents back at `now`, per agent (no calls
/// under way).
fn held_at(spend: &SpendLog, settings: &Settings, bot: &PeerId, now: i64) -> Vec<(String, u64)> {
    let none = (&HashSet::new(), &[][..]);
    credit_at(spend, settings, bot, now, none)
        .unwrap()
        .per_agent
}

#[test]
fn a_payment_pending_past_the_tip_wait_holds_no_one_back_until_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = brmcp_adapters::wire::UnixTime(1_000_000);
    let spend = SpendLog::open(dir.path(), t0).unwrap();
    let settings = Settings::default();
    let bot = brmcp_adapters::mem::uid(1);
    let id = pending_payment(&spend, &bot, t0.0);
    let wait = i64::try_from(settings.tip_wait_secs).unwrap();
    let credit = |now: i64| held_at(&spend, &settings, &bot, now);
    assert_eq!(
        credit(t0.0 + wait - 1),
        vec![(DEFAULT_AGENT.to_owned(), 100)],
        "its tip may yet land"
    );
    assert!(
        credit(t0.0 + wait).is_empty(),
        "the bridge stopped waiting for it"
    );
    // Its outcome confirms it after all: credit the bot holds, within its hold.
    assert!(spend.settle(id, Ok(())).unwrap());
    assert_eq!(credit(t0.0 + wait), vec![(DEFAULT_AGENT.to_owned(), 100)]);
}

#[test]
fn a_lost_tips_uncertainty_holds_agents_back_for_one_tip_wait_whatever_takes_it_over() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = brmcp_adapters::wire::UnixTime(1_000_000);
    let spend = SpendLog::open(dir.path(), t0).unwrap();
    let settings = Settings::default();
    let bot = brmcp_adapters::mem::uid(1);
    // A tip lost at t0; a later payment's outcome settles it, and the later one
    // stays pending in its place.
    let lost = pending_payment(&spend, &bot, t0.0);
    let later = pending_payment(&spend, &bot, t0.0 + 60);
    let event = crate::bridge::spend::TipOutcomeEvent {
        id: 5,
        bot,
        atoms: 100,
        outcome: Ok(()),
    };
    spend.resolve_outcome(&event).unwrap();
    spend
        .collect(t0, &bot, DEFAULT_AGENT, "t", Some(lost), 100)
        .unwrap();
    assert!(spend.stays_pending_for(later, 5).unwrap());
    let wait = i64::try_from(settings.tip_wait_secs).unwrap();
    let credit = |now: i64| held_at(&spend, &settings, &bot, now);
    assert_eq!(
        credit(t0.0 + wait - 1),
        vec![(DEFAULT_AGENT.to_owned(), 100)]
    );
    assert!(
        credit(t0.0 + wait).is_empty(),
        "one tip wait from the lost tip, not from the payment that took its place"
    );
}

#[tokio::test]
async fn a_call_held_back_by_a_pending_payment_is_told_its_outcome_is_not_known() {
    let dir = tempfile::tempdir().unwrap();
    let (policy, settings) = policy(dir.path());
    let bot = brmcp_adapters::mem::uid(1);
    let one = (WAIT, Admission::OneAgent);
    let row = pending_payment(&policy.spend, &bot, policy.clock.now().0);
    let refused = policy
        .admit(&settings, &bot, "b", one, Some(5))
        .await
        .unwrap_err();
    assert!(
        refused.contains(
            "agent \"default\" paid this bot 100 atoms by a tip whose outcome is not known yet"
        ),
        "{refused}"
    );
    // Confirmed, it is credit the bot holds.
    assert!(policy.spend.settle(row, Ok(())).unwrap());
    let refused = policy
        .admit(&settings, &bot, "b", one, Some(5))
        .await
        .unwrap_err();
    assert!(
        refused
            .contains("the bot holds 100 atoms agent \"default\" paid and has not collected yet"),
        "{refused}"
    );
}
