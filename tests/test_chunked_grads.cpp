// Issue 13, item 1: a chunked backward adds each chunk's gradients into .grad as they come,
// without a second copy of all gradients, and still leaves every .grad as it was when it
// fails midway (absent, all zeros, or anything else, from a snapshot the plan counts).
#include <mutex>
#include <set>
#include <stdexcept>

#include "grad_helpers.h"
#include "plan/memo.h"
#include "run/analysis.h"
#include "run/chunked_run.h"
#include "run/executor.h"
#include "run/zeroed_grads.h"

using namespace koila_test;

namespace {

// Bit for bit, absent where absent.
void expect_same(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].defined(), want[i].defined()) << what << ": gradient " << i;
    if (want[i].defined()) {
      EXPECT_TRUE(at::equal(got[i], want[i])) << what << ": gradient " << i << " changed";
    }
  }
}

}  // namespace

// The target: the MLP at batch 9 with zeroed gradients (the usual zero_grad ->
// backward loop) splits under a budget below what it needs unsplit, stays within that
// budget, and its gradients equal PyTorch's.
TEST(ChunkedGrads, MnistMlpSplitsUnderABudgetBelowItsUnsplitNeed) {
  BudgetGuard restore;
  MnistMlp m(9);
  const auto expected = m.eager_grads();
  m.set_grads_zero();
  const SmallestSplit split(m.loss.get(), {8, 4, 2, 1});
  const uint64_t unsplit = split.unsplit, chunked = split.chunked;
  const int64_t chunk = split.chunk;
  // A budget below the unsplit run's need (its estimate with the planner's margin) that
  // fits the chunks.
  uint64_t current = 0, budget = 0;
  ASSERT_NO_FATAL_FAILURE(split.set_budget_below_unsplit(&current, &budget));
  const PlanInfo p = plan_of(m.loss.get(), KOILA_MODE_TRAINING);
  EXPECT_GT(p.chunks, 1) << p.text;
  const uint64_t extra = backward_extra(m.loss.get());
  EXPECT_LE(current + extra, budget) << p.text;
  expect_grads(m.grads(), expected, "chunked");
  // The unsplit run, measured: the chunks took less.
  m.set_grads_zero();
  ASSERT_OK(koila_set_memory_budget("cpu", 0));
  const uint64_t unsplit_measured = backward_extra(m.loss.get());
  EXPECT_LT(extra, unsplit_measured);
  std::printf(
      "[ mnist mlp, batch 9, zeroed .grad ] unsplit estimated %llu B, measured %llu B; chunks of %lld "
      "estimated %llu B, measured %llu B (%lld chunks); budget %llu B beyond use\n",
      static_cast<unsigned long long>(unsplit), static_cast<unsigned long long>(unsplit_measured),
      static_cast<long long>(chunk), static_cast<unsigned long long>(chunked), static_cast<unsigned long long>(extra),
      static_cast<long long>(p.chunks), static_cast<unsigned long long>(budget - current));
}

// Measured: a chunked backward holds at most the largest single gradient beyond what the
// unsplit one holds besides the gradients (zeroed .grad), or beyond what the unsplit one
// holds (absent .grad: both create them).
TEST(ChunkedGrads, ChunkedPeakHoldsAtMostTheLargestGradientMore) {
  MnistMlp m(64, 5);
  const auto expected = m.eager_grads();
  const koila::Analysis& a = koila::analysis_of(m.loss->node, koila::RunMode::Training);
  for (bool zeroed : {true, false}) {
    SCOPED_TRACE(zeroed ? "zeroed .grad" : "absent .grad");
    uint64_t extra[2] = {0, 0};
    for (int64_t chunk : {int64_t{-1}, int64_t{16}}) {
      zeroed ? m.set_grads_zero() : m.set_grads_absent();
      const uint64_t before = current_cpu();
      koila_status_free(koila_memory_reset_peak("cpu"));
      koila::ChunkRun run;
      run.chunk = chunk;
      koila::backward_chunks(m.loss->node, a, run);
      extra[chunk > 0] = peak_cpu() - before;
      expect_grads(m.grads(), expected, chunk > 0 ? "chunked" : "unsplit");
    }
    const uint64_t unsplit = extra[0], chunked = extra[1];
    const uint64_t bound = (zeroed ? unsplit - m.grad_bytes() : unsplit) + m.largest_grad_bytes();
    EXPECT_LE(chunked, bound) << "unsplit " << unsplit << ", gradients " << m.grad_bytes() << ", largest "
                              << m.largest_grad_bytes();
    std::printf("[ mnist mlp, batch 64, %s .grad ] unsplit %llu B, chunks of 16 %llu B, bound %llu B\n",
                zeroed ? "zeroed" : "absent", static_cast<unsigned long long>(unsplit),
                static_cast<unsigned long long>(chunked), static_cast<unsigned long long>(bound));
  }
}

// The simulation counts the .grad a backward creates (absent before) and the snapshot it
// keeps of gradients that are neither absent nor zero, and neither for zeroed ones.
TEST(ChunkedGrads, TheSimulationCountsCreatedGradientsAndSnapshots) {
  MnistMlp m(64, 6);
  auto simulated = [&] {
    koila::estimate_extra(m.loss->node, koila::RunMode::Training, 16);
    const koila::Analysis& a = koila::analysis_of(m.loss->node, koila::RunMode::Training);
    auto record = koila::graph_record(m.loss->node, a, koila::RunMode::Training);
    std::lock_guard<std::mutex> lock(record->mutex);
    return record->simulated.at({16, 2}).peak;
  };
  m.set_grads_absent();
  const uint64_t absent = simulated();
  m.set_grads_zero();
  const uint64_t zeroed = simulated();
  m.set_grads(m.eager_grads());
  const uint64_t held = simulated();
  EXPECT_GE(absent, zeroed + m.grad_bytes()) << "absent .grad are created";
  EXPECT_GE(held, zeroed + m.grad_bytes()) << "held .grad are snapshotted";
  EXPECT_LE(zeroed, m.largest_grad_bytes() + m.grad_bytes() / 4) << "zeroed .grad are added into";
}

// A failure midway (after the first chunks added into .grad) leaves every .grad exactly as
// it was: absent, zero, or held (restored from the snapshot, in the same tensor).
TEST(ChunkedGrads, AFailureMidwayLeavesEveryGradAsItWas) {
  MnistMlp m(9, 7);
  const auto expected = m.eager_grads();
  const koila::Analysis& a = koila::analysis_of(m.loss->node, koila::RunMode::Training);
  for (int state = 0; state < 3; ++state) {
    SCOPED_TRACE(m.set_grad_state(state, expected));
    const auto before = m.grads();
    std::vector<const void*> storages;
    for (const at::Tensor& p : m.params) storages.push_back(p.grad().defined() ? p.grad().data_ptr() : nullptr);
    // Chunks of 2: five chunks; the leaves are read once a chunk, the fourth chunk fails.
    int reads = 0;
    koila::ChunkRun run;
    run.chunk = 2;
    run.leaf = [&](const koila::Node& node) {
      if (++reads > 3 * 6 + 2) throw std::runtime_error("fails in the fourth chunk");
      return node.value;
    };
    EXPECT_THROW(koila::backward_chunks(m.loss->node, a, run), std::runtime_error);
    EXPECT_GT(reads, 3 * 6) << "the first chunks ran";
    expect_same(m.grads(), before, "after the failure");
    for (size_t i = 0; i < m.params.size(); ++i)
      EXPECT_TRUE(!storages[i] || m.params[i].grad().data_ptr() == storages[i]) << "gradient " << i << " replaced";
    // And the same call without the failure adds the gradients.
    run.leaf = nullptr;
    koila::backward_chunks(m.loss->node, a, run);
    std::vector<at::Tensor> want;
    for (const at::Tensor& g : expected) want.push_back(state == 2 ? g * 2 : g);
    expect_grads(m.grads(), want, "after the run");
  }
}

// Through the planner: when no chunk fits for real, every attempt (unsplit, then halved
// chunks down to one sample) fails, and .grad are as they were before the call. The limit
// is below the largest gradient: absent .grad must be made, held ones snapshotted. Zeroed
// .grad take the weight gradients inside the product (fused_grads.h), so that run fits
// under this limit; it runs out of memory under a limit below its activations.
TEST(ChunkedGrads, OutOfMemoryAfterEveryRetryLeavesGradsAsTheyWere) {
  BudgetGuard restore;
  MnistMlp m(64, 8);
  const auto expected = m.eager_grads();
  for (int state = 0; state < 3; ++state) {
    SCOPED_TRACE(m.set_grad_state(state, expected));
    const auto before = m.grads();
    koila::testing::set_estimate_scale(0.01);  // the plan believes it fits
    koila::testing::set_cpu_limit(current_cpu() + m.largest_grad_bytes() * 3 / 4);
    koila_status* s = koila_backward(m.loss.get());
    koila::testing::set_cpu_limit(0);
    koila::testing::set_estimate_scale(1.0);
    if (state == 1) {
      EXPECT_EQ(s, nullptr) << koila_status_message(s);
      koila_status_free(s);
      expect_grads(m.grads(), expected, "zeroed .grad, fused");
      m.set_grads_zero();
      koila::testing::set_estimate_scale(0.01);
      koila::testing::set_cpu_limit(current_cpu() + 1024);
      s = koila_backward(m.loss.get());
      koila::testing::set_cpu_limit(0);
      koila::testing::set_estimate_scale(1.0);
    }
    EXPECT_EQ(koila_status_code(s), KOILA_ERROR_OUT_OF_MEMORY) << koila_status_message(s);
    koila_status_free(s);
    expect_same(m.grads(), before, "after running out of memory");
  }
}

// Gradients add into what .grad holds: chunked into zeroed .grad, then planned again (held
// .grad), then chunked into held .grad (the snapshot path, a mean divided at the end), then
// a sum loss (nothing divided at the end).
TEST(ChunkedGrads, ExistingGradientsAccumulate) {
  BudgetGuard restore;
  MnistMlp m(24, 9);
  const auto expected = m.eager_grads();
  auto times = [&](double k) {
    std::vector<at::Tensor> g;
    for (const at::Tensor& e : expected) g.push_back(e * k);
    return g;
  };
  m.set_grads_zero();
  budget_for_chunk(m.loss.get(), koila::RunMode::Training, 8);
  ASSERT_GT(plan_of(m.loss.get(), KOILA_MODE_TRAINING).chunks, 1);
  ASSERT_OK(koila_backward(m.loss.get()));
  expect_grads(m.grads(), expected, "first");
  ASSERT_OK(koila_set_memory_budget("cpu", 0));  // held .grad: unsplit is cheaper than chunks
  ASSERT_OK(koila_backward(m.loss.get()));
  expect_grads(m.grads(), times(2), "second");
  // In chunks into held .grad (the snapshot path), with a mean divided at the end.
  const koila::Analysis& a = koila::analysis_of(m.loss->node, koila::RunMode::Training);
  koila::ChunkRun run;
  run.chunk = 8;
  koila::backward_chunks(m.loss->node, a, run);
  expect_grads(m.grads(), times(3), "third");
  // A sum loss: nothing divided at the end.
  Handle h = CALL(koila_linear, m.x.get(), m.handles[0].get(), m.handles[1].get());
  h = CALL(koila_relu, h.get());
  h = CALL(koila_linear, h.get(), m.handles[2].get(), m.handles[3].get());
  Handle sum = CALL(koila_cross_entropy, h.get(), m.y.get(), KOILA_REDUCTION_SUM);
  koila::backward_chunks(sum->node, koila::analysis_of(sum->node, koila::RunMode::Training), run);
  expect_grads(m.grads(), times(3 + 24), "sum");
}

namespace {

// Two heads on one lazy batch, each with its own cross entropy (mean) and parameters: the
// loss adds the two means, so each is a boundary of the chunked run. The second head's
// targets are ignored (-100) in the first two samples, so its mean averages over nothing in
// a first chunk of two and that chunk reaches only the first head's parameters.
struct TwoHeads {
  std::vector<at::Tensor> params;  // w1, b1, w2, b2
  std::vector<Handle> handles;
  at::Tensor xs, y1s, y2s;
  Handle x, y1, y2, loss;

  TwoHeads() {
    at::manual_seed(23);
    for (int head = 0; head < 2; ++head)
      for (const auto& shape : std::vector<std::vector<int64_t>>{{5, 12}, {5}}) {
        params.push_back((at::randn(shape) * 0.3).set_requires_grad(true));
        handles.push_back(koila_models::share(params.back()));
      }
    xs = at::randn({8, 12});
    y1s = at::randint(5, {8}, at::kLong);
    y2s = at::randint(5, {8}, at::kLong);
    y2s.narrow(0, 0, 2).fill_(-100);
    x = koila_models::lazy(xs, 0);
    y1 = koila_models::lazy(y1s, 0);
    y2 = koila_models::lazy(y2s, 0);
    Handle h1 = CALL(koila_linear, x.get(), handles[0].get(), handles[1].get());
    Handle h2 = CALL(koila_linear, x.get(), handles[2].get(), handles[3].get());
    Handle l1 = CALL(koila_cross_entropy, h1.get(), y1.get(), KOILA_REDUCTION_MEAN);
    Handle l2 = CALL(koila_cross_entropy, h2.get(), y2.get(), KOILA_REDUCTION_MEAN);
    loss = CALL(koila_add, l1.get(), l2.get());
  }
  std::vector<at::Tensor> eager_grads() const {
    (at::cross_entropy_loss(at::linear(xs, params[0], params[1]), y1s) +
     at::cross_entropy_loss(at::linear(xs, params[2], params[3]), y2s))
        .backward();
    std::vector<at::Tensor> g;
    for (const at::Tensor& p : params) {
      g.push_back(p.grad().clone());
      p.mutable_grad() = at::Tensor();
    }
    return g;
  }
  std::vector<at::Tensor> grads() const { return grad_copies(params); }
};

}  // namespace

// Parameters that only later chunks reach get their gradients like the others: added in
// (equal to PyTorch's), and put back when the run fails after they were reached.
TEST(ChunkedGrads, LeavesReachedOnlyByLaterChunksAreAddedAndRestored) {
  TwoHeads m;
  const auto expected = m.eager_grads();
  const koila::Analysis& a = koila::analysis_of(m.loss->node, koila::RunMode::Training);
  ASSERT_EQ(a.boundaries.size(), 2u);
  koila::ChunkRun run;
  run.chunk = 2;
  koila::backward_chunks(m.loss->node, a, run);
  expect_grads(m.grads(), expected, "chunks of 2");

  // Again from absent .grad, failing in the third chunk of the backward (after the second
  // reached the second head): every .grad is absent again.
  for (at::Tensor& p : m.params) p.mutable_grad() = at::Tensor();
  static bool fail_now = false;
  fail_now = false;
  struct FailAfterSecond : koila::RunObserver {
    void chunk_done(const char* what, int64_t done, int64_t) override {
      if (std::string(what) == "backward" && done == 2) fail_now = true;
    }
  } watcher;
  run.observer = &watcher;
  run.leaf = [](const koila::Node& node) {
    if (fail_now) throw std::runtime_error("fails in the third chunk");
    return node.value;
  };
  EXPECT_THROW(koila::backward_chunks(m.loss->node, a, run), std::runtime_error);
  EXPECT_TRUE(fail_now) << "the run did not reach its third chunk";
  const auto after = m.grads();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_FALSE(after[i].defined()) << "gradient " << i << " left behind";
}

// .grad zeroed through koila are known to be zero without being read, until anything
// writes them (an in-place op, a backward) or replaces them; other .grad are read.
TEST(ChunkedGrads, GradsZeroedThroughKoilaAreKnownZeroUntilWritten) {
  MnistMlp m(8, 31);
  const auto expected = m.eager_grads();
  auto starts = [&] {
    std::vector<koila::GradStart> s;
    for (const at::Tensor& p : m.params) s.push_back(koila::grad_start(p));
    return s;
  };
  auto zero_through_koila = [&] {
    for (const Handle& h : m.handles) ASSERT_OK(koila_tensor_zero_grad(h.get()));
  };
  const std::vector<koila::GradStart> all_zero(m.params.size(), koila::GradStart::Zero),
      all_held(m.params.size(), koila::GradStart::Held);
  m.set_grads(expected);
  EXPECT_EQ(starts(), all_held);
  zero_through_koila();
  for (const at::Tensor& p : m.params) EXPECT_TRUE(koila::known_zero(p.grad()));
  EXPECT_EQ(starts(), all_zero);
  // Written in place: read again, and found to hold gradients.
  m.params[0].grad().add_(1);
  EXPECT_FALSE(koila::known_zero(m.params[0].grad()));
  EXPECT_EQ(koila::grad_start(m.params[0]), koila::GradStart::Held);
  // A backward adds into every zeroed .grad (the result is PyTorch's).
  zero_through_koila();
  ASSERT_OK(koila_backward(m.loss.get()));
  for (const at::Tensor& p : m.params) EXPECT_FALSE(koila::known_zero(p.grad()));
  EXPECT_EQ(starts(), all_held);
  expect_grads(m.grads(), expected, "after the backward");
  // Replaced by another tensor of zeros: not the one koila zeroed, so read (and zero).
  zero_through_koila();
  m.set_grads_zero();
  for (const at::Tensor& p : m.params) EXPECT_FALSE(koila::known_zero(p.grad()));
  EXPECT_EQ(starts(), all_zero);
  // koila_optimizer_zero_grad notes them as well.
  m.set_grads(expected);
  std::vector<koila_tensor*> raw;
  for (const Handle& h : m.handles) raw.push_back(h.get());
  koila_optimizer* opt = nullptr;
  ASSERT_OK(koila_optimizer_sgd(&opt, raw.data(), raw.size(), 0.1, 0.0, 0.0));
  ASSERT_OK(koila_optimizer_zero_grad(opt));
  koila_optimizer_free(opt);
  for (const at::Tensor& p : m.params) EXPECT_TRUE(koila::known_zero(p.grad()));
  m.set_grads_absent();
}

// An unsplit backward finds the leaves it fills as its evaluation runs (EvalOptions::
// reached_leaves) instead of walking the autograd graph: the same leaves as the walk on the
// MLP, and where they differ (a parameter that reaches the loss only through argmax, whose
// gradient autograd never computes), that parameter's .grad is left exactly as it was,
// absent or held, while the others get PyTorch's gradients.
TEST(ChunkedGrads, LeavesFoundAsTheRunGoesMatchAutogradsOwn) {
  MnistMlp m(8, 41);
  {
    koila::Tensors reached;
    koila::EvalOptions options;
    options.grad = true;
    options.reached_leaves = &reached;
    const at::Tensor value = koila::evaluate(m.loss.get()->node, options);
    const koila::Tensors walked = koila::autograd_leaves({value});
    std::set<const c10::TensorImpl*> a, b;
    for (const at::Tensor& t : reached) a.insert(t.unsafeGetTensorImpl());
    for (const at::Tensor& t : walked) b.insert(t.unsafeGetTensorImpl());
    EXPECT_EQ(reached.size(), m.params.size());
    EXPECT_EQ(a, b);
  }

  at::manual_seed(5);
  const at::Tensor w1 = (at::randn({6, 5}) * 0.3).set_requires_grad(true);
  const at::Tensor w2 = (at::randn({6, 5}) * 0.3).set_requires_grad(true);
  const at::Tensor xs = at::randn({8, 5});
  const Handle h1 = koila_models::share(w1), h2 = koila_models::share(w2);
  auto lazy_loss = [&] {
    const Handle x = koila_models::lazy(xs, 0);
    const Handle logits = CALL(koila_linear, x.get(), h1.get(), nullptr);
    const Handle other = CALL(koila_linear, x.get(), h2.get(), nullptr);
    const Handle labels = CALL(koila_argmax, other.get(), 1, 0);
    return CALL(koila_cross_entropy, logits.get(), labels.get(), KOILA_REDUCTION_MEAN);
  };
  const at::Tensor labels = at::argmax(at::linear(xs, w2), 1);
  at::cross_entropy_loss(at::linear(xs, w1), labels).backward();
  const at::Tensor expected = w1.grad().clone();
  w1.mutable_grad() = at::Tensor();
  ASSERT_FALSE(w2.grad().defined()) << "autograd does not reach w2";

  {
    const Handle loss = lazy_loss();
    ASSERT_OK(koila_backward(loss.get()));
    expect_grads({w1.grad()}, {expected}, "w1");
    EXPECT_FALSE(w2.grad().defined()) << "an absent .grad that autograd does not reach stays absent";
  }
  const at::Tensor held = at::full({6, 5}, 0.25);
  w1.mutable_grad() = at::Tensor();
  w2.mutable_grad() = held.clone();
  {
    const Handle loss = lazy_loss();
    ASSERT_OK(koila_backward(loss.get()));
    expect_grads({w1.grad()}, {expected}, "w1, beside a held w2");
    expect_same({w2.grad()}, {held}, "a held .grad that autograd does not reach");
  }
  w1.mutable_grad() = at::Tensor();
  w2.mutable_grad() = at::Tensor();
}
