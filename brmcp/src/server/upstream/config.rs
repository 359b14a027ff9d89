//! The `upstreams` section of `brmcp.json`: the MCP servers `brmcp serve` sells.
//!
//! ```json
//! "upstreams": [{
//!   "name": "everything",
//!   "command": "npx", "args": ["@modelcontextprotocol/server-everything"],
//!   "env": {"KEY": "value"}, "pass_env": ["API_TOKEN"], "cwd": "/srv/everything",
//!   "tools": {"echo": 0, "get-sum": 500, "get-env": "off",
//!             "search": {"priced_by": "search-price", "max_price_atoms": 5000}},
//!   "default_price_atoms": 1000,
//!   "resources": true, "prompts": false, "price_in_description": true
//! }, {
//!   "name": "search",
//!   "url": "https://search.example/mcp",
//!   "headers": {"X-Client": "brmcp"}, "bearer_env": "SEARCH_TOKEN",
//!   "tools": {"search": 2000}
//! }]
//! ```
//!
//! A command starts with a clean environment: `PATH`, `HOME` and the locale (`LANG`,
//! `LC_*`) from serve's, the variables `pass_env` names from serve's, then `env`'s
//! values. An upstream sold to strangers is not handed the operator's secrets.
//!
//! Read strictly: an unknown key or a value of the wrong type is an error naming its
//! key. A tool the file does not name is not exposed unless the upstream has a
//! `default_price_atoms`; `"off"` hides a tool even then. With more than one upstream
//! each tool is exposed as `<name>_<tool>`; names are lowercase letters, digits and
//! `-`, so the first `_` ends the name and no two upstreams' tools can collide. A
//! priced tool's description ends with its price unless `price_in_description` is
//! `false`.
//!
//! A tool priced `{"priced_by": "<tool>", "max_price_atoms": N}` (and optionally
//! `"min_price_atoms"`) is dynamically priced, listed with that bound: before each
//! paid call the upstream's tool `<tool>` (its companion, never listed or callable
//! itself) is called, free, with the same arguments; its answer must be a whole number
//! of atoms within the bound (a text that is a JSON integer, as `1500`), or the call is
//! refused and nothing is charged.
//!
//! This module holds what the section means; reading it is in `parse` (an entry's
//! shape), `prices` (a tool's price) and `values` (one key's value).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::server::{MATOMS_PER_ATOM, MAX_MATOMS, PriceBounds};

mod parse;
mod prices;
mod values;
pub(crate) use parse::parse_upstreams;

/// The most upstreams one server fronts: each is a process or connection to supervise.
pub const MAX_UPSTREAMS: usize = 32;

/// The longest upstream name, in bytes: it prefixes tool names, which clients limit
/// (commonly to 64 bytes).
pub const MAX_NAME_LEN: usize = 32;

/// The highest price of one call, in atoms: what the ledger's milliatom balances hold.
pub const MAX_PRICE_ATOMS: u64 = MAX_MATOMS / MATOMS_PER_ATOM;

/// One upstream MCP server and what of it is sold.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpstreamConfig {
    /// Its name: in logs, in `brmcp serve status`, and the tool prefix when there are
    /// several upstreams.
    pub name: String,
    /// How to reach it.
    pub endpoint: Endpoint,
    /// The price of each tool the file names, by the upstream's tool name.
    pub tools: BTreeMap<String, ToolPrice>,
    /// The price of the tools the file does not name; `None`: they are not exposed.
    pub default_price_atoms: Option<u64>,
    /// Whether its resources are offered (free) to the callers.
    pub resources: bool,
    /// Whether its prompts are offered (free) to the callers.
    pub prompts: bool,
    /// What its tools' names get in front of them (`""` with one upstream).
    pub prefix: String,
    /// Whether a priced tool's description ends with its price (default on): most
    /// agents show the model a tool's description, never its `_meta`.
    pub price_in_description: bool,
}

/// Where an upstream runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Endpoint {
    /// A command speaking MCP over its stdin and stdout, supervised: restarted with
    /// backoff when it exits.
    Command {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables set for it.
        env: BTreeMap<String, String>,
        /// Variables of serve's environment passed to it (besides [`BASE_ENV`]); one
        /// that is not set is an error when it starts.
        pass_env: Vec<String>,
        /// Its working directory (default: the server's).
        cwd: Option<PathBuf>,
    },
    /// A streamable-HTTP MCP endpoint, reconnected with backoff when it fails.
    Url {
        /// The endpoint.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
        /// The environment variable holding a bearer token (never the token itself,
        /// so the file can be shared).
        bearer_env: Option<String>,
    },
}

impl Endpoint {
    /// `"command"` or `"url"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Command { .. } => "command",
            Self::Url { .. } => "url",
        }
    }
}

/// What the file says of one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolPrice {
    /// Exposed at this many atoms per call (0: free).
    Atoms(u64),
    /// Exposed dynamically priced within `bounds`, each call's price the answer of the
    /// upstream's tool `priced_by` (which is hidden) to the call's arguments.
    PricedBy {
        /// The upstream's tool that answers the price.
        priced_by: String,
        /// The bound listed and enforced (its most is always given).
        bounds: PriceBounds,
    },
    /// Not exposed.
    Off,
}

impl UpstreamConfig {
    /// The fixed price of the upstream tool `name`, or `None` when it is not exposed
    /// at a fixed price (hidden, a companion, or priced by one: see
    /// [`pricing_of`](Self::pricing_of)).
    pub fn price_of(&self, name: &str) -> Option<u64> {
        match self.pricing_of(name)? {
            ToolPrice::Atoms(atoms) => Some(atoms),
            _ => None,
        }
    }

    /// How the upstream tool `name` is exposed: [`ToolPrice::Atoms`] or
    /// [`ToolPrice::PricedBy`]; `None` when it is hidden (`"off"`, not named without a
    /// default price, or the companion that prices another tool).
    pub fn pricing_of(&self, name: &str) -> Option<ToolPrice> {
        if self.is_companion(name) {
            return None;
        }
        match self.tools.get(name) {
            Some(ToolPrice::Off) => None,
            Some(price) => Some(price.clone()),
            None => self.default_price_atoms.map(ToolPrice::Atoms),
        }
    }

    /// Whether `name` prices another tool (and is therefore hidden from callers).
    pub fn is_companion(&self, name: &str) -> bool {
        self.tools
            .values()
            .any(|p| matches!(p, ToolPrice::PricedBy { priced_by, .. } if priced_by == name))
    }
}

/// What of serve's environment every command upstream gets, besides the variables
/// starting with `LC_`: enough to find programs, a home directory and the locale.
pub const BASE_ENV: [&str; 3] = ["PATH", "HOME", "LANG"];

/// A bad entry: the key path (as `upstreams[0].tools.echo`) and what is wrong.
pub(crate) type Bad = (String, String);
