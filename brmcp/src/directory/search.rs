//! `search`: a linear scan of the live listings' catalogs.

use brmcp_adapters::protocol::{DYNAMIC_PRICING, PRICE_META, PRICING_META, PriceBounds};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::store::Stored;
use super::types::normalize_tags;
use crate::server::schemars::JsonSchema;

pub use brmcp_adapters::protocol::SEARCH_HIT_CAP;

/// The input of `search`; nothing is required.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct SearchIn {
    /// A substring of a tool's name or description (case-insensitive).
    #[serde(default)]
    pub query: Option<String>,
    /// Tags the provider must all carry.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// The highest price to show: fixed prices up to it, and dynamic ones listed with
    /// a bound at most it (unbounded dynamic tools are left out). ≤ 0: no ceiling.
    #[serde(default, rename = "maxPriceAtoms")]
    pub max_price_atoms: Option<i64>,
}

/// One matching tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// The provider.
    #[serde(rename = "providerUid")]
    pub provider_uid: String,
    /// The tool's name.
    pub tool: String,
    /// The tool's description.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Its fixed price (left out when free).
    #[serde(rename = "priceAtoms", skip_serializing_if = "super::types::is_zero")]
    pub price_atoms: i64,
    /// `"dynamic"` for a dynamically priced tool.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pricing: String,
    /// A dynamically priced tool's listed most per call, if it lists one.
    #[serde(rename = "priceMaxAtoms", skip_serializing_if = "Option::is_none")]
    pub price_max_atoms: Option<u64>,
    /// A dynamically priced tool's listed least per call (left out when 0).
    #[serde(rename = "priceMinAtoms", skip_serializing_if = "is_zero_atoms")]
    pub price_min_atoms: u64,
    /// The provider's tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The listing's stamp.
    #[serde(rename = "catalogCheckedAt")]
    pub catalog_checked_at: i64,
    /// The listing's stamp.
    #[serde(rename = "lastVerifiedExecution")]
    pub last_verified_execution: i64,
}

fn is_zero_atoms(n: &u64) -> bool {
    *n == 0
}

/// The output of `search`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchOut {
    /// At most [`SEARCH_HIT_CAP`] hits.
    pub hits: Vec<SearchHit>,
    /// Every match.
    pub total: i64,
}

#[derive(Deserialize)]
struct CatalogTool {
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, rename = "_meta")]
    meta: Option<Map<String, Value>>,
}

/// Searches `entries` (sorted by uid).
pub fn search(entries: &[(String, Stored)], input: &SearchIn) -> SearchOut {
    let q = input.query.as_deref().unwrap_or("").trim().to_lowercase();
    let want = normalize_tags(input.tags.as_deref().unwrap_or_default());
    let ceiling = input.max_price_atoms.unwrap_or(0);
    let mut out = SearchOut {
        hits: Vec::new(),
        total: 0,
    };
    for (uid, stored) in entries {
        let Some(live) = &stored.entry.live else {
            continue;
        };
        if !want.iter().all(|t| live.tags.contains(t)) {
            continue;
        }
        let Ok(tools) = serde_json::from_value::<Vec<CatalogTool>>(live.catalog.clone()) else {
            continue;
        };
        for tool in tools {
            let description = tool.description.unwrap_or_default();
            if !q.is_empty()
                && !tool.name.to_lowercase().contains(&q)
                && !description.to_lowercase().contains(&q)
            {
                continue;
            }
            let meta = tool.meta.unwrap_or_default();
            let fixed = meta.get(PRICE_META).and_then(Value::as_f64);
            let dynamic = fixed.is_none()
                && meta.get(PRICING_META).and_then(Value::as_str) == Some(DYNAMIC_PRICING);
            // Truncated toward zero, as Go's int64(float64) does.
            #[allow(clippy::cast_possible_truncation)]
            let price = fixed.map_or(0, |p| p as i64);
            // A malformed bound is shown as none (the bridge refuses to pay the tool).
            let bounds = if dynamic {
                PriceBounds::from_meta(Some(&meta)).unwrap_or_default()
            } else {
                PriceBounds::NONE
            };
            let most = bounds
                .max_atoms()
                .map(|m| i64::try_from(m).unwrap_or(i64::MAX));
            let over = if dynamic {
                most.is_none_or(|most| most > ceiling)
            } else {
                price > ceiling
            };
            if ceiling > 0 && over {
                continue;
            }
            out.total += 1;
            if out.hits.len() < SEARCH_HIT_CAP {
                out.hits.push(SearchHit {
                    provider_uid: uid.clone(),
                    tool: tool.name,
                    description,
                    price_atoms: price,
                    pricing: if dynamic {
                        DYNAMIC_PRICING.to_owned()
                    } else {
                        String::new()
                    },
                    price_max_atoms: bounds.max_atoms(),
                    price_min_atoms: bounds.min_atoms(),
                    tags: live.tags.clone(),
                    catalog_checked_at: live.catalog_checked_at,
                    last_verified_execution: live.last_verified_execution,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::types::{Listing, TestSpec};

    fn listed(tags: &[&str], catalog: Value) -> Stored {
        let mut s = Stored::default();
        s.entry.live = Some(Listing {
            description: "provider".into(),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            test: TestSpec {
                tool: "t".into(),
                args: None,
                max_atoms: 1,
            },
            catalog,
            catalog_checked_at: 1,
            last_verified_execution: 2,
            test_latency_ms: 3,
            approved_at: 2,
            renewed_at: 0,
            expires_at: 9,
        });
        s
    }

    fn tools(n: usize) -> Value {
        let mut v: Vec<Value> = (0..n)
            .map(|i| serde_json::json!({"name": format!("tool{i}"), "_meta": {"brmcp/priceAtoms": i}}))
            .collect();
        v.push(serde_json::json!({"name": "dyn", "description": "Priced LIVE", "_meta": {"brmcp/pricing": "dynamic"}}));
        v.push(serde_json::json!({"name": "bare"}));
        Value::Array(v)
    }

    #[test]
    fn hits_are_capped_and_total_counts_all() {
        let entries = vec![("a".repeat(64), listed(&["x"], tools(60)))];
        let out = search(&entries, &SearchIn::default());
        assert_eq!(out.hits.len(), SEARCH_HIT_CAP);
        assert_eq!(out.total, 62);
    }

    #[test]
    fn prices_tags_and_queries_filter() {
        let entries = vec![
            ("a".repeat(64), listed(&["x", "y"], tools(3))),
            ("b".repeat(64), listed(&["y"], tools(3))),
        ];
        let only = |input: SearchIn| search(&entries, &input);
        let out = only(SearchIn {
            tags: Some(vec![" X ".into()]),
            ..SearchIn::default()
        });
        assert_eq!(out.total, 5);
        let out = only(SearchIn {
            max_price_atoms: Some(1),
            ..SearchIn::default()
        });
        let names: Vec<_> = out.hits.iter().map(|h| h.tool.as_str()).collect();
        assert_eq!(names, ["tool0", "tool1", "bare", "tool0", "tool1", "bare"]);
        let out = only(SearchIn {
            query: Some(" live ".into()),
            ..SearchIn::default()
        });
        assert_eq!(out.total, 2);
        assert_eq!(out.hits[0].pricing, "dynamic");
        let json = serde_json::to_string(&out.hits[0]).unwrap();
        assert!(
            json.starts_with(r#"{"providerUid":"#) && !json.contains("priceAtoms"),
            "{json}"
        );
    }

    #[test]
    fn a_bounded_dynamic_tool_shows_its_bound_and_fits_a_ceiling_by_it() {
        let catalog = serde_json::json!([
            {"name": "capped", "_meta": {"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": 5, "brmcp/priceMaxAtoms": 400}},
            {"name": "open", "_meta": {"brmcp/pricing": "dynamic"}},
            {"name": "odd", "_meta": {"brmcp/pricing": "dynamic", "brmcp/priceMaxAtoms": "400"}},
        ]);
        let entries = vec![("a".repeat(64), listed(&["x"], catalog))];
        let all = search(&entries, &SearchIn::default());
        assert_eq!(all.total, 3);
        let json = serde_json::to_value(&all.hits[0]).unwrap();
        assert_eq!(json["priceMaxAtoms"], 400);
        assert_eq!(json["priceMinAtoms"], 5);
        assert_eq!(
            all.hits[2].price_max_atoms, None,
            "a malformed bound shows none"
        );
        let names = |ceiling| {
            search(
                &entries,
                &SearchIn {
                    max_price_atoms: Some(ceiling),
                    ..SearchIn::default()
                },
            )
            .hits
            .into_iter()
            .map(|h| h.tool)
            .collect::<Vec<_>>()
        };
        assert_eq!(names(400), ["capped"]);
        assert!(names(399).is_empty());
    }
}
