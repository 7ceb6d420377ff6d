// Pt2Builder (pt2_builder.h), the module and its state: the module's name and baked-in mode, its
// tree of submodules, the payloads as the tensors the module holds (on the device, tied weights
// shared), and the program's inputs (parameters, buffers, constants and user inputs).
#include "module/pt2_builder.h"

#include <ATen/ATen.h>

#include <cctype>
#include <cstdint>
#include <string>
#include <utility>

#include "module/pt2_archive.h"

namespace koila::module_detail {

using torch::jit::Value;

std::string Pt2Builder::root_name(const Json& nodes) {
  // "L__self__,,__main__.M;...": the exported module's class, from the first node's stack.
  for (const Json& n : nodes) {
    const Json& meta = n.value("metadata", Json::object());
    const std::string stack = meta.value("nn_module_stack", std::string());
    const size_t end = stack.find(';');
    const std::string first = stack.substr(0, end);
    const size_t dot = first.rfind('.');
    if (first.rfind("L__self__,", 0) == 0 && dot != std::string::npos && dot + 1 < first.size()) {
      std::string cls = first.substr(dot + 1);
      for (char& c : cls)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
      return cls;
    }
  }
  return "ExportedProgram";
}

ExportedProgram::Mode Pt2Builder::baked_mode(const Json& nodes) const {
  bool train = false, eval = false;
  for (const Json& n : nodes) {
    const std::string target = n.value("target", std::string());
    const char* flag = nullptr;
    if (target == "torch.ops.aten.batch_norm.default" || target == "torch.ops.aten.instance_norm.default")
      flag = target.find("instance") != std::string::npos ? "use_input_stats" : "training";
    else if (target.find("dropout") != std::string::npos)
      flag = "train";
    else if (target == "torch.ops.aten._native_batch_norm_legit.default" ||
             target == "torch.ops.aten._native_batch_norm_legit_functional.default" ||
             target == "torch.ops.aten.native_batch_norm.default")
      flag = "training";
    else if (target == "torch.ops.aten._native_batch_norm_legit_no_training.default")
      eval = true;
    if (!flag || target.find("instance") != std::string::npos) continue;
    for (const Json& in : n.value("inputs", Json::array()))
      if (in.value("name", std::string()) == flag && in.contains("arg") && in.at("arg").contains("as_bool"))
        (in.at("arg").at("as_bool").get<bool>() ? train : eval) = true;
  }
  if (train) return ExportedProgram::Mode::Training;  // frozen batch norms in a training model train it still
  return eval ? ExportedProgram::Mode::Evaluation : ExportedProgram::Mode::Either;
}

torch::jit::Module Pt2Builder::submodule(const std::string& prefix) {
  if (prefix.empty()) return root_;
  auto found = modules_.find(prefix);
  if (found != modules_.end()) return found->second;
  const size_t dot = prefix.rfind('.');
  torch::jit::Module parent = submodule(dot == std::string::npos ? std::string() : prefix.substr(0, dot));
  const std::string leaf = dot == std::string::npos ? prefix : prefix.substr(dot + 1);
  std::string type = prefix;
  for (char& c : type)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  torch::jit::Module sub(c10::QualifiedName(*root_.type()->name(), "m_" + type), cu_, /*shouldMangle=*/true);
  sub.register_attribute("training", c10::BoolType::get(), info_.mode != ExportedProgram::Mode::Evaluation);
  parent.register_module(leaf, sub);
  modules_.emplace(prefix, sub);
  return sub;
}

std::pair<std::string, std::string> Pt2Builder::split_name(const std::string& dotted) {
  const size_t dot = dotted.rfind('.');
  if (dot == std::string::npos) return {"", dotted};
  return {dotted.substr(0, dot), dotted.substr(dot + 1)};
}

at::Tensor Pt2Builder::on_device(const at::Tensor& t) {
  if (device_.is_cpu()) return t;
  const at::Tensor base = t._base().defined() ? at::Tensor(t._base()) : t;
  auto found = moved_.find(base.unsafeGetTensorImpl());
  if (found == moved_.end()) found = moved_.emplace(base.unsafeGetTensorImpl(), base.to(device_)).first;
  return found->second.as_strided(t.sizes(), t.strides(), t.storage_offset());
}

at::Tensor Pt2Builder::tensor_of(const at::Tensor& stored, bool parameter) {
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(stored.storage().unsafeGetStorageImpl())) + "/" +
                    std::to_string(stored.storage_offset()) + "/" + c10::toString(stored.scalar_type());
  for (int64_t d : stored.sizes()) key += "," + std::to_string(d);
  key += ";";
  for (int64_t d : stored.strides()) key += "," + std::to_string(d);
  auto found = tensors_.find(key);
  if (found != tensors_.end()) return found->second;
  at::Tensor t = on_device(stored).detach();
  if (parameter) t.requires_grad_(true);
  return tensors_.emplace(key, t).first->second;
}

const Pt2Payload& Pt2Builder::payload(const std::string& name, bool constant) const {
  for (const Pt2Payload& p : constant ? a_.constants : a_.weights)
    if (p.name == name) return p;
  for (const Pt2Payload& p : constant ? a_.weights : a_.constants)
    if (p.name == name) return p;
  corrupt(path_, "the program uses '" + name + "', which the archive does not hold");
}

Value* Pt2Builder::attribute(const std::string& dotted) {
  Value* v = self_;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    v = graph_->insertGetAttr(v, dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

void Pt2Builder::inputs(const Json& specs) {
  for (const Json& spec : specs) {
    const auto [kind, body] = union_of(spec, path_, "an input spec");
    if (kind == "parameter" || kind == "buffer" || kind == "tensor_constant") {
      state_input(kind, *body);
      continue;
    }
    if (kind == "user_input") {
      user_input(*body);
      continue;
    }
    if (kind == "constant_input") {
      const std::string name = at_key(*body, "name", path_, "a constant input").get<std::string>();
      values_[name] = constant_value(at_key(*body, "value", path_, "a constant input"));
      continue;
    }
    unsupported(path_, "it has an input of kind '" + kind + "' (custom objects and effect tokens are not supported)");
  }
}

void Pt2Builder::state_input(const std::string& kind, const Json& body) {
  const std::string arg = at_key(at_key(body, "arg", path_, kind), "name", path_, kind).get<std::string>();
  const std::string name = at_key(body,
                                  kind == "parameter" ? "parameter_name"
                                  : kind == "buffer"  ? "buffer_name"
                                                      : "tensor_constant_name",
                                  path_, kind)
                               .get<std::string>();
  const bool persistent = kind == "buffer" ? body.value("persistent", true) : kind == "parameter";
  const at::Tensor value = tensor_of(payload(name, !persistent).value, kind == "parameter");
  const auto [prefix, leaf] = split_name(name);
  torch::jit::Module owner = submodule(prefix);
  // A tensor under two names (tied weights) is listed once, under the first, as
  // PyTorch's named_parameters() and named_buffers() list it.
  const bool first = listed_.insert(value.unsafeGetTensorImpl()).second;
  if (kind == "parameter") {
    owner.register_parameter(leaf, value, /*is_buffer=*/false);
    if (first) info_.parameters.push_back(name);
  } else if (kind == "buffer") {
    owner.register_buffer(leaf, value);
    if (first) info_.buffers.push_back(name);
  } else {
    owner.register_attribute(leaf, c10::TensorType::get(), value);
  }
  values_[arg] = attribute(name);
  if (!anchor_) anchor_ = values_[arg];
}

void Pt2Builder::user_input(const Json& body) {
  const auto [akind, arg] = union_of(at_key(body, "arg", path_, "a user input"), path_, "a user input");
  if (akind != "as_tensor")
    unsupported(path_, "its input " + std::to_string(info_.inputs.size()) + " is " + akind.substr(3) +
                           ", not a tensor; koila passes tensors only");
  const std::string name = at_key(*arg, "name", path_, "a user input").get<std::string>();
  Value* v = graph_->addInput(name);
  v->setType(c10::TensorType::get());
  values_[name] = v;
  if (!anchor_) anchor_ = v;
  ExportedProgram::Input in;
  in.name = name;
  const Json& meta = tensor_meta(name);
  in.dtype = pt2_dtype(at_key(meta, "dtype", path_, name).get<int>(), "input " + name);
  for (const Json& s : at_key(meta, "sizes", path_, name))
    in.sizes.push_back(s.contains("as_int") ? s.at("as_int").get<int64_t>() : -1);
  info_.inputs.push_back(std::move(in));
}

const Json& Pt2Builder::tensor_meta(const std::string& name) const {
  if (!tensor_values_->contains(name)) corrupt(path_, "the graph has no tensor meta for '" + name + "'");
  return tensor_values_->at(name);
}

}  // namespace koila::module_detail
