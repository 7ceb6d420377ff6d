// The 1001-node small-op graph of the planning benchmarks: 500 x (linear + tanh) at batch
// 32 (width features each), the mean as loss. Shared by bench/planning.cpp and
// bench/module_steps.cpp.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "bench_common.h"

namespace bench {

struct SmallOpGraph {
  static constexpr int kLayers = 500, kBatch = 32;
  int width;
  bool zero_in_place;  // between steps: .grad zeroed in place (true) or set absent (false)
  std::vector<at::Tensor> w, b;
  std::vector<koila_models::Handle> wh, bh;

  explicit SmallOpGraph(int width_, bool zero_in_place_ = false) : width(width_), zero_in_place(zero_in_place_) {
    at::manual_seed(0);
    for (int i = 0; i < kLayers; ++i) {
      w.push_back((at::randn({width, width}) / std::sqrt(static_cast<double>(width))).requires_grad_(true));
      b.push_back(at::zeros({width}).requires_grad_(true));
      wh.push_back(koila_models::share(w.back()));
      bh.push_back(koila_models::share(b.back()));
    }
  }
  at::Tensor input() const { return at::randn({kBatch, width}); }
  // 1 input node + 500 x (linear, tanh) = 1001 nodes, then the loss.
  koila_models::Handle lazy_loss(const at::Tensor& xs) const {
    koila_models::Handle h = koila_models::lazy(xs, 0);
    for (int i = 0; i < kLayers; ++i) {
      koila_tensor* out = nullptr;
      check(koila_linear(&out, h.get(), wh[i].get(), bh[i].get()), "koila_linear");
      koila_models::Handle lin(out);
      check(koila_tanh(&out, lin.get()), "koila_tanh");
      h = koila_models::Handle(out);
    }
    koila_tensor* loss = nullptr;
    check(koila_mean(&loss, h.get(), nullptr, 0, 0), "koila_mean");
    return koila_models::Handle(loss);
  }
  // The same step in plain LibTorch, eagerly.
  void eager_step(const at::Tensor& xs) const {
    at::Tensor h = xs;
    for (int i = 0; i < kLayers; ++i) h = at::tanh(at::linear(h, w[i], b[i]));
    h.mean().backward();
  }
  // After a step through koila: its C API when zeroing in place.
  void zero_grad_lazy() const {
    if (!zero_in_place) return zero_grad();
    for (const koila_models::Handle& h : wh) check(koila_tensor_zero_grad(h.get()), "koila_tensor_zero_grad");
    for (const koila_models::Handle& h : bh) check(koila_tensor_zero_grad(h.get()), "koila_tensor_zero_grad");
  }
  void zero_grad() const {
    for (const std::vector<at::Tensor>* params : {&w, &b})
      for (const at::Tensor& t : *params) {
        if (!zero_in_place)
          t.mutable_grad() = at::Tensor();
        else if (t.grad().defined())
          t.mutable_grad().zero_();
      }
  }
};

}  // namespace bench
