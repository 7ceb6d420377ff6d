// What the benchmark programs share: timing, memory figures, table printing.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include "koila.h"
#include "models.h"

namespace bench {

using koila_models::check;

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

struct Memory {
  uint64_t current = 0, peak = 0;
};

inline Memory memory(const char* device) {
  Memory m;
  check(koila_memory_stats(device, &m.current, &m.peak), "koila_memory_stats");
  return m;
}

inline std::string describe(const koila_tensor* t, koila_mode mode) {
  koila_plan* plan = nullptr;
  check(koila_plan_new(&plan, t, mode), "koila_plan_new");
  size_t needed = 0;
  check(koila_plan_describe(plan, nullptr, 0, &needed), "koila_plan_describe");
  std::string text(needed, '\0');
  check(koila_plan_describe(plan, text.data(), needed, &needed), "koila_plan_describe");
  text.resize(needed - 1);
  koila_plan_free(plan);
  return text;
}

}  // namespace bench
