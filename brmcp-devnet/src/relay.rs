//! The network between nodes: store-and-forward of PMs, the wallets, and the tip
//! protocol (invoice request, invoice or error, payment).
//!
//! The relay accepts a PM when its sender is online, stamps it with the relay time and
//! either appends it to the recipient's PM log at once or queues it until the
//! recipient comes online. One FIFO queue per recipient keeps each sender's order. On
//! delivery, items older than [`DevnetConfig::relay_expiry`](super::DevnetConfig)
//! on the devnet clock are dropped, as the real relay drops data after
//! `expirationdays`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::durable::{Op, PendingTip, TipRecord, Uid, hex32, push_recent};
use super::node::{Event, StreamKind};
use super::{Net, State};

/// brclient's reply when the payee's wallet cannot create an invoice
/// (`rpc.ErrUnableToGenerateInvoice`).
pub(crate) const ERR_UNABLE_TO_INVOICE: &str = "unable to generate payment invoice";

/// The payment error when the payer's wallet cannot cover the tip.
pub(crate) const ERR_INSUFFICIENT_BALANCE: &str = "insufficient local balance";

/// A PM waiting at the relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Queued {
    #[serde(with = "hex32")]
    pub(crate) from: [u8; 32],
    pub(crate) message: String,
    pub(crate) mode: i32,
    pub(crate) ts_ms: i64,
}

/// The relay's own state.
#[derive(Debug, Default)]
pub(crate) struct Relay {
    /// Recipient user id -> PMs waiting for it to come online (a node of an earlier
    /// run that this run did not start is offline).
    pub(crate) queues: HashMap<[u8; 32], VecDeque<Queued>>,
    /// Wallet balances by user id, in milliatoms (synthetic peers included).
    pub(crate) balances: HashMap<[u8; 32], i64>,
    /// PMs dropped because they expired in a queue.
    pub(crate) expired: u64,
    /// Tips scheduled and not yet ended, by id.
    pub(crate) tips: BTreeMap<u64, PendingTip>,
    /// The next tip's id.
    pub(crate) next_tip: u64,
}

impl State {
    pub(crate) fn node_by_uid(&self, uid: &[u8; 32]) -> Option<usize> {
        self.nodes.iter().position(|n| &n.uid == uid)
    }

    /// Whether `uid` is a node kept from an earlier run that this run has not started
    /// (offline, as far as the relay knows).
    pub(crate) fn is_dormant(&self, uid: &[u8; 32]) -> bool {
        self.dormant.contains_key(&Uid(*uid))
    }

    /// Sets a wallet's balance.
    pub(crate) fn set_balance(&mut self, uid: [u8; 32], matoms: i64) {
        self.relay.balances.insert(uid, matoms);
        self.pending.push(Op::Balance {
            uid: Uid(uid),
            matoms,
        });
    }

    /// Records a paid tip in both sides' recent tips.
    pub(crate) fn record_tip(&mut self, record: TipRecord) {
        for uid in [record.payer, record.payee] {
            if let Some(i) = self.node_by_uid(&uid.0) {
                push_recent(&mut self.nodes[i].recent_tips, record.clone());
            } else if let Some(d) = self.dormant.get_mut(&uid) {
                push_recent(&mut d.recent_tips, record.clone());
            }
        }
        self.pending.push(Op::Tipped { record });
    }

    /// Mutual address-book entries; with `emit`, a `KXCompleted` on both sides.
    pub(crate) fn kx(&mut self, a: usize, b: usize, emit: bool) {
        let (a_uid, a_nick) = (self.nodes[a].uid, self.nodes[a].nick.clone());
        let (b_uid, b_nick) = (self.nodes[b].uid, self.nodes[b].nick.clone());
        self.nodes[a].add_contact(b_uid, &b_nick);
        self.nodes[b].add_contact(a_uid, &a_nick);
        if emit {
            self.nodes[a].append(
                StreamKind::Kx,
                Event::Kx {
                    uid: b_uid,
                    nick: b_nick,
                },
            );
            self.nodes[b].append(
                StreamKind::Kx,
                Event::Kx {
                    uid: a_uid,
                    nick: a_nick,
                },
            );
        }
    }

    /// The relay accepts a PM for user `to` (a node, running or not): delivered now
    /// if its node is online and nothing waits before it, else queued. With
    /// `via_queue` (the fault dial delays PMs) it is queued in any case. Returns
    /// whether it was queued for an online node, which then needs a
    /// [`deliver_queued`] to take it.
    #[must_use]
    pub(crate) fn route_pm(&mut self, to: [u8; 32], item: Queued, via_queue: bool) -> bool {
        let live = self.node_by_uid(&to).filter(|&i| self.nodes[i].online);
        match live {
            Some(i) if !via_queue && self.relay.queues.get(&to).is_none_or(VecDeque::is_empty) => {
                self.deliver_pm(i, item);
                false
            }
            _ => {
                self.pending.push(Op::Enqueue {
                    to: Uid(to),
                    item: item.clone(),
                });
                self.relay.queues.entry(to).or_default().push_back(item);
                live.is_some()
            }
        }
    }

    /// Hands the first PM of `to`'s queue to its node, if the node is online (else
    /// its coming online flushes the queue); one that expired is dropped instead.
    fn deliver_head(&mut self, to: [u8; 32], now_ms: i64, expiry: Duration) {
        let Some(node) = self.node_by_uid(&to).filter(|&i| self.nodes[i].online) else {
            return;
        };
        let Some(queue) = self.relay.queues.get_mut(&to) else {
            return;
        };
        let Some(item) = queue.pop_front() else {
            return;
        };
        if queue.is_empty() {
            self.relay.queues.remove(&to);
        }
        let expiry_ms = i64::try_from(expiry.as_millis()).unwrap_or(i64::MAX);
        let expired = u64::from(now_ms.saturating_sub(item.ts_ms) > expiry_ms);
        self.relay.expired += expired;
        self.pending.push(Op::Dequeue {
            to: Uid(to),
            expired,
        });
        if expired == 0 {
            self.deliver_pm(node, item);
        }
    }

    /// The recipient's client receives a PM: stored in its log, then streamed. A PM
    /// from a user not in the address book is dropped, as brclient has no ratchet for
    /// it.
    fn deliver_pm(&mut self, to: usize, item: Queued) {
        let node = &mut self.nodes[to];
        let Some(contact) = node.contact(&item.from) else {
            return;
        };
        let event = Event::Pm {
            uid: item.from,
            nick: contact.nick.clone(),
            message: item.message,
            mode: item.mode,
            timestamp_ms: item.ts_ms,
        };
        node.append(StreamKind::Pm, event);
    }

    /// Sets a node's relay connectivity; coming online flushes its queue in order,
    /// dropping what expired.
    pub(crate) fn set_online(&mut self, node: usize, online: bool, now_ms: i64, expiry: Duration) {
        self.nodes[node].online = online;
        if !online {
            return;
        }
        let expiry_ms = i64::try_from(expiry.as_millis()).unwrap_or(i64::MAX);
        let uid = self.nodes[node].uid;
        let Some(queued) = self.relay.queues.remove(&uid) else {
            return;
        };
        let mut expired = 0;
        for item in queued {
            if now_ms.saturating_sub(item.ts_ms) > expiry_ms {
                expired += 1;
            } else {
                self.deliver_pm(node, item);
            }
        }
        self.relay.expired += expired;
        self.pending.push(Op::Flush {
            to: Uid(uid),
            expired,
        });
    }

    pub(crate) fn balance(&self, uid: &[u8; 32]) -> i64 {
        self.relay.balances.get(uid).copied().unwrap_or(0)
    }

    /// Pays `matoms` from `payer` to `payee`.
    fn pay(&mut self, payer: &[u8; 32], payee: &[u8; 32], matoms: i64) -> Result<(), String> {
        if self.balance(payer) < matoms {
            return Err(ERR_INSUFFICIENT_BALANCE.to_owned());
        }
        self.set_balance(*payer, self.balance(payer) - matoms);
        self.set_balance(*payee, self.balance(payee).saturating_add(matoms));
        Ok(())
    }

    /// Schedules a tip: kept until it ends, so a restart resumes it.
    pub(crate) fn start_tip(
        &mut self,
        payer: [u8; 32],
        payee: [u8; 32],
        matoms: i64,
        max_attempts: i32,
    ) -> u64 {
        let id = self.relay.next_tip.max(1);
        self.relay.next_tip = id + 1;
        let tip = PendingTip {
            id,
            payer: Uid(payer),
            payee: Uid(payee),
            matoms,
            max_attempts,
            attempts: 0,
        };
        self.pending.push(Op::TipStart { tip: tip.clone() });
        self.relay.tips.insert(id, tip);
        id
    }

    fn tip_attempted(&mut self, id: u64, attempts: i32) {
        if let Some(t) = self.relay.tips.get_mut(&id) {
            t.attempts = attempts;
            self.pending.push(Op::TipAttempt { id, attempts });
        }
    }

    fn end_tip(&mut self, id: u64) {
        if self.relay.tips.remove(&id).is_some() {
            self.pending.push(Op::TipEnd { id });
        }
    }

    /// A `TipProgressEvent` on the payer's log.
    fn tip_progress(&mut self, payer: usize, payee: &[u8; 32], matoms: i64, p: Progress) {
        let nick = self.nodes[payer]
            .contact(payee)
            .map(|c| c.nick.clone())
            .unwrap_or_default();
        self.nodes[payer].append(
            StreamKind::TipProgress,
            Event::TipProgress {
                uid: *payee,
                nick,
                amount_matoms: matoms,
                completed: p.completed,
                attempt: p.attempt,
                attempt_err: p.err,
                will_retry: p.will_retry,
            },
        );
    }
}

struct Progress {
    completed: bool,
    attempt: i32,
    err: String,
    will_retry: bool,
}

/// How an invoice request went.
enum InvoiceReply {
    /// No reply within the re-request delay (a side offline).
    None,
    /// The payee answered with an error.
    Error(String),
    /// The payee sent an invoice.
    Invoice,
}

/// Waits until the invoice request for a tip to `payee` is answered, for at most
/// `within`. Both sides must be online; a synthetic payee (not a node of this run or
/// an earlier one) always invoices.
async fn request_invoice(
    net: &Net,
    payer: usize,
    payee: &[u8; 32],
    within: Duration,
) -> InvoiceReply {
    let deadline = Instant::now() + within;
    loop {
        let mut notified = pin!(net.changed.notified());
        notified.as_mut().enable();
        {
            let st = net.lock();
            if st.nodes[payer].online {
                match st.node_by_uid(payee) {
                    None if !st.is_dormant(payee) => return InvoiceReply::Invoice,
                    Some(p) if st.nodes[p].online => {
                        return if st.nodes[p].can_invoice {
                            InvoiceReply::Invoice
                        } else {
                            InvoiceReply::Error(ERR_UNABLE_TO_INVOICE.to_owned())
                        };
                    }
                    _ => {}
                }
            }
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(deadline) => return InvoiceReply::None,
        }
    }
}

/// Runs the kept tip `id` to its end, from the attempt after the last one made, as
/// brclient's tip attempts run:
///
/// * each attempt requests an invoice; an invoice is paid at once;
/// * a failed attempt before the last emits `willRetry: true` with the error, and the
///   next request follows [`DevnetConfig::tip_retry_spacing`](super::DevnetConfig)
///   after this one;
/// * success appends `ReceivedTip` to the payee, then `completed: true` to the payer;
/// * giving up emits a terminal event with the last error, or, when the last request
///   got no reply, "attempt N >= max attempts N to fetch invoice".
///
/// Each step's changes are one journaled group, so a restart resumes the tip where it
/// was and pays it at most once. The payer must be a node of this run.
pub(crate) async fn run_tip(net: Arc<Net>, id: u64) {
    let spacing = net.cfg.tip_retry_spacing;
    let Some((tip, payer)) = ({
        let st = net.lock();
        st.relay
            .tips
            .get(&id)
            .cloned()
            .and_then(|t| st.node_by_uid(&t.payer.0).map(|p| (t, p)))
    }) else {
        return;
    };
    let (payer_uid, payee, matoms, max_attempts) =
        (tip.payer.0, tip.payee.0, tip.matoms, tip.max_attempts);
    for attempt in tip.attempts.saturating_add(1)..=max_attempts {
        let started = Instant::now();
        // The invoice request's trip through the relay under the fault dial.
        let trip = net.dial().trip();
        tokio::time::sleep(trip).await;
        let reply = request_invoice(&net, payer, &payee, spacing).await;
        let failed = {
            let mut st = net.lock();
            if !st.relay.tips.contains_key(&id) {
                // Ended meanwhile: nothing more to do, and never a second payment.
                return;
            }
            let err = match reply {
                InvoiceReply::None => None,
                InvoiceReply::Error(e) => Some(e),
                InvoiceReply::Invoice => match st.pay(&payer_uid, &payee, matoms) {
                    Ok(()) => {
                        if let Some(p) = st.node_by_uid(&payee) {
                            st.nodes[p].append(
                                StreamKind::TipReceived,
                                Event::TipReceived {
                                    uid: payer_uid,
                                    amount_matoms: matoms,
                                },
                            );
                        }
                        let done = Progress {
                            completed: true,
                            attempt,
                            err: String::new(),
                            will_retry: false,
                        };
                        st.tip_progress(payer, &payee, matoms, done);
                        let at_ms = net.clock.now_ms();
                        st.record_tip(TipRecord {
                            at_ms,
                            payer: Uid(payer_uid),
                            payee: Uid(payee),
                            matoms,
                        });
                        st.end_tip(id);
                        return;
                    }
                    Err(e) => Some(e),
                },
            };
            st.tip_attempted(id, attempt);
            if let Some(e) = &err {
                let last = attempt >= max_attempts;
                let p = Progress {
                    completed: false,
                    attempt,
                    err: e.clone(),
                    will_retry: !last,
                };
                st.tip_progress(payer, &payee, matoms, p);
                if last {
                    st.end_tip(id);
                    return;
                }
            }
            err.is_some()
        };
        if failed {
            tokio::time::sleep_until(started + spacing).await;
        }
    }
    // The last request went unanswered: give up.
    let mut st = net.lock();
    if !st.relay.tips.contains_key(&id) {
        return;
    }
    let p = Progress {
        completed: false,
        attempt: max_attempts,
        err: format!("attempt {max_attempts} >= max attempts {max_attempts} to fetch invoice"),
        will_retry: false,
    };
    st.tip_progress(payer, &payee, matoms, p);
    st.end_tip(id);
}

/// Sends a PM through the relay for node `from`, blocking while `from` is offline, as
/// brclient's `PM` blocks until the relay acks the push.
pub(crate) async fn send_pm(net: &Arc<Net>, from: usize, to_uid: [u8; 32], message: String) {
    loop {
        let mut notified = pin!(net.changed.notified());
        notified.as_mut().enable();
        {
            let mut st = net.lock();
            if st.nodes[from].online {
                let item = Queued {
                    from: st.nodes[from].uid,
                    message,
                    mode: 0,
                    ts_ms: net.clock.now_ms(),
                };
                // A contact that is no node (of this run or an earlier one) is a
                // synthetic peer: the PM leaves.
                if st.node_by_uid(&to_uid).is_some() || st.is_dormant(&to_uid) {
                    route(net, &mut st, to_uid, item);
                }
                return;
            }
        }
        notified.await;
    }
}

/// Routes a PM through the relay under the fault dial: kept in the recipient's
/// queue first (so a restart re-sends it), then delivered after its trip.
pub(crate) fn route(net: &Arc<Net>, st: &mut State, to: [u8; 32], item: Queued) {
    let (via_queue, trip) = {
        let mut dial = net.dial();
        (dial.delays_pms(), dial.trip())
    };
    if st.route_pm(to, item, via_queue) {
        net.spawn(deliver_queued(net.clone(), to, trip));
    }
}

/// After `trip`, the relay hands the head of `to`'s queue to its node; a dropped
/// delivery is sent again after [`PM_RESEND`](super::faults::PM_RESEND) and another
/// trip, so drops become delay, never loss. The queue is kept, so what a stop
/// interrupts is re-sent when the node is next started.
async fn deliver_queued(net: Arc<Net>, to: [u8; 32], trip: Duration) {
    let mut wait = trip;
    loop {
        tokio::time::sleep(wait).await;
        let dropped = {
            let mut dial = net.dial();
            dial.drops().then(|| dial.trip())
        };
        match dropped {
            Some(trip) => wait = super::faults::PM_RESEND + trip,
            None => break,
        }
    }
    let now = net.clock.now_ms();
    net.lock().deliver_head(to, now, net.cfg.relay_expiry);
}
