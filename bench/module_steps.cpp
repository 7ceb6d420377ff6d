// bench_module_steps (issue 26; figures: docs/BENCHMARKS.md#bench_module_steps): what a
// training step through a module costs in koila when the batch fits. For every model of the
// real-model corpus (tests/corpus), in each module mode it has references for, at its corpus
// batch, through the C API:
//
//   lazy step    zero the gradients, wrap the batch and the targets with koila_lazy, call
//                the module (koila_module_forward), the mean cross entropy, koila_backward:
//                what a training loop does each step (its graph is built anew every step);
//   eager step   the same with concrete inputs: every call computes at once;
//   LibTorch     the same module loaded by LibTorch itself (its own copy), run operator by
//                operator as koila runs modules, at::cross_entropy_loss, backward.
//
// The three take turns, step by step (the lazy and the eager step each go first every other
// time, LibTorch's last: see the loop), after two steps of each
// (a structure's first and second plans differ: its .grad go from absent to zeroed). The
// first lazy and eager steps of each model are shown apart: the first lazy step infers the
// call, simulates and probes the structure; "again" is the median of three more first lazy
// steps, each on the module loaded anew with every graph record forgotten, once LibTorch's
// own first calls are behind; "ops not followed" the same, taking turns with them, without
// following the calibration's ops (the calibration added at the peak, as before issue 28's
// op-by-op calibration): what following costs a first plan. "of which building" is the median time of the
// lazy step's koila_module_forward and koila_cross_entropy calls. Step times are medians;
// "lazy / eager" is the median, and in brackets the quartiles, of the ratios of each lazy
// step to the eager step right after it (so that the machine's drift touches both alike);
// "lazy - eager" the difference of the median times. The last row is the
// 1001-node small-op graph of bench_planning (500 x (linear + tanh), batch 32, width 32,
// .grad zeroed in place), lazy against plain LibTorch, which of the two goes first alternating.
//
// "in runs" measures the same steps as a training loop takes them, one kind back to back:
// rounds (as many steps as taking turns, at least 3 rounds) of 8 lazy steps and 8 eager
// steps (which goes first alternates round by round; then
// 8 LibTorch steps, not counted), each run's median over its last 7 steps; "lazy / eager"
// there is the median, and quartiles, of the rounds' ratios, "lazy - eager" the difference of
// the medians. Taking turns step by step, each step also finds the caches as the other
// kind's step left them; in runs it finds them as its own previous step did.
//
// A model whose eager step takes less than 3 s / repeats gets more repeats (about 3 s of
// steps of each kind, at most 40 x repeats); "lazy - eager" is the difference of the medians.
//
//   module_steps [device] [repeats] [corpus dir] [model]
//     (default cpu, 11, the build tree's corpus, every model; "small_op_graph": only the
//     1001-node graph.)
//   KOILA_BENCH_PROFILE=lazy|eager: only that kind of step, KOILA_BENCH_STEPS times (default
//     305) after two of each, and no table: for perf or callgrind.
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "corpus.h"
#include "kernels/fused_grads.h"
#include "plan/estimate.h"
#include "plan/memo.h"
#include "small_op_graph.h"

using namespace koila_corpus;

namespace {

using bench::median;

// One corpus model in one module mode, loaded twice: through koila, and by LibTorch itself.
struct Model {
  std::string device;
  Module module;
  std::vector<Tensor> params;
  Tensor input, target;  // concrete, on the device
  torch::jit::Module plain;
  std::vector<at::Tensor> plain_params;
  at::Tensor plain_input, plain_target;
  double building = 0;  // the last lazy step's module and loss calls, seconds

  Model(const std::string& dir, const std::string& name, const std::string& mode, const Reference& ref,
        const std::string& dev)
      : device(dev) {
    koila_module* m = nullptr;
    check(koila_module_load(&m, (dir + "/" + name + ".pt").c_str(), dev.c_str()), "koila_module_load " + name);
    module.reset(m);
    check(koila_module_train(m, mode == "train" ? 1 : 0), "koila_module_train");
    params = parameters_of(m);
    input = from_aten(ref.input, dev);
    target = from_aten(ref.target, dev);
    plain = torch::jit::load(dir + "/" + name + ".pt", at::Device(dev));
    plain.train(mode == "train");
    for (const at::Tensor& p : plain.parameters()) plain_params.push_back(p);
    plain_input = ref.input.to(at::Device(dev));
    plain_target = ref.target.to(at::Device(dev));
  }

  void zero_grad() const {
    for (const Tensor& p : params) check(koila_tensor_zero_grad(p.get()), "koila_tensor_zero_grad");
  }

  // Waits for the device: reads the last parameter's gradient (a classifier's bias).
  void sync() const {
    if (device == "cpu" || params.empty()) return;
    koila_tensor* g = nullptr;
    check(koila_tensor_grad(&g, params.back().get()), "koila_tensor_grad");
    Tensor grad(g);
    if (!grad) return;
    size_t ndim = 0;
    int64_t dims[8];
    check(koila_tensor_shape(grad.get(), dims, 8, &ndim), "koila_tensor_shape");
    at::Tensor host = at::empty(std::vector<int64_t>(dims, dims + ndim));
    check(koila_tensor_to_host(grad.get(), host.data_ptr(), host.numel() * sizeof(float)), "koila_tensor_to_host");
  }

  // One training step through koila, with lazy (`lazy_inputs`) or concrete inputs.
  void step(bool lazy_inputs) {
    zero_grad();
    Tensor x, y;
    if (lazy_inputs) {
      x = lazy(input.get(), 0);
      y = lazy(target.get(), 0);
    }
    const auto start = std::chrono::steady_clock::now();
    koila_tensor* in[] = {lazy_inputs ? x.get() : input.get()};
    koila_tensor* out = nullptr;
    check(koila_module_forward(&out, module.get(), in, 1), "koila_module_forward");
    Tensor logits(out);
    check(koila_cross_entropy(&out, logits.get(), lazy_inputs ? y.get() : target.get(), KOILA_REDUCTION_MEAN),
          "koila_cross_entropy");
    Tensor loss(out);
    if (lazy_inputs) building = seconds_since(start);
    check(koila_backward(loss.get()), "koila_backward");
    sync();
  }

  // The same step in LibTorch alone.
  void plain_step() {
    for (at::Tensor& p : plain_params)
      if (p.grad().defined()) p.mutable_grad().zero_();
    torch::jit::GraphOptimizerEnabledGuard op_by_op(false);
    const at::Tensor logits = plain.forward({plain_input}).toTensor();
    at::cross_entropy_loss(logits, plain_target).backward();
    if (device != "cpu" && !plain_params.empty()) plain_params.back().grad().sum().item<float>();
  }
};

// KOILA_BENCH_PROFILE=lazy|eager: after two steps of each kind, only that kind of step
// (KOILA_BENCH_STEPS times, default 305), no table: for perf or callgrind. Whether it did.
template <class Lazy, class Eager>
bool profiled(Lazy&& lazy_step, Eager&& eager_step) {
  const char* profile = std::getenv("KOILA_BENCH_PROFILE");
  if (!profile) return false;
  const bool lazy = std::string(profile) == "lazy";
  for (int i = 0; i < 2; ++i) lazy_step(), eager_step();
  const char* steps_env = std::getenv("KOILA_BENCH_STEPS");
  const int steps = steps_env ? std::atoi(steps_env) : 305;
  for (int i = 0; i < steps; ++i) lazy ? lazy_step() : eager_step();
  return true;
}

template <class F>
double timed(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return seconds_since(start);
}

struct Row {
  double first_lazy = 0, first_eager = 0;
  std::vector<double> firsts;      // first lazy steps again: a module loaded anew, every record forgotten
  std::vector<double> unfollowed;  // the same with the calibration's ops not followed
  std::vector<double> lazy, eager, plain, building;
  // In runs (kRun steps of one kind back to back, as a training loop runs them): per run,
  // the median of its steps after the first; ratios of each round's lazy run to its eager run.
  std::vector<double> run_lazy, run_eager, run_ratios;
};

// Steps of one kind in a run of the runs' measurement; the first of each is not counted (it
// finds the caches as the other kinds' runs left them).
constexpr int kRun = 8;

// Runs of kRun lazy and kRun eager steps, `rounds` of each, the order of the two (and of
// `plain`, run last in each round, not counted) alternating round by round, into `r`.
template <class Lazy, class Eager, class Plain>
void measure_runs(int rounds, Row& r, Lazy&& lazy_step, Eager&& eager_step, Plain&& plain_step) {
  auto run = [](auto&& step) {
    std::vector<double> t;
    for (int k = 0; k < kRun; ++k) {
      const double s = timed(step);
      if (k > 0) t.push_back(s);
    }
    return median(t);
  };
  for (int i = 0; i < rounds; ++i) {
    double lazy = 0, eager = 0;
    for (const bool lazy_run : {i % 2 == 0, i % 2 != 0}) {
      if (lazy_run)
        lazy = run(lazy_step);
      else
        eager = run(eager_step);
    }
    for (int k = 0; k < kRun; ++k) plain_step();
    r.run_lazy.push_back(lazy);
    r.run_eager.push_back(eager);
    r.run_ratios.push_back(lazy / eager);
  }
}

// The q-quantile of v (0 <= q <= 1).
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// Each lazy step over the eager step that followed it: the machine's drift (other load,
// clock changes) touches both alike.
std::vector<double> paired_ratios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return r;
}

void print_row(const std::string& what, int64_t batch, const Row& r) {
  const double lazy = median(r.lazy), eager = median(r.eager), plain = median(r.plain);
  const std::vector<double> ratios = paired_ratios(r.lazy, r.eager), plain_ratios = paired_ratios(r.lazy, r.plain);
  char building[32] = "–";
  if (!r.building.empty()) std::snprintf(building, sizeof building, "%.2f ms", median(r.building) * 1e3);
  std::printf(
      "| %s | %lld | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.2f ms | %s | %.2f ms | **%.3f** (%.3f-%.3f) | %+.0f us "
      "| **%.3f** (%.3f-%.3f) | %+.0f us | "
      "%zu | %.2f ms | %.3f |\n",
      what.c_str(), static_cast<long long>(batch), r.first_lazy * 1e3, r.first_eager * 1e3, median(r.firsts) * 1e3,
      median(r.unfollowed) * 1e3, lazy * 1e3, building, eager * 1e3, median(ratios), quantile(ratios, 0.25),
      quantile(ratios, 0.75), (lazy - eager) * 1e6, median(r.run_ratios), quantile(r.run_ratios, 0.25),
      quantile(r.run_ratios, 0.75), (median(r.run_lazy) - median(r.run_eager)) * 1e6, r.lazy.size(), plain * 1e3,
      median(plain_ratios));
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string device = argc > 1 ? argv[1] : "cpu";
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 11;
  const std::string dir = argc > 3 ? argv[3] : KOILA_CORPUS_DIR;
  const std::string only = argc > 4 ? argv[4] : "";
  if (repeats < 1) {
    std::fprintf(stderr, "usage: %s [device] [repeats >= 1] [corpus dir] [model]\n", argv[0]);
    return 2;
  }
  // KOILA_BENCH_NO_FUSION=1: linear layers as before issue 28's fusion (fused_grads.h), to
  // compare step times with and without it.
  if (const char* off = std::getenv("KOILA_BENCH_NO_FUSION"); off && std::string(off) == "1")
    koila::testing::set_grad_fusion(false);
  std::vector<Entry> entries;
  try {
    entries = read_manifest(dir);
    // The steps take one result (koila_module_forward): models with several are left out.
    entries.erase(std::remove_if(entries.begin(), entries.end(), [](const Entry& e) { return e.results > 1; }),
                  entries.end());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 2;
  }
  try {
    std::printf("## Training step through a module, lazy against eager (%s, %d repeats)\n\n", device.c_str(), repeats);
    std::printf(
        "| model (module mode) | batch | first lazy step | first eager step | first lazy step again | ops not followed "
        "| lazy step | "
        "of which building | eager step | lazy / eager | lazy - eager | in runs: lazy / eager | in runs: lazy - eager "
        "| steps | LibTorch step | lazy / LibTorch |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Entry& e : entries) {
      if (!only.empty() && e.name != only) continue;
      for (const std::string& mode : e.modes) {
        const Reference ref = read_reference(dir, e.name, mode);
        Model m(dir, e.name, mode, ref, device);
        if (profiled([&] { m.step(true); }, [&] { m.step(false); })) continue;
        Row r;
        r.first_eager = timed([&] { m.step(false); });
        r.first_lazy = timed([&] { m.step(true); });
        // A structure's first lazy step again, on the same module loaded anew (nothing
        // inferred) with every graph record forgotten (nothing simulated or probed), once
        // LibTorch's own first calls are behind: median of 3. Taking turns with the same
        // without following the calibration's ops (koila::testing::set_ops_followed).
        for (int i = 0; i < 3; ++i)
          for (bool followed : {i % 2 == 0, i % 2 != 0}) {  // (which goes first alternates)
            koila::testing::set_ops_followed(followed);     // (forgets every graph record)
            Model fresh(dir, e.name, mode, ref, device);
            (followed ? r.firsts : r.unfollowed).push_back(timed([&] { fresh.step(true); }));
          }
        koila::testing::set_ops_followed(true);
        double warm = 0;
        for (int i = 0; i < 2; ++i) {
          m.step(true);
          warm = timed([&] { m.step(false); });
          m.plain_step();
        }
        // Small models get more steps (about 3 s of each kind), as their medians move more.
        const int n = std::clamp(static_cast<int>(3.0 / std::max(warm, 1e-6)), repeats, 40 * repeats);
        // Which of the lazy and the eager step goes first alternates: the second finds the
        // module's parameters, its .grad and the batch in the caches where the first left
        // them, the first finds LibTorch's own copy's there (the plain step runs last).
        for (int i = 0; i < n; ++i) {
          for (const bool lazy_step : {i % 2 == 0, i % 2 != 0}) {
            if (lazy_step) {
              r.lazy.push_back(timed([&] { m.step(true); }));
              r.building.push_back(m.building);
            } else {
              r.eager.push_back(timed([&] { m.step(false); }));
            }
          }
          r.plain.push_back(timed([&] { m.plain_step(); }));
        }
        measure_runs(
            std::max(3, n / kRun), r, [&] { m.step(true); }, [&] { m.step(false); }, [&] { m.plain_step(); });
        print_row(e.name + " (" + mode + ")", ref.input.size(0), r);
      }
    }
    if ((only.empty() || only == "small_op_graph") && device == "cpu") {
      // The small-op graph: koila's own ops, so "eager" is plain LibTorch.
      const bench::SmallOpGraph net(32, /*zero_in_place=*/true), eager_net(32, true);
      const at::Tensor xs = net.input();
      Row r;
      auto lazy_step = [&] {
        koila_models::Handle loss = net.lazy_loss(xs);
        bench::check(koila_backward(loss.get()), "koila_backward");
        net.zero_grad_lazy();
      };
      auto eager_step = [&] {
        eager_net.eager_step(xs);
        eager_net.zero_grad();
      };
      if (profiled(lazy_step, eager_step)) return 0;
      r.first_lazy = timed(lazy_step);
      r.first_eager = timed(eager_step);
      for (int i = 0; i < 3; ++i)
        for (bool followed : {i % 2 == 0, i % 2 != 0}) {  // (which goes first alternates)
          koila::testing::set_ops_followed(followed);
          (followed ? r.firsts : r.unfollowed).push_back(timed(lazy_step));
        }
      koila::testing::set_ops_followed(true);
      for (int i = 0; i < 2; ++i) {
        lazy_step();
        eager_step();
      }
      // 401 steps of each: the ratios of single steps of this graph spread over 0.95-1.17 (its
      // eager step is 11-16 ms of small ops); four times the steps halve the sampling error of
      // their median (docs/benchmarks-log/log.md §26).
      const int n = std::max(repeats, 401);
      for (int i = 0; i < n; ++i)
        for (const bool lazy : {i % 2 == 0, i % 2 != 0})  // (which goes first alternates)
          lazy ? r.lazy.push_back(timed(lazy_step)) : r.eager.push_back(timed(eager_step));
      r.plain = r.eager;
      measure_runs(std::max(3, n / kRun), r, lazy_step, eager_step, [] {});
      print_row("500 x (linear + tanh), 1001 nodes", bench::SmallOpGraph::kBatch, r);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
  return 0;
}
