//! koila: lazy LibTorch tensors that never run out of memory.
//!
//! A safe Rust API over koila's C library (`libkoila.so`, declared in `koila-sys`).
//! Wrap an input in one line — [`Tensor::lazy`] — and everything computed from it is
//! deferred into a graph whose shapes and dtypes are known at once. Reading a value
//! ([`Tensor::to_vec`], [`Tensor::item`], printing) or calling [`Tensor::backward`]
//! estimates the peak memory of the work and, when the whole batch does not fit the
//! device's budget, runs it in chunks of the largest power of two of samples that fits;
//! results and gradients equal the unsplit ones.
//!
//! ```
//! use koila::{DType, Reduction, Tensor};
//! # fn main() -> koila::Result<()> {
//! let images = Tensor::randn(&[256, 784], DType::Float32, "cpu")?;
//! let labels = Tensor::from_slice(&(0..256).map(|i| i % 10).collect::<Vec<i64>>(), &[256])?;
//! let (x, y) = (images.lazy(0)?, labels.lazy(0)?); // dim 0 is the batch
//! let mut w = Tensor::randn(&[10, 784], DType::Float32, "cpu")?.mul_scalar(0.01)?;
//! w.set_requires_grad(true)?;
//! let loss = x.linear(&w, None)?.cross_entropy(&y, Reduction::Mean)?;
//! assert_eq!(loss.shape()?, Vec::<i64>::new()); // known without running anything
//! loss.backward()?;                               // runs, chunked if it must
//! let grad = w.grad()?.expect("w has a gradient");
//! # Ok(()) }
//! ```
//!
//! Checkpoints: [`Module::save`] and [`Optimizer::save`] between two steps, loaded back with
//! [`Module::load`] and [`Optimizer::load`], continue a run bit for bit. [`clip_grad_norm`]
//! clips gradients; the [`dlpack`] module shares memory with other array libraries.
//!
//! Every call returns [`Result`]; the [`Error`] carries koila's [`Code`] and message.
//! Handles ([`Tensor`], [`Plan`], [`Module`], [`Optimizer`]) free themselves on drop, in
//! any order (a tensor keeps alive what it depends on). They are `Send` but not `Sync`:
//! a handle may move to another thread but is never used from two at once, as koila's
//! C contract requires.
#![warn(missing_docs)]

mod error;
mod dtype;
mod tensor;
mod ops;
mod ops_table;
mod plan;
mod memory;
mod chunking;
mod progress;
mod module;
mod optim;
pub mod dlpack;
mod group;
mod text;
mod timeline;

pub use chunking::{set_batch_stats, set_chunking, set_recompute, BatchStats, Chunking, Recompute};
pub use dtype::{DType, Element};
pub use error::{Code, Error, Result};
pub use group::Group;
pub use memory::{memory_budget, memory_reset_peak, memory_stats, set_memory_budget, MemoryStats};
pub use module::{Module, ModuleKind};
pub use optim::{clip_grad_norm, AdamOptions, Optimizer, SgdOptions};
pub use ops::Reduction;
pub use plan::{Mode, Plan};
pub use progress::{clear_progress, set_progress};
pub use tensor::Tensor;
pub use timeline::{MemoryPart, Phase, Timeline, TimelineEvent};

/// The raw C declarations, for what the safe API does not wrap.
pub use koila_sys as sys;

/// koila's version ("0.1.0").
pub fn version() -> &'static str {
    // SAFETY: koila_version returns a NUL-terminated string in static storage.
    let s = unsafe { std::ffi::CStr::from_ptr(sys::koila_version()) };
    s.to_str().unwrap_or("")
}

/// Seeds every random generator koila uses (randn, dropout) on every device.
pub fn manual_seed(seed: u64) -> Result<()> {
    error::check(unsafe { sys::koila_manual_seed(seed) })
}

/// Saves the state of every random generator koila uses (the CPU's, and each CUDA device's),
/// which [`manual_seed`] seeds. Atomic, as [`Optimizer::save`]: `path` holds afterwards the
/// complete old file or the complete new one; a failed write is [`Code::Io`]. With the module
/// and optimizer files, a run restarted from them continues bit for bit, dropout included.
/// Planning never draws from these generators: a seeded step gives the same result whether or
/// not its structure was planned before.
pub fn rng_save(path: impl AsRef<std::path::Path>) -> Result<()> {
    let path = error::path_string(path.as_ref())?;
    error::check(unsafe { sys::koila_rng_save(path.as_ptr()) })
}

/// Loads what [`rng_save`] wrote: every generator the file holds takes its saved state. A
/// missing, truncated or corrupt file, or one written by a newer koila, is [`Code::Io`]; a
/// file holding a CUDA device this process lacks is [`Code::InvalidArgument`]. Either way no
/// generator changes.
pub fn rng_load(path: impl AsRef<std::path::Path>) -> Result<()> {
    let path = error::path_string(path.as_ref())?;
    error::check(unsafe { sys::koila_rng_load(path.as_ptr()) })
}
