//! Memory per open session: not a timing.
//!
//! Opens N = 10,000 sessions over the in-memory PM fabric (legacy `initialize`, no calls
//! in flight) between one client router and one server router, and reports the live
//! heap they hold, counted by a global allocator (deterministic), and the growth of the
//! resident set (noisy: the allocator keeps freed pages and grows in steps).
//!
//! Both ends live in this process, so the first figure is client plus server. Closing
//! the clients does not tell the server (a Bison Relay session ends at the server by
//! idle expiry), so the heap still live after they close is the server's share.
//!
//! Where the bytes go: the transport alone (router entry, session state, inbound queue,
//! writer task; dialed without an rmcp service on top), the handler, and the rest, the
//! rmcp service of each end.
//!
//! Measured three ways, with each role's default router configuration but for parking:
//! - **running between calls**, each end as its role keeps it by default: the server
//!   end as the serving harness parks its callers' sessions (`server_park_after` =
//!   `brmcp::server::DEFAULT_PARK_AFTER`, 100 ms after the session came to rest), the
//!   client end as `Router::connect` keeps it (parked `DEFAULT_CLIENT_PARK_AFTER`, 100 ms,
//!   after it came to rest; over Bison Relay a session's next call comes a round trip
//!   later): the goal lines;
//! - **a service at each end**, parking off (`server_park_after` and
//!   `client_park_after` unset): what a pair holds while a call is under way at both
//!   ends, or with parking off;
//! - **both ends parked** after 200 ms, as a bridge's links to idle bots are after
//!   30 s: a parked end keeps its router entry and handshake record, and no rmcp
//!   service.
//!
//! Goals, printed as `goal` lines beside the figures: at most 24 KiB per running pair
//! (both ends) and at most 16 KiB for a running server end, between calls; at most
//! 24 KiB per parked pair. The pair's goals are checked on the live heap and on the
//! resident set, the measure of the Go implementation's 32.2 KiB per running pair; the
//! resident set is measured in fresh child processes of the bench, three per state
//! (their median), so no memory freed by an earlier measurement is reused. Last
//! measured (N=10,000): see the performance page.
//!
//! Run: `cargo bench -p brmcp-benches --bench session_memory`.

use std::alloc::System;
use std::time::Duration;

use brmcp_adapters::mem::{Faults, Pair};
use brmcp_adapters::{Client, DEFAULT_CLIENT_PARK_AFTER, PeerId, RouterConfig};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

mod common;

use common::BenchServer;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Sessions measured.
const N: usize = 10_000;

/// Idle time after which either end parks a session when both park
/// (`RouterConfig::server_park_after`, `RouterConfig::client_park_after`), short so
/// that every session measured is parked by the time it is counted.
const PARK_AFTER: Duration = Duration::from_millis(200);

/// How the ends park, for one measurement.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Parking {
    /// The server end as the serving harness parks it, the client end by default.
    Harness,
    /// Neither end parks: each runs its rmcp service.
    Off,
    /// Both ends park after [`PARK_AFTER`].
    Both,
}

impl Parking {
    const ALL: [Self; 3] = [Self::Harness, Self::Off, Self::Both];

    /// Its name in [`RSS_CHILD_ENV`].
    fn name(self) -> &'static str {
        match self {
            Self::Harness => "harness",
            Self::Off => "off",
            Self::Both => "both",
        }
    }

    /// The pair's goal line.
    fn goal_name(self) -> &'static str {
        match self {
            Self::Harness => "running session pair",
            Self::Off => "session pair with a service at each end",
            Self::Both => "parked session pair",
        }
    }
}

/// Set in a child run of this bench to the [`Parking::name`] whose resident set it
/// measures, alone in its process.
const RSS_CHILD_ENV: &str = "BRMCP_SESSION_MEMORY_RSS";

/// How a child reports its figure on its standard output.
const RSS_LINE: &str = "rss_per_pair ";

/// Fresh processes measured per state for the resident set; their median is reported
/// (the resident set grows in steps as the allocator maps memory, so one run is noisy).
const RSS_RUNS: usize = 3;

/// Sessions opened (and kept) before the baseline, so one-time setup is not counted.
const WARM_UP: usize = 8;

/// The most a session pair may hold, both ends, parked or running: 24 KiB, under the
/// Go implementation's 32.2 KiB per running pair (it never parks).
const PAIR_GOAL: i128 = 24 << 10;

/// The most the serving end of a running session may hold: 16 KiB.
const SERVER_END_GOAL: i128 = 16 << 10;

/// Prints a `goal` line: `what`'s bytes per session against `most`.
fn goal(what: &str, bytes: i128, most: i128) {
    let met = if bytes <= most { "met" } else { "NOT met" };
    println!("goal {what}: {bytes} bytes (goal <= {most} bytes): {met}");
}

/// Bytes currently allocated on the heap, per the counting allocator.
fn live_heap() -> i128 {
    let s = GLOBAL.stats();
    s.bytes_allocated as i128 + s.bytes_reallocated as i128 - s.bytes_deallocated as i128
}

/// Resident set size in bytes (`VmRSS` of `/proc/self/status`), if readable.
fn rss() -> Option<i128> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: i128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Lets queued PMs, notifications and task exits settle.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

async fn open(pair: &Pair) -> Client<()> {
    pair.client
        .connect(pair.server_id, ())
        .await
        .expect("initialize over the fabric")
}

fn per_session(bytes: i128) -> i128 {
    bytes / N as i128
}

/// A client and a server router with each role's default configuration but for
/// `parking`, serving the bench's server.
fn pair(parking: Parking) -> Pair {
    let mut server = RouterConfig::server();
    server.max_sessions_per_peer = N + WARM_UP;
    server.server_park_after = match parking {
        Parking::Harness => Some(brmcp::server::DEFAULT_PARK_AFTER),
        Parking::Off => None,
        Parking::Both => Some(PARK_AFTER),
    };
    let mut client = RouterConfig::client();
    if parking != Parking::Harness {
        client.client_park_after = (parking == Parking::Both).then_some(PARK_AFTER);
    }
    let pair = Pair::with_configs(1, Faults::none(), server, client);
    pair.server.serve(|_peer: &PeerId| BenchServer::new());
    pair
}

/// The warm-up sessions, opened and settled, and room for the sessions counted.
async fn warmed(pair: &Pair) -> (Vec<Client<()>>, Vec<Client<()>>) {
    let mut warm = Vec::with_capacity(WARM_UP);
    for _ in 0..WARM_UP {
        warm.push(open(pair).await);
    }
    let clients = Vec::with_capacity(N);
    settle().await;
    (warm, clients)
}

/// Opens the sessions counted into `clients` (its room already made, so the vector is
/// not counted) and gives them time to park as `parking` parks them.
async fn open_all(pair: &Pair, parking: Parking, clients: &mut Vec<Client<()>>) {
    for _ in 0..N {
        clients.push(open(pair).await);
    }
    settle().await;
    match parking {
        Parking::Both => tokio::time::sleep(PARK_AFTER * 2).await,
        Parking::Harness => tokio::time::sleep(DEFAULT_CLIENT_PARK_AFTER * 2).await,
        Parking::Off => {}
    }
}

/// The resident set's growth per pair for `parking`, measured in this process (a
/// fresh child of the bench) with nothing allocated and freed before: memory a
/// previous measurement freed would be reused and hide part of the growth.
async fn measure_rss(parking: Parking) {
    let pair = pair(parking);
    let (_warm, mut clients) = warmed(&pair).await;
    let before = rss().expect("VmRSS");
    open_all(&pair, parking, &mut clients).await;
    let after = rss().expect("VmRSS");
    println!("{RSS_LINE}{}", per_session(after - before));
    drop(clients);
}

/// The median of [`RSS_RUNS`] fresh processes' [`measure_rss`], and each run's figure.
fn rss_in_children(parking: Parking) -> Option<(i128, Vec<i128>)> {
    let exe = std::env::current_exe().ok()?;
    let mut runs = Vec::with_capacity(RSS_RUNS);
    for _ in 0..RSS_RUNS {
        let out = std::process::Command::new(&exe)
            .env(RSS_CHILD_ENV, parking.name())
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find_map(|l| l.strip_prefix(RSS_LINE))?;
        runs.push(line.trim().parse().ok()?);
    }
    let mut sorted = runs.clone();
    sorted.sort_unstable();
    Some((sorted[RSS_RUNS / 2], runs))
}

async fn measure(parking: Parking) {
    let park = parking == Parking::Both;
    let pair = pair(parking);
    let (warm, mut clients) = warmed(&pair).await;

    // What the handler alone holds per session (its tool router), for reference.
    let handler_before = live_heap();
    let handler = BenchServer::new();
    let handler_bytes = live_heap() - handler_before;
    drop(handler);

    // The transport alone: dialed, never used, so nothing exists at the server.
    let transport_before = live_heap();
    let transports: Vec<_> = (0..N)
        .map(|_| pair.client.dial(pair.server_id).expect("dial"))
        .collect();
    settle().await;
    let transport_bytes = per_session(live_heap() - transport_before);
    drop(transports);
    settle().await;

    let heap_before = live_heap();
    open_all(&pair, parking, &mut clients).await;
    let heap_open = live_heap();

    let stats = pair.server.stats();
    assert_eq!(stats.sessions_open as usize, N + WARM_UP, "{stats:?}");
    let parked = clients.iter().filter(|c| c.is_parked()).count();
    let expected = if parking == Parking::Off { 0 } else { N };
    assert_eq!(parked, expected, "client ends parked");

    for client in clients.drain(..) {
        client.close().await;
    }
    settle().await;
    let heap_server_only = live_heap();
    let stats = pair.server.stats();
    assert_eq!(stats.sessions_open as usize, N + WARM_UP, "{stats:?}");

    let both = per_session(heap_open - heap_before);
    let server_side = per_session(heap_server_only - heap_before);
    match parking {
        Parking::Harness => {
            println!(
                "running between calls (the server end parked at rest as the harness parks it, the client end 100 ms after it came to rest, as a Client parks it by default):"
            );
            goal(parking.goal_name(), both, PAIR_GOAL);
            goal("running session, server end", server_side, SERVER_END_GOAL);
        }
        Parking::Off => {
            println!("a service at each end (parking off, or a call under way at both ends):");
        }
        Parking::Both => {
            println!("both ends parked after 200 ms:");
            goal(parking.goal_name(), both, PAIR_GOAL);
        }
    }
    println!("idle_session_memory: {both} bytes/session (N={N}, live heap, client + server ends)");
    println!("  server end: {server_side} bytes/session (live heap after the clients closed)");
    println!("  client end: {} bytes/session", both - server_side);
    if parking == Parking::Harness {
        println!("  the server end keeps its router entry, session state and handshake record");
        println!(
            "  the client end too, parked after DEFAULT_CLIENT_PARK_AFTER; with a call under way at both ends, see the service lines"
        );
    } else if park {
        println!(
            "  nothing runs at either end: each keeps its router entry, session state and handshake record"
        );
        println!("  (the client end also its Client: the server's info from the handshake)");
    } else {
        println!(
            "  of the server end, the handler (BenchServer and its tool router): {handler_bytes} bytes"
        );
        println!(
            "  per end, the transport alone (router entry, session, inbound queue, writer): {transport_bytes} bytes"
        );
        println!(
            "  so per pair the two rmcp services hold about {} bytes",
            both - 2 * transport_bytes - handler_bytes
        );
        println!(
            "  (an inbound queue slot holds a ClientJsonRpcMessage of {} or a ServerJsonRpcMessage of {} bytes)",
            size_of::<rmcp::model::ClientJsonRpcMessage>(),
            size_of::<rmcp::model::ServerJsonRpcMessage>()
        );
    }
    match rss_in_children(parking) {
        Some((median, runs)) => {
            println!(
                "idle_session_memory_rss: {median} bytes/session (N={N}, VmRSS growth, both ends; median of {RSS_RUNS} fresh processes: {runs:?})"
            );
            if parking != Parking::Off {
                goal(
                    &format!("{} (VmRSS)", parking.goal_name()),
                    median,
                    PAIR_GOAL,
                );
            }
        }
        None => println!("idle_session_memory_rss: unavailable (no /proc/self/status)"),
    }

    for client in warm {
        client.close().await;
    }
    pair.client.close();
    pair.server.close();
}

fn main() {
    let child = std::env::var(RSS_CHILD_ENV).ok();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(async {
            if let Some(name) = child {
                let parking = Parking::ALL
                    .into_iter()
                    .find(|p| p.name() == name)
                    .expect("a parking state");
                measure_rss(parking).await;
                return;
            }
            for parking in Parking::ALL {
                measure(parking).await;
            }
        });
}
