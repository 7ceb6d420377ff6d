// Issue 13, item 3: koila_set_chunking(KOILA_CHUNK_FASTEST). The first runs of a graph
// structure time the candidate chunk sizes that fit, one per run, largest first; later runs
// use the fastest. Timings come from a fake clock (koila::testing::set_run_seconds), so the
// choice is deterministic; real runs still happen, and their results and gradients must
// equal the unsplit ones.
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "helpers.h"
#include "models.h"
#include "plan/chunking_options.h"
#include "plan/fastest.h"
#include "plan/memo.h"

using namespace koila_test;
using koila_models::Kind;
using koila_models::Model;

namespace {

// ---- The choice alone ----------------------------------------------------------------

koila::ChunkTimings timings(const std::map<int64_t, double>& seconds, int runs = koila::kTimedRunsPerCandidate) {
  koila::ChunkTimings t;
  for (const auto& [chunk, s] : seconds)
    for (int i = 0; i < runs; ++i) koila::record_timing(t, chunk, s);
  return t;
}

TEST(FastestChoice, CandidatesAreTheLargestThatFitsAndPowersOfTwoBelow) {
  auto all = [](int64_t) { return true; };
  EXPECT_EQ(koila::fastest_candidates(16, all), (std::vector<int64_t>{16, 8, 4, 2, 1}));
  EXPECT_EQ(koila::fastest_candidates(256, all), (std::vector<int64_t>{256, 128, 64, 32, 16}));
  EXPECT_EQ(koila::fastest_candidates(100, all), (std::vector<int64_t>{100, 64, 32, 16, 8}));
  EXPECT_EQ(koila::fastest_candidates(3, all), (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(koila::fastest_candidates(1, all), (std::vector<int64_t>{1}));
  // A size whose estimate does not fit is left out.
  EXPECT_EQ(koila::fastest_candidates(16, [](int64_t c) { return c != 4; }), (std::vector<int64_t>{16, 8, 2, 1}));
}

TEST(FastestChoice, MeasuresInTwoRoundsLargestFirst) {
  const std::vector<int64_t> candidates{32, 16, 8};
  koila::ChunkTimings t;
  auto next = [&](int64_t expected, const std::string& says) {
    const koila::FastestChoice c = koila::choose_fastest(candidates, 32, t);
    EXPECT_EQ(c.chunk, expected) << c.reason;
    EXPECT_TRUE(c.timed);
    EXPECT_NE(c.reason.find(says), std::string::npos) << c.reason;
  };
  next(32, "measuring candidate 1 of 3 (unsplit), round 1 of 2");
  koila::record_timing(t, 32, 0.5);  // a first run, warming up
  next(16, "measuring candidate 2 of 3 (chunks of 16), round 1 of 2; measured so far: unsplit 500 ms");
  koila::record_timing(t, 16, 0.3);
  next(8, "measuring candidate 3 of 3 (chunks of 8), round 1 of 2");
  koila::record_timing(t, 8, 0.35);
  next(32, "measuring candidate 1 of 3 (unsplit), round 2 of 2");
  koila::record_timing(t, 32, 0.2);  // the faster run counts
  next(16, "round 2 of 2; measured so far: unsplit 200 ms");
  koila::record_timing(t, 16, 0.4);
  // 16 (300 ms at best) is now 25% slower than unsplit: 8 is not timed again, and the
  // choice is made.
  const koila::FastestChoice c = koila::choose_fastest(candidates, 32, t);
  EXPECT_EQ(c.chunk, 32) << c.reason;
  EXPECT_FALSE(c.timed);
  EXPECT_NE(c.reason.find("measured (fastest of 2 runs each): unsplit 200 ms, 16: 300 ms"), std::string::npos)
      << c.reason;
  EXPECT_NE(c.reason.find("16 was 25% or more slower than the best, smaller chunks were not timed"), std::string::npos)
      << c.reason;
}

TEST(FastestChoice, PicksASmallerChunkThatIsFaster) {
  const koila::FastestChoice c = koila::choose_fastest(
      {256, 128, 64, 32, 16}, 256, timings({{256, 0.171}, {128, 0.163}, {64, 0.150}, {32, 0.180}, {16, 0.190}}));
  EXPECT_EQ(c.chunk, 64);
  EXPECT_FALSE(c.timed);
  EXPECT_NE(c.reason.find("chunks of 64 measured fastest (150 ms vs 171 ms unsplit)"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("unsplit 171 ms, 128: 163 ms, 64: 150 ms, 32: 180 ms, 16: 190 ms"), std::string::npos)
      << c.reason;
}

TEST(FastestChoice, StopsAtACandidateClearlySlower) {
  // 32 is 25% slower than 64: 16 is never timed, and the choice is made without it.
  const std::vector<int64_t> candidates{128, 64, 32, 16};
  const koila::FastestChoice c = koila::choose_fastest(candidates, 128, timings({{128, 0.10}, {64, 0.08}, {32, 0.10}}));
  EXPECT_EQ(c.chunk, 64);
  EXPECT_FALSE(c.timed);
  EXPECT_NE(c.reason.find("32 was 25% or more slower than the best, smaller chunks were not timed"), std::string::npos)
      << c.reason;
  // Just under 25% slower: measuring goes on.
  const koila::FastestChoice d =
      koila::choose_fastest(candidates, 128, timings({{128, 0.10}, {64, 0.08}, {32, 0.0999}}));
  EXPECT_EQ(d.chunk, 16);
  EXPECT_TRUE(d.timed);
}

TEST(FastestChoice, ASmallerChunkMustBeFasterByAMargin) {
  // 16 is 8% faster than 32: within the noise of timings, the larger chunk stays; 8 is 11%
  // faster than 32 and wins.
  const std::vector<int64_t> candidates{32, 16, 8};
  koila::FastestChoice c = koila::choose_fastest(candidates, 32, timings({{32, 0.100}, {16, 0.092}, {8, 0.093}}));
  EXPECT_EQ(c.chunk, 32);
  EXPECT_NE(c.reason.find("unsplit kept (no smaller chunk measured 10% or more faster)"), std::string::npos)
      << c.reason;
  c = koila::choose_fastest(candidates, 32, timings({{32, 0.100}, {16, 0.092}, {8, 0.089}}));
  EXPECT_EQ(c.chunk, 8);
}

TEST(FastestChoice, TheLargestWhenItIsFastest) {
  const koila::FastestChoice c = koila::choose_fastest({8, 4, 2}, 20, timings({{8, 0.01}, {4, 0.02}, {2, 0.03}}));
  EXPECT_EQ(c.chunk, 8);
  EXPECT_NE(c.reason.find("the largest chunk that fits kept (no smaller chunk measured 10% or more faster)"),
            std::string::npos)
      << c.reason;
  const koila::FastestChoice one = koila::choose_fastest({8}, 20, {});
  EXPECT_EQ(one.chunk, 8);
  EXPECT_FALSE(one.timed);
  EXPECT_NE(one.reason.find("one candidate (chunks of 8), nothing to measure"), std::string::npos) << one.reason;
}

// ---- Planned runs --------------------------------------------------------------------

std::vector<at::Tensor> grads_of(const Model& m) {
  std::vector<at::Tensor> g;
  for (const at::Tensor& p : m.params()) g.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return g;
}

void expect_close(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined() && b[i].defined()) << what << " gradient " << i;
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    const double scale = b[i].abs().max().item<double>();
    EXPECT_LE(diff, 1e-4 * scale + 1e-6) << what << " gradient " << i << " differs by " << diff;
  }
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A fake clock: each timed run of `chunk` takes seconds[chunk]; the chunks timed, in order.
struct FakeClock {
  std::mutex mutex;
  std::map<int64_t, double> seconds;
  std::vector<int64_t> timed;
  FakeClock() {
    koila::testing::set_run_seconds([this](int64_t chunk) {
      std::lock_guard<std::mutex> lock(mutex);
      timed.push_back(chunk);
      return seconds.at(chunk);
    });
  }
  ~FakeClock() { koila::testing::set_run_seconds(nullptr); }
};

// Restores the default chunking and batch statistics, and forgets what was measured.
struct ChunkingGuard {
  ChunkingGuard() { koila::testing::forget_graph_records(); }
  ~ChunkingGuard() {
    koila_status_free(koila_set_chunking(KOILA_CHUNK_LARGEST));
    koila_status_free(koila_set_batch_stats(KOILA_BATCH_STATS_EXACT));
    koila::testing::forget_graph_records();
  }
};

// A CNN's lazy training loss over a batch of 16 and the gradients of its unsplit backward
// (KOILA_CHUNK_LARGEST under the automatic budget), then FASTEST in force.
class Fastest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(koila_set_chunking(KOILA_CHUNK_LARGEST));
    m.zero_grad();
    koila::Plan used;
    koila::run_backward(loss->node, &used);
    ASSERT_EQ(used.chunk, batch) << used.describe();
    unsplit = grads_of(m);
    m.zero_grad();
    ASSERT_OK(koila_set_chunking(KOILA_CHUNK_FASTEST));
  }
  void TearDown() override { m.zero_grad(); }

  // The plan of the loss's backward at the start of a step: the .grad a backward finds is
  // part of the graph's structure (plan/memo.h), and every step here starts without any.
  PlanInfo training_plan() {
    m.zero_grad();
    return plan_of(loss.get(), KOILA_MODE_TRAINING);
  }

  // The value of `t` read under LARGEST (unsplit here); FASTEST is in force again after.
  at::Tensor largest_value(const koila_tensor* t) {
    koila_status_free(koila_set_chunking(KOILA_CHUNK_LARGEST));
    const at::Tensor value = to_aten(t);
    koila_status_free(koila_set_chunking(KOILA_CHUNK_FASTEST));
    return value;
  }

  // One training step: zero_grad, planned backward; returns the chunk it used, after
  // checking that the plan made just before showed that chunk.
  int64_t step(const std::string& what) {
    const PlanInfo planned = training_plan();
    koila::Plan used;
    koila::run_backward(loss->node, &used);
    EXPECT_EQ(planned.chunk, used.chunk) << what << ": " << planned.text;
    expect_close(grads_of(m), unsplit, what + " in chunks of " + std::to_string(used.chunk));
    return used.chunk;
  }

  BudgetGuard restore_budget;
  ChunkingGuard restore_chunking;
  FakeClock clock;
  const Model m{Kind::CNN, at::kCPU, 7};
  const int64_t batch = 16;
  const at::Tensor xs = m.input(batch), ys = m.target(batch);
  Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0);
  Handle loss = m.loss(x.get(), y.get());
  std::vector<at::Tensor> unsplit;
};

TEST_F(Fastest, MeasuresOneCandidatePerRunThenUsesTheFastest) {
  // 2 is 25% or more slower than 4 (0.95 >= 1.25 * 0.7): measuring stops there, and 1,
  // which would have been fastest, is never timed.
  clock.seconds = {{16, 1.0}, {8, 0.8}, {4, 0.7}, {2, 0.95}, {1, 0.1}};
  std::vector<int64_t> used;
  for (int i = 0; i < 11; ++i) used.push_back(step("step " + std::to_string(i + 1)));
  EXPECT_EQ(used, (std::vector<int64_t>{16, 8, 4, 2, 16, 8, 4, 2, 4, 4, 4}));
  EXPECT_EQ(clock.timed, (std::vector<int64_t>{16, 8, 4, 2, 16, 8, 4, 2})) << "later runs time nothing";
  const std::string text = training_plan().text;
  EXPECT_TRUE(contains(
      text, "The unsplit run fits. KOILA_CHUNK_FASTEST: chunks of 4 measured fastest (700 ms vs 1000 ms unsplit)"))
      << text;
  EXPECT_TRUE(contains(text, "2 was 25% or more slower than the best, smaller chunks were not timed")) << text;
  // Evaluation is another structure: measured on its own.
  const std::string forward = plan_of(loss.get(), KOILA_MODE_FORWARD).text;
  EXPECT_TRUE(contains(forward, "measuring candidate 1 of 5 (unsplit")) << forward;
}

TEST_F(Fastest, ThePlanSaysWhichCandidateTheNextRunTimes) {
  clock.seconds = {{16, 1.0}, {8, 0.5}, {4, 0.55}, {2, 0.6}, {1, 0.62}};  // none 25% slower than 8
  // A budget of its own: the automatic one follows the machine's free memory, which other
  // processes (the tests running beside this one) change between two plans.
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + (uint64_t{1} << 30)));
  PlanInfo p = training_plan();
  EXPECT_EQ(p.chunk, 16);
  EXPECT_TRUE(
      contains(p.text, "It fits unsplit. KOILA_CHUNK_FASTEST: measuring candidate 1 of 5 (unsplit), round 1 of 2"))
      << p.text;
  EXPECT_EQ(training_plan().text, p.text) << "planning measures nothing";
  step("1");
  p = training_plan();
  EXPECT_EQ(p.chunk, 8);
  EXPECT_EQ(p.chunks, 2);
  EXPECT_TRUE(
      contains(p.text, "measuring candidate 2 of 5 (chunks of 8), round 1 of 2; measured so far: unsplit 1000 ms"))
      << p.text;
  for (int i = 0; i < 9; ++i) step(std::to_string(i + 2));
  p = training_plan();
  EXPECT_EQ(p.chunk, 8);
  EXPECT_TRUE(contains(p.text, "chunks of 8 measured fastest (500 ms vs 1000 ms unsplit)")) << p.text;
  EXPECT_EQ(clock.timed.size(), 10u);
  // Under LARGEST the description says nothing of FASTEST.
  ASSERT_OK(koila_set_chunking(KOILA_CHUNK_LARGEST));
  p = training_plan();
  EXPECT_EQ(p.chunk, 16);
  EXPECT_FALSE(contains(p.text, "FASTEST")) << p.text;
}

TEST_F(Fastest, EvaluationResultsEqualTheUnsplitOnes) {
  clock.seconds = {{16, 1.0}, {8, 0.85}, {4, 0.7}, {2, 0.6}, {1, 0.5}};  // each 10% or more faster
  Handle logits = m.features(x.get());
  const at::Tensor expected = largest_value(logits.get());
  std::vector<int64_t> chunks;
  for (int i = 0; i < 11; ++i) {
    chunks.push_back(plan_of(logits.get(), KOILA_MODE_FORWARD).chunk);
    const at::Tensor out = to_aten(logits.get());
    // (Absolute 1e-5: on a CPU with AVX-512, LibTorch 2.14's convolutions round one sample
    // otherwise than a batch of 16, in plain PyTorch too; this CNN's logits in chunks of 1 are
    // 1.7e-6 from the unsplit ones, with or without this session's changes.)
    EXPECT_TRUE(at::allclose(out, expected, 1e-5, 1e-5))
        << "chunks of " << chunks.back() << ": " << (out - expected).abs().max();
  }
  EXPECT_EQ(chunks, (std::vector<int64_t>{16, 8, 4, 2, 1, 16, 8, 4, 2, 1, 1}));
}

TEST_F(Fastest, ASmallerBudgetLeavesOutWhatNoLongerFits) {
  // Measured under the automatic budget: 8 is fastest, and none is 25% slower than it.
  clock.seconds = {{16, 1.0}, {8, 0.5}, {4, 0.55}, {2, 0.6}, {1, 0.62}};
  for (int i = 0; i < 10; ++i) step("measuring " + std::to_string(i + 1));
  ASSERT_EQ(clock.timed.size(), 10u);
  EXPECT_EQ(step("measured"), 8);
  // Under a budget that fits chunks of 4 but not 8, the fastest of those that fit, from
  // the times already measured: nothing is timed again.
  budget_for_chunk(loss.get(), koila::RunMode::Training, 4);
  const PlanInfo p = training_plan();
  EXPECT_EQ(p.chunk, 4) << p.text;
  EXPECT_TRUE(contains(p.text, "The unsplit run does not fit. KOILA_CHUNK_FASTEST: the largest chunk that fits kept"))
      << p.text;
  EXPECT_FALSE(contains(p.text, "unsplit 1000 ms")) << "only candidates that fit are listed: " << p.text;
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  EXPECT_EQ(step("budget for 4"), 4);
  EXPECT_LE(peak_cpu(), p.budget);
  EXPECT_EQ(clock.timed.size(), 10u);
  // Back to the automatic budget: 8 again.
  ASSERT_OK(koila_set_memory_budget("cpu", 0));
  EXPECT_EQ(step("automatic budget"), 8);
}

TEST_F(Fastest, ASmallerBudgetMeasuresTheCandidatesItLetsIn) {
  // Measuring stopped at 4 (0.9 >= 1.25 * 0.5): 2 and 1 were never timed.
  clock.seconds = {{16, 1.0}, {8, 0.5}, {4, 0.9}, {2, 0.3}, {1, 0.8}};
  for (int i = 0; i < 6; ++i) step("measuring " + std::to_string(i + 1));
  EXPECT_EQ(clock.timed, (std::vector<int64_t>{16, 8, 4, 16, 8, 4}));
  EXPECT_EQ(step("measured"), 8);
  // Chunks of 4 at most: 4 is measured, 2 and 1 are candidates now and get timed, in two
  // rounds; 2 wins.
  budget_for_chunk(loss.get(), koila::RunMode::Training, 4);
  std::vector<int64_t> used;
  for (int i = 0; i < 6; ++i) used.push_back(step("budget for 4, step " + std::to_string(i + 1)));
  EXPECT_EQ(used, (std::vector<int64_t>{2, 1, 2, 1, 2, 2}));
}

TEST_F(Fastest, ARunThatRunsOutOfMemoryRecordsNoTime) {
  // Planned chunks of 8 do not fit for real: the run retries with 4, and times nothing.
  clock.seconds = {{8, 0.5}, {4, 0.4}, {2, 0.45}, {1, 0.6}};
  const uint64_t e4 = koila::estimate_extra(loss->node, koila::RunMode::Training, 4);
  const uint64_t e8 = koila::estimate_extra(loss->node, koila::RunMode::Training, 8);
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + static_cast<uint64_t>(e8 * 1.15)));
  koila::testing::set_cpu_limit(current_cpu() + (e4 + e8) / 2);
  const PlanInfo planned = training_plan();
  ASSERT_EQ(planned.chunk, 8) << planned.text;
  ASSERT_TRUE(contains(planned.text, "measuring candidate 1 of 4 (chunks of 8), round 1 of 2")) << planned.text;
  koila::Plan used;
  ASSERT_NO_THROW(koila::run_backward(loss->node, &used));
  EXPECT_EQ(used.chunk, 4) << used.describe();
  EXPECT_FALSE(used.timed);
  EXPECT_TRUE(contains(used.describe(), "the planned chunk ran out of memory; retried with chunks of 4, not timed"))
      << used.describe();
  EXPECT_TRUE(clock.timed.empty());
  expect_close(grads_of(m), unsplit, "after the retry");
  // The peak seen for 8 rules it out: the candidates start at 4.
  const PlanInfo next = training_plan();
  EXPECT_EQ(next.chunk, 4) << next.text;
  EXPECT_TRUE(contains(next.text, "measuring candidate 1 of 3 (chunks of 4), round 1 of 2")) << next.text;
  koila::testing::set_cpu_limit(0);
}

TEST_F(Fastest, RunsOnSeveralThreadsShareTheTimings) {
  // Four threads evaluate graphs of the same structure: the timings of all their runs go
  // to one record, and once the candidates are measured every plan picks the same chunk.
  clock.seconds = {{16, 1.0}, {8, 0.85}, {4, 0.5}, {2, 0.7}, {1, 0.8}};
  Handle logits = m.features(x.get());
  const at::Tensor expected = largest_value(logits.get());
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      Handle own = m.features(x.get());  // a graph of its own, of the same structure
      for (int i = 0; i < 10; ++i)
        if (!at::allclose(to_aten(own.get()), expected, 1e-5, 1e-6)) ++wrong[t];
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
  EXPECT_GE(clock.timed.size(), 8u);  // 16, 8, 4 and 2 twice each at least (2 is 25% slower than 4)
  const PlanInfo p = plan_of(logits.get(), KOILA_MODE_FORWARD);
  EXPECT_EQ(p.chunk, 4) << p.text;
  EXPECT_TRUE(contains(p.text, "chunks of 4 measured fastest")) << p.text;
}

TEST_F(Fastest, NothingToMeasureWhenTheBatchCannotBeSplit) {
  // Softmax over the batch couples it: the whole batch runs, untimed.
  Handle logits = m.features(x.get());
  Handle sm = CALL(koila_softmax, logits.get(), 0);
  const PlanInfo p = plan_of(sm.get(), KOILA_MODE_FORWARD);
  EXPECT_EQ(p.chunk, batch);
  EXPECT_TRUE(contains(p.text, "KOILA_CHUNK_FASTEST: the batch cannot be split")) << p.text;
  EXPECT_TRUE(contains(p.text, "koila_softmax")) << p.text;
  to_aten(sm.get());
  EXPECT_TRUE(clock.timed.empty());
}

TEST_F(Fastest, PerChunkBatchStatisticsKeepTheLargestChunk) {
  // With each chunk's own statistics the chunk size changes the results: not measured.
  at::manual_seed(3);
  const at::Tensor gamma = at::ones({16}).set_requires_grad(true), beta = at::zeros({16}).set_requires_grad(true);
  const at::Tensor rm = at::zeros({16}), rv = at::ones({16});
  Handle g = koila_models::share(gamma), b = koila_models::share(beta);
  Handle mean = koila_models::share(rm), var = koila_models::share(rv);
  const at::Tensor hs = at::randn({batch, 16, 8});
  Handle h = koila_models::lazy(hs, 0);
  Handle bn = CALL(koila_batch_norm, h.get(), g.get(), b.get(), mean.get(), var.get(), 1, 0.1, 1e-5);
  Handle sq = CALL(koila_mul, bn.get(), bn.get());
  Handle l = CALL(koila_mean, sq.get(), nullptr, 0, 0);
  ASSERT_OK(koila_set_batch_stats(KOILA_BATCH_STATS_PER_CHUNK));
  const PlanInfo p = plan_of(l.get(), KOILA_MODE_TRAINING);
  EXPECT_EQ(p.chunk, batch) << p.text;
  EXPECT_TRUE(contains(p.text, "the largest chunk that fits is kept")) << p.text;
  ASSERT_OK(koila_backward(l.get()));
  EXPECT_TRUE(clock.timed.empty());
}

TEST(Chunking, UnknownValuesAreRefusedAndChangeNothing) {
  ChunkingGuard restore;
  ASSERT_OK(koila_set_chunking(KOILA_CHUNK_FASTEST));
  for (int bad : {7, -1, 2}) {
    koila_status* s = koila_set_chunking(static_cast<koila_chunking>(bad));
    EXPECT_EQ(koila_status_code(s), KOILA_ERROR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::strstr(koila_status_message(s), "koila_chunking"), nullptr) << koila_status_message(s);
    koila_status_free(s);
    EXPECT_EQ(koila::chunking(), koila::Chunking::Fastest);
  }
  ASSERT_OK(koila_set_chunking(KOILA_CHUNK_LARGEST));
  EXPECT_EQ(koila::chunking(), koila::Chunking::Largest);
}

}  // namespace
