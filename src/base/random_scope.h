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

// The default generators a run on `device` can draw from: the CPU's, and on CUDA every CUDA
// device's.
inline std::vector<at::Generator> generators_of(const c10::Device& device) {
  std::vector<at::Generator> out{at::globalContext().defaultGenerator(c10::Device(c10::kCPU))};
  if (device.is_cuda()) {
    const int count = at::detail::getCUDAHooks().getNumGPUs();
    for (int i = 0; i < count; ++i)
      out.push_back(at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i))));
  }
  return out;
}

// The states of generators_of(device) now, in its order.
inline std::vector<at::Tensor> random_states(const c10::Device& device) {
  std::vector<at::Tensor> out;
  for (at::Generator& g : generators_of(device)) {
    std::lock_guard<std::mutex> lock(g.mutex());
    out.push_back(g.get_state());
  }
  return out;
}

// Puts generators_of(device) back to `states` (random_states of the same device).
inline void set_random_states(const c10::Device& device, const std::vector<at::Tensor>& states) {
  std::vector<at::Generator> generators = generators_of(device);
  for (size_t i = 0; i < generators.size() && i < states.size(); ++i) {
    std::lock_guard<std::mutex> lock(generators[i].mutex());
    generators[i].set_state(states[i]);
  }
}

class RandomScope {
 public:
  explicit RandomScope(const c10::Device& device) {
    for (at::Generator& g : generators_of(device)) add(std::move(g));
  }
  // The states saved, in generators_of's order.
  std::vector<at::Tensor> states() const {
    std::vector<at::Tensor> out;
    for (const auto& [generator, state] : saved_) out.push_back(state);
    return out;
  }
  // Makes the next draws those that followed `states` (from states() of a scope on the same
  // device); the states saved come back when the scope ends.
  void replay(const std::vector<at::Tensor>& states) {
    for (size_t i = 0; i < saved_.size() && i < states.size(); ++i) {
      std::lock_guard<std::mutex> lock(saved_[i].first.mutex());
      saved_[i].first.set_state(states[i]);
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
