// The C entry points for chunking options: global settings that apply to every planned run.
#include "api/args.h"
#include "base/error.h"
#include "plan/chunking_options.h"
#include "run/progress.h"

using namespace koila;

extern "C" {

KOILA_API koila_status* koila_set_batch_stats(koila_batch_stats policy) {
  return guard(__func__, [&] {
    set_batch_stats(
        arg::enumeration(policy, "policy", "koila_batch_stats", KOILA_BATCH_STATS_EXACT, KOILA_BATCH_STATS_PER_CHUNK));
  });
}

KOILA_API koila_status* koila_set_chunking(koila_chunking policy) {
  return guard(__func__, [&] {
    set_chunking(arg::enumeration(policy, "policy", "koila_chunking", KOILA_CHUNK_LARGEST, KOILA_CHUNK_FASTEST));
  });
}

KOILA_API koila_status* koila_set_recompute(koila_recompute policy) {
  return guard(__func__, [&] {
    set_recompute(
        arg::enumeration(policy, "policy", "koila_recompute", KOILA_RECOMPUTE_OFF, KOILA_RECOMPUTE_PREFERRED));
  });
}

KOILA_API koila_status* koila_set_progress(koila_progress_fn fn, void* user) {
  return guard(__func__, [&] { set_progress(fn, user); });
}

}  // extern "C"
