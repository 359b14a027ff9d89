//! The announcement format's rules, each against a post that breaks it.

use super::*;
use serde_json::json;

const NOW: u64 = 1_765_000_000;

fn uid(byte: u8) -> PeerId {
    PeerId::from([byte; 32])
}

fn sample() -> Announcement {
    Announcement {
        uid: uid(7),
        name: "weather".into(),
        description: "forecasts for any city".into(),
        issued_secs: NOW,
        tools: vec![
            AnnouncedTool {
                name: "echo".into(),
                description: String::new(),
                price: ToolPrice::Free,
                bounds: PriceBounds::NONE,
            },
            AnnouncedTool {
                name: "forecast".into(),
                description: "tomorrow's forecast".into(),
                price: ToolPrice::Fixed(1000),
                bounds: PriceBounds::NONE,
            },
            AnnouncedTool {
                name: "report".into(),
                description: "a long report".into(),
                price: ToolPrice::Dynamic,
                bounds: PriceBounds::new(10, Some(500)).unwrap(),
            },
        ],
    }
}

/// A post whose block is `block` (as JSON), after some text.
fn post(block: &Value) -> String {
    format!("hello\n\n{MARKER}\n{block}\n```\n")
}

fn block() -> Value {
    json!({
        "version": 1,
        "uid": uid(7).to_string(),
        "name": "weather",
        "issued": NOW,
        "tools": [{"name": "forecast", "brmcp/priceAtoms": 1000}],
    })
}

#[test]
fn a_rendered_announcement_reads_back_as_itself_and_tells_people_its_prices() {
    let a = sample();
    let text = a.render().unwrap();
    assert_eq!(Announcement::parse(&text), Ok(Some(a.clone())));
    assert_eq!(Announcement::accept(&text, &uid(7), NOW), Ok(Some(a)));
    assert!(text.starts_with("brmcp bot \"weather\": forecasts for any city\n"));
    assert!(text.contains("- echo: free\n"));
    assert!(text.contains("- forecast: 1000 atoms per call. tomorrow's forecast\n"));
    assert!(text.contains("- report: priced per call, 10 to 500 atoms. a long report\n"));
    assert!(text.contains(&format!("bots add weather {}", uid(7))));
}

#[test]
fn a_post_without_a_marker_is_no_announcement() {
    for body in [
        "",
        "just a post",
        "```\n{}\n```",
        "brmcp-announcement v1\n{}",
    ] {
        assert_eq!(Announcement::parse(body), Ok(None), "{body:?}");
    }
}

#[test]
fn a_hand_written_block_with_crlf_lines_and_pretty_json_is_read() {
    let pretty = serde_json::to_string_pretty(&block()).unwrap();
    let body = format!(
        "hi\r\n{MARKER}\r\n{}\r\n```\r\ntrailing text",
        pretty.replace('\n', "\r\n")
    );
    let a = Announcement::parse(&body).unwrap().unwrap();
    assert_eq!(a.tools[0].price, ToolPrice::Fixed(1000));
    assert_eq!(a.description, "");
}

#[test]
fn malformed_blocks_are_refused() {
    let cases = [
        format!("{MARKER}\n{}\n", block()), // no closing fence
        format!("{MARKER}\nnot json\n```\n"),
        format!("{MARKER}\n[1]\n```\n"),
        format!("{}\n{MARKER}\n{}\n```\n", post(&block()), block()), // two blocks
    ];
    for body in cases {
        assert_eq!(
            Announcement::parse(&body),
            Err(AnnouncementError::Malformed),
            "{body}"
        );
    }
    let mut missing = block();
    missing.as_object_mut().unwrap().remove("issued");
    assert_eq!(
        Announcement::parse(&post(&missing)),
        Err(AnnouncementError::Malformed)
    );
    let mut typed = block();
    typed["issued"] = json!("yesterday");
    assert_eq!(
        Announcement::parse(&post(&typed)),
        Err(AnnouncementError::Malformed)
    );
}

#[test]
fn unknown_keys_are_refused_at_every_level() {
    let mut top = block();
    top["contact"] = json!("x");
    assert_eq!(
        Announcement::parse(&post(&top)),
        Err(AnnouncementError::Malformed)
    );
    let mut tool = block();
    tool["tools"][0]["brmcp/priceAtom"] = json!(1);
    assert_eq!(
        Announcement::parse(&post(&tool)),
        Err(AnnouncementError::Malformed)
    );
}

#[test]
fn another_version_is_refused_as_such() {
    let body = post(&block()).replace(MARKER, "```brmcp-announcement v2");
    assert_eq!(
        Announcement::parse(&body),
        Err(AnnouncementError::WrongVersion)
    );
    let mut v2 = block();
    v2["version"] = json!(2);
    assert_eq!(
        Announcement::parse(&post(&v2)),
        Err(AnnouncementError::WrongVersion)
    );
}

#[test]
fn oversized_posts_and_fields_are_refused() {
    let mut body = post(&block());
    assert!(Announcement::parse(&body).unwrap().is_some());
    body.push_str(&"x".repeat(MAX_ANNOUNCEMENT_BYTES - body.len() + 1));
    assert_eq!(Announcement::parse(&body), Err(AnnouncementError::TooLarge));

    let mut a = sample();
    a.name = "n".repeat(MAX_ANNOUNCED_NAME_LEN + 1);
    assert_eq!(a.render(), Err(AnnouncementError::BadName));
    let mut a = sample();
    a.description = "d".repeat(MAX_ANNOUNCED_DESCRIPTION_LEN + 1);
    assert_eq!(a.render(), Err(AnnouncementError::BadDescription));
    let mut a = sample();
    a.tools[0].description = "d".repeat(MAX_ANNOUNCED_TOOL_DESCRIPTION_LEN + 1);
    assert_eq!(a.render(), Err(AnnouncementError::BadDescription));
    let mut a = sample();
    a.tools[0].name = "t".repeat(MAX_ANNOUNCED_TOOL_NAME_LEN + 1);
    assert_eq!(a.render(), Err(AnnouncementError::BadToolName));
    let mut a = sample();
    a.tools = (0..=MAX_ANNOUNCED_TOOLS)
        .map(|i| AnnouncedTool {
            name: format!("t{i}"),
            description: String::new(),
            price: ToolPrice::Free,
            bounds: PriceBounds::NONE,
        })
        .collect();
    assert_eq!(a.render(), Err(AnnouncementError::ToolCount));
    a.tools.clear();
    assert_eq!(a.render(), Err(AnnouncementError::ToolCount));
}

#[test]
fn fields_are_read_strictly() {
    let with = |f: &dyn Fn(&mut Value)| {
        let mut b = block();
        f(&mut b);
        Announcement::parse(&post(&b))
    };
    assert_eq!(
        with(&|b| b["uid"] = json!(uid(0xab).to_string().to_uppercase())),
        Err(AnnouncementError::BadUid)
    );
    assert_eq!(
        with(&|b| b["uid"] = json!("abc")),
        Err(AnnouncementError::BadUid)
    );
    assert_eq!(
        with(&|b| b["name"] = json!("")),
        Err(AnnouncementError::BadName)
    );
    assert_eq!(
        with(&|b| b["name"] = json!("two\nlines")),
        Err(AnnouncementError::BadName)
    );
    assert_eq!(
        with(&|b| b["description"] = json!("bell\u{7}")),
        Err(AnnouncementError::BadDescription)
    );
    assert_eq!(
        with(&|b| b["tools"][0]["name"] = json!("has space")),
        Err(AnnouncementError::BadToolName)
    );
    assert_eq!(
        with(&|b| b["tools"] =
            json!([{"name": "a", "brmcp/priceAtoms": 1}, {"name": "a", "brmcp/priceAtoms": 2}])),
        Err(AnnouncementError::BadToolName)
    );
    assert_eq!(
        with(&|b| b["tools"] = json!([{"name": "a"}])),
        Err(AnnouncementError::Unpriced)
    );
    assert_eq!(
        with(&|b| b["tools"][0]["brmcp/priceAtoms"] = json!(-1)),
        Err(AnnouncementError::BadPrice(PriceMetaError::BadPrice))
    );
    assert_eq!(
        with(&|b| b["tools"][0]["brmcp/priceMaxAtoms"] = json!(5)),
        Err(AnnouncementError::BadPrice(PriceMetaError::BoundNotDynamic))
    );
    assert_eq!(
        with(
            &|b| b["tools"] = json!([{"name": "a", "brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": 9, "brmcp/priceMaxAtoms": 5}])
        ),
        Err(AnnouncementError::BadPrice(PriceMetaError::MinAboveMax))
    );
    assert_eq!(
        with(&|b| b["tools"] = json!([{"name": "a", "brmcp/pricing": "auction"}])),
        Err(AnnouncementError::BadPrice(PriceMetaError::BadPricing))
    );
}

#[test]
fn stale_future_and_other_authors_announcements_are_refused() {
    let text = sample().render().unwrap();
    assert_eq!(
        Announcement::accept(&text, &uid(8), NOW),
        Err(AnnouncementError::NotItsAuthor)
    );
    let fresh_until = NOW + MAX_ANNOUNCEMENT_AGE_SECS;
    assert!(Announcement::accept(&text, &uid(7), fresh_until).is_ok());
    assert_eq!(
        Announcement::accept(&text, &uid(7), fresh_until + 1),
        Err(AnnouncementError::Stale)
    );
    let earliest = NOW - MAX_ANNOUNCEMENT_SKEW_SECS;
    assert!(Announcement::accept(&text, &uid(7), earliest).is_ok());
    assert_eq!(
        Announcement::accept(&text, &uid(7), earliest - 1),
        Err(AnnouncementError::FromTheFuture)
    );
    assert_eq!(Announcement::accept("plain", &uid(8), NOW), Ok(None));
}

#[test]
fn the_example_of_wire_md_is_read() {
    let wire = include_str!("../../../../WIRE.md");
    let section = wire.split("## 13. Announcements in posts").nth(1).unwrap();
    let body = section.replace("<the bot's 64 lowercase hex user id>", &uid(7).to_string());
    let a = Announcement::accept(&body, &uid(7), NOW).unwrap().unwrap();
    assert_eq!(a.tools.len(), 2);
    assert_eq!(a.tools[1].bounds.max_atoms(), Some(500));
}
