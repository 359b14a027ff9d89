//! Bounded reassembly of multi-part messages over caller storage (WIRE.md §6).
//!
//! [`Assembler`] keeps partial messages in a byte arena the caller provides. Each chunk is
//! decoded straight into its final place in its message's region, so a message is copied
//! once, from base64 into the arena. A single-part message never takes a slot: it is
//! decoded into a caller scratch buffer. Time is passed in; nothing here allocates,
//! blocks or panics.
//!
//! # Order of checks in [`Assembler::add`]
//!
//! 1. partial messages whose deadline or timeout passed are dropped (as [`Assembler::expire`]);
//! 2. the part's own deadline ([`AssembleError::Expired`]; its message is not touched);
//! 3. single-part: size bound, then body; done;
//! 4. the message's slot: per-peer pending bound, free slot, then the part count must
//!    match the message's (else the message is dropped), then duplicates are ignored;
//! 5. with the part's exact decoded length: geometry (all parts but the last are equally
//!    long, the last is not longer), message size (the smallest final size the geometry
//!    allows), the peer's byte budget, the total byte budget (on reserved bytes);
//! 6. the body itself.
//!
//! Any error at step 4 (part count) or later drops the message, except an invalid body:
//! that refuses only its part, and the message stays as it was (a receiver that decodes
//! while parsing, as the Go implementation, would never have let the part reach it).

use heapless::Vec;

use crate::body;
use crate::envelope::Part;
use crate::error::{AssembleError, BodyError};
use crate::id::{MessageId, SessionId};
use crate::limits::Limits;
use crate::time::{UnixTime, is_expired};

/// What [`Assembler::add`] did with a part.
///
/// Exhaustive on purpose, like httparse's `Status`: callers match every outcome.
#[derive(Debug, PartialEq, Eq)]
pub enum Accepted<'a> {
    /// The part completed its message: the whole payload, in seq order. Valid until the
    /// next call on the assembler.
    Complete(&'a [u8]),
    /// The part was stored; its message is still incomplete.
    Pending,
    /// The part's seq was already received for its message; it was ignored.
    Duplicate,
}

/// What [`Assembler::check`] found [`Assembler::add`] would do with a part, short of
/// an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `add` would ignore the part as a duplicate ([`Accepted::Duplicate`]).
    Duplicate,
    /// Only `add` can tell: the part may be stored, complete its message, or be refused
    /// for its body or for what it does to a message already held.
    Undecided,
}

/// Bytes and messages held, in total or for one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Partial messages held.
    pub messages: usize,
    /// Arena bytes reserved for them.
    pub bytes: usize,
}

/// One partial message: its key, geometry and region of the arena.
#[derive(Debug, Clone, Copy)]
struct Slot<P> {
    peer: P,
    sid: SessionId,
    mid: MessageId,
    total: u16,
    /// Bit `seq - 1` set once part `seq` is stored.
    received: u64,
    /// Length of every part but the last; 0 while only the last part has arrived.
    chunk_len: usize,
    /// Length of the last part; 0 until it arrives.
    last_len: usize,
    /// Region of the arena: `offset .. offset + size`.
    offset: usize,
    size: usize,
    /// Deadline of the first part that arrived (WIRE.md §6).
    exp: i64,
    first_seen: UnixTime,
}

impl<P> Slot<P> {
    fn has(&self, seq: u16) -> bool {
        self.received & (1u64 << (seq - 1)) != 0
    }

    fn expired(&self, now: UnixTime, timeout_secs: u64) -> bool {
        is_expired(self.exp, now) || timed_out(self.first_seen, now, timeout_secs)
    }

    /// The first second at which [`Self::expired`] holds.
    fn deadline(&self, timeout_secs: u64) -> UnixTime {
        let timeout = self
            .first_seen
            .saturating_add(timeout_secs)
            .saturating_add(1);
        if self.exp > 0 {
            let exp = UnixTime(self.exp).saturating_add(1);
            if exp < timeout { exp } else { timeout }
        } else {
            timeout
        }
    }
}

fn timed_out(first_seen: UnixTime, now: UnixTime, timeout_secs: u64) -> bool {
    let elapsed = now.0.saturating_sub(first_seen.0);
    elapsed > 0 && elapsed.unsigned_abs() > timeout_secs
}

/// The layout a part would give its message: what the checks of step 5 compute.
#[derive(Debug, Clone, Copy)]
struct Plan {
    chunk_len: usize,
    last_len: usize,
    /// Bytes the region needs.
    size: usize,
}

/// Reassembles multi-part messages from many peers within fixed storage.
///
/// `P` identifies a peer (the adapter uses the 32-byte Bison Relay uid); `SLOTS` bounds
/// how many partial messages exist at once.
///
/// Invariants, after every call:
/// - regions lie inside the arena, do not overlap, and `slots` is sorted by offset;
/// - the reserved bytes (sum of region sizes) are at most
///   `min(limits.max_total_bytes, arena.len())`, and per peer at most
///   `limits.max_peer_bytes`;
/// - each peer has at most `limits.max_pending_per_peer` partial messages;
/// - each slot's `total` is in `2..=MAX_PARTS` and its region holds every received part
///   at `(seq - 1) * chunk_len` (the last part alone at 0 while `chunk_len` is unknown).
pub struct Assembler<'s, P, const SLOTS: usize> {
    arena: &'s mut [u8],
    scratch: &'s mut [u8],
    limits: Limits,
    slots: Vec<Slot<P>, SLOTS>,
}

impl<P: core::fmt::Debug, const SLOTS: usize> core::fmt::Debug for Assembler<'_, P, SLOTS> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Assembler")
            .field("arena_len", &self.arena.len())
            .field("scratch_len", &self.scratch.len())
            .field("limits", &self.limits)
            .field("messages", &self.slots.len())
            .finish()
    }
}

impl<'s, P: Copy + Eq, const SLOTS: usize> Assembler<'s, P, SLOTS> {
    /// An assembler keeping partial messages in `arena` and decoding single-part messages
    /// into `scratch`.
    ///
    /// Reserved bytes never exceed `arena.len()`; a single-part message longer than
    /// `scratch.len()` is refused as too large, as one over `limits.max_message_bytes`.
    pub fn new(arena: &'s mut [u8], scratch: &'s mut [u8], limits: Limits) -> Self {
        Self {
            arena,
            scratch,
            limits,
            slots: Vec::new(),
        }
    }

    /// The limits in force.
    pub const fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Adds one part from `peer` at time `now`.
    ///
    /// # Errors
    /// [`AssembleError`] names the rule or bound the part broke; see the module docs for
    /// the order of checks and which errors drop the message.
    pub fn add(
        &mut self,
        peer: P,
        part: &Part<'_>,
        now: UnixTime,
    ) -> Result<Accepted<'_>, AssembleError> {
        self.expire(now);
        if part.header().is_expired(now) {
            return Err(AssembleError::Expired);
        }
        if part.total() == 1 {
            return self.add_single(part);
        }

        let h = part.header();
        let mut index = match self.find(&peer, h.sid(), h.mid()) {
            Some(i) => i,
            None => self.open(peer, part, now)?,
        };
        if self.slots[index].total != h.total() {
            self.drop_slot(index);
            return Err(AssembleError::InconsistentTotal);
        }
        if self.slots[index].has(h.seq()) {
            return Ok(Accepted::Duplicate);
        }
        match self.store(&mut index, part) {
            Ok(true) => {
                let slot = self.slots.remove(index);
                Ok(Accepted::Complete(
                    &self.arena[slot.offset..slot.offset + slot.size],
                ))
            }
            Ok(false) => Ok(Accepted::Pending),
            Err(e) => {
                // A bad body refuses only its part, as a receiver that decodes while
                // parsing would; a message it would have opened is not kept.
                if !matches!(e, AssembleError::Body(_)) || self.slots[index].received == 0 {
                    self.drop_slot(index);
                }
                Err(e)
            }
        }
    }

    /// What [`add`](Self::add) would do with `part` from `peer` at `now`, judged from
    /// its header and its body's length, without decoding or copying the body and
    /// without changing anything: a host can refuse a part before paying for its body.
    ///
    /// Exact: `Err(e)` means `add` would return `Err(e)`, and [`Verdict::Duplicate`]
    /// that it would return [`Accepted::Duplicate`]; in both cases `add` would change
    /// nothing but [`expire`](Self::expire) partial messages due at `now`. Refusals
    /// decided here: [`AssembleError::Expired`], a single-part message over its size
    /// bound, and a new message over the peer's pending bound, the slot count, the
    /// message size bound or a byte budget. A part that would make `add` drop a message
    /// it holds is left [`Verdict::Undecided`].
    ///
    /// # Errors
    /// The error `add` would return.
    pub fn check(
        &self,
        peer: &P,
        part: &Part<'_>,
        now: UnixTime,
    ) -> Result<Verdict, AssembleError> {
        let h = part.header();
        if h.is_expired(now) {
            return Err(AssembleError::Expired);
        }
        if h.total() == 1 {
            return self.single_fits(part.body()).map(|()| Verdict::Undecided);
        }
        let timeout = self.limits.partial_timeout_secs;
        let mut live = self.slots.iter().filter(|s| !s.expired(now, timeout));
        if let Some(slot) = live
            .clone()
            .find(|s| s.peer == *peer && s.sid == *h.sid() && s.mid == *h.mid())
        {
            return Ok(if slot.total == h.total() && slot.has(h.seq()) {
                Verdict::Duplicate
            } else {
                Verdict::Undecided
            });
        }
        // A new message: `add` would open a slot, plan, and on refusal drop the slot.
        let (mut count, mut pending, mut peer_bytes, mut total_bytes) = (0, 0, 0, 0);
        for s in &mut live {
            count += 1;
            total_bytes += s.size;
            if s.peer == *peer {
                pending += 1;
                peer_bytes += s.size;
            }
        }
        if pending >= self.limits.max_pending_per_peer {
            return Err(AssembleError::PeerPending);
        }
        if count >= SLOTS {
            return Err(AssembleError::SlotsFull);
        }
        let slot = Slot {
            peer: *peer,
            sid: *h.sid(),
            mid: *h.mid(),
            total: h.total(),
            received: 0,
            chunk_len: 0,
            last_len: 0,
            offset: 0,
            size: 0,
            exp: h.exp(),
            first_seen: now,
        };
        let plan = |len| self.plan_for(&slot, h.seq(), len, peer_bytes, total_bytes);
        // As `store`: the claimed length, then the exact one if they differ.
        let claimed = part.decoded_len_max();
        let Err(e) = plan(claimed) else {
            return Ok(Verdict::Undecided);
        };
        let exact = part.decoded_len();
        if exact == claimed {
            return Err(e);
        }
        if exact == 0 {
            // `add` reports the body's own fault.
            return Ok(Verdict::Undecided);
        }
        plan(exact).map(|_| Verdict::Undecided)
    }

    /// Whether a single-part body fits the scratch buffer and the message size bound.
    fn single_fits(&self, body: &[u8]) -> Result<(), AssembleError> {
        let bound = self.limits.max_message_bytes.min(self.scratch.len());
        // The cheap upper bound decides in the common case; count symbols only near the bound.
        if body::decoded_len_max(body) > bound && body::decoded_len_exact(body) > bound {
            return Err(AssembleError::MessageTooLarge);
        }
        Ok(())
    }

    fn add_single(&mut self, part: &Part<'_>) -> Result<Accepted<'_>, AssembleError> {
        self.single_fits(part.body())?;
        let bound = self.limits.max_message_bytes.min(self.scratch.len());
        let n = part.decode_body(&mut self.scratch[..bound])?;
        Ok(Accepted::Complete(&self.scratch[..n]))
    }

    /// Opens a slot for a new message; its region is reserved when its first part is stored.
    fn open(&mut self, peer: P, part: &Part<'_>, now: UnixTime) -> Result<usize, AssembleError> {
        if self.peer_stats(&peer).messages >= self.limits.max_pending_per_peer {
            return Err(AssembleError::PeerPending);
        }
        let h = part.header();
        let slot = Slot {
            peer,
            sid: *h.sid(),
            mid: *h.mid(),
            total: h.total(),
            received: 0,
            chunk_len: 0,
            last_len: 0,
            offset: self.used_end(),
            size: 0,
            exp: h.exp(),
            first_seen: now,
        };
        // An empty region at the end keeps the slots sorted by offset.
        self.slots
            .push(slot)
            .map_err(|_| AssembleError::SlotsFull)?;
        Ok(self.slots.len() - 1)
    }

    /// Checks and stores part `part` in slot `*index` (which may move); `Ok(true)` when the
    /// message is complete.
    fn store(&mut self, index: &mut usize, part: &Part<'_>) -> Result<bool, AssembleError> {
        let seq = part.seq();
        let i = *index;
        let old = self.slots[i];
        let is_last = seq == old.total;
        if old.chunk_len != 0 {
            // Geometry known: the part's place is fixed, so decode first and check after.
            let start = usize::from(seq - 1) * old.chunk_len;
            let room = if is_last {
                old.size - start
            } else {
                old.chunk_len
            };
            let decoded = part.decode_body(&mut self.arena[old.offset + start..][..room]);
            let len = match decoded {
                Ok(n) => n,
                Err(e) => {
                    // Report the first failing check in the documented order; a body
                    // without symbols has no length to check.
                    let exact = part.decoded_len();
                    if exact != 0 {
                        self.plan(i, seq, exact)?;
                    }
                    return Err(e.into());
                }
            };
            // A middle part of the known chunk length leaves the layout as it is: its
            // bounds held when the layout was planned, so there is nothing to check.
            if is_last || len != old.chunk_len {
                let plan = self.plan(i, seq, len)?;
                *index = self.commit(i, plan);
            }
        } else {
            // The part sets the geometry, so its length must be known before it is placed.
            // Without whitespace the body's length gives it exactly; a body with
            // whitespace decodes shorter, and is placed again with its true length.
            let claimed = part.decoded_len_max();
            let mut len = claimed;
            loop {
                let plan = match self.plan(*index, seq, len) {
                    Ok(plan) => plan,
                    // Refused at the claimed length: try the exact one (a scan of the
                    // body), once.
                    Err(e) if len == claimed => {
                        let exact = part.decoded_len();
                        if exact == claimed {
                            return Err(e);
                        }
                        if exact == 0 {
                            // No symbols to measure: the body itself is what is wrong.
                            let e = part.decode_body(&mut []).err();
                            return Err(e.unwrap_or(BodyError::Empty).into());
                        }
                        len = exact;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                *index = self.commit(*index, plan);
                let slot = self.slots[*index];
                let start = if is_last {
                    slot.size - len
                } else {
                    usize::from(seq - 1) * slot.chunk_len
                };
                match part.decode_body(&mut self.arena[slot.offset + start..][..len]) {
                    Ok(n) if n == len => break,
                    Ok(n) => {
                        self.revert(*index, &old);
                        len = n;
                    }
                    Err(e) => {
                        self.revert(*index, &old);
                        // Report the first failing check in the documented order.
                        let exact = part.decoded_len();
                        if exact != len && exact != 0 {
                            self.plan(*index, seq, exact)?;
                        }
                        return Err(e.into());
                    }
                }
            }
        }
        let slot = &mut self.slots[*index];
        slot.received |= 1u64 << (seq - 1);
        Ok(slot.received.count_ones() == u32::from(slot.total))
    }

    /// Step 5: the layout part `seq` of `len` bytes gives slot `index`, or the bound it breaks.
    fn plan(&self, index: usize, seq: u16, len: usize) -> Result<Plan, AssembleError> {
        let slot = &self.slots[index];
        let peer = self.peer_stats(&slot.peer).bytes - slot.size;
        let others = self.stats().bytes - slot.size;
        self.plan_for(slot, seq, len, peer, others)
    }

    /// [`plan`](Self::plan) for `slot`, with the bytes the peer's other messages and all
    /// other messages reserve.
    fn plan_for(
        &self,
        slot: &Slot<P>,
        seq: u16,
        len: usize,
        peer: usize,
        others: usize,
    ) -> Result<Plan, AssembleError> {
        let total = usize::from(slot.total);
        let is_last = seq == slot.total;
        if len == 0 {
            return Err(AssembleError::Body(BodyError::Empty));
        }
        let (chunk_len, last_len) = if is_last {
            if slot.chunk_len != 0 && len > slot.chunk_len {
                return Err(AssembleError::Geometry);
            }
            (slot.chunk_len, len)
        } else {
            if slot.chunk_len != 0 && len != slot.chunk_len
                || slot.chunk_len == 0 && len < slot.last_len
            {
                return Err(AssembleError::Geometry);
            }
            (len, slot.last_len)
        };
        let (size, min_final) = if chunk_len == 0 {
            // Only the last part so far: every other part is at least as long.
            (last_len, last_len.saturating_mul(total))
        } else {
            let body = (total - 1).saturating_mul(chunk_len);
            if last_len == 0 {
                (body.saturating_add(chunk_len), body.saturating_add(1))
            } else {
                (body.saturating_add(last_len), body.saturating_add(last_len))
            }
        };
        if min_final > self.limits.max_message_bytes {
            return Err(AssembleError::MessageTooLarge);
        }
        if peer.saturating_add(size) > self.limits.max_peer_bytes {
            return Err(AssembleError::PeerBytes);
        }
        if others.saturating_add(size) > self.total_limit() {
            return Err(AssembleError::TotalBytes);
        }
        Ok(Plan {
            chunk_len,
            last_len,
            size,
        })
    }

    /// Gives slot `index` the region `plan` needs, keeping its stored parts in place;
    /// returns the slot's new index.
    fn commit(&mut self, index: usize, plan: Plan) -> usize {
        let old = self.slots[index];
        let tail_moves = old.chunk_len == 0 && old.last_len != 0 && plan.chunk_len != 0;
        let index = if plan.size > old.size {
            self.grow(index, plan.size)
        } else {
            index
        };
        let slot = &mut self.slots[index];
        slot.size = plan.size;
        slot.chunk_len = plan.chunk_len;
        slot.last_len = plan.last_len;
        if tail_moves {
            // The last part sat alone at the region's start; its place is now the end.
            let from = slot.offset;
            let to = slot.offset + plan.size - plan.last_len;
            self.arena.copy_within(from..from + plan.last_len, to);
        }
        index
    }

    /// Undoes [`commit`](Self::commit) for a part whose body proved invalid: the message's
    /// layout is as it was before, its region possibly moved.
    fn revert(&mut self, index: usize, old: &Slot<P>) {
        let slot = &mut self.slots[index];
        if old.chunk_len == 0 && old.last_len != 0 && slot.chunk_len != 0 {
            // The last part had moved to the region's end; put it back at the start.
            let from = slot.offset + slot.size - old.last_len;
            self.arena
                .copy_within(from..from + old.last_len, slot.offset);
        }
        slot.size = old.size;
        slot.chunk_len = old.chunk_len;
        slot.last_len = old.last_len;
    }

    /// Grows slot `index`'s region to `size` bytes, moving regions if needed; returns its
    /// new index. The budget checks guarantee the arena has room.
    fn grow(&mut self, index: usize, size: usize) -> usize {
        let slot = self.slots[index];
        let limit = self.next_start(index);
        if slot.offset + size <= limit {
            return index;
        }
        if slot.size == 0 {
            // A new region: first fit between existing ones, else compact.
            self.slots.remove(index);
            let offset = self.first_fit(size).unwrap_or_else(|| self.compact());
            return self.place(slot, offset);
        }
        // A free gap elsewhere that holds the grown region: move this region's bytes
        // there (a copy of its own size only).
        if let Some(offset) = self.first_fit(size) {
            self.slots.remove(index);
            self.arena
                .copy_within(slot.offset..slot.offset + slot.size, offset);
            return self.place(slot, offset);
        }
        // Last resort: pack every region at the start, then rotate this one to the end of
        // the packed bytes so it can grow into the free space after it.
        let used = self.compact();
        let slot = self.slots.remove(index);
        self.arena[slot.offset..used].rotate_left(slot.size);
        for s in self.slots.iter_mut().skip(index) {
            s.offset -= slot.size;
        }
        let mut slot = slot;
        slot.offset = used - slot.size;
        let at = self.slots.len();
        let _ = self.slots.push(slot);
        at
    }

    /// Puts `slot`, just removed, back with its region at `offset`, keeping the slots
    /// ordered by offset; returns its index.
    fn place(&mut self, mut slot: Slot<P>, offset: usize) -> usize {
        slot.offset = offset;
        let at = self.slots.partition_point(|s| s.offset < offset);
        // Cannot fail: a slot was just removed.
        let _ = self.slots.insert(at, slot);
        at
    }

    /// Lowest offset with `size` free bytes before the next region (or the arena's end).
    fn first_fit(&self, size: usize) -> Option<usize> {
        let mut start = 0;
        for s in &self.slots {
            if s.offset >= start + size {
                return Some(start);
            }
            start = start.max(s.offset + s.size);
        }
        (start + size <= self.arena.len()).then_some(start)
    }

    /// Slides every region down to close the gaps; returns the end of the packed bytes.
    fn compact(&mut self) -> usize {
        let mut cursor = 0;
        for s in &mut self.slots {
            if s.offset != cursor {
                self.arena.copy_within(s.offset..s.offset + s.size, cursor);
                s.offset = cursor;
            }
            cursor += s.size;
        }
        cursor
    }

    /// Start of the region after slot `index`, or the arena's end.
    fn next_start(&self, index: usize) -> usize {
        self.slots
            .get(index + 1)
            .map_or(self.arena.len(), |s| s.offset)
    }

    fn used_end(&self) -> usize {
        self.slots.last().map_or(0, |s| s.offset + s.size)
    }

    fn total_limit(&self) -> usize {
        self.limits.max_total_bytes.min(self.arena.len())
    }

    fn find(&self, peer: &P, sid: &SessionId, mid: &MessageId) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.peer == *peer && s.sid == *sid && s.mid == *mid)
    }

    fn drop_slot(&mut self, index: usize) {
        self.slots.remove(index);
    }

    /// Drops every partial message whose first part's deadline passed or that is older
    /// than the partial timeout; returns how many.
    pub fn expire(&mut self, now: UnixTime) -> usize {
        let timeout = self.limits.partial_timeout_secs;
        let before = self.slots.len();
        self.slots.retain(|s| !s.expired(now, timeout));
        before - self.slots.len()
    }

    /// Drops every partial message from `peer`; returns how many.
    pub fn forget_peer(&mut self, peer: &P) -> usize {
        let before = self.slots.len();
        self.slots.retain(|s| s.peer != *peer);
        before - self.slots.len()
    }

    /// When [`expire`](Self::expire) next has work: the earliest second at which a partial
    /// message expires, or `None` when none is held.
    pub fn next_deadline(&self) -> Option<UnixTime> {
        let timeout = self.limits.partial_timeout_secs;
        self.slots.iter().map(|s| s.deadline(timeout)).min()
    }

    /// Partial messages and reserved bytes, in total.
    pub fn stats(&self) -> Stats {
        Stats {
            messages: self.slots.len(),
            bytes: self.slots.iter().map(|s| s.size).sum(),
        }
    }

    /// Partial messages and reserved bytes of one peer.
    pub fn peer_stats(&self, peer: &P) -> Stats {
        self.slots
            .iter()
            .filter(|s| s.peer == *peer)
            .fold(Stats::default(), |acc, s| Stats {
                messages: acc.messages + 1,
                bytes: acc.bytes + s.size,
            })
    }
}
