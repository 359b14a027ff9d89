//! The `announcements` target: a post's body, any bytes, read as a bot's announcement.

use crate::PeerId;
use crate::protocol::{
    Announcement, AnnouncementError, MAX_ANNOUNCED_DESCRIPTION_LEN, MAX_ANNOUNCED_NAME_LEN,
    MAX_ANNOUNCED_TOOL_DESCRIPTION_LEN, MAX_ANNOUNCED_TOOL_NAME_LEN, MAX_ANNOUNCED_TOOLS,
    MAX_ANNOUNCEMENT_BYTES,
};

/// Reads `data` (lossily as UTF-8, as a post's text) as an announcement and checks:
/// a post over [`MAX_ANNOUNCEMENT_BYTES`] is refused; an accepted announcement is
/// within every bound, is accepted only from its own uid, and written back reads as
/// itself.
pub fn announcements(data: &[u8]) {
    let body = String::from_utf8_lossy(data);
    let parsed = Announcement::parse(&body);
    if body.len() > MAX_ANNOUNCEMENT_BYTES {
        assert_eq!(parsed, Err(AnnouncementError::TooLarge));
        return;
    }
    let Ok(Some(a)) = parsed else { return };
    assert!(!a.name.is_empty() && a.name.len() <= MAX_ANNOUNCED_NAME_LEN);
    assert!(a.description.len() <= MAX_ANNOUNCED_DESCRIPTION_LEN);
    assert!(!a.tools.is_empty() && a.tools.len() <= MAX_ANNOUNCED_TOOLS);
    for tool in &a.tools {
        assert!(!tool.name.is_empty() && tool.name.len() <= MAX_ANNOUNCED_TOOL_NAME_LEN);
        assert!(tool.description.len() <= MAX_ANNOUNCED_TOOL_DESCRIPTION_LEN);
        for text in [&a.name, &a.description, &tool.description] {
            assert!(!text.chars().any(char::is_control), "{text:?}");
        }
    }
    let mut other = *a.uid.as_bytes();
    other[0] ^= 1;
    assert_eq!(
        Announcement::accept(&body, &PeerId::from(other), a.issued_secs),
        Err(AnnouncementError::NotItsAuthor)
    );
    assert_eq!(
        Announcement::accept(&body, &a.uid, a.issued_secs),
        Ok(Some(a.clone()))
    );
    // Written back, it reads as itself (unless the person's text pushes it over the
    // size bound, which a block within its bounds can).
    match a.render() {
        Ok(text) => assert_eq!(Announcement::parse(&text), Ok(Some(a))),
        Err(e) => assert_eq!(e, AnnouncementError::TooLarge),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn announcements_corpus_passes() {
        for (path, data) in super::super::corpus("announcements") {
            eprintln!("announcements: {}", path.display());
            super::announcements(&data);
        }
    }

    #[test]
    fn announcements_survives_edge_inputs() {
        for data in [
            &b""[..],
            b"```brmcp-announcement v1",
            &[0xff; 64],
            b"```brmcp-announcement v1\n```",
        ] {
            super::announcements(data);
        }
    }
}
