// module_forward: the node of one module call, with the OpSpec that runs it, infers its
// result and says where its batch goes (module.h).
#include "module/module.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "module/batch_inference.h"
#include "module/call.h"
#include "module/call_errors.h"
#include "module/inference_memo.h"
#include "module/op_routes.h"
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

namespace {

// A fingerprint of the code `module` runs: the text of every method graph of it and of its
// submodules (LoadedModule::code).
StructureKey code_fingerprint(const torch::jit::Module& module) {
  StructureKey key;
  for (const torch::jit::Module& sub : module.modules()) {
    key.add(sub.type()->name() ? sub.type()->name()->qualifiedName() : std::string());
    for (const torch::jit::Method& method : sub.get_methods()) {
      key.add(method.name());
      key.add(method.graph()->toString(/*print_source_locations=*/false));
    }
  }
  return key;
}

// Builds what a call of `m` on `inputs` shares (checked; `all`: koila_module_forward_all)
// and the signature that tells its structure apart.
std::shared_ptr<Call> prepare_call(LoadedModule& m, const std::vector<NodePtr>& inputs, bool all,
                                   std::string& signature) {
  auto call = std::make_shared<Call>();
  call->name = module_name(m.module);
  call->n_inputs = inputs.size();
  call->inputs = inputs;  // described only when a message needs them
  call->exported = m.exported;
  module_detail::check_call(m, *call, inputs, all);

  // The call runs the module as it is now: a twin shares its tensors but keeps its own
  // flags, so koila_module_train afterwards does not change what this call computes. Its
  // methods are the clone's, whose executors no optimized plan of the caller's reaches.
  if (!m.runnable) {
    try {
      m.runnable = m.module.clone(/*inplace=*/true);
      route_ops(*m.runnable, &m.linear_calls);  // the clone's graphs only: the loaded module saves as loaded
      m.code = code_fingerprint(*m.runnable);
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      module_detail::fail_clone(*call, e);
    }
  }
  call->module = module_detail::twin(*m.runnable, m.module, [](const at::Tensor& t) { return t; });
  // Which submodules train (dropout masks, batch statistics) changes the memory a call needs.
  signature = call->name + "#" + std::to_string(m.code.a) + "." + std::to_string(m.code.b) + ":" + collect_state(*call);
  if (!m.inference_memo) m.inference_memo = std::make_shared<InferenceMemo>();
  return call;
}

// The batch rule of a call: what the inference found, the module named in its messages.
BatchResult named(BatchResult r, const std::string& name) {
  if (!r.couples.empty()) r.couples = "(module " + name + ") " + r.couples;
  if (!r.stats_couples.empty()) r.stats_couples = "(module " + name + ") " + r.stats_couples;
  return r;
}

// The constant node of `t`, the tensor at `position` among the call's: the last call's
// node for it (LoadedModule::state_nodes, sized to the call's tensors) when it still
// stands for it, else a new one.
NodePtr state_node(LoadedModule& m, size_t position, const at::Tensor& t) {
  NodePtr& kept = m.state_nodes[position];
  if (!kept || kept->value.unsafeGetTensorImpl() != t.unsafeGetTensorImpl() || kept->meta.dtype != t.scalar_type() ||
      kept->meta.shape != t.sizes())
    kept = make_constant(t);
  return kept;
}

// The node of a call, its inputs followed by the module's tensors.
NodePtr build_call(LoadedModule& m, OpSpec spec, const Call& call, const std::vector<NodePtr>& inputs) {
  spec.shown_inputs = inputs.size();
  spec.mutates_state = true;  // buffers (batch norm's running statistics) may change
  spec.runs_program = true;
  spec.linear_layers = static_cast<uint32_t>(std::min<size_t>(m.linear_calls, UINT32_MAX));
  spec.stats_counters = call.batch_norm_counters;
  spec.stats_buffers = call.batch_norm_buffers;
  std::vector<NodePtr> all = inputs;
  all.reserve(inputs.size() + call.state.size());
  m.state_nodes.resize(call.state.size());
  for (size_t i = 0; i < call.state.size(); ++i) all.push_back(state_node(m, i, call.state[i]));
  if (all.empty()) module_detail::fail_nothing_to_run(call);
  return build(std::move(spec), all);
}

// What a call with several results found, shared by its node and its result nodes.
struct Results {
  std::vector<bool> tensors;  // which results are tensors (the others None)
  std::vector<Inference> inferences;
  std::vector<Meta> metas;
  size_t first = 0;   // the first tensor result: the call node's own value
  BatchResult batch;  // of the call: a result that mixes samples mixes the call's
  Tensors computed;   // a call computed at once: every result
};

// Checks that a run gave tensors where the call was inferred with them.
void check_results(const Call& call, const Results& r, const Tensors& all) {
  bool same = all.size() == r.tensors.size();
  for (size_t k = 0; same && k < all.size(); ++k) same = !r.tensors[k] || all[k].defined();
  if (same) return;
  Call which = call;  // names the first result that is missing
  for (size_t k = 0; k < r.tensors.size() && which.result < 0; ++k)
    if (r.tensors[k] && (k >= all.size() || !all[k].defined())) which.result = static_cast<int64_t>(k);
  module_detail::fail_result_changed(which, all);
}

}  // namespace

NodePtr module_forward(LoadedModule& m, const std::vector<NodePtr>& inputs) {
  std::string signature;
  const std::shared_ptr<Call> call = prepare_call(m, inputs, /*all=*/false, signature);
  auto inference = std::make_shared<Inference>();
  // Inferred once per structure of call (inference_memo.h).
  auto infer = [call, inference, memo = m.inference_memo,
                structure = InferenceMemo::structure(*call, signature, inputs)](const std::vector<const Meta*>& in,
                                                                                const Node& self) {
    return memo->infer(structure, *call, *inference, in, self);
  };
  OpSpec spec{.name = "koila_module_forward",
              .run = [call](const Tensors& args, const Node&) { return run_call(*call, args); },
              .batch = [inference, name = call->name](const std::vector<const Meta*>&,
                                                      const Meta&) { return named(inference->batch, name); },
              .infer = std::move(infer),
              .signature = std::move(signature)};
  return build_call(m, std::move(spec), *call, inputs);
}

std::vector<NodePtr> module_forward_all(LoadedModule& m, const std::vector<NodePtr>& inputs, size_t capacity,
                                        size_t* count) {
  std::string signature;
  const std::shared_ptr<Call> call = prepare_call(m, inputs, /*all=*/true, signature);
  auto r = std::make_shared<Results>();
  *count = 0;
  // Which results are tensors, then each tensor result inferred as a call of its own (once
  // per structure, inference_memo.h); the call node stands for the first.
  auto infer = [call, r, count, capacity, memo = m.inference_memo,
                structure = InferenceMemo::structure(*call, signature, inputs)](const std::vector<const Meta*>& in,
                                                                                const Node& self) {
    r->tensors = memo->result_tensors(structure, *call, in, self);
    *count = r->tensors.size();
    if (capacity < r->tensors.size())
      fail(Code::InvalidArgument, "module " + call->name + " returns " + std::to_string(r->tensors.size()) +
                                      " results, more than the capacity of " + std::to_string(capacity) +
                                      " (a call with capacity 0 asks for the count)");
    const auto first = std::find(r->tensors.begin(), r->tensors.end(), true);
    if (first == r->tensors.end()) fail(Code::Unsupported, "module " + call->name + " returns no tensor, only None");
    r->first = static_cast<size_t>(first - r->tensors.begin());
    const size_t n = r->tensors.size();
    r->inferences.assign(n, Inference{});
    r->metas.assign(n, Meta{});
    r->batch = BatchResult{};
    for (size_t k = 0; k < n; ++k) {
      if (!r->tensors[k]) continue;
      Call one = *call;  // the call giving result k
      one.result = static_cast<int64_t>(k);
      const std::string key = structure.empty() ? structure : structure + "|result" + std::to_string(k);
      r->metas[k] = memo->infer(key, one, r->inferences[k], in, self);
      const BatchResult& b = r->inferences[k].batch;
      const std::string which = n > 1 ? "(its result " + std::to_string(k) + ") " : std::string();
      if (r->batch.couples.empty() && !b.couples.empty()) r->batch.couples = which + b.couples;
      if (r->batch.stats_couples.empty() && !b.stats_couples.empty()) r->batch.stats_couples = b.stats_couples;
    }
    r->batch.batch_dim = r->batch.couples.empty() ? r->inferences[r->first].batch.batch_dim : -1;
    if (!r->batch.couples.empty()) r->batch.stats_couples.clear();
    return r->metas[r->first];
  };
  OpSpec spec{
      .name = "koila_module_forward_all",
      .run =
          [call, r](const Tensors& args, const Node&) {
            r->computed = run_call_all(*call, args);
            check_results(*call, *r, r->computed);
            return r->computed[r->first];
          },
      .run_all =
          [call, r](const Tensors& args, const Node&) {
            Tensors all = run_call_all(*call, args);
            check_results(*call, *r, all);
            return all;
          },
      .batch = [r, name = call->name](const std::vector<const Meta*>&, const Meta&) { return named(r->batch, name); },
      .infer = std::move(infer),
      .signature = std::move(signature)};
  const NodePtr node = build_call(m, std::move(spec), *call, inputs);

  std::vector<NodePtr> results(r->tensors.size());
  if (!node->lazy()) {  // computed at once: every result as it came
    for (size_t k = 0; k < results.size(); ++k)
      if (r->tensors[k] && r->computed[k].defined()) results[k] = make_constant(r->computed[k]);
    r->computed.clear();
    return results;
  }
  for (size_t k = 0; k < results.size(); ++k) {
    if (!r->tensors[k]) continue;
    if (k == r->first) {
      results[k] = node;
      continue;
    }
    OpSpec result{.name = "koila_module_result",
                  .run = [](const Tensors&, const Node& self) -> at::Tensor {
                    fail(Code::Internal, self.op + " runs only in an evaluation of its call");
                  },
                  .result = static_cast<int64_t>(k),
                  .batch =
                      [r, k](const std::vector<const Meta*>&, const Meta&) {
                        BatchResult b;
                        b.batch_dim = r->inferences[k].batch.batch_dim;
                        return b;
                      },
                  .infer = [r, k](const std::vector<const Meta*>&, const Node&) { return r->metas[k]; },
                  .signature = std::to_string(k)};
    results[k] = build(std::move(result), {node});
  }
  return results;
}

}  // namespace koila
