// Tensors, metadata, reads, evaluation semantics and autograd through the C API.
#include <cstring>
#include <sstream>

#include "helpers.h"
#include "run/executor.h"

using namespace koila_test;

namespace {

Handle make(std::initializer_list<float> values, std::vector<int64_t> shape, int64_t batch_dim = kConcrete) {
  return from_aten(at::tensor(std::vector<float>(values)).reshape(shape), batch_dim);
}

}  // namespace

TEST(Library, VersionAndStatus) {
  EXPECT_STREQ(koila_version(), "0.1.0");
  EXPECT_EQ(koila_status_code(nullptr), KOILA_OK);
  EXPECT_STREQ(koila_status_message(nullptr), "");
  koila_status_free(nullptr);
  koila_tensor_free(nullptr);
}

TEST(Tensors, FromDataRoundTripsEveryDtype) {
  const std::vector<at::ScalarType> types = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong,
                                             at::kInt,   at::kChar,   at::kByte, at::kBool};
  for (at::ScalarType type : types) {
    const at::Tensor t = (at::arange(6) % 3).reshape({2, 3}).to(type);
    Handle h = from_aten(t);
    koila_dtype d;
    ASSERT_OK(koila_tensor_dtype(h.get(), &d));
    EXPECT_EQ(scalar_type_of(d), type);
    EXPECT_TRUE(at::equal(to_aten(h.get()), t)) << type;
  }
}

TEST(Tensors, Factories) {
  const int64_t shape[] = {2, 3};
  koila_tensor* t = nullptr;
  ASSERT_OK(koila_tensor_zeros(&t, shape, 2, KOILA_INT32, "cpu"));
  Handle zeros(t);
  EXPECT_TRUE(at::equal(to_aten(zeros.get()), at::zeros({2, 3}, at::kInt)));
  ASSERT_OK(koila_tensor_ones(&t, shape, 2, KOILA_FLOAT64, "cpu"));
  Handle ones(t);
  EXPECT_TRUE(at::equal(to_aten(ones.get()), at::ones({2, 3}, at::kDouble)));
  ASSERT_OK(koila_manual_seed(7));
  ASSERT_OK(koila_tensor_randn(&t, shape, 2, KOILA_FLOAT32, "cpu"));
  Handle r1(t);
  ASSERT_OK(koila_manual_seed(7));
  ASSERT_OK(koila_tensor_randn(&t, shape, 2, KOILA_FLOAT32, "cpu"));
  Handle r2(t);
  at::manual_seed(7);
  const at::Tensor expected = at::randn({2, 3});
  EXPECT_TRUE(at::equal(to_aten(r1.get()), expected));
  EXPECT_TRUE(at::equal(to_aten(r2.get()), expected));
  ASSERT_OK(koila_tensor_zeros(&t, nullptr, 0, KOILA_FLOAT32, "cpu"));
  Handle scalar(t);
  EXPECT_TRUE(shape_of(scalar.get()).empty());
  double v = -1;
  ASSERT_OK(koila_tensor_item(scalar.get(), &v));
  EXPECT_EQ(v, 0.0);
  const int64_t empty_shape[] = {0, 3};
  ASSERT_OK(koila_tensor_from_data(&t, nullptr, 0, KOILA_FLOAT32, empty_shape, 2, "cpu"));
  Handle empty(t);
  EXPECT_EQ(shape_of(empty.get()), (std::vector<int64_t>{0, 3}));
}

TEST(Tensors, LazyMetadataNeverEvaluates) {
  // An embedding whose index is out of range fails only when it runs: every metadata call
  // still answers, and reading the value reports the failure cleanly.
  Handle weight = from_aten(at::randn({4, 2}));
  Handle indices = from_aten(at::tensor(std::vector<int64_t>{0, 9, 1}), 0);
  Handle e = CALL(koila_embedding, weight.get(), indices.get());
  EXPECT_EQ(shape_of(e.get()), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(batch_dim_of(e.get()), 0);
  koila_dtype d;
  ASSERT_OK(koila_tensor_dtype(e.get(), &d));
  EXPECT_EQ(d, KOILA_FLOAT32);
  int lazy = 0;
  ASSERT_OK(koila_tensor_is_lazy(e.get(), &lazy));
  EXPECT_EQ(lazy, 1);
  float buf[6];
  koila_status* s = koila_tensor_to_host(e.get(), buf, sizeof buf);
  EXPECT_EQ(koila_status_code(s), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(koila_status_message(s)).find("koila_embedding"), std::string::npos) << koila_status_message(s);
  koila_status_free(s);
}

TEST(Tensors, ShapeCapacity) {
  Handle x = from_aten(at::zeros({2, 3, 4}));
  int64_t dims[2] = {-7, -7};
  size_t ndim = 0;
  ASSERT_OK(koila_tensor_shape(x.get(), dims, 2, &ndim));
  EXPECT_EQ(ndim, 3u);
  EXPECT_EQ(dims[0], 2);
  EXPECT_EQ(dims[1], 3);
}

TEST(Tensors, LazyWrapping) {
  Handle x = make({1, 2, 3, 4, 5, 6}, {2, 3}, -1);
  EXPECT_EQ(batch_dim_of(x.get()), 1);
  Handle again = CALL(koila_lazy, x.get(), 1);
  EXPECT_EQ(batch_dim_of(again.get()), 1);
  Handle unbatched = make({1, 2}, {2}, KOILA_NO_BATCH);
  EXPECT_EQ(batch_dim_of(unbatched.get()), -1);
  int lazy = 0;
  ASSERT_OK(koila_tensor_is_lazy(unbatched.get(), &lazy));
  EXPECT_EQ(lazy, 1);
}

TEST(Eval, RecipeReadsCurrentInputs) {
  Handle x = make({1, 2, 3}, {3}, 0);
  Handle y = CALL(koila_mul_scalar, x.get(), 2.0);
  EXPECT_TRUE(at::equal(to_aten(y.get()), at::tensor({2.f, 4.f, 6.f})));
  // The lazy input wraps the caller's tensor: an in-place update (as an optimizer makes) is
  // seen by the next evaluation of the same graph.
  x->node->value.add_(1);
  EXPECT_TRUE(at::equal(to_aten(y.get()), at::tensor({4.f, 6.f, 8.f})));
}

TEST(Eval, FreesIntermediatesAtLastUse) {
  Handle x = from_aten(at::randn({8, 16}), 0);
  Handle h = CALL(koila_relu, x.get());
  for (int i = 0; i < 20; ++i) h = CALL(koila_tanh, h.get());
  koila::EvalStats stats;
  koila::EvalOptions options;
  options.stats = &stats;
  koila::evaluate(h->node, options);
  EXPECT_EQ(stats.ops_run, 21u);
  EXPECT_LE(stats.peak_live_values, 2u);
  // A value used twice stays alive until its second use, and no longer.
  Handle a = CALL(koila_exp, x.get());
  Handle b = CALL(koila_sin, a.get());
  Handle c = CALL(koila_cos, b.get());
  Handle d = CALL(koila_add, a.get(), c.get());
  koila::evaluate(d->node, options);
  EXPECT_EQ(stats.ops_run, 4u);
  EXPECT_EQ(stats.peak_live_values, 3u);
}

TEST(Eval, FreeOrderDoesNotMatter) {
  koila_tensor* x = nullptr;
  {
    Handle data = from_aten(at::ones({2, 2}));
    ASSERT_OK(koila_lazy(&x, data.get(), 0));
  }
  koila_tensor *y = nullptr, *z = nullptr;
  ASSERT_OK(koila_exp(&y, x));
  ASSERT_OK(koila_add(&z, y, x));
  koila_tensor_free(x);
  koila_tensor_free(y);
  const at::Tensor expected = at::exp(at::ones({2, 2})) + 1;
  EXPECT_TRUE(at::allclose(to_aten(z), expected));
  koila_tensor_free(z);
}

TEST(Eval, EvalGivesConcrete) {
  Handle x = make({1, 2, 3, 4}, {2, 2}, 0);
  Handle y = CALL(koila_sqrt, x.get());
  Handle e = CALL(koila_eval, y.get());
  int lazy = 1;
  ASSERT_OK(koila_tensor_is_lazy(e.get(), &lazy));
  EXPECT_EQ(lazy, 0);
  EXPECT_TRUE(at::allclose(to_aten(e.get()), at::sqrt(at::tensor({1.f, 2.f, 3.f, 4.f}).reshape({2, 2}))));
  Handle again = CALL(koila_eval, e.get());
  EXPECT_EQ(again->node, e->node);
}

TEST(Eval, ToStringPrintsLikeLibTorch) {
  const at::Tensor t = at::tensor({1.5f, -2.f, 3.f}).reshape({3, 1});
  Handle x = from_aten(t, 0);
  Handle y = CALL(koila_mul_scalar, x.get(), 2.0);
  std::ostringstream os;
  os << t * 2;
  const std::string expected = os.str();
  size_t needed = 0;
  ASSERT_OK(koila_tensor_to_string(y.get(), nullptr, 0, &needed));
  EXPECT_EQ(needed, expected.size() + 1);
  std::vector<char> buf(needed);
  ASSERT_OK(koila_tensor_to_string(y.get(), buf.data(), buf.size(), &needed));
  EXPECT_EQ(std::string(buf.data()), expected);
  char small[5];
  ASSERT_OK(koila_tensor_to_string(y.get(), small, sizeof small, &needed));
  EXPECT_EQ(std::string(small), expected.substr(0, 4));
  EXPECT_EQ(needed, expected.size() + 1);
}

namespace {

// An MLP loss built through koila, and the same computed eagerly.
struct Mlp {
  at::Tensor x = at::randn({8, 6}), labels = at::randint(4, {8}, at::kLong);
  at::Tensor w1 = at::randn({5, 6}) * 0.3, b1 = at::randn({5}) * 0.1, w2 = at::randn({4, 5}) * 0.3;
};

}  // namespace

TEST(Autograd, LazyBackwardMatchesEager) {
  at::manual_seed(3);
  Mlp m;
  Handle w1 = from_aten(m.w1), b1 = from_aten(m.b1), w2 = from_aten(m.w2);
  for (koila_tensor* p : {w1.get(), b1.get(), w2.get()}) ASSERT_OK(koila_tensor_set_requires_grad(p, 1));
  Handle x = from_aten(m.x, 0), labels = from_aten(m.labels, 0);
  Handle h = CALL(koila_linear, x.get(), w1.get(), b1.get());
  Handle r = CALL(koila_relu, h.get());
  Handle logits = CALL(koila_linear, r.get(), w2.get(), nullptr);
  Handle loss = CALL(koila_cross_entropy, logits.get(), labels.get(), KOILA_REDUCTION_MEAN);

  koila_tensor* none = reinterpret_cast<koila_tensor*>(1);
  ASSERT_OK(koila_tensor_grad(&none, w1.get()));
  EXPECT_EQ(none, nullptr);

  ASSERT_OK(koila_backward(loss.get()));

  const at::Tensor ew1 = m.w1.clone().requires_grad_(), eb1 = m.b1.clone().requires_grad_(),
                   ew2 = m.w2.clone().requires_grad_();
  const at::Tensor eloss =
      at::cross_entropy_loss(at::linear(at::relu(at::linear(m.x, ew1, eb1)), ew2), m.labels, {}, 1, -100, 0.0);
  eloss.backward();
  double value = 0;
  ASSERT_OK(koila_tensor_item(loss.get(), &value));
  EXPECT_NEAR(value, eloss.item<double>(), 1e-6);

  auto grad_of = [&](koila_tensor* p) {
    koila_tensor* g = nullptr;
    koila_status* s = koila_tensor_grad(&g, p);
    EXPECT_EQ(s, nullptr);
    koila_status_free(s);
    Handle h(g);
    return g ? to_aten(h.get()) : at::Tensor();
  };
  EXPECT_TRUE(at::allclose(grad_of(w1.get()), ew1.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(grad_of(b1.get()), eb1.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(grad_of(w2.get()), ew2.grad(), 1e-5, 1e-6));

  // The same graph again: gradients add up, as in PyTorch.
  ASSERT_OK(koila_backward(loss.get()));
  EXPECT_TRUE(at::allclose(grad_of(w2.get()), ew2.grad() * 2, 1e-5, 1e-6));

  // zero_grad zeroes in place: a handle from koila_tensor_grad sees it.
  koila_tensor* g = nullptr;
  ASSERT_OK(koila_tensor_grad(&g, w2.get()));
  Handle held(g);
  ASSERT_OK(koila_tensor_zero_grad(w2.get()));
  EXPECT_TRUE(at::equal(to_aten(held.get()), at::zeros_like(m.w2)));
}

TEST(Autograd, GradOfLazyInputIsTheWrappedTensorsGrad) {
  Handle data = from_aten(at::tensor({1.f, 2.f, 3.f}));
  ASSERT_OK(koila_tensor_set_requires_grad(data.get(), 1));
  Handle x = CALL(koila_lazy, data.get(), 0);
  Handle sq = CALL(koila_mul, x.get(), x.get());
  Handle loss = CALL(koila_sum, sq.get(), nullptr, 0, 0);
  ASSERT_OK(koila_backward(loss.get()));
  Handle g = CALL(koila_tensor_grad, x.get());
  ASSERT_NE(g.get(), nullptr);
  EXPECT_TRUE(at::allclose(to_aten(g.get()), at::tensor({2.f, 4.f, 6.f})));
}

TEST(Autograd, EagerLossBackward) {
  Handle w = from_aten(at::tensor({1.f, -2.f}));
  ASSERT_OK(koila_tensor_set_requires_grad(w.get(), 1));
  Handle sq = CALL(koila_mul, w.get(), w.get());
  Handle loss = CALL(koila_sum, sq.get(), nullptr, 0, 0);
  int lazy = 1;
  ASSERT_OK(koila_tensor_is_lazy(loss.get(), &lazy));
  EXPECT_EQ(lazy, 0);
  ASSERT_OK(koila_backward(loss.get()));
  Handle g = CALL(koila_tensor_grad, w.get());
  EXPECT_TRUE(at::allclose(to_aten(g.get()), at::tensor({2.f, -4.f})));
}

TEST(Autograd, ReadsDoNotRecordGradients) {
  Handle w = from_aten(at::tensor({1.f, 2.f}));
  ASSERT_OK(koila_tensor_set_requires_grad(w.get(), 1));
  Handle x = make({3, 4}, {2}, 0);
  Handle y = CALL(koila_mul, x.get(), w.get());
  Handle e = CALL(koila_eval, y.get());
  EXPECT_FALSE(e->node->value.requires_grad());
}
