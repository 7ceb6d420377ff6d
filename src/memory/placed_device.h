// A device made canonical once ("cuda" becomes "cuda:N", the current CUDA device), as a value
// that then travels with what it belongs to (a plan, an estimator) instead of each user making
// it canonical again. It converts to c10::Device wherever LibTorch or memory/ takes one.
#pragma once

#include <c10/core/Device.h>

#include "memory/device_memory.h"

namespace koila {

class PlacedDevice {
 public:
  PlacedDevice() = default;  // the CPU
  explicit PlacedDevice(c10::Device device) : device_(canonical_device(device)) {}

  const c10::Device& get() const { return device_; }
  operator const c10::Device&() const { return device_; }  // NOLINT: used as one
  bool is_cpu() const { return device_.is_cpu(); }
  bool is_cuda() const { return device_.is_cuda(); }
  std::string str() const { return device_.str(); }

  friend bool operator==(const PlacedDevice& a, const PlacedDevice& b) { return a.device_ == b.device_; }
  friend bool operator!=(const PlacedDevice& a, const PlacedDevice& b) { return !(a == b); }

 private:
  c10::Device device_ = c10::Device(c10::kCPU);
};

}  // namespace koila
