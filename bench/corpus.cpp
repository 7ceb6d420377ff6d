// bench_corpus: the real-model corpus (tests/corpus, issue 12). For each model, module mode
// and koila mode (forward: read the logits; training: backward of the mean cross entropy):
// the plan's estimate against the measured peak of the unsplit run, where the figure came
// from (the plan description's source), the planning time (the first plan of a freshly
// built graph; a plan made again after zero_grad, which for training is the structure's
// second .grad state and is simulated once more; and the median of 5 plans after the timed
// steps, as every later step of a training loop plans), the unsplit step time, and the run under the
// largest budget whose plan has at least 3 chunks (its peak against the budget).
// Figures are extras: the peak less what was held before the run. Recorded figures:
// docs/BENCHMARKS.md#bench_corpus.
//
//   corpus [corpus dir] [repeats]     (default: the build tree's corpus, 5)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "corpus.h"
#include "corpus_args.h"
#include "median.h"

using namespace koila_corpus;

namespace {

using bench::median;

double largest(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

// Seconds of one more plan of the same graph (the planner may reuse what it learnt).
double plan_again_seconds(const Graph& g, koila_mode mode) {
  check(koila_set_memory_budget("cpu", kUnlimited), "koila_set_memory_budget");
  koila_plan* p = nullptr;
  const auto start = std::chrono::steady_clock::now();
  check(koila_plan_new(&p, g.target_of(mode), mode), "koila_plan_new");
  const double s = seconds_since(start);
  koila_plan_free(p);
  check(koila_set_memory_budget("cpu", 0), "koila_set_memory_budget");
  return s;
}

// Median seconds of an unsplit step (the read of the logits, or backward + zero_grad).
double step_seconds(const Graph& g, koila_mode mode, int repeats) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const RunResult r = run(g, mode, kUnlimited);
    if (!r.ran.ok()) throw std::runtime_error("unsplit step: " + r.ran.message);
    times.push_back(r.run_seconds);
    g.zero_grad();
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bench_corpus_args::CorpusArgs args;
  if (!bench_corpus_args::parse(argc, argv, 5, &args)) return 2;
  const std::string dir = argc > 1 ? argv[1] : KOILA_CORPUS_DIR;
  const int repeats = args.repeats;
  std::vector<Entry> entries = std::move(args.entries);

  std::printf("## Real-model corpus: estimate vs measured peak, planning time (cpu, median of %d steps)\n\n", repeats);
  std::printf(
      "| model | module | mode | batch | est. extra MiB | meas. extra MiB | error | source | first plan ms | plan "
      "again ms | later plans ms | unsplit step ms | plan/step | 3+ chunks: chunk x n | budget extra MiB | meas. extra "
      "MiB | within budget |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---|\n");
  std::vector<double> errors, plan_shares, later_shares;
  int under = 0, over_budget = 0, split_runs = 0, rows = 0;
  double worst_under = 0;
  std::map<std::string, std::vector<std::string>> failures;  // why the simulation failed -> runs
  for (const Entry& e : entries) {
    for (const std::string& module_mode : e.modes) {
      const Reference ref = read_reference(dir, e.name, module_mode);
      for (koila_mode mode : {KOILA_MODE_FORWARD, KOILA_MODE_TRAINING}) {
        const char* mode_name = mode == KOILA_MODE_TRAINING ? "training" : "forward";
        const Graph g(dir, e, module_mode == "train", ref);
        const RunResult full = run(g, mode, kUnlimited);  // its plan is the graph's first
        if (!full.ran.ok()) {
          std::printf("| %s | %s | %s | %lld | failed: %s |\n", e.name.c_str(), module_mode.c_str(), mode_name,
                      static_cast<long long>(e.input_shape[0]), full.ran.message.c_str());
          continue;
        }
        g.zero_grad();
        const double again = plan_again_seconds(g, mode);
        const double step = step_seconds(g, mode, repeats);
        // A training loop's later steps: both .grad states of the structure (absent, then
        // zeroed) are known by now, so nothing is simulated or probed.
        std::vector<double> later_plans;
        for (int i = 0; i < 5; ++i) later_plans.push_back(plan_again_seconds(g, mode));
        const double later = median(later_plans);
        const std::string reason = simulation_failure(full.description);
        if (!reason.empty()) failures[reason].push_back(e.name + " " + module_mode + " " + mode_name);

        // The forced split: batch norm in train mode is refused (not splittable).
        std::string split_text = "not splittable", budget_text = "-", peak_text = "-", within = "refused";
        if (!(e.batchnorm && module_mode == "train")) {
          const uint64_t budget = budget_for_chunks(g, mode, 3);
          if (budget == 0) {
            split_text = "no budget gives 3+";
          } else {
            const RunResult r = run(g, mode, budget);
            g.zero_grad();
            ++split_runs;
            split_text = std::to_string(r.chunk) + " x " + std::to_string(r.chunks);
            char buf[64];
            std::snprintf(buf, sizeof buf, "%.2f", mib(double(budget - r.before)));
            budget_text = buf;
            std::snprintf(buf, sizeof buf, "%.2f", mib(double(r.measured)));
            peak_text = buf;
            within = !r.ran.ok() ? "failed: " + r.ran.message : r.peak <= budget ? "yes" : "**no**";
            if (r.ran.ok() && r.peak > budget) ++over_budget;
          }
        }

        const double err = full.error();
        errors.push_back(std::abs(err));
        if (double(full.measured) > double(full.estimate) * 1.10) ++under;
        worst_under = std::min(worst_under, err);
        plan_shares.push_back(full.plan_seconds / step);
        later_shares.push_back(later / step);
        ++rows;
        std::printf(
            "| %s | %s | %s | %lld | %.2f | %.2f | %+.1f%% | %s | %.1f | %.1f | %.2f | %.1f | %.1f%% | %s | %s | %s | "
            "%s |\n",
            e.name.c_str(), module_mode.c_str(), mode_name, static_cast<long long>(e.input_shape[0]),
            mib(double(full.estimate)), mib(double(full.measured)), 100 * err, source_of(full.description).c_str(),
            1e3 * full.plan_seconds, 1e3 * again, 1e3 * later, 1e3 * step, 100 * full.plan_seconds / step,
            split_text.c_str(), budget_text.c_str(), peak_text.c_str(), within.c_str());
        if (std::getenv("KOILA_BENCH_VERBOSE")) std::printf("\n    %s\n\n", full.description.c_str());
      }
    }
  }
  std::printf(
      "\n%d runs. Median |error| %.1f%% (target <= 3%%); worst under-estimate %+.1f%%; %d under-estimates "
      "beyond the 10%% margin; %d of %d forced-split runs over budget (target 0); first plan / unsplit step: "
      "median %.1f%%, worst %.1f%% (target <= 5%%); later plans / unsplit step: median %.2f%%, worst %.2f%%.\n",
      rows, 100 * median(errors), 100 * worst_under, under, over_budget, split_runs, 100 * median(plan_shares),
      100 * largest(plan_shares), 100 * median(later_shares), 100 * largest(later_shares));
  if (!failures.empty()) {
    std::printf("\nGraphs the planner could not simulate on meta tensors (its description's reason):\n");
    for (const auto& [reason, runs] : failures) {
      std::printf("- %s:", reason.c_str());
      for (const std::string& r : runs) std::printf(" %s;", r.c_str());
      std::printf("\n");
    }
  }
  return 0;
}
