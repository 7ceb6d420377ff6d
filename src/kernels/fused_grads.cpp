#include "kernels/fused_grads.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/libtorch_compat.h"

namespace koila {
namespace {

std::atomic<uint64_t> next_id{1};
std::atomic<bool> fusion_on{true};
std::atomic<uint64_t> fused_count{0};
thread_local uint64_t forward_session = 0;      // the pass whose Forward scope this thread is in
thread_local bool forward_split = false;        // whether that pass runs in several chunks
thread_local bool forward_small_fused = false;  // whether that pass fuses small linear layers

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

// What a fused convolution's backward needs of its forward: the input and the weight (for
// the products, version-checked), the leaf itself (whose .grad the backward reads) and the
// pass.
void save_weight(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, int64_t session) {
  ctx->save_for_backward({x, w});
  ctx->saved_data["leaf"] = w;
  ctx->saved_data["session"] = session;
}

// The .grad the backward adds the weight's gradient into, or an undefined tensor where it
// makes the gradient instead: no .grad a product can add into, a backward that records a
// graph, or a pass that is not accumulating into .grad now. `leaf`: the weight as the layer
// saw it (its .grad is read now), of pass `session`.
at::Tensor fusion_target(const at::Tensor& leaf, uint64_t session, const at::Tensor& w) {
  if (c10::GradMode::is_enabled() || !takes_addition(leaf.grad(), w) || !is_accumulating(session)) return {};
  return leaf.mutable_grad();
}

at::Tensor fusion_target(torch::autograd::AutogradContext* ctx, const at::Tensor& w) {
  const at::Tensor leaf = ctx->saved_data["leaf"].toTensor();
  return fusion_target(leaf, static_cast<uint64_t>(ctx->saved_data["session"].toInt()), w);
}

// The backward of a fused linear layer, written as LibTorch writes its own nodes (its
// AddmmBackward0): the input and the weight saved (version-checked when unpacked), the
// weight itself kept for its .grad (under saved-tensor hooks the saved weight unpacks to
// another tensor). (torch::autograd::Function cost a context with a map of saved data and
// the wrapping of its inputs and outputs, about twenty allocations a layer: the 1001-node
// graph's lazy step took 1.08 of LibTorch's with it, 0.99 without, §27 of
// docs/benchmarks-log/log.md.) Its gradients: the input's and the bias's as LibTorch computes them,
// the weight's added into its .grad or made contiguous [out, in] (which AccumulateGrad keeps
// without a copy).
struct FusedLinearBackward : torch::autograd::Node {
  torch::autograd::SavedVariable x, w;
  at::Tensor leaf;
  uint64_t session = 0;
  bool bias = false;

  std::string name() const override { return bias ? "FusedLinearWithBiasBackward" : "FusedLinearBackward"; }
  void release_variables() override {
    x.reset_data();
    w.reset_data();
    leaf.reset();
  }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    const at::Tensor& go = grads[0];
    at::Tensor gx, gw, gb;
    if (go.defined()) {
      const at::Tensor input = x.unpack(), weight = w.unpack();
      const int64_t out = weight.size(0), in = weight.size(1);
      const at::Tensor go2 = go.reshape({-1, out});
      if (task_should_compute_output(0)) gx = go.matmul(weight);
      if (bias && task_should_compute_output(2)) gb = go2.sum(0);
      if (task_should_compute_output(1)) {
        const at::Tensor x2 = input.reshape({-1, in});
        at::Tensor grad = fusion_target(leaf, session, weight);
        if (grad.defined()) {
          grad.addmm_(go2.t(), x2);
          fused_count.fetch_add(1, std::memory_order_relaxed);
        } else {
          gw = go2.t().mm(x2);
        }
      }
    }
    if (bias) return {gx, gw, gb};
    return {gx, gw};
  }
};

// at::linear of `x`, `w` and `b` (undefined: none), its backward a FusedLinearBackward of
// pass `session` (the caller checked that grad mode is on and `w` is a leaf requiring grad).
at::Tensor linear_fusing(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, uint64_t session) {
  const bool bias = b.defined();
  at::Tensor result;
  {
    c10::AutoGradMode no_grad(false);
    result = at::linear(x, w, bias ? c10::optional<at::Tensor>(b) : c10::nullopt);
    // A view (linear of a batch of matrices reshapes its product): as LibTorch's matmul
    // hands out its reshaped products, a tensor that autograd does not treat as a view.
    if (result.is_view()) result = at::_unsafe_view(result, result.sizes());
  }
  auto node = compat::make_autograd_node<FusedLinearBackward>();
  node->set_next_edges(bias ? torch::autograd::collect_next_edges(x, w, b) : torch::autograd::collect_next_edges(x, w));
  node->x = torch::autograd::SavedVariable(x, /*is_output=*/false);
  node->w = torch::autograd::SavedVariable(w, /*is_output=*/false);
  node->leaf = w;
  node->session = session;
  node->bias = bias;
  torch::autograd::set_history(result, compat::AutogradNodeRef(std::move(node)));
  return result;
}

// Convolution weights are added in slices of their output channels: ATen has no
// convolution that adds its weight gradient into a tensor, so each slice's gradient is made
// and added, and the temporary is a slice. Weights under kWholeBytes are added whole (their
// temporary is small); larger ones in kSlices slices.
constexpr int64_t kWholeBytes = 1 << 20;
constexpr int64_t kSlices = 8;

std::vector<int64_t> zeros_like_dims(at::IntArrayRef dims) { return std::vector<int64_t>(dims.size(), 0); }

at::Tensor convolution_forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                               const at::Tensor& b, const std::vector<int64_t>& stride,
                               const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                               int64_t session) {
  save_weight(ctx, x, w, session);
  ctx->saved_data["bias"] = b.defined();
  ctx->saved_data["stride"] = stride;
  ctx->saved_data["padding"] = padding;
  ctx->saved_data["dilation"] = dilation;
  return at::convolution(x, w, b.defined() ? c10::optional<at::Tensor>(b) : c10::nullopt, stride, padding, dilation,
                         /*transposed=*/false, zeros_like_dims(stride), /*groups=*/1);
}

torch::autograd::variable_list convolution_backward(torch::autograd::AutogradContext* ctx,
                                                    const torch::autograd::variable_list& grads) {
  const torch::autograd::variable_list saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& w = saved[1];
  const at::Tensor& go = grads[0];
  const bool bias = ctx->saved_data["bias"].toBool();
  const std::vector<int64_t> stride = ctx->saved_data["stride"].toIntVector();
  const std::vector<int64_t> padding = ctx->saved_data["padding"].toIntVector();
  const std::vector<int64_t> dilation = ctx->saved_data["dilation"].toIntVector();
  const std::vector<int64_t> none = zeros_like_dims(stride);
  // One gradient per input of the function: x, w, the bias if it has one, then the
  // arguments that are not tensors.
  const auto gradients = [bias](at::Tensor gx, at::Tensor gw, at::Tensor gb) {
    torch::autograd::variable_list g = {std::move(gx), std::move(gw)};
    if (bias) g.push_back(std::move(gb));
    g.resize(g.size() + 4);  // stride, padding, dilation, session
    return g;
  };
  if (!go.defined()) return gradients({}, {}, {});
  const bool wants_w = ctx->needs_input_grad(1);
  const bool wants_b = bias && ctx->needs_input_grad(2);
  at::Tensor grad = wants_w ? fusion_target(ctx, w) : at::Tensor();
  const bool with_weight = wants_w && !grad.defined();
  // The bias's gradient apart when the weight's is fused: oneDNN's kernel computes the
  // weight's whenever the bias's is asked for, which would make the whole weight gradient
  // that fusing avoids.
  const std::vector<int64_t> bias_sizes = {w.size(0)};
  auto [gx, gw, gb] = at::convolution_backward(
      go, x, w, with_weight && wants_b ? c10::OptionalIntArrayRef(bias_sizes) : c10::nullopt, stride, padding, dilation,
      false, none, 1, {ctx->needs_input_grad(0), with_weight, with_weight && wants_b});
  if (wants_b && !with_weight) {
    std::vector<int64_t> dims = {0};
    for (int64_t d = 2; d < go.dim(); ++d) dims.push_back(d);
    gb = go.sum(dims);
  }
  if (grad.defined()) {
    const int64_t out = w.size(0);
    const int64_t bytes = static_cast<int64_t>(w.nbytes());
    const int64_t slices = bytes < kWholeBytes ? 1 : std::min<int64_t>(kSlices, out);
    const int64_t step = (out + slices - 1) / slices;
    for (int64_t o = 0; o < out; o += step) {
      const int64_t n = std::min(step, out - o);
      const at::Tensor part =
          std::get<1>(at::convolution_backward(go.narrow(1, o, n), x, w.narrow(0, o, n), c10::nullopt, stride, padding,
                                               dilation, false, none, 1, {false, true, false}));
      grad.narrow(0, o, n).add_(part);
    }
    fused_count.fetch_add(1, std::memory_order_relaxed);
  }
  return gradients(gx, gw, gb);
}

// (Two functions: an undefined bias cannot be an input of an autograd function.)
struct FusedConvolution : torch::autograd::Function<FusedConvolution> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            std::vector<int64_t> stride, std::vector<int64_t> padding, std::vector<int64_t> dilation,
                            int64_t session) {
    return convolution_forward(ctx, x, w, at::Tensor(), stride, padding, dilation, session);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return convolution_backward(ctx, grads);
  }
};

struct FusedConvolutionWithBias : torch::autograd::Function<FusedConvolutionWithBias> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b, std::vector<int64_t> stride, std::vector<int64_t> padding,
                            std::vector<int64_t> dilation, int64_t session) {
    return convolution_forward(ctx, x, w, b, stride, padding, dilation, session);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return convolution_backward(ctx, grads);
  }
};

}  // namespace

GradFusion::GradFusion(bool on, bool split, bool several_linear)
    : id_(on && fusion_on.load() ? next_id.fetch_add(1) : 0), split_(split), small_fused_(split || several_linear) {}

GradFusion::Forward::Forward(const GradFusion& fusion)
    : previous_(forward_session), previous_split_(forward_split), previous_small_fused_(forward_small_fused) {
  forward_session = fusion.id_;
  forward_split = fusion.split_;
  forward_small_fused = fusion.small_fused_;
}

GradFusion::Forward::~Forward() {
  forward_session = previous_;
  forward_split = previous_split_;
  forward_small_fused = previous_small_fused_;
}

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

namespace {

// Linear layers whose weight is smaller than this are small: an unsplit pass that runs only
// one linear layer does not fuse it when it is small. Its gradient is then made whole and
// added by AccumulateGrad, as LibTorch does: the temporary is under a MiB, and fusing one
// small layer saves no time (conv1d_net's 48 -> 10 head: the same step either way; gru and
// lstm about 0.5% slower fused, §27 of docs/benchmarks-log/log.md). A pass of several linear layers
// fuses them all (transformers, MLPs: faster than LibTorch's own linear), and a split pass
// fuses every one, where each chunk after the first would otherwise make the temporary again.
constexpr int64_t kSmallLinearBytes = kWholeBytes;

// Whether a layer built now records `session` (nonzero: a pass that may fuse) for its
// weight: grad mode on, a weight that is a leaf requiring grad, input and bias (if any) of
// its dtype, the bias one-dimensional.
bool records(uint64_t session, const at::Tensor& input, const at::Tensor& weight,
             const c10::optional<at::Tensor>& bias) {
  const bool has_bias = bias.has_value() && bias->defined();
  return session != 0 && c10::GradMode::is_enabled() && weight.requires_grad() && weight.is_leaf() &&
         input.scalar_type() == weight.scalar_type() &&
         (!has_bias || (bias->dim() == 1 && bias->scalar_type() == weight.scalar_type()));
}

}  // namespace

at::Tensor fused_linear(const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& bias) {
  const uint64_t session = forward_session;
  const bool has_bias = bias.has_value() && bias->defined();
  if (!records(session, input, weight, bias) || weight.dim() != 2 || input.dim() < 1)
    return at::linear(input, weight, bias);
  const bool large = static_cast<int64_t>(weight.nbytes()) >= kSmallLinearBytes;
  if (!large && !forward_small_fused) return at::linear(input, weight, bias);
  return linear_fusing(input, weight, has_bias ? *bias : at::Tensor(), session);
}

at::Tensor fused_convolution(const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
                             int64_t groups) {
  const uint64_t session = forward_split ? forward_session : 0;
  const int64_t spatial = weight.dim() - 2;
  const bool has_bias = bias.has_value() && bias->defined();
  const bool plain = spatial >= 1 && spatial <= 3 && input.dim() == weight.dim() && groups == 1 &&
                     static_cast<int64_t>(stride.size()) == spatial &&
                     static_cast<int64_t>(padding.size()) == spatial &&
                     static_cast<int64_t>(dilation.size()) == spatial;
  if (!records(session, input, weight, bias) || !plain) {
    switch (spatial) {  // (these take unbatched inputs and one-number arguments too)
      case 1: return at::conv1d(input, weight, bias, stride, padding, dilation, groups);
      case 2: return at::conv2d(input, weight, bias, stride, padding, dilation, groups);
      default: return at::conv3d(input, weight, bias, stride, padding, dilation, groups);
    }
  }
  if (has_bias)
    return FusedConvolutionWithBias::apply(input, weight, *bias, stride.vec(), padding.vec(), dilation.vec(),
                                           static_cast<int64_t>(session));
  return FusedConvolution::apply(input, weight, stride.vec(), padding.vec(), dilation.vec(),
                                 static_cast<int64_t>(session));
}

uint64_t fused_weight_gradients() { return fused_count.load(); }

FusedPass current_fused_pass() { return FusedPass{forward_session, forward_split, forward_small_fused}; }

FusedPassAgain::FusedPassAgain(const FusedPass& pass) : previous_(current_fused_pass()) {
  forward_session = pass.session;
  forward_split = pass.split;
  forward_small_fused = pass.small_fused;
}

FusedPassAgain::~FusedPassAgain() {
  forward_session = previous_.session;
  forward_split = previous_.split;
  forward_small_fused = previous_.small_fused;
}

void testing::set_grad_fusion(bool on) { fusion_on.store(on); }

}  // namespace koila
