// Gradient clipping by the joint 2-norm (koila_clip_grad_norm), as PyTorch's
// torch.nn.utils.clip_grad_norm_ computes it: the norm of the per-gradient norms, and every
// gradient multiplied by min(1, max_norm / (norm + 1e-6)).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace koila {

struct Clipped {
  double norm = 0;      // before clipping; 0 when no parameter has a gradient
  bool scaled = false;  // false when the norm is not finite: no gradient was changed
};

// Parameters without a gradient are skipped. max_norm is checked by the caller.
Clipped clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace koila
