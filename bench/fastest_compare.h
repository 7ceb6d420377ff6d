// KOILA_CHUNK_FASTEST against LARGEST for one lazy graph, through the C API alone (shared
// by bench_step_time and bench_chunking): the runs FASTEST spends measuring its candidates,
// its choice and the reason its plan gives, and the step time of both policies, medians of
// interleaved steps.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "koila.h"
#include "median.h"

namespace fastest_bench {

struct Comparison {
  int measuring_runs = 0;  // runs until the plan stopped measuring
  int64_t batch = -1, largest_chunk = -1, fastest_chunk = -1, fastest_chunks = -1;
  std::string why;                                  // the FASTEST sentence of the plan's description
  double largest_seconds = 0, fastest_seconds = 0;  // medians
  double speedup() const { return fastest_seconds > 0 ? largest_seconds / fastest_seconds : 0; }
};

inline void ok(koila_status* s, const char* what) {
  if (!s) return;
  const std::string message = std::string(what) + ": " + koila_status_message(s);
  koila_status_free(s);
  throw std::runtime_error(message);
}

struct PlanSummary {
  int64_t chunk = -1, chunks = -1;
  std::string text;
};

inline PlanSummary plan_summary(const koila_tensor* t, koila_mode mode) {
  koila_plan* p = nullptr;
  ok(koila_plan_new(&p, t, mode), "koila_plan_new");
  PlanSummary s;
  s.chunk = koila_plan_chunk_size(p);
  s.chunks = koila_plan_num_chunks(p);
  size_t needed = 0;
  koila_status* st = koila_plan_describe(p, nullptr, 0, &needed);
  if (!st) {
    s.text.assign(needed, '\0');
    st = koila_plan_describe(p, s.text.data(), needed, &needed);
    s.text.resize(needed - 1);
  }
  koila_plan_free(p);
  ok(st, "koila_plan_describe");
  return s;
}

// From "KOILA_CHUNK_FASTEST:" to the end of the description, less its final period.
inline std::string fastest_sentence(const std::string& text) {
  const size_t at = text.find("KOILA_CHUNK_FASTEST:");
  if (at == std::string::npos) return "";
  std::string s = text.substr(at + 21);
  const size_t end = s.find(". ");
  if (end != std::string::npos) s.erase(end);
  while (!s.empty() && (s.back() == '.' || s.back() == ' ')) s.pop_back();
  return s;
}

using bench::median;

// `run` runs one step of `t` in `mode` (a read, or a backward) under the budget in force,
// after `reset` (nothing, or zero_grad: plans are made after it too, as a backward's plan
// depends on the .grad it finds). FASTEST measures until its plan stops measuring (at
// most 10 runs, see koila.h), then LARGEST and FASTEST steps take turns `repeats` times;
// `reset` is not timed. Leaves LARGEST in force.
inline Comparison compare_fastest(const koila_tensor* t, koila_mode mode, const std::function<void()>& reset,
                                  const std::function<void()>& run, int repeats) {
  Comparison c;
  auto plan = [&] {
    reset();
    return plan_summary(t, mode);
  };
  ok(koila_set_chunking(KOILA_CHUNK_LARGEST), "koila_set_chunking");
  c.largest_chunk = plan().chunk;
  run();  // LARGEST warmed up
  ok(koila_set_chunking(KOILA_CHUNK_FASTEST), "koila_set_chunking");
  PlanSummary fastest = plan();
  while (fastest.text.find("measuring candidate") != std::string::npos && c.measuring_runs < 20) {
    run();
    ++c.measuring_runs;
    fastest = plan();
  }
  c.fastest_chunk = fastest.chunk;
  c.fastest_chunks = fastest.chunks;
  c.why = fastest_sentence(fastest.text);
  std::vector<double> times[2];
  for (int i = 0; i < repeats; ++i) {
    for (int k = 0; k < 2; ++k) {
      ok(koila_set_chunking(k == 0 ? KOILA_CHUNK_LARGEST : KOILA_CHUNK_FASTEST), "koila_set_chunking");
      reset();
      const auto start = std::chrono::steady_clock::now();
      run();
      times[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  ok(koila_set_chunking(KOILA_CHUNK_LARGEST), "koila_set_chunking");
  c.largest_seconds = median(times[0]);
  c.fastest_seconds = median(times[1]);
  return c;
}

}  // namespace fastest_bench
