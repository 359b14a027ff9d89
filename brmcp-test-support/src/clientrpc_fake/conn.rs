//! One connection of the fake: TLS, the upgrade with its path and auth checks, and the
//! handling of each request (streams with replay, acks, answers by the handler).
// The callback type of tungstenite's `accept_hdr_async` is fixed.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;

use super::server::{Call, ConnEntry, Log, Recorded, Reply, Shared, State};
use super::{KX_STREAM, PM_STREAM, TIP_PROGRESS, TIP_STREAM, frame, lock, seq_of, split_suffix};

pub(super) async fn serve(
    shared: Arc<Shared>,
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
) {
    let Ok(tls) = acceptor.accept(tcp).await else {
        return;
    };
    let auth = shared.options.basic_auth.clone();
    let seen = shared.clone();
    let callback =
        move |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
            let header = request
                .headers()
                .get("authorization")
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned);
            {
                let mut state = lock(&seen.state);
                state.auth_headers.push(header.clone());
                state.paths.push(request.uri().path().to_owned());
            }
            let refuse = |status: StatusCode| {
                let mut r = ErrorResponse::new(Some(status.to_string()));
                *r.status_mut() = status;
                if status == StatusCode::UNAUTHORIZED {
                    r.headers_mut().insert(
                        "WWW-Authenticate",
                        "Basic realm=\"Restricted\"".parse().unwrap(),
                    );
                }
                r
            };
            if request.uri().path() != "/ws" {
                return Err(refuse(StatusCode::NOT_FOUND));
            }
            if let Some((user, pass)) = &auth {
                let Some(given) = header.as_deref().and_then(|h| h.strip_prefix("Basic ")) else {
                    return Err(refuse(StatusCode::UNAUTHORIZED));
                };
                let Ok(decoded) = STANDARD.decode(given) else {
                    return Err(refuse(StatusCode::UNAUTHORIZED));
                };
                if decoded != format!("{user}:{pass}").into_bytes() {
                    return Err(refuse(StatusCode::FORBIDDEN));
                }
            }
            Ok(response)
        };
    let Ok(ws) = tokio_tungstenite::accept_hdr_async(tls, callback).await else {
        return;
    };
    let (mut sink, mut stream) = ws.split();
    let (out, mut out_rx) = mpsc::unbounded_channel::<Message>();
    let (close, mut close_rx) = watch::channel(false);
    let (stall, mut stall_rx) = watch::channel(false);
    let number = {
        let mut state = lock(&shared.state);
        state.connections += 1;
        let number = state.connections;
        state.conns.insert(
            number,
            ConnEntry {
                out: out.clone(),
                close: close.clone(),
                stall,
                streams: Vec::new(),
                in_flight: 0,
            },
        );
        number
    };
    let mut writer_close = close_rx.clone();
    let writer = tokio::spawn(async move {
        loop {
            tokio::select! {
                () = until_true(&mut writer_close) => break,
                m = out_rx.recv() => match m {
                    Some(m) => if sink.send(m).await.is_err() { break },
                    None => break,
                },
            }
        }
    });
    if let Some(interval) = shared.options.ping_interval {
        let out = out.clone();
        let shared = shared.clone();
        let mut ping_close = close_rx.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = until_true(&mut ping_close) => break,
                    () = tokio::time::sleep(interval) => {
                        lock(&shared.state).pings_sent += 1;
                        if out.send(Message::Ping(vec![7u8; 16].into())).is_err() { break }
                    }
                }
            }
        });
    }
    loop {
        let stalled = *stall_rx.borrow();
        tokio::select! {
            () = until_true(&mut close_rx) => break,
            _ = stall_rx.changed() => {}
            message = stream.next(), if !stalled => match message {
                Some(Ok(Message::Text(text))) => {
                    if !handle(&shared, number, text.as_bytes()) { break }
                }
                Some(Ok(Message::Binary(data))) => {
                    if !handle(&shared, number, &data) { break }
                }
                Some(Ok(Message::Pong(payload))) => {
                    lock(&shared.state).pongs.push(payload.to_vec());
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            },
        }
    }
    close.send_replace(true);
    lock(&shared.state).conns.remove(&number);
    let _ = writer.await;
}

/// Handles one client message; `false` closes the connection (as the server does on
/// undecodable JSON or a wrong `jsonrpc`).
fn handle(shared: &Arc<Shared>, conn: usize, data: &[u8]) -> bool {
    let Some(Ok(raw)) = serde_json::Deserializer::from_slice(data)
        .into_iter::<Value>()
        .next()
    else {
        return false;
    };
    if raw.get("jsonrpc") != Some(&json!("2.0")) || !raw.is_object() {
        return false;
    }
    let id = raw.get("id").cloned().unwrap_or(Value::Null);
    let method = raw
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let params = raw.get("params").cloned().unwrap_or(json!({}));
    let mut state = lock(&shared.state);
    state.requests.push(Recorded {
        conn,
        raw: raw.clone(),
        method: method.clone(),
        params: params.clone(),
    });
    if id.is_null() {
        return true;
    }
    let Some(entry) = state.conns.get_mut(&conn) else {
        return false;
    };
    entry.in_flight += 1;
    let in_flight = entry.in_flight;
    state.max_in_flight = state.max_in_flight.max(in_flight);

    if let Some((base, _)) = split_suffix(&method) {
        // A stream: replay what is stored and not cleared, then go live; no answer.
        let base = base.to_owned();
        if let Some((left, code, message)) = state.refuse_streams.get_mut(&base)
            && *left > 0
        {
            *left -= 1;
            let reply = json!({
                "jsonrpc": "2.0", "id": id, "error": {"code": *code, "message": message.clone()}
            });
            send_reply(&mut state, conn, reply);
            return true;
        }
        let from = seq_of(&params["unackedFrom"]);
        let replay: Vec<Value> = state.logs.get(&base).map_or_else(Vec::new, |log| {
            log.entries
                .iter()
                .filter(|(seq, _)| *seq > from.max(log.cleared))
                .map(|(_, item)| item.clone())
                .collect()
        });
        let entry = state.conns.get_mut(&conn).expect("live");
        for item in replay {
            let _ = entry.out.send(frame(&json!({
                "jsonrpc": "2.0", "params": item, "method": method
            })));
        }
        entry.streams.push((base, method, id));
        return true;
    }

    let ack_of = match method.as_str() {
        "ChatService.AckReceivedPM" => Some(PM_STREAM),
        "PaymentsService.AckTipReceived" => Some(TIP_STREAM),
        "PaymentsService.AckTipProgress" => Some(TIP_PROGRESS),
        "ChatService.AckKXCompleted" => Some(KX_STREAM),
        _ => None,
    };
    if let Some(base) = ack_of {
        let reply = if state.fail_acks > 0 {
            state.fail_acks -= 1;
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "ack failed"}})
        } else {
            let seq = seq_of(&params["sequenceId"]);
            let first = state.next_seq;
            let log = state
                .logs
                .entry(base.to_owned())
                .or_insert_with(|| Log::new(first));
            log.cleared = log.cleared.max(seq);
            lock(&shared.timeline).push(format!("ack {seq}"));
            json!({"jsonrpc": "2.0", "id": id, "result": {}})
        };
        send_reply(&mut state, conn, reply);
        return true;
    }
    drop(state);

    let handler = lock(&shared.handler).clone();
    let call = Call {
        conn,
        id: id.clone(),
        method,
        params,
    };
    match handler(&call) {
        Reply::Later(future) => {
            let shared = shared.clone();
            tokio::spawn(async move {
                let reply = future.await;
                let reply = envelope(&id, reply);
                send_reply(&mut lock(&shared.state), conn, reply);
            });
        }
        reply => {
            let reply = envelope(&id, reply);
            send_reply(&mut lock(&shared.state), conn, reply);
        }
    }
    true
}

fn envelope(id: &Value, reply: Reply) -> Value {
    match reply {
        Reply::Result(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Reply::Error(code, message) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
        Reply::Later(_) => panic!("nested Later"),
    }
}

fn send_reply(state: &mut State, conn: usize, reply: Value) {
    if let Some(entry) = state.conns.get_mut(&conn) {
        entry.in_flight -= 1;
        let _ = entry.out.send(frame(&reply));
    }
}

/// Resolves once the flag is set (or its sender is gone), holding no borrow.
async fn until_true(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|set| *set).await;
}
