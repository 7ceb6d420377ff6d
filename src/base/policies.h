// The run policies the C API's setters choose (koila_set_batch_stats, koila_set_chunking,
// koila_set_recompute), as the engine knows them; api/chunking.cpp converts between the two.
#pragma once

namespace koila {

// How batch norm in training treats a batch run in chunks.
enum class BatchStats {
  Exact,     // its statistics couple the batch: such a pass is not split
  PerChunk,  // each chunk normalizes with its own statistics
};

// Which chunk size a plan picks among those that fit.
enum class Chunking {
  Largest,  // the whole batch if it fits, else the largest power of two
  Fastest,  // the one measured fastest (plan/fastest.h)
};

// When a plan recomputes activations in the backward instead of keeping them.
enum class Recompute {
  Off,        // never
  AsNeeded,   // only where no chunk fits without it
  Preferred,  // wherever it lets a larger chunk fit
};

}  // namespace koila
