#include "module/call.h"

#include <torch/csrc/jit/runtime/graph_executor.h>

#include "base/error.h"
#include "module/call_errors.h"
#include "module/results.h"
#include "module/segmented_call.h"
#include "module/twin.h"

namespace koila::module_detail {

std::string input_text(const Call& call) {
  return call.inputs.empty() ? std::string("none") : describe_inputs(call.inputs);
}

namespace {

torch::jit::Module target_of(const Call& call, const Tensors& args, bool batch_norm_eval) {
  bool own = !batch_norm_eval;
  for (size_t i = 0; i < call.state.size(); ++i)
    own &= args[call.n_inputs + i].unsafeGetTensorImpl() == call.state[i].unsafeGetTensorImpl();
  torch::jit::Module target = own ? call.module : twin(call.module, call.module, [&](const at::Tensor& t) {
    auto found = call.index.find(t.unsafeGetTensorImpl());
    return found == call.index.end() ? t : args[call.n_inputs + found->second];
  });
  if (batch_norm_eval) evaluate_batch_norms(target._ivalue());
  return target;
}

c10::IValue run_forward(const Call& call, const torch::jit::Module& target, const Tensors& args, Code fallback) {
  // Operator by operator, as eager LibTorch runs: the same kernels, the same tensors saved
  // for backward, whether the run is real or simulated on meta tensors (an optimized plan
  // would also specialize on the meta device).
  torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
  std::vector<c10::IValue> stack(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(call.n_inputs));
  return as_call(call, fallback, [&] { return const_cast<torch::jit::Module&>(target).forward(std::move(stack)); });
}

// Every result of the call, flattened: in segments where a plan asks (segmented_call.h).
Tensors run_flattened(const Call& call, const Tensors& args, Code fallback, bool batch_norm_eval, bool all_results,
                      c10::IValue* whole) {
  const torch::jit::Module target = target_of(call, args, batch_norm_eval);
  if (std::optional<Tensors> segmented = run_segmented(call, target, args, fallback)) return std::move(*segmented);
  *whole = run_forward(call, target, args, fallback);
  Tensors all;
  if (all_results || call.result >= 0) flatten_results(*whole, all, "module " + call.name);
  return all;
}

}  // namespace

at::Tensor run_call(const Call& call, const Tensors& args, Code fallback, bool batch_norm_eval) {
  c10::IValue whole;
  const Tensors all = run_flattened(call, args, fallback, batch_norm_eval, /*all_results=*/false, &whole);
  if (call.result < 0) {
    if (whole.isTensor()) return whole.toTensor();
    if (all.size() != 1 || !all[0].defined()) fail_result(call, whole);
    return all[0];
  }
  if (static_cast<size_t>(call.result) >= all.size() || !all[static_cast<size_t>(call.result)].defined())
    fail_result_changed(call, all);
  return all[static_cast<size_t>(call.result)];
}

Tensors run_call_all(const Call& call, const Tensors& args, Code fallback, bool batch_norm_eval) {
  c10::IValue whole;
  return run_flattened(call, args, fallback, batch_norm_eval, /*all_results=*/true, &whole);
}

}  // namespace koila::module_detail
