//! A duplicate of a keyed call that is still running waits for it and receives its exact
//! answer: the result when it ran, and the refusal when it was refused (the Go harness
//! handed a waiting duplicate an empty success, weakness §4.10.1). The duplicate never
//! runs or pays, and a refusal leaves the key free for a funded retry.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::support::*;
use brmcp::adapters::PeerId;
use brmcp::adapters::mem::Fabric;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    Billing, BillingError, CallContext, CallId, CallRequest, Charge, Harness, Keyed, Ledger,
    ManualClock, NoArgs, Tip, TipOutcome, ToolError, ToolSpec,
};
use tokio::sync::Semaphore;

/// The ledger, with `charge` held at a gate the test opens.
struct GatedBilling {
    ledger: Ledger,
    open: Mutex<bool>,
    opened: Condvar,
    charges: AtomicUsize,
}

impl GatedBilling {
    fn new(dir: &std::path::Path) -> Arc<Self> {
        Arc::new(Self {
            ledger: Ledger::open(dir, UnixTime(T0 as i64)).unwrap().ledger,
            open: Mutex::new(false),
            opened: Condvar::new(),
            charges: AtomicUsize::new(0),
        })
    }

    fn open_gate(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

impl Billing for GatedBilling {
    fn charge(&self, request: &CallRequest<'_>, now: UnixTime) -> Result<Charge, BillingError> {
        self.charges.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
        drop(open);
        Ok(self.ledger.charge(request, now)?)
    }
    fn held(
        &self,
        caller: &PeerId,
        tool: &str,
        keyed: Keyed<'_>,
        now: UnixTime,
    ) -> Result<Option<Charge>, BillingError> {
        Ok(self.ledger.held(caller, tool, keyed, now)?)
    }
    fn complete(&self, call: CallId, outcome: &str, now: UnixTime) -> Result<(), BillingError> {
        Ok(self.ledger.complete(call, outcome, now)?)
    }
    fn refund(
        &self,
        call: CallId,
        reason: &str,
        outcome: Option<&str>,
        now: UnixTime,
    ) -> Result<(), BillingError> {
        Ok(self.ledger.refund(call, reason, outcome, now)?)
    }
    fn record_tip(
        &self,
        tip: &Tip,
        allowed: bool,
        now: UnixTime,
    ) -> Result<TipOutcome, BillingError> {
        Ok(self.ledger.record_tip(tip, allowed, now)?)
    }
    fn balance_matoms(&self, caller: &PeerId) -> Result<u64, BillingError> {
        Ok(self.ledger.balance_matoms(caller)?)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_duplicate_gets_the_refusal_and_a_funded_retry_runs() {
    let probe = Arc::new(Probe::default());
    let dir = tempfile::tempdir().unwrap();
    let billing = GatedBilling::new(dir.path());
    let harness = Harness::builder()
        .billing(billing.clone())
        .clock(ManualClock::at_unix(T0))
        .allowed_uids([peer(ALICE)])
        .tool(fortune(&probe, 500))
        .build()
        .unwrap();
    let fabric = Fabric::new(1);
    let _router = start(&fabric, &harness);
    let alice = client(&fabric, ALICE).await;
    let key = "dup-key-0001";

    let original = tokio::spawn({
        let peer = alice.peer().clone();
        async move {
            peer.call_tool(params("fortune", serde_json::json!({}), Some(key)))
                .await
        }
    });
    until("the original to reach the debit", || {
        billing.charges.load(Ordering::SeqCst) == 1
    })
    .await;
    let duplicate = tokio::spawn({
        let peer = alice.peer().clone();
        async move {
            peer.call_tool(params("fortune", serde_json::json!({}), Some(key)))
                .await
        }
    });
    until("the duplicate to wait", || harness.stats().waited == 1).await;
    billing.open_gate();

    let original = original.await.unwrap().unwrap();
    let duplicate = duplicate.await.unwrap().unwrap();
    assert_eq!(
        text(&original),
        r#"{"error":"payment_required","tool":"fortune","priceAtoms":500,"balanceAtoms":0,"shortfallAtoms":500,"acceptedRails":["tip"]}"#
    );
    assert_eq!(duplicate, original, "the refusal, not an empty success");
    assert!(is_error(&duplicate));
    assert_eq!(billing.charges.load(Ordering::SeqCst), 1);
    assert_eq!(probe.runs(), 0);

    // The refusal did not consume the key.
    tip(&harness, 1, ALICE, 500_000).await;
    let retry = call(&alice, "fortune", serde_json::json!({}), Some(key)).await;
    assert!(!is_error(&retry), "{retry:?}");
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&harness, ALICE).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_duplicate_gets_the_result_of_the_one_run() {
    let (builder, clock, dir) = builder();
    let runs = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Semaphore::new(0));
    let slow = {
        let (runs, release) = (runs.clone(), release.clone());
        ToolSpec::fixed(
            "slow",
            "Slow and paid",
            100,
            move |call: CallContext, _: NoArgs| {
                let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                let release = release.clone();
                async move {
                    let _permit = release.acquire().await.map_err(ToolError::from)?;
                    Ok::<_, ToolError>(format!("run {n} for {}", call.caller()))
                }
            },
        )
    };
    let env = env(builder.tool(slow), clock, dir);
    tip(&env.harness, 1, ALICE, 1_000_000).await;
    let alice = client(&env.fabric, ALICE).await;
    let key = "dup-key-0002";

    let spawn_call = || {
        let peer = alice.peer().clone();
        tokio::spawn(async move {
            peer.call_tool(params("slow", serde_json::json!({}), Some(key)))
                .await
                .unwrap()
        })
    };
    let original = spawn_call();
    until("the handler to start", || runs.load(Ordering::SeqCst) == 1).await;
    let duplicates: Vec<_> = (0..3).map(|_| spawn_call()).collect();
    until("three duplicates to wait", || {
        env.harness.stats().waited == 3
    })
    .await;
    release.add_permits(1);

    let original = original.await.unwrap();
    assert_eq!(text(&original), format!("run 1 for {}", peer(ALICE)));
    for duplicate in duplicates {
        assert_eq!(duplicate.await.unwrap(), original);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 900_000);
}
