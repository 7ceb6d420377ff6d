// The C entry points for modules (TorchScript and exported programs).
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include "api/args.h"
#include "api/convert.h"
#include "api/handles.h"
#include "base/error.h"
#include "base/text.h"
#include "graph/graph.h"
#include "module/module.h"

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
    fail(Code::InvalidArgument, std::string(what) + " index " + std::to_string(i) +
                                    " is out of range: the module has " + std::to_string(all.size()) + " " + what +
                                    "s");
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
  if (::stat(path.c_str(), &info) != 0) fail(Code::Io, "cannot open '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(info.st_mode)) fail(Code::Io, "cannot load '" + path + "': it is a directory");
  std::ifstream file(path, std::ios::binary);
  if (!file) fail(Code::Io, "cannot open '" + path + "': " + std::strerror(errno));
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

}  // extern "C"
