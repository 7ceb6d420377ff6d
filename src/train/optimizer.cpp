#include "train/optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <string>
#include <tuple>

#include "base/error.h"

namespace koila {
namespace {

void check(double value, const char* name, double lo, bool lo_open, double hi, bool hi_open) {
  const bool ok = std::isfinite(value) && (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
  if (!ok)
    fail(Code::InvalidArgument, std::string(name) + " must be in " + (lo_open ? "(" : "[") + std::to_string(lo) + ", " +
                                    (std::isinf(hi) ? "inf" : std::to_string(hi)) + (hi_open ? ")" : "]") + ", got " +
                                    std::to_string(value));
}

// One parameter group: koila makes every optimizer over a single group.
torch::optim::OptimizerOptions& options(const Optimizer& o) {
  return const_cast<torch::optim::Optimizer&>(*o.optimizer).param_groups().at(0).options();
}

}  // namespace

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::Sgd: return "SGD";
    case OptimizerKind::Adam: return "Adam";
    case OptimizerKind::AdamW: return "AdamW";
  }
  return "?";
}

void check_hyperparameters(OptimizerKind kind, const Hyperparameters& h) {
  const double inf = INFINITY;
  check(h.lr, "lr", 0, false, inf, true);
  if (kind == OptimizerKind::Sgd) {
    check(h.momentum, "momentum", 0, false, inf, true);
  } else {
    check(h.beta1, "beta1", 0, false, 1, true);
    check(h.beta2, "beta2", 0, false, 1, true);
    check(h.eps, "eps", 0, false, inf, true);
  }
  check(h.weight_decay, "weight_decay", 0, false, inf, true);
}

void make_optimizer(Optimizer& out, OptimizerKind kind, std::vector<at::Tensor> params, const Hyperparameters& h) {
  check_hyperparameters(kind, h);
  out.kind = kind;
  out.params = std::move(params);
  // Made with the learning rate alone, then given every hyperparameter as a load would.
  switch (kind) {
    case OptimizerKind::Sgd:
      out.optimizer = std::make_unique<torch::optim::SGD>(out.params, torch::optim::SGDOptions(h.lr));
      break;
    case OptimizerKind::Adam:
      out.optimizer = std::make_unique<torch::optim::Adam>(out.params, torch::optim::AdamOptions(h.lr));
      break;
    case OptimizerKind::AdamW:
      out.optimizer = std::make_unique<torch::optim::AdamW>(out.params, torch::optim::AdamWOptions(h.lr));
      break;
  }
  set_hyperparameters(out, h);
}

namespace {

// Adam's and AdamW's options have the same fields under different types.
template <class Options>
void read_adam(const torch::optim::OptimizerOptions& opts, Hyperparameters& h) {
  const auto& a = static_cast<const Options&>(opts);
  h.lr = a.lr();
  std::tie(h.beta1, h.beta2) = a.betas();
  h.eps = a.eps();
  h.weight_decay = a.weight_decay();
}

template <class Options>
void write_adam(torch::optim::OptimizerOptions& opts, const Hyperparameters& h) {
  static_cast<Options&>(opts).lr(h.lr).betas(std::make_tuple(h.beta1, h.beta2)).eps(h.eps).weight_decay(h.weight_decay);
}

}  // namespace

Hyperparameters hyperparameters(const Optimizer& o) {
  Hyperparameters h;
  auto& opts = options(o);
  switch (o.kind) {
    case OptimizerKind::Sgd: {
      auto& s = static_cast<torch::optim::SGDOptions&>(opts);
      h.lr = s.lr();
      h.momentum = s.momentum();
      h.weight_decay = s.weight_decay();
      break;
    }
    case OptimizerKind::Adam: read_adam<torch::optim::AdamOptions>(opts, h); break;
    case OptimizerKind::AdamW: read_adam<torch::optim::AdamWOptions>(opts, h); break;
  }
  return h;
}

void set_hyperparameters(Optimizer& o, const Hyperparameters& h) {
  check_hyperparameters(o.kind, h);
  auto& opts = options(o);
  switch (o.kind) {
    case OptimizerKind::Sgd:
      static_cast<torch::optim::SGDOptions&>(opts).lr(h.lr).momentum(h.momentum).weight_decay(h.weight_decay);
      break;
    case OptimizerKind::Adam: write_adam<torch::optim::AdamOptions>(opts, h); break;
    case OptimizerKind::AdamW: write_adam<torch::optim::AdamWOptions>(opts, h); break;
  }
}

void set_learning_rate(Optimizer& o, double lr) {
  Hyperparameters h = hyperparameters(o);
  h.lr = lr;
  set_hyperparameters(o, h);
}

}  // namespace koila
