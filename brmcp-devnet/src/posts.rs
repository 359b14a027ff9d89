//! Posts, as brclient's `PostsService` serves them: an author keeps who subscribed
//! to its posts, and a post it publishes lands in each subscriber's `posts` replay
//! log, streamed by `PostsStream` and kept until `AckReceivedPost`, like every
//! other stream. A comment on a post ([`Devnet::comment_on_post`]) lands in the
//! author's `poststatus` log and, relayed by the author, in its other subscribers'
//! (`PostsStatusStream`, `AckReceivedPostStatus`). Post and status ids are brclient's
//! BLAKE-256 hashes of their metadata.
//!
//! clientrpc has no method to create a post (a brclient user posts from its own
//! interface), so posts are published with [`Devnet::publish_post`], or by dropping a
//! request in `<dir>/`[`POSTS_DIR`] (what `brmcp devnet post` does): the running
//! devnet publishes it within [`POSTS_POLL`] and writes the post id next to it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::blake256::blake256;
use super::node::{Event, Log};
use super::{Devnet, DevnetError, LogEntry, Net, NodeId};

/// The folder of a devnet directory where post requests are dropped.
pub const POSTS_DIR: &str = "posts";

/// How often a running devnet looks for post requests.
const POSTS_POLL: Duration = Duration::from_millis(200);

/// brclient's `rpc.PostMetadataVersion`.
const POST_VERSION: u64 = 1;

/// The longest suggested title, in characters: brclient suggests the start of the
/// post's first line.
const MAX_TITLE_CHARS: usize = 255;

/// The largest post text: brclient refuses posts past its 1 MiB message limit.
pub const MAX_POST_BYTES: usize = 1 << 20;

/// A post request, `<dir>/posts/<name>.json`; the devnet answers in `<name>.id`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostRequest {
    /// The author's nick (a node of the running devnet).
    pub author: String,
    /// The post's text (its `main` attribute).
    pub text: String,
}

/// The post id as brclient's `rpc.PostMetadata.Hash` computes it: BLAKE-256 of the
/// version as a 32-byte little-endian block, then the description, main, title,
/// statusfrom, parent and from_nick attributes (a missing one as nothing).
pub(crate) fn post_id(version: u64, attributes: &BTreeMap<String, String>) -> [u8; 32] {
    let mut input = Vec::new();
    let mut block = [0u8; 32];
    block[..8].copy_from_slice(&version.to_le_bytes());
    input.extend_from_slice(&block);
    for key in [
        "description",
        "main",
        "title",
        "statusfrom",
        "parent",
        "from_nick",
    ] {
        input.extend_from_slice(attributes.get(key).map_or(&b""[..], String::as_bytes));
    }
    blake256(&input)
}

/// brclient's `rpc.PostMetadataStatusVersion`.
const STATUS_VERSION: u64 = 1;

/// A status update's id as brclient's `rpc.PostMetadataStatus.Hash` computes it:
/// BLAKE-256 of the version as a 32-byte little-endian block, the creator's id (hex),
/// then the identifier, description, main, title, parent, heart, comment and nonce
/// attributes (a missing one as nothing).
pub(crate) fn status_id(
    version: u64,
    from: &str,
    attributes: &BTreeMap<String, String>,
) -> [u8; 32] {
    let mut input = Vec::new();
    let mut block = [0u8; 32];
    block[..8].copy_from_slice(&version.to_le_bytes());
    input.extend_from_slice(&block);
    input.extend_from_slice(from.as_bytes());
    for key in [
        "identifier",
        "description",
        "main",
        "title",
        "parent",
        "heart",
        "comment",
        "nonce",
    ] {
        input.extend_from_slice(attributes.get(key).map_or(&b""[..], String::as_bytes));
    }
    blake256(&input)
}

/// Node `commenter` comments `text` on post `post` of node `author`, as brclient's
/// `CommentPost` and the author's `handlePostStatus`: the author records it (its
/// `PostsStatusStream` gets it, relayed by the commenter) and relays it to its other
/// subscribers that are nodes of this run (relayed by the author). The status id.
fn comment(net: &Net, commenter: usize, author: usize, post: [u8; 32], text: &str) -> [u8; 32] {
    let nonce = u64::from_le_bytes(super::random_bytes());
    let mut st = net.lock();
    let (from_uid, from_nick) = (st.nodes[commenter].uid, st.nodes[commenter].nick.clone());
    let author_uid = st.nodes[author].uid;
    let from = hex::encode(from_uid);
    let link = hex::encode(post);
    let mut attributes = BTreeMap::new();
    attributes.insert("comment".to_owned(), text.to_owned());
    attributes.insert("version".to_owned(), STATUS_VERSION.to_string());
    attributes.insert("identifier".to_owned(), link.clone());
    attributes.insert("statusfrom".to_owned(), from.clone());
    attributes.insert("nonce".to_owned(), format!("{nonce:x}"));
    let id = status_id(STATUS_VERSION, &from, &attributes);
    // The receiver fills in the nick of whom it got the update from.
    attributes.insert("from_nick".to_owned(), from_nick.clone());
    let event = |relayer: [u8; 32]| Event::PostStatus {
        relayer,
        post_id: post,
        status_from: from_uid,
        status_from_nick: from_nick.clone(),
        version: STATUS_VERSION,
        from: from.clone(),
        link: link.clone(),
        attributes: attributes.clone(),
    };
    st.nodes[author].append(Log::PostStatus, event(from_uid));
    let subscribers = st.nodes[author].post_subscribers.clone();
    for sub in subscribers.into_iter().filter(|s| *s != from_uid) {
        if let Some(i) = st.node_by_uid(&sub) {
            st.nodes[i].append(Log::PostStatus, event(author_uid));
        }
    }
    id
}

/// brclient's suggested title: the post's first non-empty line, shortened.
fn suggested_title(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty());
    line.unwrap_or("").chars().take(MAX_TITLE_CHARS).collect()
}

/// Publishes `text` as a post by node `author` to every subscriber that is a node of
/// this run; the post id.
fn publish(net: &Net, author: usize, text: &str) -> [u8; 32] {
    let date = net.clock.now_ms().div_euclid(1000);
    let mut st = net.lock();
    let (uid, nick) = (st.nodes[author].uid, st.nodes[author].nick.clone());
    let mut attributes = BTreeMap::new();
    attributes.insert("main".to_owned(), text.to_owned());
    attributes.insert("statusfrom".to_owned(), hex::encode(uid));
    attributes.insert("from_nick".to_owned(), nick.clone());
    let id = post_id(POST_VERSION, &attributes);
    let event = Event::Post {
        id,
        author: uid,
        author_nick: nick,
        date,
        title: suggested_title(text),
        version: POST_VERSION,
        attributes,
    };
    let subscribers = st.nodes[author].post_subscribers.clone();
    for sub in subscribers {
        if let Some(i) = st.node_by_uid(&sub) {
            st.nodes[i].append(Log::Posts, event.clone());
        }
    }
    id
}

impl Devnet {
    /// Publishes `text` as a post by `author`: each node of this run subscribed to
    /// the author receives it on `PostsStream`. The post id.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn publish_post(&self, author: NodeId, text: &str) -> Result<[u8; 32], DevnetError> {
        self.check(author)?;
        Ok(publish(&self.net, author.index(), text))
    }

    /// Node `commenter` comments `text` on the post `post` of node `author` (what a
    /// brclient user does from its interface; clientrpc has no method for it): the
    /// author's `PostsStatusStream` gets it, and so does each other subscriber of the
    /// author. The status id, as brclient computes it. The devnet does not sign it
    /// (no `signature` attribute).
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn comment_on_post(
        &self,
        commenter: NodeId,
        author: NodeId,
        post: [u8; 32],
        text: &str,
    ) -> Result<[u8; 32], DevnetError> {
        self.check(commenter)?;
        self.check(author)?;
        Ok(comment(
            &self.net,
            commenter.index(),
            author.index(),
            post,
            text,
        ))
    }

    /// A node's post status log (what `PostsStatusStream` carries), with acked state.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn post_status_log(&self, node: NodeId) -> Result<Vec<LogEntry>, DevnetError> {
        self.check(node)?;
        Ok(self.net.lock().nodes[node.index()].logs[Log::PostStatus.index()].inspect())
    }

    /// A node's posts log (what `PostsStream` carries), with acked state.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn posts_log(&self, node: NodeId) -> Result<Vec<LogEntry>, DevnetError> {
        self.check(node)?;
        Ok(self.net.lock().nodes[node.index()].logs[Log::Posts.index()].inspect())
    }

    /// Publishes the post requests dropped in `<dir>/`[`POSTS_DIR`], now and every
    /// 200 ms until the devnet stops. A request is answered in a file next to it,
    /// `<name>.id` (the post id in hex) or `<name>.err` (why not), and removed.
    ///
    /// # Errors
    ///
    /// The folder cannot be created.
    pub fn watch_posts(&self) -> std::io::Result<()> {
        let dir = self.dir.join(POSTS_DIR);
        brmcp_fs::create_dir(&dir)?;
        let net = self.net.clone();
        self.net.spawn(async move {
            loop {
                scan(&net, &dir);
                tokio::time::sleep(POSTS_POLL).await;
            }
        });
        Ok(())
    }
}

/// Answers every request in `dir`.
fn scan(net: &Net, dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for path in entries.flatten().map(|e| e.path()) {
        if path.extension().is_some_and(|e| e == "json") {
            answer(net, &path);
        }
    }
}

/// Publishes one request and writes its answer; the request goes once answered.
fn answer(net: &Net, path: &PathBuf) {
    let id_path = path.with_extension("id");
    // Answered before a stop that came before the request's removal.
    if id_path.exists() {
        let _ = std::fs::remove_file(path);
        return;
    }
    let result = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|text| {
            serde_json::from_str::<PostRequest>(&text)
                .map_err(|e| format!("{}: {e}", path.display()))
        })
        .and_then(|req| {
            if req.text.len() > MAX_POST_BYTES {
                return Err(format!("post larger than {MAX_POST_BYTES} bytes"));
            }
            let author = net.lock().nodes.iter().position(|n| n.nick == req.author);
            let author = author.ok_or_else(|| format!("no node {:?}", req.author))?;
            Ok(publish(net, author, &req.text))
        });
    let (answer_path, text) = match result {
        Ok(id) => (id_path, hex::encode(id)),
        Err(e) => (path.with_extension("err"), e),
    };
    // Written whole before it appears, only its user reading it: the command never
    // reads half an answer.
    if brmcp_fs::write_atomic(&answer_path, text.as_bytes()).is_ok() {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_title_is_the_first_non_empty_line() {
        assert_eq!(suggested_title("\n  Hello world \nmore"), "Hello world");
        assert_eq!(suggested_title(""), "");
        assert_eq!(suggested_title(&"x".repeat(300)).len(), MAX_TITLE_CHARS);
    }

    /// Ids pinned against another implementation of BLAKE-256 over brclient's
    /// layouts (`PostMetadata.Hash`, `PostMetadataStatus.Hash`).
    #[test]
    fn ids_are_brclients_blake256_hashes() {
        let post = BTreeMap::from([
            ("main".to_owned(), "hi".to_owned()),
            ("statusfrom".to_owned(), "ab".repeat(32)),
            ("from_nick".to_owned(), "alice".to_owned()),
        ]);
        assert_eq!(
            hex::encode(post_id(1, &post)),
            "2c1585f0d8993a3a51049dfcc73f08598e8d58f622bef5ee33d069950701810a"
        );
        let status = BTreeMap::from([
            ("identifier".to_owned(), "ef".repeat(32)),
            ("comment".to_owned(), "nice".to_owned()),
            ("nonce".to_owned(), "1f".to_owned()),
            // Outside the hash: filled in by whoever relays it.
            ("from_nick".to_owned(), "bob".to_owned()),
            ("statusfrom".to_owned(), "cd".repeat(32)),
        ]);
        assert_eq!(
            hex::encode(status_id(1, &"cd".repeat(32), &status)),
            "fa50e9c3476f6207fee86787394cede67505702912ecd7fa46ed80c3cc82ce48"
        );
    }

    #[test]
    fn the_id_covers_the_text_and_the_author() {
        let mut a = BTreeMap::new();
        a.insert("main".to_owned(), "hi".to_owned());
        let mut b = a.clone();
        b.insert("from_nick".to_owned(), "bob".to_owned());
        assert_ne!(post_id(1, &a), post_id(1, &b));
        assert_eq!(post_id(1, &a), post_id(1, &a.clone()));
        // Attributes outside brclient's hash do not change the id.
        let mut c = a.clone();
        c.insert("nonce".to_owned(), "1".to_owned());
        assert_eq!(post_id(1, &a), post_id(1, &c));
    }
}
