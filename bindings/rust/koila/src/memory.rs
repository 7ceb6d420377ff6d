//! The memory budget and measurements (process-wide settings; thread-safe).
use crate::error::{c_string, check, Result};
use koila_sys as sys;

/// Sets the bytes koila may use on a device ("cpu", "cuda", "cuda:N"); 0 is automatic:
/// what is in use plus the device's free memory, less a tenth of the free memory.
pub fn set_memory_budget(device: &str, bytes: u64) -> Result<()> {
    let device = c_string("device", device)?;
    check(unsafe { sys::koila_set_memory_budget(device.as_ptr(), bytes) })
}

/// The budget in force on a device (the automatic one resolved now).
pub fn memory_budget(device: &str) -> Result<u64> {
    let device = c_string("device", device)?;
    let mut out = 0u64;
    check(unsafe { sys::koila_memory_budget(device.as_ptr(), &mut out) })?;
    Ok(out)
}

/// Bytes held by tensors on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Held now.
    pub current: u64,
    /// The most held at once since the last [`memory_reset_peak`].
    pub peak: u64,
}

/// What tensors hold on a device now, and the peak since the last reset.
pub fn memory_stats(device: &str) -> Result<MemoryStats> {
    let device = c_string("device", device)?;
    let (mut current, mut peak) = (0u64, 0u64);
    check(unsafe { sys::koila_memory_stats(device.as_ptr(), &mut current, &mut peak) })?;
    Ok(MemoryStats { current, peak })
}

/// Starts a new peak measurement on a device.
pub fn memory_reset_peak(device: &str) -> Result<()> {
    let device = c_string("device", device)?;
    check(unsafe { sys::koila_memory_reset_peak(device.as_ptr()) })
}

