// Pt2Builder (pt2_builder.h), nodes: each node of the program's graph as a call of its operator by
// name and exact overload (ATen operators through the dispatcher's schemas, Python operators on
// sizes and size queries as TorchScript's own), its checks as koila_export's operators, its
// results named for the nodes that use them.
#include "module/pt2_builder.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/version.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace koila::module_detail {

using torch::jit::Node;
using torch::jit::Value;

namespace {

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

}  // namespace

void Pt2Builder::node(const Json& n) {
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
  if (op == "aten::_assert_scalar" || op == "aten::sym_constrain_range" || op == "aten::sym_constrain_range_for_size") {
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
  std::vector<Value*> args = operator_args(schema, ins, where);
  mode_argument(op, args);
  insert(c10::Symbol::fromQualString(op), args, outs, where, &schema);
}

std::vector<Value*> Pt2Builder::operator_args(const c10::FunctionSchema& schema, const Json& ins,
                                              const std::string& where) {
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
  return args;
}

Value* Pt2Builder::untyped(const Json& arg, const std::string& where) {
  return argument(arg, c10::AnyType::get(), where);
}

std::vector<Value*> Pt2Builder::untyped_args(const Json& ins, const std::string& where) {
  std::vector<Value*> args;
  for (const Json& in : ins) args.push_back(untyped(at_key(in, "arg", path_, where), where));
  return args;
}

void Pt2Builder::mode_argument(const std::string& op, std::vector<Value*>& args) {
  if (op != "aten::batch_norm" || args.size() < 6) return;
  const c10::optional<c10::IValue> training = torch::jit::toIValue(args[5]);
  if (!training || !training->isBool() || training->toBool() != (info_.mode == ExportedProgram::Mode::Training)) return;
  Node* mean = args[3]->node();
  if (mean->kind() != c10::prim::GetAttr || mean->s(c10::attr::name) != "running_mean") return;
  Value* owner = mean->input();
  if (owner->type()->cast<c10::ClassType>() == nullptr) return;
  args[5] = graph_->insertGetAttr(owner, "training");
}

void Pt2Builder::check_node(const std::string& op, const Json& ins, const std::string& where) {
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

void Pt2Builder::insert(c10::Symbol kind, const std::vector<Value*>& args, const Json& outs, const std::string& where,
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

void Pt2Builder::name_output(const Json& out, Value* v, const std::string& where) {
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

}  // namespace koila::module_detail
