//! Statuses turned into errors, in one place.
use std::ffi::{CStr, CString};
use std::fmt;
use std::path::Path;

use koila_sys as sys;

/// What kind of failure an [`Error`] is (koila.h's `koila_code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// A bad argument: bad dim, bad size, a string with a NUL byte.
    InvalidArgument,
    /// Shapes that do not fit the op; the message names both.
    Shape,
    /// A dtype the op does not take, or a read into the wrong element type.
    DType,
    /// An unknown or unavailable device.
    Device,
    /// Not even a chunk of one sample fits the memory budget.
    OutOfMemory,
    /// The graph mixes samples across the batch and does not fit unsplit.
    NotSplittable,
    /// A file missing, unreadable or corrupt.
    Io,
    /// Something koila does not do.
    Unsupported,
    /// A bug in koila.
    Internal,
    /// A code this version of the crate does not know (a newer libkoila).
    Other(u32),
}

impl Code {
    pub(crate) fn from_raw(code: sys::koila_code) -> Code {
        match code {
            sys::KOILA_ERROR_INVALID_ARGUMENT => Code::InvalidArgument,
            sys::KOILA_ERROR_SHAPE => Code::Shape,
            sys::KOILA_ERROR_DTYPE => Code::DType,
            sys::KOILA_ERROR_DEVICE => Code::Device,
            sys::KOILA_ERROR_OUT_OF_MEMORY => Code::OutOfMemory,
            sys::KOILA_ERROR_NOT_SPLITTABLE => Code::NotSplittable,
            sys::KOILA_ERROR_IO => Code::Io,
            sys::KOILA_ERROR_UNSUPPORTED => Code::Unsupported,
            sys::KOILA_ERROR_INTERNAL => Code::Internal,
            other => Code::Other(other),
        }
    }

    /// The C value (`KOILA_ERROR_*`).
    pub fn raw(self) -> u32 {
        match self {
            Code::InvalidArgument => sys::KOILA_ERROR_INVALID_ARGUMENT,
            Code::Shape => sys::KOILA_ERROR_SHAPE,
            Code::DType => sys::KOILA_ERROR_DTYPE,
            Code::Device => sys::KOILA_ERROR_DEVICE,
            Code::OutOfMemory => sys::KOILA_ERROR_OUT_OF_MEMORY,
            Code::NotSplittable => sys::KOILA_ERROR_NOT_SPLITTABLE,
            Code::Io => sys::KOILA_ERROR_IO,
            Code::Unsupported => sys::KOILA_ERROR_UNSUPPORTED,
            Code::Internal => sys::KOILA_ERROR_INTERNAL,
            Code::Other(c) => c,
        }
    }
}

/// A failed koila call: its code and koila's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    code: Code,
    message: String,
}

/// `std::result::Result` with koila's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error made on the Rust side (before reaching C).
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }

    /// What kind of failure this is.
    pub fn code(&self) -> Code {
        self.code
    }

    /// koila's message, e.g. `"koila_add: inputs [2, 3] Float, [4] Float: The size of tensor a (3)
    /// must match the size of tensor b (4) at non-singleton dimension 1"`.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "koila error ({:?}): {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

/// Takes ownership of a status: `Ok` for null, else its code and message (and frees it).
pub(crate) fn check(status: *mut sys::koila_status) -> Result<()> {
    if status.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null status from koila is valid until freed, and freed once, here.
    unsafe {
        let code = Code::from_raw(sys::koila_status_code(status));
        let message = CStr::from_ptr(sys::koila_status_message(status)).to_string_lossy().into_owned();
        sys::koila_status_free(status);
        Err(Error { code, message })
    }
}

/// A path as a C string (its bytes as they are); a NUL byte inside is an InvalidArgument error.
pub(crate) fn path_string(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::new(Code::InvalidArgument, format!("path contains a NUL byte: {}", path.display())))
}

/// A Rust string as a C string; a NUL byte inside is an InvalidArgument error.
pub(crate) fn c_string(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(Code::InvalidArgument, format!("{what} contains a NUL byte: {s:?}")))
}
