//! Every bound the envelope format and the reassembler enforce, in one place.
//!
//! The protocol constants are fixed by WIRE.md; the reassembly bounds are defaults a
//! receiver may tighten or loosen through [`Limits`].

/// Envelope version this crate emits and accepts (WIRE.md §3, field `v`).
pub const VERSION: u32 = 1;

/// Most parts one message may be split into (WIRE.md §4, field `seq`).
///
/// 64 parts of [`DEFAULT_CHUNK_LEN`] is about 12.5 MiB, beyond any JSON-RPC message the
/// transport should carry; it also lets a receiver track received parts in one `u64`.
pub const MAX_PARTS: u16 = 64;

/// Longest `sid` / `mid` in hex characters (WIRE.md §4, fields `sid` and `mid`).
///
/// 32 hex characters carry 128 bits, more than any sender needs to avoid collisions.
pub const MAX_ID_LEN: usize = 32;

/// Raw payload bytes per part when the sender does not choose (WIRE.md §5).
///
/// Base64 grows it to 273,068 characters, well under [`MAX_PM_LEN`] with room for the tag.
pub const DEFAULT_CHUNK_LEN: usize = 200 * 1024;

/// Longest PM body the encoder produces, in bytes (WIRE.md §5).
///
/// Bison Relay's guidance is that a routed message stays within 1 MiB; a longer PM may be
/// refused by the relay, so the encoder refuses a chunk length that would need one.
pub const MAX_PM_LEN: usize = 1024 * 1024;

/// Raw bytes the base64 body of a [`MAX_PM_LEN`] PM can carry at most (WIRE.md §5).
///
/// A receiver that decodes single-part messages into a buffer of this size never refuses
/// a part an honest encoder produced.
pub const MAX_PM_PAYLOAD_LEN: usize = MAX_PM_LEN / 4 * 3;

/// Default for [`Limits::max_pending_per_peer`] (WIRE.md §6).
///
/// Eight concurrent multi-part messages per peer, as the Go implementation.
pub const DEFAULT_MAX_PENDING_PER_PEER: usize = 8;

/// Default for [`Limits::max_message_bytes`]: 16 MiB (WIRE.md §6).
///
/// Above the 12.5 MiB that [`MAX_PARTS`] default-sized chunks carry; the Go default.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Default for [`Limits::max_peer_bytes`]: 16 MiB (WIRE.md §6).
///
/// One peer may hold one maximal message in flight; it cannot take the whole budget and
/// starve other peers.
pub const DEFAULT_MAX_PEER_BYTES: usize = 16 << 20;

/// Default for [`Limits::max_total_bytes`]: 64 MiB (WIRE.md §6), the Go default.
pub const DEFAULT_MAX_TOTAL_BYTES: usize = 64 << 20;

/// Default for [`Limits::partial_timeout_secs`]: 10 minutes (WIRE.md §6).
///
/// Equal to the default deadline a sender stamps, so a partial message never outlives the
/// request it carries.
pub const DEFAULT_PARTIAL_TIMEOUT_SECS: u64 = 600;

/// Reassembly bounds. [`Limits::DEFAULT`] (also `Limits::default()`) gives the
/// documented defaults; the `with_*` methods change one bound each, in `const`
/// contexts too. Non-exhaustive, so a new bound is not a breaking change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Multi-part messages one peer may have partially received at once.
    pub max_pending_per_peer: usize,
    /// Largest reassembled message, in bytes; also bounds single-part messages.
    pub max_message_bytes: usize,
    /// Bytes one peer's partial messages may reserve together.
    pub max_peer_bytes: usize,
    /// Bytes all partial messages may reserve together (never more than the storage given).
    pub max_total_bytes: usize,
    /// Seconds after its first part arrived at which a partial message is abandoned.
    pub partial_timeout_secs: u64,
}

impl Limits {
    /// The documented defaults.
    pub const DEFAULT: Self = Self {
        max_pending_per_peer: DEFAULT_MAX_PENDING_PER_PEER,
        max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        max_peer_bytes: DEFAULT_MAX_PEER_BYTES,
        max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
        partial_timeout_secs: DEFAULT_PARTIAL_TIMEOUT_SECS,
    };

    /// With [`max_pending_per_peer`](Self::max_pending_per_peer) set to `n`.
    #[must_use]
    pub const fn with_max_pending_per_peer(mut self, n: usize) -> Self {
        self.max_pending_per_peer = n;
        self
    }

    /// With [`max_message_bytes`](Self::max_message_bytes) set to `n`.
    #[must_use]
    pub const fn with_max_message_bytes(mut self, n: usize) -> Self {
        self.max_message_bytes = n;
        self
    }

    /// With [`max_peer_bytes`](Self::max_peer_bytes) set to `n`.
    #[must_use]
    pub const fn with_max_peer_bytes(mut self, n: usize) -> Self {
        self.max_peer_bytes = n;
        self
    }

    /// With [`max_total_bytes`](Self::max_total_bytes) set to `n`.
    #[must_use]
    pub const fn with_max_total_bytes(mut self, n: usize) -> Self {
        self.max_total_bytes = n;
        self
    }

    /// With [`partial_timeout_secs`](Self::partial_timeout_secs) set to `secs`.
    #[must_use]
    pub const fn with_partial_timeout_secs(mut self, secs: u64) -> Self {
        self.partial_timeout_secs = secs;
        self
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}
