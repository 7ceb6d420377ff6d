// Internal to module/ (only load_program's files include it: pt2_program.cpp and
// pt2_builder_*.cpp): the builder that makes an exported program's graph (JSON,
// torch/_export/serde/schema.py's Graph) into the forward method of a TorchScript module that
// holds its parameters, buffers and constants. Its member functions live by concern:
//   - pt2_program.cpp: the walk over the program (build) and its results;
//   - pt2_builder_state.cpp: the module's name and mode, its tree of modules and their tensors,
//     the program's inputs;
//   - pt2_builder_values.cpp: constants, named values, devices and arguments as graph values;
//   - pt2_builder_nodes.cpp: each node as a call of its operator by name and exact overload.
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "module/exported.h"
#include "module/pt2_archive.h"

namespace koila::module_detail {

using Json = nlohmann::ordered_json;

// Fails with Code::Unsupported: the program at `path` asks for `what`, which koila does not run.
[[noreturn]] void unsupported(const std::string& path, const std::string& what);
// Fails with Code::Io: the program at `path` is not as the format says (`what`).
[[noreturn]] void corrupt(const std::string& path, const std::string& what);

// `j`'s field `key`, or corrupt (`what` names `j` in the message).
const Json& at_key(const Json& j, const char* key, const std::string& path, const std::string& what);

// The one key of a union (schema.py's _Union: an object with one field set).
std::pair<std::string, const Json*> union_of(const Json& j, const std::string& path, const std::string& what);

// Builds the module of the program in archive `a`, its tensors on `device`, and fills `info`
// with what the module cannot say of itself (exported.h). One build() per builder.
class Pt2Builder {
 public:
  Pt2Builder(const module_detail::Pt2Archive& a, const c10::Device& device, ExportedProgram& info)
      : a_(a), path_(a.path), device_(device), info_(info), graph_(std::make_shared<torch::jit::Graph>()) {}

  torch::jit::Module build();

 private:
  // ---- the module and its state (pt2_builder_state.cpp) ----

  // The exported module's class name, from the nodes' module stacks ("ExportedProgram" if none).
  static std::string root_name(const Json& nodes);
  // The mode the program was exported in, from the flags of its batch norms and dropouts.
  ExportedProgram::Mode baked_mode(const Json& nodes) const;

  // The module at dotted `prefix` ("" for the root), made on first use.
  torch::jit::Module submodule(const std::string& prefix);
  // "a.b.c" as {"a.b", "c"}; {"", "c"} for "c".
  static std::pair<std::string, std::string> split_name(const std::string& dotted);

  // A payload, on the device: files shared by several payloads stay shared.
  at::Tensor on_device(const at::Tensor& t);
  // The tensor koila holds for a payload: one per distinct view of a file, so that names
  // that share a tensor in the program (tied weights) share it here, one leaf for autograd.
  at::Tensor tensor_of(const at::Tensor& stored, bool parameter);
  // The archive's payload of that name: among its constants first where `constant`, else among
  // its weights first.
  const Pt2Payload& payload(const std::string& name, bool constant) const;

  // A value of the graph for `module`'s attribute at dotted `name` (GetAttr down the tree).
  torch::jit::Value* attribute(const std::string& dotted);

  // The signature's input specs: parameters, buffers and constants registered on the module
  // tree, user inputs as the graph's inputs, constant inputs as constants.
  void inputs(const Json& specs);
  // A parameter, buffer or tensor constant (`kind`) of input spec body `body`.
  void state_input(const std::string& kind, const Json& body);
  // A user input (input spec body `body`): a tensor input of the graph, listed in info_.inputs.
  void user_input(const Json& body);

  // The graph's meta of tensor `name` (dtype, sizes, device).
  const Json& tensor_meta(const std::string& name) const;

  // ---- values (pt2_builder_values.cpp) ----

  torch::jit::Value* constant(const c10::IValue& v);
  torch::jit::Value* constant_value(const Json& c);
  // The value computed under `name` so far; corrupt where none is.
  torch::jit::Value* named(const std::string& name, const std::string& where);

  // The device of the program's tensors in any run (meta stand-ins in a meta run), for the
  // operators that were given the device the program was exported on.
  torch::jit::Value* device_value();
  torch::jit::Value* device_arg(const Json& d, const std::string& where);
  c10::DeviceType export_device_type() const;

  torch::jit::Value* list(const std::vector<torch::jit::Value*>& items, const c10::TypePtr& element);
  torch::jit::Value* scalar_tensor(const Json& number, const std::string& kind);
  torch::jit::Value* sym(const Json& s, const std::string& where, const char* name_key, const char* value_key);

  // The value of argument `arg` for a formal parameter of type `type`.
  torch::jit::Value* argument(const Json& arg, const c10::TypePtr& formal, const std::string& where);

  // ---- nodes (pt2_builder_nodes.cpp) ----

  void node(const Json& n);
  // The arguments of a call of `schema` from a node's inputs `ins`, in the schema's order,
  // defaults where the node gives none.
  std::vector<torch::jit::Value*> operator_args(const c10::FunctionSchema& schema, const Json& ins,
                                                const std::string& where);

  // An argument of a Python operator, a size query or a check (no schema to go by).
  torch::jit::Value* untyped(const Json& arg, const std::string& where);
  // A node's arguments so, in order.
  std::vector<torch::jit::Value*> untyped_args(const Json& ins, const std::string& where);

  // Batch norm's training flag read from its module's `training` attribute instead of the
  // exported constant, where its running statistics are a module's buffers: the value is the
  // same, and koila's probes can switch the layer to evaluation as they do TorchScript's.
  void mode_argument(const std::string& op, std::vector<torch::jit::Value*>& args);

  void check_node(const std::string& op, const Json& ins, const std::string& where);

  // Inserts the call of `kind` on `args`, checks that TorchScript resolves it to `schema`'s
  // overload (when given), and names its results as the node's outputs say.
  void insert(c10::Symbol kind, const std::vector<torch::jit::Value*>& args, const Json& outs, const std::string& where,
              const c10::FunctionSchema* schema);
  void name_output(const Json& out, torch::jit::Value* v, const std::string& where);

  // ---- the results (pt2_program.cpp) ----

  void outputs(const Json& graph_outputs, const Json& specs, const Json& gm);
  // A buffer's new value that a functional program returns (output spec body `body` of kind
  // `kind`), written back into the buffer.
  void write_back(const Json& body, const std::string& kind);

  const Pt2Archive& a_;
  const std::string& path_;
  c10::Device device_;
  ExportedProgram& info_;
  std::shared_ptr<torch::jit::Graph> graph_;
  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  torch::jit::Module root_;
  torch::jit::Value* self_ = nullptr;
  torch::jit::Value* anchor_ = nullptr;
  torch::jit::Value* device_value_ = nullptr;
  const Json* tensor_values_ = nullptr;
  std::unordered_map<std::string, torch::jit::Value*> values_;
  std::map<std::string, torch::jit::Module> modules_;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> moved_;
  std::unordered_map<std::string, at::Tensor> tensors_;
  std::unordered_set<const c10::TensorImpl*> listed_;
};

}  // namespace koila::module_detail
