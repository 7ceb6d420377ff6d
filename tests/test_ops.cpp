// Every operator against eager LibTorch: inferred shape, dtype and batch dim (without
// evaluating), values, and the batch rule itself — evaluating a slice of the batch through
// koila must give the same slice of the eager result, and reductions over the batch must
// combine exactly across slices.
#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <iostream>
#include <set>
#include <string>

#include "graph/meta_kernels.h"
#include "helpers.h"
#include "op_tables.h"
#include "run/executor.h"

using namespace koila_test;
using koila::BatchReduction;

namespace {

using Build = std::function<koila_status*(koila_tensor**, const std::vector<koila_tensor*>&)>;
using Ref = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

struct Case {
  std::string label;
  std::vector<at::Tensor> inputs;
  std::vector<int64_t> batch_dims;  // per input: a dim, kConcrete, or KOILA_NO_BATCH
  int64_t batch_dim = -1;           // expected batch dim of the result
  bool couples = false;             // expected: the op mixes samples
  BatchReduction reduction = BatchReduction::None;
  bool stats_couples = false;  // expected: it mixes them only through batch statistics
};

at::Tensor rnd(at::IntArrayRef shape) { return at::randn(shape, at::kFloat); }
at::Tensor pos(at::IntArrayRef shape) { return at::rand(shape, at::kFloat) + 0.5; }
at::Tensor idx(at::IntArrayRef shape, int64_t high) { return at::randint(high, shape, at::kLong); }

void expect_close(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type()) << what;
  if (at::isFloatingType(expected.scalar_type())) {
    EXPECT_TRUE(at::allclose(actual.to(at::kDouble), expected.to(at::kDouble), 1e-4, 1e-5, true))
        << what << "\nactual:\n"
        << actual << "\nexpected:\n"
        << expected;
  } else {
    EXPECT_TRUE(at::equal(actual, expected)) << what << "\nactual:\n" << actual << "\nexpected:\n" << expected;
  }
}

// The batch size of the case (taken from its first batched input).
int64_t batch_size(const Case& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.batch_dims[i] != kConcrete && c.batch_dims[i] != KOILA_NO_BATCH) {
      const int64_t rank = c.inputs[i].dim();
      return c.inputs[i].size(c.batch_dims[i] < 0 ? c.batch_dims[i] + rank : c.batch_dims[i]);
    }
  return -1;
}

std::vector<at::Tensor> slice_inputs(const Case& c, int64_t start, int64_t length) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const int64_t b = c.batch_dims[i];
    const bool batched = b != kConcrete && b != KOILA_NO_BATCH;
    out.push_back(batched ? c.inputs[i].narrow(b, start, length) : c.inputs[i]);
  }
  return out;
}

at::Tensor eval_chunk(const koila_tensor* t, int64_t start, int64_t length) {
  koila::EvalOptions options;
  options.chunk_start = start;
  options.chunk_length = length;
  return koila::evaluate(t->node, options);
}

void check(const Build& build, const Ref& ref, const Case& c) {
  SCOPED_TRACE(c.label);
  ASSERT_EQ(c.inputs.size(), c.batch_dims.size());
  const at::Tensor expected = ref(c.inputs);

  // Lazy: metadata first (it must not need evaluation), then values.
  std::vector<Handle> handles;
  std::vector<koila_tensor*> raw;
  bool any_lazy = false;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    handles.push_back(from_aten(c.inputs[i], c.batch_dims[i]));
    raw.push_back(handles.back().get());
    any_lazy |= c.batch_dims[i] != kConcrete;
  }
  koila_tensor* out_raw = nullptr;
  ASSERT_OK(build(&out_raw, raw));
  Handle out(out_raw);
  int lazy = -1;
  ASSERT_OK(koila_tensor_is_lazy(out.get(), &lazy));
  EXPECT_EQ(lazy, any_lazy ? 1 : 0);
  EXPECT_EQ(shape_of(out.get()), expected.sizes().vec());
  koila_dtype dtype;
  ASSERT_OK(koila_tensor_dtype(out.get(), &dtype));
  EXPECT_EQ(scalar_type_of(dtype), expected.scalar_type());
  EXPECT_EQ(batch_dim_of(out.get()), c.batch_dim);
  EXPECT_EQ(!node(out.get()).couples.empty(), c.couples) << "couples: " << node(out.get()).couples;
  EXPECT_EQ(!node(out.get()).stats_couples.empty(), c.stats_couples) << "stats: " << node(out.get()).stats_couples;
  EXPECT_EQ(node(out.get()).reduction, c.reduction);
  expect_close(to_aten(out.get()), expected, "lazy value");

  // Eager: the same call on concrete tensors computes at once.
  std::vector<Handle> concrete;
  std::vector<koila_tensor*> concrete_raw;
  for (const at::Tensor& t : c.inputs) {
    concrete.push_back(from_aten(t));
    concrete_raw.push_back(concrete.back().get());
  }
  koila_tensor* eager_raw = nullptr;
  ASSERT_OK(build(&eager_raw, concrete_raw));
  Handle eager(eager_raw);
  ASSERT_OK(koila_tensor_is_lazy(eager.get(), &lazy));
  EXPECT_EQ(lazy, 0);
  expect_close(to_aten(eager.get()), expected, "eager value");

  // The batch rule against eager LibTorch on slices of the batch.
  const int64_t n = batch_size(c);
  if (n < 2 || c.couples || c.stats_couples) return;
  if (c.batch_dim >= 0) {
    const at::Tensor slice_ref = ref(slice_inputs(c, 1, n - 1));
    expect_close(slice_ref, expected.narrow(c.batch_dim, 1, n - 1), "eager on a slice of the batch");
    expect_close(eval_chunk(out.get(), 1, n - 1), expected.narrow(c.batch_dim, 1, n - 1), "koila on a chunk");
  } else if (c.reduction != BatchReduction::None) {
    const at::Tensor a = eval_chunk(out.get(), 0, 1), b = eval_chunk(out.get(), 1, n - 1);
    at::Tensor combined;
    switch (c.reduction) {
      case BatchReduction::Sum: combined = a + b; break;
      case BatchReduction::Mean: combined = (a * 1 + b * (n - 1)) / n; break;
      case BatchReduction::Max: combined = at::maximum(a, b); break;
      case BatchReduction::Min: combined = at::minimum(a, b); break;
      case BatchReduction::None: break;
    }
    expect_close(combined, expected, "chunks combined");
  }
}

const int64_t NB = KOILA_NO_BATCH;
const int64_t C = kConcrete;

Build binary(koila_status* (*fn)(koila_tensor**, const koila_tensor*, const koila_tensor*)) {
  return [fn](koila_tensor** out, const std::vector<koila_tensor*>& in) { return fn(out, in[0], in[1]); };
}

Build unary(koila_status* (*fn)(koila_tensor**, const koila_tensor*)) {
  return [fn](koila_tensor** out, const std::vector<koila_tensor*>& in) { return fn(out, in[0]); };
}

// The cases every broadcasting binary op runs.
std::vector<Case> binary_cases(bool positive) {
  auto gen = positive ? pos : rnd;
  return {
      {"same shape, batch 0", {gen({4, 3}), gen({4, 3})}, {0, 0}, 0},
      {"broadcast against an unbatched parameter", {gen({4, 3}), gen({3})}, {0, C}, 0},
      {"parameter first", {gen({3}), gen({4, 3})}, {C, 0}, 0},
      {"negative batch dim", {gen({2, 5, 3}), gen({1, 3})}, {-2, C}, 1},
      {"rank grows on the left", {gen({5, 1}), gen({2, 1, 3})}, {0, C}, 1},
      {"unbatched operand aligned with the batch dim", {gen({2, 5, 3}), gen({5, 1})}, {-2, C}, -1, true},
      {"unbatched operand spans the batch", {gen({4, 3}), gen({4, 3})}, {0, C}, -1, true},
      {"batches in different dims", {gen({4, 4}), gen({4, 4})}, {0, 1}, -1, true},
      {"lazy without batch", {gen({4, 3}), gen({4, 3})}, {NB, C}, -1},
      {"scalar operand", {gen({4, 3}), gen({})}, {0, C}, 0},
  };
}

}  // namespace

TEST(Ops, ElementwiseBinary) {
  at::manual_seed(0);
  struct Op {
    const char* name;
    koila_status* (*fn)(koila_tensor**, const koila_tensor*, const koila_tensor*);
    Ref ref;
    bool positive;
  };
#define ROW(NAME, REF, POSITIVE)            \
  {#NAME, koila_##NAME,                     \
   [](const auto& v) {                      \
     const at::Tensor &a = v[0], &b = v[1]; \
     return REF;                            \
   },                                       \
   POSITIVE},
  const std::vector<Op> ops = {KOILA_BINARY_OPS(ROW)};
#undef ROW
  for (const Op& op : ops) {
    SCOPED_TRACE(op.name);
    for (const Case& c : binary_cases(op.positive)) check(binary(op.fn), op.ref, c);
  }
}

TEST(Ops, DtypePromotion) {
  const at::Tensor i = at::arange(12, at::kLong).reshape({4, 3}) + 1;
  const at::Tensor f = rnd({3});
  const at::Tensor d = at::randn({4, 3}, at::kDouble);
  const at::Tensor b = at::rand({4, 3}) > 0.5;
  check(binary(koila_add), [](const auto& v) { return at::add(v[0], v[1]); }, {"int + float", {i, f}, {0, C}, 0});
  check(binary(koila_div), [](const auto& v) { return at::div(v[0], v[1]); }, {"int / int", {i, i}, {0, 0}, 0});
  check(binary(koila_mul), [](const auto& v) { return at::mul(v[0], v[1]); }, {"float * double", {f, d}, {C, 0}, 0});
  check(binary(koila_add), [](const auto& v) { return at::add(v[0], v[1]); }, {"bool + int", {b, i}, {0, 0}, 0});
  check(binary(koila_eq), [](const auto& v) { return at::eq(v[0], v[1]); }, {"int == float", {i, f}, {0, C}, 0});
  check(unary(koila_exp), [](const auto& v) { return at::exp(v[0]); }, {"exp of int", {i}, {0}, 0});
}

TEST(Ops, WithScalar) {
  struct Op {
    const char* name;
    koila_status* (*fn)(koila_tensor**, const koila_tensor*, double);
    at::Tensor (*ref)(const at::Tensor&, double);
  };
#define ROW(NAME, REF) {#NAME, koila_##NAME, [](const at::Tensor& x, double s) { return REF; }},
  const std::vector<Op> ops = {KOILA_SCALAR_OPS(ROW)};
#undef ROW
  const at::Tensor ints = at::arange(6, at::kLong).reshape({3, 2});
  for (const Op& op : ops) {
    SCOPED_TRACE(op.name);
    for (double s : {2.0, 0.5}) {
      auto build = [&](koila_tensor** out, const std::vector<koila_tensor*>& in) { return op.fn(out, in[0], s); };
      auto ref = [&](const std::vector<at::Tensor>& v) { return op.ref(v[0], s); };
      check(build, ref, {"batch 0", {pos({4, 3})}, {0}, 0});
      check(build, ref, {"batch -1", {pos({4, 3})}, {-1}, 1});
      check(build, ref, {"integer tensor", {ints}, {0}, 0});
    }
  }
}

TEST(Ops, Unary) {
  struct Op {
    const char* name;
    koila_status* (*fn)(koila_tensor**, const koila_tensor*);
    Ref ref;
    bool positive;
  };
#define ROW(NAME, REF, POSITIVE) \
  {#NAME, koila_##NAME,          \
   [](const auto& v) {           \
     const at::Tensor& x = v[0]; \
     return REF;                 \
   },                            \
   POSITIVE},
  const std::vector<Op> ops = {KOILA_UNARY_OPS(ROW)};
#undef ROW
  for (const Op& op : ops) {
    SCOPED_TRACE(op.name);
    auto gen = op.positive ? pos : rnd;
    check(unary(op.fn), op.ref, {"batch 0", {gen({4, 3})}, {0}, 0});
    check(unary(op.fn), op.ref, {"batch -1 of rank 3", {gen({2, 3, 5})}, {-1}, 2});
    check(unary(op.fn), op.ref, {"no batch", {gen({3})}, {NB}, -1});
    check(unary(op.fn), op.ref, {"double", {gen({4, 2}).to(at::kDouble)}, {1}, 1});
  }
}

TEST(Ops, ParameterizedActivations) {
  for (double slope : {0.01, 0.3}) {
    check([slope](koila_tensor** o, const auto& in) { return koila_leaky_relu(o, in[0], slope); },
          [slope](const auto& v) { return at::leaky_relu(v[0], slope); }, {"leaky_relu", {rnd({4, 3})}, {0}, 0});
  }
  for (auto [lo, hi] : {std::pair{-0.5, 0.5}, std::pair{0.2, 0.1}}) {
    check([lo = lo, hi = hi](koila_tensor** o, const auto& in) { return koila_clamp(o, in[0], lo, hi); },
          [lo = lo, hi = hi](const auto& v) { return at::clamp(v[0], lo, hi); }, {"clamp", {rnd({4, 3})}, {1}, 1});
  }
}

TEST(Ops, Softmax) {
  for (auto fn : {koila_softmax, koila_log_softmax}) {
    const bool log = fn == koila_log_softmax;
    for (int64_t dim : {1, -1, 0}) {
      auto build = [fn, dim](koila_tensor** o, const auto& in) { return fn(o, in[0], dim); };
      auto ref = [log, dim](const auto& v) { return log ? at::log_softmax(v[0], dim) : at::softmax(v[0], dim); };
      const bool over_batch = dim == 0;
      check(build, ref, {"softmax dim " + std::to_string(dim), {rnd({4, 3, 5})}, {0}, over_batch ? -1 : 0, over_batch});
    }
    auto build = [fn](koila_tensor** o, const auto& in) { return fn(o, in[0], 0); };
    auto ref = [log](const auto& v) { return log ? at::log_softmax(v[0], 0) : at::softmax(v[0], 0); };
    check(build, ref, {"batch in the last dim", {rnd({3, 4})}, {-1}, 1});
  }
}

TEST(Ops, Dropout) {
  const at::Tensor x = pos({64, 8});
  for (double p : {0.0, 1.0, 0.5}) {
    Handle in = from_aten(x, 0);
    for (int train : {0, 1}) {
      koila_tensor* out = nullptr;
      ASSERT_OK(koila_dropout(&out, in.get(), p, train));
      Handle h(out);
      EXPECT_EQ(shape_of(h.get()), x.sizes().vec());
      EXPECT_EQ(batch_dim_of(h.get()), 0);
      const at::Tensor v = to_aten(h.get());
      if (!train || p == 0.0) {
        expect_close(v, x, "identity");
      } else if (p == 1.0) {
        expect_close(v, at::zeros_like(x), "all dropped");
      } else {
        // Every element is either dropped or scaled by 1 / (1 - p), and some of each.
        const at::Tensor kept = v != 0;
        EXPECT_TRUE(at::allclose(v.masked_select(kept), (x * 2).masked_select(kept)));
        const double fraction = kept.to(at::kFloat).mean().item<double>();
        EXPECT_GT(fraction, 0.3);
        EXPECT_LT(fraction, 0.7);
      }
    }
  }
}

TEST(Ops, Matmul) {
  auto ref = [](const auto& v) { return at::matmul(v[0], v[1]); };
  const Build mm = binary(koila_matmul);
  check(mm, ref, {"batch rows @ weight", {rnd({4, 3}), rnd({3, 5})}, {0, C}, 0});
  check(mm, ref, {"batched 3-D @ 2-D", {rnd({4, 2, 3}), rnd({3, 5})}, {0, C}, 0});
  check(mm, ref, {"batched 3-D @ 3-D", {rnd({4, 2, 3}), rnd({4, 3, 5})}, {0, 0}, 0});
  check(mm, ref, {"3-D @ broadcast 3-D weight", {rnd({4, 2, 3}), rnd({1, 3, 5})}, {0, C}, 0});
  check(mm, ref, {"matrix @ vector", {rnd({4, 3}), rnd({3})}, {0, C}, 0});
  check(mm, ref, {"vector @ batched columns", {rnd({3}), rnd({3, 4})}, {C, 1}, 0});
  check(mm, ref, {"weight @ batch in columns", {rnd({5, 3}), rnd({3, 4})}, {C, -1}, 1});
  check(mm, ref, {"batch in rows of 3-D", {rnd({2, 4, 3}), rnd({3, 5})}, {1, C}, 1});
  check(mm, ref, {"contracting the batch", {rnd({3, 4}), rnd({4, 5})}, {1, C}, -1, true});
  check(mm, ref, {"contracting the batch of b", {rnd({5, 4}), rnd({4, 3})}, {C, 0}, -1, true});
  check(mm, ref, {"rows and columns both batched", {rnd({4, 4}), rnd({4, 4})}, {0, 1}, -1, true});
  check(mm, ref, {"unbatched 3-D operand spans the batch", {rnd({4, 2, 3}), rnd({4, 3, 5})}, {0, C}, -1, true});
}

TEST(Ops, Linear) {
  auto build = [](koila_tensor** o, const auto& in) {
    return koila_linear(o, in[0], in[1], in.size() > 2 ? in[2] : nullptr);
  };
  auto ref = [](const auto& v) { return at::linear(v[0], v[1], v.size() > 2 ? v[2] : at::Tensor()); };
  check(build, ref, {"with bias", {rnd({4, 3}), rnd({5, 3}), rnd({5})}, {0, C, C}, 0});
  check(build, ref, {"without bias", {rnd({4, 3}), rnd({5, 3})}, {0, C}, 0});
  check(build, ref, {"3-D input, batch 1", {rnd({2, 4, 3}), rnd({5, 3}), rnd({5})}, {1, C, C}, 1});
  check(build, ref, {"batch in the features", {rnd({3, 4}), rnd({5, 4})}, {-1, C}, -1, true});
  // The usual arguments are inferred without meta tensors; the rest (a bias that broadcasts)
  // goes through LibTorch on meta tensors. Both must agree with eager LibTorch.
  check(build, ref, {"vector input", {rnd({3}), rnd({5, 3}), rnd({5})}, {NB, C, C}, -1});
  check(build, ref, {"double", {rnd({4, 3}).to(at::kDouble), rnd({5, 3}).to(at::kDouble)}, {0, C}, 0});
  check(build, ref, {"bias of one broadcasts", {rnd({4, 3}), rnd({5, 3}), rnd({1})}, {0, C, C}, 0});
  check(build, ref, {"scalar bias broadcasts", {rnd({4, 3}), rnd({5, 3}), rnd({})}, {0, C, C}, 0});
}

TEST(Ops, Conv) {
  auto conv2d = [](const int64_t* s, const int64_t* p, const int64_t* d, int64_t g) {
    return [=](koila_tensor** o, const std::vector<koila_tensor*>& in) {
      return koila_conv2d(o, in[0], in[1], in.size() > 2 ? in[2] : nullptr, s, p, d, g);
    };
  };
  const int64_t s2[] = {2, 1}, p1[] = {1, 2}, d2[] = {2, 1};
  check(conv2d(nullptr, nullptr, nullptr, 1), [](const auto& v) { return at::conv2d(v[0], v[1], v[2]); },
        {"defaults", {rnd({4, 3, 9, 8}), rnd({6, 3, 3, 3}), rnd({6})}, {0, C, C}, 0});
  check(conv2d(s2, p1, d2, 1),
        [](const auto& v) {
          return at::conv2d(v[0], v[1], {}, {2, 1}, {1, 2}, {2, 1});
        },
        {"stride, padding, dilation, no bias", {rnd({4, 3, 9, 8}), rnd({6, 3, 3, 2})}, {0, C}, 0});
  check(conv2d(nullptr, p1, nullptr, 3),
        [](const auto& v) {
          return at::conv2d(v[0], v[1], v[2], 1, {1, 2}, 1, 3);
        },
        {"groups", {rnd({2, 6, 5, 5}), rnd({9, 2, 3, 3}), rnd({9})}, {0, C, C}, 0});
  check(conv2d(nullptr, nullptr, nullptr, 1), [](const auto& v) { return at::conv2d(v[0], v[1], v[2]); },
        {"unbatched input", {rnd({3, 7, 7}), rnd({4, 3, 3, 3}), rnd({4})}, {NB, C, C}, -1});
  check(conv2d(nullptr, nullptr, nullptr, 1), [](const auto& v) { return at::conv2d(v[0], v[1], v[2]); },
        {"batch in the channels", {rnd({2, 3, 7, 7}), rnd({4, 3, 3, 3}), rnd({4})}, {1, C, C}, -1, true});
  const int64_t s1[] = {2}, pd1[] = {1}, dl1[] = {1};
  check([&](koila_tensor** o, const auto& in) { return koila_conv1d(o, in[0], in[1], in[2], s1, pd1, dl1, 1); },
        [](const auto& v) { return at::conv1d(v[0], v[1], v[2], 2, 1); },
        {"conv1d", {rnd({4, 3, 10}), rnd({5, 3, 3}), rnd({5})}, {0, C, C}, 0});
  check([](koila_tensor** o,
           const auto& in) { return koila_conv1d(o, in[0], in[1], nullptr, nullptr, nullptr, nullptr, 1); },
        [](const auto& v) { return at::conv1d(v[0], v[1]); },
        {"conv1d defaults", {rnd({4, 3, 10}), rnd({5, 3, 3})}, {0, C}, 0});
}

TEST(Ops, Pooling) {
  const int64_t k2[] = {2, 2}, k3[] = {3, 2}, s1[] = {1, 2}, p1[] = {1, 0};
  auto maxp = [](const int64_t* k, const int64_t* s, const int64_t* p, int ceil) {
    return [=](koila_tensor** o, const std::vector<koila_tensor*>& in) {
      return koila_max_pool2d(o, in[0], k, s, p, ceil);
    };
  };
  auto avgp = [](const int64_t* k, const int64_t* s, const int64_t* p, int ceil) {
    return [=](koila_tensor** o, const std::vector<koila_tensor*>& in) {
      return koila_avg_pool2d(o, in[0], k, s, p, ceil);
    };
  };
  check(maxp(k2, nullptr, nullptr, 0),
        [](const auto& v) {
          return at::max_pool2d(v[0], {2, 2});
        },
        {"max defaults", {rnd({4, 3, 8, 8})}, {0}, 0});
  check(maxp(k3, s1, p1, 1),
        [](const auto& v) {
          return at::max_pool2d(v[0], {3, 2}, {1, 2}, {1, 0}, 1, true);
        },
        {"max stride padding ceil", {rnd({4, 3, 7, 9})}, {0}, 0});
  check(maxp(k2, nullptr, nullptr, 0),
        [](const auto& v) {
          return at::max_pool2d(v[0], {2, 2});
        },
        {"max unbatched [C, H, W] with batch in C", {rnd({3, 8, 8})}, {0}, 0});
  check(maxp(k2, nullptr, nullptr, 0),
        [](const auto& v) {
          return at::max_pool2d(v[0], {2, 2});
        },
        {"max pooling over the batch", {rnd({3, 8, 8})}, {1}, -1, true});
  check(avgp(k2, nullptr, nullptr, 0),
        [](const auto& v) {
          return at::avg_pool2d(v[0], {2, 2});
        },
        {"avg defaults", {rnd({4, 3, 8, 8})}, {0}, 0});
  check(avgp(k3, s1, p1, 1),
        [](const auto& v) {
          return at::avg_pool2d(v[0], {3, 2}, {1, 2}, {1, 0}, true);
        },
        {"avg stride padding ceil", {rnd({4, 3, 7, 9})}, {1}, 1});
  for (auto size : {std::vector<int64_t>{1, 1}, std::vector<int64_t>{3, 2}}) {
    check([size](koila_tensor** o, const auto& in) { return koila_adaptive_avg_pool2d(o, in[0], size.data()); },
          [size](const auto& v) { return at::adaptive_avg_pool2d(v[0], size); },
          {"adaptive " + std::to_string(size[0]), {rnd({4, 3, 7, 8})}, {0}, 0});
  }
  // Nearest upsampling, against LibTorch's F.interpolate(mode="nearest") with whole factors; the
  // batch may be in N or (unbatched) in C, not in a spatial dim.
  for (auto scale : {std::vector<int64_t>{2, 2}, std::vector<int64_t>{1, 3}}) {
    check([scale](koila_tensor** o, const auto& in) { return koila_upsample_nearest2d(o, in[0], scale.data()); },
          [scale](const auto& v) {
            const int64_t h = v[0].size(-2), w = v[0].size(-1);
            return at::upsample_nearest2d(v[0].dim() == 3 ? v[0].unsqueeze(0) : v[0], {h * scale[0], w * scale[1]})
                .view(v[0].dim() == 3 ? std::vector<int64_t>{v[0].size(0), h * scale[0], w * scale[1]}
                                      : std::vector<int64_t>{v[0].size(0), v[0].size(1), h * scale[0], w * scale[1]});
          },
          {"upsample " + std::to_string(scale[0]) + "x" + std::to_string(scale[1]), {rnd({4, 3, 5, 6})}, {0}, 0});
  }
  const int64_t twice[2] = {2, 2};
  check([&twice](koila_tensor** o, const auto& in) { return koila_upsample_nearest2d(o, in[0], twice); },
        [](const auto& v) {
          return at::upsample_nearest2d(v[0].unsqueeze(0), {10, 12}).squeeze(0);
        },
        {"upsample unbatched [C, H, W] with batch in C", {rnd({3, 5, 6})}, {0}, 0});
  check([&twice](koila_tensor** o, const auto& in) { return koila_upsample_nearest2d(o, in[0], twice); },
        [](const auto& v) {
          return at::upsample_nearest2d(v[0].unsqueeze(0), {10, 12}).squeeze(0);
        },
        {"upsampling over the batch", {rnd({3, 5, 6})}, {1}, -1, true});
}

TEST(Ops, BatchNorm) {
  const at::Tensor x = rnd({4, 3, 5, 5}), w = rnd({3}), b = rnd({3}), mean = rnd({3}), var = pos({3});
  auto build = [](int training) {
    return [training](koila_tensor** o, const std::vector<koila_tensor*>& in) {
      return koila_batch_norm(o, in[0], in[1], in[2], in[3], in[4], training, 0.1, 1e-5);
    };
  };
  // Eager references get their own copies of the running statistics, which training updates.
  auto ref = [](bool training) {
    return [training](const std::vector<at::Tensor>& v) {
      return at::batch_norm(v[0], v[1], v[2], v[3].clone(), v[4].clone(), training, 0.1, 1e-5, false);
    };
  };
  check(build(0), ref(false), {"evaluation", {x, w, b, mean, var}, {0, C, C, C, C}, 0});
  check(build(0), ref(false), {"evaluation, batch in H", {x, w, b, mean, var}, {2, C, C, C, C}, 2});
  check(build(0), ref(false), {"evaluation, batch in channels", {x, w, b, mean, var}, {1, C, C, C, C}, -1, true});
  // Training couples the batch through its statistics only (koila_set_batch_stats decides).
  check(build(1), ref(true), {"training", {x, w, b, mean, var}, {0, C, C, C, C}, 0, false, BatchReduction::None, true});
  check(build(1), ref(true), {"training, batch in channels", {x, w, b, mean, var}, {1, C, C, C, C}, -1, true});
  check([](koila_tensor** o,
           const auto& in) { return koila_batch_norm(o, in[0], nullptr, nullptr, nullptr, nullptr, 1, 0.1, 1e-5); },
        [](const auto& v) { return at::batch_norm(v[0], {}, {}, {}, {}, true, 0.1, 1e-5, false); },
        {"training without parameters, 2-D", {rnd({6, 3})}, {0}, 0, false, BatchReduction::None, true});
}

TEST(Ops, LayerNorm) {
  const int64_t last[] = {5}, last2[] = {3, 5};
  check([&](koila_tensor** o, const auto& in) { return koila_layer_norm(o, in[0], last, 1, in[1], in[2], 1e-5); },
        [](const auto& v) { return at::layer_norm(v[0], {5}, v[1], v[2], 1e-5); },
        {"last dim", {rnd({4, 3, 5}), rnd({5}), rnd({5})}, {0, C, C}, 0});
  check([&](koila_tensor** o, const auto& in) { return koila_layer_norm(o, in[0], last2, 2, nullptr, nullptr, 1e-3); },
        [](const auto& v) {
          return at::layer_norm(v[0], {3, 5}, {}, {}, 1e-3);
        },
        {"last two dims, no affine", {rnd({4, 3, 5})}, {0}, 0});
  check([&](koila_tensor** o, const auto& in) { return koila_layer_norm(o, in[0], last2, 2, nullptr, nullptr, 1e-5); },
        [](const auto& v) {
          return at::layer_norm(v[0], {3, 5}, {}, {}, 1e-5);
        },
        {"normalizing over the batch", {rnd({4, 3, 5})}, {1}, -1, true});
}

TEST(Ops, Embedding) {
  auto build = binary(koila_embedding);
  auto ref = [](const auto& v) { return at::embedding(v[0], v[1]); };
  check(build, ref, {"indices [B]", {rnd({10, 4}), idx({6}, 10)}, {C, 0}, 0});
  check(build, ref, {"indices [T, B]", {rnd({10, 4}), idx({5, 6}, 10)}, {C, 1}, 1});
  check(build, ref, {"int32 indices", {rnd({10, 4}), idx({3, 2}, 10).to(at::kInt)}, {C, 0}, 0});
  check(build, ref, {"batched weight", {rnd({10, 4}), idx({6}, 10)}, {0, C}, -1, true});
}

TEST(Ops, Reductions) {
  struct Op {
    const char* name;
    koila_status* (*fn)(koila_tensor**, const koila_tensor*, const int64_t*, size_t, int);
    at::Tensor (*ref)(const at::Tensor&, at::IntArrayRef, bool);
    BatchReduction reduction;
  };
  const std::vector<Op> ops = {
      {"sum", koila_sum, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return at::sum(t, d, k); },
       BatchReduction::Sum},
      {"mean", koila_mean, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return at::mean(t, d, k); },
       BatchReduction::Mean},
      {"amax", koila_amax, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return at::amax(t, d, k); },
       BatchReduction::Max},
      {"amin", koila_amin, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return at::amin(t, d, k); },
       BatchReduction::Min},
  };
  for (const Op& op : ops) {
    SCOPED_TRACE(op.name);
    struct Dims {
      std::vector<int64_t> dims;
      int keepdim;
      int64_t batch_dim;  // expected, for a [4, 3, 5] input batched at 1
    };
    const std::vector<Dims> table = {{{}, 0, -1},    {{0}, 0, 0},  {{-1}, 1, 1},
                                     {{0, 2}, 1, 1}, {{1}, 0, -1}, {{-2, 0}, 1, -1}};
    for (const Dims& d : table) {
      auto build = [&](koila_tensor** o, const auto& in) {
        return op.fn(o, in[0], d.dims.empty() ? nullptr : d.dims.data(), d.dims.size(), d.keepdim);
      };
      auto ref = [&](const auto& v) {
        if (!d.dims.empty()) return op.ref(v[0], d.dims, d.keepdim);
        std::vector<int64_t> all{0, 1, 2};
        return op.ref(v[0], all, d.keepdim);
      };
      const BatchReduction expected = d.batch_dim < 0 ? op.reduction : BatchReduction::None;
      check(build, ref,
            {"dims " + c10::str(d.dims) + " keepdim " + std::to_string(d.keepdim),
             {rnd({4, 3, 5})},
             {1},
             d.batch_dim,
             false,
             expected});
    }
  }
  check([](koila_tensor** o, const auto& in) { return koila_sum(o, in[0], nullptr, 0, 0); },
        [](const auto& v) { return at::sum(v[0]); },
        {"sum of ints", {idx({4, 3}, 9)}, {0}, -1, false, BatchReduction::Sum});
}

TEST(Ops, Argmax) {
  for (int keepdim : {0, 1}) {
    for (int64_t dim : {1, -1, 0}) {
      auto build = [=](koila_tensor** o, const auto& in) { return koila_argmax(o, in[0], dim, keepdim); };
      auto ref = [=](const auto& v) { return at::argmax(v[0], dim, keepdim); };
      const bool over_batch = dim == 0;
      check(build, ref, {"dim " + std::to_string(dim), {rnd({4, 3, 5})}, {0}, over_batch ? -1 : 0, over_batch});
    }
  }
  check([](koila_tensor** o, const auto& in) { return koila_argmax(o, in[0], 0, 0); },
        [](const auto& v) { return at::argmax(v[0], 0); }, {"batch after the dim", {rnd({3, 4, 5})}, {2}, 1});
}

TEST(Ops, Reshape) {
  auto reshape = [](std::vector<int64_t> shape) {
    return [shape](koila_tensor** o, const std::vector<koila_tensor*>& in) {
      return koila_reshape(o, in[0], shape.data(), shape.size());
    };
  };
  // The reference reads a literal batch size as "the batch": on a slice it becomes the slice's size.
  auto ref = [](std::vector<int64_t> shape, int64_t in_batch = -1, int64_t out_batch = -1) {
    return [=](const auto& v) {
      std::vector<int64_t> s = shape;
      if (out_batch >= 0) s[out_batch] = v[0].size(in_batch);
      return at::reshape(v[0], s);
    };
  };
  check(reshape({4, 15}), ref({4, 15}, 0, 0), {"literal batch kept", {rnd({4, 3, 5})}, {0}, 0});
  check(reshape({4, -1}), ref({4, -1}, 0, 0), {"-1 after the batch", {rnd({4, 3, 5})}, {0}, 0});
  check(reshape({-1, 3, 5}), ref({-1, 3, 5}), {"-1 at the batch", {rnd({4, 15})}, {0}, 0});
  check(reshape({1, 4, 3, 5}), ref({1, 4, 3, 5}, 0, 1), {"leading 1", {rnd({4, 3, 5})}, {0}, 1});
  check(reshape({3, 4, 5}), ref({3, 4, 5}, 1, 1), {"batch in the middle kept", {rnd({3, 4, 5})}, {1}, 1});
  check(reshape({12, 5}), ref({12, 5}), {"merging the batch", {rnd({4, 3, 5})}, {0}, -1, true});
  check(reshape({2, 2, 15}), ref({2, 2, 15}), {"splitting the batch", {rnd({4, 3, 5})}, {0}, -1, true});
  auto flatten = [](int64_t s, int64_t e) {
    return [=](koila_tensor** o, const std::vector<koila_tensor*>& in) { return koila_flatten(o, in[0], s, e); };
  };
  check(flatten(1, -1), [](const auto& v) { return at::flatten(v[0], 1, -1); },
        {"flatten features", {rnd({4, 3, 5, 2})}, {0}, 0});
  check(flatten(0, 1), [](const auto& v) { return at::flatten(v[0], 0, 1); },
        {"flatten keeps a later batch", {rnd({2, 3, 4, 5})}, {2}, 1});
  check(flatten(0, 1), [](const auto& v) { return at::flatten(v[0], 0, 1); },
        {"flatten merges the batch", {rnd({4, 3, 5})}, {0}, -1, true});
  check(flatten(0, -1), [](const auto& v) { return at::flatten(v[0], 0, -1); },
        {"flatten with a size-1 neighbour", {rnd({4, 1})}, {0}, 0});
}

TEST(Ops, MovingDims) {
  const int64_t order[] = {2, 0, 1}, order_neg[] = {-1, -3, -2};
  check([&](koila_tensor** o, const auto& in) { return koila_permute(o, in[0], order, 3); },
        [](const auto& v) {
          return v[0].permute({2, 0, 1});
        },
        {"permute", {rnd({4, 3, 5})}, {0}, 1});
  check([&](koila_tensor** o, const auto& in) { return koila_permute(o, in[0], order_neg, 3); },
        [](const auto& v) {
          return v[0].permute({2, 0, 1});
        },
        {"permute negative", {rnd({4, 3, 5})}, {2}, 0});
  check([](koila_tensor** o, const auto& in) { return koila_transpose(o, in[0], 0, -1); },
        [](const auto& v) { return v[0].transpose(0, -1); }, {"transpose", {rnd({4, 3, 5})}, {0}, 2});
  check([](koila_tensor** o, const auto& in) { return koila_transpose(o, in[0], 1, 2); },
        [](const auto& v) { return v[0].transpose(1, 2); }, {"transpose elsewhere", {rnd({4, 3, 5})}, {0}, 0});
  check([](koila_tensor** o, const auto& in) { return koila_squeeze(o, in[0], 1); },
        [](const auto& v) { return v[0].squeeze(1); }, {"squeeze before the batch", {rnd({3, 1, 4})}, {-1}, 1});
  check([](koila_tensor** o, const auto& in) { return koila_squeeze(o, in[0], 0); },
        [](const auto& v) { return v[0].squeeze(0); }, {"squeeze of a size > 1 dim is a no-op", {rnd({4, 3})}, {0}, 0});
  check([](koila_tensor** o, const auto& in) { return koila_unsqueeze(o, in[0], 0); },
        [](const auto& v) { return v[0].unsqueeze(0); }, {"unsqueeze front", {rnd({4, 3})}, {0}, 1});
  check([](koila_tensor** o, const auto& in) { return koila_unsqueeze(o, in[0], -1); },
        [](const auto& v) { return v[0].unsqueeze(-1); }, {"unsqueeze back", {rnd({4, 3})}, {0}, 0});
}

TEST(Ops, CatStack) {
  auto cat = [](int64_t d) {
    return
        [d](koila_tensor** o, const std::vector<koila_tensor*>& in) { return koila_cat(o, in.data(), in.size(), d); };
  };
  auto stack = [](int64_t d) {
    return
        [d](koila_tensor** o, const std::vector<koila_tensor*>& in) { return koila_stack(o, in.data(), in.size(), d); };
  };
  check(cat(1), [](const auto& v) { return at::cat(v, 1); }, {"cat features", {rnd({4, 3}), rnd({4, 2})}, {0, 0}, 0});
  check(cat(-1), [](const auto& v) { return at::cat(v, -1); },
        {"cat of lazy inputs without batch", {rnd({4, 3}), rnd({4, 2})}, {NB, C}, -1});
  check(cat(0), [](const auto& v) { return at::cat(v, 0); },
        {"cat along the batch", {rnd({4, 3}), rnd({2, 3})}, {0, 0}, -1, true});
  check(cat(1), [](const auto& v) { return at::cat(v, 1); },
        {"cat with an unbatched spanning input", {rnd({4, 3}), rnd({4, 2})}, {0, C}, -1, true});
  check(stack(0), [](const auto& v) { return at::stack(v, 0); },
        {"stack in front", {rnd({4, 3}), rnd({4, 3})}, {0, 0}, 1});
  check(stack(-1), [](const auto& v) { return at::stack(v, -1); },
        {"stack at the end", {rnd({4, 3}), rnd({4, 3}), rnd({4, 3})}, {0, 0, 0}, 0});
  check(stack(1), [](const auto& v) { return at::stack(v, 1); },
        {"stack mixing batched and not", {rnd({4, 3}), rnd({4, 3})}, {0, C}, -1, true});
}

TEST(Ops, Select) {
  check([](koila_tensor** o, const auto& in) { return koila_narrow(o, in[0], 1, 1, 2); },
        [](const auto& v) { return v[0].narrow(1, 1, 2); }, {"narrow features", {rnd({4, 5})}, {0}, 0});
  check([](koila_tensor** o, const auto& in) { return koila_narrow(o, in[0], -1, -3, 2); },
        [](const auto& v) { return v[0].narrow(-1, 2, 2); }, {"narrow negative start", {rnd({4, 5})}, {0}, 0});
  check([](koila_tensor** o, const auto& in) { return koila_narrow(o, in[0], 0, 1, 2); },
        [](const auto& v) { return v[0].narrow(0, 1, 2); }, {"narrow the batch", {rnd({4, 5})}, {0}, -1, true});
  auto select = [](int64_t d) {
    return
        [d](koila_tensor** o, const std::vector<koila_tensor*>& in) { return koila_index_select(o, in[0], d, in[1]); };
  };
  check(select(1), [](const auto& v) { return at::index_select(v[0], 1, v[1]); },
        {"select features", {rnd({4, 5}), idx({3}, 5)}, {0, C}, 0});
  check(select(0), [](const auto& v) { return at::index_select(v[0], 0, v[1]); },
        {"batched index picks rows", {rnd({7, 5}), idx({6}, 7)}, {C, 0}, 0});
  check(select(0), [](const auto& v) { return at::index_select(v[0], 0, v[1]); },
        {"selecting samples", {rnd({4, 5}), idx({3}, 4)}, {0, C}, -1, true});
}

// A loss's shape is remembered per loss, reduction and inputs' shapes and dtypes on a thread
// (reduce.cpp): each combination, again after more than the remembered ones came between,
// gets its own shape, and inputs the loss refuses are refused every time.
TEST(Ops, LossShapesFollowEachBuild) {
  using LossFn = koila_status* (*)(koila_tensor**, const koila_tensor*, const koila_tensor*, koila_reduction);
  struct Case {
    LossFn fn;
    koila_reduction r;
    int64_t batch;
    std::vector<int64_t> expected;
  };
  std::vector<Case> cases;
  for (int64_t batch : {6, 7, 3})
    for (koila_reduction r : {KOILA_REDUCTION_NONE, KOILA_REDUCTION_MEAN})
      for (LossFn fn : {LossFn(koila_cross_entropy), LossFn(koila_nll_loss)})
        cases.push_back(
            {fn, r, batch, r == KOILA_REDUCTION_NONE ? std::vector<int64_t>{batch} : std::vector<int64_t>{}});
  for (int round = 0; round < 2; ++round)  // 12 combinations: the second round finds none remembered
    for (const Case& c : cases) {
      SCOPED_TRACE(std::to_string(c.batch) + " " + std::to_string(c.r));
      Handle x = from_aten(at::log_softmax(rnd({c.batch, 5}), 1), 0), t = from_aten(idx({c.batch}, 5), 0);
      koila_tensor* out = nullptr;
      ASSERT_OK(c.fn(&out, x.get(), t.get(), c.r));
      Handle loss(out);
      EXPECT_EQ(shape_of(loss.get()), c.expected);
      // A target of another batch size: refused, also right after the shapes above.
      Handle wrong = from_aten(idx({c.batch + 1}, 5), 0);
      for (int again = 0; again < 2; ++again) {
        koila_tensor* refused = nullptr;
        koila_status* s = c.fn(&refused, x.get(), wrong.get(), c.r);
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(koila_status_code(s), KOILA_ERROR_SHAPE) << koila_status_message(s);
        koila_status_free(s);
        EXPECT_EQ(refused, nullptr);
      }
    }
}

TEST(Ops, Losses) {
  using LossFn = koila_status* (*)(koila_tensor**, const koila_tensor*, const koila_tensor*, koila_reduction);
  auto build = [](LossFn fn, koila_reduction r) {
    return [=](koila_tensor** o, const std::vector<koila_tensor*>& in) { return fn(o, in[0], in[1], r); };
  };
  for (koila_reduction r : {KOILA_REDUCTION_NONE, KOILA_REDUCTION_MEAN, KOILA_REDUCTION_SUM}) {
    SCOPED_TRACE(r);
    const int64_t red = r == KOILA_REDUCTION_NONE ? 0 : r == KOILA_REDUCTION_MEAN ? 1 : 2;
    const BatchReduction expected = r == KOILA_REDUCTION_NONE   ? BatchReduction::None
                                    : r == KOILA_REDUCTION_MEAN ? BatchReduction::Mean
                                                                : BatchReduction::Sum;
    const int64_t out_batch = r == KOILA_REDUCTION_NONE ? 0 : -1;
    auto ce = [red](const auto& v) { return at::cross_entropy_loss(v[0], v[1], {}, red, -100, 0.0); };
    check(build(koila_cross_entropy, r), ce,
          {"cross_entropy", {rnd({6, 5}), idx({6}, 5)}, {0, 0}, out_batch, false, expected});
    check(build(koila_cross_entropy, r), ce,
          {"cross_entropy spatial", {rnd({4, 5, 3, 2}), idx({4, 3, 2}, 5)}, {0, 0}, out_batch, false, expected});
    check(build(koila_cross_entropy, r), ce,
          {"cross_entropy probabilities",
           {rnd({6, 5}), at::softmax(rnd({6, 5}), 1)},
           {0, 0},
           out_batch,
           false,
           expected});
    check(build(koila_cross_entropy, r), ce,
          {"cross_entropy with a concrete label", {rnd({6, 5}), idx({6}, 5)}, {0, C}, -1, true});
    auto nll = [red](const auto& v) { return at::nll_loss_nd(v[0], v[1], {}, red, -100); };
    check(build(koila_nll_loss, r), nll,
          {"nll_loss", {at::log_softmax(rnd({6, 5}), 1), idx({6}, 5)}, {0, 0}, out_batch, false, expected});
    auto mse = [red](const auto& v) { return at::mse_loss(v[0], v[1], red); };
    check(build(koila_mse_loss, r), mse, {"mse_loss", {rnd({6, 3}), rnd({6, 3})}, {0, 0}, out_batch, false, expected});
    check(
        build(koila_mse_loss, r), mse,
        {"mse_loss batch 1", {rnd({3, 6}), rnd({3, 6})}, {1, 1}, r == KOILA_REDUCTION_NONE ? 1 : -1, false, expected});
    auto l1 = [red](const auto& v) { return at::l1_loss(v[0], v[1], red); };
    check(build(koila_l1_loss, r), l1, {"l1_loss", {rnd({6, 3}), rnd({6, 3})}, {0, 0}, out_batch, false, expected});
    auto bce = [red](const auto& v) { return at::binary_cross_entropy_with_logits(v[0], v[1], {}, {}, red); };
    check(build(koila_binary_cross_entropy_with_logits, r), bce,
          {"bce_with_logits", {rnd({6, 3}), at::rand({6, 3})}, {0, 0}, out_batch, false, expected});
  }
}

TEST(Ops, Attention) {
  auto build = [](int causal) {
    return [causal](koila_tensor** o, const std::vector<koila_tensor*>& in) {
      return koila_scaled_dot_product_attention(o, in[0], in[1], in[2], in.size() > 3 ? in[3] : nullptr, causal);
    };
  };
  // Reference spelled out independently: softmax(q k^T / sqrt(E) + mask) v.
  auto ref = [](int causal) {
    return [causal](const std::vector<at::Tensor>& v) {
      at::Tensor scores = at::matmul(v[0], v[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(v[0].size(-1)));
      at::Tensor bias = at::zeros({v[0].size(-2), v[1].size(-2)});
      if (causal) bias = bias.masked_fill(at::ones_like(bias, at::kBool).triu(1), -INFINITY);
      if (v.size() > 3)
        bias = v[3].scalar_type() == at::kBool ? bias.masked_fill(v[3].logical_not(), -INFINITY) : bias + v[3];
      return at::matmul(at::softmax(scores + bias, -1), v[2]);
    };
  };
  const at::Tensor q = rnd({4, 2, 5, 8}), k = rnd({4, 2, 6, 8}), v = rnd({4, 2, 6, 3});
  check(build(0), ref(0), {"plain", {q, k, v}, {0, 0, 0}, 0});
  check(build(1), ref(1), {"causal", {q, k.narrow(2, 0, 5), v.narrow(2, 0, 5)}, {0, 0, 0}, 0});
  check(build(0), ref(0), {"bool mask", {q, k, v, at::rand({5, 6}) > 0.3}, {0, 0, 0, C}, 0});
  check(build(0), ref(0), {"float mask batched", {q, k, v, rnd({4, 1, 5, 6})}, {0, 0, 0, 0}, 0});
  check(build(0), ref(0), {"batch in heads", {q, k, v}, {1, 1, 1}, 1});
  check(build(0), ref(0), {"unbatched keys span the batch", {q, k, v}, {0, C, 0}, -1, true});
  check(build(0), ref(0), {"batch in the sequence", {q, k, v}, {2, C, C}, -1, true});
}

TEST(Ops, ReductionOfBatchFeedingBatchedWorkCouples) {
  // x - mean(x, 0): a per-chunk mean would differ from the full-batch mean.
  Handle x = from_aten(rnd({4, 3}), 0);
  koila_tensor *mean = nullptr, *centered = nullptr;
  const int64_t d0[] = {0};
  ASSERT_OK(koila_mean(&mean, x.get(), d0, 1, 0));
  Handle m(mean);
  EXPECT_EQ(node(m.get()).reduction, BatchReduction::Mean);
  ASSERT_OK(koila_sub(&centered, x.get(), m.get()));
  Handle c(centered);
  EXPECT_FALSE(node(c.get()).couples.empty());
  EXPECT_NE(node(c.get()).couples.find("reduced over the batch"), std::string::npos);
}

// koila fills in meta kernels only where LibTorch lacks them: every op it filled now has a
// Meta kernel, none twice. The list printed is what this LibTorch lacked (docs/benchmarks-log/log.md
// §10 compares versions).
TEST(MetaKernels, FilledInOnlyWhereLibTorchLacksThem) {
  const std::vector<std::string> names = koila::filled_in_meta_kernels();
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  std::cout << "meta kernels koila filled in on this LibTorch (" << names.size() << "): " << list << "\n";
  std::set<std::string> seen;
  for (const std::string& n : names) {
    EXPECT_TRUE(seen.insert(n).second) << n << " filled in twice";
    const auto dot = n.find('.');
    const std::string name = "aten::" + n.substr(0, dot), overload = dot == std::string::npos ? "" : n.substr(dot + 1);
    auto op = c10::Dispatcher::singleton().findSchema({name, overload});
    ASSERT_TRUE(op.has_value()) << n;
    EXPECT_TRUE(op->hasKernelForDispatchKey(c10::DispatchKey::Meta)) << n;
  }
}
