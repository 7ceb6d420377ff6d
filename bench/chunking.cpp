// bench_chunking (issue 13, items 5 and 3; figures: docs/BENCHMARKS.md#bench_chunking): what
// chunking costs on the real-model corpus (tests/corpus), on the CPU, through the C API.
//
//   7a. Cost of splitting: the training step (zero_grad, then koila_backward of the mean
//       cross entropy, planning included) unsplit and under budgets of 1/2, 1/4 and 1/8 of
//       the unsplit need (what the unsplit step's measured peak adds to what is held: the
//       parameters, their .grad and the batch). Beside each, plain LibTorch running the
//       same module in the same chunks (operator by operator, as koila runs modules), so
//       that what splitting costs LibTorch itself is told apart from koila's own overhead.
//       The budgets take turns, step by step; medians. Batch norm in train mode runs under
//       KOILA_BATCH_STATS_PER_CHUNK (its results then differ from the unsplit ones).
//   7b. KOILA_CHUNK_FASTEST against LARGEST when the batch fits, for each model, module
//       mode and koila mode (batch norm in train mode, which cannot be split, left out):
//       the runs FASTEST spent measuring, the chunk it chose and its account, and both
//       policies' step times (interleaved, medians).
//
//   chunking [corpus dir] [repeats] [model|all] [batch [side]]
//     (default: the build tree's corpus, 3, all.) With a batch, 7a alone, each model fed a
//     random batch of that many samples instead of the corpus's reference batch (with a
//     side, the image models alone, on images of side x side): the same models at the sizes
//     they are trained at, where each operator has real work to do.
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "corpus.h"
#include "corpus_args.h"
#include "fastest_compare.h"

using namespace koila_corpus;

namespace {

constexpr double kFractions[] = {0, 0.5, 0.25, 0.125};  // of the unsplit need; 0: unlimited

// The same module in plain LibTorch (its own copy, loaded from the same file), run
// operator by operator as koila runs modules: a training step in chunks of `chunk`
// samples, each chunk's mean cross entropy weighted by its share, gradients accumulated.
struct Plain {
  torch::jit::Module module;
  std::vector<at::Tensor> params;
  at::Tensor x, y;

  Plain(const std::string& dir, const std::string& name, bool train, const Reference& ref)
      : module(torch::jit::load(dir + "/" + name + ".pt")), x(ref.input), y(ref.target) {
    module.train(train);
    for (const at::Tensor& p : module.parameters()) params.push_back(p);
  }
  void step(int64_t chunk) {
    torch::jit::GraphOptimizerEnabledGuard op_by_op(false);
    for (at::Tensor& p : params)
      if (p.grad().defined()) p.mutable_grad().zero_();
    const int64_t batch = x.size(0);
    for (int64_t start = 0; start < batch; start += chunk) {
      const int64_t n = std::min(chunk, batch - start);
      const at::Tensor out = module.forward({x.narrow(0, start, n)}).toTensor();
      (at::cross_entropy_loss(out, y.narrow(0, start, n)) * (static_cast<double>(n) / batch)).backward();
    }
  }
};

// The most chunks a run reported (koila_set_progress): more than its plan had means the
// run ran out of memory and retried with a smaller chunk.
int64_t most_chunks = 0;
void on_chunk(void*, const char*, int64_t, int64_t total) { most_chunks = std::max(most_chunks, total); }

struct Cell {
  uint64_t budget = 0, peak = 0;  // absolute bytes: the budget, the largest peak measured
  std::string refused;            // why it did not run: the plan's or the run's error
  std::map<int64_t, int> used;    // chunks the steps ran in -> steps
  int retried = 0;                // steps that ran out of memory and retried smaller
  std::vector<double> koila, plain;
};

// The first sentence of a koila error, without its function name.
std::string first_sentence(const std::string& message) {
  std::string s = message.substr(0, message.find(". "));
  const std::string prefix = "koila_backward: ";
  while (s.rfind(prefix, 0) == 0) s.erase(0, prefix.size());
  return s;
}

// One training step under the cell's budget, and the same chunks in plain LibTorch; false
// when koila refused or failed (noted in the cell). `timed`: recorded in the cell.
bool step_pair(const Graph& g, Plain& plain, int64_t batch, Cell& c, bool timed) {
  check(koila_set_memory_budget("cpu", c.budget), "koila_set_memory_budget");
  g.zero_grad();
  koila_plan* p = nullptr;
  const Outcome planned = outcome(koila_plan_new(&p, g.loss.get(), KOILA_MODE_TRAINING));
  if (!planned.ok()) {
    c.refused = planned.code == KOILA_ERROR_OUT_OF_MEMORY ? "refused: not one sample fits"
                                                          : "refused: " + first_sentence(planned.message);
    return false;
  }
  const int64_t planned_chunks = koila_plan_num_chunks(p);
  koila_plan_free(p);
  check(koila_memory_reset_peak("cpu"), "koila_memory_reset_peak");
  most_chunks = 0;
  auto start = std::chrono::steady_clock::now();
  const Outcome ran = outcome(koila_backward(g.loss.get()));
  const double seconds = seconds_since(start);
  if (!ran.ok()) {
    c.refused = "failed: " + first_sentence(ran.message);
    return false;
  }
  const int64_t chunk = (batch + most_chunks - 1) / most_chunks;
  check(koila_set_memory_budget("cpu", kUnlimited), "koila_set_memory_budget");
  start = std::chrono::steady_clock::now();
  plain.step(chunk);
  const double plain_seconds = seconds_since(start);
  if (!timed) return true;
  c.koila.push_back(seconds);
  c.plain.push_back(plain_seconds);
  c.peak = std::max(c.peak, device_peak());
  ++c.used[chunk];
  if (most_chunks > planned_chunks) ++c.retried;
  return true;
}

double ratio(const std::vector<double>& t, const std::vector<double>& unsplit) {
  return fastest_bench::median(t) / fastest_bench::median(unsplit);
}

// A batch of the given size instead of the corpus's (batch 0: the corpus's own; side 0:
// the samples' own shape).
struct Resize {
  int64_t batch = 0, side = 0;
};

// The reference's batch, or a random one of `r`'s size: images of the reference's channels,
// sequences of its shape, tokens below its largest, targets below its classes.
Reference batch_for(const std::string& dir, const Entry& e, const std::string& module_mode, const Resize& r) {
  Reference ref = read_reference(dir, e.name, module_mode);
  if (r.batch == 0) return ref;
  at::manual_seed(0);
  std::vector<int64_t> shape = ref.input.sizes().vec();
  shape[0] = r.batch;
  if (r.side > 0) shape = {r.batch, ref.input.size(1), r.side, r.side};
  ref.input = ref.input.is_floating_point()
                  ? at::randn(shape)
                  : at::randint(0, ref.input.max().item<int64_t>() + 1, shape, at::TensorOptions().dtype(at::kLong));
  ref.target = at::randint(0, ref.logits.size(1), {r.batch}, at::TensorOptions().dtype(at::kLong));
  return ref;
}

// 7a for one model in one module mode.
void cost_of_splitting(const std::string& dir, const Entry& e, const std::string& module_mode, int repeats,
                       const Resize& resize) {
  const bool train = module_mode == "train", per_chunk = e.batchnorm && train;
  check(koila_set_batch_stats(per_chunk ? KOILA_BATCH_STATS_PER_CHUNK : KOILA_BATCH_STATS_EXACT),
        "koila_set_batch_stats");
  const Reference ref = batch_for(dir, e, module_mode, resize);
  const Graph g(dir, e, train, ref);
  Plain plain(dir, e.name, train, ref);
  const int64_t batch = ref.input.size(0);
  plain.step(batch);  // its .grad held from here on: in use before koila's runs, as koila's own
  check(koila_set_memory_budget("cpu", kUnlimited), "koila_set_memory_budget");
  g.zero_grad();
  check(koila_backward(g.loss.get()), "koila_backward");  // the first plan; .grad exists from here on, as in a loop
  g.zero_grad();
  check(koila_memory_reset_peak("cpu"), "koila_memory_reset_peak");
  const uint64_t held = device_in_use();
  check(koila_backward(g.loss.get()), "koila_backward");
  const uint64_t need = device_peak() - held;
  Cell cells[4];
  check(koila_set_progress(on_chunk, nullptr), "koila_set_progress");
  for (int k = 0; k < 4; ++k) {
    cells[k].budget = k == 0 ? kUnlimited : held + static_cast<uint64_t>(static_cast<double>(need) * kFractions[k]);
    // Warm-up: the first plan under this budget simulates its chunk.
    step_pair(g, plain, batch, cells[k], /*timed=*/false);
  }
  for (int i = 0; i < repeats; ++i)
    for (Cell& c : cells)
      if (c.refused.empty()) step_pair(g, plain, batch, c, /*timed=*/true);
  check(koila_set_progress(nullptr, nullptr), "koila_set_progress");
  check(koila_set_memory_budget("cpu", 0), "koila_set_memory_budget");
  check(koila_set_batch_stats(KOILA_BATCH_STATS_EXACT), "koila_set_batch_stats");
  std::printf("| %s | %s%s | %lld | %.1f | %.1f | %.1f |", e.name.c_str(), module_mode.c_str(),
              per_chunk ? " (per chunk)" : "", static_cast<long long>(batch), mib(double(need)),
              1e3 * fastest_bench::median(cells[0].koila), 1e3 * fastest_bench::median(cells[0].plain));
  for (int k = 1; k < 4; ++k) {
    const Cell& c = cells[k];
    if (c.koila.empty()) {
      std::printf(" %s | | |", c.refused.c_str());
      continue;
    }
    std::string chunks;  // most used first
    std::vector<std::pair<int, int64_t>> by_use;
    for (const auto& [chunk, steps] : c.used) by_use.emplace_back(-steps, chunk);
    std::sort(by_use.begin(), by_use.end());
    for (const auto& [steps, chunk] : by_use) {
      chunks +=
          (chunks.empty() ? "" : ", ") + std::to_string(chunk) + " x " + std::to_string((batch + chunk - 1) / chunk);
      if (by_use.size() > 1) chunks += " (" + std::to_string(-steps) + " steps)";
    }
    if (c.retried) chunks += " (" + std::to_string(c.retried) + " of " + std::to_string(c.koila.size()) + " retried)";
    if (!c.refused.empty()) chunks += " (" + c.refused + ")";
    if (c.peak > c.budget) chunks += " (**over budget**)";
    std::printf(" %s | %.2fx | %.2fx |", chunks.c_str(), ratio(c.koila, cells[0].koila),
                ratio(c.plain, cells[0].plain));
  }
  std::printf("\n");
}

// 7b for one model in one module mode and koila mode.
void fastest_against_largest(const std::string& dir, const Entry& e, const std::string& module_mode, koila_mode mode,
                             int repeats) {
  const Reference ref = read_reference(dir, e.name, module_mode);
  const Graph g(dir, e, module_mode == "train", ref);
  check(koila_set_memory_budget("cpu", kUnlimited), "koila_set_memory_budget");
  at::Tensor logits = at::empty(ref.logits.sizes());
  const bool training = mode == KOILA_MODE_TRAINING;
  const fastest_bench::Comparison r = fastest_bench::compare_fastest(
      g.target_of(mode), mode, [&] { g.zero_grad(); },
      [&] {
        if (training) {
          check(koila_backward(g.loss.get()), "koila_backward");
        } else {
          const Outcome o = read_into(g.logits.get(), logits);
          if (!o.ok()) throw std::runtime_error("read: " + o.message);
        }
      },
      repeats);
  check(koila_set_memory_budget("cpu", 0), "koila_set_memory_budget");
  std::printf("| %s | %s | %s | %lld | %.1f | %lld x %lld | %.1f | %.2fx | %d | %s |\n", e.name.c_str(),
              module_mode.c_str(), training ? "training" : "forward", static_cast<long long>(e.input_shape[0]),
              1e3 * r.largest_seconds, static_cast<long long>(r.fastest_chunk),
              static_cast<long long>(r.fastest_chunks), 1e3 * r.fastest_seconds, r.speedup(), r.measuring_runs,
              r.why.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bench_corpus_args::CorpusArgs args;
  if (!bench_corpus_args::parse(argc, argv, 3, &args)) return 2;
  const std::string dir = argc > 1 ? argv[1] : KOILA_CORPUS_DIR;
  const int repeats = args.repeats;
  std::vector<Entry> entries = std::move(args.entries);
  // Its eager twin (Plain) takes one result: models with several are measured by bench_corpus.
  entries.erase(std::remove_if(entries.begin(), entries.end(), [](const Entry& e) { return e.results > 1; }),
                entries.end());
  if (argc > 3 && std::string(argv[3]) != "all")  // one model only
    entries.erase(std::remove_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.name != argv[3]; }),
                  entries.end());
  Resize resize;
  if (argc > 4) {
    resize = {std::atoll(argv[4]), argc > 5 ? std::atoll(argv[5]) : 0};
    if (resize.batch < 1 || resize.side < 0) {
      std::fprintf(stderr, "chunking: the batch must be a positive integer, the side one or 0\n");
      return 2;
    }
    if (resize.side > 0)  // images only
      entries.erase(
          std::remove_if(entries.begin(), entries.end(), [](const Entry& e) { return e.input_shape.size() != 4; }),
          entries.end());
  }

  std::printf("## 7a. Chunked training step on the real-model corpus (cpu, median of %d, interleaved)", repeats);
  if (resize.batch) std::printf(": random batches of %lld samples", static_cast<long long>(resize.batch));
  if (resize.side)
    std::printf(", images of %lldx%lld", static_cast<long long>(resize.side), static_cast<long long>(resize.side));
  std::printf("\n\n");
  std::printf(
      "budget = what is held + a fraction of the unsplit step's measured extra (\"need\"); koila and plain: the\n"
      "step against the unsplit one, koila's and plain LibTorch's running the same chunks\n\n");
  std::printf(
      "| model | module | batch | need MiB | koila unsplit ms | plain unsplit ms | 1/2: chunk x n | koila | plain | "
      "1/4: chunk x n | koila | plain | 1/8: chunk x n | koila | plain |\n");
  std::printf("|---|---|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---|---:|---:|\n");
  for (const Entry& e : entries)
    for (const std::string& module_mode : e.modes) {
      try {
        cost_of_splitting(dir, e, module_mode, repeats, resize);
      } catch (const std::exception& ex) {
        std::printf("| %s | %s | failed: %s |\n", e.name.c_str(), module_mode.c_str(), ex.what());
        check(koila_set_batch_stats(KOILA_BATCH_STATS_EXACT), "koila_set_batch_stats");
      }
    }

  if (resize.batch) return 0;  // 7b at the corpus's sizes only

  std::printf("\n## 7b. KOILA_CHUNK_FASTEST against LARGEST, the batch fits (cpu, median of %d, interleaved)\n\n",
              repeats);
  std::printf(
      "| model | module | mode | batch | LARGEST ms | FASTEST: chunk x n | ms | speed-up | runs measuring | FASTEST's "
      "account |\n");
  std::printf("|---|---|---|---:|---:|---|---:|---:|---:|---|\n");
  for (const Entry& e : entries)
    for (const std::string& module_mode : e.modes)
      for (koila_mode mode : {KOILA_MODE_FORWARD, KOILA_MODE_TRAINING}) {
        if (e.batchnorm && module_mode == "train") continue;  // not splittable (KOILA_BATCH_STATS_EXACT)
        try {
          fastest_against_largest(dir, e, module_mode, mode, repeats);
        } catch (const std::exception& ex) {
          std::printf("| %s | %s | %s | failed: %s |\n", e.name.c_str(), module_mode.c_str(),
                      mode == KOILA_MODE_TRAINING ? "training" : "forward", ex.what());
        }
      }
  return 0;
}
