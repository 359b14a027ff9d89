//! The client bridge: local MCP endpoints, the proxy, spending policy and the spend
//! log, against a serving harness over the in-memory fabric, plus interop with real MCP
//! clients (Python SDK, the conformance suite). One test binary for all of them.

mod agents;
mod allowed_ips;
mod approval;
mod approval_secret;
mod autopay;
mod call_lifetime;
mod common;
mod credit_owner;
mod credit_polling;
mod credit_reserving;
mod credit_sent_unpaid;
mod daily_cap_concurrent;
mod directory;
mod durable_resume;
mod fair_shares;
mod fidelity;
mod go_bot_sessions;
mod harness_e2e;
mod hostile_bot;
mod http_abuse;
mod http_gate;
mod http_refusals;
mod interop_conformance;
mod interop_errors;
mod interop_python;
mod link_parking;
mod link_parking_restart;
mod link_reconnect;
mod listener_lifecycle;
mod mrtr;
mod reload;
mod restart_storm;
mod session_resume;
mod settings;
mod spend_log_prop;
mod spend_outcomes;
mod spending_caps;
mod tasks;
mod tasks_2025;
mod tip_attribution;
mod transport_retry;
mod ts_elicit;
mod ts_tasks;
mod user_approvals;
