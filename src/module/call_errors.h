// Internal to module/ (only src/module/*.cpp include it; not part of koila's interface):
// what a module call says when it fails. Every message names the module ("module X ...").
#pragma once

#include <exception>
#include <new>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/graph.h"
#include "module/call.h"
#include "module/module.h"

namespace koila::module_detail {

// The checks made before a call is built: the module has a forward that returns one tensor
// (with `all`, koila_module_forward_all: tensors, None, and tuples, lists and dicts of them)
// and accepts `inputs` (its own message where not), and `inputs` are on the module's device.
void check_call(const LoadedModule& m, const Call& call, const std::vector<NodePtr>& inputs, bool all = false);

// The module cannot be cloned for koila to run (Code::Unsupported).
[[noreturn]] void fail_clone(const Call& call, const std::exception& e);

// The module holds no tensor and the call got no input: there is nothing to build a node of.
[[noreturn]] void fail_nothing_to_run(const Call& call);

// The module's forward threw `e` while running: "module X (inputs ...): <LibTorch's message>",
// Code::OutOfMemory when memory ran out, else `fallback`.
[[noreturn]] void fail_forward(const Call& call, const std::exception& e, Code fallback);

// What `run` returns; what LibTorch throws in it becomes the call's error (fail_forward), while
// koila's own errors and std::bad_alloc pass as they are.
template <class F>
auto as_call(const Call& call, Code fallback, F&& run) -> decltype(run()) {
  try {
    return run();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    fail_forward(call, e, fallback);
  }
}

// The module's forward returned `result`, not one tensor (Code::Unsupported).
[[noreturn]] void fail_result(const Call& call, const c10::IValue& result);

// The module's forward returned `all` (flattened), without a tensor as result number
// `call.result`, which the call was inferred with, or (call.result < 0) another number of
// results (Code::Unsupported).
[[noreturn]] void fail_result_changed(const Call& call, const Tensors& all);

// The module cannot run on meta tensors (`meta_failure`), and a probe on fewer samples than
// `batch` cannot show where the batch goes (`why`): its result for `batch` is unknown
// (Code::Unsupported).
[[noreturn]] void fail_uninferable(const Call& call, const std::string& meta_failure, const std::string& why,
                                   int64_t batch);

}  // namespace koila::module_detail
