// Estimates of the bytes a run of a graph takes beyond what is in use when it starts, for
// a chunk size, and where each figure came from:
//   - simulated: the run's own chunk strategy (chunked_run.h) executed on meta tensors of
//     the chunk's size, first two chunks, while a counting allocator follows every
//     allocation. Nothing is computed.
//   - calibrated: plus what real probes (the first chunk of 2 and of 4 samples, gradients
//     dropped, random state restored, state such as running statistics on copies) took
//     beyond the simulation of the same chunks: workspaces, reordered weights and im2col
//     buffers of backends (oneDNN, cuDNN, cuBLAS) that meta tensors cannot show. On the CPU
//     it is added op by op: each op of a chunk's simulation gets what the probes took beyond
//     the simulation at the same op (op_events.h), so a workspace is added where its kernel
//     runs, not at the peak wherever that lies. Elsewhere (and where the probes' ops are not
//     their simulation's) it is added at the peak: for a chunk of a probe's size what that
//     probe showed, for others the most the probes showed. Never less
//     than kKernelScalars; for chunks beyond the probes' also the growth from 2 to 4
//     samples, a sample (op by op: each op's own). A chunk smaller than the probes (1
//     sample) gets a probe of its own when a plan first needs it: the run's first two
//     chunks, gradients added into .grad as the run adds them, and put back after.
//   - measured: when the simulation fails (an op without a meta kernel), real probes of 1,
//     2, 4, ... samples up to a quarter of the batch (two chunks each), and the line through
//     the largest two, raised until no probe exceeds it.
//   - coarse: when neither can run (no lazy batch to probe with): every result held at
//     once, three times over for training; errs high.
//   - observed: never below what an earlier planned run of the same graph structure
//     measured with the same or a smaller chunk (runs that ran out of memory count too).
// All of it is memoised per graph structure (plan/memo.h): a graph rebuilt every step is
// simulated and probed once (simulated once more when its .grad go from absent to zeros,
// as after the first step of a zero_grad loop, but not probed again: the calibration is
// shared).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "memory/meta_counter.h"
#include "memory/placed_device.h"
#include "plan/memo.h"
#include "run/analysis.h"
#include "run/observer.h"
#include "run/recompute.h"

namespace koila {

// Fraction of an estimate kept free on top of it, for what neither the simulation nor the
// calibration probe shows (allocator rounding, a kernel choosing another algorithm).
constexpr double kMargin = 0.10;

// The least a calibration adds: real kernels wrap scalars into small tensors that meta
// kernels do not allocate (LibTorch's CPU mean divides its sum by the count through an
// 8-byte one), and a probe whose peak falls elsewhere does not show them where a smaller
// chunk's run peaks. Found by the differential graph fuzzer: graphs of a few bytes a
// sample whose chunks of one needed 8 to 40 bytes more than simulated, beyond the 10%.
constexpr uint64_t kKernelScalars = 64;

// On CUDA where no simulation models the caching allocator (an op without meta kernels): a
// segment of each size class it reserves for blocks below 10 MiB (20 MiB and 2 MiB).
constexpr uint64_t kUnmodelledAllocatorBytes = uint64_t{22} << 20;

class Estimator {
 public:
  Estimator(const NodePtr& root, const Analysis& a, RunMode mode);

  // The bytes free for a probe now (default: no limit). Probes that would not fit in it
  // (with the margin) are put off to a later plan: a plan that refuses runs nothing.
  // A probe whose run runs out of memory within it shows that its chunk, and every larger one,
  // needs at least what that run held and asked for: their figures in this plan are then at
  // least that.
  // `budget`: the plan's (Plan::budget_bytes), which probes are held to as well.
  void set_room(uint64_t bytes, uint64_t budget) {
    room_ = bytes;
    budget_ = budget;
    needed_at_least_.clear();
  }

  // How batch norm in training will treat its statistics (koila_set_batch_stats): a pass
  // in chunks that keeps them per chunk holds them from chunk to chunk (batch_stats.h), which
  // extra() adds.
  void set_batch_stats(BatchStats policy) { batch_stats_ = policy; }

  // Estimated extra bytes of a run in chunks of `chunk` samples (-1: unsplit).
  uint64_t extra(int64_t chunk);

  // What the device's allocator reserves beyond the estimate's bytes, for a run in chunks of
  // `chunk` (-1: unsplit): on CUDA, the caching allocator's segments for the simulated
  // allocations (memory/caching_allocator_model.h) beyond the simulated peak, or, where the
  // simulation failed, kUnmodelledAllocatorBytes; 0 on the CPU, whose budget counts bytes.
  uint64_t allocator_overhead(int64_t chunk);

  // Estimated extra bytes of a run that recomputes as `plan` says (run/recompute.h), in its
  // chunks: the same simulation as extra()'s with the segments recomputed, calibrated as extra()
  // calibrates a run of that chunk, and never below what an earlier run of the same
  // recomputation measured. `allocator`: what the device's allocator reserves beyond it (see
  // allocator_overhead). nullopt where the graph cannot be simulated.
  std::optional<uint64_t> extra_recomputed(const RecomputePlan& plan, uint64_t* allocator = nullptr);
  // For each position of `schedule` (the run's, for chunks of `chunk`; -1: unsplit), the bytes
  // of that node's value that autograd keeps for the backward once the forward is done (a value
  // no backward function saves: 0; a storage shared by several values counted at the first),
  // found by a forward on meta tensors that notes which values are still alive at its end.
  // Empty where it cannot run.
  std::vector<double> saved_by_autograd(const Schedule& schedule, int64_t chunk);
  // Of a forward of `schedule` in chunks of `chunk` (-1: unsplit), the bytes that autograd keeps
  // once it is done without module calls and programs segmenting their own graph
  // (RecomputePlan::inside_programs) and not with: what their segments free in the forward and
  // compute again in the backward. Two forwards on meta tensors; 0 where they cannot run.
  uint64_t freed_inside_programs(const Schedule& schedule, int64_t chunk);
  // A planned run recomputing as `plan` says took `bytes` beyond what was in use (or needed more).
  void record_recomputed_run(const RecomputePlan& plan, uint64_t bytes);

  // What is remembered of the structure (found when the estimator was made).
  GraphRecord& record() const { return *record_; }

  // How the leaves' .grad stood when the estimator was made (training), for the run.
  const GradStarts& grad_starts() const { return grad_starts_; }

  // The graph's device, made canonical when the estimator was made: the plan's.
  const PlacedDevice& device() const { return device_; }

  // Where the figures came from, for the plan's description.
  std::string source();
  // Non-empty when the simulation failed (why).
  std::string simulation_failure();

  // A planned run in chunks of `chunk` took `bytes` beyond what was in use (or, when it
  // ran out of memory, needed more than `bytes`).
  void record_run(int64_t chunk, uint64_t bytes);

 private:
  int64_t normalized(int64_t chunk) const;
  // `as_probe`: the simulation of a probe (gradients computed and dropped, as probe() runs)
  // rather than of a run, so that calibration compares like with like.
  // Null when the simulation fails.
  const Simulated* simulated(int64_t chunk, int64_t max_chunks, bool as_probe = false);
  // How a probe against its simulation went (probe_against_simulation).
  enum class Probed { Measured, NoSimulation, NoRoom, OutOfMemory, Failed };
  // `by_op`: what the probe held beyond its simulation op by op, where it ran at least 90%
  // of the simulation's ops (empty otherwise).
  Probed probe_against_simulation(int64_t samples, int64_t* difference, std::string* why, bool like_a_chunk = false,
                                  std::unordered_map<uint64_t, OpExtra>* by_op = nullptr);
  // What the calibration adds to `sim` op by op (Calibration::by_op); `global`: what it adds
  // without ops to compare.
  uint64_t added_op_by_op(const Calibration& c, const Simulated& sim, int64_t samples, uint64_t global);
  void calibrate(Calibration& c);
  // What the calibration adds to the simulation `sim` of chunks of `chunk` (`samples`
  // samples); under the record's lock.
  uint64_t added_beyond(int64_t chunk, int64_t samples, const Simulated& sim);
  // What a chunk takes beyond its simulation, probed as the run goes (Calibration::as_run;
  // once, when a plan first needs it); nullopt where that is not known.
  std::optional<uint64_t> calibrate_as_run(Calibration& c, int64_t samples);
  void fit();

  const NodePtr& root_;
  const Analysis& a_;
  RunMode mode_;
  GradStarts grad_starts_;  // before record_, which reads them
  std::shared_ptr<GraphRecord> record_;
  uint64_t room_ = UINT64_MAX;
  PlacedDevice device_;  // the graph's, made canonical once
  uint64_t budget_;      // the plan's budget (set_room); until then, the device's when the estimator was made
  std::map<int64_t, uint64_t> needed_at_least_;  // samples -> what a probe's run needed, out of room
  BatchStats batch_stats_ = BatchStats::Exact;
};

// The simulation behind the figures of a chunk size (-1: unsplit), run again with `watch`
// told when the run starts (with the counting scope and the stand-ins of the graph's
// concrete tensors) and ends (plan/timeline.h follows it op by op). Returns its peak, as
// extra() before calibration. Throws when the simulation fails.
struct SimulationWatch {
  std::function<void(MetaAllocationScope&, const std::vector<at::Tensor>& stand_ins)> start;
  std::function<void(MetaAllocationScope&)> end;
  RunObserver* observer = nullptr;  // carried by the simulation's chunk strategy (chunked_run.h)
};
uint64_t simulate_watched(const NodePtr& root, const PlacedDevice& device, const Analysis& a, RunMode mode,
                          int64_t chunk, const SimulationWatch& watch, const RecomputePlan* recompute = nullptr);

namespace testing {
// Multiplies every simulated, calibrated, measured or coarse figure, not what runs observed
// (to provoke real out-of-memory errors, and to see runs correct estimates); 1 by default.
void set_estimate_scale(double scale);
// Makes the simulation fail, as it would for an op without meta kernels.
void set_simulation_fails(bool fails);
// Whether simulations and probes are followed op by op on the CPU (the calibration added op
// by op, Estimator::added_op_by_op); true by default. False: the calibration is added at the
// peak, as before op following; to compare what following costs a first plan in one binary.
void set_ops_followed(bool followed);
// Real probes and simulations run so far (all graphs).
uint64_t probes_run();
uint64_t simulations_run();
}  // namespace testing

}  // namespace koila
