//! Optimizers over concrete floating-point leaves that require grad, their state files, and
//! gradient clipping.
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::error::{check, path_string, Code, Error, Result};
use crate::tensor::{pointers, Tensor};
use koila_sys as sys;

/// SGD settings (torch::optim::SGD): weight decay is L2 added to the gradient.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdOptions {
    /// Learning rate.
    pub lr: f64,
    /// Momentum (0: none).
    pub momentum: f64,
    /// L2 weight decay.
    pub weight_decay: f64,
}

impl SgdOptions {
    /// Plain SGD with this learning rate.
    pub fn new(lr: f64) -> SgdOptions {
        SgdOptions { lr, momentum: 0.0, weight_decay: 0.0 }
    }
    /// With momentum.
    pub fn momentum(mut self, momentum: f64) -> SgdOptions {
        self.momentum = momentum;
        self
    }
    /// With L2 weight decay.
    pub fn weight_decay(mut self, weight_decay: f64) -> SgdOptions {
        self.weight_decay = weight_decay;
        self
    }
}

/// Adam and AdamW settings: [`Optimizer::adam`] adds the weight decay to the gradient (L2,
/// torch::optim::Adam), [`Optimizer::adamw`] decouples it (torch.optim.AdamW).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamOptions {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moment estimates.
    pub betas: (f64, f64),
    /// Added to the denominator.
    pub eps: f64,
    /// Weight decay: L2 for Adam, decoupled for AdamW.
    pub weight_decay: f64,
}

impl Default for AdamOptions {
    /// PyTorch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay.
    fn default() -> AdamOptions {
        AdamOptions { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.0 }
    }
}

impl AdamOptions {
    /// PyTorch's defaults with this learning rate.
    pub fn new(lr: f64) -> AdamOptions {
        AdamOptions { lr, ..AdamOptions::default() }
    }
    /// With weight decay (L2 for Adam, decoupled for AdamW; PyTorch's AdamW default is 1e-2).
    pub fn weight_decay(mut self, weight_decay: f64) -> AdamOptions {
        self.weight_decay = weight_decay;
        self
    }
}

/// An optimizer updating parameters in place from their gradients.
pub struct Optimizer {
    raw: NonNull<sys::koila_optimizer>,
}

// SAFETY: as Tensor: movable between threads, never used from two at once.
unsafe impl Send for Optimizer {}

impl Drop for Optimizer {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { sys::koila_optimizer_free(self.raw.as_ptr()) }
    }
}

/// Runs a C call that makes an optimizer over `params` (its handles, their count) through `out`.
fn make(
    params: &[&Tensor],
    f: impl FnOnce(*mut *mut sys::koila_optimizer, *const *mut sys::koila_tensor, usize) -> *mut sys::koila_status,
) -> Result<Optimizer> {
    let ptrs = pointers(params);
    let mut out: *mut sys::koila_optimizer = ptr::null_mut();
    check(f(&mut out, ptrs.as_ptr(), ptrs.len()))?;
    NonNull::new(out)
        .map(|raw| Optimizer { raw })
        .ok_or_else(|| Error::new(Code::Internal, "koila returned success but no optimizer"))
}

impl Optimizer {
    /// SGD over `params` (each at most once). The optimizer keeps what it needs: the
    /// parameter handles may be dropped.
    pub fn sgd(params: &[&Tensor], options: SgdOptions) -> Result<Optimizer> {
        let o = options;
        make(params, |out, p, n| unsafe { sys::koila_optimizer_sgd(out, p, n, o.lr, o.momentum, o.weight_decay) })
    }

    /// Adam over `params` (each at most once); weight decay is L2, added to the gradient.
    pub fn adam(params: &[&Tensor], options: AdamOptions) -> Result<Optimizer> {
        let o = options;
        make(params, |out, p, n| unsafe {
            sys::koila_optimizer_adam(out, p, n, o.lr, o.betas.0, o.betas.1, o.eps, o.weight_decay)
        })
    }

    /// AdamW over `params` (each at most once), as torch.optim.AdamW: each step first shrinks
    /// the parameters by `lr * weight_decay` (decoupled weight decay), then makes Adam's
    /// update; the gradient is not changed. The same ranges as [`Optimizer::adam`].
    pub fn adamw(params: &[&Tensor], options: AdamOptions) -> Result<Optimizer> {
        let o = options;
        make(params, |out, p, n| unsafe {
            sys::koila_optimizer_adamw(out, p, n, o.lr, o.betas.0, o.betas.1, o.eps, o.weight_decay)
        })
    }

    /// Updates the parameters from their gradients (those without one are skipped).
    pub fn step(&mut self) -> Result<()> {
        check(unsafe { sys::koila_optimizer_step(self.raw.as_ptr()) })
    }

    /// Sets the parameters' gradients to zero in place, and gives each parameter without one
    /// a zero gradient: every step's backward then starts alike, which a run resumed from a
    /// checkpoint needs to continue bit for bit.
    pub fn zero_grad(&mut self) -> Result<()> {
        check(unsafe { sys::koila_optimizer_zero_grad(self.raw.as_ptr()) })
    }

    /// Sets the learning rate of every later step (>= 0 and finite; a schedule is your loop
    /// calling this). It is saved and loaded with the optimizer's state.
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        check(unsafe { sys::koila_optimizer_set_lr(self.raw.as_ptr(), lr) })
    }

    /// The learning rate in force.
    pub fn lr(&self) -> Result<f64> {
        let mut lr = 0.0;
        check(unsafe { sys::koila_optimizer_lr(self.raw.as_ptr(), &mut lr) })?;
        Ok(lr)
    }

    /// Saves the optimizer's whole state: its kind, hyperparameters (the learning rate in
    /// force included) and, per parameter, its step count and moment or momentum buffers.
    /// With [`Module::save`](crate::Module::save) between two steps, a run that stops and
    /// restarts from both files continues bit for bit as if it never stopped. Atomic, as
    /// `Module::save`: `path` holds afterwards the complete old file or the complete new one;
    /// a failed write is [`Code::Io`] with the old file as it was.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_string(path.as_ref())?;
        check(unsafe { sys::koila_optimizer_save(self.raw.as_ptr(), path.as_ptr()) })
    }

    /// Loads what [`Optimizer::save`] wrote into this optimizer, which must be of the same
    /// kind over parameters of the same number, dtypes and shapes, in the same order (the
    /// parameters' values are the module's: load them with [`Module::load`](crate::Module::load)).
    /// The file's hyperparameters replace this optimizer's. A mismatch is
    /// [`Code::InvalidArgument`] naming the first one; a missing, truncated or corrupt file, or
    /// one written by a newer koila, is [`Code::Io`]. Either way the optimizer is unchanged.
    pub fn load(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_string(path.as_ref())?;
        check(unsafe { sys::koila_optimizer_load(self.raw.as_ptr(), path.as_ptr()) })
    }
}

/// Scales the gradients of `params` in place so that their joint 2-norm is at most
/// `max_norm` (>= 0 and finite), as torch.nn.utils.clip_grad_norm_: every gradient is
/// multiplied by `min(1, max_norm / (norm + 1e-6))`. Returns the norm before clipping.
/// `params` are concrete leaves, each at most once, as for [`Optimizer::sgd`]; those
/// without a gradient are skipped (with none the norm is 0). After [`Tensor::backward`] the
/// gradients are the whole batch's, also when it ran in chunks. A norm that is not finite
/// (an inf or NaN in a gradient) is [`Code::InvalidArgument`], whose message states the
/// norm, with no gradient changed: skip that step.
pub fn clip_grad_norm(params: &[&Tensor], max_norm: f64) -> Result<f64> {
    let ptrs = pointers(params);
    let mut norm = 0.0;
    check(unsafe { sys::koila_clip_grad_norm(&mut norm, ptrs.as_ptr(), ptrs.len(), max_norm) })?;
    Ok(norm)
}

impl std::fmt::Debug for Optimizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Optimizer").field("raw", &self.raw).finish()
    }
}
