// Reductions and losses. A reduction over the batch dim ends the batch; the node records
// how chunks combine (sum, mean, max, min) so the planner can split exactly.
#include "ops/ops.h"

#include <array>

#include "graph/meta_kernels.h"
#include "ops/common.h"

using namespace koila;
using batch::Metas;

namespace {

using Reduce = at::Tensor (*)(const at::Tensor&, at::IntArrayRef, bool);

NodePtr reduction(const char* name, const NodePtr& input, const std::vector<int64_t>& given, bool keep, Reduce fn,
                  BatchReduction combine, bool floating_only = false) {
  if (floating_only) require_floating(input, "x");
  const int64_t rank = rank_of(input);
  std::vector<int64_t> d;
  for (int64_t dim : given) {
    const int64_t n = normalize_dim(dim, rank, "dim");
    if (std::find(d.begin(), d.end(), n) != d.end())
      fail(Code::InvalidArgument, "dim " + std::to_string(dim) + " appears more than once in dims");
    d.push_back(n);
  }
  // A mean averages over the reduced dims: that many elements per result element.
  CountFn count = [d](const Tensors& args) {
    double n = 1;
    if (d.empty()) return static_cast<double>(args[0].numel());
    for (int64_t dim : d) n *= static_cast<double>(args[0].size(dim));
    return n;
  };
  return build(OpSpec{.name = name,
                      .run = [fn, d, keep](const Tensors& in, const Node&) { return fn(in[0], d, keep); },
                      .batch = batch::reduce(d, keep, combine),
                      .probe_kernel = true,
                      .mean_count = std::move(count)},
               {input});
}

// The batch through a loss. `class_dim` is the dim of input 0 that the unreduced loss drops
// (-1: none); a target of input 0's rank keeps input 0's layout (class probabilities),
// a target of one dim less is laid out like the unreduced loss (class indices).
BatchRule loss_batch(int64_t class_dim, at::Reduction::Reduction r) {
  return [class_dim, r](const Metas& in, const Meta& out) {
    const Meta& x = *in[0];
    const Meta& t = *in[1];
    std::vector<int64_t> loss_shape = x.shape;
    if (class_dim >= 0) loss_shape.erase(loss_shape.begin() + class_dim);
    if (class_dim < 0) loss_shape = at::infer_size(x.shape, t.shape);
    const int64_t loss_rank = static_cast<int64_t>(loss_shape.size());
    auto position = [&](const Meta& m) -> int64_t {  // where m's batch is in the unreduced loss
      const int64_t rank = static_cast<int64_t>(m.shape.size());
      if (class_dim >= 0 && rank == static_cast<int64_t>(x.shape.size())) {
        if (m.batch_dim == class_dim) return -2;
        return m.batch_dim > class_dim ? m.batch_dim - 1 : m.batch_dim;
      }
      return m.batch_dim + loss_rank - rank;
    };
    int64_t pos = -1;
    for (size_t i = 0; i < 2; ++i) {
      const Meta& m = *in[i];
      if (m.batch_dim < 0) continue;
      const int64_t p = position(m);
      if (p == -2) return batch::couple("mixes the classes along the batch dim");
      if (p < 0 || loss_shape[p] != m.shape[m.batch_dim]) return batch::couple("broadcasts the batch dim");
      if (pos >= 0 && pos != p) return batch::couple("input and target carry their batch in different dims");
      pos = p;
    }
    for (size_t i = 0; i < 2; ++i) {
      const Meta& m = *in[i];
      if (m.batch_dim >= 0) continue;
      const int64_t rank = static_cast<int64_t>(m.shape.size());
      int64_t q = pos - (loss_rank - rank);
      if (class_dim >= 0 && rank == static_cast<int64_t>(x.shape.size())) q = pos >= class_dim ? pos + 1 : pos;
      if (q >= 0 && q < rank && m.shape[q] != 1)
        return batch::couple(std::string(i == 0 ? "the input" : "the target") + " of shape " + shape_string(m.shape) +
                             " is not batched but spans the batch dim; wrap it with "
                             "koila_lazy on the batch dim too");
    }
    BatchResult result;
    if (r == at::Reduction::None) {
      result.batch_dim = pos;
      if (static_cast<int64_t>(out.shape.size()) != loss_rank) return batch::couple("changes the rank of the loss");
    } else {
      result.reduction = r == at::Reduction::Mean ? BatchReduction::Mean : BatchReduction::Sum;
    }
    return result;
  };
}

using Loss = at::Tensor (*)(const at::Tensor&, const at::Tensor&, int64_t);

// The shape and dtype of a loss, from its meta kernels, remembered for the last few
// combinations of loss, reduction and the inputs' shapes and dtypes on this thread (all that
// the meta run reads): a training loop builds its loss anew every step, and the meta run
// cost about 9 us of every step of the corpus's embedding model (0.27 ms), lazy or eager.
// Inputs that the meta kernels refuse are refused at every build (nothing is remembered).
Meta loss_result(Loss fn, int64_t reduction, const Meta& x, const Meta& t) {
  struct Entry {
    Loss fn = nullptr;
    int64_t reduction = 0;
    at::ScalarType x_dtype = at::kFloat, t_dtype = at::kFloat;
    std::vector<int64_t> x_shape, t_shape;
    Meta result;
  };
  constexpr size_t kEntries = 8;
  thread_local std::array<Entry, kEntries> entries;
  thread_local size_t next = 0;
  for (const Entry& e : entries)
    if (e.fn == fn && e.reduction == reduction && e.x_dtype == x.dtype && e.t_dtype == t.dtype &&
        e.x_shape == x.shape && e.t_shape == t.shape)
      return e.result;
  const Meta result = meta_of(fn(meta_tensor(x), meta_tensor(t), reduction));
  entries[next++ % kEntries] = Entry{fn, reduction, x.dtype, t.dtype, x.shape, t.shape, result};
  return result;
}

NodePtr loss(const char* name, const NodePtr& x, const NodePtr& t, at::Reduction::Reduction reduction, Loss fn,
             bool has_classes) {
  require_floating(x, "the input");
  if (has_classes) {
    if (rank_of(x) == 0) fail(Code::Shape, "the input needs a class dim, got a scalar");
    const bool indices = !at::isFloatingType(t->meta.dtype);
    if (indices && t->meta.dtype != at::kLong)
      fail(Code::Dtype, std::string("class-index targets must be KOILA_INT64, got ") + dtype_name(t->meta.dtype));
  } else {
    require_floating(t, "the target");
    if (x->meta.shape != t->meta.shape)
      fail(Code::Shape, "input " + shape_string(x->meta.shape) + " and target " + shape_string(t->meta.shape) +
                            " must have the same shape");
  }
  const int64_t class_dim = has_classes ? (rank_of(x) == 1 ? 0 : 1) : -1;
  const int64_t red = reduction;
  // What a MEAN loss divides by: the targets that are not ignored (class indices, ignore
  // index -100), the samples and positions (class probabilities), or every element.
  CountFn count = [class_dim](const Tensors& args) {
    const at::Tensor& target = args[1];
    if (class_dim >= 0 && !at::isFloatingType(target.scalar_type()))
      return static_cast<double>(target.ne(-100).sum().item<int64_t>());
    if (class_dim >= 0) return static_cast<double>(target.numel() / std::max<int64_t>(target.size(class_dim), 1));
    return static_cast<double>(args[0].numel());
  };
  return build(OpSpec{.name = name,
                      .run = [fn, red](const Tensors& in, const Node&) { return fn(in[0], in[1], red); },
                      .batch = loss_batch(class_dim, reduction),
                      .mean_count = std::move(count),
                      .infer = [fn, red](const std::vector<const Meta*>& in,
                                         const Node&) { return loss_result(fn, red, *in[0], *in[1]); }},
               {x, t});
}

}  // namespace

namespace koila::ops {

NodePtr sum(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim) {
  return reduction(
      name, x, dims, keepdim, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return at::sum(t, d, k); },
      BatchReduction::Sum);
}

NodePtr mean(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim) {
  return reduction(
      name, x, dims, keepdim, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return at::mean(t, d, k); },
      BatchReduction::Mean, true);
}

NodePtr amax(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim) {
  return reduction(
      name, x, dims, keepdim, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return at::amax(t, d, k); },
      BatchReduction::Max);
}

NodePtr amin(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim) {
  return reduction(
      name, x, dims, keepdim, [](const at::Tensor& t, at::IntArrayRef d, bool k) { return at::amin(t, d, k); },
      BatchReduction::Min);
}

NodePtr argmax(const char* name, const NodePtr& input, int64_t dim, bool keep) {
  const int64_t d = normalize_dim(dim, rank_of(input), "dim");
  // LibTorch refuses it too, with an error whose type changed between versions.
  if (input->meta.dtype == at::kBool) fail(Code::Dtype, "argmax does not support KOILA_BOOL input");
  return build(OpSpec{.name = name,
                      .run = [d, keep](const Tensors& in, const Node&) { return at::argmax(in[0], d, keep); },
                      .batch = batch::reduce({d}, keep, BatchReduction::None),
                      .probe_kernel = true},
               {input});
}

NodePtr cross_entropy(const char* name, const NodePtr& logits, const NodePtr& target, at::Reduction::Reduction r) {
  return loss(
      name, logits, target, r,
      [](const at::Tensor& x, const at::Tensor& t, int64_t red) {
        return at::cross_entropy_loss(x, t, {}, red, -100, 0.0);
      },
      true);
}

NodePtr nll_loss(const char* name, const NodePtr& log_probs, const NodePtr& target, at::Reduction::Reduction r) {
  return loss(
      name, log_probs, target, r,
      [](const at::Tensor& x, const at::Tensor& t, int64_t red) { return at::nll_loss_nd(x, t, {}, red, -100); }, true);
}

NodePtr mse_loss(const char* name, const NodePtr& a, const NodePtr& b, at::Reduction::Reduction r) {
  return loss(name, a, b, r, mse_loss_as_allocated, false);
}

NodePtr l1_loss(const char* name, const NodePtr& a, const NodePtr& b, at::Reduction::Reduction r) {
  return loss(
      name, a, b, r, [](const at::Tensor& x, const at::Tensor& t, int64_t red) { return at::l1_loss(x, t, red); },
      false);
}

NodePtr binary_cross_entropy_with_logits(const char* name, const NodePtr& logits, const NodePtr& target,
                                         at::Reduction::Reduction r) {
  return loss(
      name, logits, target, r,
      [](const at::Tensor& x, const at::Tensor& t, int64_t red) {
        return at::binary_cross_entropy_with_logits(x, t, {}, {}, red);
      },
      false);
}

}  // namespace koila::ops
