#include "module/op_routes.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_set>

#include "run/batch_stats.h"
#include "run/fused_grads.h"

namespace koila {
namespace {

constexpr const char* kBatchNormSchema =
    "batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, "
    "bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor";
constexpr const char* kLinearSchema = "linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor";
// aten::conv1d, conv2d and conv3d's default overloads (not those taking padding="same").
constexpr const char* kConvSchemas[] = {
    "conv1d(Tensor input, Tensor weight, Tensor? bias=None, int[1] stride=1, int[1] padding=0, int[1] dilation=1, "
    "int groups=1) -> Tensor",
    "conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, int[2] dilation=1, "
    "int groups=1) -> Tensor",
    "conv3d(Tensor input, Tensor weight, Tensor? bias=None, int[3] stride=1, int[3] padding=0, int[3] dilation=1, "
    "int groups=1) -> Tensor",
};

// Defined once per process, when the first module is routed (a static TORCH_LIBRARY would
// be registered twice by a program holding two copies of koila's objects).
void define_operators() {
  static std::once_flag once;
  std::call_once(once, [] {
    static torch::Library library(torch::Library::DEF, "koila", c10::nullopt, __FILE__, __LINE__);
    // Runtime function pointers, not TORCH_FN: under the sanitizers their addresses are not
    // constant expressions. Composite: autograd sees what the kernels call.
    library.def(kBatchNormSchema, &observed_batch_norm);
    library.def(kLinearSchema, &fused_linear);
    for (const char* schema : kConvSchemas) library.def(schema, &fused_convolution);
  });
}

struct Route {
  c10::Symbol from, to;
};

size_t reroute(torch::jit::Block* block, const std::vector<Route>& routes) {
  size_t count = 0;
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it++;  // before the node is destroyed
    for (torch::jit::Block* inner : node->blocks()) count += reroute(inner, routes);
    const Route* route = nullptr;
    for (const Route& r : routes)
      if (node->kind() == r.from) route = &r;
    // The default overload only (aten::conv2d.padding takes a string).
    if (!route || !node->maybeSchema() || !node->maybeSchema()->overload_name().empty()) continue;
    torch::jit::Graph* graph = node->owningGraph();
    torch::jit::Node* call = graph->create(route->to, node->inputs(), node->outputs().size());
    call->insertBefore(node);
    call->copyMetadata(node);
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      call->output(i)->setType(node->output(i)->type());
      node->output(i)->replaceAllUsesWith(call->output(i));
    }
    node->destroy();
    ++count;
  }
  return count;
}

}  // namespace

size_t route_ops(const torch::jit::Module& runnable) {
  define_operators();
  const std::vector<Route> routes = {
      {c10::Symbol::fromQualString("aten::batch_norm"), c10::Symbol::fromQualString("koila::batch_norm")},
      {c10::Symbol::fromQualString("aten::linear"), c10::Symbol::fromQualString("koila::linear")},
      {c10::Symbol::fromQualString("aten::conv1d"), c10::Symbol::fromQualString("koila::conv1d")},
      {c10::Symbol::fromQualString("aten::conv2d"), c10::Symbol::fromQualString("koila::conv2d")},
      {c10::Symbol::fromQualString("aten::conv3d"), c10::Symbol::fromQualString("koila::conv3d")},
  };
  size_t count = 0;
  std::unordered_set<const torch::jit::Function*> done;  // (submodules may share a type)
  for (const torch::jit::Module& m : runnable.modules()) {
    for (const torch::jit::Method& method : m.get_methods()) {
      torch::jit::Function& fn = method.function();
      if (!fn.isGraphFunction() || !done.insert(&fn).second) continue;
      const std::shared_ptr<torch::jit::Graph> graph = torch::jit::toGraphFunction(fn).graph();
      torch::jit::Inline(*graph);  // the free functions it calls (F.batch_norm) become its own
      count += reroute(graph->block(), routes);
    }
  }
  return count;
}

}  // namespace koila
