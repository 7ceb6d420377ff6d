// The memory timeline of a plan: the planner's own simulation (plan/estimate.h) of the run
// in chunks of the plan's size, or unsplit, run again while every top-level operator
// (aten ops of the forward, autograd functions of the backward) is observed, so that the
// bytes held after each, and the most held during it, are known op by op. Nothing is
// computed. The largest peak of the events is the simulated figure the plan's estimate
// starts from; what the estimate adds beyond it (calibration by real probes, earlier
// runs' peaks) is kept as `beyond`, so the timeline accounts for the whole estimate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/planner.h"
#include "run/observer.h"

namespace koila {

struct TimelineEvent {
  std::string op;  // "aten::conv2d", "ConvolutionBackward0"
  Phase phase = Phase::Forward;
  int64_t chunk = 0;             // which chunk of the run (0-based; 0 when unsplit)
  uint64_t live = 0;             // bytes held after the op, usage before the run included
  uint64_t peak = 0;             // the most held during the op, same basis
  uint64_t forward_at_peak = 0;  // of peak - base: what the forward allocated (activations)
  uint64_t grads = 0;            // bytes of .grad held by the graph's leaves after the op
};

// The parts of a timeline's peak (koila.h's koila_memory_part; api/timeline.cpp converts).
enum class MemoryPart {
  InUse,             // held before the run
  Activations,       // allocated by the forward and still held at the peak
  Gradients,         // .grad of the leaves held at the peak
  Temporaries,       // the rest of the simulated peak
  BeyondSimulation,  // what the estimate adds beyond the simulation
};

struct Timeline {
  RunMode mode = RunMode::Forward;
  bool unsplit = true;
  int64_t chunk = -1;     // samples per chunk (-1: no lazy batch)
  int64_t chunks = 1;     // chunks of the whole run (the simulation follows the first two)
  uint64_t base = 0;      // in use before the run (the plan's current + others)
  uint64_t estimate = 0;  // the plan's estimated peak of this run
  uint64_t budget = 0;
  std::vector<TimelineEvent> events;

  // The event with the largest peak (the first of equals); events are never empty.
  size_t peak_index() const;
  uint64_t simulated_peak() const { return events[peak_index()].peak; }
  // What the estimate adds beyond the simulation (0 when it adds nothing).
  uint64_t beyond() const { return estimate > simulated_peak() ? estimate - simulated_peak() : 0; }
  // Where the memory goes at the peak: the parts add up to base + simulated peak + beyond.
  uint64_t part(MemoryPart part) const;
};

// Simulates `plan`'s run again (unsplit, or in the plan's chunks) and records it. Fails with
// Code::Unsupported when there is nothing to simulate (a concrete value) or the
// simulation fails (the plan's figures were then measured, not simulated).
Timeline record_timeline(const Plan& plan, bool unsplit);

}  // namespace koila
