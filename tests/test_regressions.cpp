// One test per crash or wrong status found by the fuzzers (tests/fuzz, docs/RELIABILITY.md),
// written as the shortest call sequence that showed it. Each names where it was found.
#include "helpers.h"

using namespace koila_test;

namespace {

koila_code code_of(koila_status* s) {
  const koila_code code = koila_status_code(s);
  koila_status_free(s);
  return code;
}

}  // namespace

// Issue 11, and the API fuzzer in every seed: a value computed from the batch after a
// reduction ended it has batch_dim -1, and reshape's batch rule indexed the shape with it
// (SIGSEGV). Batch rules now run only while an input still carries the batch.
TEST(Regression, ReshapeOfAValueReducedOverTheBatch) {
  Handle x = from_aten(at::arange(12, at::kFloat).reshape({4, 3}), 0);
  koila_tensor *s = nullptr, *r = nullptr;
  ASSERT_OK(koila_sum(&s, x.get(), nullptr, 0, 0));
  Handle sum(s);
  const int64_t shape[] = {1};
  ASSERT_OK(koila_reshape(&r, sum.get(), shape, 1));
  Handle reshaped(r);
  EXPECT_EQ(shape_of(reshaped.get()), std::vector<int64_t>{1});
  int64_t batch_dim = 0;
  ASSERT_OK(koila_tensor_batch_dim(reshaped.get(), &batch_dim));
  EXPECT_EQ(batch_dim, -1);
  double v = 0;
  ASSERT_OK(koila_tensor_item(reshaped.get(), &v));
  EXPECT_DOUBLE_EQ(v, 66.0);

  // Every shape op on such a value, also under a budget that splits the batch.
  const int64_t perm[] = {0};
  koila_tensor *p = nullptr, *u = nullptr, *f = nullptr;
  ASSERT_OK(koila_permute(&p, reshaped.get(), perm, 1));
  Handle permuted(p);
  ASSERT_OK(koila_unsqueeze(&u, permuted.get(), 0));
  Handle unsqueezed(u);
  ASSERT_OK(koila_flatten(&f, unsqueezed.get(), 0, -1));
  Handle flat(f);
  uint64_t current = 0;
  ASSERT_OK(koila_memory_stats("cpu", &current, nullptr));
  ASSERT_OK(koila_set_memory_budget("cpu", current + 200));
  koila_status* st = koila_tensor_item(flat.get(), &v);
  const koila_code code = code_of(st);
  ASSERT_OK(koila_set_memory_budget("cpu", 0));
  EXPECT_TRUE(code == KOILA_OK || code == KOILA_ERROR_OUT_OF_MEMORY) << code;
  if (code == KOILA_OK) {
    EXPECT_DOUBLE_EQ(v, 66.0);
  }
}

// The differential graph fuzzer (seed 2, graph 24): a backward through a sum and a
// transpose left an expanded view (every element at one address) as the input's .grad,
// and the next backward could not add into it ("more than one element of the written-to
// tensor refers to a single memory location"). .grad now always owns dense memory.
TEST(Regression, GradientOfASumIsStoredAsDenseMemory) {
  at::Tensor leaf = at::randn({3, 5, 4}, at::kDouble).requires_grad_(true);
  Handle x = koila_models::lazy(leaf, 1);
  koila_tensor *t = nullptr, *s = nullptr, *u = nullptr, *l = nullptr;
  ASSERT_OK(koila_transpose(&t, x.get(), 1, 0));
  Handle transposed(t);
  ASSERT_OK(koila_sub_scalar(&s, transposed.get(), 0.5));
  Handle shifted(s);
  ASSERT_OK(koila_transpose(&u, shifted.get(), 1, 0));
  Handle back(u);
  ASSERT_OK(koila_sum(&l, back.get(), nullptr, 0, 0));
  Handle loss(l);
  ASSERT_OK(koila_backward(loss.get()));
  ASSERT_OK(koila_backward(loss.get()));  // adds into the .grad the first call stored
  EXPECT_TRUE(at::equal(leaf.grad(), at::full({3, 5, 4}, 2.0, at::kDouble)));
  EXPECT_TRUE(leaf.grad().is_non_overlapping_and_dense());
}

// The API fuzzer (seed 8): conv1d of an input with 0 channels was inferred as [3, 3, 2],
// but LibTorch 1.13's CPU kernel returns [3, 0, 2] (KOILA_ERROR_INTERNAL eagerly, and a
// wrongly shaped chunk lazily). Such convolutions, and the other empty cases the kernels
// refuse, are now refused by the building call, lazy or not.
TEST(Regression, ConvolutionOfEmptyInputsIsRefusedWhenBuilt) {
  for (int64_t batch_dim : {kConcrete, int64_t{0}}) {
    SCOPED_TRACE(batch_dim == kConcrete ? "concrete" : "lazy");
    Handle x = from_aten(at::ones({3, 0, 2}), batch_dim);
    Handle w = from_aten(at::ones({3, 0, 1}));
    const int64_t stride[] = {3}, padding[] = {2}, dilation[] = {2};
    koila_tensor* out = nullptr;
    koila_status* s = koila_conv1d(&out, x.get(), w.get(), nullptr, stride, padding, dilation, 1);
    EXPECT_EQ(koila_status_code(s), KOILA_ERROR_SHAPE) << koila_status_message(s);
    EXPECT_NE(std::string(koila_status_message(s)).find("0 channels"), std::string::npos) << koila_status_message(s);
    koila_status_free(s);
    EXPECT_EQ(out, nullptr);

    Handle empty_spatial = from_aten(at::ones({3, 2, 0}), batch_dim);
    Handle w2 = from_aten(at::ones({3, 2, 1}));
    s = koila_conv1d(&out, empty_spatial.get(), w2.get(), nullptr, nullptr, padding, nullptr, 1);
    EXPECT_EQ(koila_status_code(s), KOILA_ERROR_SHAPE) << koila_status_message(s);
    koila_status_free(s);

    Handle no_outputs = from_aten(at::ones({0, 2, 1}));
    Handle x2 = from_aten(at::ones({3, 2, 4}), batch_dim);
    s = koila_conv1d(&out, x2.get(), no_outputs.get(), nullptr, nullptr, nullptr, nullptr, 1);
    EXPECT_EQ(koila_status_code(s), KOILA_ERROR_SHAPE) << koila_status_message(s);
    koila_status_free(s);
  }
}

// The API fuzzer (seed 1, call 22648): squeeze of the batch dim, a no-op for the whole
// batch of 6, removed the dim in chunks of one sample ("koila_squeeze produced [4] where
// [1, 4] was inferred"). Whether squeeze removes a dim is decided on the full shape.
TEST(Regression, SqueezeKeepsTheBatchDimInChunksOfOne) {
  at::Tensor data = at::randn({6, 4096});
  Handle x = from_aten(data, 0);
  koila_tensor *q = nullptr, *e = nullptr, *t = nullptr;
  ASSERT_OK(koila_squeeze(&q, x.get(), 0));
  Handle squeezed(q);
  ASSERT_OK(koila_exp(&e, squeezed.get()));
  Handle exps(e);
  EXPECT_EQ(shape_of(exps.get()), (std::vector<int64_t>{6, 4096}));
  ASSERT_OK(koila_sum(&t, exps.get(), nullptr, 0, 0));
  Handle total(t);
  koila_plan* plan = nullptr;
  ASSERT_OK(koila_plan_new(&plan, total.get(), KOILA_MODE_FORWARD));
  const uint64_t full = koila_plan_full_peak_bytes(plan);
  koila_plan_free(plan);
  uint64_t current = 0;
  ASSERT_OK(koila_memory_stats("cpu", &current, nullptr));
  ASSERT_OK(koila_set_memory_budget("cpu", current + (full - current) / 4));  // chunks of one sample
  koila_status* s = koila_plan_new(&plan, total.get(), KOILA_MODE_FORWARD);
  const std::string plan_message = koila_status_message(s);
  koila_status_free(s);
  const int64_t chunk = plan ? koila_plan_chunk_size(plan) : -1;
  koila_plan_free(plan);
  double value = 0;
  s = koila_tensor_item(total.get(), &value);
  const std::string message = koila_status_message(s);
  koila_status_free(s);
  ASSERT_OK(koila_set_memory_budget("cpu", 0));
  ASSERT_EQ(chunk, 1) << plan_message;
  ASSERT_TRUE(message.empty()) << message;
  const double expected = data.exp().sum().item<double>();
  EXPECT_NEAR(value, expected, 1e-5 * expected);  // float32 sums in another order
}

namespace {

// What is in use on the CPU now, and the estimated peak of an unsplit backward from loss.
std::pair<uint64_t, uint64_t> current_and_full_peak(const koila_tensor* loss) {
  koila_plan* plan = nullptr;
  koila_models::check(koila_plan_new(&plan, loss, KOILA_MODE_TRAINING), "koila_plan_new");
  const uint64_t full = koila_plan_full_peak_bytes(plan);
  koila_plan_free(plan);
  uint64_t current = 0;
  koila_models::check(koila_memory_stats("cpu", &current, nullptr), "koila_memory_stats");
  return {current, full};
}

// Sets the CPU budget so that `loss` trains within `fraction` of its unsplit extra bytes;
// returns the planned number of chunks.
int64_t force_chunks(const koila_tensor* loss, double fraction) {
  const auto [current, full] = current_and_full_peak(loss);
  const auto room = static_cast<uint64_t>(static_cast<double>(full - current) * fraction);
  koila_models::check(koila_set_memory_budget("cpu", current + room), "koila_set_memory_budget");
  koila_plan* plan = nullptr;
  koila_models::check(koila_plan_new(&plan, loss, KOILA_MODE_TRAINING), "koila_plan_new");
  const int64_t chunks = koila_plan_num_chunks(plan);
  koila_plan_free(plan);
  return chunks;
}

// Sets the smallest CPU budget under which `loss` still plans for training; returns its
// chunk size.
int64_t smallest_budget_chunk(const koila_tensor* loss) {
  const auto [current, full] = current_and_full_peak(loss);
  for (uint64_t budget = current + 1; budget < full; budget += 4) {
    koila_models::check(koila_set_memory_budget("cpu", budget), "koila_set_memory_budget");
    koila_plan* plan = nullptr;
    koila_status* s = koila_plan_new(&plan, loss, KOILA_MODE_TRAINING);
    if (s == nullptr) {
      const int64_t chunk = koila_plan_chunk_size(plan);
      koila_plan_free(plan);
      return chunk;
    }
    koila_status_free(s);
  }
  return -1;
}

struct AutomaticBudget {
  ~AutomaticBudget() { koila_status_free(koila_set_memory_budget("cpu", 0)); }
};

}  // namespace

// The differential graph fuzzer (kEagerParamExpressions): a lazy loss over p * p, computed
// eagerly from a parameter, could be backpropagated only once ("Trying to backward through
// the graph a second time"), and chunked not even once: the first chunk freed the eager
// history the others needed. A backward that walks eager history now retains it.
TEST(Regression, LazyLossOverAnEagerParameterExpressionBackpropagatesAgain) {
  AutomaticBudget restore;
  at::Tensor data = at::randn({64, 32}, at::kDouble);
  at::Tensor p = at::randn({32}, at::kDouble).requires_grad_(true);
  Handle x = koila_models::lazy(data, 0);
  Handle param = koila_models::share(p);
  koila_tensor *pp = nullptr, *h = nullptr, *t = nullptr, *l = nullptr;
  ASSERT_OK(koila_mul(&pp, param.get(), param.get()));  // concrete: computed at once
  Handle squared(pp);
  ASSERT_OK(koila_mul(&h, x.get(), squared.get()));
  Handle product(h);
  ASSERT_OK(koila_tanh(&t, product.get()));
  Handle activated(t);
  ASSERT_OK(koila_sum(&l, activated.get(), nullptr, 0, 0));
  Handle loss(l);
  const at::Tensor expected = [&] {
    at::Tensor q = p.detach().clone().requires_grad_(true);
    at::tanh(data * (q * q)).sum().backward();
    return q.grad();
  }();
  ASSERT_OK(koila_backward(loss.get()));
  ASSERT_OK(koila_backward(loss.get()));
  EXPECT_TRUE(at::allclose(p.grad(), 2 * expected, 1e-10, 1e-12));
  p.mutable_grad().zero_();
  ASSERT_GT(force_chunks(loss.get(), 0.3), 1);
  ASSERT_OK(koila_backward(loss.get()));
  ASSERT_OK(koila_backward(loss.get()));
  EXPECT_TRUE(at::allclose(p.grad(), 2 * expected, 1e-10, 1e-12));
}

// The differential graph fuzzer (kExpandedLeafGradients): in chunks of one sample, sum(x + p)
// gives p the expanded ones of sum's backward (stride 0); the accumulator kept it and added
// the next chunk into it in place, which LibTorch refuses. Chunk sums now start from memory
// of their own.
TEST(Regression, ChunkedGradientsThatArriveExpanded) {
  AutomaticBudget restore;
  // A batch of 4: with 3, chunks of 2 (then 1) need no more than chunks of 1 and are chosen.
  at::Tensor data = at::randn({4, 2}, at::kDouble);
  at::Tensor p = at::randn({1, 2}, at::kDouble).requires_grad_(true);
  Handle x = koila_models::lazy(data, 0);
  Handle param = koila_models::share(p);
  koila_tensor *s = nullptr, *l = nullptr;
  ASSERT_OK(koila_add(&s, x.get(), param.get()));
  Handle shifted(s);
  ASSERT_OK(koila_sum(&l, shifted.get(), nullptr, 0, 0));
  Handle loss(l);
  ASSERT_EQ(smallest_budget_chunk(loss.get()), 1);
  ASSERT_OK(koila_backward(loss.get()));
  EXPECT_TRUE(at::allclose(p.grad(), at::full({1, 2}, 4.0, at::kDouble)));
}

// The differential graph fuzzer (kFloat32Gelu): LibTorch 1.13's float32 gelu_backward on
// CPU ignores the strides of its incoming gradient, so a permute after a gelu gave zeros
// or garbage as gradients, eagerly too. koila's gelu hands it a contiguous gradient.
TEST(Regression, GeluFollowedByAPermuteHasRightGradients) {
  // gelu -> permute -> stack -> mean: the gradient reaching gelu is an expanded slice,
  // permuted (seed 1, graph 302). Plain LibTorch 1.13 gets it wrong too.
  at::Tensor data = at::randn({1, 18, 5}).requires_grad_(true);
  Handle x = koila_models::lazy(data, 2);
  const int64_t order[] = {2, 1, 0};
  koila_tensor *g = nullptr, *q = nullptr, *sn = nullptr, *st = nullptr, *m = nullptr, *l = nullptr;
  ASSERT_OK(koila_gelu(&g, x.get()));
  Handle activated(g);
  ASSERT_OK(koila_permute(&q, activated.get(), order, 3));
  Handle h(q);
  ASSERT_OK(koila_sin(&sn, h.get()));
  Handle sines(sn);
  koila_tensor* pair[] = {h.get(), sines.get()};
  ASSERT_OK(koila_stack(&st, pair, 2, 3));
  Handle stacked(st);
  ASSERT_OK(koila_mean(&m, stacked.get(), nullptr, 0, 0));
  Handle mean(m);
  ASSERT_OK(koila_mul(&l, mean.get(), mean.get()));
  Handle loss(l);
  ASSERT_OK(koila_backward(loss.get()));
  auto reference = [](const at::Tensor& t) {
    at::Tensor hh = at::gelu(t).permute({2, 1, 0});
    at::Tensor mm = at::stack({hh, hh.sin()}, 3).mean();
    return mm * mm;
  };
  at::Tensor x64 = data.detach().to(at::kDouble).requires_grad_(true);
  reference(x64).backward();
  EXPECT_TRUE(at::allclose(data.grad().to(at::kDouble), x64.grad(), 1e-4, 1e-6))
      << "koila " << data.grad() << "\nfloat64 reference " << x64.grad();
}

// Found by the API fuzzer (seed 1, call 22268): under KOILA_CHUNK_FASTEST a lazy batch of 0
// samples made the chosen chunk 0 and the plan divided by it (SIGFPE). An empty batch is
// one chunk of nothing, as under LARGEST.
TEST(Regression, FastestChunkingOfAnEmptyBatch) {
  ASSERT_OK(koila_set_chunking(KOILA_CHUNK_FASTEST));
  Handle x = from_aten(at::zeros({0, 4}), 0);
  Handle y = CALL(koila_exp, x.get());
  const PlanInfo plan = plan_of(y.get(), KOILA_MODE_FORWARD);
  EXPECT_EQ(plan.batch, 0);
  EXPECT_EQ(plan.chunks, 1);
  EXPECT_EQ(to_aten(y.get()).sizes(), at::IntArrayRef({0, 4}));
  ASSERT_OK(koila_set_chunking(KOILA_CHUNK_LARGEST));
}
