// While it lives, makes CUDA's kernels choose alike from run to run: cuDNN deterministic and
// not benchmarking, and no TF32 in cuDNN or cuBLAS; the settings come back when it ends. For
// the sample-mixing probe (module/probe.cpp), whose runs must differ only where the samples
// do. These settings are LibTorch's process-wide ones: CUDA work on other threads while a
// probe runs (the first plan of a module call only) gets them too. Nothing on other devices.
#pragma once

#include <ATen/Context.h>
#include <c10/core/Device.h>

#include <exception>
#include <memory>

#include "base/libtorch_compat.h"

namespace koila {

class FixedKernels {
 public:
  explicit FixedKernels(const c10::Device& device) : active_(device.is_cuda()) {
    if (!active_) return;
    at::Context& c = at::globalContext();
    benchmark_ = c.benchmarkCuDNN();
    deterministic_ = c.deterministicCuDNN();
    tf32_cudnn_ = c.allowTF32CuDNN();
    c.setBenchmarkCuDNN(false);
    c.setDeterministicCuDNN(true);
    c.setAllowTF32CuDNN(false);
    precision_ = std::make_unique<compat::CudaIeeePrecision>();  // (LibTorch 2.10's newer settings)
    try {
      // (LibTorch 2.x refuses to read this where a caller set TF32 through both its legacy
      // and its newer settings: then cuBLAS is left as it is.)
      tf32_cublas_ = c.allowTF32CuBLAS();
      c.setAllowTF32CuBLAS(false);
      cublas_set_ = true;
    } catch (const std::exception&) {}
  }
  ~FixedKernels() {
    if (!active_) return;
    precision_.reset();
    at::Context& c = at::globalContext();
    c.setBenchmarkCuDNN(benchmark_);
    c.setDeterministicCuDNN(deterministic_);
    c.setAllowTF32CuDNN(tf32_cudnn_);
    if (cublas_set_) c.setAllowTF32CuBLAS(tf32_cublas_);
  }
  FixedKernels(const FixedKernels&) = delete;
  FixedKernels& operator=(const FixedKernels&) = delete;

 private:
  bool active_;
  std::unique_ptr<compat::CudaIeeePrecision> precision_;
  bool benchmark_ = false, deterministic_ = false, tf32_cudnn_ = false, tf32_cublas_ = false, cublas_set_ = false;
};

}  // namespace koila
