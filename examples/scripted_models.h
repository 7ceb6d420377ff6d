// TorchScript models made in C++ without Python: a module, its parameters and buffers
// registered by hand, and its forward compiled from TorchScript source with `define`.
// Used by make_models (which writes them to files for the C example and tests), the
// tests and the benchmarks.
//
// Two things differ from torch.jit.script in Python: register_parameter does not set
// requires_grad (done here), and torch.nn.functional does not resolve, so the source
// calls aten ops by their torch.* names (torch.conv2d, torch.relu, torch.linear, ...).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>

#include <string>
#include <utility>
#include <vector>

namespace scripted {

struct Tensor {
  std::string name;
  at::Tensor value;
};

// A module named `name` with parameters (requiring grad), buffers and a `training` flag.
inline torch::jit::Module module(const std::string& name, const std::vector<Tensor>& params,
                                 const std::vector<Tensor>& buffers, const std::string& source) {
  torch::jit::Module m(name);
  for (const Tensor& p : params) m.register_parameter(p.name, p.value.detach().clone().requires_grad_(true), false);
  for (const Tensor& b : buffers) m.register_buffer(b.name, b.value.detach().clone());
  m.register_attribute("training", c10::BoolType::get(), true);
  m.define(source);
  return m;
}

inline at::Tensor init(std::vector<int64_t> shape, double scale) { return at::randn(shape) * scale; }

// conv 3->16 (3x3, pad 1), relu, 2x2 max pool, conv 16->32, relu, 2x2 max pool, linear to
// 10 classes, with dropout before the linear layer (p = `dropout`). Input [N, 3, 32, 32].
inline torch::jit::Module cnn(uint64_t seed = 0, double dropout = 0.0) {
  at::manual_seed(seed);
  return module("ConvNet",
                {{"conv1_weight", init({16, 3, 3, 3}, 0.2)},
                 {"conv1_bias", init({16}, 0.01)},
                 {"conv2_weight", init({32, 16, 3, 3}, 0.08)},
                 {"conv2_bias", init({32}, 0.01)},
                 {"fc_weight", init({10, 32 * 8 * 8}, 0.02)},
                 {"fc_bias", init({10}, 0.01)}},
                {},
                "def forward(self, x):\n"
                "    x = torch.relu(torch.conv2d(x, self.conv1_weight, self.conv1_bias, [1, 1], [1, 1]))\n"
                "    x = torch.max_pool2d(x, [2, 2])\n"
                "    x = torch.relu(torch.conv2d(x, self.conv2_weight, self.conv2_bias, [1, 1], [1, 1]))\n"
                "    x = torch.max_pool2d(x, [2, 2])\n"
                "    x = torch.flatten(x, 1)\n"
                "    x = torch.dropout(x, " +
                    std::to_string(dropout) +
                    ", self.training)\n"
                    "    return torch.linear(x, self.fc_weight, self.fc_bias)\n");
}

// linear 784->256, relu, linear 256->10, as two submodules. Input [N, 784].
// `activation`: a torch function of one tensor between the layers (relu, or tanh where a
// test compares gradients of runs in different chunks: ReLU's gradient jumps where a
// pre-activation is within rounding of zero, and chunks round matrix products differently).
inline torch::jit::Module mlp(uint64_t seed = 0, const std::string& activation = "relu") {
  at::manual_seed(seed);
  const std::string linear = "def forward(self, x):\n    return torch.linear(x, self.weight, self.bias)\n";
  torch::jit::Module fc1 =
      module("Linear1", {{"weight", init({256, 784}, 0.03)}, {"bias", init({256}, 0.01)}}, {}, linear);
  torch::jit::Module fc2 =
      module("Linear2", {{"weight", init({10, 256}, 0.06)}, {"bias", init({10}, 0.01)}}, {}, linear);
  torch::jit::Module m("MLP");
  m.register_module("fc1", fc1);
  m.register_module("fc2", fc2);
  m.register_attribute("training", c10::BoolType::get(), true);
  m.define("def forward(self, x):\n    return self.fc2.forward(torch." + activation + "(self.fc1.forward(x)))\n");
  return m;
}

// Batch norm over 8 channels with running statistics. Input [N, 8].
inline torch::jit::Module batch_norm(uint64_t seed = 0) {
  at::manual_seed(seed);
  return module("BatchNorm", {{"weight", 1 + init({8}, 0.1)}, {"bias", init({8}, 0.1)}},
                {{"running_mean", at::zeros({8})}, {"running_var", at::ones({8})}},
                "def forward(self, x):\n"
                "    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,\n"
                "                            self.training, 0.1, 1e-5, False)\n");
}

}  // namespace scripted
