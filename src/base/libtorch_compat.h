// What differs between the LibTorch versions koila builds against (Debian's 1.13, PyTorch's
// 2.x up to 2.14), in one place: the rest of the code uses these names and never tests
// TORCH_VERSION_* itself. Each entry says what changed and from which version.
#pragma once

#include <ATen/Context.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Allocator.h>
#include <torch/version.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace c10d {
class Backend;
class ProcessGroup;
}  // namespace c10d
namespace torch::optim {
class Optimizer;
struct OptimizerParamState;
}  // namespace torch::optim

namespace koila::compat {

// c10::Allocator::allocate is const up to 2.2 and not from 2.3, which also made copy_data
// pure virtual. An allocator derives from this and implements make(), which is always const.
class Allocator : public c10::Allocator {
 public:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t bytes) override { return make(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (dest != nullptr && src != nullptr) std::memcpy(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t bytes) const override { return make(bytes); }
#endif

 protected:
  virtual c10::DataPtr make(size_t bytes) const = 0;
};

// LibTorch's major version, for what a whole version lacks (1.13 has no operator newer than
// it, scaled_dot_product_attention among them, which exported programs may call).
constexpr int kLibTorchMajor = TORCH_VERSION_MAJOR;

// An int or SymInt argument as a concrete int (2.x passes sizes as SymInt where 1.13
// passes int; koila's meta kernels see concrete sizes only).
int64_t concrete_int(const c10::IValue& v);
// An int[] or SymInt[] argument as ints.
std::vector<int64_t> concrete_ints(const c10::IValue& v);

// Autograd nodes are held by std::shared_ptr in 1.13 and by c10::intrusive_ptr in 2.14 (the
// base class of torch::autograd::Node changed): the pointer the build's LibTorch holds them
// by (as Tensor::grad_fn() returns it), and a new node of type T held so.
using AutogradNodeRef = std::decay_t<decltype(std::declval<const at::Tensor&>().grad_fn())>;
template <class T, class Ref = AutogradNodeRef>
struct NewAutogradNode;
template <class T>
struct NewAutogradNode<T, std::shared_ptr<torch::autograd::Node>> {
  static std::shared_ptr<T> make() { return std::make_shared<T>(); }
};
template <class T>
struct NewAutogradNode<T, c10::intrusive_ptr<torch::autograd::Node>> {
  static c10::intrusive_ptr<T> make() { return c10::make_intrusive<T>(); }
};
template <class T>
auto make_autograd_node() {
  return NewAutogradNode<T>::make();
}

// c10d's collectives live on ProcessGroup in 1.x and on Backend (which the process group
// dispatches to) from 2.0; ProcessGroupGloo and ProcessGroupNCCL derive from one or the
// other, with the same allreduce/broadcast and Work::wait(timeout).
#if TORCH_VERSION_MAJOR >= 2
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif

// torch::optim keeps each parameter's state (moments, step counts) in a map keyed by the
// parameter's TensorImpl: as its address printed to a string up to 1.13, as the address
// itself from 2.0. The state of `param` (nullptr before its first step), and its
// replacement (nullptr erases it).
torch::optim::OptimizerParamState* param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param);
void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                     std::unique_ptr<torch::optim::OptimizerParamState> state);

// LibTorch 2.10 and later keep a float32 precision per backend and op, besides the older
// allowTF32CuDNN/CuBLAS flags (2.9 keeps them by name): while this lives, CUDA's
// convolutions, recurrent layers and matrix products are set to IEEE float32, and put back
// after. Nothing before 2.10, where the older flags are the only ones. (LibTorch refuses to
// mix the two kinds of setting in some versions: a refusal leaves the precision as it is.)
class CudaIeeePrecision {
 public:
  CudaIeeePrecision() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
    for (const at::Float32Op op : {at::Float32Op::CONV, at::Float32Op::RNN, at::Float32Op::MATMUL}) {
      try {
        at::Context& c = at::globalContext();
        const at::Float32Precision before = c.float32Precision(at::Float32Backend::CUDA, op);
        c.setFloat32Precision(at::Float32Backend::CUDA, op, at::Float32Precision::IEEE);
        saved_.emplace_back(op, before);
      } catch (const std::exception&) {}
    }
#endif
  }
  ~CudaIeeePrecision() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
    for (const auto& [op, before] : saved_) {
      try {
        at::globalContext().setFloat32Precision(at::Float32Backend::CUDA, op, before);
      } catch (const std::exception&) {}
    }
#endif
  }
  CudaIeeePrecision(const CudaIeeePrecision&) = delete;
  CudaIeeePrecision& operator=(const CudaIeeePrecision&) = delete;

 private:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
  std::vector<std::pair<at::Float32Op, at::Float32Precision>> saved_;
#endif
};

// PyTorch's fused scaled_dot_product_attention (flash attention on the CPU, no [L, S] weights
// kept) exists from 2.0. Where it does, its result for q, k, v, an optional mask (undefined:
// none) and the causal flag, and true; false (nothing computed) in 1.13.
bool fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask, bool causal,
                     at::Tensor* out);

}  // namespace koila::compat
