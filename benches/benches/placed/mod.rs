//! An input and an output buffer laid out the same way for both sides of a paired line.
//!
//! Two things about where buffers land change a routine's time and change from process
//! to process: a vector load or store crossing a cache line costs more, and a load
//! whose address agrees in its low 12 bits with a store still in flight waits for it
//! (4 KiB aliasing), which depends on where the output sits against the input. So the
//! paired lines give each side one allocation with its input and output at fixed places
//! within pages, the same for both sides: the input starts at a chosen offset within a
//! cache line, the output at the same offset half a page further on.

use std::ops::Range;

/// The page the low 12 bits of an address place a byte in.
const PAGE: usize = 4096;

/// How far within a page the output starts from the input's page offset: half a page,
/// the farthest from aliasing. The engine's output runs at 3/4 (decode) or 4/3 (encode)
/// of its input's pace, so over a 1 KiB part the two stay at least 1,600 bytes apart
/// within a page on either side.
const OUT_FROM_IN: usize = PAGE / 2;

/// One side's input and output, in one allocation.
pub(crate) struct Placed {
    buf: Vec<u8>,
    input: Range<usize>,
    output: Range<usize>,
}

impl Placed {
    /// `input` copied to start `place` bytes into a page, and `out_len` zeroed bytes
    /// starting [`OUT_FROM_IN`] further on within a later page.
    pub(crate) fn new(input: &[u8], out_len: usize, place: usize) -> Self {
        let in_pages = (place + input.len()).div_ceil(PAGE);
        let len = PAGE + (in_pages + 1) * PAGE + out_len;
        let buf = vec![0u8; len];
        let base = buf.as_ptr().align_offset(PAGE);
        let in_at = base + place;
        let out_at = base + in_pages * PAGE + (place + OUT_FROM_IN) % PAGE;
        let mut placed = Self {
            buf,
            input: in_at..in_at + input.len(),
            output: out_at..out_at + out_len,
        };
        let range = placed.input.clone();
        placed.buf[range].copy_from_slice(input);
        placed
    }

    /// The input and the output.
    pub(crate) fn split(&mut self) -> (&[u8], &mut [u8]) {
        let (front, back) = self.buf.split_at_mut(self.output.start);
        let out_len = self.output.len();
        (&front[self.input.clone()], &mut back[..out_len])
    }
}
