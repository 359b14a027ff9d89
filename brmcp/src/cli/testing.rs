//! What the subcommands' devnet tests share.

use std::time::Duration;

/// How often [`until`] checks.
const POLL: Duration = Duration::from_millis(25);

/// How many checks [`until`] makes before it fails: 30 s at [`POLL`], room for a devnet
/// round trip on a loaded machine.
const POLLS: u32 = 1200;

/// Waits until `check` holds; panics naming `what` when it never does.
pub(crate) async fn until(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..POLLS {
        if check() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("timed out waiting for: {what}");
}
