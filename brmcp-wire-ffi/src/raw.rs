//! The boundary's checks: raw pointers to slices and references, and the last guard
//! against a panic crossing into C.

use core::panic::AssertUnwindSafe;

use crate::status::Status;

/// Runs `f`, turning a panic into [`Status::Internal`].
///
/// Nothing below is known to panic (brmcp-wire is fuzzed for it, and every pointer is
/// checked before use); this is the last guard, so that no unwind reaches C.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), Status>) -> Status {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => Status::Ok,
        Ok(Err(status)) => status,
        Err(_) => Status::Internal,
    }
}

/// The longest length a slice may have (`slice::from_raw_parts` requires it).
const MAX_SLICE_LEN: usize = isize::MAX as usize;

/// `len` bytes at `ptr`; a null `ptr` is the empty slice when `len` is 0.
///
/// # Safety
/// A non-null `ptr` is valid for reads of `len` bytes, unchanged for `'a`.
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], Status> {
    if ptr.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            Err(Status::NullPointer)
        };
    }
    if len > MAX_SLICE_LEN {
        return Err(Status::InvalidArgument);
    }
    // SAFETY: non-null and valid for `len` reads by the caller's contract; `len` fits isize.
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// `len` writable bytes at `ptr`; a null `ptr` is the empty slice when `len` is 0.
///
/// # Safety
/// A non-null `ptr` is valid for reads and writes of `len` bytes, used by nothing else
/// for `'a`.
pub(crate) unsafe fn bytes_mut<'a>(ptr: *mut u8, len: usize) -> Result<&'a mut [u8], Status> {
    if ptr.is_null() {
        return if len == 0 {
            Ok(&mut [])
        } else {
            Err(Status::NullPointer)
        };
    }
    if len > MAX_SLICE_LEN {
        return Err(Status::InvalidArgument);
    }
    // SAFETY: non-null and valid for `len` reads and writes, unaliased, by the caller's
    // contract; `len` fits isize.
    Ok(unsafe { core::slice::from_raw_parts_mut(ptr, len) })
}

/// The `T` at `ptr`.
///
/// # Safety
/// A non-null `ptr` points to a valid, aligned `T`, unchanged for `'a`.
pub(crate) unsafe fn get<'a, T>(ptr: *const T) -> Result<&'a T, Status> {
    // SAFETY: a non-null `ptr` is valid and aligned by the caller's contract.
    unsafe { ptr.as_ref() }.ok_or(Status::NullPointer)
}

/// Writes `value` to the out-parameter `ptr` (whose old bytes may be uninitialized).
///
/// # Safety
/// A non-null `ptr` is valid for writes of a `T` and aligned.
pub(crate) unsafe fn put<T>(ptr: *mut T, value: T) -> Result<(), Status> {
    if ptr.is_null() {
        return Err(Status::NullPointer);
    }
    // SAFETY: non-null, writable and aligned by the caller's contract; `write` reads
    // nothing of the old value.
    unsafe { ptr.write(value) };
    Ok(())
}

/// The `T` at `ptr`, to change in place.
///
/// # Safety
/// A non-null `ptr` points to a valid, aligned `T`, used by nothing else for `'a`.
pub(crate) unsafe fn get_mut<'a, T>(ptr: *mut T) -> Result<&'a mut T, Status> {
    // SAFETY: a non-null `ptr` is valid, aligned and unaliased by the caller's contract.
    unsafe { ptr.as_mut() }.ok_or(Status::NullPointer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_status() {
        assert_eq!(guard(|| panic!("boom")), Status::Internal);
        assert_eq!(guard(|| Err(Status::BadSeq)), Status::BadSeq);
        assert_eq!(guard(|| Ok(())), Status::Ok);
    }

    #[test]
    fn null_is_empty_only_at_length_zero() {
        // SAFETY: every call is refused before a byte is read: null, or a length over isize.
        unsafe {
            assert_eq!(bytes(core::ptr::null(), 0), Ok(&[][..]));
            assert_eq!(bytes(core::ptr::null(), 1), Err(Status::NullPointer));
            assert_eq!(
                bytes([0u8].as_ptr(), usize::MAX),
                Err(Status::InvalidArgument)
            );
        }
    }
}
