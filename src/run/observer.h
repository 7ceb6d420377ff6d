// What a chunked run tells whoever watches it: which chunk starts, whether its forward or
// its backward runs next, and each chunk a pass completes. The chunk strategy carries one
// (ChunkRun::observer, chunked_run.h) instead of marks left in thread-locals: the memory
// timeline (plan/timeline.h) follows phases and chunks, progress reporting (progress.h)
// completed chunks, the calibration op by op (plan/estimate.cpp) each op of koila's graph as
// the executor runs it. Every method does nothing unless overridden.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace koila {

struct Node;

enum class Phase { Forward, Backward };

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  // Chunk `index` (0-based) starts; its forward runs first. An unsplit run announces none.
  virtual void chunk_started(int64_t /*index*/) {}
  // What runs next on this thread is the forward or the backward of the current chunk.
  virtual void phase(Phase /*phase*/) {}
  // The current chunk's backward starts from `outputs` (the roots autograd is given), right
  // after phase(Phase::Backward).
  virtual void backward_from(const std::vector<at::Tensor>& /*outputs*/) {}
  // A pass ("forward": one that combines values; "backward": the loop of a backward) has
  // completed `done` of its `total` chunks; an unsplit run is one chunk.
  virtual void chunk_done(const char* /*pass*/, int64_t /*done*/, int64_t /*total*/) {}
  // Whether op_starts and op_ran are wanted: each costs a call per op of every evaluation.
  virtual bool follows_ops() const { return false; }
  // An op node of the graph starts, and has run (its inputs not yet released), on this
  // thread, in a forward (with follows_ops()).
  virtual void op_starts(const Node& /*op*/) {}
  virtual void op_ran(const Node& /*op*/) {}
};

}  // namespace koila
