// The C entry points for modules (TorchScript and exported programs) and optimizers.
#include <c10/core/GradMode.h>
#include <sys/stat.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <unordered_set>

#include "api/args.h"
#include "api/convert.h"
#include "api/handles.h"
#include "base/error.h"
#include "base/text.h"
#include "graph/graph.h"
#include "module/module.h"
#include "run/zeroed_grads.h"

using namespace koila;

namespace {

// A module's parameters or buffers (named_parameters() / named_buffers() order), as the
// C API lists them: count, alias, name.
enum class Listing { Parameters, Buffers };

std::vector<std::pair<std::string, at::Tensor>> listed(const koila_module& m, Listing which) {
  return which == Listing::Parameters ? module_parameters(m) : module_buffers(m);
}

// The i-th, or a message saying how many there are.
std::pair<std::string, at::Tensor> listed_at(const koila_module& m, Listing which, size_t i) {
  auto all = listed(m, which);
  const char* what = which == Listing::Parameters ? "parameter" : "buffer";
  if (i >= all.size())
    fail(KOILA_ERROR_INVALID_ARGUMENT, std::string(what) + " index " + std::to_string(i) +
                                           " is out of range: the module has " + std::to_string(all.size()) + " " +
                                           what + "s");
  return std::move(all[i]);
}

void count_into(const koila_module* m, Listing which, size_t* out) {
  arg::not_null(out, "out");
  *out = listed(arg::handle(m, "m"), which).size();
}

void alias_into(koila_tensor** out, koila_module* m, Listing which, size_t i) {
  arg::out(out);
  *out = new_handle(make_constant(listed_at(arg::handle(m, "m"), which, i).second));
}

void name_into(const koila_module* m, Listing which, size_t i, char* buf, size_t capacity, size_t* needed) {
  const koila_module& module = arg::handle(m, "m");
  arg::buffer(buf, capacity);
  write_text(listed_at(module, which, i).first, buf, capacity, needed);
}

// Fails unless `path` names a regular file koila can read.
void check_readable(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) fail(KOILA_ERROR_IO, "cannot open '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(info.st_mode)) fail(KOILA_ERROR_IO, "cannot load '" + path + "': it is a directory");
  std::ifstream file(path, std::ios::binary);
  if (!file) fail(KOILA_ERROR_IO, "cannot open '" + path + "': " + std::strerror(errno));
}

void check_hyperparameter(double value, const char* name, double lo, bool lo_open, double hi, bool hi_open) {
  const bool ok = std::isfinite(value) && (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
  if (!ok)
    fail(KOILA_ERROR_INVALID_ARGUMENT, std::string(name) + " must be in " + (lo_open ? "(" : "[") + std::to_string(lo) +
                                           ", " + (std::isinf(hi) ? "inf" : std::to_string(hi)) +
                                           (hi_open ? ")" : "]") + ", got " + std::to_string(value));
}

// The concrete tensors an optimizer updates: floating-point leaves that require grad, each once.
std::vector<at::Tensor> optimizer_params(koila_tensor* const* params, size_t n) {
  if (n == 0) fail(KOILA_ERROR_INVALID_ARGUMENT, "an optimizer needs at least one parameter (n is 0)");
  const std::vector<NodePtr> nodes = arg::tensors(params, n, "params");
  std::vector<at::Tensor> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (size_t i = 0; i < n; ++i) {
    const std::string which = "parameter " + std::to_string(i);
    const NodePtr& node = nodes[i];
    if (node->lazy())
      fail(KOILA_ERROR_INVALID_ARGUMENT, which + " is lazy; an optimizer updates concrete tensors (parameters)");
    const at::Tensor& t = node->value;
    if (!at::isFloatingType(t.scalar_type()))
      fail(KOILA_ERROR_DTYPE, which + " must be floating point, but is " + dtype_name(t.scalar_type()));
    if (!t.is_leaf())
      fail(KOILA_ERROR_INVALID_ARGUMENT, which + " is computed from other tensors; an optimizer updates leaves");
    if (!t.requires_grad())
      fail(KOILA_ERROR_INVALID_ARGUMENT,
           which + " does not require grad, so it would never change (call koila_tensor_set_requires_grad first)");
    if (!seen.insert(t.unsafeGetTensorImpl()).second)
      fail(KOILA_ERROR_INVALID_ARGUMENT, which + " appears twice in the list");
    out.push_back(t);
  }
  return out;
}

}  // namespace

extern "C" {

KOILA_API koila_status* koila_module_load(koila_module** out, const char* path, const char* device) {
  return guard(__func__, [&] {
    arg::out(out);
    arg::not_null(path, "path");
    const c10::Device dev = parse_device(device);
    check_readable(path);
    auto m = std::make_unique<koila_module>();
    load_module(*m, path, dev);
    *out = m.release();
  });
}

KOILA_API koila_status* koila_module_save(const koila_module* m, const char* path) {
  return guard(__func__, [&] {
    const koila_module& module = arg::handle(m, "m");
    arg::not_null(path, "path");
    save_module(module, path);
  });
}

KOILA_API koila_status* koila_module_kind_of(const koila_module* m, koila_module_kind* out) {
  return guard(__func__, [&] {
    arg::not_null(out, "out");
    *out = arg::handle(m, "m").exported ? KOILA_MODULE_EXPORTED : KOILA_MODULE_TORCHSCRIPT;
  });
}

KOILA_API koila_status* koila_module_forward(koila_tensor** out, koila_module* m, koila_tensor* const* inputs,
                                             size_t n) {
  return guard(__func__, [&] {
    arg::out(out);
    koila_module& module = arg::handle(m, "m");
    const std::vector<NodePtr> nodes = arg::tensors(inputs, n, "inputs", true);
    *out = new_handle(module_forward(module, nodes));
  });
}

KOILA_API koila_status* koila_module_forward_all(koila_tensor** out, size_t capacity, size_t* count, koila_module* m,
                                                 koila_tensor* const* inputs, size_t n) {
  return guard(__func__, [&] {
    if (capacity > 0) arg::not_null(out, "out");
    arg::not_null(count, "count");
    koila_module& module = arg::handle(m, "m");
    const std::vector<NodePtr> nodes = arg::tensors(inputs, n, "inputs", true);
    const std::vector<NodePtr> results = module_forward_all(module, nodes, capacity, count);
    // Every handle made before any is written: a failure leaves out untouched.
    std::vector<std::unique_ptr<koila_tensor>> handles;
    for (const NodePtr& r : results) handles.emplace_back(r ? new_handle(r) : nullptr);
    for (size_t k = 0; k < handles.size(); ++k) out[k] = handles[k].release();
  });
}

KOILA_API koila_status* koila_module_train(koila_module* m, int on) {
  return guard(__func__, [&] {
    koila_module& module = arg::handle(m, "m");
    set_module_training(module, arg::flag(on, "on"));
  });
}

KOILA_API koila_status* koila_module_is_training(const koila_module* m, int* out) {
  return guard(__func__, [&] {
    arg::not_null(out, "out");
    *out = module_training(arg::handle(m, "m")) ? 1 : 0;
  });
}

KOILA_API koila_status* koila_module_num_parameters(const koila_module* m, size_t* out) {
  return guard(__func__, [&] { count_into(m, Listing::Parameters, out); });
}

KOILA_API koila_status* koila_module_parameter(koila_tensor** out, koila_module* m, size_t i) {
  return guard(__func__, [&] { alias_into(out, m, Listing::Parameters, i); });
}

KOILA_API koila_status* koila_module_parameter_name(const koila_module* m, size_t i, char* buf, size_t capacity,
                                                    size_t* needed) {
  return guard(__func__, [&] { name_into(m, Listing::Parameters, i, buf, capacity, needed); });
}

KOILA_API koila_status* koila_module_num_buffers(const koila_module* m, size_t* out) {
  return guard(__func__, [&] { count_into(m, Listing::Buffers, out); });
}

KOILA_API koila_status* koila_module_buffer(koila_tensor** out, koila_module* m, size_t i) {
  return guard(__func__, [&] { alias_into(out, m, Listing::Buffers, i); });
}

KOILA_API koila_status* koila_module_buffer_name(const koila_module* m, size_t i, char* buf, size_t capacity,
                                                 size_t* needed) {
  return guard(__func__, [&] { name_into(m, Listing::Buffers, i, buf, capacity, needed); });
}

KOILA_API void koila_module_free(koila_module* m) { delete m; }

KOILA_API koila_status* koila_optimizer_sgd(koila_optimizer** out, koila_tensor* const* params, size_t n, double lr,
                                            double momentum, double weight_decay) {
  return guard(__func__, [&] {
    arg::out(out);
    auto tensors = optimizer_params(params, n);
    const double inf = INFINITY;
    check_hyperparameter(lr, "lr", 0, false, inf, true);
    check_hyperparameter(momentum, "momentum", 0, false, inf, true);
    check_hyperparameter(weight_decay, "weight_decay", 0, false, inf, true);
    auto o = std::make_unique<koila_optimizer>();
    o->params = tensors;
    o->optimizer = std::make_unique<torch::optim::SGD>(
        tensors, torch::optim::SGDOptions(lr).momentum(momentum).weight_decay(weight_decay));
    *out = o.release();
  });
}

KOILA_API koila_status* koila_optimizer_adam(koila_optimizer** out, koila_tensor* const* params, size_t n, double lr,
                                             double beta1, double beta2, double eps, double weight_decay) {
  return guard(__func__, [&] {
    arg::out(out);
    auto tensors = optimizer_params(params, n);
    const double inf = INFINITY;
    check_hyperparameter(lr, "lr", 0, false, inf, true);
    check_hyperparameter(beta1, "beta1", 0, false, 1, true);
    check_hyperparameter(beta2, "beta2", 0, false, 1, true);
    check_hyperparameter(eps, "eps", 0, false, inf, true);
    check_hyperparameter(weight_decay, "weight_decay", 0, false, inf, true);
    auto o = std::make_unique<koila_optimizer>();
    o->params = tensors;
    o->optimizer = std::make_unique<torch::optim::Adam>(
        tensors,
        torch::optim::AdamOptions(lr).betas(std::make_tuple(beta1, beta2)).eps(eps).weight_decay(weight_decay));
    *out = o.release();
  });
}

KOILA_API koila_status* koila_optimizer_step(koila_optimizer* o) {
  return guard(__func__, [&] {
    koila_optimizer& opt = arg::handle(o, "o");
    try {
      opt.optimizer->step();
    } catch (const c10::Error&) {
      rethrow_torch_error("optimizer step", KOILA_ERROR_INVALID_ARGUMENT);
    }
  });
}

KOILA_API koila_status* koila_optimizer_zero_grad(koila_optimizer* o) {
  return guard(__func__, [&] {
    koila_optimizer& opt = arg::handle(o, "o");
    // In place, as koila_tensor_zero_grad: gradient handles stay valid.
    c10::NoGradGuard no_grad;
    for (at::Tensor& p : opt.params)
      if (p.grad().defined()) note_zeroed(p.mutable_grad().zero_());
  });
}

KOILA_API void koila_optimizer_free(koila_optimizer* o) { delete o; }

}  // extern "C"
