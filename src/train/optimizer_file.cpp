#include "train/optimizer_file.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/error.h"
#include "base/framed_file.h"
#include "base/libtorch_compat.h"
#include "base/text.h"

namespace koila {
namespace {

using nlohmann::json;

const FrameKind kOptimizerFile{
    "KOILAOPT", 1, "the optimizer state", "an optimizer state", "the optimizer is unchanged", "the optimizer state"};

// One parameter's state as the file holds it.
struct State {
  bool present = false;                                     // false: the parameter has not been stepped yet
  int64_t step = 0;                                         // Adam and AdamW
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // defined ones, in this order
};

// The state tensors each kind keeps, and which it must have.
struct Slot {
  const char* name;
  bool required;
};
std::vector<Slot> slots(OptimizerKind kind) {
  if (kind == OptimizerKind::Sgd) return {{"momentum_buffer", true}};
  return {{"exp_avg", true}, {"exp_avg_sq", true}, {"max_exp_avg_sq", false}};
}

template <class AdamState>
State adam_state(const torch::optim::OptimizerParamState& s) {
  const auto& a = static_cast<const AdamState&>(s);
  State out;
  out.present = true;
  out.step = a.step();
  for (auto& [name, t] : {std::make_pair("exp_avg", a.exp_avg()), std::make_pair("exp_avg_sq", a.exp_avg_sq()),
                          std::make_pair("max_exp_avg_sq", a.max_exp_avg_sq())})
    if (t.defined()) out.tensors.emplace_back(name, t);
  return out;
}

State state_of(const Optimizer& o, const at::Tensor& param) {
  const torch::optim::OptimizerParamState* s =
      compat::param_state(const_cast<torch::optim::Optimizer&>(*o.optimizer), param);
  if (s == nullptr) return {};
  switch (o.kind) {
    case OptimizerKind::Sgd: {
      State out;
      out.present = true;
      const at::Tensor& buf = static_cast<const torch::optim::SGDParamState&>(*s).momentum_buffer();
      if (buf.defined()) out.tensors.emplace_back("momentum_buffer", buf);
      return out;
    }
    case OptimizerKind::Adam: return adam_state<torch::optim::AdamParamState>(*s);
    case OptimizerKind::AdamW: return adam_state<torch::optim::AdamWParamState>(*s);
  }
  return {};
}

at::Tensor named(const State& s, const std::string& name) {
  for (const auto& [n, t] : s.tensors)
    if (n == name) return t;
  return {};
}

template <class AdamState>
std::unique_ptr<torch::optim::OptimizerParamState> make_adam_state(const State& s) {
  auto a = std::make_unique<AdamState>();
  a->step(s.step);
  a->exp_avg(named(s, "exp_avg"));
  a->exp_avg_sq(named(s, "exp_avg_sq"));
  a->max_exp_avg_sq(named(s, "max_exp_avg_sq"));
  return a;
}

std::unique_ptr<torch::optim::OptimizerParamState> make_state(OptimizerKind kind, const State& s) {
  if (!s.present) return nullptr;
  switch (kind) {
    case OptimizerKind::Sgd: {
      auto out = std::make_unique<torch::optim::SGDParamState>();
      out->momentum_buffer(named(s, "momentum_buffer"));
      return out;
    }
    case OptimizerKind::Adam: return make_adam_state<torch::optim::AdamParamState>(s);
    case OptimizerKind::AdamW: return make_adam_state<torch::optim::AdamWParamState>(s);
  }
  return nullptr;
}

json hyperparameters_json(OptimizerKind kind, const Hyperparameters& h) {
  if (kind == OptimizerKind::Sgd) return {{"lr", h.lr}, {"momentum", h.momentum}, {"weight_decay", h.weight_decay}};
  return {{"lr", h.lr}, {"beta1", h.beta1}, {"beta2", h.beta2}, {"eps", h.eps}, {"weight_decay", h.weight_decay}};
}

uint64_t element_bytes(const at::Tensor& param) { return uint64_t(param.numel()) * param.element_size(); }

// --- reading ---

template <class T>
T field(const json& j, const char* key, const FrameReader& in) {
  if (!j.is_object() || !j.contains(key)) in.corrupt(std::string("its header has no \"") + key + "\"");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    in.corrupt(std::string("its header's \"") + key + "\" is malformed (" + e.what() + ")");
  }
}

}  // namespace

void save_optimizer(const Optimizer& o, const std::string& path) {
  c10::NoGradGuard no_grad;
  json params = json::array();
  std::vector<at::Tensor> payload;
  uint64_t offset = 0;
  for (const at::Tensor& p : o.params) {
    json entry = {{"dtype", dtype_name(p.scalar_type())}, {"shape", p.sizes().vec()}, {"state", nullptr}};
    const State s = state_of(o, p);
    if (s.present) {
      json tensors = json::array();
      for (const auto& [name, t] : s.tensors) {
        if (t.scalar_type() != p.scalar_type() || t.sizes() != p.sizes())
          fail(Code::Internal, "the optimizer's " + name + " does not have its parameter's dtype and shape");
        tensors.push_back({{"name", name}, {"offset", offset}, {"bytes", element_bytes(t)}});
        offset += element_bytes(t);
        payload.push_back(t);
      }
      entry["state"] = {{"step", s.step}, {"tensors", tensors}};
    }
    params.push_back(std::move(entry));
  }
  const json header = {{"kind", optimizer_kind_name(o.kind)},
                       {"hyperparameters", hyperparameters_json(o.kind, hyperparameters(o))},
                       {"parameters", std::move(params)}};
  const std::string text = header.dump();

  FrameWriter out(path, kOptimizerFile, text, offset);
  // One tensor at a time on the host (a CUDA optimizer's state is not copied whole).
  for (const at::Tensor& t : payload) {
    const at::Tensor host = t.to(at::kCPU).contiguous();
    out.put(host.data_ptr(), element_bytes(host));
  }
  out.commit();
}

void load_optimizer(Optimizer& o, const std::string& path) {
  c10::NoGradGuard no_grad;
  FrameReader in(path, kOptimizerFile);
  json header;
  try {
    header = json::parse(in.header());
  } catch (const json::exception& e) {
    in.corrupt(std::string("its header is not JSON (") + e.what() + ")");
  }

  // What the file is for, against this optimizer: the first mismatch is the caller's.
  const std::string kind = field<std::string>(header, "kind", in);
  if (kind != optimizer_kind_name(o.kind))
    fail(Code::InvalidArgument, "'" + path + "' holds the state of an " + kind + " optimizer, and this one is " +
                                    optimizer_kind_name(o.kind) + "; the optimizer is unchanged");
  const json params = field<json>(header, "parameters", in);
  if (!params.is_array()) in.corrupt("its header's \"parameters\" is not a list");
  if (params.size() != o.params.size())
    fail(Code::InvalidArgument, "'" + path + "' holds the state of " + std::to_string(params.size()) +
                                    " parameters, and this optimizer has " + std::to_string(o.params.size()) +
                                    "; the optimizer is unchanged");
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = o.params[i];
    const auto dtype = field<std::string>(params[i], "dtype", in);
    const auto shape = field<std::vector<int64_t>>(params[i], "shape", in);
    if (dtype != dtype_name(p.scalar_type()) || at::IntArrayRef(shape) != p.sizes())
      fail(Code::InvalidArgument, "parameter " + std::to_string(i) + " does not match '" + path + "': the file's is " +
                                      dtype + " " + shape_string(shape) + ", this optimizer's " +
                                      dtype_name(p.scalar_type()) + " " + shape_string(p.sizes()) +
                                      "; the optimizer is unchanged");
  }

  // The hyperparameters, in the ranges the constructors take.
  const json hj = field<json>(header, "hyperparameters", in);
  Hyperparameters h;
  h.lr = field<double>(hj, "lr", in);
  h.weight_decay = field<double>(hj, "weight_decay", in);
  if (o.kind == OptimizerKind::Sgd) {
    h.momentum = field<double>(hj, "momentum", in);
  } else {
    h.beta1 = field<double>(hj, "beta1", in);
    h.beta2 = field<double>(hj, "beta2", in);
    h.eps = field<double>(hj, "eps", in);
  }
  try {
    check_hyperparameters(o.kind, h);
  } catch (const Error& e) {
    in.corrupt(std::string("its hyperparameters are out of range (") + e.what() + ")");
  }

  // Every state, read into new tensors on the parameters' devices, before anything changes.
  std::vector<State> states(params.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const json sj = field<json>(params[i], "state", in);
    if (sj.is_null()) continue;
    const at::Tensor& p = o.params[i];
    State& s = states[i];
    s.present = true;
    s.step = field<int64_t>(sj, "step", in);
    if (s.step < 0) in.corrupt("parameter " + std::to_string(i) + "'s step count is negative");
    const json tensors = field<json>(sj, "tensors", in);
    if (!tensors.is_array()) in.corrupt("parameter " + std::to_string(i) + "'s state tensors are not a list");
    for (const json& tj : tensors) {
      const auto name = field<std::string>(tj, "name", in);
      const auto at_offset = field<uint64_t>(tj, "offset", in);
      const auto bytes = field<uint64_t>(tj, "bytes", in);
      const std::vector<Slot> known = slots(o.kind);
      if (std::none_of(known.begin(), known.end(), [&](const Slot& k) { return name == k.name; }) ||
          named(s, name).defined())
        in.corrupt("parameter " + std::to_string(i) + " has an unknown or repeated state tensor \"" + name + "\"");
      if (at_offset != offset || bytes != element_bytes(p) || offset + bytes > in.payload_bytes())
        in.corrupt("parameter " + std::to_string(i) + "'s " + name + " is not where the header says");
      at::Tensor host = at::empty(p.sizes(), p.options().device(at::kCPU).requires_grad(false));
      in.read(host.data_ptr(), bytes);
      // On the parameter's device, laid out as the parameter (as torch::optim makes it).
      at::Tensor t = at::empty_like(p, p.options().requires_grad(false));
      t.copy_(host);
      s.tensors.emplace_back(name, t);
      offset += bytes;
    }
    for (const Slot& k : slots(o.kind))
      if (k.required && !named(s, k.name).defined())
        in.corrupt("parameter " + std::to_string(i) + "'s state has no " + k.name);
  }
  if (offset != in.payload_bytes()) in.corrupt("its payload has bytes no state tensor claims");

  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> made;
  made.reserve(states.size());
  for (const State& s : states) made.push_back(make_state(o.kind, s));
  // Nothing below throws but allocation in the state map.
  set_hyperparameters(o, h);
  for (size_t i = 0; i < made.size(); ++i) compat::set_param_state(*o.optimizer, o.params[i], std::move(made[i]));
}

}  // namespace koila
