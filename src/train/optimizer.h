// The optimizers of the C API (koila_optimizer_sgd, _adam, _adamw): torch::optim's, with
// the kind and hyperparameters kept where a state file (optimizer_file.h) can read and
// restore them.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

namespace koila {

enum class OptimizerKind { Sgd, Adam, AdamW };

// "SGD", "Adam", "AdamW": as messages and state files name them.
const char* optimizer_kind_name(OptimizerKind kind);

// What each kind takes (SGD: lr, momentum, weight_decay; Adam and AdamW: lr, beta1, beta2,
// eps, weight_decay; the rest stay 0).
struct Hyperparameters {
  double lr = 0, momentum = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
};

struct Optimizer {
  OptimizerKind kind = OptimizerKind::Sgd;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<at::Tensor> params;  // in the order given, which a state file follows
};

// Checks the hyperparameters' ranges (Code::InvalidArgument naming the first out of
// range) and makes the optimizer over `params`.
void make_optimizer(Optimizer& out, OptimizerKind kind, std::vector<at::Tensor> params, const Hyperparameters& h);
// The same checks alone (a state file's hyperparameters go through them too).
void check_hyperparameters(OptimizerKind kind, const Hyperparameters& h);

Hyperparameters hyperparameters(const Optimizer& o);
// Replaces every hyperparameter, the learning rate included (checked first).
void set_hyperparameters(Optimizer& o, const Hyperparameters& h);
void set_learning_rate(Optimizer& o, double lr);

}  // namespace koila
