//! A plan's memory timeline: the bytes on the device op by op through the forward and the
//! backward, as koila simulated them, and where the memory goes at the peak.
use std::ptr::{self, NonNull};

use crate::error::{check, Code, Error, Result};
use crate::plan::Plan;
use crate::text::read_text;
use koila_sys as sys;

/// Which pass an event of a timeline belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The forward (evaluation, or the forward of a training step).
    Forward,
    /// The backward.
    Backward,
}

/// A part of the peak (see [`Timeline::part`]); the parts add up to the plan's estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryPart {
    /// Held before the run: parameters, inputs, optimizer state, buffers.
    InUse,
    /// Allocated by the forward and still held at the peak.
    Activations,
    /// `.grad` of the leaves held at the peak.
    Gradients,
    /// The rest of the simulated peak.
    Temporaries,
    /// What the estimate adds beyond the simulation (calibration by probes).
    BeyondSimulation,
}

impl MemoryPart {
    fn raw(self) -> sys::koila_memory_part {
        match self {
            MemoryPart::InUse => sys::KOILA_PART_IN_USE,
            MemoryPart::Activations => sys::KOILA_PART_ACTIVATIONS,
            MemoryPart::Gradients => sys::KOILA_PART_GRADIENTS,
            MemoryPart::Temporaries => sys::KOILA_PART_TEMPORARIES,
            MemoryPart::BeyondSimulation => sys::KOILA_PART_BEYOND_SIMULATION,
        }
    }
}

/// One operator of a timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineEvent {
    /// "aten::conv2d", "ConvolutionBackward0", ...
    pub op: String,
    /// Forward or backward.
    pub phase: Phase,
    /// Which chunk of the run (0-based; 0 when unsplit).
    pub chunk: i64,
    /// Bytes held after the op, usage before the run included.
    pub live_bytes: u64,
    /// The most held while it ran.
    pub peak_bytes: u64,
}

/// The memory timeline of a [`Plan`] (see [`Plan::timeline`]).
pub struct Timeline {
    raw: NonNull<sys::koila_timeline>,
}

// SAFETY: as Plan: movable between threads, never used from two at once.
unsafe impl Send for Timeline {}

impl Drop for Timeline {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { sys::koila_timeline_free(self.raw.as_ptr()) }
    }
}

impl Plan {
    /// The plan's memory timeline: the planned chunks (`unsplit` false; the first two, as
    /// simulated) or the whole batch at once. Fails with `Unsupported` when the plan's
    /// figures were not simulated.
    pub fn timeline(&self, unsplit: bool) -> Result<Timeline> {
        let mut out: *mut sys::koila_timeline = ptr::null_mut();
        check(unsafe { sys::koila_plan_timeline(&mut out, self.as_ptr(), i32::from(unsplit)) })?;
        NonNull::new(out)
            .map(|raw| Timeline { raw })
            .ok_or_else(|| Error::new(Code::Internal, "koila returned success but no timeline"))
    }
}

impl Timeline {
    fn ptr(&self) -> *const sys::koila_timeline {
        self.raw.as_ptr()
    }

    /// The number of events (at least 1).
    pub fn len(&self) -> Result<usize> {
        let mut n = 0usize;
        check(unsafe { sys::koila_timeline_length(self.ptr(), &mut n) })?;
        Ok(n)
    }

    /// Whether the timeline has no events (never, for a timeline koila made).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Event `i` (0-based).
    pub fn event(&self, i: usize) -> Result<TimelineEvent> {
        let op = read_text(|buf, cap, needed| unsafe { sys::koila_timeline_op(self.ptr(), i, buf, cap, needed) })?;
        let mut phase: sys::koila_phase = 0;
        let (mut chunk, mut live_bytes, mut peak_bytes) = (0i64, 0u64, 0u64);
        check(unsafe { sys::koila_timeline_phase(self.ptr(), i, &mut phase) })?;
        check(unsafe { sys::koila_timeline_chunk(self.ptr(), i, &mut chunk) })?;
        check(unsafe { sys::koila_timeline_live_bytes(self.ptr(), i, &mut live_bytes) })?;
        check(unsafe { sys::koila_timeline_peak_bytes(self.ptr(), i, &mut peak_bytes) })?;
        let phase = if phase == sys::KOILA_PHASE_BACKWARD { Phase::Backward } else { Phase::Forward };
        Ok(TimelineEvent { op, phase, chunk, live_bytes, peak_bytes })
    }

    /// Every event, in execution order.
    pub fn events(&self) -> Result<Vec<TimelineEvent>> {
        (0..self.len()?).map(|i| self.event(i)).collect()
    }

    /// The index of the event with the largest peak.
    pub fn peak_index(&self) -> Result<usize> {
        let mut i = 0usize;
        check(unsafe { sys::koila_timeline_peak_index(self.ptr(), &mut i) })?;
        Ok(i)
    }

    /// Bytes of one part of the peak.
    pub fn part(&self, part: MemoryPart) -> Result<u64> {
        let mut bytes = 0u64;
        check(unsafe { sys::koila_timeline_part(self.ptr(), part.raw(), &mut bytes) })?;
        Ok(bytes)
    }
}
