// bench_step_time: the time of a training step (forward + backward, gradients into
// .grad) through koila against the same step in plain LibTorch when the batch fits, and
// the time of chunked steps under budgets of 1/2, 1/4 and 1/8 of the unsplit need. Then
// (issue 13, item 3) KOILA_CHUNK_FASTEST against LARGEST when the batch fits: the chunk
// FASTEST measured fastest, and both policies' step times. Figures:
// docs/BENCHMARKS.md#bench_step_time.
//
//   step_time [device] [repeats]     (default cpu, 11)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench_common.h"
#include "fastest_compare.h"

using namespace koila_models;
using bench::check;
using bench::mib;

namespace {

// One training step through koila: gradients from scratch, then wait for the device.
void koila_step(const Model& m, const koila_tensor* loss, const at::Device& dev) {
  m.zero_grad();
  check(koila_backward(loss), "koila_backward");
  if (!dev.is_cpu()) m.params()[0].grad().sum().item<float>();
}

struct Case {
  Kind kind;
  int64_t batch;
};

// A model, a batch of inputs and targets, and the lazy loss over them.
struct Setup {
  Model m;
  at::Tensor xs, ys;
  Handle x, y, loss;
  Setup(const Case& c, const at::Device& dev)
      : m(c.kind, dev, 1),
        xs(m.input(c.batch)),
        ys(m.target(c.batch)),
        x(lazy(xs, 0)),
        y(lazy(ys, 0)),
        loss(m.loss(x.get(), y.get())) {}
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* device = argc > 1 ? argv[1] : "cpu";
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 11;
  const at::Device dev(device);
  const std::vector<Case> cases =
      dev.is_cpu() ? std::vector<Case>{{Kind::MLP, 4096}, {Kind::CNN, 256}, {Kind::Transformer, 256}}
                   : std::vector<Case>{{Kind::MLP, 65536}, {Kind::CNN, 4096}, {Kind::Transformer, 4096}};

  std::printf("## Training step, batch fits (%s, median of %d)\n\n", device, repeats);
  std::printf("| model | batch | plain LibTorch ms | koila ms | ratio | koila, graph rebuilt each step ms | ratio |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Case& c : cases) {
    const Setup setup(c, dev);
    const Model& m = setup.m;
    const at::Tensor &xs = setup.xs, &ys = setup.ys;
    const Handle &x = setup.x, &y = setup.y, &loss = setup.loss;
    const std::vector<double> t =
        bench::median_times(repeats, {[&] {
                                        m.zero_grad();
                                        m.eager_loss(xs, ys).backward();
                                        if (!dev.is_cpu())
                                          m.params()[0].grad().sum().item<float>();  // wait for the device
                                      },
                                      [&] { koila_step(m, loss.get(), dev); },
                                      [&] {
                                        Handle l = m.loss(x.get(), y.get());
                                        koila_step(m, l.get(), dev);
                                      }});
    const double plain = t[0], koila = t[1], rebuilt = t[2];
    std::printf("| %s | %lld | %.1f | %.1f | %.3f | %.1f | %.3f |\n", name(c.kind), static_cast<long long>(c.batch),
                1e3 * plain, 1e3 * koila, koila / plain, 1e3 * rebuilt, rebuilt / plain);
    m.zero_grad();
  }

  std::printf("\n## Chunked training step under smaller budgets (%s, median of %d, interleaved)\n\n", device, repeats);
  std::printf("budget = memory in use + a fraction of the estimated unsplit extra\n\n");
  std::printf(
      "| model | batch | budget | chunk x n | est. peak MiB | meas. peak MiB | budget MiB | step ms | vs unsplit |\n");
  std::printf("|---|---:|---|---|---:|---:|---:|---:|---:|\n");
  for (const Case& c : cases) {
    const Setup setup(c, dev);
    const Model& m = setup.m;
    const Handle& loss = setup.loss;
    m.zero_grad();
    check(koila_backward(loss.get()), "koila_backward");  // .grad exists from here on, as in a loop
    check(koila_set_memory_budget(device, uint64_t{1} << 50), "koila_set_memory_budget");
    koila_plan* plan = nullptr;
    check(koila_plan_new(&plan, loss.get(), KOILA_MODE_TRAINING), "koila_plan_new");
    const uint64_t held = bench::memory(device).current;
    const uint64_t full_extra = koila_plan_full_peak_bytes(plan) - held;
    koila_plan_free(plan);
    struct Row {
      const char* budget_name = "";
      uint64_t budget = 0;
      std::string refused;  // why the plan was refused
      int64_t chunk = 0, chunks = 0;
      uint64_t estimated = 0, measured = 0;
    };
    std::vector<Row> rows;
    for (double fraction : {1.0, 0.5, 0.25, 0.125}) {
      Row r;
      r.budget_name = fraction >= 1 ? "unlimited" : fraction == 0.5 ? "1/2" : fraction == 0.25 ? "1/4" : "1/8";
      r.budget = fraction >= 1 ? uint64_t{1} << 50 : held + static_cast<uint64_t>(full_extra * fraction);
      check(koila_set_memory_budget(device, r.budget), "koila_set_memory_budget");
      koila_status* s = koila_plan_new(&plan, loss.get(), KOILA_MODE_TRAINING);
      if (s) {
        r.refused = koila_status_code(s) == KOILA_ERROR_OUT_OF_MEMORY ? "not one sample fits" : "error";
        koila_status_free(s);
      } else {
        r.chunk = koila_plan_chunk_size(plan);
        r.chunks = koila_plan_num_chunks(plan);
        r.estimated = koila_plan_peak_bytes(plan);
        koila_plan_free(plan);
      }
      rows.push_back(r);
    }
    // The budgets take turns, step by step.
    std::vector<std::function<void()>> steps;
    for (Row& r : rows)
      if (r.refused.empty())
        steps.push_back([&, row = &r] {
          check(koila_set_memory_budget(device, row->budget), "koila_set_memory_budget");
          check(koila_memory_reset_peak(device), "koila_memory_reset_peak");
          koila_step(m, loss.get(), dev);
          row->measured = std::max(row->measured, bench::memory(device).peak);
        });
    const std::vector<double> t = bench::median_times(repeats, steps);
    for (size_t k = 0, timed = 0; k < rows.size(); ++k) {
      const Row& r = rows[k];
      if (!r.refused.empty()) {
        std::printf("| %s | %lld | %s | refused (%s) | | | | | |\n", name(c.kind), static_cast<long long>(c.batch),
                    r.budget_name, r.refused.c_str());
        continue;
      }
      const double seconds = t[timed++];
      std::printf("| %s | %lld | %s | %lld x %lld | %.1f | %.1f | %s | %.1f | %.2fx |\n", name(c.kind),
                  static_cast<long long>(c.batch), r.budget_name, static_cast<long long>(r.chunk),
                  static_cast<long long>(r.chunks), mib(r.estimated), mib(r.measured),
                  k == 0 ? "-" : std::to_string(static_cast<long long>(mib(r.budget))).c_str(), 1e3 * seconds,
                  seconds / t[0]);
    }
    check(koila_set_memory_budget(device, 0), "koila_set_memory_budget");
    m.zero_grad();
  }

  std::printf("\n## KOILA_CHUNK_FASTEST against LARGEST, the batch fits (%s, median of %d, interleaved)\n\n", device,
              repeats);
  std::printf(
      "| model | batch | mode | LARGEST ms | FASTEST: chunk x n | ms | speed-up | runs measuring | FASTEST's account "
      "|\n");
  std::printf("|---|---:|---|---:|---|---:|---:|---:|---|\n");
  for (const Case& c : cases) {
    const Setup setup(c, dev);
    const Model& m = setup.m;
    const Handle logits = m.features(setup.x.get());
    const at::Tensor out = at::empty({c.batch, 10});
    check(koila_set_memory_budget(device, uint64_t{1} << 50), "koila_set_memory_budget");
    for (koila_mode mode : {KOILA_MODE_TRAINING, KOILA_MODE_FORWARD}) {
      const bool training = mode == KOILA_MODE_TRAINING;
      const fastest_bench::Comparison r = fastest_bench::compare_fastest(
          training ? setup.loss.get() : logits.get(), mode, [&] { m.zero_grad(); },
          [&] {
            if (training) {
              check(koila_backward(setup.loss.get()), "koila_backward");
              if (!dev.is_cpu()) m.params()[0].grad().sum().item<float>();  // wait for the device
            } else {
              check(koila_tensor_to_host(logits.get(), out.data_ptr(), out.numel() * sizeof(float)), "to_host");
            }
          },
          repeats);
      std::printf("| %s | %lld | %s | %.1f | %lld x %lld | %.1f | %.2fx | %d | %s |\n", name(c.kind),
                  static_cast<long long>(c.batch), training ? "training" : "forward", 1e3 * r.largest_seconds,
                  static_cast<long long>(r.fastest_chunk), static_cast<long long>(r.fastest_chunks),
                  1e3 * r.fastest_seconds, r.speedup(), r.measuring_runs, r.why.c_str());
    }
    check(koila_set_memory_budget(device, 0), "koila_set_memory_budget");
    m.zero_grad();
  }
  return 0;
}
