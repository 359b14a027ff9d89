//! The spend log against a naive model over random interleavings of reserve, confirm,
//! fail, unconfirm, late outcomes (fresh and replayed), restarts and time passing: in
//! every 24 h window paid plus unresolved never exceeds the cap, nothing unresolved
//! stops counting however old, and each outcome settles at most one payment.

use std::collections::HashSet;

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::bridge::{DAY_SECS, Resolution, SpendLog, SpendStatus, TipOutcomeEvent};
use proptest::prelude::*;

const CAP: u64 = 1000;

#[derive(Debug, Clone)]
enum Op {
    Reserve {
        bot: u8,
        atoms: u64,
    },
    Confirm(usize),
    Fail(usize),
    Unconfirm(usize),
    /// A fresh outcome from the stream.
    Late {
        bot: u8,
        atoms: u64,
        paid: bool,
    },
    /// An outcome seen before, redelivered.
    Replay(usize),
    Advance(i64),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    // Few distinct amounts, so outcomes often match.
    let atoms = prop_oneof![Just(100u64), Just(250), Just(400), 1..=CAP];
    prop_oneof![
        3 => (0..2u8, atoms.clone()).prop_map(|(bot, atoms)| Op::Reserve { bot, atoms }),
        1 => any::<usize>().prop_map(Op::Confirm),
        1 => any::<usize>().prop_map(Op::Fail),
        2 => any::<usize>().prop_map(Op::Unconfirm),
        2 => (0..2u8, atoms, any::<bool>()).prop_map(|(bot, atoms, paid)| Op::Late { bot, atoms, paid }),
        1 => any::<usize>().prop_map(Op::Replay),
        2 => (0..3 * DAY_SECS).prop_map(Op::Advance),
        1 => Just(Op::Restart),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Pending { unconfirmed: bool },
    Paid,
    Failed,
}

#[derive(Debug)]
struct Row {
    id: i64,
    ts: i64,
    bot: u8,
    atoms: u64,
    pos: u64,
    st: St,
    outcome: Option<u64>,
}

#[derive(Default)]
struct Model {
    rows: Vec<Row>,
    /// The stream's position: the id of the last outcome.
    stream: u64,
    /// The floor the log keeps: the highest position or outcome recorded.
    floor: u64,
    /// Outcomes sent so far: (id, bot, atoms, paid).
    sent: Vec<(u64, u8, u64, bool)>,
}

impl Model {
    fn counted(&self, now: i64) -> u64 {
        self.rows
            .iter()
            .filter(|r| match r.st {
                St::Pending { .. } => true,
                St::Paid => r.ts > now - DAY_SECS,
                St::Failed => false,
            })
            .map(|r| r.atoms)
            .sum()
    }

    fn pending(&self) -> u64 {
        self.rows
            .iter()
            .filter(|r| matches!(r.st, St::Pending { .. }))
            .map(|r| r.atoms)
            .sum()
    }

    fn outcome(&mut self, id: u64, bot: u8, atoms: u64, paid: bool) -> Resolution {
        if self.rows.iter().any(|r| r.outcome == Some(id)) {
            return Resolution::Replay;
        }
        self.floor = self.floor.max(id);
        let row = self.rows.iter_mut().find(|r| {
            matches!(r.st, St::Pending { .. }) && r.bot == bot && r.atoms == atoms && r.pos < id
        });
        match row {
            Some(row) => {
                row.st = if paid { St::Paid } else { St::Failed };
                row.outcome = Some(id);
                Resolution::Settled(row.id)
            }
            None => Resolution::NotOurs,
        }
    }
}

fn peer(bot: u8) -> PeerId {
    PeerId::from_bytes([bot + 1; 32])
}

fn run(ops: &[Op]) {
    let dir = tempfile::tempdir().unwrap();
    let mut now = 1_800_000_000i64;
    let mut log = Some(SpendLog::open(dir.path(), UnixTime(now)).unwrap());
    let mut model = Model::default();
    for op in ops {
        let spend = log.as_ref().unwrap();
        match *op {
            Op::Reserve { bot, atoms } => {
                let fits = model.counted(now) + atoms <= CAP;
                let got = spend
                    .reserve(UnixTime(now), &peer(bot), "t", atoms, CAP, model.stream)
                    .unwrap();
                assert_eq!(
                    got.is_ok(),
                    fits,
                    "{op:?} with {} counted",
                    model.counted(now)
                );
                if let Ok(id) = got {
                    let pos = model.stream.max(model.floor);
                    model.floor = pos;
                    model.rows.push(Row {
                        id,
                        ts: now,
                        bot,
                        atoms,
                        pos,
                        st: St::Pending { unconfirmed: false },
                        outcome: None,
                    });
                }
            }
            Op::Confirm(i) | Op::Fail(i) | Op::Unconfirm(i) => {
                if model.rows.is_empty() {
                    continue;
                }
                let n = model.rows.len();
                let row = &mut model.rows[i % n];
                let pending = matches!(row.st, St::Pending { .. });
                let done = match op {
                    Op::Confirm(_) => spend.settle(row.id, Ok(())).unwrap(),
                    Op::Fail(_) => spend.settle(row.id, Err("no route")).unwrap(),
                    _ => spend.unconfirm(row.id).unwrap(),
                };
                assert_eq!(done, pending, "{op:?} on {row:?}");
                if pending {
                    row.st = match op {
                        Op::Confirm(_) => St::Paid,
                        Op::Fail(_) => St::Failed,
                        _ => St::Pending { unconfirmed: true },
                    };
                }
            }
            Op::Late { bot, atoms, paid } => {
                model.stream += 1 + u64::from(bot);
                let id = model.stream;
                model.sent.push((id, bot, atoms, paid));
                let event = TipOutcomeEvent {
                    id,
                    bot: peer(bot),
                    atoms,
                    outcome: if paid { Ok(()) } else { Err("expired") },
                };
                let expected = model.outcome(id, bot, atoms, paid);
                assert_eq!(spend.resolve_outcome(&event).unwrap(), expected, "{op:?}");
            }
            Op::Replay(k) => {
                if model.sent.is_empty() {
                    continue;
                }
                let (id, bot, atoms, paid) = model.sent[k % model.sent.len()];
                let event = TipOutcomeEvent {
                    id,
                    bot: peer(bot),
                    atoms,
                    outcome: if paid { Ok(()) } else { Err("expired") },
                };
                let expected = model.outcome(id, bot, atoms, paid);
                assert_eq!(spend.resolve_outcome(&event).unwrap(), expected, "{op:?}");
                assert!(
                    !matches!(expected, Resolution::Settled(_))
                        || model.rows.iter().filter(|r| r.outcome == Some(id)).count() == 1
                );
            }
            Op::Advance(secs) => now += secs,
            Op::Restart => {
                drop(log.take());
                let reopened = SpendLog::open(dir.path(), UnixTime(now)).unwrap();
                reopened.unconfirm_left_pending().unwrap();
                for row in &mut model.rows {
                    if let St::Pending { .. } = row.st {
                        row.st = St::Pending { unconfirmed: true };
                    }
                }
                log = Some(reopened);
            }
        }
        let spend = log.as_ref().unwrap();
        let counted = spend.spent_today(UnixTime(now)).unwrap();
        assert_eq!(counted, model.counted(now), "after {op:?}");
        assert!(counted <= CAP, "paid plus unresolved within the cap");
        assert!(
            counted >= model.pending(),
            "nothing unresolved stops counting"
        );
        let entries = spend.entries().unwrap();
        let pending: Vec<i64> = entries
            .iter()
            .filter(|e| e.status == SpendStatus::Pending)
            .map(|e| e.id)
            .collect();
        let model_pending: Vec<i64> = model
            .rows
            .iter()
            .filter(|r| matches!(r.st, St::Pending { .. }))
            .map(|r| r.id)
            .collect();
        assert_eq!(pending, model_pending, "never pruned while unresolved");
        // What `brmcp bridge status` shows as pending.
        let pending_count = u64::try_from(model_pending.len()).unwrap();
        assert_eq!(
            spend.pending().unwrap(),
            (pending_count, model.pending()),
            "pending totals after {op:?}"
        );
        let outcomes: Vec<u64> = entries.iter().filter_map(|e| e.outcome).collect();
        let distinct: HashSet<u64> = outcomes.iter().copied().collect();
        assert_eq!(
            outcomes.len(),
            distinct.len(),
            "an outcome settles one payment"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_daily_cap_counts_every_unresolved_payment(ops in proptest::collection::vec(op(), 1..48)) {
        run(&ops);
    }
}
