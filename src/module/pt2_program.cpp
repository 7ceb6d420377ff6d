// load_program: an exported program's graph (JSON, torch/_export/serde/schema.py's Graph)
// made into a TorchScript graph over a module that holds its parameters and buffers.
#include "module/pt2_program.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/library.h>
#include <torch/version.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/error.h"
#include "module/pt2_archive.h"

namespace koila::module_detail {

namespace {

using Json = nlohmann::ordered_json;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  fail(KOILA_ERROR_UNSUPPORTED, "cannot run the exported program '" + path + "': " + what);
}
[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  fail(KOILA_ERROR_IO, "cannot read the exported program '" + path + "': " + what + " (corrupt?)");
}

const Json& at_key(const Json& j, const char* key, const std::string& path, const std::string& what) {
  if (!j.is_object() || !j.contains(key)) corrupt(path, what + " has no '" + key + "'");
  return j.at(key);
}

// The one key of a union (schema.py's _Union: an object with one field set).
std::pair<std::string, const Json*> union_of(const Json& j, const std::string& path, const std::string& what) {
  if (!j.is_object() || j.empty()) corrupt(path, what + " is not a union");
  auto it = j.begin();
  return {it.key(), &it.value()};
}

// Checks that the program's own asserts call (their operators are newer than some LibTorch
// koila supports, and a meta run must pass them too): defined once per process.
void define_checks() {
  static std::once_flag once;
  std::call_once(once, [] {
    static torch::Library library(torch::Library::DEF, "koila_export", c10::nullopt, __FILE__, __LINE__);
    library.def(
        "assert_scalar(bool condition, str message) -> ()", +[](bool condition, c10::string_view message) {
          TORCH_CHECK(condition, "the exported program's check failed: ", std::string(message));
        });
    library.def(
        "constrain_range(int size, int? min, int? max) -> ()",
        +[](int64_t size, c10::optional<int64_t> min, c10::optional<int64_t> max) {
          TORCH_CHECK(!min || size >= *min, "the exported program needs a size of at least ", *min, ", got ", size);
          TORCH_CHECK(!max || size <= *max, "the exported program needs a size of at most ", *max, ", got ", size);
        });
  });
}

// The JIT symbol for a Python operator on sizes in the graph ("_operator.mul").
const char* python_operator(const std::string& target) {
  static const std::map<std::string, const char*> ops = {
      {"_operator.add", "aten::add"},       {"_operator.sub", "aten::sub"},
      {"_operator.mul", "aten::mul"},       {"_operator.floordiv", "aten::floordiv"},
      {"_operator.mod", "aten::remainder"}, {"_operator.truediv", "aten::div"},
      {"_operator.pow", "aten::pow"},       {"_operator.neg", "aten::neg"},
      {"_operator.eq", "aten::eq"},         {"_operator.ne", "aten::ne"},
      {"_operator.lt", "aten::lt"},         {"_operator.le", "aten::le"},
      {"_operator.gt", "aten::gt"},         {"_operator.ge", "aten::ge"},
      {"_operator.and_", "aten::__and__"},  {"_operator.or_", "aten::__or__"},
      {"_operator.not_", "aten::__not__"},  {"torch.sym_not", "aten::__not__"},
      {"torch.sym_max", "prim::max"},       {"torch.sym_min", "prim::min"},
      {"torch.sym_float", "aten::Float"},   {"torch.sym_int", "aten::Int"},
      {"math.ceil", "aten::ceil"},          {"math.floor", "aten::floor"},
      {"math.trunc", "aten::Int"},
  };
  auto found = ops.find(target);
  return found == ops.end() ? nullptr : found->second;
}

// Size queries of the graph, as the TorchScript operators every LibTorch has.
const char* size_query(const std::string& op) {
  if (op == "aten::sym_size") return "aten::size";
  if (op == "aten::sym_stride") return "aten::stride";
  if (op == "aten::sym_numel") return "aten::numel";
  if (op == "aten::sym_storage_offset") return "aten::storage_offset";
  return nullptr;
}

// The graph's checks that compute nothing: left out (koila checks the inputs' dtypes and
// static sizes itself).
bool metadata_check(const std::string& op) {
  return op == "aten::_assert_tensor_metadata" || op == "aten::_assert_tensor_metadata.default";
}

class Builder {
 public:
  Builder(const module_detail::Pt2Archive& a, const c10::Device& device, ExportedProgram& info)
      : a_(a), path_(a.path), device_(device), info_(info), graph_(std::make_shared<Graph>()) {}

  torch::jit::Module build() {
    const Json& gm = at_key(a_.program, "graph_module", path_, "the program");
    const Json& graph = at_key(gm, "graph", path_, "the program");
    const Json& signature = at_key(gm, "signature", path_, "the program");
    tensor_values_ = &at_key(graph, "tensor_values", path_, "the graph");
    const Json& nodes = at_key(graph, "nodes", path_, "the graph");
    info_.mode = baked_mode(nodes);
    const std::string name = root_name(nodes);
    cu_ = std::make_shared<torch::jit::CompilationUnit>();
    root_ = torch::jit::Module(c10::QualifiedName("__torch__.koila_export." + name), cu_, /*shouldMangle=*/true);
    root_.register_attribute("training", c10::BoolType::get(), info_.mode != ExportedProgram::Mode::Evaluation);
    self_ = graph_->addInput("self");
    self_->setType(root_.type());
    inputs(at_key(signature, "input_specs", path_, "the signature"));
    for (const Json& n : nodes) node(n);
    outputs(at_key(graph, "outputs", path_, "the graph"), at_key(signature, "output_specs", path_, "the signature"),
            gm);
    auto fn = cu_->create_function(c10::QualifiedName(*root_.type()->name(), "forward"), graph_);
    root_.type()->addMethod(fn);
    return root_;
  }

 private:
  // ---- the module and its state ----

  static std::string root_name(const Json& nodes) {
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

  ExportedProgram::Mode baked_mode(const Json& nodes) const {
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

  // The module at dotted `prefix` ("" for the root), made on first use.
  torch::jit::Module submodule(const std::string& prefix) {
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

  static std::pair<std::string, std::string> split_name(const std::string& dotted) {
    const size_t dot = dotted.rfind('.');
    if (dot == std::string::npos) return {"", dotted};
    return {dotted.substr(0, dot), dotted.substr(dot + 1)};
  }

  // A payload, on the device: files shared by several payloads stay shared.
  at::Tensor on_device(const at::Tensor& t) {
    if (device_.is_cpu()) return t;
    const at::Tensor base = t._base().defined() ? at::Tensor(t._base()) : t;
    auto found = moved_.find(base.unsafeGetTensorImpl());
    if (found == moved_.end()) found = moved_.emplace(base.unsafeGetTensorImpl(), base.to(device_)).first;
    return found->second.as_strided(t.sizes(), t.strides(), t.storage_offset());
  }

  // The tensor koila holds for a payload: one per distinct view of a file, so that names
  // that share a tensor in the program (tied weights) share it here, one leaf for autograd.
  at::Tensor tensor_of(const at::Tensor& stored, bool parameter) {
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

  const Pt2Payload& payload(const std::string& name, bool constant) const {
    for (const Pt2Payload& p : constant ? a_.constants : a_.weights)
      if (p.name == name) return p;
    for (const Pt2Payload& p : constant ? a_.weights : a_.constants)
      if (p.name == name) return p;
    corrupt(path_, "the program uses '" + name + "', which the archive does not hold");
  }

  // A value of the graph for `module`'s attribute at dotted `name` (GetAttr down the tree).
  Value* attribute(const std::string& dotted) {
    Value* v = self_;
    size_t start = 0;
    while (true) {
      const size_t dot = dotted.find('.', start);
      v = graph_->insertGetAttr(v, dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) return v;
      start = dot + 1;
    }
  }

  void inputs(const Json& specs) {
    for (const Json& spec : specs) {
      const auto [kind, body] = union_of(spec, path_, "an input spec");
      if (kind == "parameter" || kind == "buffer" || kind == "tensor_constant") {
        const std::string arg = at_key(at_key(*body, "arg", path_, kind), "name", path_, kind).get<std::string>();
        const std::string name = at_key(*body,
                                        kind == "parameter" ? "parameter_name"
                                        : kind == "buffer"  ? "buffer_name"
                                                            : "tensor_constant_name",
                                        path_, kind)
                                     .get<std::string>();
        const bool persistent = kind == "buffer" ? body->value("persistent", true) : kind == "parameter";
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
        continue;
      }
      if (kind == "user_input") {
        const auto [akind, arg] = union_of(at_key(*body, "arg", path_, "a user input"), path_, "a user input");
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

  const Json& tensor_meta(const std::string& name) const {
    if (!tensor_values_->contains(name)) corrupt(path_, "the graph has no tensor meta for '" + name + "'");
    return tensor_values_->at(name);
  }

  // ---- values ----

  Value* constant(const c10::IValue& v) { return graph_->insertConstant(v); }

  Value* constant_value(const Json& c) {
    const auto [kind, body] = union_of(c, path_, "a constant");
    if (kind == "as_none") return constant(c10::IValue());
    if (kind == "as_int") return constant(body->get<int64_t>());
    if (kind == "as_float") return constant(body->get<double>());
    if (kind == "as_bool") return constant(body->get<bool>());
    if (kind == "as_string") return constant(body->get<std::string>());
    unsupported(path_, "a constant of kind '" + kind + "'");
  }

  Value* named(const std::string& name, const std::string& where) {
    auto found = values_.find(name);
    if (found == values_.end()) corrupt(path_, where + " uses '" + name + "' before it is computed");
    return found->second;
  }

  // The device of the program's tensors in any run (meta stand-ins in a meta run), for the
  // operators that were given the device the program was exported on.
  Value* device_value() {
    if (!device_value_) {
      if (!anchor_) return nullptr;
      Node* n = graph_->create(c10::Symbol::fromQualString("prim::device"), {anchor_}, 1);
      graph_->insertNode(n);
      n->output()->setType(c10::DeviceObjType::get());
      device_value_ = n->output();
    }
    return device_value_;
  }

  Value* device_arg(const Json& d, const std::string& where) {
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

  c10::DeviceType export_device_type() const {
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

  Value* list(const std::vector<Value*>& items, const c10::TypePtr& element) {
    Node* n = graph_->createList(element, items);
    graph_->insertNode(n);
    return n->output();
  }

  Value* scalar_tensor(const Json& number, const std::string& kind) {
    // A number where the operator takes a tensor: as PyTorch passes it, a wrapped number (it
    // takes part in type promotion as a scalar).
    at::Tensor t = kind == "as_int"     ? at::scalar_tensor(number.get<int64_t>(), at::kLong)
                   : kind == "as_float" ? at::scalar_tensor(number.get<double>(), at::kDouble)
                                        : at::scalar_tensor(number.get<bool>(), at::kBool);
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    return constant(t);
  }

  Value* sym(const Json& s, const std::string& where, const char* name_key, const char* value_key) {
    const auto [kind, body] = union_of(s, path_, where);
    if (kind == name_key) return named(body->get<std::string>(), where);
    if (kind == value_key) {
      if (body->is_number_integer()) return constant(body->get<int64_t>());
      if (body->is_boolean()) return constant(body->get<bool>());
      return constant(body->get<double>());
    }
    corrupt(path_, where + " has a symbolic value of kind '" + kind + "'");
  }

  // The value of argument `arg` for a formal parameter of type `type`.
  Value* argument(const Json& arg, const c10::TypePtr& formal, const std::string& where) {
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
      return k == "as_none" ? constant(c10::IValue())
                            : named(at_key(*b, "name", path_, where).get<std::string>(), where);
    }
    unsupported(path_, where + " takes an argument of kind '" + kind +
                           "' (graphs, custom objects, operators, "
                           "complex numbers and nested lists are not supported)");
  }

  // ---- nodes ----

  void node(const Json& n) {
    const std::string target = at_key(n, "target", path_, "a node").get<std::string>();
    const std::string where = "node " + n.value("name", std::string("?")) + " (" + target + ")";
    const Json& ins = at_key(n, "inputs", path_, where);
    const Json& outs = at_key(n, "outputs", path_, where);
    if (const char* op = python_operator(target)) {
      insert(c10::Symbol::fromQualString(op), untyped_args(ins, where), outs, where, nullptr);
      return;
    }
    const std::string prefix = "torch.ops.";
    if (target.rfind(prefix, 0) != 0)
      unsupported(path_, where + ": koila runs ATen operators and Python operators on sizes, not '" + target + "'");
    // torch.ops.<namespace>.<name>.<overload>
    const std::string rest = target.substr(prefix.size());
    const size_t first = rest.find('.'), last = rest.rfind('.');
    if (first == std::string::npos || first == last) unsupported(path_, where + ": an operator without an overload");
    const std::string ns = rest.substr(0, first);
    if (ns == "higher_order")
      unsupported(path_, where +
                             ": higher-order operators (control flow, torch.no_grad() regions, wrappers) are "
                             "not supported; export without them");
    const std::string op = ns + "::" + rest.substr(first + 1, last - first - 1);
    std::string overload = rest.substr(last + 1);
    if (overload == "default") overload.clear();
    if (metadata_check(op)) return;
    if (op == "aten::_assert_scalar" || op == "aten::sym_constrain_range" ||
        op == "aten::sym_constrain_range_for_size") {
      check_node(op, ins, where);
      return;
    }
    if (const char* query = size_query(op)) {
      insert(c10::Symbol::fromQualString(query), untyped_args(ins, where), outs, where, nullptr);
      return;
    }
    auto handle = c10::Dispatcher::singleton().findSchema(c10::OperatorName(op, overload));
    if (!handle)
      unsupported(path_, where + ": this LibTorch (" + std::string(TORCH_VERSION) + ") has no operator " + op +
                             (overload.empty() ? std::string() : "." + overload));
    const c10::FunctionSchema& schema = handle->schema();
    std::vector<Value*> args;
    for (const c10::Argument& formal : schema.arguments()) {
      const Json* given = nullptr;
      for (const Json& in : ins)
        if (in.value("name", std::string()) == formal.name()) given = &in.at("arg");
      if (given) {
        args.push_back(argument(*given, formal.type(), where + "'s argument " + formal.name()));
      } else if (formal.default_value()) {
        args.push_back(constant(*formal.default_value()));
      } else {
        corrupt(path_, where + " gives no argument " + formal.name());
      }
    }
    mode_argument(op, args);
    insert(c10::Symbol::fromQualString(op), args, outs, where, &schema);
  }

  // An argument of a Python operator, a size query or a check (no schema to go by).
  Value* untyped(const Json& arg, const std::string& where) { return argument(arg, c10::AnyType::get(), where); }
  // A node's arguments so, in order.
  std::vector<Value*> untyped_args(const Json& ins, const std::string& where) {
    std::vector<Value*> args;
    for (const Json& in : ins) args.push_back(untyped(at_key(in, "arg", path_, where), where));
    return args;
  }

  // Batch norm's training flag read from its module's `training` attribute instead of the
  // exported constant, where its running statistics are a module's buffers: the value is the
  // same, and koila's probes can switch the layer to evaluation as they do TorchScript's.
  void mode_argument(const std::string& op, std::vector<Value*>& args) {
    if (op != "aten::batch_norm" || args.size() < 6) return;
    const c10::optional<c10::IValue> training = torch::jit::toIValue(args[5]);
    if (!training || !training->isBool() || training->toBool() != (info_.mode == ExportedProgram::Mode::Training))
      return;
    Node* mean = args[3]->node();
    if (mean->kind() != c10::prim::GetAttr || mean->s(c10::attr::name) != "running_mean") return;
    Value* owner = mean->input();
    if (owner->type()->cast<c10::ClassType>() == nullptr) return;
    args[5] = graph_->insertGetAttr(owner, "training");
  }

  void check_node(const std::string& op, const Json& ins, const std::string& where) {
    define_checks();
    const std::vector<Value*> args = untyped_args(ins, where);
    if (op == "aten::_assert_scalar") {
      if (args.size() < 2) corrupt(path_, where + " has too few arguments");
      Node* n = graph_->create(c10::Symbol::fromQualString("koila_export::assert_scalar"), {args[0], args[1]}, 0);
      graph_->insertNode(n);
      if (!n->maybeSchema()) unsupported(path_, where + ": its condition is not a bool");
      return;
    }
    Value *min = constant(c10::IValue()), *max = constant(c10::IValue());
    for (size_t i = 0; i < ins.size(); ++i) {
      const std::string name = ins[i].value("name", std::string());
      if (name == "min") min = args[i];
      if (name == "max") max = args[i];
    }
    if (args.empty()) corrupt(path_, where + " has no arguments");
    Node* n = graph_->create(c10::Symbol::fromQualString("koila_export::constrain_range"), {args[0], min, max}, 0);
    graph_->insertNode(n);
    if (!n->maybeSchema()) unsupported(path_, where + ": its size is not an int");
  }

  // Inserts the call of `kind` on `args`, checks that TorchScript resolves it to `schema`'s
  // overload (when given), and names its results as the node's outputs say.
  void insert(c10::Symbol kind, const std::vector<Value*>& args, const Json& outs, const std::string& where,
              const c10::FunctionSchema* schema) {
    Node* n = graph_->create(kind, args, 0);
    graph_->insertNode(n);
    const c10::FunctionSchema* resolved = n->maybeSchema();
    if (!resolved)
      unsupported(path_, where + ": TorchScript finds no overload of " + kind.toQualString() + " for these arguments");
    // TorchScript's registry holds "hacked twins" of a few indexing overloads (index.Tensor
    // as index.Tensor_hacked_twin, with Tensor[] for Tensor?[]): the same kernels, which it
    // resolves to first.
    const std::string twin =
        schema ? schema->overload_name() + (schema->overload_name().empty() ? "" : "_") + "hacked_twin" : std::string();
    if (schema && resolved->overload_name() != schema->overload_name() && resolved->overload_name() != twin)
      unsupported(path_, where + ": TorchScript resolves it to the overload '" + resolved->overload_name() +
                             "' instead of '" + schema->overload_name() + "'");
    for (const c10::Argument& ret : resolved->returns()) n->addOutput()->setType(ret.type());
    if (outs.size() != n->outputs().size())
      corrupt(path_, where + " lists " + std::to_string(outs.size()) + " results where its operator returns " +
                         std::to_string(n->outputs().size()));
    for (size_t i = 0; i < outs.size(); ++i) name_output(outs[i], n->output(i), where);
  }

  void name_output(const Json& out, Value* v, const std::string& where) {
    const auto [kind, body] = union_of(out, path_, where + "'s result");
    if (kind == "as_none") return;
    if (kind == "as_tensor") {
      values_[at_key(*body, "name", path_, where).get<std::string>()] = v;
      return;
    }
    if (kind == "as_sym_int" || kind == "as_sym_float" || kind == "as_sym_bool") {
      const auto [k, b] = union_of(*body, path_, where);
      if (k == "as_name") values_[b->get<std::string>()] = v;  // else a size folded to a constant
      return;
    }
    if (kind == "as_tensors" || kind == "as_optional_tensors") {
      Node* unpack = graph_->createListUnpack(v, body->size());
      graph_->insertNode(unpack);
      for (size_t i = 0; i < body->size(); ++i) {
        const Json& item = body->at(i);
        if (kind == "as_tensors") {
          values_[at_key(item, "name", path_, where).get<std::string>()] = unpack->output(i);
        } else {
          const auto [k, b] = union_of(item, path_, where);
          if (k == "as_tensor") values_[at_key(*b, "name", path_, where).get<std::string>()] = unpack->output(i);
        }
      }
      return;
    }
    if (kind == "as_int" || kind == "as_float" || kind == "as_bool") return;  // a result folded to a constant
    unsupported(path_, where + " has a result of kind '" + kind + "'");
  }

  // ---- the results ----

  void outputs(const Json& graph_outputs, const Json& specs, const Json& gm) {
    if (specs.size() != graph_outputs.size()) corrupt(path_, "its signature and graph list different results");
    std::vector<Value*> results;
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto [kind, body] = union_of(specs[i], path_, "an output spec");
      if (kind == "user_output") {
        results.push_back(untyped(graph_outputs[i], "result " + std::to_string(results.size())));
        continue;
      }
      if (kind == "buffer_mutation") {
        // A functional program returns a buffer's new value: written back, as the buffer's
        // own operators would have done in place.
        const std::string buffer = at_key(*body, "buffer_name", path_, kind).get<std::string>();
        const std::string arg = at_key(at_key(*body, "arg", path_, kind), "name", path_, kind).get<std::string>();
        Value* target = attribute(buffer);
        Node* detach = graph_->create(c10::Symbol::fromQualString("aten::detach"), {named(arg, kind)}, 1);
        graph_->insertNode(detach);
        detach->output()->setType(c10::TensorType::get());
        Node* copy =
            graph_->create(c10::Symbol::fromQualString("aten::copy_"), {target, detach->output(), constant(false)}, 1);
        graph_->insertNode(copy);
        copy->output()->setType(c10::TensorType::get());
        continue;
      }
      unsupported(path_, "it has a result of kind '" + kind +
                             "' (programs that change their inputs or parameters, or return gradients or effect "
                             "tokens, are not supported)");
    }
    // One tensor where the program returns one (its out_spec a leaf), else every result in
    // order, flattened as PyTorch flattens them (None entries included).
    bool single = results.size() == 1;
    const Json& calls = gm.value("module_call_graph", Json::array());
    if (single && !calls.empty() && calls[0].contains("signature") && calls[0].at("signature").is_object()) {
      // A pytree spec: [version, {"type": null, ...}] for a single leaf.
      const Json spec = Json::parse(calls[0].at("signature").value("out_spec", std::string("null")), nullptr, false);
      single = spec.is_array() && spec.size() == 2 && spec[1].is_object() && spec[1].value("type", Json()).is_null();
    }
    if (single && results[0]->type()->kind() == c10::TypeKind::TensorType) {
      graph_->registerOutput(results[0]);
      return;
    }
    Node* tuple = graph_->createTuple(results);
    graph_->insertNode(tuple);
    graph_->registerOutput(tuple->output());
  }

  const Pt2Archive& a_;
  const std::string& path_;
  c10::Device device_;
  ExportedProgram& info_;
  std::shared_ptr<Graph> graph_;
  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  torch::jit::Module root_;
  Value* self_ = nullptr;
  Value* anchor_ = nullptr;
  Value* device_value_ = nullptr;
  const Json* tensor_values_ = nullptr;
  std::unordered_map<std::string, Value*> values_;
  std::map<std::string, torch::jit::Module> modules_;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> moved_;
  std::unordered_map<std::string, at::Tensor> tensors_;
  std::unordered_set<const c10::TensorImpl*> listed_;
};

}  // namespace

BuiltProgram load_program(const std::string& path, const c10::Device& device) {
  auto archive = std::make_shared<Pt2Archive>(read_pt2_archive(path));
  auto program = std::make_shared<ExportedProgram>();
  program->path = path;
  BuiltProgram built;
  try {
    built.module = Builder(*archive, device, *program).build();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const nlohmann::ordered_json::exception& e) {
    corrupt(path, std::string("a field of an unexpected type: ") + e.what());
  } catch (const std::exception& e) {
    unsupported(path, torch_complaint(e));
  }
  // The payloads are the module's now; the archive keeps what saving needs besides them.
  for (auto* payloads : {&archive->weights, &archive->constants})
    for (Pt2Payload& p : *payloads) p.value = at::Tensor();
  program->archive = archive;
  built.program = program;
  return built;
}

}  // namespace koila::module_detail
