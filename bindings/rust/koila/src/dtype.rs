//! Element types.
use koila_sys as sys;

/// A tensor's element type (koila.h's `koila_dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float (`f32`).
    Float32,
    /// 64-bit float (`f64`).
    Float64,
    /// IEEE half precision (read and write it as raw bytes).
    Float16,
    /// bfloat16 (read and write it as raw bytes).
    BFloat16,
    /// `i64`; class indices and indices are this.
    Int64,
    /// `i32`.
    Int32,
    /// `i8`.
    Int8,
    /// `u8`.
    UInt8,
    /// `bool` (one byte, 0 or 1); comparisons give this.
    Bool,
}

impl DType {
    pub(crate) fn raw(self) -> sys::koila_dtype {
        match self {
            DType::Float32 => sys::KOILA_FLOAT32,
            DType::Float64 => sys::KOILA_FLOAT64,
            DType::Float16 => sys::KOILA_FLOAT16,
            DType::BFloat16 => sys::KOILA_BFLOAT16,
            DType::Int64 => sys::KOILA_INT64,
            DType::Int32 => sys::KOILA_INT32,
            DType::Int8 => sys::KOILA_INT8,
            DType::UInt8 => sys::KOILA_UINT8,
            DType::Bool => sys::KOILA_BOOL,
        }
    }

    pub(crate) fn from_raw(raw: sys::koila_dtype) -> Option<DType> {
        Some(match raw {
            sys::KOILA_FLOAT32 => DType::Float32,
            sys::KOILA_FLOAT64 => DType::Float64,
            sys::KOILA_FLOAT16 => DType::Float16,
            sys::KOILA_BFLOAT16 => DType::BFloat16,
            sys::KOILA_INT64 => DType::Int64,
            sys::KOILA_INT32 => DType::Int32,
            sys::KOILA_INT8 => DType::Int8,
            sys::KOILA_UINT8 => DType::UInt8,
            sys::KOILA_BOOL => DType::Bool,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Float64 | DType::Int64 => 8,
            DType::Float32 | DType::Int32 => 4,
            DType::Float16 | DType::BFloat16 => 2,
            DType::Int8 | DType::UInt8 | DType::Bool => 1,
        }
    }

    /// Whether the type is floating point (what gradients and randn need).
    pub fn is_floating(self) -> bool {
        matches!(self, DType::Float32 | DType::Float64 | DType::Float16 | DType::BFloat16)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that is a koila element type: tensors are made from and read into slices
/// of it. Implemented for `f32`, `f64`, `i64`, `i32`, `i8`, `u8` and `bool`.
pub trait Element: Copy + Default + sealed::Sealed + 'static {
    /// The koila dtype of this type.
    const DTYPE: DType;
}

macro_rules! element {
    ($t:ty, $d:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    };
}
element!(f32, Float32);
element!(f64, Float64);
element!(i64, Int64);
element!(i32, Int32);
element!(i8, Int8);
element!(u8, UInt8);
// bool is one byte holding 0 or 1 in Rust, as in LibTorch.
element!(bool, Bool);
