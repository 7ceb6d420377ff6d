//! Tensors: making them, metadata, reading values, autograd.
use std::fmt;
use std::ptr::{self, NonNull};

use crate::dtype::{DType, Element};
use crate::error::{c_string, check, Code, Error, Result};
use crate::text::read_text;
use koila_sys as sys;

/// A koila tensor: concrete (holding values) or lazy (a recipe, evaluated when read).
///
/// Dropping it frees the handle; the graph a lazy tensor depends on stays alive as long
/// as some tensor needs it. `Send` but not `Sync`: move it between threads freely, but
/// never share it between two at once.
pub struct Tensor {
    raw: NonNull<sys::koila_tensor>,
}

// SAFETY: koila's contract: a handle may move between threads but must not be used from
// two threads at once. Not being Sync (NonNull is !Sync) forbids the latter.
unsafe impl Send for Tensor {}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: the handle is owned by this value and freed exactly once.
        unsafe { sys::koila_tensor_free(self.raw.as_ptr()) }
    }
}

/// Runs a C call that makes a tensor through `out`.
pub(crate) fn make(f: impl FnOnce(*mut *mut sys::koila_tensor) -> *mut sys::koila_status) -> Result<Tensor> {
    let mut out: *mut sys::koila_tensor = ptr::null_mut();
    check(f(&mut out))?;
    // SAFETY: on success koila hands the caller a new handle through `out`.
    unsafe { Tensor::from_raw(out) }.ok_or_else(|| Error::new(Code::Internal, "koila returned success but no tensor"))
}

pub(crate) fn maybe_ptr(t: Option<&Tensor>) -> *const sys::koila_tensor {
    t.map_or(ptr::null(), |t| t.as_ptr())
}

pub(crate) fn pointers(ts: &[&Tensor]) -> Vec<*mut sys::koila_tensor> {
    ts.iter().map(|t| t.as_mut_ptr()).collect()
}

/// NULL for an empty slice (what koila.h takes with a count of 0), else its pointer.
pub(crate) fn or_null<T>(s: &[T]) -> *const T {
    if s.is_empty() { ptr::null() } else { s.as_ptr() }
}

impl Tensor {
    /// Takes ownership of a raw handle (None when it is null).
    ///
    /// # Safety
    /// `raw` must be null or a live handle from koila that nothing else frees.
    pub unsafe fn from_raw(raw: *mut sys::koila_tensor) -> Option<Tensor> {
        NonNull::new(raw).map(|raw| Tensor { raw })
    }

    /// Gives up ownership: the caller frees the handle with `koila_tensor_free`.
    pub fn into_raw(self) -> *mut sys::koila_tensor {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        raw
    }

    /// The raw handle, still owned by this tensor.
    pub fn as_ptr(&self) -> *const sys::koila_tensor {
        self.raw.as_ptr()
    }

    pub(crate) fn as_mut_ptr(&self) -> *mut sys::koila_tensor {
        self.raw.as_ptr()
    }

    // ---- making tensors ------------------------------------------------------------

    /// A CPU tensor holding a copy of `data` (row-major) with the given shape
    /// (`&[]` for a scalar). The shape must have `data.len()` elements.
    pub fn from_slice<T: Element>(data: &[T], shape: &[i64]) -> Result<Tensor> {
        Tensor::from_slice_on(data, shape, "cpu")
    }

    /// As [`Tensor::from_slice`], on a device ("cpu", "cuda", "cuda:N").
    pub fn from_slice_on<T: Element>(data: &[T], shape: &[i64], device: &str) -> Result<Tensor> {
        let nbytes = std::mem::size_of_val(data);
        // SAFETY: T is a plain element type whose bytes are what koila expects for T::DTYPE.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), nbytes) };
        Tensor::from_bytes(bytes, T::DTYPE, shape, device)
    }

    /// A tensor from raw row-major bytes of any dtype (Float16 and BFloat16 included).
    /// `bytes.len()` must be the shape's element count times `dtype.size()`.
    pub fn from_bytes(bytes: &[u8], dtype: DType, shape: &[i64], device: &str) -> Result<Tensor> {
        let device = c_string("device", device)?;
        let data = or_null(bytes).cast();
        make(|out| unsafe {
            sys::koila_tensor_from_data(out, data, bytes.len(), dtype.raw(), or_null(shape), shape.len(), device.as_ptr())
        })
    }

    /// A tensor of zeros.
    pub fn zeros(shape: &[i64], dtype: DType, device: &str) -> Result<Tensor> {
        let device = c_string("device", device)?;
        make(|out| unsafe { sys::koila_tensor_zeros(out, or_null(shape), shape.len(), dtype.raw(), device.as_ptr()) })
    }

    /// A tensor of ones.
    pub fn ones(shape: &[i64], dtype: DType, device: &str) -> Result<Tensor> {
        let device = c_string("device", device)?;
        make(|out| unsafe { sys::koila_tensor_ones(out, or_null(shape), shape.len(), dtype.raw(), device.as_ptr()) })
    }

    /// Standard normal samples (floating dtypes only; see [`crate::manual_seed`]).
    pub fn randn(shape: &[i64], dtype: DType, device: &str) -> Result<Tensor> {
        let device = c_string("device", device)?;
        make(|out| unsafe { sys::koila_tensor_randn(out, or_null(shape), shape.len(), dtype.raw(), device.as_ptr()) })
    }

    /// The one line: a lazy tensor reading this one's values whenever it is evaluated,
    /// whose dimension `batch_dim` (negative counts from the end) is the batch koila may
    /// split. Everything computed from it is deferred.
    pub fn lazy(&self, batch_dim: i64) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_lazy(out, self.as_ptr(), batch_dim) })
    }

    /// A lazy tensor with no batch dimension (deferred, never split along).
    pub fn lazy_unbatched(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_lazy(out, self.as_ptr(), sys::KOILA_NO_BATCH) })
    }

    /// A second handle to the same tensor (values shared, nothing copied or evaluated):
    /// a concrete tensor is shared as is, a lazy one is the same recipe with the same
    /// batch dim. Each handle is dropped on its own.
    pub fn shallow_clone(&self) -> Result<Tensor> {
        if self.is_lazy()? {
            let dim = self.batch_dim()?.unwrap_or(sys::KOILA_NO_BATCH);
            make(|out| unsafe { sys::koila_lazy(out, self.as_ptr(), dim) })
        } else {
            self.eval()
        }
    }

    // ---- metadata: never evaluates -----------------------------------------------------

    /// The sizes of the dimensions (`[]` for a scalar).
    pub fn shape(&self) -> Result<Vec<i64>> {
        let mut ndim = 0usize;
        check(unsafe { sys::koila_tensor_shape(self.as_ptr(), ptr::null_mut(), 0, &mut ndim) })?;
        let mut dims = vec![0i64; ndim];
        check(unsafe { sys::koila_tensor_shape(self.as_ptr(), dims.as_mut_ptr(), dims.len(), &mut ndim) })?;
        Ok(dims)
    }

    /// The number of elements.
    pub fn numel(&self) -> Result<i64> {
        Ok(self.shape()?.iter().product())
    }

    /// The element type.
    pub fn dtype(&self) -> Result<DType> {
        let mut raw: sys::koila_dtype = 0;
        check(unsafe { sys::koila_tensor_dtype(self.as_ptr(), &mut raw) })?;
        DType::from_raw(raw).ok_or_else(|| Error::new(Code::Unsupported, format!("unknown dtype code {raw}")))
    }

    /// The dimension that carries the batch, if any.
    pub fn batch_dim(&self) -> Result<Option<i64>> {
        let mut dim = -1i64;
        check(unsafe { sys::koila_tensor_batch_dim(self.as_ptr(), &mut dim) })?;
        Ok(if dim < 0 { None } else { Some(dim) })
    }

    /// Whether the tensor is lazy (a recipe) rather than concrete.
    pub fn is_lazy(&self) -> Result<bool> {
        let mut flag = 0;
        check(unsafe { sys::koila_tensor_is_lazy(self.as_ptr(), &mut flag) })?;
        Ok(flag != 0)
    }

    // ---- reading values: evaluates ---------------------------------------------------

    /// The values, row-major. `T` must be the tensor's dtype (else a DType error); use
    /// [`Tensor::to_bytes`] for Float16/BFloat16.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let dtype = self.dtype()?;
        if dtype != T::DTYPE {
            return Err(Error::new(
                Code::DType,
                format!("to_vec: the tensor is {dtype:?}, not {:?} ({})", T::DTYPE, std::any::type_name::<T>()),
            ));
        }
        let n = usize::try_from(self.numel()?).map_err(|_| Error::new(Code::Internal, "negative element count"))?;
        let mut data = vec![T::default(); n];
        let nbytes = std::mem::size_of_val(data.as_slice());
        check(unsafe { sys::koila_tensor_to_host(self.as_ptr(), data.as_mut_ptr().cast(), nbytes) })?;
        Ok(data)
    }

    /// The values as raw row-major bytes (any dtype).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let n = usize::try_from(self.numel()?).map_err(|_| Error::new(Code::Internal, "negative element count"))?;
        let mut data = vec![0u8; n * self.dtype()?.size()];
        check(unsafe { sys::koila_tensor_to_host(self.as_ptr(), data.as_mut_ptr().cast(), data.len()) })?;
        Ok(data)
    }

    /// The value of a one-element tensor (any dtype) as f64.
    pub fn item(&self) -> Result<f64> {
        let mut value = 0.0;
        check(unsafe { sys::koila_tensor_item(self.as_ptr(), &mut value) })?;
        Ok(value)
    }

    /// The tensor printed as LibTorch prints it (evaluates). `Display` prints the same.
    pub fn to_text(&self) -> Result<String> {
        read_text(|buf, cap, needed| unsafe { sys::koila_tensor_to_string(self.as_ptr(), buf, cap, needed) })
    }

    /// A concrete tensor with this one's value (this one, shared, when already concrete).
    /// An evaluated lazy tensor does not require grad: train with [`Tensor::backward`].
    pub fn eval(&self) -> Result<Tensor> {
        make(|out| unsafe { sys::koila_eval(out, self.as_ptr()) })
    }

    // ---- autograd ----------------------------------------------------------------------

    /// Marks a concrete floating-point leaf (a parameter) as requiring gradients.
    pub fn set_requires_grad(&mut self, flag: bool) -> Result<()> {
        check(unsafe { sys::koila_tensor_set_requires_grad(self.as_mut_ptr(), flag as i32) })
    }

    /// Backward from a scalar loss: fills the gradients of the leaves it depends on, in
    /// chunks under the memory budget when needed, equal to the full-batch gradients.
    /// Gradients add into existing ones. A failed call leaves every gradient as it was.
    pub fn backward(&self) -> Result<()> {
        check(unsafe { sys::koila_backward(self.as_ptr()) })
    }

    /// The gradient of a leaf (aliasing it), or None when there is none yet.
    pub fn grad(&self) -> Result<Option<Tensor>> {
        let mut out: *mut sys::koila_tensor = ptr::null_mut();
        check(unsafe { sys::koila_tensor_grad(&mut out, self.as_ptr()) })?;
        // SAFETY: a gradient handle (or null) that the caller owns.
        Ok(unsafe { Tensor::from_raw(out) })
    }

    /// Sets the existing gradient to zero in place.
    pub fn zero_grad(&mut self) -> Result<()> {
        check(unsafe { sys::koila_tensor_zero_grad(self.as_mut_ptr()) })
    }
}

impl fmt::Display for Tensor {
    /// Evaluates and prints the values; a failure prints the error instead.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_text() {
            Ok(text) => f.write_str(&text),
            Err(e) => write!(f, "<{e}>"),
        }
    }
}

impl fmt::Debug for Tensor {
    /// Metadata only: never evaluates.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Tensor");
        match self.shape() {
            Ok(s) => d.field("shape", &s),
            Err(e) => d.field("shape", &e.message().to_string()),
        };
        if let Ok(t) = self.dtype() {
            d.field("dtype", &t);
        }
        if let Ok(lazy) = self.is_lazy() {
            d.field("lazy", &lazy);
        }
        if let Ok(b) = self.batch_dim() {
            d.field("batch_dim", &b);
        }
        d.finish()
    }
}
