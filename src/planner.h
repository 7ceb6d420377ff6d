// The batch planner: estimates the peak memory of evaluating a graph (FORWARD) or of a
// backward from it (TRAINING) for a given chunk of the batch, picks the largest chunk that
// fits the device's budget, and runs the batch chunk by chunk so that results and
// gradients equal the unsplit ones.
//
// Estimates come from a simulation: the graph runs forward (and backward, through
// LibTorch's autograd) on meta tensors of the chunk's size, while a counting meta
// allocator follows every tensor the run would allocate and free: activations, what
// autograd saves for backward, gradients, temporaries of composite ops. Nothing is
// computed. Parameters, inputs and existing gradients already exist and are part of the
// device's current usage.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "graph.h"

namespace koila {

enum class Mode { Forward, Training };

struct Plan {
  Mode mode = Mode::Forward;
  c10::Device device = c10::Device(c10::kCPU);
  std::string target;         // "[8, 10] float" — what is evaluated
  int64_t batch = -1;         // batch size, -1: no lazy batch
  int64_t chunk = -1;         // samples per chunk (the batch when it runs unsplit)
  int64_t chunks = 1;
  std::string coupled;        // non-empty: why the batch cannot be split (names the op)
  uint64_t current = 0;       // bytes in use on the device when planned
  uint64_t budget = 0;
  uint64_t full_extra = 0;    // estimated bytes beyond `current`, unsplit
  uint64_t extra = 0;         // estimated bytes beyond `current`, as planned
  std::string coarse;         // non-empty: the simulation failed (why) and estimates are coarse
  uint64_t peak() const { return current + extra; }
  uint64_t full_peak() const { return current + full_extra; }
  std::string describe() const;
};

// Plans without running anything. Fails with KOILA_ERROR_OUT_OF_MEMORY when not even one
// sample fits, KOILA_ERROR_NOT_SPLITTABLE when the graph couples the batch and does not
// fit unsplit (the message is the plan's description).
Plan make_plan(const NodePtr& root, Mode mode);

// Estimated bytes beyond current usage of running `root` in `mode` with chunks of `chunk`
// samples (-1: unsplit). Exposed for tests and benchmarks.
uint64_t estimate_extra(const NodePtr& root, Mode mode, int64_t chunk);

// The value of `root` (lazy or not), planned and chunked; retries with half the chunk when
// the device runs out of memory anyway. Records no autograd.
at::Tensor run_forward(const NodePtr& root, Plan* used = nullptr);

// Backward from a one-element loss, planned and chunked. Gradients add into the .grad of
// every tensor that requires grad only once all of them have been computed: a failure
// leaves every gradient as it was.
void run_backward(const NodePtr& loss, Plan* used = nullptr);

namespace testing {
// Multiplies every estimate (to provoke real out-of-memory errors in tests); 1 by default.
void set_estimate_scale(double scale);
// Makes the simulation fail, as it would for an op without meta kernels (coarse estimates).
void set_simulation_fails(bool fails);
}  // namespace testing

}  // namespace koila
