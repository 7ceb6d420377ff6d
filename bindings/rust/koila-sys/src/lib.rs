//! Raw declarations of koila's C API, generated from `include/koila.h` by bindgen
//! (`generate.sh`; ctest's `rust.sys_bindings_current` checks they match the header).
//!
//! Everything here is `unsafe` and follows the C conventions: statuses are
//! `*mut koila_status` (null is success), outputs come first, handles are freed with
//! the matching `koila_*_free`. The safe API is the `koila` crate.
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]
#![allow(clippy::all)]
// The C comments write shapes as [N, C]: text, not links.
#![allow(rustdoc::broken_intra_doc_links)]

include!("bindings.rs");

/// `koila.h`'s `KOILA_NO_BATCH` (`INT64_MIN`), which bindgen cannot evaluate.
pub const KOILA_NO_BATCH: i64 = i64::MIN;

/// The directory `libkoila.so` was linked from (what the build script found).
pub const LIB_DIR: &str = env!("KOILA_SYS_LIB_DIR");

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn links_and_calls_the_library() {
        let version = unsafe { CStr::from_ptr(koila_version()) }.to_str().unwrap();
        assert_eq!(version, format!("{KOILA_VERSION_MAJOR}.{KOILA_VERSION_MINOR}.{KOILA_VERSION_PATCH}"));
        // A status round trip: an unknown device is KOILA_ERROR_DEVICE with a message.
        let mut out: *mut koila_tensor = std::ptr::null_mut();
        let shape = [2i64];
        let s = unsafe { koila_tensor_zeros(&mut out, shape.as_ptr(), 1, KOILA_FLOAT32, b"tpu\0".as_ptr().cast()) };
        assert!(!s.is_null() && out.is_null());
        assert_eq!(unsafe { koila_status_code(s) }, KOILA_ERROR_DEVICE);
        assert!(!unsafe { CStr::from_ptr(koila_status_message(s)) }.to_bytes().is_empty());
        unsafe { koila_status_free(s) };
        // KOILA_NO_BATCH, defined by hand, is what the library takes for "no batch".
        let s = unsafe { koila_tensor_zeros(&mut out, shape.as_ptr(), 1, KOILA_FLOAT32, b"cpu\0".as_ptr().cast()) };
        assert!(s.is_null());
        let mut lazy: *mut koila_tensor = std::ptr::null_mut();
        assert!(unsafe { koila_lazy(&mut lazy, out, KOILA_NO_BATCH) }.is_null());
        let mut dim = 0i64;
        assert!(unsafe { koila_tensor_batch_dim(lazy, &mut dim) }.is_null());
        assert_eq!(dim, -1);
        unsafe { koila_tensor_free(lazy) };
        unsafe { koila_tensor_free(out) };
    }
}
