#include "module/op_routes.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_set>

#include "kernels/batch_stats.h"
#include "kernels/fused_grads.h"

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

// Reroutes the calls in `block` (and its inner blocks); returns how many, and adds those
// that now call `counted` to `*of_counted` when given.
size_t reroute(torch::jit::Block* block, const std::vector<Route>& routes, c10::Symbol counted, size_t* of_counted) {
  size_t count = 0;
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it++;  // before the node is destroyed
    for (torch::jit::Block* inner : node->blocks()) count += reroute(inner, routes, counted, of_counted);
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
    if (of_counted && route->to == counted) ++*of_counted;
  }
  return count;
}

}  // namespace

size_t route_ops(const torch::jit::Module& runnable, size_t* linear_calls) {
  define_operators();
  const std::vector<Route> routes = {
      {c10::Symbol::fromQualString("aten::batch_norm"), c10::Symbol::fromQualString("koila::batch_norm")},
      {c10::Symbol::fromQualString("aten::linear"), c10::Symbol::fromQualString("koila::linear")},
      {c10::Symbol::fromQualString("aten::conv1d"), c10::Symbol::fromQualString("koila::conv1d")},
      {c10::Symbol::fromQualString("aten::conv2d"), c10::Symbol::fromQualString("koila::conv2d")},
      {c10::Symbol::fromQualString("aten::conv3d"), c10::Symbol::fromQualString("koila::conv3d")},
  };
  size_t count = 0, linear = 0;
  const c10::Symbol koila_linear = c10::Symbol::fromQualString("koila::linear");
  std::unordered_set<const torch::jit::Function*> done;  // (submodules may share a type)
  bool top = true;                                       // (modules() lists the module itself first)
  for (const torch::jit::Module& m : runnable.modules()) {
    for (const torch::jit::Method& method : m.get_methods()) {
      torch::jit::Function& fn = method.function();
      if (!fn.isGraphFunction() || !done.insert(&fn).second) continue;
      const std::shared_ptr<torch::jit::Graph> graph = torch::jit::toGraphFunction(fn).graph();
      // The free functions and submodule methods it calls (F.batch_norm, a layer's forward)
      // become its own: the module's forward then holds every call a call of it runs.
      torch::jit::Inline(*graph);
      const bool forward = top && method.name() == "forward";
      count += reroute(graph->block(), routes, koila_linear, forward ? &linear : nullptr);
    }
    top = false;
  }
  if (linear_calls) *linear_calls = linear;
  return count;
}

}  // namespace koila
