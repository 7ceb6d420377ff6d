// Internal to module/ (only src/module/*.cpp include it; not part of koila's interface):
// twins of a module (copies of its objects that hold other tensors, or the same tensors with
// their own flags), the tensors a module holds, and its training flags.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"

namespace koila::module_detail {

using ObjectPtr = c10::intrusive_ptr<c10::ivalue::Object>;
using Substitute = std::function<at::Tensor(const at::Tensor&)>;

// A copy of `runnable`'s objects (the module and its submodules, recursively) holding the
// current values of `original`'s slots, tensors (also in lists) passed through
// `substitute`. Methods are `runnable`'s: they belong to the type. `runnable` is
// `original` itself, or the clone koila runs (same structure, its own methods).
torch::jit::Module twin(const torch::jit::Module& runnable, const torch::jit::Module& original,
                        const Substitute& substitute);

// Appends every tensor `obj`'s tree holds (once each, in slot order) to `out`, noting its
// position in `index`.
void collect_tensors(const ObjectPtr& obj, Tensors& out, std::unordered_map<const c10::TensorImpl*, size_t>& index);

// The module objects of `obj`'s tree, each once: the module first, then its submodules
// depth first in slot order, as Module::modules() lists them, without the names that
// named_modules() builds (which cost more than the rest of building a module call).
std::vector<ObjectPtr> module_objects(const ObjectPtr& obj);

// The names of the batch norm layers of `module` that train (training_batch_norm), as
// named_modules() gives them ("the module itself" for the module): for messages.
std::vector<std::string> training_batch_norm_names(const torch::jit::Module& module);

// Whether `obj` is a batch norm layer that trains with running statistics: it holds
// tensors running_mean and running_var, and its `training` is true.
bool training_batch_norm(const c10::ivalue::Object& obj);

// Switches the training batch norm layers of `obj`'s tree to evaluation (on a twin).
void evaluate_batch_norms(const ObjectPtr& obj);

}  // namespace koila::module_detail
