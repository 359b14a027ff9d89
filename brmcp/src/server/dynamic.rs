//! Tools known only at run time: [`DynamicTools`], a set the harness serves beside
//! its fixed tools, replaced group by group (one group per source, say one upstream
//! MCP server) while the harness runs. Callers that listed the tools are told of each
//! change (`notifications/tools/list_changed`).
//!
//! A dynamic tool is a [`ToolSpec`] like any other: it is listed, priced, charged,
//! completed or refunded by exactly the same path as the fixed ones.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use rmcp::model::Tool;
use tokio::sync::watch;

use super::tools::ToolSpec;

/// A replaceable set of tools, in groups. Cheap to clone; clones share the set.
#[derive(Clone)]
pub struct DynamicTools(Arc<Inner>);

struct Inner {
    set: RwLock<Set>,
    /// Bumped on every replacement; the harness watches it to notify callers.
    version: watch::Sender<u64>,
}

#[derive(Default)]
struct Set {
    /// Groups in the order they were first set, each with its tools in order.
    groups: Vec<(String, Vec<Arc<str>>)>,
    tools: HashMap<Arc<str>, Arc<ToolSpec>>,
}

impl Default for DynamicTools {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for DynamicTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = self.read();
        f.debug_struct("DynamicTools")
            .field("groups", &set.groups)
            .finish()
    }
}

impl DynamicTools {
    /// An empty set.
    pub fn new() -> Self {
        Self(Arc::new(Inner {
            set: RwLock::new(Set::default()),
            version: watch::Sender::new(0),
        }))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Set> {
        self.0.set.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Replaces the tools of `group` (an empty list removes them) and tells the
    /// harness's callers. A tool whose name another group already has is left out,
    /// with a warning: names are unique across groups.
    pub fn replace(&self, group: &str, tools: Vec<ToolSpec>) {
        let mut set = self.0.set.write().unwrap_or_else(PoisonError::into_inner);
        let Set { groups, tools: all } = &mut *set;
        let index = match groups.iter().position(|(name, _)| name == group) {
            Some(index) => index,
            None => {
                groups.push((group.to_owned(), Vec::new()));
                groups.len() - 1
            }
        };
        for name in std::mem::take(&mut groups[index].1) {
            all.remove(&name);
        }
        let mut names = Vec::with_capacity(tools.len());
        for spec in tools {
            let name: Arc<str> = spec.name().into();
            if all.contains_key(&name) {
                tracing::warn!(%group, tool = %name, "a tool of that name exists; left out");
                continue;
            }
            all.insert(name.clone(), Arc::new(spec));
            names.push(name);
        }
        groups[index].1 = names;
        drop(set);
        self.0.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The names of `group`'s tools, in order.
    pub fn names(&self, group: &str) -> Vec<String> {
        self.read()
            .groups
            .iter()
            .find(|(name, _)| name == group)
            .map(|(_, names)| names.iter().map(ToString::to_string).collect())
            .unwrap_or_default()
    }

    /// Every tool definition, group by group.
    pub(crate) fn definitions(&self) -> Vec<(Arc<str>, Tool)> {
        let set = self.read();
        set.groups
            .iter()
            .flat_map(|(_, names)| names.iter())
            .filter_map(|name| set.tools.get(name).map(|s| (name.clone(), s.tool.clone())))
            .collect()
    }

    /// The tool named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<(Arc<str>, Arc<ToolSpec>)> {
        self.read()
            .tools
            .get_key_value(name)
            .map(|(name, spec)| (name.clone(), spec.clone()))
    }

    /// Changes to the set, for the harness's notifier.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.version.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::NoArgs;

    fn tool(name: &'static str) -> ToolSpec {
        ToolSpec::free(name, "", |_, _: NoArgs| async { Ok("ok") })
    }

    #[test]
    fn groups_replace_their_own_tools_and_names_stay_unique() {
        let set = DynamicTools::new();
        let changes = set.subscribe();
        set.replace("a", vec![tool("x"), tool("y")]);
        set.replace("b", vec![tool("y"), tool("z")]);
        assert!(changes.has_changed().unwrap());
        let names = |set: &DynamicTools| -> Vec<String> {
            set.definitions()
                .iter()
                .map(|(n, _)| n.to_string())
                .collect()
        };
        assert_eq!(names(&set), ["x", "y", "z"]);
        assert_eq!(set.names("b"), ["z"]);
        set.replace("a", vec![tool("w")]);
        assert_eq!(names(&set), ["w", "z"]);
        assert!(set.get("x").is_none());
        assert!(set.get("w").is_some());
        set.replace("a", Vec::new());
        assert_eq!(names(&set), ["z"]);
    }
}
