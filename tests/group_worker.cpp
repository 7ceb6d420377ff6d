// One rank of the process-group tests (test_groups.cpp starts several): joins the group,
// broadcasts rank 0's parameters, and runs group backwards of a small MLP with cross
// entropy over its own shard of a fixed batch, chunked under a small budget. Uses the C API
// alone, as a user's program would.
//
//   koila_group_worker SCENARIO RANK SIZE INIT OUTDIR TIMEOUT_MS
//
// Scenarios: mean, sum (the reduction of the loss), oom (a successful backward, then rank 1
// alone gets a budget nothing fits in), die (rank 1 kills itself before the backward), stall
// (rank 1 does not come to the backward
// within twice the timeout). Writes OUTDIR/status.RANK ("code elapsed_ms
// chunks message" of the last group backward), OUTDIR/params.RANK (the parameters after
// the broadcast) and OUTDIR/grads.RANK (the gradients at the end), as raw doubles.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "group_model.h"
#include "koila.h"

namespace {

[[noreturn]] void die(const char* what, koila_status* s) {
  std::fprintf(stderr, "worker: %s: %s\n", what, koila_status_message(s));
  std::exit(2);
}

void check(const char* what, koila_status* s) {
  if (s) die(what, s);
}

void write_doubles(const std::string& path, const std::vector<double>& values) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(values.data(), sizeof(double), values.size(), f) != values.size()) std::exit(3);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s SCENARIO RANK SIZE INIT OUTDIR TIMEOUT_MS\n", argv[0]);
    return 1;
  }
  const std::string scenario = argv[1];
  const int rank = std::atoi(argv[2]);
  const int size = std::atoi(argv[3]);
  const std::string out = argv[5];
  const int64_t timeout_ms = std::atoll(argv[6]);

  koila_group* group = nullptr;
  check("koila_group_new", koila_group_new(&group, "gloo", argv[4], rank, size, timeout_ms));

  // Parameters drawn differently on every rank; the broadcast makes them rank 0's.
  group_model::Model model;
  check("params", group_model::make_params(&model, 100 + rank));
  check("koila_group_broadcast", koila_group_broadcast(group, model.params, group_model::kParams, 0));
  write_doubles(out + "/params." + std::to_string(rank), group_model::read_all(model.params));

  const group_model::Shard shard = group_model::shard_of(rank, size);
  const koila_reduction reduction = scenario == "sum" ? KOILA_REDUCTION_SUM : KOILA_REDUCTION_MEAN;
  koila_tensor* loss = nullptr;
  check("loss", group_model::loss_over(&loss, &model, shard.start, shard.length, reduction, true));

  // oom: the gradients the failing backward must leave as they are (held .grad also makes
  // the budget below account for their snapshot).
  if (scenario == "oom") check("first backward", koila_group_backward(group, loss, model.params, group_model::kParams));

  // A budget that makes the shard's backward run in chunks: lowered from the unsplit
  // run's peak until the plan splits the shard in 3 chunks or more (or would not fit).
  koila_plan* plan = nullptr;
  check("plan", koila_plan_new(&plan, loss, KOILA_MODE_TRAINING));
  uint64_t current = 0;
  check("stats", koila_memory_stats("cpu", &current, nullptr));
  const uint64_t full = koila_plan_full_peak_bytes(plan);
  koila_plan_free(plan);
  int64_t chunks = 1;
  uint64_t budget = 0;  // automatic, when no lower budget plans
  for (int k = 1; k < 32 && chunks < 3; ++k) {
    const uint64_t lower = full - (full - current) * k / 32;
    check("budget", koila_set_memory_budget("cpu", lower));
    koila_status* s = koila_plan_new(&plan, loss, KOILA_MODE_TRAINING);
    if (s) {
      koila_status_free(s);
      break;
    }
    chunks = koila_plan_num_chunks(plan);
    budget = lower;
    koila_plan_free(plan);
  }
  check("budget", koila_set_memory_budget("cpu", budget));
  check("plan", koila_plan_new(&plan, loss, KOILA_MODE_TRAINING));
  chunks = koila_plan_num_chunks(plan);
  koila_plan_free(plan);

  // oom: the other ranks must not fail too, so they run under the automatic budget. The
  // tightest budget found above is a few KiB, where the plan's estimate can fall short by a
  // few hundred bytes (issue 28): a rank whose search ended at another budget because CI ran
  // other tests beside it failed that way, rarely (1704 bytes asked with 14800 held, budget
  // 14934; the same at 16501).
  if (scenario == "oom" && rank != 1) check("budget", koila_set_memory_budget("cpu", 0));
  if (scenario == "oom" && rank == 1) check("budget", koila_set_memory_budget("cpu", current + 1));
  if (scenario == "die" && rank == 1) raise(SIGKILL);
  if (scenario == "stall" && rank == 1) {
    // Gone for twice the timeout: the others must have given up meanwhile.
    sleep(static_cast<unsigned>(2 * timeout_ms / 1000 + 1));
    return 0;
  }

  const auto start = std::chrono::steady_clock::now();
  koila_status* s = koila_group_backward(group, loss, model.params, group_model::kParams);
  const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  write_doubles(out + "/grads." + std::to_string(rank), group_model::read_all_grads(model.params));
  FILE* f = std::fopen((out + "/status." + std::to_string(rank)).c_str(), "w");
  if (!f) return 3;
  std::fprintf(f, "%d %.1f %lld %s\n", static_cast<int>(koila_status_code(s)), elapsed, static_cast<long long>(chunks),
               koila_status_message(s));
  std::fclose(f);
  koila_status_free(s);
  koila_tensor_free(loss);
  group_model::free_params(&model);
  koila_group_free(group);
  return 0;
}
