// bench_modules: TorchScript modules through koila. The planner's estimated peak against the
// measured one for module graphs (a TorchScript MLP and CNN, cross entropy after them),
// and the time of a training step through koila against plain TorchScript when the batch
// fits (LibTorch's default optimizing executor, and operator by operator as koila runs
// modules), and in chunks under a quarter of the unsplit need. Figures:
// docs/BENCHMARKS.md#bench_modules.
//
//   modules [device] [repeats]     (default cpu, 11)
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_common.h"
#include "module/module.h"
#include "scripted_models.h"

using bench::check;
using bench::mib;
using koila_models::Handle;
using koila_models::lazy;

namespace {

struct Workload {
  const char* name;
  torch::jit::Module module;
  koila_module handle;
  std::vector<int64_t> sample;  // the shape of one input sample

  Workload(const char* n, torch::jit::Module m, std::vector<int64_t> s, const at::Device& dev)
      : name(n), module(std::move(m)), sample(std::move(s)) {
    module.to(dev);
    handle.module = module;
    handle.device = dev;
  }
  at::Tensor input(int64_t batch, const at::Device& dev) const {
    std::vector<int64_t> shape{batch};
    shape.insert(shape.end(), sample.begin(), sample.end());
    return at::randn(shape, at::TensorOptions().device(dev));
  }
  void zero_grad() const {
    for (const at::Tensor& p : module.parameters())
      if (p.grad().defined()) p.mutable_grad().zero_();
  }
  // The lazy mean cross entropy of the module's logits.
  Handle loss(const koila_tensor* x, const koila_tensor* y) {
    koila_tensor* logits = nullptr;
    koila_tensor* in[] = {const_cast<koila_tensor*>(x)};
    check(koila_module_forward(&logits, &handle, in, 1), "koila_module_forward");
    Handle l(logits);
    koila_tensor* out = nullptr;
    check(koila_cross_entropy(&out, l.get(), y, KOILA_REDUCTION_MEAN), "koila_cross_entropy");
    return Handle(out);
  }
  void sync(const at::Device& dev) const {
    if (!dev.is_cpu()) (*module.parameters().begin()).grad().sum().item<float>();
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* device = argc > 1 ? argv[1] : "cpu";
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 11;
  // "cuda" as koila_module_load reads it: the first device, with its index (module calls
  // compare devices, and "cuda" alone is not "cuda:0").
  at::Device dev(device);
  if (dev.is_cuda() && !dev.has_index()) dev = at::Device(at::kCUDA, 0);
  std::vector<Workload> workloads;
  workloads.emplace_back("ts-mlp", scripted::mlp(1), std::vector<int64_t>{784}, dev);
  workloads.emplace_back("ts-cnn", scripted::cnn(1), std::vector<int64_t>{3, 32, 32}, dev);

  std::printf("## Estimated vs measured peak, TorchScript modules (%s)\n\n", device);
  bench::print_estimate_header();
  double worst = 0;
  for (Workload& w : workloads) {
    for (int64_t batch : {64, 256, 1024}) {
      const at::Tensor xs = w.input(batch, dev);
      const at::Tensor ys = at::randint(10, {batch}, at::TensorOptions().dtype(at::kLong).device(dev));
      const Handle x = lazy(xs, 0), y = lazy(ys, 0);
      const Handle loss = w.loss(x.get(), y.get());
      for (koila_mode mode : {KOILA_MODE_FORWARD, KOILA_MODE_TRAINING}) {
        const auto full = bench::measure_estimate(loss.get(), batch, mode, batch, device, [&] { w.zero_grad(); });
        const auto split = bench::measure_estimate(loss.get(), batch, mode, batch / 8, device, [&] { w.zero_grad(); });
        worst = std::max(worst, bench::print_estimate_row(w.name, batch, mode, "unlimited", full));
        worst = std::max(worst, bench::print_estimate_row(w.name, batch, mode, "fits 1/8", split));
      }
    }
  }
  std::printf("\nworst |error| of the extra: %.1f%%\n", 100 * worst);

  std::printf("\n## Training step with a TorchScript module (%s, median of %d)\n\n", device, repeats);
  std::printf("plain = module.forward + cross entropy + backward in LibTorch; koila = the lazy graph built once\n\n");
  std::printf(
      "| model | batch | plain, optimizing executor ms | plain, op by op ms | koila ms | vs optimizing | koila, 1/4 "
      "budget: chunk x n | ms | vs unsplit |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---|---:|---:|\n");
  for (Workload& w : workloads) {
    const int64_t batch = std::string(w.name) == "ts-mlp" ? (dev.is_cpu() ? 4096 : 65536) : (dev.is_cpu() ? 256 : 4096);
    const at::Tensor xs = w.input(batch, dev);
    const at::Tensor ys = at::randint(10, {batch}, at::TensorOptions().dtype(at::kLong).device(dev));
    const Handle x = lazy(xs, 0), y = lazy(ys, 0);
    const Handle loss = w.loss(x.get(), y.get());
    auto plain = [&](bool optimize) {
      torch::jit::GraphOptimizerEnabledGuard guard(optimize);
      w.zero_grad();
      at::cross_entropy_loss(w.module.forward({xs}).toTensor(), ys).backward();
      w.sync(dev);
    };
    auto through_koila = [&] {
      w.zero_grad();
      check(koila_backward(loss.get()), "koila_backward");
      w.sync(dev);
    };
    check(koila_set_memory_budget(device, uint64_t{1} << 50), "koila_set_memory_budget");
    const std::vector<double> t =
        bench::median_times(repeats, {[&] { plain(true); }, [&] { plain(false); }, through_koila});
    // A quarter of the unsplit need.
    koila_plan* plan = nullptr;
    check(koila_plan_new(&plan, loss.get(), KOILA_MODE_TRAINING), "koila_plan_new");
    const uint64_t held = bench::memory(device).current;
    const uint64_t full_extra = koila_plan_full_peak_bytes(plan) - held;
    koila_plan_free(plan);
    check(koila_set_memory_budget(
              device,
              held + full_extra / 4 + koila::estimate_allocator_overhead(loss->node, koila::RunMode::Training, -1)),
          "koila_set_memory_budget");
    check(koila_plan_new(&plan, loss.get(), KOILA_MODE_TRAINING), "koila_plan_new");
    const long long chunk = koila_plan_chunk_size(plan), chunks = koila_plan_num_chunks(plan);
    koila_plan_free(plan);
    if (std::getenv("KOILA_BENCH_VERBOSE"))
      std::printf("%s\n", bench::describe(loss.get(), KOILA_MODE_TRAINING).c_str());
    const double chunked = bench::median_times(repeats, {through_koila})[0];
    check(koila_set_memory_budget(device, 0), "koila_set_memory_budget");
    std::printf("| %s | %lld | %.1f | %.1f | %.1f | %.3f | %lld x %lld | %.1f | %.2fx |\n", w.name,
                static_cast<long long>(batch), 1e3 * t[0], 1e3 * t[1], 1e3 * t[2], t[2] / t[0], chunk, chunks,
                1e3 * chunked, chunked / t[2]);
    w.zero_grad();
  }
  return 0;
}
