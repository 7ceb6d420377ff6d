// The stack of a boxed kernel, as koila's Meta kernels read and answer it (meta_kernels.cpp,
// attention_meta.cpp): internal to graph/.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/stack.h>

#include <cstddef>
#include <initializer_list>
#include <vector>

namespace koila {
namespace meta_stack {

using Stack = std::vector<c10::IValue>;

// The top `n` entries: the op's arguments, in order.
inline c10::ArrayRef<c10::IValue> args(const Stack* stack, size_t n) {
  return c10::ArrayRef<c10::IValue>(*stack).slice(stack->size() - n, n);
}

// Replaces the top `n` stack entries by `results`.
inline void finish(Stack* stack, size_t n, std::initializer_list<at::Tensor> results) {
  stack->erase(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
  for (const at::Tensor& r : results) stack->emplace_back(r);
}

}  // namespace meta_stack
}  // namespace koila
