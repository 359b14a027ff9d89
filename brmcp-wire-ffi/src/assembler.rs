//! The reassembler behind an opaque handle, over storage the caller provides or the
//! library allocates.

use core::ptr::NonNull;
use std::alloc::{Layout, alloc_zeroed, dealloc};

use brmcp_wire::{Accepted as RustAccepted, UnixTime};

use crate::codec::parse_text;
use crate::raw::{bytes, get, get_mut, guard, put};
use crate::status::Status;
use crate::{BRMCP_WIRE_ASSEMBLER_SLOTS, BRMCP_WIRE_PEER_LEN};

/// A peer's key: the 32-byte Bison Relay user id.
type Peer = [u8; BRMCP_WIRE_PEER_LEN];

/// Reassembly bounds (see brmcp-wire's `Limits`); `brmcp_wire_limits_default` gives the
/// documented defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Multi-part messages one peer may have partially received at once (default 8).
    pub max_pending_per_peer: usize,
    /// Largest reassembled message in bytes, single-part ones too (default 16 MiB).
    pub max_message_bytes: usize,
    /// Bytes one peer's partial messages may reserve together (default 16 MiB).
    pub max_peer_bytes: usize,
    /// Bytes all partial messages may reserve together, at most the arena (default 64 MiB).
    pub max_total_bytes: usize,
    /// Seconds after its first part at which a partial message is abandoned (default 600).
    pub partial_timeout_secs: u64,
}

impl Limits {
    fn from_rust(l: &brmcp_wire::Limits) -> Self {
        Self {
            max_pending_per_peer: l.max_pending_per_peer,
            max_message_bytes: l.max_message_bytes,
            max_peer_bytes: l.max_peer_bytes,
            max_total_bytes: l.max_total_bytes,
            partial_timeout_secs: l.partial_timeout_secs,
        }
    }

    const fn to_rust(self) -> brmcp_wire::Limits {
        brmcp_wire::Limits::DEFAULT
            .with_max_pending_per_peer(self.max_pending_per_peer)
            .with_max_message_bytes(self.max_message_bytes)
            .with_max_peer_bytes(self.max_peer_bytes)
            .with_max_total_bytes(self.max_total_bytes)
            .with_partial_timeout_secs(self.partial_timeout_secs)
    }
}

/// The documented default limits.
#[unsafe(no_mangle)]
pub extern "C" fn brmcp_wire_limits_default() -> Limits {
    Limits::from_rust(&brmcp_wire::Limits::DEFAULT)
}

/// Bytes and partial messages held, in total or for one peer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Partial messages held.
    pub messages: usize,
    /// Arena bytes reserved for them.
    pub bytes: usize,
}

/// The part was stored; its message is still incomplete.
pub const BRMCP_WIRE_ACCEPTED_PENDING: u32 = 0;
/// The part completed its message: `message` and `message_len` hold the payload.
pub const BRMCP_WIRE_ACCEPTED_COMPLETE: u32 = 1;
/// The part's seq was already received for its message; it was ignored.
pub const BRMCP_WIRE_ACCEPTED_DUPLICATE: u32 = 2;

/// What `brmcp_wire_assembler_add` did with a part.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Accepted {
    /// `BRMCP_WIRE_ACCEPTED_PENDING`, `_COMPLETE` or `_DUPLICATE`.
    pub kind: u32,
    /// For `_COMPLETE`: the payload, inside the assembler's storage, valid until the
    /// next call on the assembler. Null otherwise.
    pub message: *const u8,
    /// For `_COMPLETE`: the payload's length. 0 otherwise.
    pub message_len: usize,
}

/// A buffer the library allocated (zeroed), freed on drop.
struct Owned {
    ptr: NonNull<u8>,
    len: usize,
}

impl Owned {
    fn new(len: usize) -> Result<Self, Status> {
        if len == 0 {
            return Ok(Self {
                ptr: NonNull::dangling(),
                len,
            });
        }
        let layout = Layout::array::<u8>(len).map_err(|_| Status::InvalidArgument)?;
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(Status::OutOfMemory)?;
        Ok(Self { ptr, len })
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: allocated in `new` with this very layout (which was valid then).
            unsafe {
                dealloc(
                    self.ptr.as_ptr(),
                    Layout::from_size_align_unchecked(self.len, 1),
                )
            };
        }
    }
}

/// An opaque reassembler: create it with `brmcp_wire_assembler_new` or
/// `brmcp_wire_assembler_new_in`, release it with `brmcp_wire_assembler_free`. Not
/// thread-safe: use one from one thread at a time.
pub struct Assembler {
    // Declared first, so dropped before the storage it borrows.
    inner: brmcp_wire::Assembler<'static, Peer, BRMCP_WIRE_ASSEMBLER_SLOTS>,
    _storage: Option<(Owned, Owned)>,
}

/// The storage as slices for the handle's lifetime.
///
/// # Safety
/// `arena` and `scratch` are valid for reads and writes of their lengths, do not overlap,
/// and are used by nothing else until the handle that borrows them is freed.
unsafe fn storage(
    arena: *mut u8,
    arena_len: usize,
    scratch: *mut u8,
    scratch_len: usize,
) -> Result<(&'static mut [u8], &'static mut [u8]), Status> {
    // SAFETY: forwarded from this function's contract; the handle, which holds the
    // slices, is freed before the storage is released.
    unsafe {
        Ok((
            crate::raw::bytes_mut(arena, arena_len)?,
            crate::raw::bytes_mut(scratch, scratch_len)?,
        ))
    }
}

fn boxed(
    limits: Limits,
    arena: &'static mut [u8],
    scratch: &'static mut [u8],
    owned: Option<(Owned, Owned)>,
) -> *mut Assembler {
    Box::into_raw(Box::new(Assembler {
        inner: brmcp_wire::Assembler::new(arena, scratch, limits.to_rust()),
        _storage: owned,
    }))
}

/// Creates an assembler whose storage the library allocates: an arena of `arena_len`
/// bytes for partial messages, and a scratch buffer of `scratch_len` bytes into which
/// single-part messages are decoded (a longer one is refused as too large;
/// `BRMCP_WIRE_MAX_PM_PAYLOAD_LEN` never refuses an honest part). Writes the handle to
/// `*out`.
///
/// # Safety
/// `limits` is valid for reads; `out` for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_assembler_new(
    limits: *const Limits,
    arena_len: usize,
    scratch_len: usize,
    out: *mut *mut Assembler,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let limits = *unsafe { get(limits) }?;
        if out.is_null() {
            return Err(Status::NullPointer);
        }
        let (arena, scratch) = (Owned::new(arena_len)?, Owned::new(scratch_len)?);
        // SAFETY: both buffers were just allocated for this handle alone, and move into it.
        let (a, s) = unsafe {
            storage(
                arena.ptr.as_ptr(),
                arena.len,
                scratch.ptr.as_ptr(),
                scratch.len,
            )
        }?;
        let handle = boxed(limits, a, s, Some((arena, scratch)));
        // SAFETY: forwarded from this function's contract.
        unsafe { put(out, handle) }
    })
}

/// Creates an assembler over storage the caller provides: `arena` (`arena_len` bytes)
/// and `scratch` (`scratch_len` bytes), as `brmcp_wire_assembler_new`. Writes the handle
/// to `*out`; only the handle itself is allocated.
///
/// # Safety
/// `limits` is valid for reads; `out` for writes; `arena` and `scratch` are valid for
/// reads and writes of their lengths, do not overlap, and are used by nothing else until
/// the handle is freed with `brmcp_wire_assembler_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_assembler_new_in(
    limits: *const Limits,
    arena: *mut u8,
    arena_len: usize,
    scratch: *mut u8,
    scratch_len: usize,
    out: *mut *mut Assembler,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let limits = *unsafe { get(limits) }?;
        if out.is_null() {
            return Err(Status::NullPointer);
        }
        // SAFETY: forwarded from this function's contract.
        let (a, s) = unsafe { storage(arena, arena_len, scratch, scratch_len) }?;
        let handle = boxed(limits, a, s, None);
        // SAFETY: forwarded from this function's contract.
        unsafe { put(out, handle) }
    })
}

/// Frees an assembler (and the storage the library allocated for it). Null is ignored.
///
/// # Safety
/// `assembler` is null or a handle from `brmcp_wire_assembler_new*` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_assembler_free(assembler: *mut Assembler) {
    if !assembler.is_null() {
        // SAFETY: the handle came from `Box::into_raw` and is freed once, by contract.
        drop(unsafe { Box::from_raw(assembler) });
    }
}

/// Parses the PM body `text` (`text_len` bytes, in `mode`) from the 32-byte `peer` and
/// adds it at `now` (unix seconds); writes the outcome to `*accepted`.
///
/// Partial messages whose deadline or timeout passed are dropped first. A parse status
/// (`BRMCP_WIRE_STATUS_NOT_ENVELOPE` for chat) comes back as is; any assembly error
/// drops the part's message except an invalid body, which refuses only its part.
///
/// # Safety
/// `assembler` is a live handle used by nothing else during the call; `peer` is valid
/// for reads of 32 bytes; `text` for reads of `text_len` bytes; `accepted` for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_assembler_add(
    assembler: *mut Assembler,
    peer: *const u8,
    text: *const u8,
    text_len: usize,
    mode: u32,
    now: i64,
    accepted: *mut Accepted,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let a = unsafe { get_mut(assembler) }?;
        // SAFETY: forwarded from this function's contract.
        let peer = peer_key(unsafe { bytes(peer, BRMCP_WIRE_PEER_LEN) }?)?;
        // SAFETY: forwarded from this function's contract.
        let text = unsafe { bytes(text, text_len) }?;
        if accepted.is_null() {
            return Err(Status::NullPointer);
        }
        let part = parse_text(text, mode)?;
        let out = match a.inner.add(peer, &part, UnixTime(now))? {
            RustAccepted::Complete(m) => Accepted {
                kind: BRMCP_WIRE_ACCEPTED_COMPLETE,
                message: m.as_ptr(),
                message_len: m.len(),
            },
            RustAccepted::Pending => none(BRMCP_WIRE_ACCEPTED_PENDING),
            RustAccepted::Duplicate => none(BRMCP_WIRE_ACCEPTED_DUPLICATE),
        };
        // SAFETY: forwarded from this function's contract.
        unsafe { put(accepted, out) }
    })
}

const fn none(kind: u32) -> Accepted {
    Accepted {
        kind,
        message: core::ptr::null(),
        message_len: 0,
    }
}

fn peer_key(bytes: &[u8]) -> Result<Peer, Status> {
    bytes.try_into().map_err(|_| Status::InvalidArgument)
}

/// Drops every partial message whose deadline or timeout passed at `now`; writes how
/// many to `*dropped` (null allowed: not written).
///
/// # Safety
/// `assembler` is a live handle used by nothing else during the call; `dropped` is null
/// or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_assembler_expire(
    assembler: *mut Assembler,
    now: i64,
    dropped: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let a = unsafe { get_mut(assembler) }?;
        let n = a.inner.expire(UnixTime(now));
        if !dropped.is_null() {
            // SAFETY: non-null, so valid for writes by this function's contract.
            unsafe { put(dropped, n) }?;
        }
        Ok(())
    })
}

/// Drops every partial message from the 32-byte `peer`; writes how many to `*dropped`
/// (null allowed: not written).
///
/// # Safety
/// `assembler` is a live handle used by nothing else during the call; `peer` is valid
/// for reads of 32 bytes; `dropped` is null or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_assembler_forget_peer(
    assembler: *mut Assembler,
    peer: *const u8,
    dropped: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let a = unsafe { get_mut(assembler) }?;
        // SAFETY: forwarded from this function's contract.
        let peer = peer_key(unsafe { bytes(peer, BRMCP_WIRE_PEER_LEN) }?)?;
        let n = a.inner.forget_peer(&peer);
        if !dropped.is_null() {
            // SAFETY: non-null, so valid for writes by this function's contract.
            unsafe { put(dropped, n) }?;
        }
        Ok(())
    })
}

/// When `brmcp_wire_assembler_expire` next has work: writes `true` to `*has` and the
/// earliest second at which a partial message expires to `*deadline`, or `false` (and
/// 0) when none is held.
///
/// # Safety
/// `assembler` is a live handle; `has` and `deadline` are valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_assembler_next_deadline(
    assembler: *const Assembler,
    has: *mut bool,
    deadline: *mut i64,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let a = unsafe { get(assembler) }?;
        let next = a.inner.next_deadline();
        // SAFETY: forwarded from this function's contract.
        unsafe {
            put(has, next.is_some())?;
            put(deadline, next.map_or(0, UnixTime::secs))
        }
    })
}

/// Writes the partial messages and reserved bytes held, in total, to `*stats`.
///
/// # Safety
/// `assembler` is a live handle; `stats` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_assembler_stats(
    assembler: *const Assembler,
    stats: *mut Stats,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let s = unsafe { get(assembler) }?.inner.stats();
        // SAFETY: forwarded from this function's contract.
        unsafe { put(stats, stat(s)) }
    })
}

/// Writes the partial messages and reserved bytes of the 32-byte `peer` to `*stats`.
///
/// # Safety
/// `assembler` is a live handle; `peer` is valid for reads of 32 bytes; `stats` for
/// writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_assembler_peer_stats(
    assembler: *const Assembler,
    peer: *const u8,
    stats: *mut Stats,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let a = unsafe { get(assembler) }?;
        // SAFETY: forwarded from this function's contract.
        let peer = peer_key(unsafe { bytes(peer, BRMCP_WIRE_PEER_LEN) }?)?;
        // SAFETY: forwarded from this function's contract.
        unsafe { put(stats, stat(a.inner.peer_stats(&peer))) }
    })
}

const fn stat(s: brmcp_wire::Stats) -> Stats {
    Stats {
        messages: s.messages,
        bytes: s.bytes,
    }
}
