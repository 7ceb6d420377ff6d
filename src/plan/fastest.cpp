#include "plan/fastest.h"

#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>

#ifdef KOILA_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace koila {
namespace {

std::mutex run_seconds_mutex;
std::function<double(int64_t)> run_seconds_override;

std::string ms(double seconds) {
  const double v = seconds * 1e3;
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f ms" : v >= 1 ? "%.1f ms" : "%.3f ms", v);
  return buf;
}

std::string percent(double fraction) { return std::to_string(std::lround(fraction * 100)) + "%"; }

std::string label(int64_t chunk, int64_t batch) {
  return chunk >= batch ? std::string("unsplit") : "chunks of " + std::to_string(chunk);
}

// "unsplit 171 ms, 128: 163 ms, 64: 157 ms"
void append_measured(std::string& list, int64_t chunk, int64_t batch, double seconds) {
  if (!list.empty()) list += ", ";
  list += (chunk >= batch ? std::string("unsplit") : std::to_string(chunk) + ":") + " " + ms(seconds);
}

void synchronize(const c10::Device& device) {
#ifdef KOILA_WITH_CUDA
  if (device.is_cuda()) {
    const c10::DeviceGuard on(device);
    c10::cuda::device_synchronize();
  }
#else
  (void)device;
#endif
}

}  // namespace

std::vector<int64_t> fastest_candidates(int64_t largest, const std::function<bool(int64_t)>& fits) {
  std::vector<int64_t> out{largest};
  int64_t p = 1;  // the largest power of two below `largest`
  while (p * 2 < largest) p *= 2;
  for (; p >= 1 && p < largest && out.size() < kFastestCandidates; p /= 2)
    if (fits(p)) out.push_back(p);
  return out;
}

FastestChoice choose_fastest(const std::vector<int64_t>& candidates, int64_t batch, const ChunkTimings& timings) {
  FastestChoice choice;
  if (candidates.size() == 1) {
    choice.chunk = candidates[0];
    choice.reason = "KOILA_CHUNK_FASTEST: one candidate (" + label(candidates[0], batch) + "), nothing to measure";
    return choice;
  }
  // Round r walks the candidates largest first, by the fastest run of each so far, up to
  // the first clearly slower than the best before it; the first met with fewer than r runs
  // is the next to time. Rounds spread each candidate's runs apart in time, so that a
  // passing disturbance (another process, a first run's warm-up) slows one run of several
  // candidates rather than both runs of one.
  int64_t best = -1;
  double best_seconds = 0;
  std::string measured, stopped;
  for (int round = 1; round <= kTimedRunsPerCandidate; ++round) {
    best = -1;
    measured.clear();
    stopped.clear();
    for (size_t i = 0; i < candidates.size(); ++i) {
      const int64_t chunk = candidates[i];
      const auto found = timings.find(chunk);
      const int runs = found == timings.end() ? 0 : found->second.runs;
      if (runs < round) {
        choice.chunk = chunk;
        choice.timed = true;
        choice.reason = "KOILA_CHUNK_FASTEST: measuring candidate " + std::to_string(i + 1) + " of " +
                        std::to_string(candidates.size()) + " (" + label(chunk, batch) + "), round " +
                        std::to_string(round) + " of " + std::to_string(kTimedRunsPerCandidate);
        if (!measured.empty()) choice.reason += "; measured so far: " + measured;
        return choice;
      }
      const double seconds = found->second.seconds;
      append_measured(measured, chunk, batch, seconds);
      if (best >= 0 && seconds >= kClearlySlower * best_seconds) {
        if (i + 1 < candidates.size())
          stopped = "; " + std::to_string(chunk) + " was " + percent(kClearlySlower - 1) +
                    " or more slower than the best, smaller chunks were not timed";
        break;
      }
      if (best < 0 || seconds <= kClearlyFaster * best_seconds) {
        best = chunk;
        best_seconds = seconds;
      }
    }
  }
  choice.chunk = best;
  const int64_t largest = candidates[0];
  const double largest_seconds = timings.at(largest).seconds;
  if (best == largest)
    choice.reason = "KOILA_CHUNK_FASTEST: " + std::string(best >= batch ? "unsplit" : "the largest chunk that fits") +
                    " kept (no smaller chunk measured " + percent(1 - kClearlyFaster) + " or more faster)";
  else
    choice.reason = "KOILA_CHUNK_FASTEST: " + label(best, batch) + " measured fastest (" + ms(best_seconds) + " vs " +
                    ms(largest_seconds) + " " +
                    (largest >= batch ? "unsplit" : "in chunks of " + std::to_string(largest)) + ")";
  choice.reason +=
      "; measured (fastest of " + std::to_string(kTimedRunsPerCandidate) + " runs each): " + measured + stopped;
  return choice;
}

void record_timing(ChunkTimings& timings, int64_t chunk, double seconds) {
  ChunkTiming& t = timings[chunk];
  t.seconds = t.runs == 0 ? seconds : std::min(t.seconds, seconds);
  ++t.runs;
}

double timed_run(const c10::Device& device, int64_t chunk, const std::function<void()>& run) {
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  run();
  synchronize(device);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(run_seconds_mutex);
  if (run_seconds_override) seconds = run_seconds_override(chunk);
  return seconds;
}

namespace testing {
void set_run_seconds(std::function<double(int64_t chunk)> fn) {
  std::lock_guard<std::mutex> lock(run_seconds_mutex);
  run_seconds_override = std::move(fn);
}
}  // namespace testing

}  // namespace koila
