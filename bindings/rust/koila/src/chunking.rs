//! Chunking options: how planned runs split the batch (process-wide settings; thread-safe).
//! Read when a plan is made; [`Plan::describe`](crate::Plan::describe) says which applied.
use crate::error::{check, Result};
use koila_sys as sys;

/// How batch norm in training ([`Tensor::batch_norm`](crate::Tensor::batch_norm) with
/// `training`, and BatchNorm layers of modules in training) is chunked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BatchStats {
    /// The default: batch norm normalizes with the statistics of the whole batch, so it
    /// couples the batch. The run is unsplit or fails with
    /// [`Code::NotSplittable`](crate::Code::NotSplittable), whose message names this option.
    #[default]
    Exact,
    /// When the batch is split, each chunk normalizes with its own mean and variance, as
    /// gradient accumulation does; results and gradients differ from the unsplit ones.
    /// Running statistics get one update with the whole batch's statistics per evaluation
    /// or backward. An unsplit run is unchanged.
    PerChunk,
}

impl BatchStats {
    fn raw(self) -> sys::koila_batch_stats {
        match self {
            BatchStats::Exact => sys::KOILA_BATCH_STATS_EXACT,
            BatchStats::PerChunk => sys::KOILA_BATCH_STATS_PER_CHUNK,
        }
    }
}

/// Which chunk size a plan picks among those that fit the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Chunking {
    /// The default: the whole batch if it fits, else the largest power of two.
    #[default]
    Largest,
    /// Among the chunk sizes that fit, the one measured fastest: the first runs of a graph
    /// structure time the candidates, later runs use the winner. Results stay equal to the
    /// unsplit ones up to float rounding.
    Fastest,
}

impl Chunking {
    fn raw(self) -> sys::koila_chunking {
        match self {
            Chunking::Largest => sys::KOILA_CHUNK_LARGEST,
            Chunking::Fastest => sys::KOILA_CHUNK_FASTEST,
        }
    }
}

/// Whether a backward that fits no chunk frees activations in its forward and recomputes them
/// in its backward (`koila_set_recompute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Recompute {
    /// Never: a backward that fits no chunk is refused, as before recomputation existed.
    Off,
    /// The default: only where no chunk fits without it, as little as makes the run fit, then
    /// the largest chunk that fits with it.
    #[default]
    AsNeeded,
    /// Rather than split: where the unsplit run does not fit, the largest chunk that fits
    /// recomputing (the whole batch first).
    Preferred,
}

impl Recompute {
    fn raw(self) -> sys::koila_recompute {
        match self {
            Recompute::Off => sys::KOILA_RECOMPUTE_OFF,
            Recompute::AsNeeded => sys::KOILA_RECOMPUTE_AS_NEEDED,
            Recompute::Preferred => sys::KOILA_RECOMPUTE_PREFERRED,
        }
    }
}

/// Sets whether plans made from now on may recompute activations (process-wide).
pub fn set_recompute(policy: Recompute) -> Result<()> {
    check(unsafe { sys::koila_set_recompute(policy.raw()) })
}

/// Sets how batch norm in training is chunked, for plans made from now on.
pub fn set_batch_stats(policy: BatchStats) -> Result<()> {
    check(unsafe { sys::koila_set_batch_stats(policy.raw()) })
}

/// Sets which chunk size plans pick, for plans made from now on.
pub fn set_chunking(policy: Chunking) -> Result<()> {
    check(unsafe { sys::koila_set_chunking(policy.raw()) })
}
