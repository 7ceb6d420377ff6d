// Planning cost (issue 12, item 9): a 1001-node graph, 500 x (linear + tanh) at batch 32,
// and a training step on it, lazy against eager. Prints a table.
//
//   first plan     koila_plan_new on the first graph of this structure: analysis, the
//                  simulations and the calibration probes;
//   first plan again  the same, on graphs built anew after every structure record was
//                  forgotten (KOILA_BENCH_FIRSTS times, default 5; median): a first plan
//                  once LibTorch's own first calls of each op are behind it;
//   ops not followed  the same, taking turns with it, without following the calibration's
//                  ops (koila::testing::set_ops_followed; the calibration added at the peak):
//                  what following them costs a first plan;
//   rebuilt plan   koila_plan_new on a graph built again the same way (every training step
//                  builds its graph anew): the structure's record is found, nothing is
//                  simulated or probed;
//   step ratio     a lazy training step (build the graph, koila_backward) against the same
//                  step computed eagerly with LibTorch, interleaved, median of many.
//
//   usage: bench_planning [repeats] [width] [absent|zeroed]
//   KOILA_BENCH_PROFILE=lazy|eager: only that kind of step (KOILA_BENCH_STEPS times, default 305),
//   no table (for perf or callgrind); =blocks: blocks of 20 lazy and 20 eager steps, medians.
//   KOILA_BENCH_NO_FUSION=1: weight gradients not fused into .grad (as before issue 28).
//   absent (default): each step ends setting every .grad absent; zeroed: zeroing them in
//   place (koila_tensor_zero_grad; eagerly Tensor::zero_), as koila_optimizer_zero_grad
//   and torch.optim's zero_grad(set_to_none=False) do.
#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kernels/fused_grads.h"
#include "plan/estimate.h"
#include "plan/memo.h"
#include "small_op_graph.h"

namespace {

using bench::SmallOpGraph;
using koila_models::Handle;

double plan_seconds(const koila_tensor* loss) {
  const double start = bench::now_seconds();
  koila_plan* plan = nullptr;
  bench::check(koila_plan_new(&plan, loss, KOILA_MODE_TRAINING), "koila_plan_new");
  const double s = bench::now_seconds() - start;
  koila_plan_free(plan);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 41;
  const int width = argc > 2 ? std::atoi(argv[2]) : 32;
  bool zero_in_place = false;
  if (argc > 3) {
    const std::string mode = argv[3];
    if (mode != "absent" && mode != "zeroed") {
      std::fprintf(stderr, "usage: %s [repeats] [width] [absent|zeroed]\n", argv[0]);
      return 2;
    }
    zero_in_place = mode == "zeroed";
  }
  // The lazy and the eager step each train their own copy of the parameters (equal at the
  // start), so that each finds its .grad as it left them.
  const SmallOpGraph net(width, zero_in_place), eager_net(width, zero_in_place);
  const at::Tensor xs = net.input();

  // KOILA_BENCH_NO_FUSION=1: linear layers as before issue 28's fusion (fused_grads.h), to
  // compare step times with and without it.
  if (const char* off = std::getenv("KOILA_BENCH_NO_FUSION"); off && std::string(off) == "1")
    koila::testing::set_grad_fusion(false);
  // One training step each way, as every table row and profile below runs them.
  const auto lazy_step = [&] {
    Handle loss = net.lazy_loss(xs);
    bench::check(koila_backward(loss.get()), "koila_backward");
    net.zero_grad_lazy();
  };
  const auto eager_step = [&] {
    eager_net.eager_step(xs);
    eager_net.zero_grad();
  };
  // KOILA_BENCH_PROFILE=lazy|eager: only that kind of step (KOILA_BENCH_STEPS times),
  // and no table: for a profiler (perf record) to see one kind of step alone.
  if (const char* only = std::getenv("KOILA_BENCH_PROFILE")) {
    if (std::string(only) == "blocks") {
      std::vector<double> lt, et;
      const auto timed = [](const auto& step, std::vector<double>& times) {
        for (int i = 0; i < 20; ++i) {
          const double start = bench::now_seconds();
          step();
          times.push_back(bench::now_seconds() - start);
        }
      };
      for (int round = 0; round < 10; ++round) {
        timed(lazy_step, lt);
        timed(eager_step, et);
      }
      std::printf("blocks: lazy %.2f ms eager %.2f ms ratio %.3f\n", bench::median(lt) * 1e3, bench::median(et) * 1e3,
                  bench::median(lt) / bench::median(et));
      return 0;
    }
    // firsts-followed|firsts-unfollowed: only first plans (KOILA_BENCH_STEPS of them), each
    // on a graph built anew with every record forgotten, for callgrind to count what
    // following the calibration's ops costs a first plan without this machine's noise.
    if (std::string(only) == "firsts-followed" || std::string(only) == "firsts-unfollowed") {
      const char* n_env = std::getenv("KOILA_BENCH_STEPS");
      for (int i = 0, n = n_env ? std::atoi(n_env) : 3; i < n; ++i) {
        koila::testing::set_ops_followed(std::string(only) == "firsts-followed");
        Handle again = net.lazy_loss(xs);
        std::printf("first plan: %.1f ms\n", plan_seconds(again.get()) * 1e3);
      }
      return 0;
    }
    const bool lazy = std::string(only) == "lazy";
    const char* steps_env = std::getenv("KOILA_BENCH_STEPS");
    const int steps = steps_env ? std::atoi(steps_env) : 305;
    for (int i = 0; i < steps; ++i) lazy ? lazy_step() : eager_step();
    return 0;
  }

  Handle first = net.lazy_loss(xs);
  const double first_plan = plan_seconds(first.get());
  // The first plan again, on graphs built anew with every record forgotten: what a first
  // plan costs once LibTorch's own first calls are behind it.
  std::vector<double> firsts, unfollowed;
  const char* firsts_env = std::getenv("KOILA_BENCH_FIRSTS");
  const int first_repeats = firsts_env ? std::atoi(firsts_env) : 5;
  for (int i = 0; i < first_repeats; ++i)
    for (bool followed : {i % 2 == 0, i % 2 != 0}) {  // (which goes first alternates)
      koila::testing::set_ops_followed(followed);     // (forgets every graph record)
      Handle again = net.lazy_loss(xs);
      (followed ? firsts : unfollowed).push_back(plan_seconds(again.get()));
    }
  koila::testing::set_ops_followed(true);
  std::vector<double> rebuilt;
  for (int i = 0; i < repeats; ++i) {
    Handle again = net.lazy_loss(xs);
    rebuilt.push_back(plan_seconds(again.get()));
  }

  const auto times = bench::median_times(repeats, {lazy_step, [&] { Handle loss = net.lazy_loss(xs); }, eager_step});

  std::printf(
      "| graph | .grad between steps | first plan | first plan again (median) | ops not followed (median) | rebuilt "
      "plan (median) | lazy step | of "
      "which building | eager step | lazy / eager |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::printf(
      "| %d x (linear + tanh), batch %d, width %d (%d nodes) | %s | %.1f ms | %.1f ms | %.1f ms | %.2f ms | %.1f ms | "
      "%.1f ms | "
      "%.1f ms | %.3f |\n",
      SmallOpGraph::kLayers, SmallOpGraph::kBatch, width, 2 * SmallOpGraph::kLayers + 1,
      zero_in_place ? "zeroed" : "absent", first_plan * 1e3, firsts.empty() ? 0.0 : bench::median(firsts) * 1e3,
      unfollowed.empty() ? 0.0 : bench::median(unfollowed) * 1e3, bench::median(rebuilt) * 1e3, times[0] * 1e3,
      times[1] * 1e3, times[2] * 1e3, times[0] / times[2]);
  return 0;
}
