//! The bots' announcements the bridge received in Bison Relay posts (WIRE.md §13): the
//! newest valid one of each author, bounded in authors, bytes and age, kept in the data
//! directory's [`ANNOUNCEMENTS_FILE`] so `bots discover` and the agent's directory
//! tools read them while the bridge runs or not.
//!
//! A post that is no announcement is ignored. An announcement that is malformed,
//! oversized, stale (or from the future), or that names a bot other than the post's
//! author is skipped and counted, never kept. Keeping one does not add its bot: that
//! still takes the user's consent (`bots add`, the page).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use brmcp_adapters::PeerId;
#[cfg(doc)]
use brmcp_adapters::protocol::MAX_ANNOUNCEMENT_BYTES;
use brmcp_adapters::protocol::{Announcement, AnnouncementError};
use serde::{Deserialize, Serialize};

/// The file of a data directory holding the announcements received.
pub const ANNOUNCEMENTS_FILE: &str = "announcements.json";

/// The most authors whose announcement is kept: far more bots than one user follows,
/// few enough that a search reads them all at once.
pub const MAX_ANNOUNCING_AUTHORS: usize = 256;

/// The most bytes of announcement text kept, all authors together: the file stays
/// small enough to be read at every search (an author may hold up to
/// [`MAX_ANNOUNCEMENT_BYTES`]).
pub const MAX_ANNOUNCEMENTS_BYTES: usize = 1024 * 1024;

/// The file's version.
const FILE_VERSION: u32 = 1;

/// How many announcements were skipped, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skipped {
    /// Not the block of WIRE.md §13: broken JSON, unknown keys, a field out of its
    /// bounds, a bad price, another version.
    pub malformed: u64,
    /// Over [`MAX_ANNOUNCEMENT_BYTES`].
    pub oversized: u64,
    /// Issued too long ago, or ahead of this machine's clock.
    pub stale: u64,
    /// Naming a bot other than the post's author.
    pub not_its_author: u64,
}

impl Skipped {
    fn count(&mut self, error: AnnouncementError) {
        let counter = match error {
            AnnouncementError::TooLarge => &mut self.oversized,
            AnnouncementError::Stale | AnnouncementError::FromTheFuture => &mut self.stale,
            AnnouncementError::NotItsAuthor => &mut self.not_its_author,
            _ => &mut self.malformed,
        };
        *counter = counter.saturating_add(1);
    }

    /// Every skipped announcement.
    pub const fn total(&self) -> u64 {
        self.malformed
            .saturating_add(self.oversized)
            .saturating_add(self.stale)
            .saturating_add(self.not_its_author)
    }
}

/// What became of one post offered to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    /// Kept: now its author's announcement.
    Kept,
    /// Not an announcement (an ordinary post).
    NotAnnouncement,
    /// Valid, and not newer than the one of its author already kept.
    Older,
    /// Valid, and the oldest when the store was over its bounds: not kept.
    Evicted,
    /// Skipped and counted.
    Skipped(AnnouncementError),
}

/// One author's kept announcement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announced {
    /// The announcement.
    pub announcement: Announcement,
    /// The post that carried it (hex of brclient's post id).
    pub post_id: String,
    /// When the bridge received it, Unix seconds.
    pub received_secs: u64,
    body: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredFile {
    version: u32,
    announcements: Vec<Stored>,
    skipped: Skipped,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    /// 64 lowercase hex.
    author: String,
    post_id: String,
    received_secs: u64,
    body: String,
}

/// Why the announcements file was not read or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct AnnouncementsError {
    path: PathBuf,
    reason: String,
}

/// The announcements kept: at most [`MAX_ANNOUNCING_AUTHORS`] authors and
/// [`MAX_ANNOUNCEMENTS_BYTES`] of text, none stale.
#[derive(Debug, Clone, Default)]
pub struct Announcements {
    by_author: BTreeMap<PeerId, Announced>,
    skipped: Skipped,
}

impl Announcements {
    /// Offers the post `post_id` by `author`, received at `now_secs`.
    pub fn offer(&mut self, author: PeerId, post_id: &[u8], body: &str, now_secs: u64) -> Offered {
        self.prune(now_secs);
        let announcement = match Announcement::accept(body, &author, now_secs) {
            Ok(Some(a)) => a,
            Ok(None) => return Offered::NotAnnouncement,
            Err(e) => {
                self.skipped.count(e);
                return Offered::Skipped(e);
            }
        };
        if let Some(kept) = self.by_author.get(&author)
            && kept.announcement.issued_secs >= announcement.issued_secs
        {
            return Offered::Older;
        }
        let issued = announcement.issued_secs;
        self.by_author.insert(
            author,
            Announced {
                announcement,
                post_id: hex(post_id),
                received_secs: now_secs,
                body: body.to_owned(),
            },
        );
        self.evict();
        match self.by_author.get(&author) {
            Some(kept) if kept.announcement.issued_secs == issued => Offered::Kept,
            _ => Offered::Evicted,
        }
    }

    /// The fresh announcements at `now_secs`, newest first.
    pub fn current(&self, now_secs: u64) -> Vec<&Announced> {
        let mut fresh: Vec<_> = self
            .by_author
            .values()
            .filter(|a| a.announcement.check_age(now_secs).is_ok())
            .collect();
        fresh.sort_by_key(|a| std::cmp::Reverse(a.announcement.issued_secs));
        fresh
    }

    /// The announcement `uid` made, if kept and fresh at `now_secs`.
    pub fn of(&self, uid: &PeerId, now_secs: u64) -> Option<&Announced> {
        self.by_author
            .get(uid)
            .filter(|a| a.announcement.check_age(now_secs).is_ok())
    }

    /// How many were skipped, by reason.
    pub const fn skipped(&self) -> Skipped {
        self.skipped
    }

    fn bytes(&self) -> usize {
        self.by_author.values().map(|a| a.body.len()).sum()
    }

    fn prune(&mut self, now_secs: u64) {
        self.by_author
            .retain(|_, a| a.announcement.check_age(now_secs).is_ok());
    }

    /// Drops the oldest announcements until within the bounds.
    fn evict(&mut self) {
        while self.by_author.len() > MAX_ANNOUNCING_AUTHORS
            || self.bytes() > MAX_ANNOUNCEMENTS_BYTES
        {
            let oldest = self
                .by_author
                .iter()
                .min_by_key(|(_, a)| a.announcement.issued_secs)
                .map(|(uid, _)| *uid);
            match oldest {
                Some(uid) => self.by_author.remove(&uid),
                None => break,
            };
        }
    }

    /// The file of `datadir` (empty when there is none yet), each announcement read
    /// again as when it was received: what no longer reads, or is stale at `now_secs`,
    /// is dropped.
    ///
    /// # Errors
    /// [`AnnouncementsError`] for a file that cannot be read or is not this file.
    pub fn load(datadir: &Path, now_secs: u64) -> Result<Self, AnnouncementsError> {
        let path = datadir.join(ANNOUNCEMENTS_FILE);
        let error = |reason: String| AnnouncementsError {
            path: path.clone(),
            reason,
        };
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(error(e.to_string())),
        };
        let file: StoredFile = serde_json::from_slice(&text).map_err(|e| error(e.to_string()))?;
        if file.version != FILE_VERSION {
            return Err(error(format!(
                "version {} is not {FILE_VERSION}",
                file.version
            )));
        }
        let mut store = Self {
            by_author: BTreeMap::new(),
            skipped: file.skipped,
        };
        for stored in file.announcements {
            let Ok(author) = stored.author.parse::<PeerId>() else {
                continue;
            };
            if let Ok(Some(announcement)) = Announcement::accept(&stored.body, &author, now_secs) {
                store.by_author.insert(
                    author,
                    Announced {
                        announcement,
                        post_id: stored.post_id,
                        received_secs: stored.received_secs,
                        body: stored.body,
                    },
                );
            }
        }
        store.evict();
        Ok(store)
    }

    /// Writes the store to `datadir`'s file, atomically.
    ///
    /// # Errors
    /// [`AnnouncementsError`] when it cannot be written.
    pub fn save(&self, datadir: &Path) -> Result<(), AnnouncementsError> {
        let path = datadir.join(ANNOUNCEMENTS_FILE);
        let file = StoredFile {
            version: FILE_VERSION,
            announcements: self
                .by_author
                .iter()
                .map(|(author, a)| Stored {
                    author: author.to_string(),
                    post_id: a.post_id.clone(),
                    received_secs: a.received_secs,
                    body: a.body.clone(),
                })
                .collect(),
            skipped: self.skipped,
        };
        let json = serde_json::to_vec_pretty(&file).map_err(|e| AnnouncementsError {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        crate::secure_fs::write_atomic(&path, &json).map_err(|e| AnnouncementsError {
            path,
            reason: e.to_string(),
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use brmcp_adapters::protocol::{
        AnnouncedTool, MAX_ANNOUNCEMENT_AGE_SECS, MAX_ANNOUNCEMENT_BYTES, PriceBounds, ToolPrice,
    };

    const NOW: u64 = 1_765_000_000;

    fn uid(n: u16) -> PeerId {
        let mut bytes = [0u8; 32];
        bytes[..2].copy_from_slice(&n.to_be_bytes());
        PeerId::from_bytes(bytes)
    }

    /// An announcement with `tools` tools, each described at length when `long`.
    fn body_of(author: PeerId, issued: u64, tools: usize, long: bool) -> String {
        Announcement {
            uid: author,
            name: "bot".into(),
            description: String::new(),
            issued_secs: issued,
            tools: (0..tools)
                .map(|i| AnnouncedTool {
                    name: format!("tool{i}"),
                    description: if long { "d".repeat(250) } else { String::new() },
                    price: ToolPrice::Fixed(10),
                    bounds: PriceBounds::NONE,
                })
                .collect(),
        }
        .render()
        .unwrap()
    }

    fn body(author: PeerId, issued: u64) -> String {
        body_of(author, issued, 1, false)
    }

    #[test]
    fn the_newest_valid_announcement_of_each_author_is_kept_and_the_rest_counted() {
        let mut store = Announcements::default();
        let (a, b) = (uid(1), uid(2));
        assert_eq!(store.offer(a, &[1], &body(a, NOW - 10), NOW), Offered::Kept);
        assert_eq!(
            store.offer(a, &[2], &body(a, NOW - 20), NOW),
            Offered::Older
        );
        assert_eq!(store.offer(a, &[3], &body(a, NOW - 5), NOW), Offered::Kept);
        assert_eq!(store.of(&a, NOW).unwrap().post_id, "03");
        assert_eq!(store.offer(a, &[4], "hello", NOW), Offered::NotAnnouncement);
        // b's post naming a: skipped, and a's stays a's.
        assert_eq!(
            store.offer(b, &[5], &body(a, NOW), NOW),
            Offered::Skipped(AnnouncementError::NotItsAuthor)
        );
        let stale = body(b, NOW - MAX_ANNOUNCEMENT_AGE_SECS - 1);
        assert_eq!(
            store.offer(b, &[6], &stale, NOW),
            Offered::Skipped(AnnouncementError::Stale)
        );
        let broken = body(b, NOW).replace("\"tools\"", "\"toolz\"");
        assert_eq!(
            store.offer(b, &[7], &broken, NOW),
            Offered::Skipped(AnnouncementError::Malformed)
        );
        let huge = format!("{}{}", "x".repeat(MAX_ANNOUNCEMENT_BYTES), body(b, NOW));
        assert_eq!(
            store.offer(b, &[8], &huge, NOW),
            Offered::Skipped(AnnouncementError::TooLarge)
        );
        assert_eq!(
            store.skipped(),
            Skipped {
                malformed: 1,
                oversized: 1,
                stale: 1,
                not_its_author: 1
            }
        );
        assert_eq!(store.current(NOW).len(), 1);
        assert!(store.of(&b, NOW).is_none());
        // Kept ones go stale with time.
        assert!(
            store
                .current(NOW - 5 + MAX_ANNOUNCEMENT_AGE_SECS + 1)
                .is_empty()
        );
    }

    #[test]
    fn a_flood_of_authors_or_bytes_keeps_the_newest_within_the_bounds() {
        let mut store = Announcements::default();
        let flood = u16::try_from(MAX_ANNOUNCING_AUTHORS + 20).unwrap();
        for n in 0..flood {
            let issued = NOW - 10_000 + u64::from(n);
            assert_eq!(
                store.offer(uid(n), &[], &body(uid(n), issued), NOW),
                Offered::Kept
            );
        }
        assert_eq!(store.current(NOW).len(), MAX_ANNOUNCING_AUTHORS);
        assert!(store.of(&uid(0), NOW).is_none());
        assert!(store.of(&uid(flood - 1), NOW).is_some());
        // An older one than all kept is not kept.
        let old = uid(flood);
        assert_eq!(
            store.offer(old, &[], &body(old, NOW - 20_000), NOW),
            Offered::Evicted
        );

        let mut store = Announcements::default();
        let big = body_of(uid(0), NOW, 24, true).len();
        assert!(big > 10_000 && big <= MAX_ANNOUNCEMENT_BYTES, "{big}");
        let authors = u16::try_from(2 * MAX_ANNOUNCEMENTS_BYTES / big).unwrap();
        for n in 0..authors {
            let text = body_of(uid(n), NOW - 1000 + u64::from(n), 24, true);
            assert_eq!(store.offer(uid(n), &[], &text, NOW), Offered::Kept);
        }
        assert!(store.bytes() <= MAX_ANNOUNCEMENTS_BYTES);
        assert!(store.bytes() > MAX_ANNOUNCEMENTS_BYTES - big);
        assert!(store.of(&uid(0), NOW).is_none());
        assert!(store.of(&uid(authors - 1), NOW).is_some());
    }

    #[test]
    fn the_file_reads_back_and_drops_what_went_stale() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Announcements::default();
        store.offer(uid(1), &[0xab], &body(uid(1), NOW), NOW);
        store.offer(uid(2), &[], &body(uid(2), NOW - 100), NOW);
        store.offer(uid(3), &[], "```brmcp-announcement v1\n{}\n```\n", NOW);
        store.save(dir.path()).unwrap();
        let read = Announcements::load(dir.path(), NOW).unwrap();
        assert_eq!(read.current(NOW).len(), 2);
        assert_eq!(read.of(&uid(1), NOW).unwrap().post_id, "ab");
        assert_eq!(read.skipped().malformed, 1);
        let later = Announcements::load(dir.path(), NOW - 50 + MAX_ANNOUNCEMENT_AGE_SECS).unwrap();
        assert_eq!(later.current(NOW - 50 + MAX_ANNOUNCEMENT_AGE_SECS).len(), 1);
        std::fs::write(dir.path().join(ANNOUNCEMENTS_FILE), "{\"version\":1}").unwrap();
        let err = Announcements::load(dir.path(), NOW).unwrap_err();
        assert!(err.to_string().contains(ANNOUNCEMENTS_FILE), "{err}");
        assert!(
            Announcements::load(&dir.path().join("none"), NOW)
                .unwrap()
                .current(NOW)
                .is_empty()
        );
    }
}
