//! Parse, decode, encode, chunk planning and ids over caller buffers.

use core::ffi::c_char;

use brmcp_wire::{MessageId, Mode, SessionId, UnixTime};

use crate::raw::{bytes, bytes_mut, get, guard, put};
use crate::status::Status;
use crate::{BRMCP_WIRE_ID_BUF_LEN, BRMCP_WIRE_MODE_CANONICAL, BRMCP_WIRE_MODE_COMPATIBLE};

/// Every header field of one part. Ids are NUL-terminated and also carry their length.
///
/// Output of `brmcp_wire_parse` and `brmcp_wire_header_init`; input of the encoder, which
/// checks every field again (a caller may fill it in by hand).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Header {
    /// The session id: `sid_len` lowercase hex characters, then NUL.
    pub sid: [c_char; BRMCP_WIRE_ID_BUF_LEN],
    /// Length of `sid`, 1 to 32.
    pub sid_len: u8,
    /// The message id: `mid_len` lowercase hex characters, then NUL.
    pub mid: [c_char; BRMCP_WIRE_ID_BUF_LEN],
    /// Length of `mid`, 1 to 32.
    pub mid_len: u8,
    /// This part's number, from 1.
    pub seq: u16,
    /// How many parts the message has (1 to 64).
    pub total: u16,
    /// The deadline in unix seconds; 0 or below means none.
    pub exp: i64,
}

impl Header {
    const ZERO: Self = Self {
        sid: [0; BRMCP_WIRE_ID_BUF_LEN],
        sid_len: 0,
        mid: [0; BRMCP_WIRE_ID_BUF_LEN],
        mid_len: 0,
        seq: 0,
        total: 0,
        exp: 0,
    };

    fn from_rust(h: &brmcp_wire::Header) -> Self {
        let mut out = Self::ZERO;
        out.sid_len = id_into(h.sid().as_bytes(), &mut out.sid);
        out.mid_len = id_into(h.mid().as_bytes(), &mut out.mid);
        out.seq = h.seq();
        out.total = h.total();
        out.exp = h.exp();
        out
    }

    fn ids(&self) -> Result<(SessionId, MessageId), Status> {
        let sid = SessionId::from_bytes(id_bytes(&self.sid, self.sid_len)?.get())?;
        let mid = MessageId::from_bytes(id_bytes(&self.mid, self.mid_len)?.get())?;
        Ok((sid, mid))
    }

    fn to_rust(self) -> Result<brmcp_wire::Header, Status> {
        let (sid, mid) = self.ids()?;
        Ok(brmcp_wire::Header::new(
            sid, mid, self.seq, self.total, self.exp,
        )?)
    }
}

/// Copies an id (at most 32 bytes) into a NUL-terminated C buffer; returns its length.
fn id_into(id: &[u8], out: &mut [c_char; BRMCP_WIRE_ID_BUF_LEN]) -> u8 {
    for (o, &b) in out.iter_mut().zip(id) {
        *o = b as c_char;
    }
    let len = id.len().min(BRMCP_WIRE_ID_BUF_LEN - 1);
    out[len] = 0;
    u8::try_from(len).unwrap_or(0)
}

/// The first `len` bytes of an id buffer, as bytes; refused when `len` overruns it.
fn id_bytes(buf: &[c_char; BRMCP_WIRE_ID_BUF_LEN], len: u8) -> Result<IdBytes, Status> {
    let len = usize::from(len);
    if len >= BRMCP_WIRE_ID_BUF_LEN {
        return Err(Status::IdTooLong);
    }
    let mut bytes = [0u8; BRMCP_WIRE_ID_BUF_LEN];
    for (b, &c) in bytes.iter_mut().zip(&buf[..len]) {
        // `c_char` is `i8` or `u8`: the same bits either way.
        *b = c as u8;
    }
    Ok(IdBytes { bytes, len })
}

/// An id copied out of a C buffer.
struct IdBytes {
    bytes: [u8; BRMCP_WIRE_ID_BUF_LEN],
    len: usize,
}

impl IdBytes {
    fn get(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// One parsed part: its header, where its base64 body lies in the text, and a buffer
/// size that always holds the decoded body.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Part {
    /// The header fields.
    pub header: Header,
    /// Offset of the base64 body in the parsed text.
    pub body_offset: usize,
    /// Length of the base64 body, in bytes.
    pub body_len: usize,
    /// A buffer of this size always holds the decoded body (exact without whitespace).
    pub decoded_len_max: usize,
}

fn mode(mode: u32) -> Result<Mode, Status> {
    match mode {
        BRMCP_WIRE_MODE_COMPATIBLE => Ok(Mode::Compatible),
        BRMCP_WIRE_MODE_CANONICAL => Ok(Mode::Canonical),
        _ => Err(Status::InvalidArgument),
    }
}

/// Parses the text through the crate and gives its part, borrowed from `text`.
pub(crate) fn parse_text(text: &[u8], mode_value: u32) -> Result<brmcp_wire::Part<'_>, Status> {
    Ok(brmcp_wire::parse_with(text, mode(mode_value)?)?)
}

/// Parses one PM body of `text_len` bytes at `text` into `*part`.
///
/// `mode` is `BRMCP_WIRE_MODE_COMPATIBLE` (what the Go implementation accepts) or
/// `BRMCP_WIRE_MODE_CANONICAL` (only the encoder's form). The text is bytes: it need not
/// be UTF-8, and invalid UTF-8 gets the verdict the grammar gives it. The body is not
/// decoded: a part is valid when `brmcp_wire_decode_body` also succeeds. `*part` is
/// written only on success.
///
/// # Safety
/// `text` is valid for reads of `text_len` bytes (or null when `text_len` is 0); `part`
/// is valid for writes of a `brmcp_wire_part`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_parse(
    text: *const u8,
    text_len: usize,
    mode: u32,
    part: *mut Part,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let text = unsafe { bytes(text, text_len) }?;
        let parsed = parse_text(text, mode)?;
        let body = parsed.body();
        let out = Part {
            header: Header::from_rust(parsed.header()),
            body_offset: body.as_ptr() as usize - text.as_ptr() as usize,
            body_len: body.len(),
            decoded_len_max: parsed.decoded_len_max(),
        };
        // SAFETY: forwarded from this function's contract.
        unsafe { put(part, out) }
    })
}

/// Decodes a part's base64 body (`text + part.body_offset`, `part.body_len` bytes) into
/// `out`, writing the decoded length to `*written`.
///
/// `mode` is the mode the part was parsed in. When `out_len` is too small the status is
/// `BRMCP_WIRE_STATUS_BUFFER_TOO_SMALL` and `*written` is the size needed;
/// `part.decoded_len_max` always suffices.
///
/// # Safety
/// `body` is valid for reads of `body_len` bytes and `out` for writes of `out_len`
/// bytes (either null when its length is 0), not overlapping; `written` is valid for
/// writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_decode_body(
    body: *const u8,
    body_len: usize,
    mode: u32,
    out: *mut u8,
    out_len: usize,
    written: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let body = unsafe { bytes(body, body_len) }?;
        // SAFETY: forwarded from this function's contract.
        let out = unsafe { bytes_mut(out, out_len) }?;
        let mode = self::mode(mode)?;
        let (status, n) = match brmcp_wire::decode_body(body, mode, out) {
            Ok(n) => (Ok(()), n),
            Err(brmcp_wire::BodyError::BufferTooSmall { required }) => {
                (Err(Status::BufferTooSmall), required)
            }
            Err(e) => return Err(e.into()),
        };
        // SAFETY: forwarded from this function's contract.
        unsafe { put(written, n) }?;
        status
    })
}

/// Checks that `id` (`id_len` bytes) is a valid session or message id: 1 to 32
/// lowercase hex characters.
///
/// # Safety
/// `id` is valid for reads of `id_len` bytes (or null when `id_len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_check_id(id: *const u8, id_len: usize) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let id = unsafe { bytes(id, id_len) }?;
        SessionId::from_bytes(id)?;
        Ok(())
    })
}

/// Writes a 16-character lowercase hex id made from 8 bytes of caller entropy, then NUL,
/// to `out` (17 bytes).
///
/// The library has no random source: take the entropy from the operating system.
///
/// # Safety
/// `entropy` is valid for reads of 8 bytes; `out` for writes of 17 bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_id_from_entropy(
    entropy: *const u8,
    out: *mut c_char,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let entropy = unsafe { bytes(entropy, 8) }?;
        let mut seed = [0u8; 8];
        seed.copy_from_slice(entropy);
        let id = MessageId::from_entropy(seed);
        // SAFETY: forwarded from this function's contract.
        let out = unsafe { bytes_mut(out.cast::<u8>(), 17) }?;
        out[..16].copy_from_slice(id.as_bytes());
        out[16] = 0;
        Ok(())
    })
}

/// Fills `*header` after checking every field: ids of 1 to 32 lowercase hex characters,
/// `1 <= seq <= total <= 64`. `exp` is in unix seconds, 0 or below for none.
///
/// # Safety
/// `sid` and `mid` are valid for reads of their lengths; `header` for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_header_init(
    header: *mut Header,
    sid: *const u8,
    sid_len: usize,
    mid: *const u8,
    mid_len: usize,
    seq: u16,
    total: u16,
    exp: i64,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let (sid, mid) = unsafe { (bytes(sid, sid_len)?, bytes(mid, mid_len)?) };
        let sid = SessionId::from_bytes(sid)?;
        let mid = MessageId::from_bytes(mid)?;
        let h = brmcp_wire::Header::new(sid, mid, seq, total, exp)?;
        // SAFETY: forwarded from this function's contract.
        unsafe { put(header, Header::from_rust(&h)) }
    })
}

/// Writes to `*len` the exact length of the PM body that encodes `*header` with a chunk
/// of `chunk_len` raw bytes.
///
/// # Safety
/// `header` is valid for reads; `len` for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_encoded_len(
    header: *const Header,
    chunk_len: usize,
    len: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let h = unsafe { get(header) }?.to_rust()?;
        // SAFETY: forwarded from this function's contract.
        unsafe { put(len, h.encoded_len(chunk_len)) }
    })
}

/// Encodes one part, `*header` and the base64 of `chunk`, into `out`; writes the length
/// to `*written`.
///
/// Byte-identical to the Go encoder. When `out_len` is too small the status is
/// `BRMCP_WIRE_STATUS_BUFFER_TOO_SMALL` and `*written` is the exact size needed. The
/// output is ASCII and not NUL-terminated.
///
/// # Safety
/// `header` is valid for reads; `chunk` for reads of `chunk_len` bytes; `out` for
/// writes of `out_len` bytes, not overlapping `chunk`; `written` for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_encode_part(
    header: *const Header,
    chunk: *const u8,
    chunk_len: usize,
    out: *mut u8,
    out_len: usize,
    written: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let h = unsafe { get(header) }?.to_rust()?;
        // SAFETY: forwarded from this function's contract.
        let chunk = unsafe { bytes(chunk, chunk_len) }?;
        // SAFETY: forwarded from this function's contract.
        let out = unsafe { bytes_mut(out, out_len) }?;
        let (status, n) = match brmcp_wire::encode_part(&h, chunk, out) {
            Ok(n) => (Ok(()), n),
            Err(brmcp_wire::EncodeError::BufferTooSmall { required }) => {
                (Err(Status::BufferTooSmall), required)
            }
            Err(e) => return Err(e.into()),
        };
        // SAFETY: forwarded from this function's contract.
        unsafe { put(written, n) }?;
        status
    })
}

/// The plan of one message: a payload split into `total` parts of `chunk_len` bytes
/// (the last holds the rest), under one session id, message id and deadline.
///
/// Filled by `brmcp_wire_chunks_init`; `brmcp_wire_chunks_part` gives part `seq`. The
/// payload is borrowed: keep it alive and unchanged while the plan is used.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Chunks {
    /// Session id, message id and deadline of every part (`seq` and `total` as part 1's).
    pub header: Header,
    /// The payload.
    pub payload: *const u8,
    /// Length of the payload.
    pub payload_len: usize,
    /// Raw bytes per part.
    pub chunk_len: usize,
    /// How many parts the message has.
    pub total: u16,
    /// The longest PM body among the parts: a buffer this long encodes any of them.
    pub max_pm_len: usize,
}

impl Chunks {
    /// The crate's iterator over this plan, checked again.
    ///
    /// # Safety
    /// `self.payload` is valid for reads of `self.payload_len` bytes for `'a`.
    unsafe fn plan<'a>(&self) -> Result<brmcp_wire::Chunks<'a>, Status> {
        let (sid, mid) = self.header.ids()?;
        // SAFETY: forwarded from this function's contract.
        let payload = unsafe { bytes(self.payload, self.payload_len) }?;
        Ok(brmcp_wire::Chunks::new(
            sid,
            mid,
            self.header.exp,
            payload,
            self.chunk_len,
        )?)
    }
}

/// Plans the parts of `payload` into `*chunks`: `chunk_len` raw bytes per part, each
/// stamped with `sid`, `mid` and deadline `exp` (unix seconds, 0 for none).
///
/// Refuses an empty payload, a zero chunk length, more than 64 parts, and a chunk length
/// that would make a PM over the 1 MiB limit.
///
/// # Safety
/// `sid`, `mid` and `payload` are valid for reads of their lengths (`payload` for as
/// long as the plan is used); `chunks` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_chunks_init(
    chunks: *mut Chunks,
    sid: *const u8,
    sid_len: usize,
    mid: *const u8,
    mid_len: usize,
    exp: i64,
    payload: *const u8,
    payload_len: usize,
    chunk_len: usize,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let (sid, mid) = unsafe { (bytes(sid, sid_len)?, bytes(mid, mid_len)?) };
        let sid = SessionId::from_bytes(sid)?;
        let mid = MessageId::from_bytes(mid)?;
        // SAFETY: forwarded from this function's contract.
        let body = unsafe { bytes(payload, payload_len) }?;
        let plan = brmcp_wire::Chunks::new(sid, mid, exp, body, chunk_len)?;
        let mut first = plan.clone();
        let header = first.next().map(|(h, _)| h).ok_or(Status::Internal)?;
        let out = Chunks {
            header: Header::from_rust(&header),
            payload,
            payload_len,
            chunk_len,
            total: plan.total(),
            max_pm_len: plan.max_pm_len(),
        };
        // SAFETY: forwarded from this function's contract.
        unsafe { put(chunks, out) }
    })
}

/// Gives part `seq` (1 to `chunks->total`) of a plan: its header in `*header`, and its
/// chunk, a range of the payload, in `*chunk` and `*chunk_len`.
///
/// # Safety
/// `chunks` is valid for reads and was filled by `brmcp_wire_chunks_init` over a payload
/// still alive and unchanged; `header`, `chunk` and `chunk_len` are valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn brmcp_wire_chunks_part(
    chunks: *const Chunks,
    seq: u16,
    header: *mut Header,
    chunk: *mut *const u8,
    chunk_len: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let mut plan = unsafe { get(chunks)?.plan()? };
        if seq < 1 || seq > plan.total() {
            return Err(Status::BadSeq);
        }
        let (h, c) = plan.nth(usize::from(seq - 1)).ok_or(Status::Internal)?;
        // SAFETY: forwarded from this function's contract.
        unsafe {
            put(header, Header::from_rust(&h))?;
            put(chunk, c.as_ptr())?;
            put(chunk_len, c.len())
        }
    })
}

/// Whether a part stamped `exp` has expired at `now` (unix seconds): `exp > 0` and `now`
/// strictly after it.
#[unsafe(no_mangle)]
pub extern "C" fn brmcp_wire_is_expired(exp: i64, now: i64) -> bool {
    brmcp_wire::is_expired(exp, UnixTime(now))
}
