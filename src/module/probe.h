// Internal to module/ (only src/module/*.cpp include it; not part of koila's interface):
// probes, the module run for real on a few samples where meta tensors cannot tell: its
// result's shape when some op inside has no meta kernel, and whether it keeps samples apart.
// Probes run without gradients, on a twin whose buffers are copies (batch norm's running
// statistics stay untouched), every run drawing the same random numbers (every generator the
// device's run can draw from, reseeded; restored afterwards), with CUDA's kernels fixed
// (base/fixed_kernels.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/fixed_kernels.h"
#include "base/random_scope.h"
#include "graph/graph.h"
#include "module/call.h"

namespace koila::module_detail {

// Probes use at most this many samples.
constexpr int64_t kProbeSamples = 3;

// The module of a call run on the first `samples` samples of the call's inputs (-1: the
// inputs whole, for a call without a batched input).
class Probe {
 public:
  Probe(const Call& call, const Node& self, int64_t samples);

  int64_t samples() const { return samples_; }

  // The module's output on `inputs` (default: the probe inputs), narrowed to `n` samples.
  at::Tensor run(const Tensors& inputs, int64_t n = -1);
  at::Tensor run(int64_t n = -1) { return run(inputs_, n); }
  // Every result of the module on the probe inputs (run_call_all).
  Tensors run_all();

  // Runs from now on with the module's training batch norm layers evaluating.
  void set_batch_norm_eval(bool on) { batch_norm_eval_ = on; }

  // The probe inputs with sample j changed in every batched input; nullopt when no input
  // could be changed.
  std::optional<Tensors> perturbed(int64_t j) const;

 private:
  // The first samples of the caller's inputs (whatever is needed of the graph before them
  // is evaluated for those samples only); made-up values when that fails.
  Tensors probe_inputs(const Node& self);
  // The arguments of a run on `inputs` narrowed to `n` samples (-1: whole), the random
  // generators reseeded.
  Tensors args(const Tensors& inputs, int64_t n);

  const Call& call_;
  int64_t samples_;
  RandomScope random_;
  FixedKernels kernels_;  // CUDA's kernels chosen alike in every run of the probe
  Tensors module_state_;
  Tensors inputs_;
  std::vector<int64_t> batch_dims_;
  bool batch_norm_eval_ = false;
};

// Where the module cannot run on meta tensors (`meta_failure` says why): the dim of its
// result that carries a batch of `batch`, from its results on the probe's samples (`full`)
// and on one sample less; `*out` becomes its result for the whole batch. -1, with `*why`
// set, where the probe holds the whole batch and cannot show where it goes; fails where it
// holds only part of the batch (the result for the rest is unknown).
int64_t probe_batch_dim(const Call& call, Probe& probe, const at::Tensor& full, int64_t batch,
                        const std::string& meta_failure, Meta* out, std::string* why);

// Whether the module keeps samples apart: changing one sample of the probe changes no other
// sample's result. `base` is its result on the probe's samples; `out` its result for the
// whole batch, which carries the batch at `out_dim`. The batch goes on at `out_dim` where it
// does, or only batch statistics mix them (BatchNorm layers in training: stats_couples);
// otherwise the call couples the batch.
BatchResult samples_kept_apart(const Call& call, Probe& probe, const at::Tensor& base, const Meta& out,
                               int64_t out_dim);

}  // namespace koila::module_detail
