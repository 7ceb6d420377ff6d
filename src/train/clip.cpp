#include "train/clip.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

namespace koila {

Clipped clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return {0, true};
  // Each gradient's norm in its own dtype, gathered on the first gradient's device, and the
  // norm of those: PyTorch's order of operations, so that its rounding is PyTorch's.
  const c10::Device first = grads.front().device();
  std::vector<at::Tensor> norms;
  norms.reserve(grads.size());
  for (const at::Tensor& g : grads) norms.push_back(at::linalg_vector_norm(g, 2).to(first));
  const at::Tensor total = at::linalg_vector_norm(at::stack(norms), 2);
  Clipped out;
  out.norm = total.item<double>();
  if (!std::isfinite(out.norm)) return out;
  const at::Tensor coef = at::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
  for (const at::Tensor& g : grads) g.mul_(coef.to(g.device()));
  out.scaled = true;
  return out;
}

}  // namespace koila
