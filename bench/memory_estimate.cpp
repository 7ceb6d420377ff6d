// Benchmark 1: the planner's estimated peak against the peak measured while running, per
// model, batch size and mode, unsplit and in chunks.
//
//   memory_estimate [device]     (default cpu)
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench_common.h"
#include "planner.h"

using namespace koila_models;
using bench::check;
using bench::mib;

namespace {

struct Row {
  uint64_t estimated_peak, measured_peak, estimated_extra, measured_extra;
  int64_t chunk, chunks;
};

// Runs one step: unsplit (with a budget far above the need), or with a budget that fits
// chunks of `chunk` samples (by the estimate, plus 15%).
Row measure(const Model& model, int64_t batch, koila_mode mode, int64_t chunk, const char* device) {
  at::Tensor x = model.input(batch), y = model.target(batch);
  Handle lx = lazy(x, 0), ly = lazy(y, 0);
  Handle loss = model.loss(lx.get(), ly.get());
  model.zero_grad();
  koila_plan* plan = nullptr;
  uint64_t budget = uint64_t{1} << 50;
  if (chunk < batch) {
    const auto m = mode == KOILA_MODE_TRAINING ? koila::Mode::Training : koila::Mode::Forward;
    budget = bench::memory(device).current + static_cast<uint64_t>(1.15 * koila::estimate_extra(loss->node, m, chunk));
  }
  check(koila_set_memory_budget(device, budget), "koila_set_memory_budget");
  check(koila_plan_new(&plan, loss.get(), mode), "koila_plan_new");
  Row r{};
  r.estimated_peak = koila_plan_peak_bytes(plan);
  r.chunk = koila_plan_chunk_size(plan);
  r.chunks = koila_plan_num_chunks(plan);
  koila_plan_free(plan);
  check(koila_memory_reset_peak(device), "koila_memory_reset_peak");
  const bench::Memory before = bench::memory(device);
  r.estimated_extra = r.estimated_peak - before.current;
  if (mode == KOILA_MODE_TRAINING) {
    check(koila_backward(loss.get()), "koila_backward");
  } else {
    double value = 0;
    check(koila_tensor_item(loss.get(), &value), "koila_tensor_item");
  }
  r.measured_peak = bench::memory(device).peak;
  r.measured_extra = r.measured_peak - before.current;
  model.zero_grad();
  check(koila_set_memory_budget(device, 0), "koila_set_memory_budget");
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const char* device = argc > 1 ? argv[1] : "cpu";
  const at::Device dev(device);
  std::printf("Estimated vs measured peak memory (%s). extra = bytes beyond what was held before the run;\n"
              "error = (estimated - measured) / measured.\n\n",
              device);
  std::printf("| model | batch | mode | budget | chunk x n | est. peak MiB | meas. peak MiB | error | est. extra MiB | meas. extra MiB | error |\n");
  std::printf("|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|\n");
  double worst = 0;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  for (Kind kind : {Kind::MLP, Kind::CNN, Kind::Transformer}) {
    const Model model(kind, dev);
    for (int64_t batch : {64, 256, 1024}) {
      for (koila_mode mode : {KOILA_MODE_FORWARD, KOILA_MODE_TRAINING}) {
        
        const Row full = measure(model, batch, mode, batch, device);
        const Row split = measure(model, batch, mode, batch / 8, device);
        for (const Row* r : {&full, &split}) {
          const double e1 = (double(r->estimated_peak) - double(r->measured_peak)) / double(r->measured_peak);
          const double e2 = (double(r->estimated_extra) - double(r->measured_extra)) / double(r->measured_extra);
          worst = std::max(worst, std::fabs(e2));
          std::printf("| %s | %lld | %s | %s | %lld x %lld | %.1f | %.1f | %+.1f%% | %.1f | %.1f | %+.1f%% |\n", name(kind),
                      static_cast<long long>(batch), mode == KOILA_MODE_TRAINING ? "training" : "forward",
                      r == &full ? "unlimited" : "fits 1/8", static_cast<long long>(r->chunk),
                      static_cast<long long>(r->chunks), mib(r->estimated_peak), mib(r->measured_peak), 100 * e1,
                      mib(r->estimated_extra), mib(r->measured_extra), 100 * e2);
        }
      }
    }
  }
  std::printf("\nworst |error| of the extra: %.1f%%\n", 100 * worst);
  return 0;
}
