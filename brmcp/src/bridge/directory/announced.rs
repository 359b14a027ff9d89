//! The bots that announced themselves in posts (`bridge::announcements`), searched
//! beside a directory's answer and offered to `directory_add_bot` for a bot no
//! directory lists. Their words are the bots' own: quoted, bounded by the format, and
//! marked as announced, never as listed.

use brmcp_adapters::PeerId;
use brmcp_adapters::protocol::{Announcement, SEARCH_HIT_CAP, ToolPrice};
use serde_json::{Value, json};

use super::answer::listed_tools;
use crate::bridge::announcements::{Announced, Announcements};

/// The announcements a search with these arguments finds, newest first, at most
/// [`SEARCH_HIT_CAP`]: every word of `query` in the bot's name, description or a
/// tool's name or description (any case), and with `max_price_atoms` a tool priced
/// at most that (a dynamic one only when its most is). A search by tags finds none
/// (announcements have no tags).
pub(crate) fn matching<'a>(
    store: &'a Announcements,
    query: Option<&str>,
    tags: bool,
    max_price_atoms: Option<i64>,
    now_secs: u64,
) -> Vec<&'a Announced> {
    if tags {
        return Vec::new();
    }
    let words: Vec<String> = query
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_lowercase)
        .collect();
    store
        .current(now_secs)
        .into_iter()
        .filter(|a| {
            let a = &a.announcement;
            let mut text = format!("{} {}", a.name, a.description);
            for tool in &a.tools {
                text.push_str(&format!(" {} {}", tool.name, tool.description));
            }
            let text = text.to_lowercase();
            words.iter().all(|w| text.contains(w.as_str()))
        })
        .filter(|a| match max_price_atoms {
            None => true,
            Some(max) => a.announcement.tools.iter().any(|t| {
                let most = match t.price {
                    ToolPrice::Free => Some(0),
                    ToolPrice::Fixed(atoms) => Some(atoms),
                    ToolPrice::Dynamic => t.bounds.max_atoms(),
                };
                most.is_some_and(|most| i64::try_from(most).is_ok_and(|m| m <= max))
            }),
        })
        .take(SEARCH_HIT_CAP)
        .collect()
}

/// The announced tools as [`listed_tools`] lists them.
pub(crate) fn tool_list(a: &Announcement) -> String {
    listed_tools(
        a.tools
            .iter()
            .map(|t| (t.name.as_str(), t.describe_price())),
    )
}

/// The hits as text for the agent (one line each, the bots' words quoted) and as JSON.
pub(crate) fn render(hits: &[&Announced], allowed: impl Fn(&PeerId) -> bool) -> (String, Value) {
    let mut text = format!(
        "{} bot(s) announced themselves in Bison Relay posts (their own words, listed by no \
         directory; adding one needs the user's consent: directory_add_bot, or `brmcp bridge \
         bots add NAME UID`):",
        hits.len()
    );
    let mut rows = Vec::new();
    for hit in hits {
        let a = &hit.announcement;
        let added = allowed(&a.uid);
        text.push_str(&format!(
            "\n- announced bot {} {:?}: {:?}; tools: {}{}",
            a.uid,
            a.name,
            a.description,
            tool_list(a),
            if added {
                " (already one of your bots)"
            } else {
                ""
            }
        ));
        let tools: Vec<Value> = a
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "price": t.describe_price()}))
            .collect();
        rows.push(json!({
            "uid": a.uid.to_string(),
            "name": a.name,
            "description": a.description,
            "issued": a.issued_secs,
            "announced": true,
            "added": added,
            "tools": tools,
        }));
    }
    (text, Value::Array(rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use brmcp_adapters::protocol::{AnnouncedTool, PriceBounds};

    const NOW: u64 = 1_765_000_000;

    fn offer(
        store: &mut Announcements,
        n: u8,
        name: &str,
        tools: Vec<(&str, ToolPrice, PriceBounds)>,
    ) {
        let uid = PeerId::from_bytes([n; 32]);
        let body = Announcement {
            uid,
            name: name.into(),
            description: format!("{name} bot"),
            issued_secs: NOW - u64::from(n),
            tools: tools
                .into_iter()
                .map(|(name, price, bounds)| AnnouncedTool {
                    name: name.into(),
                    description: String::new(),
                    price,
                    bounds,
                })
                .collect(),
        }
        .render()
        .unwrap();
        store.offer(uid, &[n], &body, NOW);
    }

    #[test]
    fn a_search_finds_announcements_by_words_and_price() {
        let mut store = Announcements::default();
        offer(
            &mut store,
            1,
            "weather",
            vec![("forecast", ToolPrice::Fixed(1000), PriceBounds::NONE)],
        );
        offer(
            &mut store,
            2,
            "fortunes",
            vec![("fortune", ToolPrice::Fixed(10), PriceBounds::NONE)],
        );
        offer(
            &mut store,
            3,
            "reports",
            vec![(
                "report",
                ToolPrice::Dynamic,
                PriceBounds::at_most(50).unwrap(),
            )],
        );
        let names = |hits: Vec<&Announced>| -> Vec<String> {
            hits.iter().map(|a| a.announcement.name.clone()).collect()
        };
        assert_eq!(
            names(matching(&store, None, false, None, NOW)),
            ["weather", "fortunes", "reports"]
        );
        assert_eq!(
            names(matching(&store, Some("FORECAST weather"), false, None, NOW)),
            ["weather"]
        );
        assert!(matching(&store, Some("forecast fortune"), false, None, NOW).is_empty());
        assert_eq!(
            names(matching(&store, None, false, Some(100), NOW)),
            ["fortunes", "reports"]
        );
        assert_eq!(
            names(matching(&store, None, false, Some(20), NOW)),
            ["fortunes"]
        );
        assert!(matching(&store, None, true, None, NOW).is_empty());

        let hits = matching(&store, Some("weather"), false, None, NOW);
        let (text, json) = render(&hits, |_| true);
        assert!(text.contains("announced bot 0101"), "{text}");
        assert!(
            text.contains("\"forecast\" (1000 atoms per call)"),
            "{text}"
        );
        assert!(text.contains("already one of your bots"), "{text}");
        assert_eq!(json[0]["announced"], true);
        assert_eq!(json[0]["added"], true);
    }
}
