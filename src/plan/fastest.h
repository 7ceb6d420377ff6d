// Chunking::Fastest: which chunk size a plan picks among those that fit, from the times
// of earlier runs of the same graph structure.
//
// The candidates are the chunk sizes that fit the budget, largest first (the whole batch
// when it fits, then powers of two), at most kFastestCandidates of them. Each of the first
// planned runs of a structure times the next candidate (a real run is the measurement:
// nothing runs twice for it), in kTimedRunsPerCandidate rounds over the candidates, largest
// first in each; a candidate's time is the fastest of its runs, which discounts a first
// run's warm-up (LibTorch's kernels prepare themselves per shape) and a passing
// disturbance. A round stops early at the first candidate slower than the best before it by
// kClearlySlower or more: smaller chunks rarely win back. Then every run uses the fastest
// measured candidate that fits, where a smaller chunk counts as faster than a larger one
// only by a margin (kClearlyFaster): timings vary by several percent from run to run, and a
// smaller chunk won by noise would cost rather than gain. The timings are kept in the
// structure's GraphRecord (plan/memo.h), so a budget that changes only changes the
// candidates, and one that shrinks measures the smaller ones it lets in.
//
// The choice is a function of the candidates and the timings alone, so that it can be
// tested without a clock (see testing::set_run_seconds).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace koila {

constexpr size_t kFastestCandidates = 5;   // the largest chunk that fits and 4 halvings
constexpr int kTimedRunsPerCandidate = 2;  // rounds: a candidate's time is the fastest of this many runs
constexpr double kClearlySlower = 1.25;    // measuring stops at a candidate this much slower
constexpr double kClearlyFaster = 0.90;    // a smaller chunk wins when it takes at most this much

// What the runs of one chunk size took.
struct ChunkTiming {
  double seconds = 0;  // the fastest run
  int runs = 0;        // runs timed
};
// Chunk size (the batch: unsplit) -> its timing, per graph structure.
using ChunkTimings = std::map<int64_t, ChunkTiming>;

// The chunk sizes FASTEST chooses among, largest first: `largest` (the chunk LARGEST
// picks; the batch when it runs unsplit), then the powers of two below it for which
// `fits(chunk)` holds, kFastestCandidates in all at most.
std::vector<int64_t> fastest_candidates(int64_t largest, const std::function<bool(int64_t)>& fits);

struct FastestChoice {
  int64_t chunk = -1;  // the chunk size of the next run
  bool timed = false;  // that run measures `chunk` as a candidate
  std::string reason;  // for the plan's description
};

// The choice among `candidates` (largest first, non-empty) given what was measured.
FastestChoice choose_fastest(const std::vector<int64_t>& candidates, int64_t batch, const ChunkTimings& timings);

// Adds a timed run of `chunk` that took `seconds` (a run that completed at that chunk;
// one that ran out of memory and retried smaller is not recorded).
void record_timing(ChunkTimings& timings, int64_t chunk, double seconds);

// Runs `run` and returns the seconds it took by the steady clock; on a CUDA device the
// device is synchronized before the clock is read at either end, so queued kernels count
// in the run that queued them. A test may replace the figure (testing::set_run_seconds).
double timed_run(const c10::Device& device, int64_t chunk, const std::function<void()>& run);

namespace testing {
// Replaces the seconds of every timed run with fn(chunk) (the run still happens); an empty
// fn restores the clock.
void set_run_seconds(std::function<double(int64_t chunk)> fn);
}  // namespace testing

}  // namespace koila
