//! The serving harness and its SQLite ledger: allowlist, rate limits, priced tools,
//! call keys, tips, refunds, restarts and crash injection. One test binary; the crash
//! tests run it again as a child process (see `support::spawn_child`).

mod allowlist;
mod answer_fit;
mod billing_store;
mod call_key;
mod cancel;
mod chat;
mod crash;
mod directory;
mod duplicate_waits;
mod dynamic_price;
mod dynamic_tools;
mod interrupted;
mod key_conflict;
mod ledger_call_key;
mod ledger_concurrency;
mod ledger_debit_journal;
mod ledger_file;
mod ledger_lifecycle;
mod ledger_milliatoms;
mod ledger_notices;
mod ledger_open_errors;
mod ledger_operator;
mod ledger_outcome_bound;
mod ledger_restart_refund;
mod ledger_retention;
mod ledger_tip_identity;
mod ledger_tip_once;
mod ledger_totals;
mod lifecycles;
mod live_config;
mod milliatoms;
mod paid_tool_gate;
mod parked;
mod rate_limit;
mod replay_restart;
mod restart_refund;
mod support;
mod tip_once;
mod upstream_bounds;
mod upstream_floods;
mod upstream_http;
mod upstream_supervision;
mod visibility;
