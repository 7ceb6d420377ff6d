// What the benchmark programs share: timing, memory figures, table printing.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "koila.h"
#include "median.h"
#include "memory/device_memory.h"
#include "models.h"
#include "plan/planner.h"

namespace bench {

using koila_models::check;

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median seconds of `repeats` runs of each step, after one warm-up run of each. The steps
// take turns, so that drift in the machine's speed affects all of them alike.
inline std::vector<double> median_times(int repeats, const std::vector<std::function<void()>>& steps) {
  for (const auto& step : steps) step();
  std::vector<std::vector<double>> times(steps.size());
  for (int i = 0; i < repeats; ++i) {
    for (size_t k = 0; k < steps.size(); ++k) {
      const double start = bench::now_seconds();
      steps[k]();
      times[k].push_back(bench::now_seconds() - start);
    }
  }
  std::vector<double> medians;
  for (auto& t : times) medians.push_back(median(t));
  return medians;
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

struct EstimateRow {
  uint64_t estimated_peak, measured_peak, estimated_extra, measured_extra;
  int64_t chunk, chunks;
};

// Evaluates `loss` (FORWARD) or backpropagates it (TRAINING) once, unsplit (with a budget
// far above the need) or with a budget that fits chunks of `chunk` samples (by the
// estimate, plus 15%, plus the allocator's overhead), and reports the planner's estimated peak and
// the measured one.
// `zero_grad` clears the gradients before and after.
inline EstimateRow measure_estimate(const koila_tensor* loss, int64_t batch, koila_mode mode, int64_t chunk,
                                    const char* device, const std::function<void()>& zero_grad) {
  zero_grad();
  koila_plan* plan = nullptr;
  uint64_t budget = uint64_t{1} << 50;
  if (chunk < batch) {
    const auto m = mode == KOILA_MODE_TRAINING ? koila::RunMode::Training : koila::RunMode::Forward;
    // (plus what the device's allocator reserves beyond the tensors: CUDA)
    budget = memory(device).current + static_cast<uint64_t>(1.15 * koila::estimate_extra(loss->node, m, chunk)) +
             koila::estimate_allocator_overhead(loss->node, m, chunk);
  }
  check(koila_set_memory_budget(device, budget), "koila_set_memory_budget");
  check(koila_plan_new(&plan, loss, mode), "koila_plan_new");
  EstimateRow r{};
  r.estimated_peak = koila_plan_peak_bytes(plan);
  r.chunk = koila_plan_chunk_size(plan);
  r.chunks = koila_plan_num_chunks(plan);
  koila_plan_free(plan);
  check(koila_memory_reset_peak(device), "koila_memory_reset_peak");
  const Memory before = memory(device);
  r.estimated_extra = r.estimated_peak - before.current;
  if (mode == KOILA_MODE_TRAINING) {
    check(koila_backward(loss), "koila_backward");
  } else {
    double value = 0;
    check(koila_tensor_item(loss, &value), "koila_tensor_item");
  }
  r.measured_peak = memory(device).peak;
  r.measured_extra = r.measured_peak - before.current;
  zero_grad();
  check(koila_set_memory_budget(device, 0), "koila_set_memory_budget");
  return r;
}

inline void print_estimate_header() {
  std::printf(
      "| model | batch | mode | budget | chunk x n | est. peak MiB | meas. peak MiB | error | est. extra MiB | meas. "
      "extra MiB | error |\n");
  std::printf("|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|\n");
}

// Prints one table row; returns |error| of the extra.
inline double print_estimate_row(const char* model, int64_t batch, koila_mode mode, const char* budget,
                                 const EstimateRow& r) {
  const double e1 = (double(r.estimated_peak) - double(r.measured_peak)) / double(r.measured_peak);
  const double e2 = (double(r.estimated_extra) - double(r.measured_extra)) / double(r.measured_extra);
  std::printf("| %s | %lld | %s | %s | %lld x %lld | %.1f | %.1f | %+.1f%% | %.1f | %.1f | %+.1f%% |\n", model,
              static_cast<long long>(batch), mode == KOILA_MODE_TRAINING ? "training" : "forward", budget,
              static_cast<long long>(r.chunk), static_cast<long long>(r.chunks), mib(r.estimated_peak),
              mib(r.measured_peak), 100 * e1, mib(r.estimated_extra), mib(r.measured_extra), 100 * e2);
  return e2 < 0 ? -e2 : e2;
}

}  // namespace bench
