//! Crash injection on the real `brmcp serve` and `brmcp bridge` processes, against the
//! fault-injecting clientrpc fake: the parent pushes tips and PMs (some stored while
//! the process is down, some sent out of id order), kills the child with SIGKILL
//! after a random delay, over and over, and resets the fake's logs halfway (ids start
//! over, repeating earlier ones exactly). Kills land between receive, record and
//! ack, and between ack and clearing.
//!
//! Afterwards, from the ledger and the PM journal:
//! - every tip pushed is recorded and credited exactly once, and a tip repeating an
//!   earlier one's id, caller and amount after the reset is not credited again (it
//!   falls in the ledger's replay window, `TIP_REPLAY_WINDOW_SECS`, where it cannot
//!   be told from a redelivery of a cleared tip); each caller's balance is the sum
//!   of their distinct tips;
//! - every PM pushed is recorded once and handed on (none lost, none twice).
//!
//! `serve_crash_injection` and `bridge_crash_injection` run a few kills in CI;
//! the `_many` variants (`--ignored`) run more. `BRMCP_CRASH_SEED` replays a run.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use brmcp::adapters::PeerId;
use brmcp::clientrpc::proto::method;
use sha2::{Digest, Sha256};

use crate::fake::{
    Call, Certs, Fake, PM_STREAM, Reply, TIP_PROGRESS, TIP_STREAM, b64, default_reply, uid,
};

/// Kills in CI: each cycle costs about a second.
const CYCLES: usize = 8;

/// Kills in the `--ignored` runs.
const CYCLES_MANY: usize = 60;

/// Longest wait for the last, unkilled run to clear everything.
const SETTLE: Duration = Duration::from_secs(30);

const SEED_ENV: &str = "BRMCP_CRASH_SEED";

/// xorshift64*: reproducible kill delays from one printed seed.
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        let seed = std::env::var(SEED_ENV)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                let mut b = [0u8; 8];
                getrandom::fill(&mut b).unwrap();
                u64::from_le_bytes(b) | 1
            });
        eprintln!("{SEED_ENV}={seed}");
        Self(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }

    fn millis(&mut self, n: u64) -> Duration {
        Duration::from_millis(self.below(n))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Serve,
    Bridge,
}

/// The child process, killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Run {
    role: Role,
    datadir: tempfile::TempDir,
    fake: Fake,
    _certs: Certs,
    rng: Rng,
    senders: Vec<PeerId>,
    /// Every tip pushed, in order: (sequence id, caller, milliatoms).
    tips: Vec<(u64, PeerId, u64)>,
    /// Every PM pushed: (sequence id, sender, text).
    pms: Vec<(u64, PeerId, String)>,
    /// Tip params pushed since the start, in order (for the exact repeat after reset).
    tip_params: Vec<(PeerId, u64)>,
    next_text: usize,
}

impl Run {
    async fn new(role: Role) -> Self {
        let (certs, fake) = Fake::brclient().await;
        // An identity of its own, so runs in parallel hold different client locks.
        let mut me = [0u8; 32];
        getrandom::fill(&mut me).unwrap();
        let me = PeerId::from_bytes(me);
        fake.set_handler(move |call: &Call| {
            if call.method == method::USER_PUBLIC_IDENTITY {
                Reply::Result(serde_json::json!({"nick": "bot", "identity": b64(&me)}))
            } else {
                default_reply(call)
            }
        });
        let datadir = tempfile::tempdir().unwrap();
        let conf = match role {
            Role::Serve => "brmcp-serve.conf",
            Role::Bridge => "brmcp-bridge.conf",
        };
        let dir = certs.dir.path();
        std::fs::write(
            datadir.path().join(conf),
            format!(
                "brrpcurl={}\nservercertpath={}\nclientcertpath={}\nclientkeypath={}\n",
                fake.url(),
                dir.join("rpc.cert").display(),
                dir.join("rpc-client.cert").display(),
                dir.join("rpc-client.key").display(),
            ),
        )
        .unwrap();
        let senders = vec![uid(0x11), uid(0x12), uid(0x13)];
        if role == Role::Serve {
            let allowed: Vec<String> = senders.iter().map(ToString::to_string).collect();
            std::fs::write(
                datadir.path().join("brmcp.json"),
                serde_json::json!({ "allowed_uids": allowed }).to_string(),
            )
            .unwrap();
        }
        Self {
            role,
            datadir,
            fake,
            _certs: certs,
            rng: Rng::new(),
            senders,
            tips: Vec::new(),
            pms: Vec::new(),
            tip_params: Vec::new(),
            next_text: 0,
        }
    }

    fn spawn(&self) -> Proc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_brmcp"));
        match self.role {
            Role::Serve => cmd.args(["serve", "--datadir"]).arg(self.datadir.path()),
            Role::Bridge => cmd
                .args(["bridge", "--listen", "127.0.0.1:0", "--datadir"])
                .arg(self.datadir.path()),
        };
        Proc(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn brmcp"),
        )
    }

    fn sender(&mut self) -> PeerId {
        let i = self.rng.below(self.senders.len() as u64) as usize;
        self.senders[i]
    }

    /// A tip, live or held back (sent after the next one: out of id order).
    fn push_tip(&mut self, held: bool) {
        let (from, matoms) = (self.sender(), 1000 + self.rng.below(4) * 1000);
        self.push_tip_params(from, matoms, held);
    }

    fn push_tip_params(&mut self, from: PeerId, matoms: u64, held: bool) {
        let params = Fake::tip_params(&from, matoms);
        let seq = if held {
            self.fake.push_held(TIP_STREAM, params)
        } else {
            self.fake.push(TIP_STREAM, params)
        };
        self.tips.push((seq, from, matoms));
        self.tip_params.push((from, matoms));
    }

    fn push_pm(&mut self) {
        let from = self.sender();
        let text = format!("hello {}", self.next_text);
        self.next_text += 1;
        let seq = self.fake.push_pm(&from, &text);
        self.pms.push((seq, from, text));
    }

    /// What the role consumes: tips for serve, tip outcomes for the bridge (nobody's:
    /// acknowledged once recorded as matching no payment).
    fn push_money(&mut self, held: bool) {
        match self.role {
            Role::Serve => self.push_tip(held),
            Role::Bridge => {
                let to = self.sender();
                let _ = self.fake.push_progress(&to, 5000, true, false, 1, "");
            }
        }
    }

    async fn cycle(&mut self) {
        // Stored while the process is down: replayed at its start.
        self.push_money(false);
        self.push_pm();
        let child = self.spawn();
        // Lives long and short: acks go out once an item is half a second old, so
        // kills land before, between and after record, ack and clearing.
        tokio::time::sleep(self.rng.millis(700)).await;
        // Out of id order: the first one stored is sent after the second.
        self.push_money(true);
        self.push_money(false);
        self.push_pm();
        tokio::time::sleep(self.rng.millis(60)).await;
        self.fake.release(TIP_STREAM);
        self.push_pm();
        tokio::time::sleep(self.rng.millis(900)).await;
        drop(child);
    }

    fn all_acked(&self) -> bool {
        [PM_STREAM, TIP_STREAM, TIP_PROGRESS]
            .iter()
            .all(|base| self.fake.unacked(base).is_empty())
    }

    /// One run left alone until every stream is cleared and the clearing recorded.
    async fn run_to_completion(&mut self) {
        self.fake.release(TIP_STREAM);
        let child = self.spawn();
        let deadline = tokio::time::Instant::now() + SETTLE;
        while !self.all_acked() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not all acknowledged within {SETTLE:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The clearing after the last ack, and the forwarding, land.
        tokio::time::sleep(Duration::from_millis(700)).await;
        drop(child);
    }

    /// Until every row is cleared: a kill between an ack and its clearing leaves rows
    /// uncleared, and one more acknowledged item clears them.
    async fn clear_everything(&mut self) {
        for _ in 0..5 {
            self.run_to_completion().await;
            if self.uncleared() == 0 {
                return;
            }
            self.push_money(false);
            self.push_pm();
        }
        panic!("rows still uncleared: {}", self.uncleared());
    }

    fn uncleared(&self) -> i64 {
        let mut n = count(
            &self.datadir.path().join("brmcp-inbox.sqlite"),
            "SELECT count(*) FROM pms WHERE cleared = 0",
        );
        if self.role == Role::Serve {
            n += count(
                &self.datadir.path().join("brmcp.sqlite"),
                "SELECT count(*) FROM tips WHERE cleared = 0",
            );
        }
        n
    }

    async fn play(&mut self, cycles: usize) {
        for _ in 0..cycles / 2 {
            self.cycle().await;
        }
        // brclient's logs are removed: ids start over. The first tips are pushed again
        // exactly (same ids, callers, amounts): within the ledger's replay window they
        // are taken for redeliveries, never credited twice.
        self.clear_everything().await;
        self.fake.reset_logs();
        let first: Vec<(PeerId, u64)> = self.tip_params.iter().take(3).copied().collect();
        for (from, matoms) in first {
            self.push_tip_params(from, matoms, false);
        }
        for _ in cycles / 2..cycles {
            self.cycle().await;
        }
        self.run_to_completion().await;
        self.check();
    }

    fn check(&self) {
        let dir = self.datadir.path();
        // Every PM recorded once per push, and handed on.
        let journal = rusqlite::Connection::open(dir.join("brmcp-inbox.sqlite")).unwrap();
        let mut rows: Vec<(u64, String, Vec<u8>, bool)> = journal
            .prepare("SELECT seq, sender, digest, processed FROM pms")
            .unwrap()
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut want: Vec<(u64, String, Vec<u8>, bool)> = self
            .pms
            .iter()
            .map(|(seq, from, text)| {
                let digest = Sha256::digest(text.as_bytes()).to_vec();
                (*seq, from.to_string(), digest, true)
            })
            .collect();
        rows.sort();
        want.sort();
        assert_eq!(rows.len(), want.len(), "PMs recorded vs pushed");
        assert_eq!(rows, want, "every PM recorded once and handed on");

        if self.role == Role::Bridge {
            return;
        }
        // Every distinct tip credited once; balances add up.
        let ledger = rusqlite::Connection::open(dir.join("brmcp.sqlite")).unwrap();
        let mut tips: Vec<(u64, String, u64)> = ledger
            .prepare("SELECT seq, caller, matoms FROM tips WHERE credited = 1")
            .unwrap()
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    r.get(1)?,
                    r.get::<_, i64>(2)? as u64,
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut want: Vec<(u64, String, u64)> = self
            .tips
            .iter()
            .map(|(seq, from, m)| (*seq, from.to_string(), *m))
            .collect();
        tips.sort();
        want.sort();
        want.dedup();
        assert_eq!(tips, want, "every distinct tip credited exactly once");
        let mut sums: HashMap<String, u64> = HashMap::new();
        for (_, caller, m) in &want {
            *sums.entry(caller.clone()).or_default() += m;
        }
        for (caller, sum) in sums {
            let balance: i64 = ledger
                .query_row(
                    "SELECT matoms FROM balances WHERE caller = ?1",
                    [&caller],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(balance as u64, sum, "balance of {caller}");
        }
        let repeated = self
            .tips
            .iter()
            .filter(|t| self.tips.iter().filter(|u| u == t).count() > 1)
            .count();
        assert!(repeated >= 2, "the reset repeated tip identities");
        let rows: i64 = ledger
            .query_row("SELECT count(*) FROM tips", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            usize::try_from(rows).unwrap(),
            want.len(),
            "no repeat recorded as a tip"
        );
    }
}

fn count(db: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_crash_injection() {
    Run::new(Role::Serve).await.play(CYCLES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: many kills"]
async fn serve_crash_injection_many() {
    Run::new(Role::Serve).await.play(CYCLES_MANY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_crash_injection() {
    Run::new(Role::Bridge).await.play(CYCLES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: many kills"]
async fn bridge_crash_injection_many() {
    Run::new(Role::Bridge).await.play(CYCLES_MANY).await;
}
