// bench_groups: the time of a data-parallel training step (koila_group_backward on 2
// processes of this machine, Gloo over loopback, each on half the batch) against a
// single-process step (koila_backward) with the same global batch; unsplit, and under the
// tightest budget (in steps of 1% of the unsplit need) the single process's backward still
// plans under, the same bytes beyond what is held for each rank; with the gradients
// all-reduced in buckets of several sizes. Through the C API.
//
//   bench_groups [batch] [repeats]      the driver: runs everything, prints the table
//   bench_groups --rank R INIT OUT BATCH REPEATS EXTRA   one rank (started by the driver)
//   bench_groups --worker BATCH REPEATS   one worker started by torchrun (bench/groups_scaling.sh:
//                                         1, 2 and 4 workers, on loopback and between network
//                                         namespaces, against PyTorch's DDP)
//
// The model: an MLP 1024 -> 1024 -> 1024 -> 10 (float32, 2.1M parameters, 8 MiB of
// gradients) with cross entropy (MEAN).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "koila.h"
#include "median.h"

extern char** environ;

namespace {

constexpr int64_t kIn = 1024, kHidden = 1024, kClasses = 10;

void check(koila_status* s, const char* what) {
  if (!s) return;
  std::fprintf(stderr, "bench_groups: %s: %s\n", what, koila_status_message(s));
  std::exit(1);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

using bench::median;

struct Model {
  std::vector<koila_tensor*> params;
  koila_tensor* loss = nullptr;
};

// The loss over samples [start, start + length) of a fixed batch.
Model build(int64_t batch, int64_t start, int64_t length) {
  Model m;
  const int64_t shapes[6][2] = {{kHidden, kIn}, {kHidden, 1},        {kHidden, kHidden},
                                {kHidden, 1},   {kClasses, kHidden}, {kClasses, 1}};
  check(koila_manual_seed(1), "seed");
  for (const auto& shape : shapes) {
    koila_tensor *t = nullptr, *scaled = nullptr;
    check(koila_tensor_randn(&t, shape, shape[1] == 1 ? 1 : 2, KOILA_FLOAT32, "cpu"), "randn");
    check(koila_mul_scalar(&scaled, t, 0.02), "scale");
    koila_tensor_free(t);
    check(koila_tensor_set_requires_grad(scaled, 1), "requires_grad");
    m.params.push_back(scaled);
  }
  koila_tensor *all = nullptr, *x = nullptr, *lx = nullptr, *y = nullptr, *ly = nullptr;
  const int64_t data_shape[2] = {batch, kIn};
  check(koila_tensor_randn(&all, data_shape, 2, KOILA_FLOAT32, "cpu"), "data");
  check(koila_narrow(&x, all, 0, start, length), "shard");
  std::vector<int64_t> labels(length);
  for (int64_t i = 0; i < length; ++i) labels[i] = (start + i) % kClasses;
  check(koila_tensor_from_data(&y, labels.data(), labels.size() * sizeof(int64_t), KOILA_INT64, &length, 1, "cpu"),
        "labels");
  check(koila_lazy(&lx, x, 0), "lazy");
  check(koila_lazy(&ly, y, 0), "lazy");
  koila_tensor *h = lx, *next = nullptr;
  for (int layer = 0; layer < 3; ++layer) {
    check(koila_linear(&next, h, m.params[2 * layer], m.params[2 * layer + 1]), "linear");
    if (h != lx) koila_tensor_free(h);
    h = next;
    if (layer < 2) {
      check(koila_relu(&next, h), "relu");
      koila_tensor_free(h);
      h = next;
    }
  }
  check(koila_cross_entropy(&m.loss, h, ly, KOILA_REDUCTION_MEAN), "cross_entropy");
  for (koila_tensor* t : {all, x, lx, y, ly, h}) koila_tensor_free(t);
  return m;
}

void zero(Model& m) {
  for (koila_tensor* p : m.params) check(koila_tensor_zero_grad(p), "zero_grad");
}

// fraction 0: no budget. Otherwise the lowest budget, stepping down from the unsplit need
// (beyond what is held) in steps of `fraction` of it, under which the backward still plans:
// it runs in the fewest chunks koila can split it into here. Returns the number of chunks.
int64_t set_budget(const Model& m, double fraction, uint64_t* extra = nullptr) {
  check(koila_set_memory_budget("cpu", 0), "budget");
  if (extra) *extra = 0;
  if (fraction <= 0) return 1;
  koila_plan* plan = nullptr;
  uint64_t current = 0;
  check(koila_plan_new(&plan, m.loss, KOILA_MODE_TRAINING), "plan");
  check(koila_memory_stats("cpu", &current, nullptr), "stats");
  const uint64_t full = koila_plan_full_peak_bytes(plan);
  koila_plan_free(plan);
  int64_t chunks = 1;
  uint64_t chosen = 0;
  for (double f = 1 - fraction; f > 0; f -= fraction) {
    const uint64_t budget = current + static_cast<uint64_t>((full - current) * f);
    check(koila_set_memory_budget("cpu", budget), "budget");
    koila_status* s = koila_plan_new(&plan, m.loss, KOILA_MODE_TRAINING);
    if (s) {
      koila_status_free(s);
      break;
    }
    chunks = koila_plan_num_chunks(plan);
    chosen = budget;
    koila_plan_free(plan);
  }
  check(koila_set_memory_budget("cpu", chosen), "budget");
  if (extra && chosen) *extra = chosen - current;
  return chosen ? chunks : 1;
}

// A budget of `extra` bytes beyond what is held now (0: none); the number of chunks.
int64_t set_extra_budget(const Model& m, uint64_t extra) {
  check(koila_set_memory_budget("cpu", 0), "budget");
  if (extra == 0) return 1;
  uint64_t current = 0;
  check(koila_memory_stats("cpu", &current, nullptr), "stats");
  check(koila_set_memory_budget("cpu", current + extra), "budget");
  koila_plan* plan = nullptr;
  check(koila_plan_new(&plan, m.loss, KOILA_MODE_TRAINING), "plan");
  const int64_t chunks = koila_plan_num_chunks(plan);
  koila_plan_free(plan);
  return chunks;
}

// The medians (seconds) of `repeats` local backwards and group backwards, alternating, after
// one of each to warm up.
struct Timings {
  double local = 0, grouped = 0;
};
Timings time_steps(koila_group* g, Model& m, int repeats) {
  std::vector<double> local, grouped;
  for (int i = 0; i <= repeats; ++i) {
    zero(m);
    const double t0 = now();
    check(koila_backward(m.loss), "backward");
    const double t1 = now();
    zero(m);
    check(koila_group_backward(g, m.loss, m.params.data(), m.params.size()), "group_backward");
    const double t2 = now();
    if (i == 0) continue;  // warm-up
    local.push_back(t1 - t0);
    grouped.push_back(t2 - t1);
  }
  return {median(local), median(grouped)};
}

// One rank: times local backwards and group backwards, alternating; writes
// "chunks local_median group_median" to OUT.
int run_rank(int rank, const char* init, const char* out, int64_t batch, int repeats, uint64_t extra) {
  koila_group* g = nullptr;
  check(koila_group_new(&g, "gloo", init, rank, 2, 120000), "group_new");
  const int64_t half = batch / 2;
  Model m = build(batch, rank * half, rank == 0 ? half : batch - half);
  check(koila_group_broadcast(g, m.params.data(), m.params.size(), 0), "broadcast");
  const int64_t chunks = set_extra_budget(m, extra);
  const Timings t = time_steps(g, m, repeats);
  std::ofstream(out) << chunks << " " << t.local << " " << t.grouped << "\n";
  koila_group_free(g);
  return 0;
}

// A worker started by torchrun (bench/groups_scaling.sh): joins from the environment, takes its
// shard of the global batch (uneven where it does not divide), and prints its medians of a
// local backward and a group backward, no budget: "worker RANK of WORLD: local MS step MS".
int run_worker(int64_t batch, int repeats) {
  koila_group* g = nullptr;
  check(koila_group_new_from_env(&g, "gloo", 120000), "group_new_from_env");
  const int rank = koila_group_rank(g), world = koila_group_size(g);
  const int64_t start = batch * rank / world, end = batch * (rank + 1) / world;
  Model m = build(batch, start, end - start);
  check(koila_group_broadcast(g, m.params.data(), m.params.size(), 0), "broadcast");
  const Timings t = time_steps(g, m, repeats);
  std::printf("worker %d of %d: local %.2f step %.2f\n", rank, world, t.local * 1e3, t.grouped * 1e3);
  koila_group_free(g);
  return 0;
}

struct RankResult {
  long chunks = 0;
  double local = 0, grouped = 0;
};

// Starts the two ranks with `env_extra` added to the environment; returns rank 0's and
// rank 1's figures.
std::vector<RankResult> run_ranks(const char* self, int64_t batch, int repeats, uint64_t extra,
                                  const std::vector<std::string>& env_extra) {
  char dir_pattern[] = "/tmp/bench_groups_XXXXXX";
  const std::string dir = mkdtemp(dir_pattern);
  const std::string init = "file://" + dir + "/store";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.push_back(*e);
  for (const std::string& e : env_extra) env_strings.push_back(e);
  std::vector<char*> env;
  for (std::string& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  std::vector<pid_t> pids(2);
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> args = {self,
                                     "--rank",
                                     std::to_string(r),
                                     init,
                                     dir + "/out." + std::to_string(r),
                                     std::to_string(batch),
                                     std::to_string(repeats),
                                     std::to_string(extra)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pids[r], self, nullptr, nullptr, argv.data(), env.data()) != 0) std::exit(1);
  }
  std::vector<RankResult> results(2);
  for (int r = 0; r < 2; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "bench_groups: rank %d failed\n", r);
      std::exit(1);
    }
    std::ifstream in(dir + "/out." + std::to_string(r));
    in >> results[r].chunks >> results[r].local >> results[r].grouped;
  }
  std::system(("rm -rf " + dir).c_str());
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--rank") {
    if (argc != 8) return 2;  // --rank R INIT OUT BATCH REPEATS EXTRA_BYTES
    return run_rank(std::atoi(argv[2]), argv[3], argv[4], std::atoll(argv[5]), std::atoi(argv[6]),
                    std::strtoull(argv[7], nullptr, 10));
  }
  if (argc > 1 && std::string(argv[1]) == "--worker") {
    if (argc != 4) return 2;  // --worker BATCH REPEATS (under torchrun)
    return run_worker(std::atoll(argv[2]), std::atoi(argv[3]));
  }
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 1024;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  if (batch < 2 || repeats < 1) {
    std::fprintf(stderr, "usage: bench_groups [batch >= 2] [repeats >= 1]\n");
    return 2;
  }
  const char* self = "/proc/self/exe";
  char path[4096];
  const ssize_t n = readlink(self, path, sizeof path - 1);
  if (n <= 0) return 1;
  path[n] = '\0';

  std::printf(
      "bench_groups: MLP %lld-%lld-%lld-%lld (float32, 8 MiB of gradients), global batch %lld, "
      "median of %d steps; %ld CPU cores\n\n",
      static_cast<long long>(kIn), static_cast<long long>(kHidden), static_cast<long long>(kHidden),
      static_cast<long long>(kClasses), static_cast<long long>(batch), repeats, sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("%-34s %8s %12s %12s %12s %10s\n", "configuration", "chunks", "local ms", "step ms", "comm ms",
              "vs single");
  for (double fraction : {0.0, 0.01}) {
    const char* budget = fraction > 0 ? "tight budget" : "no budget";
    Model single = build(batch, 0, batch);
    uint64_t extra = 0;
    const int64_t chunks = set_budget(single, fraction, &extra);
    std::vector<double> times;
    for (int i = 0; i <= repeats; ++i) {
      zero(single);
      const double t0 = now();
      check(koila_backward(single.loss), "backward");
      if (i > 0) times.push_back(now() - t0);
    }
    const double base = median(times);
    check(koila_set_memory_budget("cpu", 0), "budget");
    for (koila_tensor* p : single.params) koila_tensor_free(p);
    koila_tensor_free(single.loss);
    std::printf("%-34s %8lld %12s %12.1f %12s %10s\n", (std::string("1 process, ") + budget).c_str(),
                static_cast<long long>(chunks), "", base * 1e3, "", "1.00x");
    std::fflush(stdout);
    struct Variant {
      const char* name;
      std::vector<std::string> env;
    };
    const std::vector<Variant> variants = {
        {"2 processes, 4 MiB buckets", {}},
        {"2 processes, 64 KiB buckets", {"KOILA_GROUP_BUCKET_BYTES=65536"}},
        {"2 processes, one tensor each", {"KOILA_GROUP_BUCKET_BYTES=1"}},
        {"2 processes, 4 MiB, 1 thread each", {"OMP_NUM_THREADS=1"}},
    };
    for (const Variant& v : variants) {
      const std::vector<RankResult> r = run_ranks(path, batch, repeats, extra, v.env);
      const double step = std::max(r[0].grouped, r[1].grouped);
      const double local = std::max(r[0].local, r[1].local);
      std::printf("%-34s %8ld %12.1f %12.1f %12.1f %9.2fx\n", (std::string(v.name) + ", " + budget).c_str(),
                  r[0].chunks, local * 1e3, step * 1e3, (step - local) * 1e3, base / step);
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nlocal ms: a rank's koila_backward on its half alone; step ms: its koila_group_backward (local "
      "backward, agreement, all-reduce); comm ms: the difference (the slower rank's figures).\n");
  return 0;
}
