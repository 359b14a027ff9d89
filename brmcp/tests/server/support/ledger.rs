//! What the ledger's tests share: the call the bound tests repeat, the size of the
//! ledger's files, and the schema version a file holds.

use brmcp::adapters::PeerId;
use brmcp::server::{ArgsHash, CallKey, CallRequest, FILE_NAME, Keyed};
use serde_json::json;

/// A keyed call of `document` by `caller` at 1 atom, with no arguments.
pub fn document_call(caller: PeerId, key: &CallKey) -> CallRequest<'_> {
    CallRequest {
        caller,
        tool: "document",
        price_atoms: 1,
        keyed: Some(Keyed {
            key,
            args: ArgsHash::of_value(&json!({})),
        }),
    }
}

/// Bytes of the ledger's files (the database and its write-ahead log).
pub fn ledger_bytes(dir: &std::path::Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(dir.join(format!("{FILE_NAME}{suffix}"))).ok())
        .map(|m| m.len())
        .sum()
}

/// The schema version (`PRAGMA user_version`) the ledger file at `path` holds.
pub fn schema_version(path: &std::path::Path) -> i32 {
    let db = rusqlite::Connection::open(path).unwrap();
    db.query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}
