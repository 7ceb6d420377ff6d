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
  EXPECT_NEAR(value, data.exp().sum().item<double>(), 1e-3);
}
