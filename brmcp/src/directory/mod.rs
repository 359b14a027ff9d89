//! A verifying directory of tool providers, compatible with the Go `brmcpdir`.
//!
//! The directory is a serving harness ([`crate::server::Harness`]) with public tools
//! (`register`, `my_status`, `search`, `get_provider`, `introduce`, `list_categories`,
//! `policy`, `get_snapshot`) and admin tools visible only to the policy's
//! `admin_uids`. A provider lists only after the directory crawled its catalog and made
//! one paid test call to it:
//!
//! ```text
//! register ─► awaiting_funding ─(tips cover fee + budget; fee debited)─► crawling
//! crawling ─(tools/list; catalog and call key stored)─► testing ─(paid test)─►
//!   pending_review ─approve─► listed        (a renewal that passes lists without review)
//! ```
//!
//! State lives in the data directory: [`STORE_FILE`] (SQLite, one transaction per
//! state change), the harness ledger (balances: tips credit them, the fee and each test
//! payment debit them), [`POLICY_FILE`] and [`KEY_FILE`] (the snapshot signing key).
//! Outputs are the Go JSON shapes, as the text content of each result.
//!
//! Federation: curated peers (`add_peer`) whose signed snapshots `verify_peer` turns
//! into leads, never listings; `pursue_lead` invites a lead through its
//! `listing_invite`, or asks an [`Introducer`] for a key exchange through the peer, and
//! [`Directory::notify_kx`] sends one invite when that exchange completes. The provider
//! side is a [`Registrant`]: it serves `listing_invite` and registers with directories
//! within its [`AutoFund`] policy.
//!
//! The directory pays through a [`Payer`], which must tell a failed payment (nothing
//! paid; the escrow is given back) from an unconfirmed one (it may land; never refunded).

mod admin;
mod block;
mod client;
mod config;
mod federation;
mod money;
mod pipeline;
mod registrant;
mod search;
mod service;
mod snapshot;
mod store;
mod tools;
mod types;

pub use admin::{ADMIN_LOG, ADMIN_TOOLS};
pub use block::RegistrantBlock;
pub use client::{PAY_WAIT, PayError, PayFuture, Payer};
pub use config::{
    DEFAULT_EXPIRY_DAYS, DEFAULT_LISTING_FEE_ATOMS, DEFAULT_NAME, DEFAULT_RECRAWL_HOURS,
    DEFAULT_SNAPSHOT_PRICE_ATOMS, DEFAULT_TEST_BUDGET_MAX_ATOMS, POLICY_FILE, Policy, PolicyError,
};
pub use federation::{
    AddPeerIn, IntroduceFuture, Introducer, InviteIn, InviteOut, Lead, LeadState,
    MAX_KX_INVITE_TRIES, Peer,
};
pub use money::{ESCROW_TOOL, FEE_TOOL};
pub use registrant::{
    AutoFund, DEFAULT_REGISTRANT_NAME, FUND_HISTORY_APPLICATION_ID, FUND_HISTORY_FILE, Notify,
    RENEW_AHEAD, Registrant, RegistrantConfig,
};
pub use search::{SEARCH_HIT_CAP, SearchHit, SearchIn, SearchOut, search};
pub use service::{
    BuildError, CLOSE_WAIT, Directory, DirectoryBuilder, STOP_BLOCKING_WAIT, STOP_WITHIN,
};
pub use snapshot::{
    KEY_FILE, KeyError, SNAPSHOT_VERSION, SignedSnapshot, Signer, Snapshot, SnapshotListing,
    VerifyError, payload, verify,
};
pub use store::{
    DirError, STORE_APPLICATION_ID, STORE_FILE, STORE_SCHEMA_VERSION, Spend, SpendState, Store,
    Stored, Table,
};
pub use tools::{NO_INTRODUCTIONS, NO_LISTING};
pub use types::{
    Empty, Entry, FlagIn, Listing, MAX_DESCRIPTION_LEN, MAX_TAG_LEN, MAX_TAGS, Outcome, PendingOut,
    ProviderOut, RegisterError, RegisterIn, Registration, RejectIn, State, StatsOut, StatusOut,
    TestSpec, UidIn, normalize_tags,
};
