#include "fit.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <string>

namespace koila_cli {
namespace {

class Search {
 public:
  // `recomputing`: unsplit recomputing counts as fitting (plans under KOILA_RECOMPUTE_PREFERRED).
  Search(Session& s, FitResult& r, bool recomputing = false)
      : s_(s),
        r_(r),
        budget_(s.budget()),
        recomputing_(recomputing),
        tried_(recomputing ? r.tried_recomputing : r.tried) {}

  bool fits(int64_t n) {
    auto found = tried_.find(n);
    if (found != tried_.end()) return found->second.fits;
    BatchVerdict v;
    if (s_.input_bytes(n) > budget_) {
      v.why = "its inputs alone (" + human_bytes(s_.input_bytes(n)) + ") exceed the budget";
    } else {
      BatchPlan b = recomputing_ ? s_.plan_batch(n, KOILA_RECOMPUTE_PREFERRED) : s_.plan_batch(n, KOILA_RECOMPUTE_OFF);
      v.fits = recomputing_ ? b.fits_unsplit_recomputing() : b.fits_unsplit();
      if (b.plan) {
        v.full_peak = koila_plan_full_peak_bytes(b.plan.get());
        v.full_need = koila_plan_full_needed_bytes(b.plan.get());
      }
      if (!v.fits)
        v.why = b.plan ? "it needs " + human_bytes(v.full_need) + " with koila's margin, " +
                             human_bytes(v.full_need - std::min(v.full_need, budget_)) + " over the " +
                             human_bytes(budget_) + " budget, so it would run in " +
                             std::to_string(koila_plan_num_chunks(b.plan.get())) + " chunks"
                       : refusal(b.message);
    }
    tried_[n] = v;
    return v.fits;
  }

  // A refused plan's message, as the search's: the search plans without recomputation on its own
  // (the recomputing search follows), so the setting the message names is not the user's.
  std::string refusal(std::string message) const {
    static const std::string kOff = " Recomputation is off (KOILA_RECOMPUTE_OFF).";
    if (recomputing_ || s_.options().recompute == KOILA_RECOMPUTE_OFF) return message;
    const size_t at = message.find(kOff);
    if (at != std::string::npos) message.replace(at, kOff.size(), " (Planned without recomputation.)");
    return message;
  }

  // A first guess: the line through what batches n1 < n2 need (koila_plan_full_needed_bytes:
  // bytes in use plus the estimate with koila's margin) meets the budget.
  int64_t guess(int64_t n1, int64_t n2) {
    fits(n1);
    fits(n2);
    const double need1 = static_cast<double>(tried_.at(n1).full_need),
                 need2 = static_cast<double>(tried_.at(n2).full_need);
    if (need1 == 0 || need2 == 0) return n1 > 1 ? guess(1, 2) : n1;  // not planned (e.g. not splittable): no figures
    const double slope = (need2 - need1) / static_cast<double>(n2 - n1);
    if (slope <= 0) return n2;
    const double g = static_cast<double>(n1) + (static_cast<double>(budget_) - need1) / slope;
    return static_cast<int64_t>(std::clamp(g, 1.0, static_cast<double>(cap())));
  }

  // The most samples whose inputs fit in the budget (nothing larger can run).
  int64_t cap() const {
    const uint64_t per_sample = std::max<uint64_t>(1, s_.input_bytes(1));
    return static_cast<int64_t>(std::min<uint64_t>(budget_ / per_sample + 1, uint64_t{1} << 40));
  }

 private:
  Session& s_;
  FitResult& r_;
  uint64_t budget_;
  bool recomputing_;
  std::map<int64_t, BatchVerdict>& tried_;
};

// The largest batch that `search` finds fitting, from a guess through the plans of --batch and
// half of it, then doubling steps and a bisection.
int64_t largest_fitting(Search& search, int64_t batch) {
  const int64_t n2 = std::max<int64_t>(2, batch), n1 = std::max<int64_t>(1, n2 / 2);
  const int64_t g = search.guess(n1, n2);
  int64_t lo = 0, hi = 0;  // lo fits (0: nothing known to), hi does not
  if (search.fits(g)) {
    lo = g;
    int64_t step = 1;
    while (lo + step <= search.cap() && search.fits(lo + step)) {
      lo += step;
      step *= 2;
    }
    hi = lo + step;
  } else {
    hi = g;
    int64_t step = 1;
    while (hi - step >= 1 && !search.fits(hi - step)) {
      hi -= step;
      step *= 2;
    }
    lo = std::max<int64_t>(0, hi - step);
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (search.fits(mid) ? lo : hi) = mid;
  }
  if (lo > 0) search.fits(lo + 1);  // the verdict next to the answer, for the report
  return lo;
}

// What the progress callback saw of one run: the chunks of its last attempt, and how often a
// phase started again at 1 (a retry after running out of memory starts the counts again).
struct RunProgress {
  int64_t chunks = 0;
  int64_t retries = 0;
  std::map<std::string, int64_t> starts;  // phase -> times it began at chunk 1
};

// Sets `measured_*`, `planned_*` and `retries` from one real run of a batch of r.largest.
void verify(Session& s, FitResult& r) {
  BatchPlan b = s.plan_batch(r.largest);
  if (!b.plan) throw CliError("--verify: the batch of " + std::to_string(r.largest) + " no longer plans: " + b.message);
  r.planned_chunks = koila_plan_num_chunks(b.plan.get());
  r.planned_peak = koila_plan_peak_bytes(b.plan.get());
  RunProgress progress;
  check(koila_set_progress(
            [](void* user, const char* phase, int64_t done, int64_t total) {
              auto& p = *static_cast<RunProgress*>(user);
              p.chunks = total;
              if (done == 1 && ++p.starts[phase] > 1) p.retries = std::max(p.retries, p.starts[phase] - 1);
            },
            &progress),
        "koila_set_progress");
  const std::string& device = s.options().device;
  check(koila_memory_reset_peak(device.c_str()), "koila_memory_reset_peak");
  if (s.options().mode == KOILA_MODE_TRAINING) {
    check(koila_backward(b.target.get()), "--verify: the run failed");
  } else {
    koila_tensor* out = nullptr;
    check(koila_eval(&out, b.target.get()), "--verify: the run failed");
    koila_tensor_free(out);
  }
  check(koila_set_progress(nullptr, nullptr), "koila_set_progress");
  check(koila_memory_stats(device.c_str(), nullptr, &r.measured_peak), "koila_memory_stats");
  r.measured_chunks = progress.chunks;
  r.retries = progress.retries;
  r.verified = true;
}

}  // namespace

FitResult find_fit(Session& session) {
  FitResult r;
  const int64_t batch = session.options().batch;
  {
    BatchPlan b = session.plan_batch(batch);
    if (b.plan) {
      r.at_batch = make_plan_report(session, b);
      r.batch_planned = true;
    } else {
      r.batch_why = b.message;
    }
  }
  Search search(session, r);
  r.largest = largest_fitting(search, batch);
  if (session.options().mode == KOILA_MODE_TRAINING && session.options().recompute != KOILA_RECOMPUTE_OFF) {
    Search recomputing(session, r, /*recomputing=*/true);
    r.largest_recomputing = largest_fitting(recomputing, batch);
  }
  if (session.options().verify && r.largest > 0) verify(session, r);
  return r;
}

std::string fit_text(const FitResult& r, const Session& s) {
  std::string text = setup_text(s) + "\n";
  char line[320];
  if (r.largest == 0) {
    const auto one = r.tried.find(1);
    text += "largest batch that runs unsplit   none: not even one sample fits (" +
            (one != r.tried.end() ? one->second.why : std::string("?")) + ")\n";
  } else {
    const BatchVerdict& at = r.tried.at(r.largest);
    std::snprintf(line, sizeof line,
                  "largest batch that runs unsplit   %lld  (estimated peak %s; needs %s with koila's margin)\n",
                  static_cast<long long>(r.largest), human_bytes(at.full_peak).c_str(),
                  human_bytes(at.full_need).c_str());
    text += line;
    const auto next = r.tried.find(r.largest + 1);
    if (next != r.tried.end())
      text += "  one more, " + std::to_string(r.largest + 1) + ", does not: " +
              (next->second.full_peak ? "estimated peak " + human_bytes(next->second.full_peak) + ", " : "") +
              next->second.why + "\n";
  }
  if (r.largest_recomputing >= 0) {
    const auto at = r.tried_recomputing.find(r.largest_recomputing);
    if (r.largest_recomputing == 0 || at == r.tried_recomputing.end())
      text += "largest batch, recomputing         none: not even one sample fits recomputing\n";
    else
      text += "largest batch, recomputing        " + std::to_string(r.largest_recomputing) +
              "  (unsplit, freeing activations in the forward and recomputing them in the backward; needs " +
              human_bytes(at->second.full_need) + " without recomputing)\n";
  }
  const int64_t batch = s.options().batch;
  if (r.batch_planned) {
    const PlanReport& p = r.at_batch;
    const std::string recomputing =
        p.recomputed > 0 ? ", recomputing " + human_bytes(p.recomputed) + " of activations" : std::string();
    if (p.chunks == 1)
      std::snprintf(line, sizeof line, "batch %-27lld unsplit%s (estimated peak %s%s)\n", static_cast<long long>(batch),
                    recomputing.c_str(), human_bytes(p.peak).c_str(),
                    p.recomputed > 0 ? ("; without recomputation " + human_bytes(p.full_peak)).c_str() : "");
    else
      std::snprintf(line, sizeof line, "batch %-27lld %lld chunks of %lld%s (estimated peak %s; unsplit %s)\n",
                    static_cast<long long>(batch), static_cast<long long>(p.chunks), static_cast<long long>(p.chunk),
                    recomputing.c_str(), human_bytes(p.peak).c_str(), human_bytes(p.full_peak).c_str());
    text += line;
    std::snprintf(line, sizeof line, "largest chunk under the budget    %lld%s\n", static_cast<long long>(p.chunk),
                  p.chunks > 1       ? " (the largest power of two whose chunks fit)"
                  : p.recomputed > 0 ? " (the whole batch, recomputing)"
                                     : " (the whole batch)");
    text += line;
  } else {
    text += "batch " + std::to_string(batch) + ": does not run: " + r.batch_why + "\n";
  }
  text += "\nfound from " + std::to_string(r.tried.size() + r.tried_recomputing.size() + 1) +
          " plans, without running anything out of memory (koila's estimates: simulated on meta tensors, "
          "calibrated by real probes of a few samples)\n";
  if (r.verified) {
    const uint64_t budget = s.budget();
    std::snprintf(line, sizeof line,
                  "verified: the batch of %lld ran in %lld chunk%s, measured peak %s (estimated %s, %+.1f%%), "
                  "budget %s: %s, at %.1f%% of it\n",
                  static_cast<long long>(r.largest), static_cast<long long>(r.measured_chunks),
                  r.measured_chunks == 1 ? "" : "s", human_bytes(r.measured_peak).c_str(),
                  human_bytes(r.planned_peak).c_str(),
                  100.0 * (static_cast<double>(r.planned_peak) - static_cast<double>(r.measured_peak)) /
                      static_cast<double>(std::max<uint64_t>(r.measured_peak, 1)),
                  human_bytes(budget).c_str(), r.measured_peak <= budget ? "within" : "OVER",
                  100.0 * static_cast<double>(r.measured_peak) / static_cast<double>(std::max<uint64_t>(budget, 1)));
    text += line;
    if (r.planned_chunks != 1)
      text += "  the plan made for the run said " + std::to_string(r.planned_chunks) +
              " chunks, not the search's unsplit: its estimate rose between them (what the search's plans probed or "
              "observed)\n";
    if (r.retries > 0)
      text +=
          "  the estimate fell short: the run hit the budget (a hard limit), rolled back and retried in smaller "
          "chunks (" +
          std::to_string(r.retries) + (r.retries == 1 ? " retry" : " retries") + ")\n";
  }
  return text;
}

void fit_json(Json& j, const FitResult& r) {
  j.field("largest_unsplit_batch", r.largest);
  const auto at = r.tried.find(r.largest);
  j.field("largest_unsplit_peak_bytes", at != r.tried.end() ? at->second.full_peak : uint64_t{0});
  j.field("largest_unsplit_needed_bytes", at != r.tried.end() ? at->second.full_need : uint64_t{0});
  const auto next = r.tried.find(r.largest + 1);
  if (next != r.tried.end())
    j.begin_object("next_batch")
        .field("batch", r.largest + 1)
        .field("fits_unsplit", next->second.fits)
        .field("unsplit_peak_bytes", next->second.full_peak)
        .field("unsplit_needed_bytes", next->second.full_need)
        .field("why", next->second.why)
        .end_object();
  if (r.largest_recomputing >= 0)
    j.field("largest_unsplit_batch_recomputing", r.largest_recomputing);
  else
    j.null_field("largest_unsplit_batch_recomputing");
  j.begin_array("tried");
  for (const auto& [n, v] : r.tried)
    j.begin_object()
        .field("batch", n)
        .field("fits_unsplit", v.fits)
        .field("unsplit_peak_bytes", v.full_peak)
        .field("unsplit_needed_bytes", v.full_need)
        .end_object();
  j.end_array();
  if (r.batch_planned) {
    j.begin_object("plan");
    plan_json(j, r.at_batch);
    j.end_object();
    j.field("largest_chunk", r.at_batch.chunk);
  } else {
    j.null_field("plan").field("plan_error", r.batch_why);
  }
  if (r.verified)
    j.begin_object("verify")
        .field("batch", r.largest)
        .field("chunks", r.measured_chunks)
        .field("measured_peak_bytes", r.measured_peak)
        .field("planned_chunks", r.planned_chunks)
        .field("estimated_peak_bytes", r.planned_peak)
        .field("retries", r.retries)
        .end_object();
}

}  // namespace koila_cli
