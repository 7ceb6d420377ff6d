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
  if (code == KOILA_OK) EXPECT_DOUBLE_EQ(v, 66.0);
}
