//! Router, sessions and the rmcp transport over the in-memory fabric, both roles and
//! both lifecycles, with faults, bounds and recovery. One test binary.

mod cancel_reaches_handler;
mod chat_and_malformed_ignored;
mod client_parking_busy;
mod client_parking_idle;
mod client_parking_recovery;
mod client_parking_server_revives;
mod client_parking_stateless;
mod client_pending_not_idle;
mod common;
mod deadline_fixed_at_send;
mod disallowed_peer_no_state;
mod drops_time_out;
mod expired_parts_dropped;
mod faults_reorder_duplicate;
mod flood_fair_queue;
mod go_router_recovery;
mod huge_timeouts_do_not_panic;
mod idle_expiry_recovery;
mod inbox_overflow;
mod large_results_chunked;
mod outbound_bound;
mod parked_at_rest;
mod parked_sessions;
mod progress_before_response;
mod recovery_duplicates;
mod resume_plain_client;
mod router_stops_with_last_handle;
mod send_error_names_peer;
mod send_on_forgotten_session;
mod session_cap;
mod silence_probe;
mod thousand_sessions;
mod timers_under_load;
mod tools_both_lifecycles;
