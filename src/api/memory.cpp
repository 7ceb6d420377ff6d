// The C entry points for memory budgets, measurement and plans.
#include <ATen/ATen.h>

#include "api/args.h"
#include "api/convert.h"
#include "api/handles.h"
#include "base/error.h"
#include "graph/graph.h"
#include "memory/budget.h"
#include "memory/device_memory.h"
#include "memory/placed_device.h"
#include "plan/planner.h"

using namespace koila;

namespace {

PlacedDevice device_arg(const char* device) { return PlacedDevice(parse_device(device)); }

}  // namespace

extern "C" {

KOILA_API koila_status* koila_set_memory_budget(const char* device, uint64_t bytes) {
  return guard(__func__, [&] { set_budget(device_arg(device), bytes); });
}

KOILA_API koila_status* koila_memory_budget(const char* device, uint64_t* out) {
  return guard(__func__, [&] {
    const c10::Device d = device_arg(device);
    arg::not_null(out, "out");
    *out = budget(d);
  });
}

KOILA_API koila_status* koila_memory_stats(const char* device, uint64_t* current, uint64_t* peak) {
  return guard(__func__, [&] {
    const MemoryStats s = memory_stats(device_arg(device));
    if (current) *current = s.current;
    if (peak) *peak = s.peak;
  });
}

KOILA_API koila_status* koila_memory_reset_peak(const char* device) {
  return guard(__func__, [&] { reset_peak(device_arg(device)); });
}

KOILA_API koila_status* koila_plan_new(koila_plan** out, const koila_tensor* t, koila_mode mode) {
  return guard(__func__, [&] {
    arg::out(out);
    const NodePtr& node = node_of(t, "t");
    const koila_mode m = arg::enumeration(mode, "mode", "koila_mode", KOILA_MODE_FORWARD, KOILA_MODE_TRAINING);
    *out = new koila_plan{make_plan(node, m == KOILA_MODE_TRAINING ? RunMode::Training : RunMode::Forward)};
  });
}

KOILA_API int64_t koila_plan_batch_size(const koila_plan* p) { return p ? p->plan.batch : -1; }
KOILA_API int64_t koila_plan_chunk_size(const koila_plan* p) { return p ? p->plan.chunk : -1; }
KOILA_API int64_t koila_plan_num_chunks(const koila_plan* p) { return p ? p->plan.chunks : 0; }
KOILA_API uint64_t koila_plan_peak_bytes(const koila_plan* p) { return p ? p->plan.peak() : 0; }
KOILA_API uint64_t koila_plan_full_peak_bytes(const koila_plan* p) { return p ? p->plan.full_peak() : 0; }
KOILA_API uint64_t koila_plan_budget_bytes(const koila_plan* p) { return p ? p->plan.budget_bytes : 0; }
KOILA_API uint64_t koila_plan_needed_bytes(const koila_plan* p) { return p ? p->plan.needed() : 0; }
KOILA_API uint64_t koila_plan_recomputed_bytes(const koila_plan* p) { return p ? p->plan.recomputed_bytes() : 0; }
KOILA_API uint64_t koila_plan_full_needed_bytes(const koila_plan* p) { return p ? p->plan.full_needed() : 0; }

KOILA_API koila_status* koila_plan_describe(const koila_plan* p, char* buf, size_t capacity, size_t* needed) {
  return guard(__func__, [&] { write_text(arg::handle(p, "p").plan.describe(), buf, capacity, needed); });
}

KOILA_API void koila_plan_free(koila_plan* p) { delete p; }

}  // extern "C"
