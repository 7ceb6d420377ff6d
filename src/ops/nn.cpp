// Neural-network operators: matmul, linear, convolution, pooling, normalization,
// embedding and attention.
#include "ops/ops.h"

#include <limits>

#include "base/libtorch_compat.h"
#include "graph/rnn_meta.h"
#include "kernels/batch_stats.h"
#include "kernels/fused_grads.h"
#include "ops/common.h"

using namespace koila;
using batch::Metas;

namespace {

// linear's result for the usual arguments (a floating input [..., in], a weight [out, in]
// and a bias [out], all of one dtype): [..., out], without running it on meta tensors.
// Anything else goes through LibTorch's own checks on meta tensors (and its messages).
bool plain_linear(const Meta& x, const Meta& w, const Meta* b) {
  if (!at::isFloatingType(x.dtype) || w.dtype != x.dtype || x.shape.empty() || w.shape.size() != 2 ||
      w.shape[1] != x.shape.back())
    return false;
  return !b || (b->dtype == x.dtype && b->shape.size() == 1 && b->shape[0] == w.shape[0]);
}

// linear's result shape: the input's, with the weight's rows as its last dim.
std::vector<int64_t> linear_shape(const Meta& x, const Meta& w) {
  std::vector<int64_t> shape = x.shape;
  shape.back() = w.shape[0];
  return shape;
}

// LibTorch's meta kernel of addmm (linear of a matrix) accepts any bias, where running it
// needs one that broadcasts to the result.
void check_linear_bias(const Meta& x, const Meta& w, const Meta& b) {
  const std::vector<int64_t> result = linear_shape(x, w);
  bool broadcasts = b.shape.size() <= result.size();
  for (size_t i = 1; broadcasts && i <= b.shape.size(); ++i) {
    const int64_t have = b.shape[b.shape.size() - i], want = result[result.size() - i];
    broadcasts = have == want || have == 1;
  }
  if (!broadcasts)
    fail(Code::Shape,
         "linear's bias " + shape_string(b.shape) + " does not broadcast to its result " + shape_string(result));
}

Meta linear_result(const Metas& in, const Node&) {
  Meta m;
  m.shape = linear_shape(*in[0], *in[1]);
  m.dtype = in[0]->dtype;
  return m;
}

// torch.matmul's batch rule: contracted dims mix samples; leading dims broadcast.
BatchResult matmul_batch(const Metas& in, const Meta& out) {
  const int64_t out_rank = static_cast<int64_t>(out.shape.size());
  int64_t pos = -1;
  for (size_t i = 0; i < 2; ++i) {
    const Meta& m = *in[i];
    if (m.batch_dim < 0) continue;
    const int64_t rank = static_cast<int64_t>(m.shape.size()), b = m.batch_dim;
    const bool is_a = i == 0;
    const int64_t contracted = is_a ? rank - 1 : (rank == 1 ? 0 : rank - 2);
    if (b == contracted) return batch::couple("contracts the batch dim of operand " + std::to_string(i));
    int64_t p;
    if (is_a && b == rank - 2) {
      p = in[1]->shape.size() == 1 ? out_rank - 1 : out_rank - 2;
    } else if (!is_a && b == rank - 1) {
      p = out_rank - 1;
    } else {
      p = b + out_rank - rank + (in[1 - i]->shape.size() == 1 ? 1 : 0);  // a leading (broadcast) dim
      if (m.shape[b] != out.shape[p])
        return batch::couple("operand " + std::to_string(i) + " broadcasts its batch dim");
    }
    if (pos >= 0 && pos != p) return batch::couple("operands carry their batch in different dims of the result");
    pos = p;
  }
  BatchResult r;
  r.batch_dim = pos;
  if (pos >= 0 && pos < out_rank - 2) {
    const std::string spanning = batch::unbatched_spanning(in, out_rank, pos);
    if (!spanning.empty()) return batch::couple(spanning);
  }
  return r;
}

std::vector<int64_t> range(int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (int64_t d = from; d < to; ++d) out.push_back(d);
  return out;
}

NodePtr convolution(const char* name, const NodePtr& input, const NodePtr& weight, const NodePtr& bias,
                    std::vector<int64_t> s, std::vector<int64_t> p, std::vector<int64_t> d, int64_t groups,
                    size_t spatial) {
  require_floating(input, "x");
  if (groups < 1) fail(Code::InvalidArgument, "groups must be positive, got " + std::to_string(groups));
  const int64_t rank = rank_of(input);
  if (rank != static_cast<int64_t>(spatial) + 1 && rank != static_cast<int64_t>(spatial) + 2)
    fail(Code::Shape, "expected input of rank " + std::to_string(spatial + 1) + " or " + std::to_string(spatial + 2) +
                          ", got " + shape_string(input->meta.shape));
  // Batched input [N, C, ...]: only N may carry the batch. Unbatched [C, ...]: none may.
  const bool batched = rank == static_cast<int64_t>(spatial) + 2;
  const bool two_d = spatial == 2;
  return build(OpSpec{.name = name,
                      .run = [s, p, d, groups, two_d](
                                 const Tensors& in,
                                 const Node&) { return fused_convolution(in[0], in[1], in[2], s, p, d, groups); },
                      .batch = batch::same_dims_except(range(batched ? 1 : 0, rank), "convolves")},
               {input, weight, bias});
}

// The rank of an image, [N, C, H, W] or unbatched [C, H, W], of a floating dtype (failing
// otherwise).
int64_t image_rank(const NodePtr& input) {
  require_floating(input, "x");
  const int64_t rank = rank_of(input);
  if (rank != 3 && rank != 4)
    fail(Code::Shape, "expected input of rank 3 or 4, got " + shape_string(input->meta.shape));
  return rank;
}

NodePtr pool(const char* name, const NodePtr& input, std::vector<int64_t> k, std::vector<int64_t> s,
             std::vector<int64_t> p, bool ceil, bool max) {
  const int64_t rank = image_rank(input);
  return build(
      OpSpec{.name = name,
             .run =
                 [k, s, p, ceil, max](const Tensors& in, const Node&) {
                   return max ? at::max_pool2d(in[0], k, s, p, {1, 1}, ceil) : at::avg_pool2d(in[0], k, s, p, ceil);
                 },
             .batch = batch::same_dims_except({rank - 2, rank - 1}, "pools")},
      {input});
}

// q [..., L, E] @ k [..., S, E]^T, masked, softmax, @ v [..., S, Ev]. On LibTorch 2.x on the
// CPU (real tensors, or meta ones simulating the CPU: graph/attention_meta.h), PyTorch's own
// scaled_dot_product_attention, which takes flash attention where it applies (4-D, no
// dropout) and keeps one logsumexp per query instead of the [L, S] weights: 16 MiB less a
// layer at 1024 positions and one head, four times that at twice the length. Elsewhere
// (LibTorch 1.13, which lacks it; CUDA, whose choice of kernels the simulation does not
// follow yet: issue 50's GPU check) and for a mask with causal (which PyTorch refuses),
// spelled out as the composite does.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                     bool causal) {
  const bool cpu = q.is_cpu() || (q.is_meta() && simulating_cpu());
  if (cpu && !(causal && mask.defined()) && q.dim() <= 4 && k.dim() == q.dim() && v.dim() == q.dim()) {
    // Flash attention takes [N, heads, L, E]: fewer dims gain heads of one (and a mask that
    // spans the leading dims gains its dim too), taken away after.
    const int64_t added = 4 - q.dim();
    const auto four = [added](at::Tensor t) {
      for (int64_t i = 0; i < added; ++i) t = t.unsqueeze(-3);
      return t;
    };
    at::Tensor m = mask;
    if (m.defined() && m.dim() >= 3) m = four(m);
    at::Tensor fused;
    if (compat::fused_attention(four(q), four(k), four(v), m, causal, &fused)) {
      for (int64_t i = 0; i < added; ++i) fused = fused.squeeze(-3);
      return fused;
    }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).mul(scale);
  if (causal) {
    const at::Tensor keep = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).tril();
    scores = scores.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity());
  }
  if (mask.defined()) {
    scores = mask.scalar_type() == at::kBool
                 ? scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity())
                 : scores.add(mask);
  }
  return at::matmul(at::softmax(scores, -1), v);
}

// Leading dims broadcast like an elementwise op; the last two (sequence and features) mix.
BatchResult attention_batch(const Metas& in, const Meta& out) {
  for (size_t i = 0; i < in.size(); ++i) {
    const Meta* m = in[i];
    if (m && m->batch_dim >= static_cast<int64_t>(m->shape.size()) - 2)
      return batch::couple("attends along the batch dim of operand " + std::to_string(i));
  }
  return batch::elementwise(in, out);
}

}  // namespace

namespace koila::ops {

NodePtr matmul(const char* name, const NodePtr& lhs, const NodePtr& rhs) {
  if (rank_of(lhs) == 0 || rank_of(rhs) == 0)
    fail(Code::Shape, "both arguments to matmul need at least 1 dimension, got " + shape_string(lhs->meta.shape) +
                          " and " + shape_string(rhs->meta.shape));
  return build(OpSpec{.name = name,
                      .run = [](const Tensors& in, const Node&) { return at::matmul(in[0], in[1]); },
                      .batch = matmul_batch},
               {lhs, rhs});
}

NodePtr linear(const char* name, const NodePtr& input, const NodePtr& w, const NodePtr& b) {
  if (rank_of(input) == 0) fail(Code::Shape, "linear needs an input of rank 1 or more, got a scalar");
  if (rank_of(w) != 2) fail(Code::Shape, "linear needs a weight [out, in], got " + shape_string(w->meta.shape));
  OpSpec spec{.name = name,
              .run = [](const Tensors& in, const Node&) { return fused_linear(in[0], in[1], in[2]); },
              .batch = batch::same_dims_except({rank_of(input) - 1}, "contracts"),
              .linear_layers = 1};
  // LibTorch's meta kernels (1.13) accept mixed dtypes, where running linear does not.
  if (w->meta.dtype != input->meta.dtype || (b && b->meta.dtype != input->meta.dtype))
    fail(Code::Dtype, std::string("linear needs x, weight and bias of one dtype, got ") +
                          dtype_name(input->meta.dtype) + ", " + dtype_name(w->meta.dtype) +
                          (b ? std::string(", ") + dtype_name(b->meta.dtype) : std::string()));
  if (b && w->meta.shape[1] == input->meta.shape.back()) check_linear_bias(input->meta, w->meta, b->meta);
  if (plain_linear(input->meta, w->meta, b ? &b->meta : nullptr)) spec.infer = linear_result;
  return build(std::move(spec), {input, w, b});
}

NodePtr conv1d(const char* name, const NodePtr& x, const NodePtr& w, const NodePtr& bias, std::vector<int64_t> stride,
               std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  return convolution(name, x, w, bias, std::move(stride), std::move(padding), std::move(dilation), groups, 1);
}

NodePtr conv2d(const char* name, const NodePtr& x, const NodePtr& w, const NodePtr& bias, std::vector<int64_t> stride,
               std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  return convolution(name, x, w, bias, std::move(stride), std::move(padding), std::move(dilation), groups, 2);
}

NodePtr max_pool2d(const char* name, const NodePtr& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                   std::vector<int64_t> padding, bool ceil_mode) {
  return pool(name, x, std::move(kernel), std::move(stride), std::move(padding), ceil_mode, true);
}

NodePtr avg_pool2d(const char* name, const NodePtr& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                   std::vector<int64_t> padding, bool ceil_mode) {
  return pool(name, x, std::move(kernel), std::move(stride), std::move(padding), ceil_mode, false);
}

NodePtr adaptive_avg_pool2d(const char* name, const NodePtr& input, std::vector<int64_t> size) {
  const int64_t rank = image_rank(input);
  for (int64_t s : size)
    if (s <= 0) fail(Code::InvalidArgument, "output_size must be positive, got " + shape_string(size));
  return build(OpSpec{.name = name,
                      .run = [size](const Tensors& in, const Node&) { return at::adaptive_avg_pool2d(in[0], size); },
                      .batch = batch::same_dims_except({rank - 2, rank - 1}, "pools")},
               {input});
}

NodePtr upsample_nearest2d(const char* name, const NodePtr& input, std::vector<int64_t> scale) {
  const int64_t rank = image_rank(input);
  for (int64_t s : scale)
    if (s < 1) fail(Code::InvalidArgument, "scale must be 1 or more in each dim, got " + shape_string(scale));
  const std::vector<int64_t>& shape = input->meta.shape;
  const std::vector<int64_t> size{shape[static_cast<size_t>(rank - 2)] * scale[0],
                                  shape[static_cast<size_t>(rank - 1)] * scale[1]};
  return build(OpSpec{.name = name,
                      .run =
                          [size, scale, rank](const Tensors& in, const Node&) {
                            const at::Tensor x = rank == 3 ? in[0].unsqueeze(0) : in[0];
                            const at::Tensor y = at::upsample_nearest2d(x, size, static_cast<double>(scale[0]),
                                                                        static_cast<double>(scale[1]));
                            return rank == 3 ? y.squeeze(0) : y;
                          },
                      .batch = batch::same_dims_except({rank - 2, rank - 1}, "upsamples")},
               {input});
}

NodePtr batch_norm(const char* name, const NodePtr& input, const NodePtr& weight, const NodePtr& bias,
                   const NodePtr& running_mean, const NodePtr& running_var, bool train, double momentum, double eps) {
  require_floating(input, "x");
  if (rank_of(input) < 2)
    fail(Code::Shape,
         "batch_norm expects an input [N, C, ...] of rank 2 or more, got " + shape_string(input->meta.shape));
  if (!train && (!running_mean || !running_var))
    fail(Code::InvalidArgument, "running_mean and running_var are needed when training is 0");
  if (!(eps > 0)) fail(Code::InvalidArgument, "eps must be positive, got " + std::to_string(eps));
  // Per channel, samples stay apart but for the statistics of a batch norm in training,
  // which BatchStats::PerChunk lets each chunk compute for itself.
  BatchRule rule = [train, per_channel = batch::same_dims_except({1}, "applies per-channel statistics")](
                       const Metas& in, const Meta& out) {
    BatchResult r = per_channel(in, out);
    if (train && r.couples.empty()) r.stats_couples = "in training normalizes with statistics over the batch";
    return r;
  };
  Tensors stats_buffers;
  if (train)
    for (const NodePtr* n : {&running_mean, &running_var})
      if (*n && !(*n)->lazy()) stats_buffers.push_back((*n)->value);
  return build(OpSpec{.name = name,
                      .run =
                          [train, momentum, eps](const Tensors& in, const Node&) {
                            return observed_batch_norm(in[0], in[1], in[2], in[3], in[4], train, momentum, eps, false);
                          },
                      .batch = std::move(rule),
                      .signature = train ? "train" : "eval",
                      .mutates_state = train,
                      .stats_buffers = std::move(stats_buffers)},
               {input, weight, bias, running_mean, running_var});
}

NodePtr layer_norm(const char* name, const NodePtr& input, std::vector<int64_t> shape, const NodePtr& weight,
                   const NodePtr& bias, double eps) {
  require_floating(input, "x");
  if (shape.empty()) fail(Code::InvalidArgument, "normalized_shape must have at least one dim");
  if (!(eps > 0)) fail(Code::InvalidArgument, "eps must be positive, got " + std::to_string(eps));
  const int64_t rank = rank_of(input);
  const int64_t first = std::max<int64_t>(0, rank - static_cast<int64_t>(shape.size()));
  return build(OpSpec{.name = name,
                      .run = [shape, eps](const Tensors& in,
                                          const Node&) { return at::layer_norm(in[0], shape, in[1], in[2], eps); },
                      .batch = batch::same_dims_except(range(first, rank), "normalizes")},
               {input, weight, bias});
}

NodePtr embedding(const char* name, const NodePtr& w, const NodePtr& idx) {
  if (rank_of(w) != 2) fail(Code::Shape, "embedding needs a weight [num, dim], got " + shape_string(w->meta.shape));
  if (idx->meta.dtype != at::kLong && idx->meta.dtype != at::kInt)
    fail(Code::Dtype, std::string("indices must be KOILA_INT64 or KOILA_INT32, got ") + dtype_name(idx->meta.dtype));
  return build(OpSpec{.name = name,
                      .run = [](const Tensors& in, const Node&) { return at::embedding(in[0], in[1]); },
                      .batch =
                          [](const Metas& in, const Meta&) {
                            if (in[0]->batch_dim >= 0) return batch::couple("its weight is batched");
                            BatchResult r;
                            r.batch_dim = in[1]->batch_dim;
                            return r;
                          }},
               {w, idx});
}

NodePtr scaled_dot_product_attention(const char* name, const NodePtr& query, const NodePtr& key, const NodePtr& value,
                                     const NodePtr& mask, bool causal) {
  for (const NodePtr* t : {&query, &key, &value}) {
    require_floating(*t, "q, k and v");
    if (rank_of(*t) < 2)
      fail(Code::Shape, "q, k and v need rank 2 or more, got " + describe_inputs({query, key, value}));
  }
  const int64_t e = query->meta.shape.back(), s = key->meta.shape[rank_of(key) - 2];
  if (key->meta.shape.back() != e || value->meta.shape[rank_of(value) - 2] != s)
    fail(Code::Shape,
         "expected q [..., L, E], k [..., S, E], v [..., S, Ev], got " + describe_inputs({query, key, value}));
  if (mask && mask->meta.dtype != at::kBool && !at::isFloatingType(mask->meta.dtype))
    fail(Code::Dtype, std::string("attn_mask must be KOILA_BOOL or floating, got ") + dtype_name(mask->meta.dtype));
  return build(
      OpSpec{.name = name,
             .run = [causal](const Tensors& in, const Node&) { return attention(in[0], in[1], in[2], in[3], causal); },
             .batch = attention_batch,
             .signature = causal ? "causal" : ""},  // (the causal mask is made and applied)
      {query, key, value, mask});
}

}  // namespace koila::ops
