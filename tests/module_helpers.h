// What the module suites share: owning handles for modules and optimizers, a koila handle
// for a module made in C++, a call's outcome, and a module call expected to succeed.
#pragma once

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

}  // namespace koila_test
