//! Modules: TorchScript files and torch.export programs (.pt2).
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::error::{c_string, check, path_string, Code, Error, Result};
use crate::tensor::{make, or_null, pointers, Tensor};
use crate::text::read_text;
use koila_sys as sys;

/// What a module was loaded from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleKind {
    /// A TorchScript file (torch.jit.script/trace, or C++).
    TorchScript,
    /// A program saved by torch.export.save (PyTorch 2.x, `.pt2`): it keeps the mode and the
    /// static shapes it was exported with.
    Exported,
}

/// A TorchScript module (saved by torch.jit.script/trace, or from C++) or an exported
/// program (torch.export.save, `.pt2`). A call is part of the lazy graph: shape, dtype and
/// batch dim of the result are known at once, and the planner splits it like any op (unless
/// the module mixes samples across the batch).
pub struct Module {
    raw: NonNull<sys::koila_module>,
}

// SAFETY: as Tensor: movable between threads, never used from two at once.
unsafe impl Send for Module {}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: owned, freed once. Results built from the module keep it alive.
        unsafe { sys::koila_module_free(self.raw.as_ptr()) }
    }
}

impl Module {
    /// Loads a module onto a device ("cpu", "cuda", "cuda:N"): a TorchScript file or a
    /// `.pt2` archive of torch.export (the content decides). A missing, unreadable or
    /// corrupt file is an [`Code::Io`] error naming the path; a program koila cannot run is
    /// [`Code::Unsupported`], naming what.
    pub fn load(path: impl AsRef<Path>, device: &str) -> Result<Module> {
        let path = path_string(path.as_ref())?;
        let device = c_string("device", device)?;
        let mut out: *mut sys::koila_module = ptr::null_mut();
        check(unsafe { sys::koila_module_load(&mut out, path.as_ptr(), device.as_ptr()) })?;
        NonNull::new(out)
            .map(|raw| Module { raw })
            .ok_or_else(|| Error::new(Code::Internal, "koila returned success but no module"))
    }

    fn ptr(&self) -> *mut sys::koila_module {
        self.raw.as_ptr()
    }

    /// Saves the module with its current parameters and buffers, in the form it was loaded
    /// from (TorchScript, or a `.pt2` that torch.export.load reads). Atomic: `path` holds
    /// afterwards the complete old file or the complete new one, whatever happens to the
    /// process during the call (`koila_module_save`).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path_string(path.as_ref())?;
        check(unsafe { sys::koila_module_save(self.ptr(), path.as_ptr()) })
    }

    /// `forward(inputs...)`: lazy when any input is lazy, else computed at once. Inputs
    /// the module rejects fail here with its complaint (InvalidArgument, Shape).
    pub fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let ptrs = pointers(inputs);
        make(|out| unsafe { sys::koila_module_forward(out, self.ptr(), or_null(&ptrs), ptrs.len()) })
    }

    /// Every result of `forward(inputs...)` when it returns several tensors: a tuple, a list
    /// or a dict, nested ones flattened depth-first (dict entries in the order the module
    /// returns them), `None` for a None entry. Each result is lazy when any input is, with
    /// its own batch dim or none; one call runs the module once for all of them. A module
    /// that returns one tensor gives one. Results of another type are [`Code::Unsupported`].
    pub fn forward_all(&self, inputs: &[&Tensor]) -> Result<Vec<Option<Tensor>>> {
        let ptrs = pointers(inputs);
        let mut count = 0usize;
        // The count first (capacity 0: koila writes it and fails with InvalidArgument).
        let status = unsafe {
            sys::koila_module_forward_all(ptr::null_mut(), 0, &mut count, self.ptr(), or_null(&ptrs), ptrs.len())
        };
        if let Err(e) = check(status) {
            if e.code() != Code::InvalidArgument || count == 0 {
                return Err(e);
            }
        }
        let mut raw: Vec<*mut sys::koila_tensor> = vec![ptr::null_mut(); count];
        check(unsafe {
            sys::koila_module_forward_all(raw.as_mut_ptr(), raw.len(), &mut count, self.ptr(), or_null(&ptrs), ptrs.len())
        })?;
        // SAFETY: on success each non-null entry is a new handle the caller owns.
        Ok(raw.into_iter().map(|t| unsafe { Tensor::from_raw(t) }).collect())
    }

    /// Sets the training flag of the module and its submodules (for calls built after).
    pub fn train(&mut self, on: bool) -> Result<()> {
        check(unsafe { sys::koila_module_train(self.ptr(), on as i32) })
    }

    /// Whether the module is in training mode.
    pub fn is_training(&self) -> Result<bool> {
        let mut flag = 0;
        check(unsafe { sys::koila_module_is_training(self.ptr(), &mut flag) })?;
        Ok(flag != 0)
    }

    /// The number of parameters (submodules' included).
    pub fn num_parameters(&self) -> Result<usize> {
        let mut n = 0usize;
        check(unsafe { sys::koila_module_num_parameters(self.ptr(), &mut n) })?;
        Ok(n)
    }

    /// The i-th parameter, aliased: gradients and optimizer updates are the module's.
    pub fn parameter(&self, i: usize) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_module_parameter(out, self.ptr(), i) })
    }

    /// The dotted name of the i-th parameter ("fc1.weight").
    pub fn parameter_name(&self, i: usize) -> Result<String> {
        read_text(|buf, cap, needed| unsafe { sys::koila_module_parameter_name(self.ptr(), i, buf, cap, needed) })
    }

    /// Every parameter, in the order of named_parameters().
    pub fn parameters(&self) -> Result<Vec<Tensor>> {
        (0..self.num_parameters()?).map(|i| self.parameter(i)).collect()
    }

    /// Every parameter with its name.
    pub fn named_parameters(&self) -> Result<Vec<(String, Tensor)>> {
        (0..self.num_parameters()?).map(|i| Ok((self.parameter_name(i)?, self.parameter(i)?))).collect()
    }

    /// What the module was loaded from.
    pub fn kind(&self) -> Result<ModuleKind> {
        let mut kind: sys::koila_module_kind = sys::KOILA_MODULE_TORCHSCRIPT;
        check(unsafe { sys::koila_module_kind_of(self.ptr(), &mut kind) })?;
        match kind {
            sys::KOILA_MODULE_TORCHSCRIPT => Ok(ModuleKind::TorchScript),
            sys::KOILA_MODULE_EXPORTED => Ok(ModuleKind::Exported),
            other => Err(Error::new(Code::Internal, format!("unknown module kind {other}"))),
        }
    }

    /// The number of buffers (batch norm's running statistics, ...; submodules' included).
    pub fn num_buffers(&self) -> Result<usize> {
        let mut n = 0usize;
        check(unsafe { sys::koila_module_num_buffers(self.ptr(), &mut n) })?;
        Ok(n)
    }

    /// The i-th buffer, aliased: updates koila makes (running statistics after a training
    /// step) are seen through it.
    pub fn buffer(&self, i: usize) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_module_buffer(out, self.ptr(), i) })
    }

    /// The dotted name of the i-th buffer ("bn1.running_mean").
    pub fn buffer_name(&self, i: usize) -> Result<String> {
        read_text(|buf, cap, needed| unsafe { sys::koila_module_buffer_name(self.ptr(), i, buf, cap, needed) })
    }

    /// Every buffer with its name, in the order of named_buffers().
    pub fn named_buffers(&self) -> Result<Vec<(String, Tensor)>> {
        (0..self.num_buffers()?).map(|i| Ok((self.buffer_name(i)?, self.buffer(i)?))).collect()
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("num_parameters", &self.num_parameters().ok())
            .field("training", &self.is_training().ok())
            .finish()
    }
}
