//! The brmcp envelope: MCP messages carried in Bison Relay private messages.
//!
//! This crate is a pure function of (bytes, now, entropy, limits): it has no clock, no
//! random number generator, no allocator and no I/O. It parses PM bodies into borrowed
//! [`Part`]s, encodes parts into caller buffers, and splits payloads into [`Chunks`].
//! The byte-level format is specified in `WIRE.md` at the root of the repository.
//!
//! # Guarantees
//!
//! - `#![no_std]` without `alloc`: nothing here allocates.
//! - No I/O, clock or randomness: time and entropy are arguments.
//! - Every bound is a named constant in [`limits`], overridable through [`Limits`].
//! - No panics on any input, backed by fuzzing; no `unsafe` code in this crate.
//!   (The `std` feature turns on base64's runtime-detected SIMD engine, whose `unsafe`
//!   lives in base64; without it the scalar engine, free of `unsafe`, is used.)
//! - The default parser accepts exactly what the Go implementation accepts; a canonical
//!   mode accepts only what the encoder emits.
//!
//! # Architecture
//!
//! - [`parse`] / [`parse_with`]: PM text to [`Part`] (header plus undecoded body);
//!   [`Part::decode_body`] decodes the base64 body into a caller buffer. A part is valid
//!   when both succeed: the body's symbols are checked while decoding, so they are read
//!   once.
//! - [`encode_part`] / [`Header::encoded_len`]: a header and a chunk to PM text.
//! - [`Chunks`]: a payload to the headers and chunks of its parts.
//! - [`Assembler`]: parts back to messages, over caller storage, with every bound of
//!   [`Limits`]; [`Assembler::expire`] and [`Assembler::next_deadline`] drive clean-up.
//! - [`SessionId`] / [`MessageId`]: inline hex identifiers, from entropy.
//! - [`UnixTime`]: whole seconds; a part expires strictly after its `exp` second.
//!
//! # Example
//!
//! Split a message, send its parts out of order, and put it back together:
//!
//! ```
//! use brmcp_wire::{Accepted, Assembler, Chunks, Limits, MessageId, SessionId, UnixTime};
//! use brmcp_wire::{encode_part, parse};
//!
//! let sid = SessionId::from_entropy([1, 2, 3, 4, 5, 6, 7, 8]);
//! let mid = MessageId::from_entropy([8, 7, 6, 5, 4, 3, 2, 1]);
//! let payload = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
//!
//! // Sender: one PM per part.
//! let mut pms: Vec<String> = Vec::new();
//! let mut buf = [0u8; 256];
//! for (header, chunk) in Chunks::new(sid, mid, 0, payload, 16)? {
//!     let n = encode_part(&header, chunk, &mut buf)?;
//!     pms.push(String::from_utf8(buf[..n].to_vec())?);
//! }
//! assert_eq!(pms.len(), 3);
//! pms.swap(0, 2);
//!
//! // Receiver: storage is the caller's; the peer key is any small Copy value.
//! let (mut arena, mut scratch) = ([0u8; 1024], [0u8; 1024]);
//! let mut assembler: Assembler<'_, u32, 8> =
//!     Assembler::new(&mut arena, &mut scratch, Limits::default());
//! let now = UnixTime(1_767_225_600);
//! let mut delivered = None;
//! for pm in &pms {
//!     let part = parse(pm)?;
//!     if let Accepted::Complete(message) = assembler.add(7, &part, now)? {
//!         delivered = Some(message.to_vec());
//!     }
//! }
//! assert_eq!(delivered.as_deref(), Some(&payload[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Minimum supported Rust version
//!
//! The `rust-version` in `Cargo.toml`; raising it is a minor-version change.

#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc(test(attr(deny(warnings))))]
#![warn(clippy::std_instead_of_core, clippy::alloc_instead_of_core)]

#[cfg(test)]
extern crate std;

mod body;
mod encode;
mod envelope;
mod error;
#[cfg(any(fuzzing, test))]
pub mod fuzzing;
mod id;
pub mod limits;
mod parse;
mod reassembly;
mod time;
mod words;

pub use body::decode_body;
pub use encode::{Chunks, encode_part};
pub use envelope::{Header, Part};
pub use error::{AssembleError, BodyError, EncodeError, Field, ParseError};
#[cfg(feature = "getrandom")]
pub use id::EntropyError;
pub use id::{IdError, MessageId, SessionId};
pub use limits::{
    DEFAULT_CHUNK_LEN, Limits, MAX_ID_LEN, MAX_PARTS, MAX_PM_LEN, MAX_PM_PAYLOAD_LEN, VERSION,
};
pub use parse::{Mode, parse, parse_bytes, parse_canonical, parse_with};
pub use reassembly::{Accepted, Assembler, Stats, Verdict};
pub use time::{UnixTime, is_expired};
