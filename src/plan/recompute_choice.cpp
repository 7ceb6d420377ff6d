#include "plan/recompute_choice.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "run/recompute.h"

namespace koila {
namespace {

// The longest range considered, in positions of the order (a range's figures are tabled for
// each start).
constexpr size_t kWindow = 512;

}  // namespace

// The figures of every range of a schedule's order up to kWindow long.
struct RangeFigures {
  size_t n = 0, window = 0;
  std::vector<double> freed, cost;  // [l * window + (r - l)]
  // For the timeline (within_room below), of each range: what its backward holds of its own (the
  // bytes autograd saves of its values, and its inputs it keeps), and its largest value's bytes
  // (a gradient in flight is one of its values' size).
  std::vector<double> held, largest;
  std::vector<double> after;  // what it keeps from its forward to its backward: its values read
                              // later that autograd saves, and the inputs it keeps
  std::vector<double> position_saved, position_bytes;  // of each position (0 for those not ops)
  double smallest = 0, total = 0;                      // the least positive value size, and all values' bytes
  // Whether a range may start at a position (end before it): an op with several results and its
  // result nodes, which read them from it, are in one range or none.
  std::vector<bool> cut_ok;

  // `timeline`: the timeline's figures too (held, after, largest; the other model's searches do
  // without them).
  RangeFigures(const Schedule& s, int64_t chunk, const std::vector<double>& saved, bool timeline)
      : n(s.order.size()), window(std::min(n, kWindow)) {
    const std::vector<size_t> last_use = last_reads(s);
    std::vector<double> bytes(n, 0), op_cost(n, 0), whole(n, 0);
    std::vector<bool> is_op(n, false);
    std::vector<std::vector<size_t>> ending(n);  // positions whose last reader is there
    for (size_t i = 0; i < n; ++i) {
      const Node& node = *s.order[i];
      if (node.kind != NodeKind::Op) continue;
      is_op[i] = true;
      bytes[i] = i < saved.size() ? saved[i] : static_cast<double>(value_bytes(node, chunk));
      op_cost[i] = forward_cost(node, chunk);
      whole[i] = static_cast<double>(value_bytes(node, chunk));
      if (last_use[i] < n) ending[last_use[i]].push_back(i);
      if (bytes[i] > 0 && (smallest == 0 || bytes[i] < smallest)) smallest = bytes[i];
      total += bytes[i];
    }
    cut_ok.assign(n + 1, true);
    for (size_t i = 0; i < n; ++i) {
      const Node& node = *s.order[i];
      if (node.result < 0 || s.input_start[i] == s.input_start[i + 1] || s.inputs[s.input_start[i]] < 0) continue;
      const auto parent = static_cast<size_t>(s.inputs[s.input_start[i]]);
      for (size_t b = std::min(parent, i) + 1; b <= std::max(parent, i); ++b) cut_ok[b] = false;
    }
    freed.assign(n * window, 0);
    cost.assign(n * window, 0);
    if (timeline) {
      held.assign(n * window, 0);
      after.assign(n * window, 0);
      largest.assign(n * window, 0);
      position_saved = bytes;
      position_bytes = whole;
    }
    std::vector<size_t> seen(n, SIZE_MAX);  // the start whose range last counted a position as its input
    for (size_t l = 0; l < n; ++l) {
      double f = 0, c = 0, kept = 0, all = 0, big = 0;
      for (size_t r = l; r < n && r - l < window; ++r) {
        c += op_cost[r];
        all += bytes[r];
        big = std::max(big, whole[r]);
        for (size_t p : ending[r])
          if (p >= l) f += bytes[p];
        // An op value from before the range that autograd did not save: the segment keeps it.
        if (is_op[r])
          for (size_t k = s.input_start[r]; k < s.input_start[r + 1]; ++k) {
            const int64_t q = s.inputs[k];
            if (q < 0 || static_cast<size_t>(q) >= l || !is_op[static_cast<size_t>(q)] ||
                seen[static_cast<size_t>(q)] == l)
              continue;
            seen[static_cast<size_t>(q)] = l;
            if (bytes[static_cast<size_t>(q)] == 0)
              kept += static_cast<double>(value_bytes(*s.order[static_cast<size_t>(q)], chunk));
          }
        freed[l * window + (r - l)] = f - kept;
        cost[l * window + (r - l)] = c;
        if (timeline) {
          held[l * window + (r - l)] = all + kept;
          after[l * window + (r - l)] = all - f + kept;
          largest[l * window + (r - l)] = big;
        }
      }
    }
  }
  double freed_of(size_t l, size_t r) const { return freed[l * window + (r - l)]; }
  double cost_of(size_t l, size_t r) const { return cost[l * window + (r - l)]; }
  double held_of(size_t l, size_t r) const { return held[l * window + (r - l)]; }
  double after_of(size_t l, size_t r) const { return after[l * window + (r - l)]; }
  double largest_of(size_t l, size_t r) const { return largest[l * window + (r - l)]; }
};

namespace {

struct Solution {
  Ranges ranges;
  double freed = 0, largest = 0, cost = 0;
  double saving() const { return freed - largest; }
};

// The ranges of at most `cap` freed each that maximize freed - lambda * cost.
Solution solve(const RangeFigures& m, double cap, double lambda) {
  std::vector<double> best(m.n + 1, 0);
  std::vector<int64_t> from(m.n + 1, -1);  // where the range ending before it starts; -1: none
  for (size_t r = 0; r < m.n; ++r) {
    best[r + 1] = best[r];
    const size_t lowest = r + 1 > m.window ? r + 1 - m.window : 0;
    for (size_t l = r + 1; l-- > lowest;) {
      if (!m.cut_ok[l] || !m.cut_ok[r + 1]) continue;
      const double f = m.freed_of(l, r);
      if (f > cap) continue;
      if (f <= 0) continue;
      const double v = best[l] + f - lambda * m.cost_of(l, r);
      if (v > best[r + 1]) {
        best[r + 1] = v;
        from[r + 1] = static_cast<int64_t>(l);
      }
    }
  }
  Solution s;
  for (size_t r = m.n; r > 0;) {
    if (from[r] < 0) {
      --r;
      continue;
    }
    const auto l = static_cast<size_t>(from[r]);
    s.ranges.emplace_back(l, r - 1);
    const double f = m.freed_of(l, r - 1);
    s.freed += f;
    s.largest = std::max(s.largest, f);
    s.cost += m.cost_of(l, r - 1);
    r = l;
  }
  std::reverse(s.ranges.begin(), s.ranges.end());
  return s;
}

// The ranges of at most `cap` freed each that free at least `need` + `cap` together (so at least
// `need` beyond the largest) for the least cost, or nullopt where none do: a knapsack over the
// order, what a range frees counted in whole units of (need + cap) / kUnits, rounded down (what
// it returns frees at least that much). The Lagrangian search (solve) finds only sets on the
// lower convex hull of cost against what they free: between two of those, sets that free enough
// for less are missed (the bench's transformer at half its activations: nothing between 43% and
// 100% of its forward's work was offered, although 60% fits). `work` is what may be spent (cells
// visited); nullopt, untouched, where the graph needs more.
constexpr size_t kUnits = 128;
std::optional<Solution> knapsack(const RangeFigures& m, double cap, double need, double* work) {
  const double goal = need + cap, unit = goal / static_cast<double>(kUnits);
  const double cells = static_cast<double>(m.n) * static_cast<double>(m.window) * (kUnits + 1);
  if (!(unit > 0) || cells > *work) return std::nullopt;
  *work -= cells;
  constexpr double kNone = std::numeric_limits<double>::infinity();
  const size_t width = kUnits + 1;
  // best[r * width + b]: the least cost of ranges within the first r positions freeing b units
  // or more; from: where the range ending before r starts (-1: none ends there).
  std::vector<double> best((m.n + 1) * width, kNone);
  std::vector<int64_t> from((m.n + 1) * width, -1);
  best[0] = 0;
  for (size_t r = 0; r < m.n; ++r) {
    double* next = &best[(r + 1) * width];
    std::copy(&best[r * width], &best[r * width] + width, next);
    if (!m.cut_ok[r + 1]) continue;
    const size_t lowest = r + 1 > m.window ? r + 1 - m.window : 0;
    for (size_t l = r + 1; l-- > lowest;) {
      if (!m.cut_ok[l]) continue;
      const double f = m.freed_of(l, r);
      if (f > cap || f <= 0) continue;
      const auto units = static_cast<size_t>(std::min(f / unit, static_cast<double>(kUnits)));
      if (units == 0) continue;
      const double c = m.cost_of(l, r);
      const double* before = &best[l * width];
      for (size_t b = 0; b < width; ++b) {
        const double v = before[b > units ? b - units : 0] + c;
        if (v < next[b]) {
          next[b] = v;
          from[(r + 1) * width + b] = static_cast<int64_t>(l);
        }
      }
    }
  }
  if (best[m.n * width + kUnits] == kNone) return std::nullopt;
  Solution s;
  size_t b = kUnits;
  for (size_t r = m.n; r > 0;) {
    const int64_t l = from[r * width + b];
    if (l < 0) {
      --r;
      continue;
    }
    const auto start = static_cast<size_t>(l);
    const double f = m.freed_of(start, r - 1);
    s.ranges.emplace_back(start, r - 1);
    s.freed += f;
    s.largest = std::max(s.largest, f);
    s.cost += m.cost_of(start, r - 1);
    const auto units = static_cast<size_t>(std::min(f / unit, static_cast<double>(kUnits)));
    b = b > units ? b - units : 0;
    r = start;
  }
  std::reverse(s.ranges.begin(), s.ranges.end());
  return s;
}

// The timeline model. The backward runs the order backwards: while a segment's backward runs, what
// autograd saved of the ops before it (and the inputs kept by segments before it) is still held,
// what came after it is gone. So a segment [l, r] holds, at its backward, kept(l) (the saved
// bytes of the values before l that no segment freed, and the inputs of the segments before l),
// its own values (held_of) and about two gradients of its largest value's size; an op that no
// segment frees holds kept(its position) with its own and its gradients. The most of those over
// the order is the model's peak. The other model (solve, knapsack above) counts every kept value
// against the largest segment: right for a transformer's equal layers, far off for a CNN whose
// first layers are its largest (their segments run last, with little kept before them).
constexpr double kGradients = 2;

// The cheapest ranges under which the model's peak is at most `room`, or nullopt where none are.
// A dynamic program over the order whose state is the bytes kept so far, in kBuckets steps of
// `room` (each state remembers its exact bytes: the least for its cost). `work`: the steps it may
// take, less those it took; -1 (and nullopt) where it ran out.
constexpr size_t kBuckets = 64;
constexpr double kTimelineWork = 1e8;  // steps of a call (a few tenths of a second)
std::optional<Ranges> within_room(const RangeFigures& m, double room, double* work) {
  const size_t width = kBuckets + 1;
  if (!(room > 0)) return std::nullopt;
  constexpr double kNone = std::numeric_limits<double>::infinity();
  struct State {
    double cost = kNone, kept = 0;
    int64_t from = -1;  // the position the step into this state started at
    size_t from_bucket = 0;
    bool range = false;  // whether that step was a range (else a position kept)
  };
  std::vector<State> dp((m.n + 1) * width);
  dp[0].cost = 0;
  double spent = 0;
  const auto bucket = [&](double kept) {
    return std::min(kBuckets, static_cast<size_t>(kept / room * static_cast<double>(kBuckets)));
  };
  const auto relax = [&](size_t at, double cost, double kept, size_t from, size_t from_bucket, bool range) {
    State& s = dp[at * width + bucket(kept)];
    if (cost < s.cost || (cost == s.cost && kept < s.kept))
      s = {cost, kept, static_cast<int64_t>(from), from_bucket, range};
  };
  for (size_t i = 0; i < m.n; ++i) {
    for (size_t b = 0; b < width; ++b) {
      const State here = dp[i * width + b];
      if (here.cost == kNone) continue;
      const double k = here.kept;
      if (k + m.position_saved[i] + kGradients * m.position_bytes[i] <= room)
        relax(i + 1, here.cost, k + m.position_saved[i], i, b, false);
      if (!m.cut_ok[i]) continue;
      for (size_t r = i; r < m.n && r - i < m.window; ++r) {
        ++spent;
        if (k + m.held_of(i, r) + kGradients * m.largest_of(i, r) > room) break;
        if (!m.cut_ok[r + 1] || m.freed_of(i, r) <= 0) continue;
        relax(r + 1, here.cost + m.cost_of(i, r), k + m.after_of(i, r), i, b, true);
      }
    }
    if (spent > *work) {
      *work = -1;  // (out of work: not an answer)
      return std::nullopt;
    }
  }
  *work -= spent;
  size_t end = width;
  for (size_t b = 0; b < width; ++b)
    if (dp[m.n * width + b].cost < kNone && (end == width || dp[m.n * width + b].cost < dp[m.n * width + end].cost))
      end = b;
  if (end == width) return std::nullopt;
  Ranges ranges;
  for (size_t at = m.n, b = end; at > 0;) {
    const State& s = dp[at * width + b];
    const auto from = static_cast<size_t>(s.from);
    if (s.range) ranges.emplace_back(from, at - 1);
    at = from;
    b = s.from_bucket;
  }
  std::reverse(ranges.begin(), ranges.end());
  return ranges;
}

// The model's peak with `ranges` recomputed.
double timeline_peak(const RangeFigures& m, const Ranges& ranges) {
  double kept = 0, peak = 0;
  size_t next = 0;
  for (size_t i = 0; i < m.n;) {
    if (next < ranges.size() && ranges[next].first == i && ranges[next].second - i < m.window) {
      const size_t r = ranges[next++].second;
      peak = std::max(peak, kept + m.held_of(i, r) + kGradients * m.largest_of(i, r));
      kept += m.after_of(i, r);
      i = r + 1;
      continue;
    }
    if (next < ranges.size() && ranges[next].first <= i) ++next;
    peak = std::max(peak, kept + m.position_saved[i] + kGradients * m.position_bytes[i]);
    kept += m.position_saved[i];
    ++i;
  }
  return peak;
}

}  // namespace

RecomputeTimeline::RecomputeTimeline(const Schedule& schedule, int64_t chunk, const std::vector<double>& saved)
    : figures_(std::make_unique<RangeFigures>(schedule, chunk, saved, true)) {}

RecomputeTimeline::~RecomputeTimeline() = default;

std::optional<Ranges> RecomputeTimeline::within(double room) const {
  double work = kTimelineWork;
  return within_room(*figures_, room, &work);
}

double RecomputeTimeline::least_room(Ranges* ranges) const {
  double hi = timeline_peak(*figures_, {}), lo = 0;
  if (ranges) ranges->clear();
  double work = kTimelineWork * 4;
  for (int i = 0; i < 24 && hi - lo > hi / 128; ++i) {
    const double mid = lo + (hi - lo) / 2;
    std::optional<Ranges> found = within_room(*figures_, mid, &work);
    if (found) {
      hi = mid;
      if (ranges) *ranges = std::move(*found);
    } else {
      if (work <= 0) break;
      lo = mid;
    }
  }
  return hi;
}

double RecomputeTimeline::peak(const Ranges& ranges) const { return timeline_peak(*figures_, ranges); }

Ranges choose_ranges(const Schedule& schedule, int64_t chunk, const std::vector<double>& saved, uint64_t to_free,
                     bool* most, Ranges* off_hull) {
  if (most) *most = false;
  const RangeFigures m(schedule, chunk, saved, false);
  if (m.total <= 0) {
    if (most) *most = true;
    return {};
  }
  const double need = static_cast<double>(to_free);
  constexpr double kTies = 1e-12;  // (a lambda this small only prefers the cheaper of equal savings)
  std::optional<Solution> cheapest;
  Solution most_saving;
  std::vector<double> feasible;  // caps under which some set frees enough
  // Caps from a 4096th of every value's bytes (or the least value) up, doubling.
  for (double cap = std::max(m.smallest, m.total / 4096); cap < m.total * 2; cap *= 2) {
    const Solution all = solve(m, cap, kTies);
    if (all.saving() > most_saving.saving()) most_saving = all;
    if (all.saving() < need) continue;
    // The largest lambda (least cost) whose ranges still free enough.
    double lo = kTies, hi = 1;
    while (solve(m, cap, hi).saving() >= need && hi < 1e30) hi *= 16;
    Solution found = all;
    for (int i = 0; i < 40 && hi / lo > 1.05; ++i) {
      const double mid = std::sqrt(lo * hi);
      Solution s = solve(m, cap, mid);
      if (s.saving() >= need) {
        lo = mid;
        found = std::move(s);
      } else {
        hi = mid;
      }
    }
    if (found.saving() < need) continue;
    feasible.push_back(cap);
    if (!cheapest || found.cost < cheapest->cost ||
        (found.cost == cheapest->cost && found.saving() > cheapest->saving()))
      cheapest = std::move(found);
  }
  // Sets off the hull, by the knapsack, for the caps that free enough (smallest first: their
  // sets are the finest), within about 3e7 cells a call (the transformer above: 1.5e6 a cap):
  // offered beside the hull's, not instead (the model errs, and its cheapest set may not fit
  // where the hull's does: the planner simulates both).
  if (off_hull) off_hull->clear();
  if (off_hull && cheapest) {
    double work = 3e7;
    std::optional<Solution> best;
    for (const double cap : feasible) {
      std::optional<Solution> k = knapsack(m, cap, need, &work);
      if (k && k->saving() >= need && (!best || k->cost < best->cost)) best = std::move(k);
    }
    if (best && best->cost < cheapest->cost) *off_hull = std::move(best->ranges);
  }
  if (cheapest) return cheapest->ranges;
  if (most) *most = true;
  return most_saving.ranges;
}

uint64_t modelled_saving(const Schedule& schedule, int64_t chunk, const std::vector<double>& saved,
                         const Ranges& ranges) {
  const RangeFigures m(schedule, chunk, saved, false);
  double freed = 0, largest = 0;
  for (const auto& [l, r] : ranges) {
    if (r - l >= m.window) continue;
    const double f = m.freed_of(l, r);
    freed += f;
    largest = std::max(largest, f);
  }
  return static_cast<uint64_t>(std::max(0.0, freed - largest));
}

}  // namespace koila
