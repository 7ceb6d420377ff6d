//! Process groups: data-parallel training across processes (and GPUs), on LibTorch's c10d.
use std::ptr::{self, NonNull};
use std::time::Duration;

use crate::error::{c_string, check, Code, Error, Result};
use crate::tensor::{pointers, Tensor};
use koila_sys as sys;

/// A group of processes that train one model data-parallel: each holds the model and
/// trains on its own shard of the batch, and [`Group::backward`] leaves every rank with the
/// gradients of the loss over the union of the shards. Collectives are matched by order:
/// every rank makes the same calls in the same order. After a failed collective
/// ([`Code::Io`]: a rank died or timed out) the group is unusable; drop it.
pub struct Group {
    raw: NonNull<sys::koila_group>,
}

// SAFETY: as Tensor: movable between threads, never used from two at once.
unsafe impl Send for Group {}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { sys::koila_group_free(self.raw.as_ptr()) }
    }
}

impl Group {
    /// Joins a group of `world_size` processes as `rank`. `backend`: `"gloo"` (CPU tensors)
    /// or `"nccl"` (CUDA, when LibTorch has it); `init`: `"tcp://HOST:PORT"` (rank 0
    /// listens there) or `"file:///PATH"`. `timeout` bounds the rendezvous and every later
    /// collective ([`Code::Io`] when the others do not come in time).
    pub fn new(backend: &str, init: &str, rank: i32, world_size: i32, timeout: Duration) -> Result<Group> {
        let backend = c_string("backend", backend)?;
        let init = c_string("init", init)?;
        let ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        let mut out: *mut sys::koila_group = ptr::null_mut();
        check(unsafe { sys::koila_group_new(&mut out, backend.as_ptr(), init.as_ptr(), rank, world_size, ms) })?;
        NonNull::new(out)
            .map(|raw| Group { raw })
            .ok_or_else(|| Error::new(Code::Internal, "koila returned success but no group"))
    }

    /// Joins the group a launcher describes in the environment, as torchrun
    /// (`torchrun --nproc-per-node N --no-python ./program`) sets it for each worker: `RANK`,
    /// `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`, and the launcher's own store
    /// where `TORCHELASTIC_USE_AGENT_STORE` is `True`. A missing or malformed variable is
    /// [`Code::InvalidArgument`] naming it; timeouts and failures as [`Group::new`]. c10d's
    /// store has no authentication: keep `MASTER_ADDR` on a private network.
    pub fn from_env(backend: &str, timeout: Duration) -> Result<Group> {
        let backend = c_string("backend", backend)?;
        let ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        let mut out: *mut sys::koila_group = ptr::null_mut();
        check(unsafe { sys::koila_group_new_from_env(&mut out, backend.as_ptr(), ms) })?;
        NonNull::new(out)
            .map(|raw| Group { raw })
            .ok_or_else(|| Error::new(Code::Internal, "koila returned success but no group"))
    }

    /// `LOCAL_RANK` for a group joined from the environment (the CUDA device of `"nccl"`);
    /// the rank for one made by [`Group::new`].
    pub fn local_rank(&self) -> i32 {
        unsafe { sys::koila_group_local_rank(self.raw.as_ptr()) }
    }

    /// This process's rank, 0..size().
    pub fn rank(&self) -> i32 {
        unsafe { sys::koila_group_rank(self.raw.as_ptr()) }
    }

    /// The number of processes in the group.
    pub fn size(&self) -> i32 {
        unsafe { sys::koila_group_size(self.raw.as_ptr()) }
    }

    /// Every rank ends with `root`'s values of `tensors` (concrete, the same shapes on every
    /// rank), e.g. the parameters before training.
    pub fn broadcast(&mut self, tensors: &[&Tensor], root: i32) -> Result<()> {
        let ptrs = pointers(tensors);
        check(unsafe { sys::koila_group_broadcast(self.raw.as_ptr(), ptrs.as_ptr(), ptrs.len(), root) })
    }

    /// Backward from this rank's `loss` over its own shard (chunked under the local
    /// budget), then the gradient of the loss over the union of the shards is added into
    /// the `.grad` of `params` on every rank (a MEAN loss weighs each rank by the count it
    /// averaged over). `params` lists every tensor the gradients reach, in the same order
    /// on every rank. When any rank fails, every rank fails naming it, and no gradient
    /// changes.
    pub fn backward(&mut self, loss: &Tensor, params: &[&Tensor]) -> Result<()> {
        let ptrs = pointers(params);
        check(unsafe { sys::koila_group_backward(self.raw.as_ptr(), loss.as_ptr(), ptrs.as_ptr(), ptrs.len()) })
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("rank", &self.rank()).field("size", &self.size()).finish()
    }
}
