//! What the brmcp crates' tests share, in one place: a dev-dependency of each, never a
//! dependency of a library.
//!
//! - [`corpus`]: the committed fuzz corpus, replayed by each crate's harness tests.
//! - `call`, `text`, `form_message` (feature `rmcp`): a tool call's params, its result's
//!   text, and what a form elicitation asks.
//! - `go_router` (feature `go-router`): a test double of the Go implementation's router
//!   and go-sdk sessions.
//! - `clientrpc_fake` (feature `clientrpc-fake`): a fault-injecting fake of brclient's
//!   clientrpc server, and certificates in brclient's and brclientd's shapes.

#[cfg(feature = "clientrpc-fake")]
pub mod clientrpc_fake;
#[cfg(feature = "go-router")]
pub mod go_router;

use std::path::{Path, PathBuf};

/// Every file of `fuzz/corpus/<target>/`, sorted; panics when the corpus is empty, so a
/// replay test cannot pass on nothing.
pub fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    files.sort();
    let out: Vec<_> = files
        .into_iter()
        .filter(|p| p.is_file())
        .map(|p| {
            let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, data)
        })
        .collect();
    assert!(!out.is_empty(), "empty corpus {}", dir.display());
    out
}

/// `tools/call` params for `name` with JSON object arguments.
#[cfg(feature = "rmcp")]
pub fn call(name: &'static str, args: serde_json::Value) -> rmcp::model::CallToolRequestParams {
    let serde_json::Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    rmcp::model::CallToolRequestParams::new(name).with_arguments(args)
}

/// The message of a form elicitation (what the user is asked), or the error a client
/// that takes forms only answers any other elicitation with.
#[cfg(feature = "rmcp")]
pub fn form_message(
    request: rmcp::model::ElicitRequestParams,
) -> Result<String, rmcp::model::ErrorData> {
    let rmcp::model::ElicitRequestParams::FormElicitationParams { message, .. } = request else {
        return Err(rmcp::model::ErrorData::invalid_params("form only", None));
    };
    Ok(message)
}

/// The text items of a tool result, concatenated.
#[cfg(feature = "rmcp")]
pub fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}
