// Recomputation's mechanism (run/recompute.h; issue 51): a segment of a lazy graph whose
// forward keeps nothing that autograd saves inside it, and whose backward runs it again. Checked
// against the same graph run once with autograd: gradients bit for bit (dropout's mask replayed),
// less held between the forward and the backward, the same on meta tensors, and what a segment is.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "helpers.h"
#include "memory/device_memory.h"
#include "models.h"
#include "run/recompute.h"

namespace koila_test {
namespace {

using koila::Node;

// x (batch) -> tanh(x W1) -> dropout -> relu(. W2) = h2 -> h2 W3 -> mean of squares. The segment
// is h2 from x, W1 and W2.
struct Mlp {
  int64_t batch, width;
  at::Tensor w1, w2, w3;
  Handle x, p1, p2, p3, a, h1, d, b, h2, out, sq, loss;
  Mlp(int64_t batch_, int64_t width_) : batch(batch_), width(width_) {
    at::manual_seed(3);
    w1 = (at::randn({width, width}) * 0.1).requires_grad_(true);
    w2 = (at::randn({width, width}) * 0.1).requires_grad_(true);
    w3 = (at::randn({width, 4}) * 0.1).requires_grad_(true);
    x = koila_models::lazy(at::randn({batch, width}), 0);
    p1 = koila_models::share(w1);
    p2 = koila_models::share(w2);
    p3 = koila_models::share(w3);
    a = CALL(koila_matmul, x.get(), p1.get());
    h1 = CALL(koila_tanh, a.get());
    d = CALL(koila_dropout, h1.get(), 0.5, 1);
    b = CALL(koila_matmul, d.get(), p2.get());
    h2 = CALL(koila_relu, b.get());
    out = CALL(koila_matmul, h2.get(), p3.get());
    sq = CALL(koila_mul, out.get(), out.get());
    loss = CALL(koila_mean, sq.get(), nullptr, 0, 0);
  }
  const Node* n(const Handle& h) const { return h->node.get(); }
  koila::RecomputeSegment segment() const { return {{n(x), n(p1), n(p2)}, {n(h2)}, {}}; }
  std::vector<at::Tensor> params() const { return {w1, w2, w3}; }
  void zero() const {
    for (at::Tensor p : params()) p.mutable_grad() = at::Tensor();
  }
};

// The loss with autograd, h2 either computed in the graph or from the recomputed segment; the
// tensors held between the forward and the backward are measured.
at::Tensor forward(const Mlp& m, bool recompute, uint64_t* held) {
  c10::AutoGradMode grad(true);
  koila::EvalOptions options;
  options.grad = true;
  const uint64_t before = koila::memory_stats(c10::Device(c10::kCPU)).current;
  at::manual_seed(17);  // dropout's mask
  at::Tensor loss;
  if (!recompute) {
    loss = koila::evaluate(m.loss->node, options);
  } else {
    const koila::RecomputeSegment s = m.segment();
    const koila::Tensors h2 = koila::run_recomputed(s, {m.x->node->value, m.w1, m.w2}, options);
    std::unordered_map<const Node*, at::Tensor> given{{m.n(m.h2), h2[0]}};
    koila::EvalOptions rest = options;
    rest.given = &given;
    loss = koila::evaluate(std::vector<const Node*>{m.n(m.loss)}, rest)[0];
  }
  *held = koila::memory_stats(c10::Device(c10::kCPU)).current - before;
  return loss;
}

TEST(Recompute, GradientsEqualTheRunOnceBitForBitAndLessIsHeld) {
  BudgetGuard restore;
  const Mlp m(256, 256);
  uint64_t held_once = 0, held_recomputed = 0;
  at::Tensor loss = forward(m, false, &held_once);
  loss.backward();
  const std::vector<at::Tensor> once{m.w1.grad().clone(), m.w2.grad().clone(), m.w3.grad().clone()};
  const double value = loss.item<double>();
  m.zero();
  at::Tensor again = forward(m, true, &held_recomputed);
  at::manual_seed(99);  // the backward's replay must not depend on the stream's state now
  again.backward();
  EXPECT_EQ(again.item<double>(), value);
  const std::vector<at::Tensor> recomputed{m.w1.grad(), m.w2.grad(), m.w3.grad()};
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_TRUE(recomputed[i].defined()) << "parameter " << i;
    EXPECT_TRUE(at::equal(recomputed[i], once[i]))
        << "parameter " << i << " differs by " << (recomputed[i] - once[i]).abs().max().item<double>();
  }
  // Run once, autograd keeps tanh's result, dropout's mask and result (256 KiB each, the mask
  // less where it is kept as bytes) beside h2; recomputed, only h2 (which relu saves).
  EXPECT_LE(held_recomputed + (uint64_t{2} * 256 * 1024), held_once)
      << "held " << held_recomputed << " B recomputed against " << held_once << " B run once";
  m.zero();
}

// A segment whose output nothing saves (a residual sum, read outside only by a product with a
// number): run again in the backward, that output is not needed while the segment's backward
// runs, and is let go before it. The backward then holds at its peak no more than the same graph
// run once with autograd, which never kept the sum; holding it would cost one more [batch, width]
// tensor (the sum, 1 MiB here).
TEST(Recompute, TheSegmentsOutputRunAgainIsLetGoBeforeItsBackward) {
  BudgetGuard restore;
  at::manual_seed(5);
  const int64_t batch = 512, width = 512;
  at::Tensor w1 = (at::randn({width, width}) * 0.05).requires_grad_(true);
  Handle x = koila_models::lazy(at::randn({batch, width}), 0);
  Handle p1 = koila_models::share(w1);
  Handle y = CALL(koila_matmul, x.get(), p1.get());
  Handle r = CALL(koila_relu, y.get());
  Handle sum = CALL(koila_add, r.get(), x.get());
  Handle twice = CALL(koila_mul_scalar, sum.get(), 2.0);
  Handle loss = CALL(koila_sum, twice.get(), nullptr, 0, 0);
  const c10::Device cpu(c10::kCPU);
  const auto backward_peak = [&](bool recompute) {
    w1.mutable_grad() = at::Tensor();
    const uint64_t before = koila::memory_stats(cpu).current;
    at::Tensor l;
    {
      c10::AutoGradMode grad(true);
      koila::EvalOptions options;
      options.grad = true;
      if (!recompute) {
        l = koila::evaluate(loss->node, options);
      } else {
        const koila::RecomputeSegment s{{x->node.get(), p1->node.get()}, {sum->node.get()}, {}};
        const koila::Tensors out = koila::run_recomputed(s, {x->node->value, w1}, options);
        std::unordered_map<const Node*, at::Tensor> given{{sum->node.get(), out[0]}};
        koila::EvalOptions rest = options;
        rest.given = &given;
        l = koila::evaluate(std::vector<const Node*>{loss->node.get()}, rest)[0];
      }
    }
    koila::reset_peak(cpu);
    l.backward();
    const uint64_t peak = koila::memory_stats(cpu).peak - before;
    return std::make_pair(peak, w1.grad().clone());
  };
  const auto [once, once_grad] = backward_peak(false);
  const auto [again, again_grad] = backward_peak(true);
  EXPECT_TRUE(at::equal(again_grad, once_grad));
  const uint64_t tensor = uint64_t{batch} * width * sizeof(float);
  EXPECT_LE(again, once + tensor / 4) << "the backward's peak recomputing " << again << " B, run once " << once
                                      << " B (a [batch, width] tensor is " << tensor << " B)";
  w1.mutable_grad() = at::Tensor();
}

// A segment whose parameters no op outside it reads, in a backward that adds into .grad (a
// committed run's; here .grad already holds a sum, as in every chunk after the first): its
// backward adds each weight's gradient into .grad as it makes it, as the run without
// recomputation does, rather than holding all of them (6 weights of 1 MiB) until its end. In a
// backward that returns gradients (a probe's: torch::autograd::grad) they come back, and .grad is
// left alone. The gradients are bit for bit those of the run without recomputation either way.
TEST(Recompute, ASegmentsBackwardAddsItsParametersGradientsIntoGradAsItMakesThem) {
  BudgetGuard restore;
  at::manual_seed(6);
  const int64_t batch = 4, width = 512, layers = 6;
  std::vector<at::Tensor> w;
  std::vector<Handle> p, keep;
  Handle x = koila_models::lazy(at::randn({batch, width}), 0);
  std::vector<const Node*> inputs{x->node.get()};
  koila_tensor* h = x.get();
  for (int64_t k = 0; k < layers; ++k) {
    w.push_back((at::randn({width, width}) * 0.05).requires_grad_(true));
    p.push_back(koila_models::share(w.back()));
    inputs.push_back(p.back()->node.get());
    keep.push_back(CALL(koila_matmul, h, p.back().get()));
    keep.push_back(CALL(koila_tanh, keep.back().get()));
    h = keep.back().get();
  }
  Handle loss = CALL(koila_sum, h, nullptr, 0, 0);
  const c10::Device cpu(c10::kCPU);
  const auto set_grads = [&](double value) {
    for (at::Tensor& t : w) t.mutable_grad() = at::full({width, width}, value);
  };
  // The loss, its segment recomputed where `only_here` is given (a flag per input).
  const auto forward = [&](const std::vector<bool>* only_here) {
    c10::AutoGradMode grad(true);
    koila::EvalOptions options;
    options.grad = true;
    if (!only_here) return koila::evaluate(loss->node, options);
    const koila::RecomputeSegment s{inputs, {h->node.get()}, *only_here};
    koila::Tensors values{x->node->value};
    values.insert(values.end(), w.begin(), w.end());
    const koila::Tensors out = koila::run_recomputed(s, values, options);
    std::unordered_map<const Node*, at::Tensor> given{{h->node.get(), out[0]}};
    koila::EvalOptions rest = options;
    rest.given = &given;
    return koila::evaluate(std::vector<const Node*>{loss->node.get()}, rest)[0];
  };
  const auto backward_peak = [&](const std::vector<bool>* only_here, std::vector<at::Tensor>* grads) {
    set_grads(1.0);
    at::Tensor l = forward(only_here);
    const uint64_t before = koila::memory_stats(cpu).current;
    koila::reset_peak(cpu);
    l.backward();
    const uint64_t peak = koila::memory_stats(cpu).peak - before;
    for (const at::Tensor& t : w) grads->push_back(t.grad().clone());
    return peak;
  };
  const std::vector<bool> added(inputs.size(), true), returned(inputs.size(), false);
  std::vector<at::Tensor> once, into_grad, back;
  backward_peak(nullptr, &once);
  const uint64_t adding = backward_peak(&added, &into_grad);
  const uint64_t holding = backward_peak(&returned, &back);
  for (int64_t k = 0; k < layers; ++k) {
    EXPECT_TRUE(at::equal(into_grad[k], once[k])) << "weight " << k;
    EXPECT_TRUE(at::equal(back[k], once[k])) << "weight " << k;
  }
  const uint64_t weight = uint64_t{width} * width * sizeof(float);
  EXPECT_LE(adding + 3 * weight, holding) << "the segment's backward peaked at " << adding << " B adding into .grad, "
                                          << holding << " B returning the gradients";
  // A backward that returns gradients: they come back, and .grad is untouched.
  set_grads(1.0);
  const at::Tensor l = forward(&added);
  const koila::Tensors got = torch::autograd::grad({l}, w);
  for (int64_t k = 0; k < layers; ++k) {
    EXPECT_TRUE(at::equal(got[k] + 1.0, once[k])) << "weight " << k;
    EXPECT_TRUE(at::equal(w[k].grad(), at::ones({width, width}))) << "weight " << k << "'s .grad was written";
  }
  for (at::Tensor& t : w) t.mutable_grad() = at::Tensor();
}

TEST(Recompute, TheBackwardLeavesTheRandomStreamWhereItWas) {
  BudgetGuard restore;
  const Mlp m(8, 16);
  uint64_t held = 0;
  at::Tensor loss = forward(m, true, &held);
  at::manual_seed(5);
  loss.backward();
  const at::Tensor drawn = at::randn({4});
  at::manual_seed(5);
  EXPECT_TRUE(at::equal(drawn, at::randn({4}))) << "the replay moved the caller's random stream";
  m.zero();
}

TEST(Recompute, RunsOnMetaTensorsAsTheSimulationRunsIt) {
  c10::AutoGradMode grad(true);
  const Mlp m(8, 16);
  const auto meta = [](const at::Tensor& t) { return at::empty(t.sizes(), t.options().device(at::kMeta)); };
  const at::Tensor x = meta(m.x->node->value), w1 = meta(m.w1).requires_grad_(true),
                   w2 = meta(m.w2).requires_grad_(true);
  koila::EvalOptions options;
  options.grad = true;
  const koila::Tensors h2 = koila::run_recomputed(m.segment(), {x, w1, w2}, options);
  ASSERT_EQ(h2.size(), 1u);
  EXPECT_TRUE(h2[0].is_meta());
  EXPECT_EQ(h2[0].sizes(), at::IntArrayRef({8, 16}));
  ASSERT_TRUE(h2[0].requires_grad());
  EXPECT_EQ(h2[0].grad_fn()->name(), "RecomputeBackward");
  h2[0].sum().backward();
  ASSERT_TRUE(w1.grad().defined());
  EXPECT_TRUE(w1.grad().is_meta());
}

TEST(Recompute, SegmentsAreChecked) {
  const Mlp m(8, 16);
  // W2 left out of the inputs: the segment would reach a leaf it was not given.
  const koila::RecomputeSegment missing{{m.n(m.x), m.n(m.p1)}, {m.n(m.h2)}, {}};
  try {
    koila::segment_ops(missing);
    ADD_FAILURE() << "a segment reaching a leaf not among its inputs was accepted";
  } catch (const koila::Error& e) {
    EXPECT_EQ(e.code(), koila::Code::InvalidArgument) << e.what();
  }
  EXPECT_EQ(koila::segment_ops(m.segment()).size(), 5u);  // matmul, tanh, dropout, matmul, relu
  // Batch norm in training changes its running statistics: recomputed on copies of them
  // (run_recomputed; RecomputePlan tests check the statistics are updated once).
  Handle rm = from_aten(at::zeros({16})), rv = from_aten(at::ones({16}));
  Handle bn = CALL(koila_batch_norm, m.h2.get(), nullptr, nullptr, rm.get(), rv.get(), 1, 0.1, 1e-5);
  const koila::RecomputeSegment stats{
      {m.n(m.x), m.n(m.p1), m.n(m.p2), rm->node.get(), rv->node.get()}, {bn->node.get()}, {}};
  EXPECT_EQ(koila::segment_ops(stats).size(), 6u);
}

}  // namespace
}  // namespace koila_test
