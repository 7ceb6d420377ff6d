//! Progress of chunked runs (a process-wide setting; thread-safe).
use std::ffi::CStr;
use std::os::raw::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use crate::error::{check, Result};
use koila_sys as sys;

type Callback = Arc<dyn Fn(&str, i64, i64) + Send + Sync>;

/// The closure in force. The C library holds only the trampoline; the closure lives here
/// until it is replaced or cleared.
static PROGRESS: Mutex<Option<Callback>> = Mutex::new(None);

extern "C" fn trampoline(_user: *mut c_void, what: *const c_char, done: i64, total: i64) {
    // Cloned out, so the closure may itself call set_progress without deadlocking.
    let callback = PROGRESS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let Some(callback) = callback else { return };
    // SAFETY: koila passes a NUL-terminated static string ("forward" or "backward").
    let what = if what.is_null() { "" } else { unsafe { CStr::from_ptr(what) }.to_str().unwrap_or("") };
    // A panic must not unwind into C: it is caught and dropped.
    let _ = catch_unwind(AssertUnwindSafe(|| callback(what, done, total)));
}

/// Calls `f(what, done, total)` after each chunk of a planned evaluation or backward, on
/// the thread running it: `what` is "forward" or "backward", `done` counts 1..`total`, the
/// number of chunks of that run (1 when it runs unsplit). A backward whose loss is
/// computed from values combined over the batch reports the combining pass as "forward"
/// first; a retry after running out of memory counts again from 1. Planning reports
/// nothing. `None` turns it off (as [`clear_progress`]). The closure may run on several
/// threads at once; it must not read lazy tensors, plan or call backward (those fail with
/// [`Code::Unsupported`](crate::Code::Unsupported) there); a panic in it is caught and
/// dropped.
pub fn set_progress<F>(f: Option<F>) -> Result<()>
where
    F: Fn(&str, i64, i64) + Send + Sync + 'static,
{
    let mut slot = PROGRESS.lock().unwrap_or_else(|e| e.into_inner());
    match f {
        Some(f) => {
            *slot = Some(Arc::new(f));
            check(unsafe { sys::koila_set_progress(Some(trampoline), std::ptr::null_mut()) })
        }
        None => {
            let status = check(unsafe { sys::koila_set_progress(None, std::ptr::null_mut()) });
            *slot = None;
            status
        }
    }
}

/// Turns progress reports off.
pub fn clear_progress() -> Result<()> {
    set_progress(None::<fn(&str, i64, i64)>)
}
