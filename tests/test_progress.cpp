// Issue 13, item 4: koila_set_progress reports each chunk of real planned runs (never the
// planner's simulations or probes), on the thread running them, counting 1..total.
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "helpers.h"
#include "models.h"
#include "plan/estimate.h"
#include "plan/memo.h"

using namespace koila_test;
using koila_models::Kind;
using koila_models::Model;

namespace {

struct Call {
  std::string what;
  int64_t done, total;
  std::thread::id thread;
};

// What the callback saw; `lazy`, when set, is read from inside the callback (reentrancy).
struct Recorder {
  std::mutex mutex;
  std::vector<Call> calls;
  const koila_tensor* lazy = nullptr;
  std::vector<koila_code> nested;  // what reading `lazy` from the callback returned
  bool clear_on_first = false;

  static void callback(void* user, const char* what, int64_t done, int64_t total) {
    auto* r = static_cast<Recorder*>(user);
    {
      std::lock_guard<std::mutex> lock(r->mutex);
      r->calls.push_back({what, done, total, std::this_thread::get_id()});
    }
    if (r->lazy) {
      double v = 0;
      koila_status* s = koila_tensor_item(r->lazy, &v);
      r->nested.push_back(koila_status_code(s));
      koila_status_free(s);
    }
    if (r->clear_on_first) koila_status_free(koila_set_progress(nullptr, nullptr));
  }
  void clear() { calls.clear(); }
};

// Turns the callback off when a test ends.
struct ProgressGuard {
  ~ProgressGuard() { koila_status_free(koila_set_progress(nullptr, nullptr)); }
};

// Expects `calls[from..]` to be `what` 1..total in order, and returns total.
int64_t expect_run(const std::vector<Call>& calls, size_t from, const char* what, int64_t total) {
  std::string seen;
  for (const Call& c : calls) seen += " " + c.what + " " + std::to_string(c.done) + "/" + std::to_string(c.total);
  EXPECT_GE(calls.size(), from + static_cast<size_t>(total)) << seen;
  for (int64_t i = 0; i < total && from + static_cast<size_t>(i) < calls.size(); ++i) {
    const Call& c = calls[from + static_cast<size_t>(i)];
    EXPECT_EQ(c.what, what) << "call " << from + i << ":" << seen;
    EXPECT_EQ(c.done, i + 1) << "call " << from + i << ":" << seen;
    EXPECT_EQ(c.total, total) << "call " << from + i << ":" << seen;
  }
  return total;
}

class Progress : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(koila_set_progress(&Recorder::callback, &rec)); }
  BudgetGuard restore_budget;
  ProgressGuard restore_progress;
  Recorder rec;
  const Model m{Kind::CNN, at::kCPU, 5};
  const int64_t batch = 16;
  const at::Tensor xs = m.input(batch), ys = m.target(batch);
  Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0);
};

TEST_F(Progress, ChunkedForwardReportsEachChunk) {
  Handle logits = m.features(x.get());
  budget_for_chunk(logits.get(), koila::RunMode::Forward, 4);
  const PlanInfo p = plan_of(logits.get(), KOILA_MODE_FORWARD);
  ASSERT_GT(p.chunks, 1) << p.text;
  EXPECT_TRUE(rec.calls.empty()) << "estimating and planning (probes included) report nothing";
  const at::Tensor out = at::empty({batch, 10});
  ASSERT_OK(koila_tensor_to_host(logits.get(), out.data_ptr(), out.numel() * sizeof(float)));
  EXPECT_EQ(rec.calls.size(), static_cast<size_t>(p.chunks));
  expect_run(rec.calls, 0, "forward", p.chunks);
  for (const Call& c : rec.calls) EXPECT_EQ(c.thread, std::this_thread::get_id());
}

TEST_F(Progress, ChunkedBackwardReportsEachChunk) {
  Handle loss = m.loss(x.get(), y.get());  // the loss is the batch boundary: no combining pass
  budget_for_chunk(loss.get(), koila::RunMode::Training, 4);
  const PlanInfo p = plan_of(loss.get(), KOILA_MODE_TRAINING);
  ASSERT_GT(p.chunks, 1) << p.text;
  EXPECT_TRUE(rec.calls.empty()) << "planning reports nothing";
  ASSERT_OK(koila_backward(loss.get()));
  EXPECT_EQ(rec.calls.size(), static_cast<size_t>(p.chunks));
  expect_run(rec.calls, 0, "backward", p.chunks);
  m.zero_grad();
}

TEST_F(Progress, CombiningPassCountsAsForwardThenBackward) {
  Handle mean = m.loss(x.get(), y.get());
  Handle loss = CALL(koila_mul, mean.get(), mean.get());  // computed from the combined mean
  budget_for_chunk(loss.get(), koila::RunMode::Training, 4);
  const PlanInfo p = plan_of(loss.get(), KOILA_MODE_TRAINING);
  ASSERT_GT(p.chunks, 1) << p.text;
  ASSERT_OK(koila_backward(loss.get()));
  EXPECT_EQ(rec.calls.size(), static_cast<size_t>(2 * p.chunks));
  expect_run(rec.calls, 0, "forward", p.chunks);
  expect_run(rec.calls, static_cast<size_t>(p.chunks), "backward", p.chunks);
  m.zero_grad();
  // Evaluating it: the combining pass alone, as "forward".
  rec.clear();
  budget_for_chunk(loss.get(), koila::RunMode::Forward, 4);
  const PlanInfo f = plan_of(loss.get(), KOILA_MODE_FORWARD);
  double value = 0;
  ASSERT_OK(koila_tensor_item(loss.get(), &value));
  EXPECT_EQ(rec.calls.size(), static_cast<size_t>(f.chunks));
  expect_run(rec.calls, 0, "forward", f.chunks);
}

TEST_F(Progress, UnsplitRunsReportOneChunk) {
  Handle loss = m.loss(x.get(), y.get());
  ASSERT_EQ(plan_of(loss.get(), KOILA_MODE_TRAINING).chunks, 1);
  double value = 0;
  ASSERT_OK(koila_tensor_item(loss.get(), &value));
  expect_run(rec.calls, 0, "forward", 1);
  ASSERT_OK(koila_backward(loss.get()));
  ASSERT_EQ(rec.calls.size(), 2u);
  expect_run(rec.calls, 1, "backward", 1);
  m.zero_grad();
  // Reading a concrete tensor evaluates nothing and reports nothing.
  rec.clear();
  Handle c = koila_models::share(at::ones({1}));
  ASSERT_OK(koila_tensor_item(c.get(), &value));
  EXPECT_TRUE(rec.calls.empty());
}

TEST_F(Progress, PlanningAloneReportsNothing) {
  koila::testing::forget_graph_records();  // so the plans below run their real probes
  Handle loss = m.loss(x.get(), y.get());
  const uint64_t probes = koila::testing::probes_run();
  budget_for_chunk(loss.get(), koila::RunMode::Training, 2);
  EXPECT_GT(plan_of(loss.get(), KOILA_MODE_TRAINING).chunks, 1);
  EXPECT_GT(plan_of(loss.get(), KOILA_MODE_FORWARD).chunks, 0);
  EXPECT_GT(koila::testing::probes_run(), probes) << "the plans should have probed";
  EXPECT_TRUE(rec.calls.empty());
}

TEST_F(Progress, NullTurnsItOff) {
  Handle loss = m.loss(x.get(), y.get());
  ASSERT_OK(koila_set_progress(nullptr, &rec));
  budget_for_chunk(loss.get(), koila::RunMode::Training, 4);
  ASSERT_OK(koila_backward(loss.get()));
  double value = 0;
  ASSERT_OK(koila_tensor_item(loss.get(), &value));
  EXPECT_TRUE(rec.calls.empty());
  m.zero_grad();
}

TEST_F(Progress, CalledOnTheThreadRunningIt) {
  Handle loss = m.loss(x.get(), y.get());
  budget_for_chunk(loss.get(), koila::RunMode::Training, 4);
  std::thread::id runner;
  koila_status* s = nullptr;
  std::thread t([&] {
    runner = std::this_thread::get_id();
    s = koila_backward(loss.get());
  });
  t.join();
  ASSERT_EQ(s, nullptr) << koila_status_message(s);
  ASSERT_GT(rec.calls.size(), 1u);
  for (const Call& c : rec.calls) EXPECT_EQ(c.thread, runner);
  m.zero_grad();
}

TEST_F(Progress, OutOfMemoryRetryRestartsTheCount) {
  // Planned chunks of 8 do not fit for real: the run retries with 4 and counts again.
  Handle loss = m.loss(x.get(), y.get());
  const uint64_t e4 = koila::estimate_extra(loss->node, koila::RunMode::Training, 4);
  const uint64_t e8 = koila::estimate_extra(loss->node, koila::RunMode::Training, 8);
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + static_cast<uint64_t>(e8 * 1.15)));
  koila::testing::set_cpu_limit(current_cpu() + (e4 + e8) / 2);
  koila::Plan used;
  ASSERT_NO_THROW(koila::run_backward(loss->node, &used));
  koila::testing::set_cpu_limit(0);
  ASSERT_LT(used.chunk, 8) << used.describe();
  // The last run reported is the one that completed, counted 1..its chunks.
  const size_t n = static_cast<size_t>(used.chunks);
  ASSERT_GE(rec.calls.size(), n);
  expect_run(rec.calls, rec.calls.size() - n, "backward", used.chunks);
  for (const Call& c : rec.calls) EXPECT_LE(c.total, used.chunks);
  m.zero_grad();
}

TEST_F(Progress, CallbackMayCallKoilaButNotRunIt) {
  Handle loss = m.loss(x.get(), y.get());
  Handle other = m.loss(x.get(), y.get());
  rec.lazy = other.get();
  rec.clear_on_first = true;  // turning progress off from the callback takes effect at once
  budget_for_chunk(loss.get(), koila::RunMode::Training, 4);
  ASSERT_OK(koila_backward(loss.get()));
  ASSERT_EQ(rec.calls.size(), 1u);
  ASSERT_EQ(rec.nested.size(), 1u);
  EXPECT_EQ(rec.nested[0], KOILA_ERROR_UNSUPPORTED);
  m.zero_grad();
  // Afterwards, on the same thread, runs work again.
  double value = 0;
  ASSERT_OK(koila_tensor_item(other.get(), &value));
  EXPECT_EQ(rec.calls.size(), 1u);
}

}  // namespace
