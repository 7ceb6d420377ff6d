// The koila command's view of the C API: statuses become CliError (a one-line message),
// handles free themselves. The command uses koila only through koila.h, as any program may.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "koila.h"

namespace koila_cli {

// What the command reports as "koila: error: <message>" with exit status 1 (2 for usage).
struct CliError : std::runtime_error {
  explicit CliError(const std::string& message, int exit_code = 1) : std::runtime_error(message), code(exit_code) {}
  int code;
};

// The first line of a message (TorchScript's complaints come with the source they point at).
std::string first_line(const std::string& text);

// Throws CliError("<context>: <the status's first line>") for a failed call; frees it.
void check(koila_status* s, const std::string& context);

struct TensorFree {
  void operator()(koila_tensor* t) const { koila_tensor_free(t); }
};
struct PlanFree {
  void operator()(koila_plan* p) const { koila_plan_free(p); }
};
struct ModuleFree {
  void operator()(koila_module* m) const { koila_module_free(m); }
};
struct TimelineFree {
  void operator()(koila_timeline* t) const { koila_timeline_free(t); }
};
using Tensor = std::unique_ptr<koila_tensor, TensorFree>;
using Plan = std::unique_ptr<koila_plan, PlanFree>;
using Module = std::unique_ptr<koila_module, ModuleFree>;
using Timeline = std::unique_ptr<koila_timeline, TimelineFree>;

// Bytes of one element of `dtype`.
size_t element_size(koila_dtype dtype);

}  // namespace koila_cli
