// What the module suites share: owning handles for modules and optimizers, a koila handle
// for a module made in C++, a call's outcome, a module call expected to succeed, and walks
// over a module's TorchScript graphs.
#pragma once

#include <torch/csrc/jit/api/function_impl.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/handles.h"
#include "helpers.h"

namespace koila_test {

struct ModuleDeleter {
  void operator()(koila_module* m) const { koila_module_free(m); }
};
using ModuleHandle = std::unique_ptr<koila_module, ModuleDeleter>;
struct OptimizerDeleter {
  void operator()(koila_optimizer* o) const { koila_optimizer_free(o); }
};
using OptimizerHandle = std::unique_ptr<koila_optimizer, OptimizerDeleter>;

// A koila handle for a module made in C++ (the handle shares the module's objects).
inline ModuleHandle wrap(const torch::jit::Module& m) {
  return ModuleHandle(new koila_module{m, c10::Device(c10::kCPU)});
}

// The status of a call, freed; returns code and message.
// Handles aliasing the module's parameters, in order.
inline std::vector<Handle> parameters(koila_module* m) {
  size_t n = 0;
  koila_status_free(koila_module_num_parameters(m, &n));
  std::vector<Handle> out;
  for (size_t i = 0; i < n; ++i) {
    koila_tensor* p = nullptr;
    EXPECT_EQ(koila_module_parameter(&p, m, i), nullptr);
    out.emplace_back(p);
  }
  return out;
}

inline std::pair<koila_code, std::string> outcome(koila_status* s) {
  std::pair<koila_code, std::string> r{koila_status_code(s), koila_status_message(s)};
  koila_status_free(s);
  return r;
}

// The module's result for `inputs`, expecting success.
inline Handle forward(koila_module* m, std::vector<koila_tensor*> inputs) {
  koila_tensor* out = nullptr;
  koila_status* s = koila_module_forward(&out, m, inputs.data(), inputs.size());
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  return Handle(out);
}

// The gradients of a module's parameters (undefined where one has none), copied.
inline std::vector<at::Tensor> grads_of(const torch::jit::Module& m) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : m.parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return out;
}

// Drops every gradient of a module's parameters.
inline void clear_grads(const torch::jit::Module& m) {
  for (const at::Tensor& p : m.parameters()) p.mutable_grad() = at::Tensor();
}

// Every result of the module for `inputs` (koila_module_forward_all: the count first, with
// capacity 0, then the handles), expecting success; null handles for None.
inline std::vector<Handle> forward_all(koila_module* m, std::vector<koila_tensor*> inputs) {
  size_t count = 0;
  const auto [code, message] = outcome(koila_module_forward_all(nullptr, 0, &count, m, inputs.data(), inputs.size()));
  EXPECT_EQ(code, KOILA_ERROR_INVALID_ARGUMENT) << message;
  std::vector<koila_tensor*> raw(count, nullptr);
  koila_status* s = koila_module_forward_all(raw.data(), raw.size(), &count, m, inputs.data(), inputs.size());
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  std::vector<Handle> out;
  for (koila_tensor* t : raw) out.emplace_back(t);
  return out;
}

using Graphs = std::vector<std::shared_ptr<torch::jit::Graph>>;

// Calls `visit` for every node of the graphs, those of inner blocks included.
inline void for_each_node(const Graphs& graphs, const std::function<void(const torch::jit::Node*)>& visit) {
  std::function<void(torch::jit::Block*)> walk = [&](torch::jit::Block* block) {
    for (torch::jit::Node* n : block->nodes()) {
      visit(n);
      for (torch::jit::Block* inner : n->blocks()) walk(inner);
    }
  };
  for (const auto& g : graphs) walk(g->block());
}

// Counts the calls of `aten::<name>` and `koila::<name>` in graphs.
inline std::pair<size_t, size_t> count_calls(const Graphs& graphs, const char* name) {
  size_t aten = 0, koila = 0;
  const c10::Symbol a = c10::Symbol::fromQualString(std::string("aten::") + name);
  const c10::Symbol k = c10::Symbol::fromQualString(std::string("koila::") + name);
  for_each_node(graphs, [&](const torch::jit::Node* n) {
    aten += n->kind() == a;
    koila += n->kind() == k;
  });
  return {aten, koila};
}

// Every graph of the module's compilation unit (methods and free functions).
inline Graphs unit_graphs(const torch::jit::Module& m) {
  Graphs graphs;
  for (torch::jit::Function* fn : m._ivalue()->compilation_unit()->get_functions())
    if (fn->isGraphFunction()) graphs.push_back(torch::jit::toGraphFunction(*fn).graph());
  return graphs;
}

// The method graphs of a module and its submodules.
inline Graphs method_graphs(const torch::jit::Module& m) {
  Graphs graphs;
  for (const torch::jit::Module& sub : m.modules())
    for (const torch::jit::Method& method : sub.get_methods()) graphs.push_back(method.graph());
  return graphs;
}

}  // namespace koila_test
