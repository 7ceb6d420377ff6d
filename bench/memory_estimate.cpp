// bench_memory_estimate: the planner's estimated peak against the peak measured while running,
// per model, batch size and mode, unsplit and in chunks. Figures and how to read them:
// docs/BENCHMARKS.md#bench_memory_estimate.
//
//   memory_estimate [device]     (default cpu)
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench_common.h"

using namespace koila_models;
using bench::check;
using bench::mib;

namespace {

bench::EstimateRow measure(const Model& model, int64_t batch, koila_mode mode, int64_t chunk, const char* device) {
  const at::Tensor x = model.input(batch), y = model.target(batch);
  const Handle lx = lazy(x, 0), ly = lazy(y, 0);
  const Handle loss = model.loss(lx.get(), ly.get());
  return bench::measure_estimate(loss.get(), batch, mode, chunk, device, [&] { model.zero_grad(); });
}

}  // namespace

int main(int argc, char** argv) {
  const char* device = argc > 1 ? argv[1] : "cpu";
  const at::Device dev(device);
  std::printf(
      "Estimated vs measured peak memory (%s). extra = bytes beyond what was held before the run;\n"
      "error = (estimated - measured) / measured.\n\n",
      device);
  bench::print_estimate_header();
  double worst = 0;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  for (Kind kind : {Kind::MLP, Kind::CNN, Kind::Transformer}) {
    const Model model(kind, dev);
    for (int64_t batch : {64, 256, 1024}) {
      for (koila_mode mode : {KOILA_MODE_FORWARD, KOILA_MODE_TRAINING}) {
        const bench::EstimateRow full = measure(model, batch, mode, batch, device);
        const bench::EstimateRow split = measure(model, batch, mode, batch / 8, device);
        worst = std::max(worst, bench::print_estimate_row(name(kind), batch, mode, "unlimited", full));
        worst = std::max(worst, bench::print_estimate_row(name(kind), batch, mode, "fits 1/8", split));
        if (batch == 64) {  // chunks of one sample (issue 28, item 4)
          const bench::EstimateRow ones = measure(model, batch, mode, 1, device);
          worst = std::max(worst, bench::print_estimate_row(name(kind), batch, mode, "fits a sample", ones));
        }
      }
    }
  }
  std::printf("\nworst |error| of the extra: %.1f%%\n", 100 * worst);
  return 0;
}
