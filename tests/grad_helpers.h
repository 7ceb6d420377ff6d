// What the gradient suites share (test_chunked_grads, test_fused_grads): the MNIST MLP with
// its eager twin, gradients compared with PyTorch's, a backward's measured peak, and the chunk whose estimate is
// smallest with a budget that admits it but not the unsplit run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "helpers.h"
#include "plan/planner.h"

namespace koila_test {

// Copies of the parameters' .grad (undefined where absent).
inline std::vector<at::Tensor> grad_copies(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> g;
  for (const at::Tensor& p : params) g.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return g;
}

// The MNIST MLP, 784 -> 512 -> 10 by default, over a lazy batch, with its eager twin.
struct MnistMlp {
  std::vector<at::Tensor> params;
  std::vector<Handle> handles;
  at::Tensor xs, ys;
  Handle x, y, loss;

  // `widths`: the layers' sizes, input first, with ReLU between the layers.
  explicit MnistMlp(int64_t batch, uint64_t seed = 13, const std::vector<int64_t>& widths = {784, 512, 10}) {
    at::manual_seed(static_cast<int64_t>(seed));
    for (size_t i = 0; i + 1 < widths.size(); ++i)
      for (const auto& shape : std::vector<std::vector<int64_t>>{{widths[i + 1], widths[i]}, {widths[i + 1]}}) {
        params.push_back((at::randn(shape) * 0.03).set_requires_grad(true));
        handles.push_back(koila_models::share(params.back()));
      }
    xs = at::randn({batch, widths.front()});
    ys = at::randint(widths.back(), {batch}, at::kLong);
    x = koila_models::lazy(xs, 0);
    y = koila_models::lazy(ys, 0);
    Handle h = CALL(koila_linear, x.get(), handles[0].get(), handles[1].get());
    for (size_t i = 2; i < handles.size(); i += 2) {
      h = CALL(koila_relu, h.get());
      h = CALL(koila_linear, h.get(), handles[i].get(), handles[i + 1].get());
    }
    loss = CALL(koila_cross_entropy, h.get(), y.get(), KOILA_REDUCTION_MEAN);
  }

  // The loss computed eagerly by LibTorch.
  at::Tensor eager_loss() const {
    at::Tensor h = at::linear(xs, params[0], params[1]);
    for (size_t i = 2; i < params.size(); i += 2) h = at::linear(at::relu(h), params[i], params[i + 1]);
    return at::cross_entropy_loss(h, ys);
  }

  // PyTorch's gradients of the loss (the .grad are left absent).
  std::vector<at::Tensor> eager_grads() const {
    set_grads_absent();
    eager_loss().backward();
    std::vector<at::Tensor> g;
    for (const at::Tensor& p : params) g.push_back(p.grad().clone());
    set_grads_absent();
    return g;
  }
  void set_grads_absent() const {
    for (const at::Tensor& p : params) p.mutable_grad() = at::Tensor();
  }
  void set_grads_zero() const {
    for (const at::Tensor& p : params) p.mutable_grad() = at::zeros_like(p);
  }
  void set_grads(const std::vector<at::Tensor>& g) const {
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = g[i].clone();
  }
  // The three ways a .grad can stand before a backward: 0 absent, 1 zero, 2 holding `held`.
  const char* set_grad_state(int state, const std::vector<at::Tensor>& held) const {
    if (state == 0) set_grads_absent();
    if (state == 1) set_grads_zero();
    if (state == 2) set_grads(held);
    return state == 0 ? "absent" : state == 1 ? "zero" : "held";
  }
  uint64_t grad_bytes() const {
    uint64_t b = 0;
    for (const at::Tensor& p : params) b += p.numel() * p.element_size();
    return b;
  }
  uint64_t largest_grad_bytes() const {
    uint64_t b = 0;
    for (const at::Tensor& p : params) b = std::max<uint64_t>(b, p.numel() * p.element_size());
    return b;
  }
  std::vector<at::Tensor> grads() const { return grad_copies(params); }
};

// Each gradient within `rel` of PyTorch's (relative to its largest element).
inline void expect_grads(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                         const std::string& what, double rel = 1e-4) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].defined()) << what << ": gradient " << i << " absent";
    const double scale = want[i].abs().max().item<double>();
    const double diff = (got[i] - want[i]).abs().max().item<double>();
    EXPECT_LE(diff, rel * scale + rel / 100) << what << ": gradient " << i << " differs by " << diff;
  }
}

// Runs koila_backward; returns the measured peak beyond what was in use before.
inline uint64_t backward_extra(const koila_tensor* loss) {
  const uint64_t before = current_cpu();
  koila_status_free(koila_memory_reset_peak("cpu"));
  koila_status* s = koila_backward(loss);
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  return peak_cpu() - before;
}

// The training estimates of a loss unsplit and in the chunk (of `chunks`) whose estimate is
// smallest; budget(): what is held now plus that chunk's estimate with the planner's margin.
struct SmallestSplit {
  uint64_t unsplit = 0, chunked = UINT64_MAX;
  int64_t chunk = 0;
  SmallestSplit(const koila_tensor* loss, const std::vector<int64_t>& chunks) {
    unsplit = koila::estimate_extra(loss->node, koila::RunMode::Training, -1);
    for (int64_t c : chunks) {
      const uint64_t e = koila::estimate_extra(loss->node, koila::RunMode::Training, c);
      if (e < chunked) chunked = e, chunk = c;
    }
  }
  static uint64_t with_margin(uint64_t bytes) {
    return static_cast<uint64_t>(static_cast<double>(bytes) * (1 + koila::kMargin));
  }
  uint64_t budget(uint64_t current) const { return current + with_margin(chunked) + 1; }
  uint64_t unsplit_budget(uint64_t current) const { return current + with_margin(unsplit); }
  // Checks that the chunks are estimated below the unsplit run and that their budget is
  // below the unsplit run's need, then sets the CPU budget to it (*budget, with what is
  // held now in *current).
  void set_budget_below_unsplit(uint64_t* current, uint64_t* budget) const {
    ASSERT_LT(chunked, unsplit) << "chunks of " << chunk << " are estimated no smaller than the unsplit run";
    *current = current_cpu();
    *budget = this->budget(*current);
    ASSERT_LT(*budget, unsplit_budget(*current));
    ASSERT_OK(koila_set_memory_budget("cpu", *budget));
  }
};

}  // namespace koila_test
