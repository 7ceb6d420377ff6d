#include "module/batch_norm_route.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/library.h>

#include <memory>
#include <mutex>

#include "run/batch_stats.h"

namespace koila {
namespace {

constexpr const char* kSchema =
    "batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, "
    "bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor";

// Defined once per process, when the first module is loaded (a static TORCH_LIBRARY would
// be registered twice by a program holding two copies of koila's objects).
void define_operator() {
  static std::once_flag once;
  std::call_once(once, [] {
    static torch::Library library(torch::Library::DEF, "koila", c10::nullopt, __FILE__, __LINE__);
    // A runtime function pointer, not TORCH_FN: under the sanitizers its address is not a
    // constant expression. Composite: autograd sees at::batch_norm.
    library.def(kSchema, &observed_batch_norm);
  });
}

size_t reroute(torch::jit::Block* block, const c10::Symbol& from, const c10::Symbol& to) {
  size_t count = 0;
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it++;  // before the node is destroyed
    for (torch::jit::Block* inner : node->blocks()) count += reroute(inner, from, to);
    if (node->kind() != from) continue;
    torch::jit::Graph* graph = node->owningGraph();
    torch::jit::Node* call = graph->create(to, node->inputs(), node->outputs().size());
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

size_t route_batch_norms(const torch::jit::Module& module) {
  define_operator();
  const c10::Symbol from = c10::Symbol::fromQualString("aten::batch_norm");
  const c10::Symbol to = c10::Symbol::fromQualString("koila::batch_norm");
  size_t count = 0;
  for (torch::jit::Function* fn : module._ivalue()->compilation_unit()->get_functions()) {
    if (!fn->isGraphFunction()) continue;
    count += reroute(torch::jit::toGraphFunction(*fn).graph()->block(), from, to);
  }
  return count;
}

}  // namespace koila
