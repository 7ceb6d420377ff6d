//! Plans: what a read or a backward would do, without running it.
use std::fmt;
use std::ptr::{self, NonNull};

use crate::error::{check, Code, Error, Result};
use crate::tensor::Tensor;
use crate::text::read_text;
use koila_sys as sys;

/// What is planned: evaluating a tensor, or a backward from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Reading the tensor's values.
    Forward,
    /// Forward and backward from a scalar loss.
    Training,
}

impl Mode {
    fn raw(self) -> sys::koila_mode {
        match self {
            Mode::Forward => sys::KOILA_MODE_FORWARD,
            Mode::Training => sys::KOILA_MODE_TRAINING,
        }
    }
}

/// How koila would run a tensor now: batch, chunk, estimated peak, budget. Made without
/// running anything; fails as the run would (OutOfMemory, NotSplittable).
pub struct Plan {
    raw: NonNull<sys::koila_plan>,
}

// SAFETY: as Tensor: movable between threads, never used from two at once.
unsafe impl Send for Plan {}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { sys::koila_plan_free(self.raw.as_ptr()) }
    }
}

fn positive(v: i64) -> Option<i64> {
    (v >= 0).then_some(v)
}

impl Plan {
    /// Plans evaluating `t` ([`Mode::Forward`]) or a backward from it ([`Mode::Training`])
    /// under the current memory budget.
    pub fn new(t: &Tensor, mode: Mode) -> Result<Plan> {
        let mut out: *mut sys::koila_plan = ptr::null_mut();
        check(unsafe { sys::koila_plan_new(&mut out, t.as_ptr(), mode.raw()) })?;
        NonNull::new(out)
            .map(|raw| Plan { raw })
            .ok_or_else(|| Error::new(Code::Internal, "koila returned success but no plan"))
    }

    fn ptr(&self) -> *const sys::koila_plan {
        self.raw.as_ptr()
    }

    pub(crate) fn as_ptr(&self) -> *const sys::koila_plan {
        self.ptr()
    }

    /// The batch size, or None when the tensor has no lazy batch.
    pub fn batch_size(&self) -> Option<i64> {
        positive(unsafe { sys::koila_plan_batch_size(self.ptr()) })
    }

    /// The largest chunk (a power of two, or the whole batch when it fits); None without
    /// a batch.
    pub fn chunk_size(&self) -> Option<i64> {
        positive(unsafe { sys::koila_plan_chunk_size(self.ptr()) })
    }

    /// How many chunks run (1 when the whole batch runs at once).
    pub fn num_chunks(&self) -> i64 {
        unsafe { sys::koila_plan_num_chunks(self.ptr()) }
    }

    /// Estimated peak bytes on the device during the planned run, usage before included.
    pub fn peak_bytes(&self) -> u64 {
        unsafe { sys::koila_plan_peak_bytes(self.ptr()) }
    }

    /// Estimated peak bytes if the batch ran unsplit.
    pub fn full_peak_bytes(&self) -> u64 {
        unsafe { sys::koila_plan_full_peak_bytes(self.ptr()) }
    }

    /// The budget the plan was made under.
    pub fn budget_bytes(&self) -> u64 {
        unsafe { sys::koila_plan_budget_bytes(self.ptr()) }
    }

    /// The budget the planned run needs: bytes in use plus the estimate with koila's
    /// margin (a tenth of the estimate) on top. A run fits when this is at most the budget.
    pub fn needed_bytes(&self) -> u64 {
        unsafe { sys::koila_plan_needed_bytes(self.ptr()) }
    }

    /// The same if the batch ran unsplit: the batch is split exactly when this exceeds
    /// the budget.
    pub fn full_needed_bytes(&self) -> u64 {
        unsafe { sys::koila_plan_full_needed_bytes(self.ptr()) }
    }

    /// Bytes of activations a chunk frees in its forward and recomputes in its backward; 0
    /// when nothing is recomputed. `describe` names what and its cost.
    pub fn recomputed_bytes(&self) -> u64 {
        unsafe { sys::koila_plan_recomputed_bytes(self.ptr()) }
    }

    /// A human-readable account: batch, chunk, chunks, peak, budget and why.
    pub fn describe(&self) -> Result<String> {
        read_text(|buf, cap, needed| unsafe { sys::koila_plan_describe(self.ptr(), buf, cap, needed) })
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.describe() {
            Ok(text) => f.write_str(&text),
            Err(e) => write!(f, "<{e}>"),
        }
    }
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("batch_size", &self.batch_size())
            .field("chunk_size", &self.chunk_size())
            .field("num_chunks", &self.num_chunks())
            .field("peak_bytes", &self.peak_bytes())
            .field("full_peak_bytes", &self.full_peak_bytes())
            .field("budget_bytes", &self.budget_bytes())
            .finish()
    }
}
