//! Optimizers over concrete floating-point leaves that require grad.
use std::ptr::{self, NonNull};

use crate::error::{check, Code, Error, Result};
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

/// Adam settings (torch::optim::Adam): weight decay is L2, not AdamW.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamOptions {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moment estimates.
    pub betas: (f64, f64),
    /// Added to the denominator.
    pub eps: f64,
    /// L2 weight decay.
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

fn wrap(out: *mut sys::koila_optimizer) -> Result<Optimizer> {
    NonNull::new(out)
        .map(|raw| Optimizer { raw })
        .ok_or_else(|| Error::new(Code::Internal, "koila returned success but no optimizer"))
}

impl Optimizer {
    /// SGD over `params` (each at most once). The optimizer keeps what it needs: the
    /// parameter handles may be dropped.
    pub fn sgd(params: &[&Tensor], options: SgdOptions) -> Result<Optimizer> {
        let ptrs = pointers(params);
        let mut out: *mut sys::koila_optimizer = ptr::null_mut();
        check(unsafe {
            sys::koila_optimizer_sgd(&mut out, ptrs.as_ptr(), ptrs.len(), options.lr, options.momentum, options.weight_decay)
        })?;
        wrap(out)
    }

    /// Adam over `params` (each at most once).
    pub fn adam(params: &[&Tensor], options: AdamOptions) -> Result<Optimizer> {
        let ptrs = pointers(params);
        let mut out: *mut sys::koila_optimizer = ptr::null_mut();
        check(unsafe {
            sys::koila_optimizer_adam(
                &mut out,
                ptrs.as_ptr(),
                ptrs.len(),
                options.lr,
                options.betas.0,
                options.betas.1,
                options.eps,
                options.weight_decay,
            )
        })?;
        wrap(out)
    }

    /// Updates the parameters from their gradients (those without one are skipped).
    pub fn step(&mut self) -> Result<()> {
        check(unsafe { sys::koila_optimizer_step(self.raw.as_ptr()) })
    }

    /// Sets the parameters' gradients to zero in place.
    pub fn zero_grad(&mut self) -> Result<()> {
        check(unsafe { sys::koila_optimizer_zero_grad(self.raw.as_ptr()) })
    }
}

impl std::fmt::Debug for Optimizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Optimizer").field("raw", &self.raw).finish()
    }
}
