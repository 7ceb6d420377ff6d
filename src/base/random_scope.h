// Saves the states of the random generators a run on a device can draw from, and restores
// them when done, so that real probe runs (module/probe.cpp, plan/estimate.cpp) and the kernel
// check of a new op (graph/graph.cpp) leave the caller's random streams exactly where they were
// and draw the same numbers each time: the CPU's default generator always (a module may draw
// there and copy to its device), and on CUDA every CUDA device's.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <memory>
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

// One generator's state, to put back. The CPU's is kept as a copy of the generator (its engine and
// cached normal samples), not as its 5 KiB state tensor, which the tracking allocator would count
// as the run's memory while the snapshot lives; a CUDA device's as its state (a few bytes).
class GeneratorSnapshot {
 public:
  explicit GeneratorSnapshot(at::Generator generator) : generator_(std::move(generator)) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    if (generator_.device().is_cpu())
      cpu_ = generator_.get<at::CPUGeneratorImpl>()->clone();
    else
      state_ = generator_.get_state();
  }
  void restore() const {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    if (cpu_) {
      copy_into(generator_.get<at::CPUGeneratorImpl>());
    } else {
      generator_.set_state(state_);
    }
  }
  // The state as LibTorch's get_state gives it (what RandomScope::replay takes).
  at::Tensor state() const {
    if (!cpu_) return state_;
    // A new generator given the copy's engine (at::Generator::clone leaks its copy on
    // LibTorch 1.13: LeakSanitizer found it).
    at::Generator copy = at::make_generator<at::CPUGeneratorImpl>();
    copy_into(copy.get<at::CPUGeneratorImpl>());
    return copy.get_state();
  }
  at::Generator& generator() { return generator_; }

 private:
  // Gives `to` the CPU generator's saved engine and cached normal samples.
  void copy_into(at::CPUGeneratorImpl* to) const {
    to->set_engine(cpu_->engine());
    to->set_next_float_normal_sample(cpu_->next_float_normal_sample());
    to->set_next_double_normal_sample(cpu_->next_double_normal_sample());
  }

  mutable at::Generator generator_;
  std::shared_ptr<at::CPUGeneratorImpl> cpu_;
  at::Tensor state_;
};

// The states of generators_of(device), taken when made; restore() puts them back.
class RandomSnapshot {
 public:
  explicit RandomSnapshot(const c10::Device& device) {
    for (at::Generator& g : generators_of(device)) saved_.emplace_back(std::move(g));
  }
  void restore() const {
    for (const GeneratorSnapshot& s : saved_) s.restore();
  }
  // The states, in generators_of's order, as tensors.
  std::vector<at::Tensor> states() const {
    std::vector<at::Tensor> out;
    for (const GeneratorSnapshot& s : saved_) out.push_back(s.state());
    return out;
  }
  std::vector<GeneratorSnapshot>& generators() { return saved_; }

 private:
  std::vector<GeneratorSnapshot> saved_;
};

class RandomScope {
 public:
  explicit RandomScope(const c10::Device& device) : saved_(device) {}
  // The states saved, in generators_of's order.
  std::vector<at::Tensor> states() const { return saved_.states(); }
  // Makes the next draws those that followed `states` (from states() of a scope on the same
  // device); the states saved come back when the scope ends.
  void replay(const std::vector<at::Tensor>& states) {
    std::vector<GeneratorSnapshot>& generators = saved_.generators();
    for (size_t i = 0; i < generators.size() && i < states.size(); ++i) {
      at::Generator& g = generators[i].generator();
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(states[i]);
    }
  }
  ~RandomScope() { saved_.restore(); }
  // Makes the next draws of every generator those of `seed` (every probe run draws the same
  // numbers).
  void reseed(uint64_t seed) {
    for (GeneratorSnapshot& s : saved_.generators()) {
      at::Generator& g = s.generator();
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_current_seed(seed);
    }
  }
  RandomScope(const RandomScope&) = delete;
  RandomScope& operator=(const RandomScope&) = delete;

 private:
  RandomSnapshot saved_;
};

}  // namespace koila
