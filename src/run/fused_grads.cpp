#include "run/fused_grads.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

namespace koila {
namespace {

std::atomic<uint64_t> next_id{1};
std::atomic<bool> fusion_on{true};
std::atomic<uint64_t> fused_count{0};
thread_local uint64_t forward_session = 0;  // the pass whose Forward scope this thread is in

// The passes whose backward is adding into .grad now (few at a time: one per thread running
// a backward).
std::mutex accumulating_mutex;
std::vector<uint64_t> accumulating;

bool is_accumulating(uint64_t session) {
  std::lock_guard<std::mutex> lock(accumulating_mutex);
  return std::find(accumulating.begin(), accumulating.end(), session) != accumulating.end();
}

// A .grad the product can add into as AccumulateGrad would: dense, the weight's shape,
// dtype and device, and not itself part of a graph.
bool takes_addition(const at::Tensor& grad, const at::Tensor& weight) {
  return grad.defined() && grad.layout() == at::kStrided && !grad.requires_grad() &&
         grad.scalar_type() == weight.scalar_type() && grad.device() == weight.device() &&
         grad.sizes() == weight.sizes() && grad.is_contiguous();
}

// The backward of both autograd functions below: the input's and the bias's gradients as
// LibTorch computes them, the weight's added into its .grad or made contiguous [out, in]
// (which AccumulateGrad keeps without a copy).
torch::autograd::variable_list linear_backward(torch::autograd::AutogradContext* ctx, const at::Tensor& go, bool bias) {
  const torch::autograd::variable_list saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& w = saved[1];
  at::Tensor gx, gw, gb;
  if (go.defined()) {
    const int64_t out = w.size(0), in = w.size(1);
    const at::Tensor go2 = go.reshape({-1, out});
    if (ctx->needs_input_grad(0)) gx = go.matmul(w);
    if (bias && ctx->needs_input_grad(2)) gb = go2.sum(0);
    if (ctx->needs_input_grad(1)) {
      const at::Tensor x2 = x.reshape({-1, in});
      at::Tensor leaf = ctx->saved_data["leaf"].toTensor();
      const uint64_t session = static_cast<uint64_t>(ctx->saved_data["session"].toInt());
      if (!c10::GradMode::is_enabled() && takes_addition(leaf.grad(), w) && is_accumulating(session)) {
        leaf.mutable_grad().addmm_(go2.t(), x2);
        fused_count.fetch_add(1, std::memory_order_relaxed);
      } else {
        gw = go2.t().mm(x2);
      }
    }
  }
  if (bias) return {gx, gw, gb, at::Tensor()};
  return {gx, gw, at::Tensor()};
}

void save_linear(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, int64_t session) {
  ctx->save_for_backward({x, w});
  ctx->saved_data["leaf"] = w;  // the leaf itself, whose .grad the backward reads
  ctx->saved_data["session"] = session;
}

// (Two functions: an undefined bias cannot be an input of an autograd function.)
struct FusedLinear : torch::autograd::Function<FusedLinear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            int64_t session) {
    save_linear(ctx, x, w, session);
    return at::linear(x, w);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return linear_backward(ctx, grads[0], false);
  }
};

struct FusedLinearWithBias : torch::autograd::Function<FusedLinearWithBias> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b, int64_t session) {
    save_linear(ctx, x, w, session);
    return at::linear(x, w, b);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return linear_backward(ctx, grads[0], true);
  }
};

}  // namespace

GradFusion::GradFusion(bool on) : id_(on && fusion_on.load() ? next_id.fetch_add(1) : 0) {}

GradFusion::Forward::Forward(const GradFusion& fusion) : previous_(forward_session) { forward_session = fusion.id_; }

GradFusion::Forward::~Forward() { forward_session = previous_; }

GradFusion::Backward::Backward(const GradFusion& fusion) : id_(fusion.id_) {
  if (id_ == 0) return;
  std::lock_guard<std::mutex> lock(accumulating_mutex);
  accumulating.push_back(id_);
}

GradFusion::Backward::~Backward() {
  if (id_ == 0) return;
  std::lock_guard<std::mutex> lock(accumulating_mutex);
  accumulating.erase(std::find(accumulating.begin(), accumulating.end(), id_));
}

at::Tensor fused_linear(const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  const uint64_t session = forward_session;
  const bool has_bias = bias.has_value() && bias->defined();
  const bool plain = weight.dim() == 2 && input.dim() >= 1 && input.scalar_type() == weight.scalar_type() &&
                     (!has_bias || (bias->dim() == 1 && bias->scalar_type() == weight.scalar_type()));
  if (session == 0 || !plain || !c10::GradMode::is_enabled() || !weight.requires_grad() || !weight.is_leaf())
    return at::linear(input, weight, bias);
  if (has_bias) return FusedLinearWithBias::apply(input, weight, *bias, static_cast<int64_t>(session));
  return FusedLinear::apply(input, weight, static_cast<int64_t>(session));
}

uint64_t fused_weight_gradients() { return fused_count.load(); }

void testing::set_grad_fusion(bool on) { fusion_on.store(on); }

}  // namespace koila
