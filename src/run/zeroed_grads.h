#pragma once
// .grad that koila zeroed itself (koila_tensor_zero_grad, koila_optimizer_zero_grad, a
// failed backward putting a zeroed .grad back), remembered with the version they had just
// after. A .grad still at that version holds only zeros, which grad_start() then knows
// without reading the tensor (the usual loop zeroes every .grad in place each step, and
// reading them all took an op and two scalar copies a leaf, twice a step).
#include <ATen/core/Tensor.h>

namespace koila {

// `grad` was just filled with zeros.
void note_zeroed(const at::Tensor& grad);

// Whether `grad` is one that note_zeroed() saw, not written since.
bool known_zero(const at::Tensor& grad);

}  // namespace koila
