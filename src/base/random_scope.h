// Saves the state of a device's default random generator and restores it when done, so
// that real probe runs (module/probe.cpp, plan/estimate.cpp) leave the caller's random stream
// exactly where it was.
#pragma once

#include <ATen/ATen.h>

#include <mutex>

namespace koila {

class RandomScope {
 public:
  explicit RandomScope(const c10::Device& device) : generator_(at::globalContext().defaultGenerator(device)) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    state_ = generator_.get_state();
  }
  ~RandomScope() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(state_);
  }
  // Makes the next draws those of `seed` (every probe run draws the same numbers).
  void reseed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_current_seed(seed);
  }
  RandomScope(const RandomScope&) = delete;
  RandomScope& operator=(const RandomScope&) = delete;

 private:
  at::Generator generator_;
  at::Tensor state_;
};

}  // namespace koila
