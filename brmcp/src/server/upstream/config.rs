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

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::server::{MATOMS_PER_ATOM, MAX_MATOMS, PriceBounds};

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

/// The longest environment variable name `pass_env` takes, in bytes.
const MAX_VAR_NAME_LEN: usize = 256;

/// A bad entry: the key path (as `upstreams[0].tools.echo`) and what is wrong.
pub(crate) type Bad = (String, String);

/// Parses the `upstreams` value of the settings file.
pub(crate) fn parse_upstreams(value: &Value) -> Result<Vec<UpstreamConfig>, Bad> {
    let key = "upstreams".to_owned();
    let Value::Array(items) = value else {
        return Err((key, "expected a list".into()));
    };
    if items.len() > MAX_UPSTREAMS {
        return Err((key, format!("more than {MAX_UPSTREAMS} upstreams")));
    }
    let several = items.len() > 1;
    let mut upstreams: Vec<UpstreamConfig> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let key = format!("upstreams[{i}]");
        let upstream = parse_one(&key, item, several)?;
        if upstreams.iter().any(|u| u.name == upstream.name) {
            return Err((
                format!("{key}.name"),
                "another upstream has this name".into(),
            ));
        }
        upstreams.push(upstream);
    }
    Ok(upstreams)
}

const KEYS: [&str; 14] = [
    "name",
    "command",
    "args",
    "env",
    "pass_env",
    "cwd",
    "url",
    "headers",
    "bearer_env",
    "tools",
    "default_price_atoms",
    "resources",
    "prompts",
    "price_in_description",
];

fn parse_one(key: &str, value: &Value, several: bool) -> Result<UpstreamConfig, Bad> {
    let Value::Object(obj) = value else {
        return Err((key.to_owned(), "expected an object".into()));
    };
    if let Some(unknown) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err((format!("{key}.{unknown}"), "unknown key".into()));
    }
    let at = |field: &str| format!("{key}.{field}");
    let name = string(obj, "name", key)?.ok_or_else(|| (at("name"), "missing".to_owned()))?;
    if name.is_empty()
        || name.len() > MAX_NAME_LEN
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err((
            at("name"),
            format!("{name:?}: use 1 to {MAX_NAME_LEN} lowercase letters, digits or '-'"),
        ));
    }
    let command = string(obj, "command", key)?;
    let url = string(obj, "url", key)?;
    let command_only = ["args", "env", "pass_env", "cwd"];
    let url_only = ["headers", "bearer_env"];
    let endpoint = match (command, url) {
        (Some(_), Some(_)) => return Err((at("url"), "give either command or url".into())),
        (None, None) => return Err((at("command"), "missing (or url)".into())),
        (Some(command), None) => {
            if let Some(k) = url_only.iter().find(|k| obj.contains_key(**k)) {
                return Err((at(k), "only for a url upstream".into()));
            }
            if command.is_empty() {
                return Err((at("command"), "empty".into()));
            }
            Endpoint::Command {
                command,
                args: strings(obj, "args", key)?,
                env: string_map(obj, "env", key)?,
                pass_env: var_names(obj, "pass_env", key)?,
                cwd: string(obj, "cwd", key)?.map(PathBuf::from),
            }
        }
        (None, Some(url)) => {
            if let Some(k) = command_only.iter().find(|k| obj.contains_key(**k)) {
                return Err((at(k), "only for a command upstream".into()));
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err((at("url"), format!("{url:?} is not an http(s) URL")));
            }
            Endpoint::Url {
                url,
                headers: string_map(obj, "headers", key)?,
                bearer_env: string(obj, "bearer_env", key)?,
            }
        }
    };
    let mut tools = BTreeMap::new();
    match obj.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (tool, price) in map {
                let at = format!("{key}.tools.{tool}");
                let price = match price {
                    Value::String(s) if s == "off" => ToolPrice::Off,
                    Value::Object(entry) => priced_by(&at, tool, entry)?,
                    other => ToolPrice::Atoms(atoms(other).ok_or_else(|| {
                        (
                            at.clone(),
                            format!(
                                "expected a price in atoms (0 to {MAX_PRICE_ATOMS}), \"off\" or {{\"priced_by\": ...}}"
                            ),
                        )
                    })?),
                };
                tools.insert(tool.clone(), price);
            }
            // A companion is hidden: the file may not also sell it.
            for (tool, price) in &tools {
                if let ToolPrice::PricedBy { priced_by, .. } = price
                    && matches!(
                        tools.get(priced_by),
                        Some(ToolPrice::Atoms(_) | ToolPrice::PricedBy { .. })
                    )
                {
                    return Err((
                        format!("{key}.tools.{priced_by}"),
                        format!("prices {tool:?}, so it is hidden: give it no price (or \"off\")"),
                    ));
                }
            }
        }
        Some(_) => return Err((at("tools"), "expected an object of tool prices".into())),
    }
    let default_price_atoms = match obj.get("default_price_atoms") {
        None | Some(Value::Null) => None,
        Some(v) => Some(atoms(v).ok_or_else(|| {
            (
                at("default_price_atoms"),
                format!("expected a price in atoms (0 to {MAX_PRICE_ATOMS})"),
            )
        })?),
    };
    let prefix = if several {
        format!("{name}_")
    } else {
        String::new()
    };
    Ok(UpstreamConfig {
        endpoint,
        tools,
        default_price_atoms,
        resources: boolean(obj, "resources", key)?,
        prompts: boolean(obj, "prompts", key)?,
        prefix,
        price_in_description: match obj.get("price_in_description") {
            None | Some(Value::Null) => true,
            Some(_) => boolean(obj, "price_in_description", key)?,
        },
        name,
    })
}

/// The keys of a tool priced by its companion.
const PRICED_BY_KEYS: [&str; 3] = ["priced_by", "max_price_atoms", "min_price_atoms"];

/// `{"priced_by": "<tool>", "max_price_atoms": N, "min_price_atoms": M}` at `at`.
fn priced_by(at: &str, tool: &str, entry: &Map<String, Value>) -> Result<ToolPrice, Bad> {
    if let Some(unknown) = entry.keys().find(|k| !PRICED_BY_KEYS.contains(&k.as_str())) {
        return Err((format!("{at}.{unknown}"), "unknown key".into()));
    }
    let priced_by = match entry.get("priced_by") {
        Some(Value::String(name)) if !name.is_empty() && name != tool => name.clone(),
        Some(Value::String(_)) => {
            return Err((
                format!("{at}.priced_by"),
                "expected the name of another tool of the upstream".into(),
            ));
        }
        Some(_) => return Err((format!("{at}.priced_by"), "expected a string".into())),
        None => return Err((format!("{at}.priced_by"), "missing".into())),
    };
    let bound = |field: &str| match entry.get(field) {
        None => Ok(None),
        Some(v) => atoms(v).map(Some).ok_or_else(|| {
            (
                format!("{at}.{field}"),
                format!("expected a price in atoms (0 to {MAX_PRICE_ATOMS})"),
            )
        }),
    };
    let max = bound("max_price_atoms")?.ok_or_else(|| {
        (
            format!("{at}.max_price_atoms"),
            "missing: the most one call may be charged".to_owned(),
        )
    })?;
    let min = bound("min_price_atoms")?.unwrap_or(0);
    let bounds = PriceBounds::new(min, Some(max)).map_err(|_| {
        (
            format!("{at}.min_price_atoms"),
            "above max_price_atoms".to_owned(),
        )
    })?;
    Ok(ToolPrice::PricedBy { priced_by, bounds })
}

fn atoms(value: &Value) -> Option<u64> {
    value.as_u64().filter(|atoms| *atoms <= MAX_PRICE_ATOMS)
}

fn string(obj: &Map<String, Value>, field: &str, key: &str) -> Result<Option<String>, Bad> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err((format!("{key}.{field}"), "expected a string".into())),
    }
}

fn strings(obj: &Map<String, Value>, field: &str, key: &str) -> Result<Vec<String>, Bad> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                _ => Err((format!("{key}.{field}[{i}]"), "expected a string".into())),
            })
            .collect(),
        Some(_) => Err((
            format!("{key}.{field}"),
            "expected a list of strings".into(),
        )),
    }
}

/// A list of environment variable names: non-empty, without `=` or NUL.
fn var_names(obj: &Map<String, Value>, field: &str, key: &str) -> Result<Vec<String>, Bad> {
    let names = strings(obj, field, key)?;
    if let Some((i, name)) = names
        .iter()
        .enumerate()
        .find(|(_, n)| n.is_empty() || n.len() > MAX_VAR_NAME_LEN || n.contains(['=', '\0']))
    {
        return Err((
            format!("{key}.{field}[{i}]"),
            format!("{name:?} is not an environment variable name"),
        ));
    }
    Ok(names)
}

fn string_map(
    obj: &Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<BTreeMap<String, String>, Bad> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err((format!("{key}.{field}.{k}"), "expected a string".into())),
            })
            .collect(),
        Some(_) => Err((
            format!("{key}.{field}"),
            "expected an object of strings".into(),
        )),
    }
}

fn boolean(obj: &Map<String, Value>, field: &str, key: &str) -> Result<bool, Bad> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err((format!("{key}.{field}"), "expected true or false".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_price_is_in_descriptions_unless_turned_off() {
        let one = |extra: Value| {
            let mut entry = json!({"name": "a", "command": "x"});
            if let (Value::Object(entry), Value::Object(extra)) = (&mut entry, extra) {
                entry.extend(extra);
            }
            parse_one("upstreams[0]", &entry, false)
        };
        assert!(one(json!({})).unwrap().price_in_description);
        assert!(
            !one(json!({"price_in_description": false}))
                .unwrap()
                .price_in_description
        );
        assert_eq!(
            one(json!({"price_in_description": "no"})).unwrap_err(),
            (
                "upstreams[0].price_in_description".to_owned(),
                "expected true or false".to_owned()
            )
        );
    }

    fn bad(value: Value) -> String {
        let (key, reason) = parse_upstreams(&value).unwrap_err();
        format!("{key}: {reason}")
    }

    #[test]
    fn a_command_and_a_url_upstream_with_prices() {
        let parsed = parse_upstreams(&json!([
            {"name": "everything", "command": "npx", "args": ["x"], "env": {"A": "1"},
             "pass_env": ["B"], "cwd": "/tmp", "tools": {"echo": 0, "get-sum": 500, "get-env": "off"},
             "resources": true},
            {"name": "search", "url": "https://s.example/mcp", "headers": {"X": "y"},
             "bearer_env": "TOKEN", "default_price_atoms": 7}
        ]))
        .unwrap();
        let (a, b) = (&parsed[0], &parsed[1]);
        assert_eq!(a.prefix, "everything_");
        assert_eq!(b.prefix, "search_");
        assert_eq!(a.price_of("echo"), Some(0));
        assert_eq!(a.price_of("get-sum"), Some(500));
        assert_eq!(a.price_of("get-env"), None);
        assert_eq!(a.price_of("unnamed"), None, "not named, no default: hidden");
        assert_eq!(b.price_of("anything"), Some(7));
        assert!(a.resources && !a.prompts);
        assert_eq!(a.endpoint.kind(), "command");
        assert!(matches!(
            &a.endpoint,
            Endpoint::Command { env, pass_env, .. } if env["A"] == "1" && pass_env == &["B"]
        ));
        assert!(matches!(
            &b.endpoint,
            Endpoint::Url { bearer_env: Some(env), .. } if env == "TOKEN"
        ));
        let one = parse_upstreams(&json!([{"name": "e", "command": "x"}])).unwrap();
        assert_eq!(
            one[0].prefix, "",
            "a single upstream's tools keep their names"
        );
    }

    /// The README's example is a file this parser takes as documented.
    #[test]
    fn the_guide_example_parses() {
        let guide = include_str!("../../../../docs/guide/sell-tools.md");
        let section = &guide[guide.find("## Sell any MCP server").unwrap()..];
        let start = section.find("```json\n").unwrap() + "```json\n".len();
        let text = &section[start..start + section[start..].find("```").unwrap()];
        let text = text.replace("<caller uid>", &"ab".repeat(32));
        let config = crate::server::ServeConfig::parse(&text, "sell-tools.md".as_ref()).unwrap();
        let everything = &config.upstreams[0];
        assert_eq!(everything.price_of("get-sum"), Some(500));
        assert_eq!(everything.price_of("echo"), Some(0));
        assert_eq!(everything.price_of("get-env"), None);
        assert!(everything.prompts && everything.resources);
    }

    #[test]
    fn a_tool_priced_by_its_companion_has_a_bound_and_hides_the_companion() {
        let parsed = parse_upstreams(&json!([{"name": "s", "command": "x",
            "tools": {"search": {"priced_by": "search-price", "max_price_atoms": 5000, "min_price_atoms": 10}},
            "default_price_atoms": 7}]))
        .unwrap();
        let s = &parsed[0];
        assert_eq!(
            s.pricing_of("search"),
            Some(ToolPrice::PricedBy {
                priced_by: "search-price".into(),
                bounds: PriceBounds::new(10, Some(5000)).unwrap()
            })
        );
        assert_eq!(s.price_of("search"), None, "no fixed price");
        assert_eq!(
            s.pricing_of("search-price"),
            None,
            "the companion is hidden, even with a default price"
        );
        assert_eq!(s.price_of("other"), Some(7));
        let bad = |tools: Value| {
            let (key, reason) =
                parse_upstreams(&json!([{"name": "s", "command": "x", "tools": tools}]))
                    .unwrap_err();
            format!("{key}: {reason}")
        };
        let cases = [
            (
                json!({"t": {"priced_by": "p"}}),
                "upstreams[0].tools.t.max_price_atoms: missing: the most one call may be charged",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": -1}}),
                "upstreams[0].tools.t.max_price_atoms: expected a price in atoms (0 to 9223372036854775)",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": 1.5}}),
                "upstreams[0].tools.t.max_price_atoms: expected a price in atoms (0 to 9223372036854775)",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": "10"}}),
                "upstreams[0].tools.t.max_price_atoms: expected a price in atoms (0 to 9223372036854775)",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": 10, "min_price_atoms": 11}}),
                "upstreams[0].tools.t.min_price_atoms: above max_price_atoms",
            ),
            (
                json!({"t": {"max_price_atoms": 10}}),
                "upstreams[0].tools.t.priced_by: missing",
            ),
            (
                json!({"t": {"priced_by": "t", "max_price_atoms": 10}}),
                "upstreams[0].tools.t.priced_by: expected the name of another tool of the upstream",
            ),
            (
                json!({"t": {"priced_by": 5, "max_price_atoms": 10}}),
                "upstreams[0].tools.t.priced_by: expected a string",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": 10, "max": 1}}),
                "upstreams[0].tools.t.max: unknown key",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": 10}, "p": 5}),
                "upstreams[0].tools.p: prices \"t\", so it is hidden: give it no price (or \"off\")",
            ),
        ];
        for (tools, want) in cases {
            assert_eq!(bad(tools.clone()), want, "{tools}");
        }
    }

    #[test]
    fn mistakes_name_their_key() {
        let cases = [
            (json!({}), "upstreams: expected a list"),
            (json!([{"command": "x"}]), "upstreams[0].name: missing"),
            (
                json!([{"name": "Big", "command": "x"}]),
                "upstreams[0].name: \"Big\": use 1 to 32 lowercase letters, digits or '-'",
            ),
            (
                json!([{"name": "a"}]),
                "upstreams[0].command: missing (or url)",
            ),
            (
                json!([{"name": "a", "command": "x", "url": "http://h"}]),
                "upstreams[0].url: give either command or url",
            ),
            (
                json!([{"name": "a", "command": "x", "headers": {}}]),
                "upstreams[0].headers: only for a url upstream",
            ),
            (
                json!([{"name": "a", "url": "http://h", "args": []}]),
                "upstreams[0].args: only for a command upstream",
            ),
            (
                json!([{"name": "a", "url": "ftp://h"}]),
                "upstreams[0].url: \"ftp://h\" is not an http(s) URL",
            ),
            (
                json!([{"name": "a", "command": "x", "argz": []}]),
                "upstreams[0].argz: unknown key",
            ),
            (
                json!([{"name": "a", "command": "x", "args": [1]}]),
                "upstreams[0].args[0]: expected a string",
            ),
            (
                json!([{"name": "a", "command": "x", "env": {"K": 1}}]),
                "upstreams[0].env.K: expected a string",
            ),
            (
                json!([{"name": "a", "command": "x", "pass_env": ["OK", "A=B"]}]),
                "upstreams[0].pass_env[1]: \"A=B\" is not an environment variable name",
            ),
            (
                json!([{"name": "a", "command": "x", "pass_env": "HOME"}]),
                "upstreams[0].pass_env: expected a list of strings",
            ),
            (
                json!([{"name": "a", "url": "http://h", "pass_env": []}]),
                "upstreams[0].pass_env: only for a command upstream",
            ),
            (
                json!([{"name": "a", "command": "x", "tools": {"t": -1}}]),
                "upstreams[0].tools.t: expected a price in atoms (0 to 9223372036854775), \"off\" or {\"priced_by\": ...}",
            ),
            (
                json!([{"name": "a", "command": "x", "tools": {"t": "free"}}]),
                "upstreams[0].tools.t: expected a price in atoms (0 to 9223372036854775), \"off\" or {\"priced_by\": ...}",
            ),
            (
                json!([{"name": "a", "command": "x", "default_price_atoms": 1.5}]),
                "upstreams[0].default_price_atoms: expected a price in atoms (0 to 9223372036854775)",
            ),
            (
                json!([{"name": "a", "command": "x", "prompts": "yes"}]),
                "upstreams[0].prompts: expected true or false",
            ),
            (
                json!([{"name": "a", "command": "x"}, {"name": "a", "command": "y"}]),
                "upstreams[1].name: another upstream has this name",
            ),
        ];
        for (value, want) in cases {
            assert_eq!(bad(value.clone()), want, "{value}");
        }
    }
}
