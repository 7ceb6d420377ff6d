#include "train/rng_file.h"

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/error.h"
#include "base/framed_file.h"
#include "base/random_scope.h"

namespace koila {
namespace {

using nlohmann::json;

const FrameKind kRngFile{"KOILARNG",
                         1,
                         "the random generator states",
                         "a random generator file",
                         "no generator is changed",
                         "the random generator states"};

int cuda_devices() { return at::hasCUDA() ? static_cast<int>(at::detail::getCUDAHooks().getNumGPUs()) : 0; }

at::Generator generator_of(const c10::Device& device) { return at::globalContext().defaultGenerator(device); }

at::Tensor state_of(at::Generator& g) {
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state().contiguous();
}

void set_state(at::Generator& g, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

}  // namespace

void save_random_states(const std::string& path) {
  json generators = json::array();
  std::vector<at::Tensor> states;
  uint64_t payload = 0;
  // The generators koila's runs draw from: the CPU's, and with CUDA each device's.
  for (at::Generator& g : generators_of(c10::Device(cuda_devices() > 0 ? c10::kCUDA : c10::kCPU))) {
    at::Tensor state = state_of(g);
    const uint64_t bytes = static_cast<uint64_t>(state.numel()) * state.element_size();
    generators.push_back({{"device", g.device().str()}, {"bytes", bytes}});
    payload += bytes;
    states.push_back(std::move(state));
  }
  FrameWriter out(path, kRngFile, json{{"generators", generators}}.dump(), payload);
  for (const at::Tensor& s : states) out.put(s.data_ptr(), static_cast<size_t>(s.numel()) * s.element_size());
  out.commit();
}

void load_random_states(const std::string& path) {
  FrameReader in(path, kRngFile);
  std::vector<std::pair<c10::Device, uint64_t>> entries;
  try {
    const json header = json::parse(in.header());
    const json& generators = header.at("generators");
    if (!generators.is_array() || generators.empty()) in.corrupt("its header lists no generator");
    for (const json& g : generators) {
      const std::string name = g.at("device").get<std::string>();
      c10::Device device(c10::kCPU);
      try {
        device = c10::Device(name);
      } catch (const c10::Error&) {
        in.corrupt("its header names an unknown device \"" + name + "\"");
      }
      if (!device.is_cpu() && !device.is_cuda())
        in.corrupt("its header names a device koila keeps no generator for, \"" + name + "\"");
      entries.emplace_back(device, g.at("bytes").get<uint64_t>());
    }
  } catch (const json::exception& e) {
    in.corrupt(std::string("its header is malformed (") + e.what() + ")");
  }
  uint64_t total = 0;
  for (const auto& [device, bytes] : entries) {
    if (device.is_cuda() && (!device.has_index() || device.index() >= cuda_devices()))
      fail(Code::InvalidArgument, "'" + path + "' holds the state of " + device.str() + "'s generator, and this " +
                                      "process has " + std::to_string(cuda_devices()) +
                                      " CUDA devices; no generator is changed");
    total += bytes;
  }
  if (total != in.payload_bytes()) in.corrupt("its payload is not the generators' states its header lists");
  // Every state read, and each checked against its generator, before any is set.
  std::vector<at::Generator> generators;
  std::vector<at::Tensor> states, before;
  for (const auto& [device, bytes] : entries) {
    at::Generator g = generator_of(device);
    at::Tensor now = state_of(g);
    if (static_cast<uint64_t>(now.numel()) * now.element_size() != bytes)
      in.corrupt("the state of " + device.str() + "'s generator is " + std::to_string(bytes) +
                 " bytes, and this LibTorch's is " + std::to_string(now.numel() * now.element_size()) +
                 " (saved by another LibTorch?)");
    at::Tensor state = at::empty_like(now);
    in.read(state.data_ptr(), static_cast<size_t>(bytes));
    generators.push_back(std::move(g));
    states.push_back(std::move(state));
    before.push_back(std::move(now));
  }
  size_t set = 0;
  try {
    for (; set < generators.size(); ++set) set_state(generators[set], states[set]);
  } catch (const c10::Error& e) {
    for (size_t i = 0; i < set; ++i) set_state(generators[i], before[i]);
    in.corrupt(std::string("a generator refused its state (") + e.what_without_backtrace() + ")");
  }
}

}  // namespace koila
