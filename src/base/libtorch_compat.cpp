#include "base/libtorch_compat.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <string>

namespace koila::compat {

int64_t concrete_int(const c10::IValue& v) {
#if TORCH_VERSION_MAJOR >= 2
  if (v.isSymInt()) return v.toSymInt().expect_int();
#endif
  return v.toInt();
}

std::vector<int64_t> concrete_ints(const c10::IValue& v) {
  if (v.isIntList()) return v.toIntVector();
  std::vector<int64_t> out;
  for (const c10::IValue& e : v.toListRef()) out.push_back(concrete_int(e));
  return out;
}

namespace {

#if TORCH_VERSION_MAJOR >= 2
void* state_key(const at::Tensor& param) { return param.unsafeGetTensorImpl(); }
#else
std::string state_key(const at::Tensor& param) { return c10::guts::to_string(param.unsafeGetTensorImpl()); }
#endif

}  // namespace

torch::optim::OptimizerParamState* param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto& states = optimizer.state();
  auto it = states.find(state_key(param));
  return it == states.end() ? nullptr : it->second.get();
}

void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                     std::unique_ptr<torch::optim::OptimizerParamState> state) {
  auto& states = optimizer.state();
  if (state)
    states[state_key(param)] = std::move(state);
  else
    states.erase(state_key(param));
}

bool fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask, bool causal,
                     at::Tensor* out) {
#if TORCH_VERSION_MAJOR >= 2
  *out = at::scaled_dot_product_attention(q, k, v, mask.defined() ? c10::optional<at::Tensor>(mask) : c10::nullopt, 0.0,
                                          causal);
  return true;
#else
  (void)q, (void)k, (void)v, (void)mask, (void)causal, (void)out;
  return false;
#endif
}

}  // namespace koila::compat
