//! Readers of one key's JSON value (a string, a list, a map, a flag, variable names),
//! each error naming the key, so the entry's parser reads as its shape.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::Bad;

/// The longest environment variable name `pass_env` takes, in bytes.
const MAX_VAR_NAME_LEN: usize = 256;

pub(super) fn string(
    obj: &Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<Option<String>, Bad> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err((format!("{key}.{field}"), "expected a string".into())),
    }
}

pub(super) fn strings(
    obj: &Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<Vec<String>, Bad> {
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
pub(super) fn var_names(
    obj: &Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<Vec<String>, Bad> {
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

pub(super) fn string_map(
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

pub(super) fn boolean(obj: &Map<String, Value>, field: &str, key: &str) -> Result<bool, Bad> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err((format!("{key}.{field}"), "expected true or false".into())),
    }
}
