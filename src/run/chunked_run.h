// The chunk strategy: how a graph is evaluated, or a backward run, in chunks of the batch
// so that results and gradients equal the unsplit ones. The same code serves the real
// run, the planner's simulation (on meta stand-ins, first chunks only) and its probes (real
// tensors, first chunk only, gradients dropped), so that what is estimated is what runs.
#pragma once

#include <ATen/ATen.h>

#include <functional>

#include "graph/graph.h"
#include "run/analysis.h"
#include "run/grad_starts.h"
#include "run/observer.h"
#include "run/recompute.h"

namespace koila {

// How a backward's loss reduced its batch, for combining the gradients of backward runs
// over several shards of one batch (a process group, group.h).
struct LossReduction {
  enum class Kind {
    Mean,  // a MEAN over the batch: `count` is what it averaged over (ignored targets excluded)
    Sum,   // SUM reductions only
    Other  // no reduction over a lazy batch (a concrete loss, no batch), or max/min
  };
  Kind kind = Kind::Other;
  double count = 0;
};

// A backward's last step before any gradient is final: called once, when every chunk has
// run, with the leaves the gradients go to, this run's gradient of each (owned, dense,
// undefined where none reached the leaf; it may change them in place, and what it leaves is
// what is added into .grad) and how the loss reduced the batch. When it throws, every
// .grad is put back as it was.
using BeforeCommit = std::function<void(const Tensors& leaves, const Tensors& grads, const LossReduction&)>;

// Calls `before_commit` with gradients as autograd handed them out (views of other tensors,
// expanded scalars), each first made an owned dense tensor it may change in place.
void hand_over(const BeforeCommit& before_commit, const Tensors& leaves, Tensors& grads,
               const LossReduction& reduction);

struct ChunkRun {
  int64_t chunk = -1;       // samples per chunk; -1 (or the batch or more): unsplit
  int64_t max_chunks = -1;  // > 0: stop after this many chunks (simulations and probes)
  // The values of leaves (meta stand-ins, probe copies); default: the nodes' tensors.
  std::function<at::Tensor(const Node&)> leaf;
  // Simulation on meta tensors: what the run allocates itself goes to the meta device, and
  // the counts a mean averaged over are not read (their values do not exist).
  bool meta = false;
  bool commit = true;  // add the gradients into .grad; false: compute and drop them
  // With commit false: gradients go into the leaves' .grad as a committed run's do (each as
  // autograd has it, added into what the chunks before left; a held .grad snapshotted and
  // zeroed first), and every .grad is put back at the end as after a failed run, so that a
  // probe holds what the run's chunks hold without copies of the leaves. Nothing else of a
  // committed run (statistics per chunk, before_commit) takes place. Split backward runs.
  bool rolled_back = false;
  // Batch norm in training computes each chunk's own statistics (KOILA_BATCH_STATS_PER_CHUNK,
  // batch_stats.h): its running statistics get one update per pass whose statistics count
  // (the forward of an evaluation, the backward loop of a backward). Real committed runs
  // only; simulations and probes leave statistics alone (they run on stand-ins and copies).
  bool per_chunk_stats = false;
  // Told of chunks and phases as they run (observer.h): progress reporting in real planned
  // runs, the memory timeline in its simulation. Not owned; null: nobody watches.
  RunObserver* observer = nullptr;
  // In a simulation: whether the real tensor behind a stand-in has an all-zero .grad (the
  // stand-in has a meta .grad when the real one has a .grad). Unset: none is known zero.
  std::function<bool(const at::Tensor&)> grad_is_zero;
  // Real committed backward runs: see BeforeCommit.
  BeforeCommit before_commit;
  // Real runs: how the leaves' .grad stood when the run was planned (read again where
  // they changed since); null: read them.
  const GradStarts* grad_starts = nullptr;
  // Backward runs: segments of the chunks' forward that are freed and recomputed in their
  // backward (run/recompute.h), made for the schedule this run evaluates (the whole graph's
  // when unsplit, the boundaries' when split); null: nothing is recomputed.
  const RecomputePlan* recompute = nullptr;
};

// The value of `root`, chunked along the batch as `run` says. Records no autograd.
at::Tensor forward_chunks(const NodePtr& root, const Analysis& a, const ChunkRun& run);

// Backward from the one-element `loss`, chunked as `run` says. Each chunk's gradients are
// added into .grad as autograd computes them (no second copy of the gradients is kept);
// a failure midway puts every .grad back as it was: absent or all-zero .grad are restored
// as such, any other .grad from a snapshot taken before the first chunk (in host memory
// when the device is not the CPU).
void backward_chunks(const NodePtr& loss, const Analysis& a, const ChunkRun& run);

}  // namespace koila
