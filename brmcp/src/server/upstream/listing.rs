//! An upstream's lists (tools, resources, templates, prompts) read page by page with a
//! bound on the pages, the items and their bytes: an upstream that answers a
//! `nextCursor` on every page, or pages without end, is read up to the bound and no
//! further. (rmcp's `list_all_*` follow the cursor for as long as the upstream gives
//! one.) The caller bounds the time.

use std::future::Future;

use rmcp::Peer;
use rmcp::RoleClient;
use rmcp::model::{PaginatedRequestParams, Prompt, Resource, ResourceTemplate, Tool};
use rmcp::service::ServiceError;

/// The most pages read of one list: far more than any real server pages its lists
/// into, and each is a request and an answer to hold.
pub const MAX_LIST_PAGES: usize = 64;

/// The most items kept of one list: four times the tools mirrored of one upstream
/// ([`MAX_TOOLS_PER_UPSTREAM`](super::MAX_TOOLS_PER_UPSTREAM)), leaving room for the
/// ones the configuration does not expose.
pub const MAX_LIST_ITEMS: usize = 4096;

/// The most bytes (as JSON) kept of one list: what is held in memory per upstream and
/// sent to every caller that lists.
pub const MAX_LIST_BYTES: usize = 16 * 1024 * 1024;

/// One list as read, and which bound cut it short, if one did.
#[derive(Debug)]
pub(crate) struct Listed<T> {
    pub(crate) items: Vec<T>,
    pub(crate) cut: Option<&'static str>,
}

/// Counts the bytes serialized into it.
struct Count(usize);

impl std::io::Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads the pages `page` fetches (given the cursor, each its items and the next
/// cursor) until the last, or until [`MAX_LIST_PAGES`], [`MAX_LIST_ITEMS`] or
/// [`MAX_LIST_BYTES`]: what was read by then is the list.
pub(crate) async fn list_pages<T, F, Fut>(mut page: F) -> Result<Listed<T>, ServiceError>
where
    T: serde::Serialize,
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let mut items = Vec::new();
    let mut bytes = 0usize;
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let (page_items, next) = page(cursor.take()).await?;
        for item in page_items {
            if items.len() == MAX_LIST_ITEMS {
                return Ok(Listed {
                    items,
                    cut: Some("items"),
                });
            }
            let mut count = Count(0);
            let _ = serde_json::to_writer(&mut count, &item);
            bytes = bytes.saturating_add(count.0);
            if bytes > MAX_LIST_BYTES {
                return Ok(Listed {
                    items,
                    cut: Some("bytes"),
                });
            }
            items.push(item);
        }
        match next {
            Some(next) => cursor = Some(next),
            None => return Ok(Listed { items, cut: None }),
        }
    }
    Ok(Listed {
        items,
        cut: Some("pages"),
    })
}

fn params(cursor: Option<String>) -> Option<PaginatedRequestParams> {
    Some(PaginatedRequestParams::default().with_cursor(cursor))
}

/// The upstream's tools.
pub(crate) async fn tools(peer: &Peer<RoleClient>) -> Result<Listed<Tool>, ServiceError> {
    list_pages(|cursor| async move {
        let page = peer.list_tools(params(cursor)).await?;
        Ok((page.tools, page.next_cursor))
    })
    .await
}

/// The upstream's resources.
pub(crate) async fn resources(peer: &Peer<RoleClient>) -> Result<Listed<Resource>, ServiceError> {
    list_pages(|cursor| async move {
        let page = peer.list_resources(params(cursor)).await?;
        Ok((page.resources, page.next_cursor))
    })
    .await
}

/// The upstream's resource templates.
pub(crate) async fn resource_templates(
    peer: &Peer<RoleClient>,
) -> Result<Listed<ResourceTemplate>, ServiceError> {
    list_pages(|cursor| async move {
        let page = peer.list_resource_templates(params(cursor)).await?;
        Ok((page.resource_templates, page.next_cursor))
    })
    .await
}

/// The upstream's prompts.
pub(crate) async fn prompts(peer: &Peer<RoleClient>) -> Result<Listed<Prompt>, ServiceError> {
    list_pages(|cursor| async move {
        let page = peer.list_prompts(params(cursor)).await?;
        Ok((page.prompts, page.next_cursor))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn endless_pages_stop_at_the_page_bound() {
        let mut fetched = 0;
        let listed = list_pages(|cursor| {
            fetched += 1;
            let n = cursor.map_or(0, |c| c.parse::<usize>().unwrap());
            async move { Ok((vec![n], Some((n + 1).to_string()))) }
        })
        .await
        .unwrap();
        assert_eq!(fetched, MAX_LIST_PAGES);
        assert_eq!(listed.items.len(), MAX_LIST_PAGES);
        assert_eq!(listed.cut, Some("pages"));
    }

    #[tokio::test]
    async fn items_and_bytes_are_bounded() {
        let listed = list_pages(|_| async { Ok((vec![0u8; 1000], Some("again".into()))) })
            .await
            .unwrap();
        assert_eq!(
            (listed.items.len(), listed.cut),
            (MAX_LIST_ITEMS, Some("items"))
        );
        let big = "x".repeat(MAX_LIST_BYTES / 3);
        let listed = list_pages(|_| {
            let big = big.clone();
            async move { Ok((vec![big], Some("again".into()))) }
        })
        .await
        .unwrap();
        assert_eq!((listed.items.len(), listed.cut), (2, Some("bytes")));
        let listed = list_pages(|_| async { Ok((vec![1, 2], None)) })
            .await
            .unwrap();
        assert_eq!((listed.items, listed.cut), (vec![1, 2], None));
    }
}
