// Batch statistics per chunk (koila_set_batch_stats with BatchStats::PerChunk): while
// a chunked pass runs, each batch norm in training normalizes its chunk with the chunk's own
// statistics, and its running statistics end as one update with the whole batch's mean and
// unbiased variance would leave them. Any real pass of a graph with batch norm in training
// (unsplit too) restores the running statistics when it fails, so that a retry after running
// out of memory updates them once.
//
// How: every batch norm call, koila's op and those inside TorchScript modules alike, goes
// through observed_batch_norm (modules' graphs call it as koila::batch_norm, see
// op_routes.h), which shows the chunked pass of this thread its arguments before
// it runs: the input, the running statistics and the factor it will update them with. (A
// RecordFunction observer did this before, at the cost of seeing every op's arguments:
// +28% on chunked steps of the corpus's batch-norm models.) Per chunk, it keeps each call's
// per-channel count and the mean and inverse standard deviation the kernel computed for its
// backward anyway (a var_mean of our own over every input cost another +30% on
// mobilenet_v2's chunked steps); after the last chunk they combine exactly, in double (the
// total mean, and the sum of squared deviations as the chunks' own plus their means'
// spread). The kernels' own updates are undone, and one update per call is applied with
// the combined statistics. Counters a module increments before each call
// (num_batches_tracked) are put back before every chunk, so every chunk sees the factor of
// one full-batch call.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "base/policies.h"
#include "graph/graph.h"

namespace koila {

class ChunkStats {
 public:
  enum class Handling {
    Off,       // nothing observed or restored (simulations, probes, graphs without batch norm in training)
    Restore,   // the kernels update the running statistics (those the nodes' stats_buffers
               // name, saved up front); a pass that fails restores them
    PerChunk,  // each chunk's statistics observed and combined; one update at commit()
  };
  // Observes this thread's batch norms in training while it lives, as `handling` says. `nodes`
  // are the graph's nodes: their stats_counters are restored between chunks and on failure.
  ChunkStats(Handling handling, const std::vector<const Node*>& nodes);
  ChunkStats(const ChunkStats&) = delete;
  ChunkStats& operator=(const ChunkStats&) = delete;
  // Unless commit() ran: every running statistic and counter back as it was.
  ~ChunkStats();

  // Call before each chunk runs (puts the counters back for the second chunk on).
  void start_chunk();
  // Call after each chunk ran: rethrows what recording a call failed with, and fails when
  // the graph names running statistics but no batch norm call was seen.
  void end_chunk();
  // After the last chunk: computes one update per batch norm call from the combined
  // statistics (allocating; nothing visible changes yet).
  void prepare();
  // Applies what prepare() computed (allocates nothing, cannot fail). Without it,
  // destruction restores the statistics: a failed pass, or one that only combines values
  // and is repeated by a second pass.
  void commit() noexcept;

  struct State;  // (batch_stats.cpp; observed_batch_norm reaches it through a thread-local pointer)

 private:
  std::unique_ptr<State> state_;
};

// While it lives, this thread's batch norms are not observed (a recomputed segment's second run,
// run/recompute.h: the first run's statistics were recorded).
class UnobservedStats {
 public:
  UnobservedStats();
  ~UnobservedStats();
  UnobservedStats(const UnobservedStats&) = delete;
  UnobservedStats& operator=(const UnobservedStats&) = delete;

 private:
  ChunkStats::State* previous_;
};

// at::batch_norm, whose arguments the chunked pass of this thread that keeps statistics
// per chunk (Handling::PerChunk), if any, records first.
at::Tensor observed_batch_norm(const at::Tensor& input, const c10::optional<at::Tensor>& weight,
                               const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& running_mean,
                               const c10::optional<at::Tensor>& running_var, bool training, double momentum, double eps,
                               bool cudnn_enabled);

}  // namespace koila
