//! The network between nodes: store-and-forward of PMs, the wallets, and the tip
//! protocol (invoice request, invoice or error, payment).
//!
//! The relay accepts a PM when its sender is online, stamps it with the relay time and
//! either appends it to the recipient's PM log at once or queues it until the
//! recipient comes online. One FIFO queue per recipient keeps each sender's order. On
//! delivery, items older than [`DevnetConfig::relay_expiry`](super::DevnetConfig)
//! on the devnet clock are dropped, as the real relay drops data after
//! `expirationdays`.

use std::collections::{HashMap, VecDeque};
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::node::{Event, StreamKind};
use super::{Net, State};

/// brclient's reply when the payee's wallet cannot create an invoice
/// (`rpc.ErrUnableToGenerateInvoice`).
pub(crate) const ERR_UNABLE_TO_INVOICE: &str = "unable to generate payment invoice";

/// The payment error when the payer's wallet cannot cover the tip.
pub(crate) const ERR_INSUFFICIENT_BALANCE: &str = "insufficient local balance";

/// A PM waiting at the relay.
#[derive(Debug, Clone)]
pub(crate) struct Queued {
    pub(crate) from: [u8; 32],
    pub(crate) message: String,
    pub(crate) mode: i32,
    pub(crate) ts_ms: i64,
}

/// The relay's own state.
#[derive(Debug, Default)]
pub(crate) struct Relay {
    /// Recipient node index -> PMs waiting for it to come online.
    pub(crate) queues: HashMap<usize, VecDeque<Queued>>,
    /// Wallet balances by user id, in milliatoms (synthetic peers included).
    pub(crate) balances: HashMap<[u8; 32], i64>,
    /// PMs dropped because they expired in a queue.
    pub(crate) expired: u64,
}

impl State {
    pub(crate) fn node_by_uid(&self, uid: &[u8; 32]) -> Option<usize> {
        self.nodes.iter().position(|n| &n.uid == uid)
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

    /// The relay accepts a PM for node `to`: delivered now if it is online, else queued.
    pub(crate) fn route_pm(&mut self, to: usize, item: Queued) {
        if self.nodes[to].online && self.relay.queues.get(&to).is_none_or(VecDeque::is_empty) {
            self.deliver_pm(to, item);
        } else {
            self.relay.queues.entry(to).or_default().push_back(item);
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
        let queued = self.relay.queues.remove(&node).unwrap_or_default();
        for item in queued {
            if now_ms.saturating_sub(item.ts_ms) > expiry_ms {
                self.relay.expired += 1;
            } else {
                self.deliver_pm(node, item);
            }
        }
    }

    pub(crate) fn balance(&self, uid: &[u8; 32]) -> i64 {
        self.relay.balances.get(uid).copied().unwrap_or(0)
    }

    /// Pays `matoms` from `payer` to `payee`.
    fn pay(&mut self, payer: &[u8; 32], payee: &[u8; 32], matoms: i64) -> Result<(), String> {
        if self.balance(payer) < matoms {
            return Err(ERR_INSUFFICIENT_BALANCE.to_owned());
        }
        *self.relay.balances.entry(*payer).or_insert(0) -= matoms;
        *self.relay.balances.entry(*payee).or_insert(0) += matoms;
        Ok(())
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
/// `within`. Both sides must be online; a synthetic payee (not a node) always invoices.
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
                    None => return InvoiceReply::Invoice,
                    Some(p) if st.nodes[p].online => {
                        return if st.nodes[p].can_invoice {
                            InvoiceReply::Invoice
                        } else {
                            InvoiceReply::Error(ERR_UNABLE_TO_INVOICE.to_owned())
                        };
                    }
                    Some(_) => {}
                }
            }
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(deadline) => return InvoiceReply::None,
        }
    }
}

/// A scheduled tip, run to its end as brclient's tip attempts run:
///
/// * each attempt requests an invoice; an invoice is paid at once;
/// * a failed attempt before the last emits `willRetry: true` with the error, and the
///   next request follows [`DevnetConfig::tip_retry_spacing`](super::DevnetConfig)
///   after this one;
/// * success appends `ReceivedTip` to the payee, then `completed: true` to the payer;
/// * giving up emits a terminal event with the last error, or, when the last request
///   got no reply, "attempt N >= max attempts N to fetch invoice".
pub(crate) async fn run_tip(
    net: Arc<Net>,
    payer: usize,
    payee: [u8; 32],
    matoms: i64,
    max_attempts: i32,
) {
    let spacing = net.cfg.tip_retry_spacing;
    let payer_uid = net.lock().nodes[payer].uid;
    for attempt in 1..=max_attempts {
        let started = Instant::now();
        let reply = request_invoice(&net, payer, &payee, spacing).await;
        let err = {
            let mut st = net.lock();
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
                        return;
                    }
                    Err(e) => Some(e),
                },
            };
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
                    return;
                }
            }
            err
        };
        if err.is_some() {
            tokio::time::sleep_until(started + spacing).await;
        }
    }
    // The last request went unanswered: give up.
    let mut st = net.lock();
    let p = Progress {
        completed: false,
        attempt: max_attempts,
        err: format!("attempt {max_attempts} >= max attempts {max_attempts} to fetch invoice"),
        will_retry: false,
    };
    st.tip_progress(payer, &payee, matoms, p);
}

/// Sends a PM through the relay for node `from`, blocking while `from` is offline, as
/// brclient's `PM` blocks until the relay acks the push.
pub(crate) async fn send_pm(net: &Net, from: usize, to_uid: [u8; 32], message: String) {
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
                // A contact that is not a node is a synthetic peer: the PM leaves.
                if let Some(to) = st.node_by_uid(&to_uid) {
                    st.route_pm(to, item);
                }
                return;
            }
        }
        notified.await;
    }
}
