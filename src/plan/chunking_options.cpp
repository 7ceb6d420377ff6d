#include "plan/chunking_options.h"

#include <atomic>

namespace koila {
namespace {

std::atomic<int> batch_stats_policy{KOILA_BATCH_STATS_EXACT};
std::atomic<int> chunking_policy{KOILA_CHUNK_LARGEST};
std::atomic<int> recompute_policy{KOILA_RECOMPUTE_AS_NEEDED};

}  // namespace

void set_batch_stats(koila_batch_stats policy) { batch_stats_policy.store(policy); }
koila_batch_stats batch_stats() { return static_cast<koila_batch_stats>(batch_stats_policy.load()); }

void set_chunking(koila_chunking policy) { chunking_policy.store(policy); }
koila_chunking chunking() { return static_cast<koila_chunking>(chunking_policy.load()); }

void set_recompute(koila_recompute policy) { recompute_policy.store(policy); }
koila_recompute recompute() { return static_cast<koila_recompute>(recompute_policy.load()); }

const char* batch_stats_name(koila_batch_stats policy) {
  return policy == KOILA_BATCH_STATS_PER_CHUNK ? "KOILA_BATCH_STATS_PER_CHUNK" : "KOILA_BATCH_STATS_EXACT";
}

const char* chunking_name(koila_chunking policy) {
  return policy == KOILA_CHUNK_FASTEST ? "KOILA_CHUNK_FASTEST" : "KOILA_CHUNK_LARGEST";
}

}  // namespace koila
