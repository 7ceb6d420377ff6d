#include "module/call.h"

#include <torch/csrc/jit/runtime/graph_executor.h>

#include "base/error.h"
#include "module/call_errors.h"
#include "module/results.h"
#include "module/twin.h"

namespace koila::module_detail {

std::string input_text(const Call& call) {
  return call.inputs.empty() ? std::string("none") : describe_inputs(call.inputs);
}

namespace {

c10::IValue run_forward(const Call& call, const Tensors& args, koila_code fallback, bool batch_norm_eval) {
  bool own = !batch_norm_eval;
  for (size_t i = 0; i < call.state.size(); ++i)
    own &= args[call.n_inputs + i].unsafeGetTensorImpl() == call.state[i].unsafeGetTensorImpl();
  torch::jit::Module target = own ? call.module : twin(call.module, call.module, [&](const at::Tensor& t) {
    auto found = call.index.find(t.unsafeGetTensorImpl());
    return found == call.index.end() ? t : args[call.n_inputs + found->second];
  });
  if (batch_norm_eval) evaluate_batch_norms(target._ivalue());
  // Operator by operator, as eager LibTorch runs: the same kernels, the same tensors saved
  // for backward, whether the run is real or simulated on meta tensors (an optimized plan
  // would also specialize on the meta device).
  torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
  std::vector<c10::IValue> stack(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(call.n_inputs));
  c10::IValue result;
  try {
    result = target.forward(std::move(stack));
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    fail_forward(call, e, fallback);
  }
  return result;
}

}  // namespace

at::Tensor run_call(const Call& call, const Tensors& args, koila_code fallback, bool batch_norm_eval) {
  const c10::IValue result = run_forward(call, args, fallback, batch_norm_eval);
  if (call.result < 0) {
    if (!result.isTensor()) fail_result(call, result);
    return result.toTensor();
  }
  Tensors all;
  flatten_results(result, all, "module " + call.name);
  if (static_cast<size_t>(call.result) >= all.size() || !all[static_cast<size_t>(call.result)].defined())
    fail_result_changed(call, all);
  return all[static_cast<size_t>(call.result)];
}

Tensors run_call_all(const Call& call, const Tensors& args, koila_code fallback, bool batch_norm_eval) {
  Tensors all;
  flatten_results(run_forward(call, args, fallback, batch_norm_eval), all, "module " + call.name);
  return all;
}

}  // namespace koila::module_detail
