#include "plan/planner.h"

#include <c10/core/GradMode.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <tuple>

#include "base/dims.h"
#include "base/error.h"
#include "base/random_scope.h"
#include "base/text.h"
#include "memory/budget.h"
#include "memory/device_memory.h"
#include "memory/reservations.h"
#include "memory/run_memory.h"
#include "plan/chunking_options.h"
#include "plan/estimate.h"
#include "plan/fastest.h"
#include "plan/memo.h"
#include "plan/recompute_choice.h"
#include "run/chunked_run.h"
#include "run/executor.h"
#include "run/progress.h"

namespace koila {

namespace {

// Planning and reserving happen together: two threads never both plan into the same room.
std::mutex plan_and_reserve;

uint64_t with_margin(uint64_t bytes) { return static_cast<uint64_t>(static_cast<double>(bytes) * (1.0 + kMargin)); }

int64_t largest_power_of_two_at_most(int64_t n) {
  int64_t p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

void check_loss(const NodePtr& loss) {
  const uint64_t numel = checked_numel(loss->meta.shape);
  if (numel != 1)
    fail(Code::InvalidArgument,
         "the loss must have exactly one element, but has shape " + shape_string(loss->meta.shape));
  if (!at::isFloatingType(loss->meta.dtype))
    fail(Code::Dtype, std::string("the loss must be floating point, but is ") + dtype_name(loss->meta.dtype));
}

// A run or plan started from a progress callback would run inside the run that called it
// (and could wait for that run to end): refused.
void check_not_in_progress_callback() {
  if (in_progress_callback())
    fail(Code::Unsupported,
         "a progress callback cannot evaluate, plan or run a backward "
         "(it runs inside the chunked run that called it)");
}

bool fits(const Plan& p, uint64_t extra, uint64_t allocator) { return p.needed(extra, allocator) <= p.budget_bytes; }
bool fits(const Plan& p) { return fits(p, p.extra_bytes, p.allocator_bytes); }

int64_t chunks_of(int64_t batch, int64_t chunk) { return (batch + chunk - 1) / chunk; }

// What a plan records of the device (`device`: the root's, canonical) before anything is
// estimated; a concrete value's plan ends there (nothing to evaluate: a backward walks
// LibTorch's graph).
Plan device_plan(const NodePtr& root, RunMode mode, const PlacedDevice& device) {
  if (mode == RunMode::Training) check_loss(root);
  Plan p;
  p.mode = mode;
  p.root = root;
  p.device = device;
  prepare_device(p.device);  // before what is in use is read: cuBLAS's workspace is not the run's
  p.in_use_bytes = memory_stats(p.device).current;
  p.reserved_by_others_bytes = outstanding_reservations(p.device);
  p.held_bytes = held_unreleasable(p.device);
  p.budget_bytes = budget(p.device);
  p.chunk = -1;
  return p;
}

// Bytes `limit` (default: the budget) leaves beyond what is in use, reserved and held when `p`
// was planned.
uint64_t room_left(const Plan& p, uint64_t limit) {
  const uint64_t taken = p.taken_bytes();
  return limit > taken ? limit - taken : 0;
}
uint64_t room_left(const Plan& p) { return room_left(p, p.budget_bytes); }

// The room a plan's estimate may take for a need within the budget (Plan::needed inverted), with
// `allocator` bytes for the device's allocator.
uint64_t extra_that_fits(const Plan& p, uint64_t allocator) {
  const uint64_t room = room_left(p);
  if (room <= allocator) return 0;
  return static_cast<uint64_t>(static_cast<double>(room - allocator) / (1.0 + kMargin));
}

// What recomputing as `r` needs: the figures, and whether they fit `p`.
struct Recomputing {
  std::shared_ptr<const RecomputePlan> plan;
  uint64_t extra = 0, allocator = 0;
  bool fits = false;
};

// The least room of `timeline` (the model of chunks of `normalized`) and its ranges, as
// RecomputeTimeline::least_room gives them: found once per structure and chunk.
double least_room_of(GraphRecord& record, const RecomputeTimeline& timeline, int64_t normalized, Ranges* least) {
  {
    std::lock_guard<std::mutex> lock(record.mutex);
    const auto found = record.timeline_least.find(normalized);
    if (found != record.timeline_least.end()) {
      *least = found->second.second;
      return found->second.first;
    }
  }
  const double room = timeline.least_room(least);
  std::lock_guard<std::mutex> lock(record.mutex);
  record.timeline_least[normalized] = {room, *least};
  return room;
}

// The recomputation of chunks of `chunk` (-1: unsplit) that fits `p` with the least extra
// forward work, or, with `most`, the one that frees the most (to find whether any fits). Each
// choice (plan/recompute_choice.h) is simulated; where it falls short, the model is asked for
// what the simulation says is missing, scaled by how far the model was off, a few times.
// nullopt where the graph cannot be simulated.
// With `inside`, module calls and programs also run in segments of their own graph
// (RecomputePlan::inside_programs); without `most`, as `most_known` does.
std::optional<Recomputing> recompute_for(const Plan& p, const Analysis& a, Estimator& estimator, int64_t chunk,
                                         bool most, const Recomputing* most_known = nullptr, bool inside = false) {
  if (!most && most_known && most_known->plan) inside = most_known->plan->inside_programs;
  const Schedule& base = a.splits(chunk) ? a.at_boundaries() : a.whole;
  const int64_t normalized = a.splits(chunk) ? chunk : -1;
  const uint64_t plain = estimator.extra(normalized);
  const std::vector<double> saved = estimator.saved_by_autograd(base, normalized);
  const auto simulate = [&](Ranges ranges) -> std::optional<Recomputing> {
    Recomputing r;
    r.plan = make_recompute_plan(base, std::move(ranges), a.splits(chunk) ? chunk : a.batch, saved, inside,
                                 inside ? estimator.freed_inside_programs(base, normalized) : 0);
    const std::optional<uint64_t> extra = estimator.extra_recomputed(*r.plan, &r.allocator);
    if (!extra) return std::nullopt;
    r.extra = *extra;
    r.fits = fits(p, r.extra, r.allocator);
    return r;
  };
  GraphRecord& record = estimator.record();
  if (most) {
    std::optional<Ranges> known;
    {
      std::lock_guard<std::mutex> lock(record.mutex);
      const auto found = record.most_recomputed.find(normalized);
      if (found != record.most_recomputed.end()) known = found->second;
    }
    if (known) return simulate(std::move(*known));
    // The most the first model frees, and the least peak of the timeline's and its sets for a
    // little more room (the model counts values, not the gradients in flight: a set it finds
    // worse may peak lower; the unet of bench_recompute: 0.81 -> 0.79 of its activations): the
    // lowest simulated.
    std::optional<Recomputing> r = simulate(choose_ranges(base, normalized, saved, UINT64_MAX));
    const RecomputeTimeline timeline(base, normalized, saved);
    Ranges least;
    const double room = least_room_of(record, timeline, normalized, &least);
    if (!least.empty()) {
      std::optional<Recomputing> other = simulate(std::move(least));
      if (other && (!r || other->extra < r->extra)) r = std::move(other);
      for (const double more : {1.05, 1.1, 1.2, 1.3}) {
        std::optional<Ranges> ranges = timeline.within(room * more);
        if (!ranges) continue;
        std::optional<Recomputing> t = simulate(std::move(*ranges));
        if (t && (!r || t->extra < r->extra)) r = std::move(t);
      }
    }
    if (r) {
      std::lock_guard<std::mutex> lock(record.mutex);
      record.most_recomputed[normalized] = r->plan->ranges;
    }
    return r;
  }
  // A choice made before for this chunk and room (plans of every step choose once).
  const auto memo_key = std::make_pair(normalized, room_left(p));
  std::optional<Ranges> known;
  {
    std::lock_guard<std::mutex> lock(record.mutex);
    auto found = record.recompute_choices.find(memo_key);
    if (found != record.recompute_choices.end()) known = found->second.ranges;
  }
  if (known) {
    std::optional<Recomputing> r = simulate(std::move(*known));
    if (r && r->fits) return r;
  }
  // The cheapest of the choices made for this chunk under other rooms that fits this one, after
  // the search below: the search is not monotone (the bench's transformer got +90% of its
  // forward's work with 44.9 MiB where it had found +67% with 42.6), and a plan with more room
  // must not cost more than one known to fit in less.
  // The timeline model's cheapest sets for rooms between its least and none, by bisection on the
  // room (simulated: the model counts values, the simulation all the run holds); the cheaper of
  // those that fit and `r`.
  const auto by_timeline = [&](std::optional<Recomputing> r) {
    const RecomputeTimeline timeline(base, normalized, saved);
    Ranges least;
    double lo = least_room_of(record, timeline, normalized, &least);
    if (least.empty()) return r;
    double hi = timeline.peak({});
    std::optional<Recomputing> best;
    for (int step = 0; step < 8 && hi - lo > hi / 64; ++step) {
      const double room = step == 0 ? lo : lo + (hi - lo) / 2;
      std::optional<Ranges> ranges = step == 0 ? std::optional<Ranges>(least) : timeline.within(room);
      std::optional<Recomputing> t = ranges ? simulate(std::move(*ranges)) : std::nullopt;
      if (t && t->fits) {
        if (!best || t->plan->recomputed_cost < best->plan->recomputed_cost) best = std::move(t);
        lo = room;
      } else {
        if (step == 0) break;  // (its least does not fit: nor will more room's)
        hi = room;
      }
    }
    if (best && (!r || !r->fits || best->plan->recomputed_cost < r->plan->recomputed_cost)) return best;
    return r;
  };
  const auto cheapest_known = [&](std::optional<Recomputing> r) {
    r = by_timeline(std::move(r));
    std::vector<std::pair<double, Ranges>> others;
    {
      std::lock_guard<std::mutex> lock(record.mutex);
      for (const auto& [key, choice] : record.recompute_choices)
        if (key.first == normalized && (!r || !r->fits || choice.cost < r->plan->recomputed_cost))
          others.emplace_back(choice.cost, choice.ranges);
    }
    std::sort(others.begin(), others.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (size_t k = 0; k < others.size() && k < 8; ++k) {
      std::optional<Recomputing> other = simulate(others[k].second);
      if (other && other->fits) {
        r = std::move(other);
        break;
      }
    }
    if (r && r->fits) {
      std::lock_guard<std::mutex> lock(record.mutex);
      record.recompute_choices[memo_key] = {r->plan->ranges, r->plan->recomputed_cost};
    }
    return r;
  };
  uint64_t allocator = estimator.allocator_overhead(normalized);
  // What the model frees for each byte the simulation shows freed: from the most recomputation,
  // simulated before (the model knows what autograd saves, not what the backward's gradients
  // in flight take: it saw 40 of a transformer's 54 MiB saved).
  double scale = 1;
  if (most_known && most_known->plan) {
    const double modelled = static_cast<double>(modelled_saving(base, normalized, saved, most_known->plan->ranges));
    const double saved_most = plain > most_known->extra ? static_cast<double>(plain - most_known->extra) : 0;
    if (modelled > 0 && saved_most > 0) scale = std::clamp(modelled / saved_most, 0.2, 5.0);
  }
  // The choice's set for `to_free`, and its set off the hull where it offers one, simulated: the
  // cheaper of those that fit, else the one that needs less.
  const auto chosen = [&](uint64_t to_free, bool* is_most, uint64_t* modelled) -> std::optional<Recomputing> {
    Ranges off_hull;
    Ranges ranges = choose_ranges(base, normalized, saved, to_free, is_most, &off_hull);
    if (modelled) *modelled = modelled_saving(base, normalized, saved, ranges);
    std::optional<Recomputing> r = simulate(std::move(ranges));
    if (!r || off_hull.empty()) return r;
    const uint64_t modelled_off = modelled ? modelled_saving(base, normalized, saved, off_hull) : 0;
    std::optional<Recomputing> other = simulate(std::move(off_hull));
    const bool better = other && (other->fits ? !r->fits || other->plan->recomputed_cost < r->plan->recomputed_cost
                                              : !r->fits && other->extra < r->extra);
    if (!better) return r;
    if (modelled) *modelled = modelled_off;
    return other;
  };
  std::optional<Recomputing> last;
  for (int attempt = 0; attempt < 6; ++attempt) {
    const uint64_t target = extra_that_fits(p, allocator);
    const double wanted = plain > target ? static_cast<double>(plain - target) : 0;
    bool is_most = false;
    const uint64_t to_free = static_cast<uint64_t>(std::min(wanted * scale * (attempt ? 1.05 : 1.0), 1.8e19));
    uint64_t modelled = 0;
    std::optional<Recomputing> r = chosen(to_free, &is_most, &modelled);
    if (!r) return last ? cheapest_known(std::move(last)) : last;
    last = r;
    if (r->fits) {
      // The model errs (what autograd saves is not all the backward holds): a smaller request,
      // by bisection, may fit too, for less work.
      uint64_t lo = 0, hi = to_free;
      for (int narrower = 0; narrower < 6 && hi - lo > hi / 64; ++narrower) {
        const uint64_t mid = lo + (hi - lo) / 2;
        std::optional<Recomputing> cheaper = chosen(mid, nullptr, nullptr);
        if (cheaper && cheaper->fits && cheaper->plan->recomputed_cost < r->plan->recomputed_cost) {
          r = std::move(cheaper);
          hi = mid;
        } else {
          lo = mid;
        }
      }
      return cheapest_known(std::move(r));
    }
    if (is_most) return cheapest_known(std::move(r));
    allocator = r->allocator;
    const double saved = plain > r->extra ? static_cast<double>(plain - r->extra) : 0;
    scale = saved > 0 ? std::clamp(static_cast<double>(modelled) / saved, scale * 1.05, scale * 8) : scale * 2;
  }
  return cheapest_known(std::move(last));
}

// The recomputation of chunks of `chunk` that fits `p` for the least work, given the most
// recomputation `most` (which fits): the least the choice finds, or `most` itself.
Recomputing least_that_fits(const Plan& p, const Analysis& a, Estimator& estimator, int64_t chunk,
                            const Recomputing& most) {
  const std::optional<Recomputing> chosen = recompute_for(p, a, estimator, chunk, /*most=*/false, &most);
  return chosen && chosen->fits ? *chosen : most;
}

// `p` runs chunks of `chunk` (the batch or more: unsplit) recomputing as `r` says.
void adopt(Plan& p, const Analysis& a, Estimator& estimator, int64_t chunk, const Recomputing& r) {
  p.unrecomputed_extra_bytes = estimator.extra(a.splits(chunk) ? chunk : -1);
  p.chunk = a.splits(chunk) ? chunk : a.batch;
  p.chunks = a.splits(chunk) ? chunks_of(a.batch, chunk) : 1;
  p.extra_bytes = r.extra;
  p.allocator_bytes = r.allocator;
  p.recompute = r.plan;
}

// Under Recompute::AsNeeded, for a backward whose plan `p` fits no chunk: the largest chunk
// (unsplit first, then powers of two down to 1; unsplit only where the batch cannot be split)
// that fits with the most recomputation, then the least recomputation that fits it. Where none
// fits, `p` notes the least budget that the most recomputation needs.
void plan_recompute(Plan& p, const Analysis& a, Estimator& estimator) {
  bool runs_programs = false;
  for (const Node* n : a.whole.order) runs_programs = runs_programs || (n->kind == NodeKind::Op && n->runs_program);
  std::vector<int64_t> chunks{-1};
  if (a.batch > 1 && p.coupled.empty())
    for (int64_t c = largest_power_of_two_at_most(a.batch - 1); c >= 1; c /= 2) chunks.push_back(c);
  for (int64_t chunk : chunks) {
    std::optional<Recomputing> most = recompute_for(p, a, estimator, chunk, /*most=*/true);
    if (!most) return;  // no simulation to plan it by
    // Where recomputing koila's ops does not fit, module calls and programs (one op each) run in
    // segments of their own graph too (module/segmented_call.h).
    if (!most->fits && runs_programs) {
      std::optional<Recomputing> inside = recompute_for(p, a, estimator, chunk, /*most=*/true, nullptr, true);
      if (inside && inside->extra < most->extra) most = std::move(inside);
    }
    p.least_recomputed_needed = p.needed(most->extra, most->allocator);
    p.least_recomputed_chunk = a.splits(chunk) ? chunk : a.batch;
    // Recomputing saves nothing here (a graph of one module call, recomputed whole, needs what
    // it needed): nor will it in smaller chunks.
    if (!most->fits && !runs_programs && most->extra >= estimator.extra(a.splits(chunk) ? chunk : -1)) return;
    if (!most->fits) continue;
    adopt(p, a, estimator, chunk, least_that_fits(p, a, estimator, chunk, *most));
    return;
  }
}

// Chunking::Fastest: replaces the largest chunk that fits (p.chunk) by the candidate the
// timings of earlier runs of the structure choose, or by the next candidate to time (fastest.h).
void choose_fastest_chunk(const Analysis& a, Estimator& estimator, Plan& p) {
  if (a.batch <= 0 || !fits(p)) return;  // no batch to split (or an empty one), or nothing fits
  if (!p.coupled.empty()) {
    p.chunk_choice = "KOILA_CHUNK_FASTEST: the batch cannot be split (" + p.coupled + "), nothing to measure";
    return;
  }
  if (!a.stats_coupled.empty() && p.batch_stats == BatchStats::PerChunk) {
    p.chunk_choice =
        "KOILA_CHUNK_FASTEST: the largest chunk that fits is kept, as with batch statistics per chunk "
        "the chunk size changes the results";
    return;
  }
  std::map<int64_t, std::pair<uint64_t, uint64_t>> extras{{p.chunk, {p.extra_bytes, p.allocator_bytes}}};
  const std::vector<int64_t> candidates = fastest_candidates(p.chunk, [&](int64_t chunk) {
    const uint64_t extra = estimator.extra(chunk), allocator = estimator.allocator_overhead(chunk);
    extras[chunk] = {extra, allocator};
    return fits(p, extra, allocator);
  });
  // A larger chunk that fits recomputing is a candidate too (issue 51: on a GPU one large chunk
  // recomputing often beats small ones): the next size up, twice the largest chunk that fits
  // without (or the whole batch), measured like the others.
  std::vector<int64_t> all = candidates;
  std::optional<Recomputing> larger_recomputing;
  int64_t larger = 0;
  if (p.mode == RunMode::Training && p.recompute_policy != Recompute::Off && p.chunk < a.batch) {
    larger = std::min(a.batch, p.chunk * 2);
    const std::optional<Recomputing> most = recompute_for(p, a, estimator, larger, /*most=*/true);
    if (most && most->fits) {
      larger_recomputing = least_that_fits(p, a, estimator, larger, *most);
      all.insert(all.begin(), larger);
    }
  }
  FastestChoice choice;
  {
    GraphRecord& record = estimator.record();
    std::lock_guard<std::mutex> lock(record.mutex);
    // A recomputing candidate's times are its own (a run of its size without recomputation,
    // measured when the budget was larger, says nothing of it).
    ChunkTimings timings = record.timings;
    if (larger_recomputing) {
      timings.erase(larger);
      const auto measured = record.recomputed_timings.find(larger);
      if (measured != record.recomputed_timings.end()) timings.insert(*measured);
    }
    choice = choose_fastest(all, a.batch, timings);
  }
  p.chunk = choice.chunk;
  p.chunks = chunks_of(a.batch, choice.chunk);
  p.timed = choice.timed;
  p.chunk_choice = choice.reason;
  if (larger_recomputing && choice.chunk == larger) {
    adopt(p, a, estimator, larger, *larger_recomputing);
    p.chunk_choice += " (chunks of " + std::to_string(larger) +
                      " recompute: the candidate larger than the largest "
                      "chunk that fits without recomputation)";
  } else {
    std::tie(p.extra_bytes, p.allocator_bytes) = extras.at(choice.chunk);
  }
}

// The plan of a lazy `root` in `mode`, from its analysis and an estimator made for them
// (made once per planned run, however often it plans again). A plan that does not fit
// fails (see make_plan).
Plan plan_lazy(const NodePtr& root, RunMode mode, const Analysis& a, Estimator& estimator, bool with_source = true) {
  Plan p = device_plan(root, mode, estimator.device());
  estimator.set_room(room_left(p), p.budget_bytes);
  p.batch = a.batch;
  p.batch_stats = batch_stats();
  estimator.set_batch_stats(p.batch_stats);
  p.chunking = chunking();
  p.coupled = coupling(a, p.batch_stats);
  p.unsplit_extra_bytes = estimator.extra(-1);
  p.unsplit_allocator_bytes = estimator.allocator_overhead(-1);
  p.chunk = a.batch;
  p.extra_bytes = p.unsplit_extra_bytes;
  p.allocator_bytes = p.unsplit_allocator_bytes;
  p.recompute_policy = recompute();
  const bool training = mode == RunMode::Training;
  if (!fits(p) && training && p.recompute_policy == Recompute::Preferred) plan_recompute(p, a, estimator);
  if (!fits(p) && a.batch > 1 && p.coupled.empty()) {
    // The largest power of two below the batch whose estimate fits (estimates grow with the chunk).
    int64_t lo = 0, hi = 0;  // exponents
    while ((int64_t{1} << (hi + 1)) < a.batch) ++hi;
    int64_t best = -1;
    uint64_t best_extra = 0, best_allocator = 0;
    while (lo <= hi) {
      const int64_t mid = (lo + hi) / 2;
      const int64_t c = int64_t{1} << mid;
      const uint64_t extra = estimator.extra(c), allocator = estimator.allocator_overhead(c);
      if (fits(p, extra, allocator)) {
        best = c;
        best_extra = extra;
        best_allocator = allocator;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    if (best > 0) {
      p.chunk = best;
      p.chunks = chunks_of(a.batch, best);
      p.extra_bytes = best_extra;
      p.allocator_bytes = best_allocator;
    } else {
      p.chunk = 1;
      p.chunks = a.batch;
      p.extra_bytes = estimator.extra(1);
      p.allocator_bytes = estimator.allocator_overhead(1);
    }
  }
  if (!fits(p) && training && p.recompute_policy != Recompute::Off) plan_recompute(p, a, estimator);
  if (p.chunking == Chunking::Fastest && !p.recompute) choose_fastest_chunk(a, estimator, p);
  const bool fit = fits(p);
  if (with_source || !fit) p.source = estimator.source();  // text: built only where it is read
  p.per_chunk_stats = per_chunk_stats(a, p.batch_stats, p.chunk);
  p.stats_coupled = a.stats_coupled;
  if (fit) return p;
  const Code code = a.batch >= 0 && !p.coupled.empty() ? Code::NotSplittable : Code::OutOfMemory;
  fail(code, p.describe());
}

// The cap a run holds its device to (BudgetScope). On the CPU, the budget. On CUDA, what the
// plan needs (at most the budget): the caching allocator then reserves no more than the plan
// allows for, and a backend that takes whatever the allocator can give (cuDNN's convolution
// workspace, chosen from what is free) takes only what the plan leaves, so that a plan peaks
// alike with and without room. `widened`: the budget (a chunk that could not be halved ran
// out under the plan's cap). KOILA_CUDA_CAP=budget caps at the budget always.
uint64_t run_cap(const Plan& plan, bool widened) {
  if (!plan.device.is_cuda() || widened || !cuda_cap_follows_plan()) return plan.budget_bytes;
  return std::min(plan.budget_bytes, plan.needed());
}

// A planned run: plans (waiting for runs on other threads to end when it fits only without
// them), reserves the plan's estimate, and runs `attempt(chunk)` holding the budget as a
// hard limit. After an out-of-memory error (an estimate that fell short, or a device that
// ran out) it records what the chunk needed at least and retries with half the chunk.
// Every run's measured peak is recorded for later plans of the same graph, and under
// Chunking::Fastest the time of a run that measures a candidate (not of a run that ran
// out of memory, nor of its retries).
// `with_source`: the plan returned says where its figures came from (Plan::source).
template <class F>
Plan planned_run(const NodePtr& root, RunMode mode, bool with_source, F&& attempt) {
  check_not_in_progress_callback();
  const Analysis& a = analysis_of(root, mode);
  Estimator estimator(root, a, mode);
  const PlacedDevice& device = estimator.device();
  for (;;) {
    std::unique_lock<std::mutex> planning(plan_and_reserve);
    const uint64_t ended = runs_ended(device);
    Plan plan;
    try {
      plan = plan_lazy(root, mode, a, estimator, with_source);
    } catch (const Error& e) {
      if (e.code() != Code::OutOfMemory && e.code() != Code::NotSplittable) throw;
      // It does not fit even alone: no run is alive, and none ended since the plan read
      // what is in use (one that ended just after would have left it room: plan again).
      if (runs_alive(device) == 0 && runs_ended(device) == ended) throw;
      planning.unlock();
      wait_for_run_to_end(device, ended);  // it may fit once they are done
      continue;
    }
    bool widened = false;  // the cap is the budget (run_cap)
    int replans = 0;       // recomputing plans made again after running out
    bool plan_again = false;
    // An attempt that ran out of memory drew random numbers (dropout): the retry draws them
    // again from here, as a run planned with its chunk from the start would.
    const RandomSnapshot drawn_from(device);
    for (;;) {
      if (plan_again) {
        planning.lock();
        plan = plan_lazy(root, mode, a, estimator, with_source);  // (a refusal propagates)
        plan_again = widened = false;
      }
      RunMemory usage(plan.device);
      Reservation reserved(plan.device, with_margin(plan.extra_bytes), usage);
      if (planning.owns_lock()) planning.unlock();
      const uint64_t cap = run_cap(plan, widened);
      try {
        double seconds = 0;
        {
          BudgetScope hard_limit(plan.device, cap);
          if (plan.timed)
            seconds = timed_run(plan.device, plan.chunk, [&] { attempt(a, plan, estimator.grad_starts()); });
          else
            attempt(a, plan, estimator.grad_starts());
        }
        if (plan.recompute)
          estimator.record_recomputed_run(*plan.recompute, usage.peak());
        else
          estimator.record_run(plan.chunk, usage.peak());
        if (plan.timed) {
          // The estimator's record was found before the run (a backward changes the .grad
          // that the structure's key covers).
          GraphRecord& record = estimator.record();
          std::lock_guard<std::mutex> lock(record.mutex);
          record_timing(plan.recompute ? record.recomputed_timings : record.timings, plan.chunk, seconds);
        }
        return plan;
      } catch (...) {
        const std::exception_ptr e = std::current_exception();
        if (!is_out_of_memory(e)) throw;
        // What the chunk needed at least: when the CPU budget refused it, what the run held
        // then plus the request (other threads may have taken the rest of the room, which
        // says nothing of this graph); when a device ran out, more than the room it was
        // given (the device had less than the cap, or the cap was the plan's: the next
        // plans take less, or allow more).
        const uint64_t room = room_left(plan, cap);
        const uint64_t refused = usage.refused();
        const uint64_t needed = std::max(refused > 0 ? refused : room + 1, usage.peak() + 1);
        if (plan.recompute)
          estimator.record_recomputed_run(*plan.recompute, needed);
        else
          estimator.record_run(plan.chunk, needed);
        release_cached_memory(plan.device);
        drawn_from.restore();
        if (plan.recompute) {
          // A recomputing run that ran out (its estimate fell short: a backend's workspace no
          // probe could show): the same chunk once more under the budget where the cap was the
          // plan's, then a plan anew, which knows what this run needed and recomputes more (or
          // refuses), a few times.
          if (cap < plan.budget_bytes && !widened) {
            widened = true;
            continue;
          }
          if (++replans > 4) throw;
          plan_again = true;  // (once this run's reservation is gone)
          continue;
        }
        if (a.batch < 0 || !plan.coupled.empty() || plan.chunk <= 1) {
          // Nothing smaller to try: where the plan's cap was below the budget, the same
          // chunk once more with the budget as the cap.
          if (cap < plan.budget_bytes && !widened) {
            widened = true;
            continue;
          }
          throw;
        }
        plan.chunk = largest_power_of_two_at_most(std::min(plan.chunk, a.batch) / 2);
        plan.chunks = chunks_of(a.batch, plan.chunk);
        if (plan.chunking == Chunking::Fastest) {
          plan.timed = false;  // a retry measures no candidate
          plan.chunk_choice = "KOILA_CHUNK_FASTEST: the planned chunk ran out of memory; retried with chunks of " +
                              std::to_string(plan.chunk) + ", not timed";
        }
        plan.per_chunk_stats = per_chunk_stats(a, plan.batch_stats, plan.chunk);
        plan.extra_bytes = estimator.extra(plan.chunk);
        plan.allocator_bytes = estimator.allocator_overhead(plan.chunk);
      }
    }
  }
}

// How a real run of plan `p` goes through the chunk strategy, its chunks reported to
// `progress`, the leaves' .grad standing as `starts` noted when it was planned.
ChunkRun real_run(const Plan& p, RunObserver& progress, const GradStarts& starts) {
  ChunkRun run;
  run.grad_starts = &starts;
  run.chunk = p.chunk;
  run.per_chunk_stats = p.per_chunk_stats;
  run.observer = &progress;
  run.recompute = p.recompute.get();
  return run;
}

}  // namespace

uint64_t Plan::needed(uint64_t extra, uint64_t allocator) const {
  const double total = static_cast<double>(taken_bytes()) + static_cast<double>(extra) * (1.0 + kMargin) +
                       static_cast<double>(allocator);
  return total >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(total);
}

std::string Plan::describe() const {
  std::ostringstream os;
  // What is evaluated ("[8, 10] Float"), written only here: formatting it at every plan cost
  // a stream's construction a step.
  os << (mode == RunMode::Training ? "backward from " : "evaluation of ");
  if (root)
    os << shape_string(root->meta.shape) << " " << dtype_name(root->meta.dtype);
  else
    os << "nothing";
  os << " on " << device.str();
  if (batch < 0) {
    os << "; no lazy batch";
  } else {
    os << "; batch " << batch;
  }
  const bool split = batch >= 0 && chunk >= 0 && chunk < batch;
  if (split) {
    os << ", " << chunks << " chunks of " << chunk;
    const int64_t last = batch - (chunks - 1) * chunk;
    if (last != chunk) os << " (the last of " << last << ")";
  } else {
    os << ", unsplit";
  }
  os << ". Estimated peak " << human_bytes(peak()) << " (" << human_bytes(in_use_bytes) << " in use";
  if (reserved_by_others_bytes > 0)
    os << " + " << human_bytes(reserved_by_others_bytes) << " reserved by runs on other threads";
  os << " + " << human_bytes(extra_bytes) << ")";
  if (split) os << ", unsplit " << human_bytes(full_peak());
  os << "; budget " << human_bytes(budget_bytes) << ".";
  if (root && root->lazy()) {  // (a concrete value's plan estimates nothing)
    os << " With koila's margin of " << static_cast<int>(kMargin * 100 + 0.5)
       << "% on the estimate of the run (for what an estimate cannot see: the allocator rounding sizes up, a "
          "kernel choosing another algorithm)";
    if (allocator_bytes > 0)
      os << " and " << human_bytes(allocator_bytes)
         << " that the device's caching allocator reserves beyond the run's tensors (its segments and rounding, "
            "modelled on the run's simulated allocations; koila caps what it reserves)";
    if (held_bytes > 0)
      os << ", plus " << human_bytes(held_bytes)
         << " that the allocator holds unused in segments shared with live tensors (it cannot give them back, and "
            "koila's cap counts them)";
    os << ", this run needs a budget of " << human_bytes(needed());
    if (split) os << " (unsplit, " << human_bytes(full_needed()) << ")";
    os << ".";
  }
  if (recompute) {
    const RecomputePlan& r = *recompute;
    if (r.segments.empty()) {
      os << " Recomputed: " << r.summary()
         << ", which keep only the values crossing from one segment to the next in the forward and run each segment "
            "again in the backward; a chunk frees "
         << human_bytes(r.freed_bytes) << " of their values so, about ";
    } else {
      os << " Recomputed: " << r.segments.size() << (r.segments.size() == 1 ? " segment" : " segments") << " of "
         << r.recomputed_ops << (r.recomputed_ops == 1 ? " op" : " ops") << " (" << r.summary() << "); a chunk frees "
         << human_bytes(r.freed_bytes)
         << " of their values in its forward and computes them again in its backward, about ";
    }
    os << static_cast<int>(std::lround(r.forward_cost > 0 ? 100.0 * r.recomputed_cost / r.forward_cost : 0))
       << "% more forward work (by the ops' arithmetic); without recomputation the chunk would need "
       << human_bytes(needed(unrecomputed_extra_bytes, allocator_bytes)) << ".";
  }
  if (!source.empty()) os << " Source: " << source << ".";
  const bool fits_unsplit = fits(*this, unsplit_extra_bytes, unsplit_allocator_bytes);
  if (recompute && !chunk_choice.empty()) {
    os << " The unsplit run does not fit. " << chunk_choice << ".";
  } else if (recompute && recompute_policy == Recompute::Preferred) {
    os << " The unsplit run does not fit without recomputation; KOILA_RECOMPUTE_PREFERRED recomputes rather than "
          "split"
       << (split ? ": " + std::to_string(chunk) + " is the largest power of two whose chunks fit recomputing." : ".");
  } else if (recompute) {
    os << (batch >= 0 && !coupled.empty() ? " The unsplit run does not fit without recomputation and the batch cannot "
                                            "be split: " +
                                                coupled + "; it fits recomputing."
           : split ? " Not even a chunk of one sample fits without recomputation; recomputing, " +
                         std::to_string(chunk) + " is the largest power of two whose chunks fit."
                   : " No chunk fits without recomputation; the unsplit run fits recomputing.");
  } else if (!fits_unsplit && batch >= 0 && !coupled.empty()) {
    os << " The unsplit run does not fit and the batch cannot be split: " << coupled << ".";
  } else if (!fits_unsplit && batch < 0) {
    os << " It does not fit, and there is no lazy batch to split (wrap the input with koila_lazy and a batch dim).";
  } else if (!fits_unsplit && !fits(*this)) {
    os << " Not even a chunk of one sample fits.";
  } else if (!chunk_choice.empty()) {
    os << (!fits_unsplit ? " The unsplit run does not fit. "
           : split       ? " The unsplit run fits. "
                         : " It fits unsplit. ")
       << chunk_choice << ".";
  } else if (split) {
    os << " The unsplit run does not fit; " << chunk << " is the largest power of two whose chunks fit.";
  } else {
    os << " It fits unsplit.";
  }
  if (!fits(*this) && mode == RunMode::Training && root && root->lazy()) {
    if (recompute_policy == Recompute::Off)
      os << " Recomputation is off (KOILA_RECOMPUTE_OFF).";
    else if (least_recomputed_needed == 0)
      os << " Recomputation could not be planned for this graph (its recomputing run cannot be simulated on meta "
            "tensors).";
    else
      os << " Recomputing the most koila can plan does not fit either: " << human_bytes(least_recomputed_needed)
         << " is the least budget that would (for "
         << (least_recomputed_chunk >= batch || batch < 0 ? std::string("the unsplit run")
                                                          : "chunks of " + std::to_string(least_recomputed_chunk))
         << ").";
  }
  if (per_chunk_stats)
    os << " Batch statistics: per chunk (KOILA_BATCH_STATS_PER_CHUNK; " << stats_coupled
       << "): each chunk normalizes with its own, the running statistics get one update with the whole batch's.";
  return os.str();
}

Plan make_plan(const NodePtr& root, RunMode mode) {
  check_not_in_progress_callback();
  if (!root->lazy()) return device_plan(root, mode, PlacedDevice(root->meta.device));
  const Analysis& a = analysis_of(root, mode);
  Estimator estimator(root, a, mode);
  return plan_lazy(root, mode, a, estimator);
}

uint64_t estimate_extra(const NodePtr& root, RunMode mode, int64_t chunk) {
  if (!root->lazy()) return 0;
  Estimator estimator(root, analysis_of(root, mode), mode);
  estimator.set_batch_stats(batch_stats());  // as a plan made now estimates
  return estimator.extra(chunk);
}

uint64_t estimate_allocator_overhead(const NodePtr& root, RunMode mode, int64_t chunk) {
  if (!root->lazy()) return 0;
  Estimator estimator(root, analysis_of(root, mode), mode);
  estimator.set_batch_stats(batch_stats());
  return estimator.allocator_overhead(chunk);
}

at::Tensor run_forward(const NodePtr& root, Plan* used) {
  if (!root->lazy()) return root->value;
  c10::NoGradGuard no_grad;
  at::Tensor result;
  const Plan plan =
      planned_run(root, RunMode::Forward, used != nullptr, [&](const Analysis& a, const Plan& p, const GradStarts& s) {
        ProgressReport progress;
        result = forward_chunks(root, a, real_run(p, progress, s));
      });
  if (used) *used = plan;
  return result;
}

void run_backward(const NodePtr& loss, Plan* used, const BeforeCommit& before_commit) {
  check_loss(loss);
  if (!loss->lazy()) {
    const at::Tensor& value = loss->value;
    const Tensors leaves = value.requires_grad() ? autograd_leaves({value}) : Tensors{};
    if (leaves.empty())
      fail(Code::InvalidArgument,
           "the loss does not depend on any tensor that requires grad "
           "(see koila_tensor_set_requires_grad)");
    Tensors grads = gradients({value}, {}, leaves);
    if (before_commit) hand_over(before_commit, leaves, grads, LossReduction{});
    commit_gradients(leaves, grads);
    report_progress("backward", 1, 1);  // one chunk, as an unsplit lazy backward
    if (used) *used = device_plan(loss, RunMode::Training, PlacedDevice(loss->meta.device));
    return;
  }
  const Plan plan =
      planned_run(loss, RunMode::Training, used != nullptr, [&](const Analysis& a, const Plan& p, const GradStarts& s) {
        ProgressReport progress;
        ChunkRun run = real_run(p, progress, s);
        run.before_commit = before_commit;
        backward_chunks(loss, a, run);
      });
  if (used) *used = plan;
}

}  // namespace koila
