//! The in-process test API: create and KX nodes, move them on and
//! off the relay, inject traffic, break connections, restart nodes, inject failures,
//! and inspect logs, balances and received requests. None of it is reachable over
//! the wire.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use super::durable::{Op, TipRecord, Uid};
use super::node::{Event, Log, Node, NodeCtl};
use super::relay::Queued;
use super::server::{self, ServerSettings};
use super::{
    BasicAuth, Devnet, DevnetError, LogEntry, NodeId, NodeInfo, NodeRuntime, NodeSpec,
    ReceivedRequest, StreamKind, certs, config, random_bytes,
};

fn valid_nick(nick: &str) -> bool {
    !nick.is_empty()
        && nick != "."
        && nick != ".."
        && nick
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl Devnet {
    /// Creates a node (KX'd with no one) and starts its listener.
    ///
    /// # Errors
    ///
    /// A bad or duplicate nick or uid, a file or socket error, or a certificate or TLS
    /// setup failure.
    pub async fn add_node(&self, spec: NodeSpec) -> Result<NodeInfo, DevnetError> {
        if !valid_nick(&spec.nick) {
            return Err(DevnetError::InvalidNick(spec.nick));
        }
        let dir = self.dir.join(&spec.nick);
        brmcp_fs::create_dir(&dir)?;
        let saved = super::persist::NodeState::load(&dir)?;
        let uid = match (spec.uid, &saved) {
            (Some(uid), _) => uid,
            (None, Some(saved)) => saved.uid_bytes(&dir)?,
            (None, None) => random_bytes(),
        };
        {
            let st = self.net.lock();
            if st.nodes.iter().any(|n| n.nick == spec.nick) {
                return Err(DevnetError::DuplicateNick(spec.nick));
            }
            if st.node_by_uid(&uid).is_some() {
                return Err(DevnetError::DuplicateUid(hex::encode(uid)));
            }
        }
        let node_certs = certs::ensure(&dir, spec.cert_mode)?;
        let tls = server::tls_acceptor(&node_certs, spec.client_auth)?;
        // The port of the last run, so the printed commands keep working; another if
        // something took it meanwhile.
        let listener = match saved.as_ref().map(|s| s.port) {
            Some(port) => match TcpListener::bind(("127.0.0.1", port)).await {
                Ok(listener) => listener,
                Err(e) => {
                    tracing::warn!(nick = %spec.nick, port, error = %e, "devnet port taken; using another");
                    TcpListener::bind(("127.0.0.1", 0)).await?
                }
            },
            None => TcpListener::bind(("127.0.0.1", 0)).await?,
        };
        let addr = listener.local_addr()?;
        let url = format!("wss://{addr}/ws");
        let (rpc_user, rpc_pass) = match (&spec.basic_auth, &saved) {
            (Some(BasicAuth { user, pass }), _) => (user.clone(), pass.clone()),
            (None, Some(saved)) => (saved.rpc_user.clone(), saved.rpc_pass.clone()),
            (None, None) => (config::random_token(8), config::random_token(16)),
        };
        let sig_key = match &saved {
            Some(saved) => saved.sig_key_bytes(&dir)?,
            None => random_bytes(),
        };
        let state = super::persist::NodeState {
            uid: hex::encode(uid),
            sig_key: hex::encode(sig_key),
            port: addr.port(),
            rpc_user: rpc_user.clone(),
            rpc_pass: rpc_pass.clone(),
            runs: saved.as_ref().map_or(1, |s| s.runs.saturating_add(1)),
        };
        state.save(&dir)?;
        let config_path = config::write(&dir, &url, &node_certs.paths, &rpc_user, &rpc_pass)?;
        let app_name = match spec.cert_mode {
            certs::CertMode::Brclientd => "brclientd",
            certs::CertMode::Brclient => "brclient",
        };

        let settings = Arc::new(ServerSettings {
            tls,
            auth: spec.basic_auth.clone(),
        });
        let (index, resumed) = {
            let mut st = self.net.lock();
            let mut node = Node::new(
                spec.nick.clone(),
                uid,
                sig_key,
                app_name,
                spec.online,
                self.net.cfg.replay_file_size,
            );
            match st.dormant.remove(&Uid(uid)) {
                // Kept from an earlier run: its address book, logs and tips.
                Some(kept) => {
                    node.contacts = kept.contacts;
                    let [a, b, c, d] = kept.logs;
                    node.logs = [a, b, c, d, kept.posts, kept.post_statuses];
                    node.post_subscribers = kept.post_subscribers.iter().map(|u| u.0).collect();
                    for log in &mut node.logs {
                        log.set_max_file_size(self.net.cfg.replay_file_size);
                    }
                    node.recent_tips = kept.recent_tips;
                    if kept.nick != spec.nick {
                        st.pending.push(Op::Node {
                            uid: Uid(uid),
                            nick: spec.nick.clone(),
                        });
                    }
                }
                None => {
                    st.pending.push(Op::Node {
                        uid: Uid(uid),
                        nick: spec.nick.clone(),
                    });
                    // A directory of a devnet that kept no logs: ids above every
                    // earlier run's (the first run keeps the usual ones).
                    if state.first_file() > 0 {
                        for kind in Log::ALL {
                            node.set_next_file(kind, state.first_file());
                        }
                    }
                }
            }
            st.nodes.push(node);
            if !st.relay.balances.contains_key(&uid) {
                st.set_balance(uid, self.net.cfg.initial_balance_matoms);
            }
            let index = st.nodes.len() - 1;
            if spec.online {
                // PMs the relay kept for it while it was not running.
                let now = self.net.clock.now_ms();
                st.set_online(index, true, now, self.net.cfg.relay_expiry);
            }
            // Taken before its listener starts, so no tip it schedules is among them.
            let resumed: Vec<u64> = st
                .relay
                .tips
                .values()
                .filter(|t| t.payer.0 == uid)
                .map(|t| t.id)
                .collect();
            (index, resumed)
        };
        let info = NodeInfo {
            id: NodeId(index),
            nick: spec.nick,
            uid,
            url,
            addr,
            dir,
            certs: node_certs.paths,
            config_path,
            rpc_user,
            rpc_pass,
        };
        let task = tokio::spawn(server::run_listener(
            self.net.clone(),
            index,
            listener,
            settings.clone(),
        ));
        self.runtimes().push(NodeRuntime {
            info: info.clone(),
            settings,
            listener: Some(task),
        });
        // Its tips in flight when the devnet last stopped go on.
        for id in resumed {
            self.net.spawn(super::relay::run_tip(self.net.clone(), id));
        }
        self.net.changed.notify_waiters();
        Ok(info)
    }

    /// KXes two nodes: each gets the other in its address book (under the other's
    /// nick) and a `KXCompleted` on its KX stream.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn kx(&self, a: NodeId, b: NodeId) -> Result<(), DevnetError> {
        self.check(a)?;
        self.check(b)?;
        self.net.lock().kx(a.0, b.0, true);
        Ok(())
    }

    /// Connects a node to the relay or disconnects it. Offline, its PMs block in
    /// `ChatService.PM` and PMs to it queue at the relay; coming online flushes both
    /// in order.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn set_online(&self, node: NodeId, online: bool) -> Result<(), DevnetError> {
        self.check(node)?;
        let now = self.net.clock.now_ms();
        self.net
            .lock()
            .set_online(node.0, online, now, self.net.cfg.relay_expiry);
        self.net.changed.notify_waiters();
        Ok(())
    }

    /// Advances the devnet clock (relay timestamps and queue expiry).
    pub fn advance_clock(&self, by: Duration) {
        self.net.clock.advance(by);
    }

    /// Sends `node` a PM from a synthetic peer (added to its address book under
    /// `from_nick` if needed) through the relay: queued while `node` is offline.
    /// `mode` is a `MessageMode` number (1 = `/me`).
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn inject_pm(
        &self,
        node: NodeId,
        from_uid: [u8; 32],
        from_nick: &str,
        message: &str,
        mode: i32,
    ) -> Result<(), DevnetError> {
        self.check(node)?;
        let ts_ms = self.net.clock.now_ms();
        let mut st = self.net.lock();
        if st.nodes[node.0].contact(&from_uid).is_none() {
            st.nodes[node.0].add_contact(from_uid, from_nick);
        }
        let to = st.nodes[node.0].uid;
        let item = Queued {
            from: from_uid,
            message: message.to_owned(),
            mode,
            ts_ms,
        };
        super::relay::route(&self.net, &mut st, to, item);
        Ok(())
    }

    /// Credits `node` with a tip from a synthetic payer: its balance grows and a
    /// `ReceivedTip` goes to its tip stream.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn inject_tip(
        &self,
        node: NodeId,
        from_uid: [u8; 32],
        amount_matoms: i64,
    ) -> Result<(), DevnetError> {
        self.check(node)?;
        let mut st = self.net.lock();
        let uid = st.nodes[node.0].uid;
        let balance = st.balance(&uid).saturating_add(amount_matoms);
        st.set_balance(uid, balance);
        let at_ms = self.net.clock.now_ms();
        st.record_tip(TipRecord {
            at_ms,
            payer: Uid(from_uid),
            payee: Uid(uid),
            matoms: amount_matoms,
        });
        st.nodes[node.0].append(
            StreamKind::TipReceived,
            Event::TipReceived {
                uid: from_uid,
                amount_matoms,
            },
        );
        Ok(())
    }

    /// Drops every connection of a node at once (TCP closed, no close frame).
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn drop_connections(&self, node: NodeId) -> Result<(), DevnetError> {
        self.check(node)?;
        self.net.lock().nodes[node.0]
            .ctl
            .send_modify(|c: &mut NodeCtl| c.generation += 1);
        Ok(())
    }

    /// Makes a node unresponsive (or responsive again): its connections, current and
    /// new, stop reading and writing, so pings go unanswered, requests unanswered and
    /// the server sends no pings of its own, like a hung brclient.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn set_unresponsive(&self, node: NodeId, unresponsive: bool) -> Result<(), DevnetError> {
        self.check(node)?;
        self.net.lock().nodes[node.0]
            .ctl
            .send_modify(|c: &mut NodeCtl| c.frozen = unresponsive);
        Ok(())
    }

    /// Restarts a node's clientrpc server on the same address: every connection drops,
    /// the listener closes and reopens, `TipUser`'s warm-up starts again. Replay logs,
    /// address book, balances and pending tips are kept, as brclient keeps them on disk.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`], or the address could not be bound again.
    pub async fn restart_node(&self, node: NodeId) -> Result<(), DevnetError> {
        self.check(node)?;
        let (old, addr, settings) = {
            let mut rts = self.runtimes();
            let rt = &mut rts[node.0];
            (rt.listener.take(), rt.info.addr, rt.settings.clone())
        };
        {
            let mut st = self.net.lock();
            let n = &mut st.nodes[node.0];
            n.ctl.send_modify(|c: &mut NodeCtl| c.generation += 1);
            n.started_at = std::time::Instant::now();
        }
        if let Some(h) = old {
            h.abort();
            let _ = h.await;
        }
        let mut attempts = 0;
        let listener = loop {
            match TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e) if attempts >= 50 => return Err(e.into()),
                Err(_) => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        let task = tokio::spawn(server::run_listener(
            self.net.clone(),
            node.0,
            listener,
            settings,
        ));
        self.runtimes()[node.0].listener = Some(task);
        Ok(())
    }

    /// Fails the next `count` calls of `method` (e.g. `"ChatService.PM"`, without a
    /// stream suffix) with -32603 and `message`, after their params decode.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn fail_next(
        &self,
        node: NodeId,
        method: &str,
        count: u32,
        message: &str,
    ) -> Result<(), DevnetError> {
        self.check(node)?;
        self.net.lock().nodes[node.0]
            .faults
            .fail_next
            .insert(method.to_owned(), (count, message.to_owned()));
        Ok(())
    }

    /// Delays every call of `method` by `delay` before it is handled (`None` clears).
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn delay_method(
        &self,
        node: NodeId,
        method: &str,
        delay: Option<Duration>,
    ) -> Result<(), DevnetError> {
        self.check(node)?;
        let mut st = self.net.lock();
        let delays = &mut st.nodes[node.0].faults.delays;
        match delay {
            Some(d) => {
                delays.insert(method.to_owned(), d);
            }
            None => {
                delays.remove(method);
            }
        }
        Ok(())
    }

    /// Whether a node, as a payee, can create invoices. When it cannot, tips to it
    /// fail each attempt with "unable to generate payment invoice".
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn set_can_invoice(&self, node: NodeId, can: bool) -> Result<(), DevnetError> {
        self.check(node)?;
        self.net.lock().nodes[node.0].can_invoice = can;
        self.net.changed.notify_waiters();
        Ok(())
    }

    /// brclient's tip gating for `TipUser` over clientrpc: `allow` as
    /// `rpcallowremotesendtip`, `max_dcr` as `rpcmaxremotesendtipamt` (<= 0: no limit).
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn set_tip_gating(
        &self,
        node: NodeId,
        allow: bool,
        max_dcr: f64,
    ) -> Result<(), DevnetError> {
        self.check(node)?;
        let gate = &mut self.net.lock().nodes[node.0].tip_gate;
        gate.allow = allow;
        gate.max_dcr = max_dcr;
        Ok(())
    }

    /// A node's replay log of one kind, with acked state.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn log(&self, node: NodeId, kind: StreamKind) -> Result<Vec<LogEntry>, DevnetError> {
        self.check(node)?;
        Ok(self.net.lock().nodes[node.0].logs[kind.index()].inspect())
    }

    /// Makes the next entry of a node's log open file `file_index`, so its ids are
    /// `file_index << 32 | offset` (`1 << 21` gives ids above 2^53).
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn set_log_file_index(
        &self,
        node: NodeId,
        kind: StreamKind,
        file_index: u32,
    ) -> Result<(), DevnetError> {
        self.check(node)?;
        self.net.lock().nodes[node.0].set_next_file(kind, file_index);
        Ok(())
    }

    /// A user's wallet balance in milliatoms (any uid: nodes and synthetic peers).
    pub fn balance(&self, uid: &[u8; 32]) -> i64 {
        self.net.lock().balance(uid)
    }

    /// Sets a user's wallet balance in milliatoms.
    pub fn set_balance(&self, uid: [u8; 32], matoms: i64) {
        self.net.lock().set_balance(uid, matoms);
    }

    /// Every message a node received on its connections, oldest first (the last
    /// 4096).
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn requests(&self, node: NodeId) -> Result<Vec<ReceivedRequest>, DevnetError> {
        self.check(node)?;
        Ok(self.net.lock().nodes[node.0]
            .requests
            .iter()
            .cloned()
            .collect())
    }

    /// How many WebSocket connections a node has open.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn connection_count(&self, node: NodeId) -> Result<usize, DevnetError> {
        self.check(node)?;
        Ok(self.net.lock().nodes[node.0].conns)
    }

    /// How many TCP connections a node's listener accepted so far, refused TLS
    /// handshakes and HTTP errors included (to tell a backoff from a tight loop).
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn accepted_connections(&self, node: NodeId) -> Result<u64, DevnetError> {
        self.check(node)?;
        Ok(self.net.lock().nodes[node.0].accepts)
    }

    /// The most requests a node ever had in flight on one connection, streams
    /// included (at most 16).
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn peak_in_flight(&self, node: NodeId) -> Result<usize, DevnetError> {
        self.check(node)?;
        Ok(self.net.lock().nodes[node.0].peak_in_flight)
    }

    /// How many PMs wait at the relay for a node.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn relay_queue_len(&self, node: NodeId) -> Result<usize, DevnetError> {
        self.check(node)?;
        let st = self.net.lock();
        let uid = st.nodes[node.0].uid;
        Ok(st
            .relay
            .queues
            .get(&uid)
            .map_or(0, std::collections::VecDeque::len))
    }

    /// How many queued PMs the relay dropped because they expired.
    pub fn relay_expired(&self) -> u64 {
        self.net.lock().relay.expired
    }
}
