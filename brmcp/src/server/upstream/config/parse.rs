//! Reading the `upstreams` list and each entry's keys into an [`UpstreamConfig`]: the
//! entry's shape (its keys, name, endpoint, tools and flags), apart from the readers of
//! single values and prices it uses.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use super::prices::{atoms, priced_by};
use super::values::{boolean, string, string_map, strings, var_names};
use super::{
    Bad, Endpoint, MAX_NAME_LEN, MAX_PRICE_ATOMS, MAX_UPSTREAMS, ToolPrice, UpstreamConfig,
};

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
        let guide = include_str!("../../../../../docs/guide/sell-tools.md");
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
