// Pt2Builder (pt2_builder.h), values: what a node's arguments stand for, as values of the graph:
// constants, values computed so far by name, devices (the export device as the device the
// program runs on), symbolic sizes, lists, and each argument as the operator's formal type takes it.
#include "module/pt2_builder.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "module/pt2_archive.h"

namespace koila::module_detail {

using torch::jit::Node;
using torch::jit::Value;

Value* Pt2Builder::constant(const c10::IValue& v) { return graph_->insertConstant(v); }

Value* Pt2Builder::constant_value(const Json& c) {
  const auto [kind, body] = union_of(c, path_, "a constant");
  if (kind == "as_none") return constant(c10::IValue());
  if (kind == "as_int") return constant(body->get<int64_t>());
  if (kind == "as_float") return constant(body->get<double>());
  if (kind == "as_bool") return constant(body->get<bool>());
  if (kind == "as_string") return constant(body->get<std::string>());
  unsupported(path_, "a constant of kind '" + kind + "'");
}

Value* Pt2Builder::named(const std::string& name, const std::string& where) {
  auto found = values_.find(name);
  if (found == values_.end()) corrupt(path_, where + " uses '" + name + "' before it is computed");
  return found->second;
}

Value* Pt2Builder::device_value() {
  if (!device_value_) {
    if (!anchor_) return nullptr;
    Node* n = graph_->create(c10::Symbol::fromQualString("prim::device"), {anchor_}, 1);
    graph_->insertNode(n);
    n->output()->setType(c10::DeviceObjType::get());
    device_value_ = n->output();
  }
  return device_value_;
}

Value* Pt2Builder::device_arg(const Json& d, const std::string& where) {
  const std::string type = at_key(d, "type", path_, where).get<std::string>();
  const Json& index = d.value("index", Json());
  std::string text = type;
  if (index.is_number_integer()) text += ":" + std::to_string(index.get<int64_t>());
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(text);
  } catch (const std::exception&) {
    unsupported(path_, where + " names the device '" + text + "'");
  }
  // The device the program's tensors were on at export: wherever koila runs them now.
  if (device.type() == export_device_type() && (!device.has_index() || device.index() == 0))
    if (Value* v = device_value()) return v;
  return constant(device);
}

c10::DeviceType Pt2Builder::export_device_type() const {
  for (const auto& [name, meta] : tensor_values_->items()) {
    if (!meta.contains("device")) continue;
    try {
      return c10::Device(meta.at("device").value("type", std::string("cpu"))).type();
    } catch (const std::exception&) {
      break;
    }
  }
  return c10::kCPU;
}

Value* Pt2Builder::list(const std::vector<Value*>& items, const c10::TypePtr& element) {
  Node* n = graph_->createList(element, items);
  graph_->insertNode(n);
  return n->output();
}

Value* Pt2Builder::scalar_tensor(const Json& number, const std::string& kind) {
  // A number where the operator takes a tensor: as PyTorch passes it, a wrapped number (it
  // takes part in type promotion as a scalar).
  at::Tensor t = kind == "as_int"     ? at::scalar_tensor(number.get<int64_t>(), at::kLong)
                 : kind == "as_float" ? at::scalar_tensor(number.get<double>(), at::kDouble)
                                      : at::scalar_tensor(number.get<bool>(), at::kBool);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return constant(t);
}

Value* Pt2Builder::sym(const Json& s, const std::string& where, const char* name_key, const char* value_key) {
  const auto [kind, body] = union_of(s, path_, where);
  if (kind == name_key) return named(body->get<std::string>(), where);
  if (kind == value_key) {
    if (body->is_number_integer()) return constant(body->get<int64_t>());
    if (body->is_boolean()) return constant(body->get<bool>());
    return constant(body->get<double>());
  }
  corrupt(path_, where + " has a symbolic value of kind '" + kind + "'");
}

Value* Pt2Builder::argument(const Json& arg, const c10::TypePtr& formal, const std::string& where) {
  const auto [kind, body] = union_of(arg, path_, where);
  c10::TypePtr type = formal;
  if (auto opt = type->cast<c10::OptionalType>()) {
    if (kind == "as_none") return constant(c10::IValue());
    type = opt->getElementType();
  }
  if (kind == "as_none") return constant(c10::IValue());
  const c10::TypeKind tk = type->kind();
  if (kind == "as_tensor") return named(at_key(*body, "name", path_, where).get<std::string>(), where);
  if (tk == c10::TypeKind::TensorType && (kind == "as_int" || kind == "as_float" || kind == "as_bool"))
    return scalar_tensor(*body, kind);
  if (kind == "as_int")
    return tk == c10::TypeKind::FloatType ? constant(body->get<double>()) : constant(body->get<int64_t>());
  if (kind == "as_float") return constant(body->get<double>());
  if (kind == "as_bool") return constant(body->get<bool>());
  if (kind == "as_string") return constant(body->get<std::string>());
  if (kind == "as_ints") return constant(body->get<std::vector<int64_t>>());
  if (kind == "as_floats") return constant(body->get<std::vector<double>>());
  if (kind == "as_bools") {
    c10::List<bool> flags;
    for (const Json& b : *body) flags.push_back(b.get<bool>());
    return constant(flags);
  }
  if (kind == "as_strings") return constant(body->get<std::vector<std::string>>());
  if (kind == "as_scalar_type") return constant(static_cast<int64_t>(pt2_dtype(body->get<int>(), where)));
  if (kind == "as_layout") {
    if (body->get<int>() != 7) unsupported(path_, where + " asks for a layout other than strided");
    return constant(static_cast<int64_t>(c10::kStrided));
  }
  if (kind == "as_memory_format") {
    static const std::map<int, c10::MemoryFormat> formats = {{1, c10::MemoryFormat::Contiguous},
                                                             {2, c10::MemoryFormat::ChannelsLast},
                                                             {3, c10::MemoryFormat::ChannelsLast3d},
                                                             {4, c10::MemoryFormat::Preserve}};
    auto found = formats.find(body->get<int>());
    if (found == formats.end()) unsupported(path_, where + " asks for an unknown memory format");
    return constant(static_cast<int64_t>(found->second));
  }
  if (kind == "as_device") return device_arg(*body, where);
  if (kind == "as_sym_int") return sym(*body, where, "as_name", "as_int");
  if (kind == "as_sym_float") return sym(*body, where, "as_name", "as_float");
  if (kind == "as_sym_bool") return sym(*body, where, "as_name", "as_bool");
  if (kind == "as_sym_ints" || kind == "as_sym_floats" || kind == "as_sym_bools") {
    const char* value_key = kind == "as_sym_ints" ? "as_int" : kind == "as_sym_floats" ? "as_float" : "as_bool";
    std::vector<Value*> items;
    for (const Json& s : *body) items.push_back(sym(s, where, "as_name", value_key));
    const c10::TypePtr element = kind == "as_sym_ints"     ? c10::TypePtr(c10::IntType::get())
                                 : kind == "as_sym_floats" ? c10::TypePtr(c10::FloatType::get())
                                                           : c10::TypePtr(c10::BoolType::get());
    return list(items, element);
  }
  if (kind == "as_tensors") {
    std::vector<Value*> items;
    for (const Json& t : *body) items.push_back(named(at_key(t, "name", path_, where).get<std::string>(), where));
    return list(items, c10::TensorType::get());
  }
  if (kind == "as_optional_tensors") {
    std::vector<Value*> items;
    for (const Json& t : *body) {
      const auto [k, b] = union_of(t, path_, where);
      items.push_back(k == "as_none" ? constant(c10::IValue())
                                     : named(at_key(*b, "name", path_, where).get<std::string>(), where));
    }
    return list(items, c10::OptionalType::create(c10::TensorType::get()));
  }
  if (kind == "as_optional_tensor") {
    const auto [k, b] = union_of(*body, path_, where);
    return k == "as_none" ? constant(c10::IValue()) : named(at_key(*b, "name", path_, where).get<std::string>(), where);
  }
  unsupported(path_, where + " takes an argument of kind '" + kind +
                         "' (graphs, custom objects, operators, "
                         "complex numbers and nested lists are not supported)");
}

}  // namespace koila::module_detail
