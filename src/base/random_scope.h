// Saves the states of the random generators a run on a device can draw from, and restores
// them when done, so that real probe runs (module/probe.cpp, plan/estimate.cpp) leave the
// caller's random streams exactly where they were and draw the same numbers each time: the
// CPU's default generator always (a module may draw there and copy to its device), and on
// CUDA every CUDA device's.
#pragma once

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <mutex>
#include <utility>
#include <vector>

namespace koila {

class RandomScope {
 public:
  explicit RandomScope(const c10::Device& device) {
    add(at::globalContext().defaultGenerator(c10::Device(c10::kCPU)));
    if (device.is_cuda()) {
      const int count = at::detail::getCUDAHooks().getNumGPUs();
      for (int i = 0; i < count; ++i)
        add(at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i))));
    }
  }
  ~RandomScope() {
    for (auto& [generator, state] : saved_) {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(state);
    }
  }
  // Makes the next draws of every generator those of `seed` (every probe run draws the same
  // numbers).
  void reseed(uint64_t seed) {
    for (auto& [generator, state] : saved_) {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_current_seed(seed);
    }
  }
  RandomScope(const RandomScope&) = delete;
  RandomScope& operator=(const RandomScope&) = delete;

 private:
  void add(at::Generator generator) {
    at::Tensor state;
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      state = generator.get_state();
    }
    saved_.emplace_back(std::move(generator), std::move(state));
  }

  std::vector<std::pair<at::Generator, at::Tensor>> saved_;
};

}  // namespace koila
