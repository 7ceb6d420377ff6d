// load_program: an exported program's graph (JSON, torch/_export/serde/schema.py's Graph)
// made into a TorchScript graph over a module that holds its parameters and buffers. Here:
// the failures every part of the builder reports, its walk over the program (Pt2Builder::build)
// and the program's results; pt2_builder.h says where the rest of the builder lives.
#include "module/pt2_program.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "module/pt2_archive.h"
#include "module/pt2_builder.h"

namespace koila::module_detail {

using torch::jit::Node;
using torch::jit::Value;

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  fail(Code::Unsupported, "cannot run the exported program '" + path + "': " + what);
}
[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  fail(Code::Io, "cannot read the exported program '" + path + "': " + what + " (corrupt?)");
}

const Json& at_key(const Json& j, const char* key, const std::string& path, const std::string& what) {
  if (!j.is_object() || !j.contains(key)) corrupt(path, what + " has no '" + key + "'");
  return j.at(key);
}

std::pair<std::string, const Json*> union_of(const Json& j, const std::string& path, const std::string& what) {
  if (!j.is_object() || j.empty()) corrupt(path, what + " is not a union");
  auto it = j.begin();
  return {it.key(), &it.value()};
}

// ---- the walk ----

torch::jit::Module Pt2Builder::build() {
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
  outputs(at_key(graph, "outputs", path_, "the graph"), at_key(signature, "output_specs", path_, "the signature"), gm);
  auto fn = cu_->create_function(c10::QualifiedName(*root_.type()->name(), "forward"), graph_);
  root_.type()->addMethod(fn);
  return root_;
}

// ---- the results ----

void Pt2Builder::outputs(const Json& graph_outputs, const Json& specs, const Json& gm) {
  if (specs.size() != graph_outputs.size()) corrupt(path_, "its signature and graph list different results");
  std::vector<Value*> results;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto [kind, body] = union_of(specs[i], path_, "an output spec");
    if (kind == "user_output") {
      results.push_back(untyped(graph_outputs[i], "result " + std::to_string(results.size())));
      continue;
    }
    if (kind == "buffer_mutation") {
      write_back(*body, kind);
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

void Pt2Builder::write_back(const Json& body, const std::string& kind) {
  // A functional program returns a buffer's new value: written back, as the buffer's
  // own operators would have done in place.
  const std::string buffer = at_key(body, "buffer_name", path_, kind).get<std::string>();
  const std::string arg = at_key(at_key(body, "arg", path_, kind), "name", path_, kind).get<std::string>();
  Value* target = attribute(buffer);
  Node* detach = graph_->create(c10::Symbol::fromQualString("aten::detach"), {named(arg, kind)}, 1);
  graph_->insertNode(detach);
  detach->output()->setType(c10::TensorType::get());
  Node* copy =
      graph_->create(c10::Symbol::fromQualString("aten::copy_"), {target, detach->output(), constant(false)}, 1);
  graph_->insertNode(copy);
  copy->output()->setType(c10::TensorType::get());
}

BuiltProgram load_program(const std::string& path, const c10::Device& device) {
  auto archive = std::make_shared<Pt2Archive>(read_pt2_archive(path));
  auto program = std::make_shared<ExportedProgram>();
  program->path = path;
  BuiltProgram built;
  try {
    built.module = Pt2Builder(*archive, device, *program).build();
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
