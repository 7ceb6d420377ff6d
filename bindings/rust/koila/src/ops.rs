//! The operators' types and helpers; their methods, one per op, are generated from the
//! operator table (src/ops/ops.toml) into ops_table.rs. Each returns a new tensor: lazy when
//! any input is lazy, else computed at once. Shape and dtype errors come from the call that
//! builds the op, never later.
//! Dims are koila's (0-based; negative counts from the end), as in PyTorch.
use std::ptr;

use crate::error::{Code, Error, Result};
use crate::tensor::{pointers, Tensor};
use koila_sys as sys;

/// How a loss reduces over its elements (koila.h's `koila_reduction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// One loss per element.
    None,
    /// The mean; chunked runs scale it exactly (also for uneven chunks).
    Mean,
    /// The sum.
    Sum,
}

impl Reduction {
    pub(crate) fn raw(self) -> sys::koila_reduction {
        match self {
            Reduction::None => sys::KOILA_REDUCTION_NONE,
            Reduction::Mean => sys::KOILA_REDUCTION_MEAN,
            Reduction::Sum => sys::KOILA_REDUCTION_SUM,
        }
    }
}

pub(crate) fn opt_array<const N: usize>(a: &Option<[i64; N]>) -> *const i64 {
    a.as_ref().map_or(ptr::null(), |a| a.as_ptr())
}

pub(crate) fn list(ts: &[&Tensor], what: &str) -> Result<Vec<*mut sys::koila_tensor>> {
    if ts.is_empty() {
        return Err(Error::new(Code::InvalidArgument, format!("{what}: no tensors given")));
    }
    Ok(pointers(ts))
}
