// Process groups (koila_group_*): several processes on this machine over Gloo, each a
// koila_group_worker (group_worker.cpp) on its own shard, checked against a single-process
// full-batch backward; failures (a budget too small on one rank, a rank killed, a rank that
// never arrives); bad arguments. Every multi-process run has a hard deadline: workers still
// running then are killed and the test fails.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "group_model.h"
#include "koila.h"
#include "temp_dir.h"

extern char** environ;

namespace {

#ifndef KOILA_GROUP_WORKER
#error "KOILA_GROUP_WORKER must name the worker executable"
#endif

struct Outcome {
  int code = -1;
  double elapsed_ms = 0;
  long long chunks = 0;
  std::string message;
  std::vector<double> params, grads;
  int exit_status = -1;  // of the process; -SIGNAL when killed by one
};

std::string temp_dir() {
  char pattern[] = "/tmp/koila_group_XXXXXX";
  const char* dir = mkdtemp(pattern);
  return dir ? dir : "";
}

std::vector<double> read_doubles(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<double> v(bytes.size() / sizeof(double));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(double));
  return v;
}

// A loopback port nobody listens on now (the kernel's pick; rank 0's TCPStore binds it).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
    port = ntohs(address.sin_port);
  if (fd >= 0) close(fd);
  EXPECT_GT(port, 0);
  return port;
}

// Runs `size` workers of `scenario` and collects what each wrote. Workers alive after
// `deadline` are killed (the caller checks what it expects to have finished).
std::vector<Outcome> run_group(const std::string& scenario, int size, int64_t timeout_ms, std::chrono::seconds deadline,
                               const std::string& init_kind = "file") {
  const std::string dir = temp_dir();
  EXPECT_FALSE(dir.empty());
  std::string init = "file://" + dir + "/store";
  if (init_kind == "tcp") init = "tcp://127.0.0.1:" + std::to_string(free_port());
  std::vector<pid_t> pids(size, -1);
  for (int r = 0; r < size; ++r) {
    const std::string rank = std::to_string(r), world = std::to_string(size), timeout = std::to_string(timeout_ms);
    std::vector<std::string> args = {KOILA_GROUP_WORKER, scenario, rank, world, init, dir, timeout};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pids[r], KOILA_GROUP_WORKER, nullptr, nullptr, argv.data(), environ), 0);
  }
  std::vector<Outcome> outcomes(size);
  const auto end = std::chrono::steady_clock::now() + deadline;
  int left = size;
  while (left > 0 && std::chrono::steady_clock::now() < end) {
    for (int r = 0; r < size; ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        outcomes[r].exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        pids[r] = -1;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < size; ++r) {
    if (pids[r] < 0) continue;
    kill(pids[r], SIGKILL);
    waitpid(pids[r], nullptr, 0);
    outcomes[r].exit_status = -1000;  // still running at the deadline
  }
  for (int r = 0; r < size; ++r) {
    Outcome& o = outcomes[r];
    std::ifstream status(dir + "/status." + std::to_string(r));
    if (status >> o.code >> o.elapsed_ms >> o.chunks) std::getline(status, o.message);
    o.params = read_doubles(dir + "/params." + std::to_string(r));
    o.grads = read_doubles(dir + "/grads." + std::to_string(r));
  }
  koila_tests::TempDir::remove_all(dir);
  return outcomes;
}

// The single-process reference: rank 0's parameters, the whole batch, eager LibTorch.
struct Reference {
  std::vector<double> params, grads;
};

Reference reference(koila_reduction reduction) {
  group_model::Model model;
  Reference ref;
  koila_tensor* loss = nullptr;
  EXPECT_EQ(group_model::make_params(&model, 100), nullptr);
  EXPECT_EQ(group_model::loss_over(&loss, &model, 0, group_model::kBatch, reduction, /*lazy=*/false), nullptr);
  EXPECT_EQ(koila_backward(loss), nullptr);
  ref.params = group_model::read_all(model.params);
  ref.grads = group_model::read_all_grads(model.params);
  koila_tensor_free(loss);
  group_model::free_params(&model);
  return ref;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.empty()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

void expect_full_batch_gradients(const std::string& scenario, int size, koila_reduction reduction,
                                 const std::string& init_kind = "file") {
  const Reference ref = reference(reduction);
  const std::vector<Outcome> outcomes = run_group(scenario, size, 20000, std::chrono::seconds(90), init_kind);
  for (int r = 0; r < size; ++r) {
    const Outcome& o = outcomes[r];
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + o.message);
    ASSERT_EQ(o.exit_status, 0);
    ASSERT_EQ(o.code, KOILA_OK);
    EXPECT_GT(o.chunks, 1) << "the shard's backward should have run in chunks";
    EXPECT_EQ(max_difference(o.params, ref.params), 0.0) << "the broadcast should make every rank start equal";
    const double diff = max_difference(o.grads, ref.grads);
    EXPECT_LT(diff, 1e-12) << "gradients differ from the single-process full batch's";
    std::printf("[ groups ] %s, %d ranks, rank %d: %lld chunks, max |grad - full batch grad| = %.3g\n",
                scenario.c_str(), size, r, o.chunks, diff);
  }
}

TEST(Groups, TwoRanksUnevenShardsMatchTheFullBatch) { expect_full_batch_gradients("mean", 2, KOILA_REDUCTION_MEAN); }

TEST(Groups, ThreeRanksUnevenShardsMatchTheFullBatch) {
  expect_full_batch_gradients("mean", 3, KOILA_REDUCTION_MEAN, "tcp");
}

TEST(Groups, SumLossesAddTheRanksGradients) { expect_full_batch_gradients("sum", 3, KOILA_REDUCTION_SUM); }

TEST(Groups, OneRankOutOfMemoryFailsEveryRankAndChangesNoGradient) {
  // Each rank made one successful group backward first; the failing one must leave that.
  const Reference ref = reference(KOILA_REDUCTION_MEAN);
  const std::vector<Outcome> outcomes = run_group("oom", 3, 20000, std::chrono::seconds(90));
  for (int r = 0; r < 3; ++r) {
    const Outcome& o = outcomes[r];
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + o.message);
    ASSERT_EQ(o.exit_status, 0);
    EXPECT_EQ(o.code, KOILA_ERROR_OUT_OF_MEMORY);
    EXPECT_NE(o.message.find("rank 1"), std::string::npos);
    EXPECT_NE(o.message.find("[failed: rank 1;"), std::string::npos) << "only rank 1 should have failed";
    EXPECT_NE(o.message.find("no gradient changed on any rank"), std::string::npos);
    EXPECT_LT(max_difference(o.grads, ref.grads), 1e-12) << "gradients changed by a failed group backward";
  }
}

void expect_others_fail_in_time(const std::string& scenario) {
  // The timeout also bounds the rendezvous, where a loaded CI machine may take seconds to
  // start three processes that load LibTorch.
  const int64_t timeout_ms = 6000;
  const std::vector<Outcome> outcomes = run_group(scenario, 3, timeout_ms, std::chrono::seconds(60));
  for (int r : {0, 2}) {
    const Outcome& o = outcomes[r];
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + o.message);
    ASSERT_EQ(o.exit_status, 0) << "the rank did not return (hung or crashed)";
    EXPECT_EQ(o.code, KOILA_ERROR_IO);
    EXPECT_LT(o.elapsed_ms, timeout_ms + 2000.0);
    EXPECT_LT(max_difference(o.grads, std::vector<double>(o.grads.size(), 0.0)), 1e-300)
        << "a gradient changed although the group backward failed";
    std::printf("[ groups ] %s: rank %d failed with KOILA_ERROR_IO after %.0f ms (timeout %lld ms)\n", scenario.c_str(),
                r, o.elapsed_ms, static_cast<long long>(timeout_ms));
  }
}

TEST(Groups, AKilledRankFailsTheOthersWithinTheTimeout) { expect_others_fail_in_time("die"); }

TEST(Groups, ARankThatNeverArrivesFailsTheOthersWithinTheTimeout) { expect_others_fail_in_time("stall"); }

// ---- in this process --------------------------------------------------------------------

koila_code code_of(koila_status* s) {
  const koila_code code = koila_status_code(s);
  koila_status_free(s);
  return code;
}

TEST(Groups, BadArgumentsGiveCleanCodes) {
  koila_group* g = reinterpret_cast<koila_group*>(0x1);
  const koila_tests::TempDir dir("koila_group_");
  const std::string file = "file://" + (dir / "store");
  EXPECT_EQ(code_of(koila_group_new(nullptr, "gloo", file.c_str(), 0, 1, 1000)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_group_new(&g, "mpi", file.c_str(), 0, 1, 1000)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(code_of(koila_group_new(&g, nullptr, file.c_str(), 0, 1, 1000)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_group_new(&g, "gloo", nullptr, 0, 1, 1000)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_group_new(&g, "gloo", file.c_str(), 2, 2, 1000)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_group_new(&g, "gloo", file.c_str(), -1, 2, 1000)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_group_new(&g, "gloo", file.c_str(), 0, 0, 1000)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_group_new(&g, "gloo", file.c_str(), 0, 1, 0)), KOILA_ERROR_INVALID_ARGUMENT);
  for (const char* init : {"", "udp://127.0.0.1:1234", "tcp://127.0.0.1", "tcp://127.0.0.1:0", "tcp://:80",
                           "tcp://127.0.0.1:99999", "tcp://127.0.0.1:12x", "file://relative/path", "file://"})
    EXPECT_EQ(code_of(koila_group_new(&g, "gloo", init, 0, 2, 1000)), KOILA_ERROR_INVALID_ARGUMENT) << init;
#ifndef KOILA_TEST_WITH_NCCL
  koila_status* s = koila_group_new(&g, "nccl", file.c_str(), 0, 1, 1000);
  EXPECT_EQ(koila_status_code(s), KOILA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(koila_status_message(s)).find("NCCL"), std::string::npos);
  koila_status_free(s);
#endif
  EXPECT_EQ(koila_group_rank(nullptr), -1);
  EXPECT_EQ(koila_group_size(nullptr), -1);
  EXPECT_EQ(code_of(koila_group_broadcast(nullptr, nullptr, 0, 0)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_group_backward(nullptr, nullptr, nullptr, 0)), KOILA_ERROR_INVALID_ARGUMENT);
  koila_group_free(nullptr);
}

TEST(Groups, UnreachableInitIsAnIoErrorWithinTheTimeout) {
  koila_group* g = nullptr;
  // Rank 1 of 2 at a port where no rank 0 listens; a file in a directory that does not exist;
  // rank 0 of 2 whose partner never comes.
  const koila_tests::TempDir dir("koila_group_");
  const std::string missing = "file://" + (dir / "no/such/dir/store");
  const std::string alone = "file://" + (dir / "alone");
  for (const std::string& init : {std::string("tcp://127.0.0.1:9"), missing, alone}) {
    const int rank = init == alone ? 0 : 1;
    const auto start = std::chrono::steady_clock::now();
    koila_status* s = koila_group_new(&g, "gloo", init.c_str(), rank, 2, 800);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(koila_status_code(s), KOILA_ERROR_IO) << init << ": " << koila_status_message(s);
    EXPECT_EQ(g, nullptr);
    EXPECT_LT(ms, 800 + 3000.0) << init;
    koila_status_free(s);
  }
}

// ---- from a launcher's environment (issue 52) ---------------------------------------------

// The launcher's variables set for one test, and put back as they were after it.
class LauncherEnv {
 public:
  explicit LauncherEnv(std::map<std::string, std::string> values) {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                             "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT"}) {
      const char* before = std::getenv(name);
      saved_.emplace_back(name, before ? std::optional<std::string>(before) : std::nullopt);
      unsetenv(name);
    }
    for (const auto& [name, value] : values) setenv(name.c_str(), value.c_str(), 1);
  }
  ~LauncherEnv() {
    for (const auto& [name, value] : saved_) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::map<std::string, std::string> one_rank_env(uint16_t port) {
  return {{"RANK", "0"},
          {"WORLD_SIZE", "1"},
          {"LOCAL_RANK", "0"},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

TEST(Groups, FromTheEnvironmentAMissingOrMalformedVariableIsNamed) {
  const uint16_t port = static_cast<uint16_t>(free_port());
  const std::vector<std::pair<std::string, std::string>> bad = {{"RANK", ""},
                                                                {"RANK", "one"},
                                                                {"RANK", "1"},
                                                                {"RANK", "-1"},
                                                                {"WORLD_SIZE", "0"},
                                                                {"WORLD_SIZE", "2x"},
                                                                {"LOCAL_RANK", "-3"},
                                                                {"LOCAL_RANK", "0.5"},
                                                                {"MASTER_ADDR", ""},
                                                                {"MASTER_PORT", "0"},
                                                                {"MASTER_PORT", "70000"},
                                                                {"MASTER_PORT", "29500 "},
                                                                {"TORCHELASTIC_RESTART_COUNT", "x"}};
  for (const auto& [name, value] : bad) {
    std::map<std::string, std::string> env = one_rank_env(port);
    env[name] = value;
    if (name == "TORCHELASTIC_RESTART_COUNT") env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    const LauncherEnv set(env);
    koila_group* g = nullptr;
    koila_status* s = koila_group_new_from_env(&g, "gloo", 1000);
    EXPECT_EQ(koila_status_code(s), KOILA_ERROR_INVALID_ARGUMENT) << name << "=\"" << value << "\"";
    EXPECT_NE(std::string(koila_status_message(s)).find(name), std::string::npos) << koila_status_message(s);
    EXPECT_EQ(g, nullptr);
    koila_status_free(s);
  }
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    std::map<std::string, std::string> env = one_rank_env(port);
    env.erase(name);
    const LauncherEnv set(env);
    koila_group* g = nullptr;
    koila_status* s = koila_group_new_from_env(&g, "gloo", 1000);
    EXPECT_EQ(koila_status_code(s), KOILA_ERROR_INVALID_ARGUMENT) << name;
    EXPECT_NE(std::string(koila_status_message(s)).find(std::string("no ") + name), std::string::npos)
        << koila_status_message(s);
    koila_status_free(s);
  }
  {  // The launcher's store without its restart count.
    std::map<std::string, std::string> env = one_rank_env(port);
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    const LauncherEnv set(env);
    koila_group* g = nullptr;
    koila_status* s = koila_group_new_from_env(&g, "gloo", 1000);
    EXPECT_NE(std::string(koila_status_message(s)).find("TORCHELASTIC_RESTART_COUNT"), std::string::npos);
    koila_status_free(s);
  }
  const LauncherEnv set(one_rank_env(port));
  koila_group* g = nullptr;
  EXPECT_EQ(code_of(koila_group_new_from_env(nullptr, "gloo", 1000)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_group_new_from_env(&g, nullptr, 1000)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_group_new_from_env(&g, "mpi", 1000)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_group_new_from_env(&g, "gloo", 0)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(koila_group_local_rank(nullptr), -1);
}

// One rank alone from the environment (rank 0 listens at MASTER_PORT): its local rank is
// LOCAL_RANK; the launcher's store that nobody serves is KOILA_ERROR_IO within the timeout.
TEST(Groups, FromTheEnvironmentOneRankJoinsAndAnUnservedStoreIsAnIoError) {
  {
    std::map<std::string, std::string> env = one_rank_env(static_cast<uint16_t>(free_port()));
    env["LOCAL_RANK"] = "3";
    const LauncherEnv set(env);
    koila_group* g = nullptr;
    ASSERT_EQ(koila_group_new_from_env(&g, "gloo", 5000), nullptr);
    EXPECT_EQ(koila_group_rank(g), 0);
    EXPECT_EQ(koila_group_size(g), 1);
    EXPECT_EQ(koila_group_local_rank(g), 3);
    koila_group_free(g);
  }
  std::map<std::string, std::string> env = one_rank_env(static_cast<uint16_t>(free_port()));
  env["RANK"] = "1";
  env["WORLD_SIZE"] = "2";
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["TORCHELASTIC_RESTART_COUNT"] = "0";
  const LauncherEnv set(env);
  for (const char* agent : {"True", "False"}) {  // (rank 1 is a client either way)
    setenv("TORCHELASTIC_USE_AGENT_STORE", agent, 1);
    koila_group* g = nullptr;
    const auto start = std::chrono::steady_clock::now();
    koila_status* s = koila_group_new_from_env(&g, "gloo", 800);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(koila_status_code(s), KOILA_ERROR_IO) << koila_status_message(s);
    EXPECT_EQ(g, nullptr);
    EXPECT_LT(ms, 800 + 3000.0);
    koila_status_free(s);
  }
}

TEST(Groups, OneRankGroupIsAPlainBackward) {
  const koila_tests::TempDir dir("koila_group_");
  const std::string init = "file://" + (dir / "store");
  koila_group* g = nullptr;
  ASSERT_EQ(koila_group_new(&g, "gloo", init.c_str(), 0, 1, 5000), nullptr);
  EXPECT_EQ(koila_group_rank(g), 0);
  EXPECT_EQ(koila_group_size(g), 1);
  EXPECT_EQ(koila_group_local_rank(g), 0);  // (its rank, for a group made by koila_group_new)
  group_model::Model model;
  ASSERT_EQ(group_model::make_params(&model, 100), nullptr);
  EXPECT_EQ(koila_group_broadcast(g, model.params, group_model::kParams, 0), nullptr);
  EXPECT_EQ(code_of(koila_group_broadcast(g, model.params, group_model::kParams, 1)), KOILA_ERROR_INVALID_ARGUMENT);
  koila_tensor* loss = nullptr;
  ASSERT_EQ(group_model::loss_over(&loss, &model, 0, group_model::kBatch, KOILA_REDUCTION_MEAN, true), nullptr);
  // Params that miss a tensor the loss reaches, NULL entries, a lazy loss handle missing.
  EXPECT_EQ(code_of(koila_group_backward(g, loss, model.params, 3)), KOILA_ERROR_INVALID_ARGUMENT);
  koila_tensor* with_null[4] = {model.params[0], nullptr, model.params[2], model.params[3]};
  EXPECT_EQ(code_of(koila_group_backward(g, loss, with_null, 4)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_group_backward(g, nullptr, model.params, 4)), KOILA_ERROR_INVALID_ARGUMENT);
  koila_tensor* twice[4] = {model.params[0], model.params[0], model.params[2], model.params[3]};
  EXPECT_EQ(code_of(koila_group_backward(g, loss, twice, 4)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(group_model::read_all_grads(model.params),
            std::vector<double>(group_model::read_all(model.params).size(), 0.0))
      << "failed group backwards changed gradients";
  ASSERT_EQ(koila_group_backward(g, loss, model.params, 4), nullptr);
  const Reference ref = reference(KOILA_REDUCTION_MEAN);
  EXPECT_LT(max_difference(group_model::read_all_grads(model.params), ref.grads), 1e-12);
  koila_tensor_free(loss);
  group_model::free_params(&model);
  koila_group_free(g);
}

// Gloo writes to a peer's socket with writev: once that rank has died, a write raises
// SIGPIPE, which at its default disposition kills the writing rank instead of letting the
// call fail with KOILA_ERROR_IO. Joining ignores it when the program left it at the default,
// and keeps a handler the program set.
void count_broken_pipe(int) {}

bool ignores_sigpipe() {
  struct sigaction now {};
  sigaction(SIGPIPE, nullptr, &now);
  return (now.sa_flags & SA_SIGINFO) == 0 && now.sa_handler == SIG_IGN;
}

TEST(Groups, JoiningKeepsABrokenPipeFromKillingTheProcess) {
  struct sigaction saved {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &saved), 0);
  auto join_alone = [] {
    const koila_tests::TempDir dir("koila_group_");
    const std::string init = "file://" + (dir / "store");
    koila_group* g = nullptr;
    koila_status* s = koila_group_new(&g, "gloo", init.c_str(), 0, 1, 5000);
    EXPECT_EQ(s, nullptr) << koila_status_message(s);
    koila_status_free(s);
    koila_group_free(g);
  };

  // A handler of the program's own is kept.
  struct sigaction own {};
  own.sa_handler = count_broken_pipe;
  sigemptyset(&own.sa_mask);
  ASSERT_EQ(sigaction(SIGPIPE, &own, nullptr), 0);
  join_alone();
  struct sigaction now {};
  sigaction(SIGPIPE, nullptr, &now);
  EXPECT_EQ(now.sa_handler, count_broken_pipe) << "joining replaced the program's SIGPIPE handler";

  // The default becomes ignored, so that a write to a closed socket fails with EPIPE (this
  // process would die here otherwise).
  ASSERT_EQ(signal(SIGPIPE, SIG_DFL), count_broken_pipe);
  join_alone();
  EXPECT_TRUE(ignores_sigpipe());
  int ends[2] = {-1, -1};
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, ends), 0);
  close(ends[1]);
  const char byte = 1;
  const ssize_t written = write(ends[0], &byte, 1);
  const int error = errno;
  close(ends[0]);
  EXPECT_EQ(written, -1);
  EXPECT_EQ(error, EPIPE);

  sigaction(SIGPIPE, &saved, nullptr);
}

}  // namespace
