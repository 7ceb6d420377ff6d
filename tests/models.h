// Three models written twice, with koila's C API and with plain LibTorch, over the same
// parameters: an MLP, a small CNN and a transformer block. Shared by the planner tests
// and the benchmarks.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/handles.h"
#include "graph/graph.h"
#include "koila.h"

namespace koila_models {

struct TensorDeleter {
  void operator()(koila_tensor* t) const { koila_tensor_free(t); }
};
using Handle = std::unique_ptr<koila_tensor, TensorDeleter>;

// Throws on a failed call, with the status message.
inline void check(koila_status* s, const char* what) {
  if (s == nullptr) return;
  std::string message = std::string(what) + ": " + koila_status_message(s);
  koila_status_free(s);
  throw std::runtime_error(message);
}

// A handle sharing `t` (no copy): gradients koila computes land in t.grad().
inline Handle share(const at::Tensor& t) { return Handle(koila::new_handle(koila::make_constant(t))); }

// A lazy handle around `t` with the given batch dim.
inline Handle lazy(const at::Tensor& t, int64_t batch_dim) {
  Handle concrete = share(t);
  koila_tensor* out = nullptr;
  check(koila_lazy(&out, concrete.get(), batch_dim), "koila_lazy");
  return Handle(out);
}

enum class Kind { MLP, CNN, Transformer };

inline const char* name(Kind kind) {
  switch (kind) {
    case Kind::MLP: return "mlp";
    case Kind::CNN: return "cnn";
    case Kind::Transformer: return "transformer";
  }
  return "?";
}

// Applies a koila op that returns a new tensor, replacing `h`.
template <class F>
void step(Handle& h, const char* what, F&& op) {
  koila_tensor* out = nullptr;
  check(op(&out), what);
  h.reset(out);
}

class Model {
 public:
  Model(Kind kind, at::Device device = at::kCPU, uint64_t seed = 0) : kind_(kind), device_(device) {
    at::manual_seed(seed);
    auto param = [&](std::vector<int64_t> shape, double scale) {
      at::Tensor p = (at::randn(shape) * scale).to(device_).set_requires_grad(true);
      params_.push_back(p);
      handles_.push_back(share(p));
    };
    switch (kind) {
      case Kind::MLP:
        param({512, 784}, 0.03), param({512}, 0.01);
        param({512, 512}, 0.04), param({512}, 0.01);
        param({10, 512}, 0.04), param({10}, 0.01);
        break;
      case Kind::CNN:
        param({16, 3, 3, 3}, 0.2), param({16}, 0.01);
        param({32, 16, 3, 3}, 0.08), param({32}, 0.01);
        param({10, 32 * 8 * 8}, 0.02), param({10}, 0.01);
        break;
      case Kind::Transformer:
        param({kE}, 0.1), param({kE}, 0.1);                                                          // layer norm 1
        param({kE, kE}, 0.08), param({kE, kE}, 0.08), param({kE, kE}, 0.08), param({kE, kE}, 0.08);  // q k v o
        param({kE}, 0.1), param({kE}, 0.1);                                                          // layer norm 2
        param({4 * kE, kE}, 0.08), param({4 * kE}, 0.01), param({kE, 4 * kE}, 0.04), param({kE}, 0.01);
        param({10, kE}, 0.08), param({10}, 0.01);
        break;
    }
  }

  Kind kind() const { return kind_; }
  const std::vector<at::Tensor>& params() const { return params_; }

  at::Tensor input(int64_t batch) const {
    switch (kind_) {
      case Kind::MLP: return at::randn({batch, 784}).to(device_);
      case Kind::CNN: return at::randn({batch, 3, 32, 32}).to(device_);
      case Kind::Transformer: return at::randn({batch, kT, kE}).to(device_);
    }
    return {};
  }
  at::Tensor target(int64_t batch) const { return at::randint(10, {batch}, at::kLong).to(device_); }

  void zero_grad() const {
    for (const at::Tensor& p : params_) p.mutable_grad() = at::Tensor();
  }

  // The loss built with koila ops (lazy when x and y are).
  Handle loss(const koila_tensor* x, const koila_tensor* y, koila_reduction r = KOILA_REDUCTION_MEAN) const {
    Handle h = features(x);
    Handle loss;
    step(loss, "cross_entropy", [&](koila_tensor** o) { return koila_cross_entropy(o, h.get(), y, r); });
    return loss;
  }

  // The logits built with koila ops.
  Handle features(const koila_tensor* x) const {
    auto p = [&](size_t i) { return handles_[i].get(); };
    Handle h;
    const int64_t two[] = {2, 2}, one[] = {1, 1};
    switch (kind_) {
      case Kind::MLP:
        step(h, "linear", [&](koila_tensor** o) { return koila_linear(o, x, p(0), p(1)); });
        step(h, "relu", [&](koila_tensor** o) { return koila_relu(o, h.get()); });
        step(h, "linear", [&](koila_tensor** o) { return koila_linear(o, h.get(), p(2), p(3)); });
        step(h, "relu", [&](koila_tensor** o) { return koila_relu(o, h.get()); });
        step(h, "linear", [&](koila_tensor** o) { return koila_linear(o, h.get(), p(4), p(5)); });
        break;
      case Kind::CNN:
        step(h, "conv2d", [&](koila_tensor** o) { return koila_conv2d(o, x, p(0), p(1), nullptr, one, nullptr, 1); });
        step(h, "relu", [&](koila_tensor** o) { return koila_relu(o, h.get()); });
        step(h, "max_pool2d", [&](koila_tensor** o) { return koila_max_pool2d(o, h.get(), two, nullptr, nullptr, 0); });
        step(h, "conv2d",
             [&](koila_tensor** o) { return koila_conv2d(o, h.get(), p(2), p(3), nullptr, one, nullptr, 1); });
        step(h, "relu", [&](koila_tensor** o) { return koila_relu(o, h.get()); });
        step(h, "max_pool2d", [&](koila_tensor** o) { return koila_max_pool2d(o, h.get(), two, nullptr, nullptr, 0); });
        step(h, "flatten", [&](koila_tensor** o) { return koila_flatten(o, h.get(), 1, -1); });
        step(h, "linear", [&](koila_tensor** o) { return koila_linear(o, h.get(), p(4), p(5)); });
        break;
      case Kind::Transformer: {
        // The batch size is written into the reshapes literally, as callers do; chunks still work.
        int64_t batch = 0;
        size_t nd = 0;
        int64_t dims[3];
        check(koila_tensor_shape(x, dims, 3, &nd), "shape");
        batch = dims[0];
        const int64_t heads[] = {batch, kT, kH, kE / kH}, merged[] = {batch, kT, kE}, ln[] = {kE}, seq[] = {1};
        Handle n1, q, k, v, a, r1, n2, m;
        step(n1, "layer_norm", [&](koila_tensor** o) { return koila_layer_norm(o, x, ln, 1, p(0), p(1), 1e-5); });
        auto project = [&](Handle& out, size_t w) {
          step(out, "linear", [&](koila_tensor** o) { return koila_linear(o, n1.get(), p(w), nullptr); });
          step(out, "reshape", [&](koila_tensor** o) { return koila_reshape(o, out.get(), heads, 4); });
          step(out, "transpose", [&](koila_tensor** o) { return koila_transpose(o, out.get(), 1, 2); });
        };
        project(q, 2), project(k, 3), project(v, 4);
        step(a, "attention", [&](koila_tensor** o) {
          return koila_scaled_dot_product_attention(o, q.get(), k.get(), v.get(), nullptr, 0);
        });
        step(a, "transpose", [&](koila_tensor** o) { return koila_transpose(o, a.get(), 1, 2); });
        step(a, "reshape", [&](koila_tensor** o) { return koila_reshape(o, a.get(), merged, 3); });
        step(a, "linear", [&](koila_tensor** o) { return koila_linear(o, a.get(), p(5), nullptr); });
        step(r1, "add", [&](koila_tensor** o) { return koila_add(o, x, a.get()); });
        step(n2, "layer_norm",
             [&](koila_tensor** o) { return koila_layer_norm(o, r1.get(), ln, 1, p(6), p(7), 1e-5); });
        step(m, "linear", [&](koila_tensor** o) { return koila_linear(o, n2.get(), p(8), p(9)); });
        step(m, "gelu", [&](koila_tensor** o) { return koila_gelu(o, m.get()); });
        step(m, "linear", [&](koila_tensor** o) { return koila_linear(o, m.get(), p(10), p(11)); });
        step(h, "add", [&](koila_tensor** o) { return koila_add(o, r1.get(), m.get()); });
        step(h, "mean", [&](koila_tensor** o) { return koila_mean(o, h.get(), seq, 1, 0); });
        step(h, "linear", [&](koila_tensor** o) { return koila_linear(o, h.get(), p(12), p(13)); });
        break;
      }
    }
    return h;
  }

  // The same computation in plain LibTorch.
  at::Tensor eager_features(const at::Tensor& x) const {
    const auto& p = params_;
    switch (kind_) {
      case Kind::MLP: {
        at::Tensor h = at::relu(at::linear(x, p[0], p[1]));
        h = at::relu(at::linear(h, p[2], p[3]));
        return at::linear(h, p[4], p[5]);
      }
      case Kind::CNN: {
        at::Tensor h = at::max_pool2d(at::relu(at::conv2d(x, p[0], p[1], 1, 1)), {2, 2});
        h = at::max_pool2d(at::relu(at::conv2d(h, p[2], p[3], 1, 1)), {2, 2});
        return at::linear(h.flatten(1), p[4], p[5]);
      }
      case Kind::Transformer: {
        const int64_t b = x.size(0);
        at::Tensor n1 = at::layer_norm(x, {kE}, p[0], p[1], 1e-5);
        auto project = [&](size_t w) { return at::linear(n1, p[w]).reshape({b, kT, kH, kE / kH}).transpose(1, 2); };
        at::Tensor q = project(2), k = project(3), v = project(4);
        at::Tensor s = at::softmax(at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(kE / kH)), -1);
        at::Tensor a = at::linear(at::matmul(s, v).transpose(1, 2).reshape({b, kT, kE}), p[5]);
        at::Tensor r1 = x + a;
        at::Tensor n2 = at::layer_norm(r1, {kE}, p[6], p[7], 1e-5);
        at::Tensor h = r1 + at::linear(at::gelu(at::linear(n2, p[8], p[9])), p[10], p[11]);
        return at::linear(h.mean({1}), p[12], p[13]);
      }
    }
    return {};
  }
  at::Tensor eager_loss(const at::Tensor& x, const at::Tensor& y, int64_t r = at::Reduction::Mean) const {
    return at::cross_entropy_loss(eager_features(x), y, {}, r, -100, 0.0);
  }

  static constexpr int64_t kE = 128, kT = 32, kH = 4;

 private:
  Kind kind_;
  at::Device device_;
  std::vector<at::Tensor> params_;
  std::vector<Handle> handles_;
};

}  // namespace koila_models
