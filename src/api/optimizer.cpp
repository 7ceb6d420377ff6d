// The C entry points for optimizers, their state files and gradient clipping.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <memory>
#include <unordered_set>

#include "api/args.h"
#include "api/handles.h"
#include "base/error.h"
#include "base/text.h"
#include "graph/graph.h"
#include "run/zeroed_grads.h"
#include "train/clip.h"
#include "train/optimizer_file.h"

using namespace koila;

namespace {

// The concrete tensors an optimizer updates (or clipping scales the gradients of):
// floating-point leaves that require grad, each once.
std::vector<at::Tensor> concrete_params(koila_tensor* const* params, size_t n, const char* who) {
  const std::vector<NodePtr> nodes = arg::tensors(params, n, "params", true);
  std::vector<at::Tensor> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (size_t i = 0; i < n; ++i) {
    const std::string which = "parameter " + std::to_string(i);
    const NodePtr& node = nodes[i];
    if (node->lazy()) fail(Code::InvalidArgument, which + " is lazy; " + who + " concrete tensors (parameters)");
    const at::Tensor& t = node->value;
    if (!at::isFloatingType(t.scalar_type()))
      fail(Code::Dtype, which + " must be floating point, but is " + dtype_name(t.scalar_type()));
    if (!t.is_leaf()) fail(Code::InvalidArgument, which + " is computed from other tensors; " + who + " leaves");
    if (!t.requires_grad())
      fail(Code::InvalidArgument,
           which + " does not require grad, so it never has a gradient (call koila_tensor_set_requires_grad first)");
    if (!seen.insert(t.unsafeGetTensorImpl()).second) fail(Code::InvalidArgument, which + " appears twice in the list");
    out.push_back(t);
  }
  return out;
}

void make_into(koila_optimizer** out, koila_tensor* const* params, size_t n, OptimizerKind kind,
               const Hyperparameters& h) {
  arg::out(out);
  if (n == 0) fail(Code::InvalidArgument, "an optimizer needs at least one parameter (n is 0)");
  auto tensors = concrete_params(params, n, "an optimizer updates");
  auto o = std::make_unique<koila_optimizer>();
  make_optimizer(*o, kind, std::move(tensors), h);
  *out = o.release();
}

}  // namespace

extern "C" {

KOILA_API koila_status* koila_optimizer_sgd(koila_optimizer** out, koila_tensor* const* params, size_t n, double lr,
                                            double momentum, double weight_decay) {
  return guard(__func__, [&] {
    Hyperparameters h;
    h.lr = lr;
    h.momentum = momentum;
    h.weight_decay = weight_decay;
    make_into(out, params, n, OptimizerKind::Sgd, h);
  });
}

KOILA_API koila_status* koila_optimizer_adam(koila_optimizer** out, koila_tensor* const* params, size_t n, double lr,
                                             double beta1, double beta2, double eps, double weight_decay) {
  return guard(__func__, [&] {
    make_into(out, params, n, OptimizerKind::Adam, Hyperparameters{lr, 0, beta1, beta2, eps, weight_decay});
  });
}

KOILA_API koila_status* koila_optimizer_adamw(koila_optimizer** out, koila_tensor* const* params, size_t n, double lr,
                                              double beta1, double beta2, double eps, double weight_decay) {
  return guard(__func__, [&] {
    make_into(out, params, n, OptimizerKind::AdamW, Hyperparameters{lr, 0, beta1, beta2, eps, weight_decay});
  });
}

KOILA_API koila_status* koila_optimizer_set_lr(koila_optimizer* o, double lr) {
  return guard(__func__, [&] { set_learning_rate(arg::handle(o, "o"), lr); });
}

KOILA_API koila_status* koila_optimizer_lr(const koila_optimizer* o, double* out) {
  return guard(__func__, [&] {
    arg::not_null(out, "out");
    *out = hyperparameters(arg::handle(o, "o")).lr;
  });
}

KOILA_API koila_status* koila_optimizer_step(koila_optimizer* o) {
  return guard(__func__, [&] {
    koila_optimizer& opt = arg::handle(o, "o");
    try {
      opt.optimizer->step();
    } catch (const c10::Error&) {
      rethrow_torch_error("optimizer step", Code::InvalidArgument);
    }
  });
}

KOILA_API koila_status* koila_optimizer_zero_grad(koila_optimizer* o) {
  return guard(__func__, [&] {
    koila_optimizer& opt = arg::handle(o, "o");
    // In place, as koila_tensor_zero_grad: gradient handles stay valid. A parameter without
    // a gradient gets a zero one, so that every step's backward starts alike: a chunked
    // backward adds into an existing .grad in another order than it makes a new one, and a
    // run resumed from a checkpoint (no .grad yet) must round as the run that never stopped.
    c10::NoGradGuard no_grad;
    for (at::Tensor& p : opt.params) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p, at::MemoryFormat::Contiguous);
      note_zeroed(p.mutable_grad().zero_());
    }
  });
}

KOILA_API koila_status* koila_optimizer_save(const koila_optimizer* o, const char* path) {
  return guard(__func__, [&] {
    const koila_optimizer& opt = arg::handle(o, "o");
    arg::not_null(path, "path");
    save_optimizer(opt, path);
  });
}

KOILA_API koila_status* koila_optimizer_load(koila_optimizer* o, const char* path) {
  return guard(__func__, [&] {
    koila_optimizer& opt = arg::handle(o, "o");
    arg::not_null(path, "path");
    load_optimizer(opt, path);
  });
}

KOILA_API void koila_optimizer_free(koila_optimizer* o) { delete o; }

KOILA_API koila_status* koila_clip_grad_norm(double* out, koila_tensor* const* params, size_t n, double max_norm) {
  return guard(__func__, [&] {
    arg::not_null(out, "out");
    const std::vector<at::Tensor> tensors = concrete_params(params, n, "clipping scales the gradients of");
    if (!std::isfinite(max_norm) || max_norm < 0)
      fail(Code::InvalidArgument, "max_norm must be in [0, inf), got " + std::to_string(max_norm));
    const Clipped clipped = clip_grad_norm(tensors, max_norm);
    *out = clipped.norm;
    if (!clipped.scaled)
      fail(Code::InvalidArgument, "the gradients' total norm is " + std::to_string(clipped.norm) +
                                      " (an inf or NaN in a gradient), so it cannot be clipped; no gradient "
                                      "was changed (skip this step)");
  });
}

}  // extern "C"
