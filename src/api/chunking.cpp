// The C entry points for chunking options: global settings that apply to every planned run. Each
// converts the C enum (range-checked first) into the engine's (base/policies.h).
#include "api/args.h"
#include "base/error.h"
#include "plan/chunking_options.h"
#include "run/progress.h"

using namespace koila;

extern "C" {

KOILA_API koila_status* koila_set_batch_stats(koila_batch_stats policy) {
  return guard(__func__, [&] {
    switch (
        arg::enumeration(policy, "policy", "koila_batch_stats", KOILA_BATCH_STATS_EXACT, KOILA_BATCH_STATS_PER_CHUNK)) {
      case KOILA_BATCH_STATS_EXACT: return set_batch_stats(BatchStats::Exact);
      case KOILA_BATCH_STATS_PER_CHUNK: return set_batch_stats(BatchStats::PerChunk);
    }
  });
}

KOILA_API koila_status* koila_set_chunking(koila_chunking policy) {
  return guard(__func__, [&] {
    switch (arg::enumeration(policy, "policy", "koila_chunking", KOILA_CHUNK_LARGEST, KOILA_CHUNK_FASTEST)) {
      case KOILA_CHUNK_LARGEST: return set_chunking(Chunking::Largest);
      case KOILA_CHUNK_FASTEST: return set_chunking(Chunking::Fastest);
    }
  });
}

KOILA_API koila_status* koila_set_recompute(koila_recompute policy) {
  return guard(__func__, [&] {
    switch (arg::enumeration(policy, "policy", "koila_recompute", KOILA_RECOMPUTE_OFF, KOILA_RECOMPUTE_PREFERRED)) {
      case KOILA_RECOMPUTE_OFF: return set_recompute(Recompute::Off);
      case KOILA_RECOMPUTE_AS_NEEDED: return set_recompute(Recompute::AsNeeded);
      case KOILA_RECOMPUTE_PREFERRED: return set_recompute(Recompute::Preferred);
    }
  });
}

KOILA_API koila_status* koila_set_progress(koila_progress_fn fn, void* user) {
  return guard(__func__, [&] { set_progress(fn, user); });
}

}  // extern "C"
