//! Text out of koila (`buf, capacity, needed` calls).
use std::os::raw::c_char;

use crate::error::{check, Result};
use koila_sys as sys;

/// Calls `f(buf, capacity, needed)` until the text fits, and returns it.
pub(crate) fn read_text(mut f: impl FnMut(*mut c_char, usize, *mut usize) -> *mut sys::koila_status) -> Result<String> {
    let mut needed = 0usize;
    check(f(std::ptr::null_mut(), 0, &mut needed))?;
    loop {
        let mut buf = vec![0u8; needed.max(1)];
        let capacity = buf.len();
        check(f(buf.as_mut_ptr().cast(), capacity, &mut needed))?;
        if needed <= capacity {
            let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            buf.truncate(len);
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        // The text grew between the two calls (a tensor re-evaluated): try again.
    }
}
