//! What the ledger's bound tests share: one caller's keyed call, and the ledger's size
//! on disk.

use std::path::Path;

use brmcp::adapters::PeerId;
use brmcp::server::{ArgsHash, CallKey, CallRequest, FILE_NAME, Keyed};
use serde_json::json;

/// `caller`'s keyed call of `document` for 1 atom, without arguments.
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

/// Bytes of the ledger's files in `dir` (the database and its write-ahead log).
pub fn ledger_bytes(dir: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(dir.join(format!("{FILE_NAME}{suffix}"))).ok())
        .map(|m| m.len())
        .sum()
}
