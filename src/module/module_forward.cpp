// module_forward: the node of one module call, with the OpSpec that runs it, infers its
// result and says where its batch goes (module.h).
#include "module/module.h"

#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "module/batch_inference.h"
#include "module/batch_norm_route.h"
#include "module/call.h"
#include "module/call_errors.h"
#include "module/inference_memo.h"
#include "module/twin.h"

namespace koila {

namespace {

using module_detail::Call;
using module_detail::Inference;
using module_detail::InferenceMemo;
using module_detail::run_call;

// Reads off the call's module (a twin of the caller's) every tensor it holds and its batch
// norm layers that train; returns the training flag of each of its modules, in order (a
// walk over the module objects: Module::named_modules() builds every name, at a cost above
// the rest of building a call).
std::string collect_state(Call& call) {
  module_detail::collect_tensors(call.module._ivalue(), call.state, call.index);
  std::string flags;
  for (const module_detail::ObjectPtr& obj : module_detail::module_objects(call.module._ivalue())) {
    const torch::jit::Module sub(obj);
    flags += sub.is_training() ? '1' : '0';
    if (!module_detail::training_batch_norm(*obj)) continue;
    ++call.batch_norms;
    for (const char* buffer : {"running_mean", "running_var"})
      call.batch_norm_buffers.push_back(sub.attr(buffer).toTensor());
    const auto counter = obj->type()->findAttributeSlot("num_batches_tracked");
    if (!counter) continue;
    const c10::IValue& v = obj->getSlot(*counter);
    if (v.isTensor() && v.toTensor().defined()) call.batch_norm_counters.push_back(v.toTensor());
  }
  return flags;
}

}  // namespace

std::string module_name(const torch::jit::Module& module) {
  std::string name = module.type()->name() ? module.type()->name()->qualifiedName() : std::string("module");
  const std::string prefix = "__torch__.";
  if (name.rfind(prefix, 0) == 0) name.erase(0, prefix.size());
  return name;
}

NodePtr module_forward(LoadedModule& m, const std::vector<NodePtr>& inputs) {
  auto call = std::make_shared<Call>();
  call->name = module_name(m.module);
  call->n_inputs = inputs.size();
  call->inputs = inputs;  // described only when a message needs them
  call->exported = m.exported;
  module_detail::check_call(m, *call, inputs);

  // The call runs the module as it is now: a twin shares its tensors but keeps its own
  // flags, so koila_module_train afterwards does not change what this call computes. Its
  // methods are the clone's, whose executors no optimized plan of the caller's reaches.
  if (!m.runnable) {
    try {
      m.runnable = m.module.clone(/*inplace=*/true);
      route_batch_norms(*m.runnable);  // done at koila_module_load already, unless made otherwise
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      module_detail::fail_clone(*call, e);
    }
  }
  call->module = module_detail::twin(*m.runnable, m.module, [](const at::Tensor& t) { return t; });
  // Which submodules train (dropout masks, batch statistics) changes the memory a call needs.
  std::string signature = call->name + ":" + collect_state(*call);

  auto inference = std::make_shared<Inference>();
  BatchRule batch = [inference, name = call->name](const std::vector<const Meta*>&, const Meta&) {
    BatchResult r = inference->batch;
    if (!r.couples.empty()) r.couples = "(module " + name + ") " + r.couples;
    if (!r.stats_couples.empty()) r.stats_couples = "(module " + name + ") " + r.stats_couples;
    return r;
  };
  // Inferred once per structure of call (inference_memo.h).
  if (!m.inference_memo) m.inference_memo = std::make_shared<InferenceMemo>();
  auto infer = [call, inference, memo = m.inference_memo,
                structure = InferenceMemo::structure(*call, signature, inputs)](const std::vector<const Meta*>& in,
                                                                                const Node& self) {
    return memo->infer(structure, *call, *inference, in, self);
  };
  OpSpec spec{.name = "koila_module_forward",
              .run = [call](const Tensors& args, const Node&) { return run_call(*call, args); },
              .batch = std::move(batch),
              .infer = std::move(infer),
              .shown_inputs = inputs.size(),
              .signature = std::move(signature),
              .mutates_state = true,  // buffers (batch norm's running statistics) may change
              .stats_counters = call->batch_norm_counters,
              .stats_buffers = call->batch_norm_buffers};

  std::vector<NodePtr> all = inputs;
  for (const at::Tensor& t : call->state) all.push_back(make_constant(t));
  if (all.empty()) module_detail::fail_nothing_to_run(*call);
  return build(std::move(spec), all);
}

}  // namespace koila
