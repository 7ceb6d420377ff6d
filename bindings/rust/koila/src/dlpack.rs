//! DLPack (<https://dmlc.github.io/dlpack/>): sharing memory with other array libraries
//! (NumPy, PyTorch, JAX, ...) without a copy.
//!
//! koila takes and makes both forms of the exchange struct: [`DLManagedTensor`] (every
//! DLPack; `versioned = false`) and [`DLManagedTensorVersioned`] (DLPack 1.x;
//! `versioned = true`). They cross the C API as `*mut c_void`; the structs here are their
//! layouts from the DLPack 1.1 specification, for building and reading them in Rust.
//!
//! - [`Tensor::from_dlpack`] (unsafe) takes such a struct, and with it the producer's
//!   memory, which the tensor then shares; [`Tensor::from_vec`] is the safe way to hand koila
//!   a `Vec` without copying it.
//! - [`Tensor::to_dlpack`] makes one that shares a tensor's memory; whoever ends up with it
//!   calls its deleter once ([`delete`]).
#![allow(non_upper_case_globals)]
use std::os::raw::c_void;
use std::ptr;

use crate::dtype::{DType, Element};
use crate::error::{check, Code, Error, Result};
use crate::tensor::{make, Tensor};
use koila_sys as sys;

/// `DLDeviceType::kDLCPU`: host memory.
pub const kDLCPU: i32 = 1;
/// `DLDeviceType::kDLCUDA`: CUDA device memory (koila takes it only in a CUDA build).
pub const kDLCUDA: i32 = 2;
/// `DLDeviceType::kDLCUDAHost`: pinned host memory (koila reads it as the CPU's).
pub const kDLCUDAHost: i32 = 3;
/// `DLDataTypeCode::kDLInt`: signed integers.
pub const kDLInt: u8 = 0;
/// `DLDataTypeCode::kDLUInt`: unsigned integers.
pub const kDLUInt: u8 = 1;
/// `DLDataTypeCode::kDLFloat`: IEEE floating point.
pub const kDLFloat: u8 = 2;
/// `DLDataTypeCode::kDLBfloat`: bfloat16.
pub const kDLBfloat: u8 = 4;
/// `DLDataTypeCode::kDLBool`: booleans (8 bits, 0 or 1).
pub const kDLBool: u8 = 6;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write (koila refuses such tensors).
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the producer copied the data for this exchange.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;
/// The DLPack version koila writes into [`DLManagedTensorVersioned`] (1.1).
pub const DLPACK_VERSION: DLPackVersion = DLPackVersion { major: 1, minor: 1 };

/// Where the memory is: a `DLDeviceType` (`kDLCPU`, ...) and the device's index.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDevice {
    /// `kDLCPU`, `kDLCUDA`, ...
    pub device_type: i32,
    /// The device's index (0 for the CPU).
    pub device_id: i32,
}

/// The element type: a `DLDataTypeCode` (`kDLFloat`, ...), its bits and lanes (1).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDataType {
    /// `kDLInt`, `kDLUInt`, `kDLFloat`, `kDLBfloat`, `kDLBool`, ...
    pub code: u8,
    /// Bits per element (lane).
    pub bits: u8,
    /// Lanes per element (1; koila refuses vector types).
    pub lanes: u16,
}

/// The array: memory, device, shape, dtype and strides (in elements; null: compact and
/// row-major). Element `[i0, i1, ...]` is at `data + byte_offset + (i0 * strides[0] + ...) *
/// element size`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DLTensor {
    /// The start of the memory.
    pub data: *mut c_void,
    /// Where the memory is.
    pub device: DLDevice,
    /// The number of dimensions.
    pub ndim: i32,
    /// The element type.
    pub dtype: DLDataType,
    /// `ndim` sizes.
    pub shape: *mut i64,
    /// `ndim` strides in elements, or null for a compact row-major layout.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// The exchange struct of every DLPack version: a [`DLTensor`] and who frees it.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The array.
    pub dl_tensor: DLTensor,
    /// The producer's own pointer, for its deleter.
    pub manager_ctx: *mut c_void,
    /// Frees the struct and releases the memory; called once by the consumer.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// A DLPack version.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLPackVersion {
    /// Major version (koila reads 1).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

/// The exchange struct of DLPack 1.x: [`DLManagedTensor`] with a version and flags.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The DLPack version the producer wrote.
    pub version: DLPackVersion,
    /// The producer's own pointer, for its deleter.
    pub manager_ctx: *mut c_void,
    /// Frees the struct and releases the memory; called once by the consumer.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `DLPACK_FLAG_BITMASK_*` bits.
    pub flags: u64,
    /// The array.
    pub dl_tensor: DLTensor,
}

/// The DLPack data type of a koila dtype.
pub fn data_type(dtype: DType) -> DLDataType {
    let (code, bits) = match dtype {
        DType::Float32 => (kDLFloat, 32),
        DType::Float64 => (kDLFloat, 64),
        DType::Float16 => (kDLFloat, 16),
        DType::BFloat16 => (kDLBfloat, 16),
        DType::Int64 => (kDLInt, 64),
        DType::Int32 => (kDLInt, 32),
        DType::Int8 => (kDLInt, 8),
        DType::UInt8 => (kDLUInt, 8),
        DType::Bool => (kDLBool, 8),
    };
    DLDataType { code, bits, lanes: 1 }
}

/// Calls the deleter of a DLPack struct (if it has one): what a consumer does once it is
/// done with what [`Tensor::to_dlpack`] gave it.
///
/// # Safety
/// `managed` must be a live `DLManagedTensor` (`versioned == false`) or
/// `DLManagedTensorVersioned` (`versioned == true`) that the caller owns, and is invalid
/// afterwards (as is every pointer into its memory): call this once per struct.
pub unsafe fn delete(managed: *mut c_void, versioned: bool) {
    if versioned {
        let m = managed.cast::<DLManagedTensorVersioned>();
        if let Some(deleter) = (*m).deleter {
            deleter(m);
        }
    } else {
        let m = managed.cast::<DLManagedTensor>();
        if let Some(deleter) = (*m).deleter {
            deleter(m);
        }
    }
}

/// What [`Tensor::from_vec`] hands koila: the Vec and the struct describing it, in one box
/// that the deleter frees.
struct Shared<T> {
    managed: DLManagedTensorVersioned,
    shape: Vec<i64>,
    data: Vec<T>,
}

unsafe extern "C" fn delete_shared<T>(managed: *mut DLManagedTensorVersioned) {
    // SAFETY: manager_ctx is the Box made in from_vec, freed here once (koila's contract).
    drop(Box::from_raw((*managed).manager_ctx.cast::<Shared<T>>()));
}

impl Tensor {
    /// A CPU tensor over `data` itself (row-major, with the given shape), without copying it
    /// (unlike [`Tensor::from_slice`]): koila owns the Vec from now on and frees it when the
    /// last tensor sharing it is dropped. The shape must have `data.len()` elements
    /// ([`Code::InvalidArgument`] otherwise).
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[i64]) -> Result<Tensor> {
        let numel = shape.iter().try_fold(1i64, |n, &d| if d < 0 { None } else { n.checked_mul(d) });
        if numel != Some(data.len() as i64) {
            return Err(Error::new(
                Code::InvalidArgument,
                format!("from_vec: {} values but shape {shape:?} has {numel:?} elements", data.len()),
            ));
        }
        let ndim = i32::try_from(shape.len())
            .map_err(|_| Error::new(Code::InvalidArgument, format!("from_vec: {} dims", shape.len())))?;
        let shared = Box::into_raw(Box::new(Shared {
            managed: DLManagedTensorVersioned {
                version: DLPACK_VERSION,
                manager_ctx: ptr::null_mut(),
                deleter: Some(delete_shared::<T>),
                flags: 0,
                dl_tensor: DLTensor {
                    data: ptr::null_mut(),
                    device: DLDevice { device_type: kDLCPU, device_id: 0 },
                    ndim,
                    dtype: data_type(T::DTYPE),
                    shape: ptr::null_mut(),
                    strides: ptr::null_mut(),
                    byte_offset: 0,
                },
            },
            shape: shape.to_vec(),
            data,
        }));
        // SAFETY: `shared` is a valid box; the pointers into it stay valid until the deleter
        // frees it (its Vecs' buffers do not move), nothing in Rust touches it meanwhile, and
        // what it holds may be dropped on any thread (Element types are Send).
        unsafe {
            (*shared).managed.manager_ctx = shared.cast();
            (*shared).managed.dl_tensor.data = (*shared).data.as_mut_ptr().cast();
            (*shared).managed.dl_tensor.shape = (*shared).shape.as_mut_ptr();
            Tensor::from_dlpack(ptr::addr_of_mut!((*shared).managed).cast(), true)
        }
    }

    /// A concrete tensor over the memory of a DLPack struct, without a copy: writes through
    /// koila (an optimizer step) are seen by the producer, and the producer's writes by koila.
    /// The tensor has no batch dim (wrap it with [`Tensor::lazy`]).
    ///
    /// Refused with [`Code::Unsupported`]: a major version other than 1, a device other than the
    /// CPU (or pinned host memory; or CUDA, in a CUDA build), a dtype koila lacks or lanes
    /// != 1, the read-only flag ([`DLPACK_FLAG_BITMASK_READ_ONLY`]), negative strides, data
    /// plus byte_offset not aligned to the element size. Refused with
    /// [`Code::InvalidArgument`]: a null `managed`, a negative ndim or size, a null shape with
    /// ndim > 0, null data with elements.
    ///
    /// # Safety
    /// - `managed` is null (an error; nothing else happens) or points to a valid
    ///   [`DLManagedTensor`] when `versioned` is false, a valid [`DLManagedTensorVersioned`]
    ///   when it is true, whose shape (and strides, unless null) hold `ndim` values.
    /// - Ownership of the struct passes to koila with the call, **also when the call
    ///   fails**: afterwards the caller must not use `managed`, free it or call its deleter.
    ///   koila calls the deleter (unless it is `None`) exactly once: before returning an
    ///   error, or when the last koila tensor sharing the memory is freed, which may happen
    ///   on any thread (so the deleter and what it frees must be fit for that).
    /// - The struct, its shape and strides, and every element its shape and strides reach
    ///   from `data + byte_offset` must stay valid, for reads **and writes**, until the
    ///   deleter is called; the elements must be valid values of the dtype.
    /// - koila may write to that memory through any tensor sharing it until then: no Rust
    ///   reference (`&`, `&mut`) to it may be alive while koila reads or writes it, and no
    ///   one may write it concurrently with koila (a data race). Memory that must not be
    ///   written is handed over with the read-only flag (which koila refuses) or copied
    ///   ([`Tensor::from_slice`]).
    pub unsafe fn from_dlpack(managed: *mut c_void, versioned: bool) -> Result<Tensor> {
        make(|out| sys::koila_tensor_from_dlpack(out, managed, versioned as i32))
    }

    /// A new [`DLManagedTensor`] (`versioned == false`) or [`DLManagedTensorVersioned`]
    /// (`true`, DLPack 1.1) sharing this tensor's memory (its sizes and strides, any layout),
    /// for another array library; a lazy tensor is evaluated first. The autograd history is
    /// not part of it. A dtype DLPack has no code for is [`Code::Unsupported`].
    ///
    /// The caller owns the struct: it must call its deleter exactly once (with [`delete`], or
    /// by handing the struct to a consumer that does, such as [`Tensor::from_dlpack`]); until
    /// then the memory stays valid, also after this tensor is dropped. Writes through it are
    /// seen by the koila tensors sharing the memory, and theirs through it: reading it while
    /// koila writes (an optimizer step on another thread) is a data race.
    pub fn to_dlpack(&self, versioned: bool) -> Result<*mut c_void> {
        let mut out: *mut c_void = ptr::null_mut();
        check(unsafe { sys::koila_tensor_to_dlpack(&mut out, self.as_ptr(), versioned as i32) })?;
        if out.is_null() {
            return Err(Error::new(Code::Internal, "koila returned success but no DLPack tensor"));
        }
        Ok(out)
    }
}
