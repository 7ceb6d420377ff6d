#include "plan/estimate.h"

#include <c10/core/GradMode.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "base/random_scope.h"
#include "base/text.h"
#include "graph/rnn_meta.h"
#include "memory/budget.h"
#include "memory/device_memory.h"
#include "memory/meta_counter.h"
#include "memory/run_memory.h"
#include "run/chunked_run.h"
#include "run/executor.h"

namespace koila {
namespace {

std::atomic<bool> simulation_fails{false};
std::atomic<uint64_t> probe_count{0};
std::atomic<uint64_t> simulation_count{0};
std::atomic<double> estimate_scale{1.0};

constexpr int64_t kSimulatedChunks = 2;  // the first chunk creates absent .grad, the second adds into them

// The first line, without a closing period (the description adds its own).
std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  while (!line.empty() && (line.back() == '.' || line.back() == ' ')) line.pop_back();
  return line;
}

std::string reason(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return first_line(err.what_without_backtrace());
  } catch (const std::exception& err) {
    return first_line(torch_complaint(err));
  } catch (...) {
    return "an unknown error";
  }
}

// Meta stand-ins for the graph's concrete tensors, made before counting starts (they exist
// already); the same tensor used twice gets the same stand-in. For training, a stand-in has
// a meta .grad where the real tensor has a .grad (a backward adds into it in place; one
// that is not all zeros is snapshotted), and those known all-zero are noted.
struct MetaLeaves {
  std::unordered_map<const c10::TensorImpl*, at::Tensor> by_impl;
  std::unordered_set<const c10::TensorImpl*> zero_grads;  // stand-ins

  MetaLeaves(const std::vector<const Node*>& nodes, RunMode mode) {
    for (const Node* node : nodes) {
      if (node->kind == NodeKind::Op) continue;
      const at::Tensor& real = node->value;
      if (by_impl.count(real.unsafeGetTensorImpl())) continue;
      at::Tensor stand_in = at::empty_strided(real.sizes(), real.strides(), real.options().device(at::kMeta));
      if (real.requires_grad()) stand_in.requires_grad_(true);
      const GradStart start = mode == RunMode::Training ? grad_start(real) : GradStart::Absent;
      if (start != GradStart::Absent) {
        const at::Tensor& g = real.grad();
        stand_in.mutable_grad() = at::empty_strided(g.sizes(), g.strides(), g.options().device(at::kMeta));
        if (start == GradStart::Zero) zero_grads.insert(stand_in.unsafeGetTensorImpl());
      }
      by_impl.emplace(real.unsafeGetTensorImpl(), stand_in);
    }
  }
  at::Tensor operator()(const Node& node) const { return by_impl.at(node.value.unsafeGetTensorImpl()); }
  bool grad_is_zero(const at::Tensor& stand_in) const { return zero_grads.count(stand_in.unsafeGetTensorImpl()) > 0; }
};

void run_mode(const NodePtr& root, const Analysis& a, RunMode mode, const ChunkRun& run) {
  if (mode == RunMode::Forward) {
    c10::NoGradGuard no_grad;
    forward_chunks(root, a, run);
  } else {
    backward_chunks(root, a, run);
  }
}

// `commit` false: the simulation of a probe (see probe()), whose gradients are computed and
// dropped instead of added into .grad.
uint64_t simulate(const NodePtr& root, const Analysis& a, RunMode mode, int64_t chunk, int64_t max_chunks, bool commit,
                  const SimulationWatch* watch = nullptr) {
  if (simulation_fails.load()) throw std::runtime_error("simulation disabled for a test");
  simulation_count.fetch_add(1);
  const MetaLeaves leaves(a.nodes(), mode);
  std::vector<at::Tensor> stand_ins;
  if (watch)
    for (const auto& [impl, stand_in] : leaves.by_impl) stand_ins.push_back(stand_in);
  ChunkRun run;
  run.chunk = chunk;
  run.max_chunks = max_chunks;
  run.leaf = [&leaves](const Node& node) { return leaves(node); };
  run.grad_is_zero = [&leaves](const at::Tensor& stand_in) { return leaves.grad_is_zero(stand_in); };
  run.meta = true;
  if (watch) run.observer = watch->observer;
  run.commit = commit;
  MetaAllocationScope scope;
  const SimulatedDevice simulated(canonical_device(root->meta.device));  // its kernels' paths (rnn_meta.h)
  if (watch) watch->start(scope, stand_ins);
  run_mode(root, a, mode, run);  // gradients go into the stand-ins' .grad, as they would into the real ones
  if (watch) watch->end(scope);
  return scope.peak();
}

// A real run of the first `max_chunks` chunks of `chunk` samples, gradients dropped; what
// ops may change in place (running statistics) is copied first, the random state restored
// after. Held to the budget and to `room` beyond what is in use: a probe that does not fit
// fails instead of going over either. `like_a_chunk`: the leaves that require grad are
// copied too (with their .grad) and the gradients go into the copies' .grad as a run's go
// into the real ones (each as autograd has it), so that the probe holds what the run's
// chunks hold rather than every gradient at once; the copies count against the room, not
// the peak. Not where a leaf's value has autograd history (its leaves would be reached).
uint64_t probe(const NodePtr& root, const Analysis& a, RunMode mode, int64_t chunk, int64_t max_chunks, uint64_t room,
               bool like_a_chunk = false) {
  const c10::Device device = canonical_device(root->meta.device);
  probe_count.fetch_add(1);
  // Everything the probe allocates stays within the budget and the room, its copies of
  // state and of the random generator's (5 KiB on the CPU) included; only what the run
  // itself takes is the probe's peak. What a library keeps for the process once first used
  // there (cuBLAS's workspace) is taken before, not counted as the graph's.
  prepare_device(device);
  const uint64_t current = memory_stats(device).current;
  BudgetScope limit(device, std::min(budget(device), current + std::min(room, UINT64_MAX - current)));
  std::unordered_map<const Node*, at::Tensor> copies;
  for (const Node* node : a.nodes()) {
    if (node->kind != NodeKind::Op || !node->mutates_state) continue;
    for (const NodePtr& in : node->inputs)
      if (in && in->kind != NodeKind::Op && !in->value.requires_grad() && in->meta.batch_dim < 0 &&
          !copies.count(in.get()))
        copies.emplace(in.get(), in->value.clone());
  }
  const bool into_copies = like_a_chunk && mode == RunMode::Training;  // (a forward has no gradients to place)
  if (into_copies) {
    c10::NoGradGuard no_grad;
    for (const Node* node : a.nodes()) {
      if (node->kind == NodeKind::Op || !node->value.requires_grad() || copies.count(node)) continue;
      if (!node->value.is_leaf())
        fail(KOILA_ERROR_UNSUPPORTED, "a probe like a chunk cannot copy a tensor with autograd history");
      at::Tensor copy = node->value.detach().clone().requires_grad_(true);
      if (node->value.grad().defined()) copy.mutable_grad() = node->value.grad().clone();
      copies.emplace(node, std::move(copy));
    }
  }
  RandomScope random(device);
  ChunkRun run;
  run.chunk = chunk;
  run.max_chunks = max_chunks;
  run.commit = false;
  run.into_copied_leaves = into_copies;
  run.leaf = [&copies](const Node& node) {
    auto found = copies.find(&node);
    return found != copies.end() ? found->second : node.value;
  };
  RunMemory usage(device);
  run_mode(root, a, mode, run);
  return usage.peak();
}

// When the simulation cannot run and there is nothing to probe with: every result held at
// once, three times over for training (activations, what autograd saves, gradients), plus
// the gradients of the parameters twice. Errs high.
uint64_t coarse_estimate(const Analysis& a, RunMode mode, int64_t chunk) {
  double bytes = 0, params = 0;
  for (const Node* node : a.nodes()) {
    const double element = static_cast<double>(c10::elementSize(node->meta.dtype));
    if (node->kind != NodeKind::Op) {
      if (node->value.requires_grad()) params += static_cast<double>(node->value.numel()) * element;
      continue;
    }
    double numel = 1;
    for (size_t d = 0; d < node->meta.shape.size(); ++d)
      numel *= static_cast<double>(static_cast<int64_t>(d) == node->meta.batch_dim && chunk >= 0 ? chunk
                                                                                                 : node->meta.shape[d]);
    bytes += numel * element;
  }
  if (mode == RunMode::Training) bytes = 3 * bytes + 2 * params;
  return static_cast<uint64_t>(bytes);
}

}  // namespace

Estimator::Estimator(const NodePtr& root, const Analysis& a, RunMode mode)
    : root_(root), a_(a), mode_(mode), record_(graph_record(root, a, mode, &grad_starts_)) {}

int64_t Estimator::normalized(int64_t chunk) const { return a_.splits(chunk) ? chunk : -1; }

// Under the record's lock.
bool Estimator::simulated(int64_t chunk, int64_t max_chunks, uint64_t* bytes, bool as_probe) {
  GraphRecord& r = *record_;
  if (!r.simulation_failure.empty()) return false;
  const auto key = std::make_pair(chunk, as_probe ? -max_chunks : max_chunks);  // probes: negative counts
  auto found = r.simulated.find(key);
  if (found == r.simulated.end()) {
    try {
      found = r.simulated.emplace(key, simulate(root_, a_, mode_, chunk, max_chunks, !as_probe)).first;
    } catch (...) {
      r.simulation_failure = reason(std::current_exception());
      return false;
    }
  }
  *bytes = found->second;
  return true;
}

// Under the record's lock: a real probe of the first chunk of `samples` against the
// simulation of the same probe; `difference` is what the probe took beyond it (or less).
// `like_a_chunk`: the run's first chunks instead, gradients going into copies of the leaves
// as the run's go into .grad (see probe()), against the run's own simulation of them.
Estimator::Probed Estimator::probe_against_simulation(int64_t samples, int64_t* difference, std::string* why,
                                                      bool like_a_chunk) {
  const int64_t chunks = like_a_chunk ? kSimulatedChunks : 1;
  uint64_t sim = 0;
  if (!simulated(samples, chunks, &sim, /*as_probe=*/!like_a_chunk)) return Probed::NoSimulation;
  if (static_cast<double>(sim) * (1 + kMargin) > static_cast<double>(room_)) return Probed::NoRoom;
  try {
    const uint64_t real = probe(root_, a_, mode_, samples, chunks, room_, like_a_chunk);
    *difference = static_cast<int64_t>(real) - static_cast<int64_t>(sim);
    return Probed::Measured;
  } catch (...) {
    const std::exception_ptr e = std::current_exception();
    *why = reason(e);
    return is_out_of_memory(e) ? Probed::OutOfMemory : Probed::Failed;
  }
}

// Under the record's lock and the calibration's: real probes of the first chunk of 2 and 4
// samples (2 alone for batches under 8, 1 for a batch of 2), each against the simulation
// of the same probe (a probe holds gradients differently from a run: all of them at once
// before dropping them, where a run adds each into a zeroed .grad as it comes). Not one
// sample: backends choose other kernels for it (oneDNN reorders convolution weights only
// for more), and batch norm in training needs two. Two sizes, because some backend
// temporaries grow with the chunk.
void Estimator::calibrate(Calibration& c) {
  std::vector<int64_t> sizes;
  if (a_.batch >= 8)
    sizes = {2, 4};
  else if (a_.splits(2))
    sizes = {2};
  else if (a_.splits(1))
    sizes = {1};
  for (int64_t samples : sizes) {
    int64_t difference = 0;
    std::string why;
    const Probed probed = probe_against_simulation(samples, &difference, &why);
    if (probed == Probed::NoSimulation) return;
    if (probed == Probed::NoRoom) break;  // later
    c.done = true;
    if (probed == Probed::Measured) {
      c.probes[samples] = difference;
      c.failure.clear();
      continue;
    }
    c.failure = why;
    if (probed == Probed::OutOfMemory) {  // no room now (other runs, a smaller budget): again in a later plan
      c.done = false;
      c.probes.clear();
      return;
    }
    break;
  }
  if (c.probes.empty()) return;
  int64_t base = static_cast<int64_t>(kKernelScalars);
  for (const auto& [samples, d] : c.probes) base = std::max(base, d);
  c.bytes = static_cast<uint64_t>(base);
  if (c.probes.size() >= 2) {
    const auto hi = std::prev(c.probes.end()), lo = std::prev(hi);
    c.slope = std::max(0.0, static_cast<double>(hi->second - lo->second) / static_cast<double>(hi->first - lo->first));
  }
}

// Under the record's lock: probes of 1, 2, 4, ... samples up to a quarter of the batch (two
// chunks each, as a chunked run adds into what the first created; about one step's work in
// all), and the line through the two largest, raised until no probe exceeds it. Peaks grow
// faster with larger chunks (another op's memory takes over), so the largest probes set
// the slope.
void Estimator::fit() {
  GraphRecord& r = *record_;
  for (int64_t samples = 1; samples == 1 || samples <= a_.batch / 4; samples *= 2) {
    if (!a_.splits(samples)) break;
    try {
      r.probes[samples] = probe(root_, a_, mode_, samples, 2, room_);
    } catch (...) {
      const std::exception_ptr e = std::current_exception();
      r.probe_failure = reason(e);
      r.probes.clear();
      r.probed = !is_out_of_memory(e);  // no room now: try again in a later plan
      return;
    }
    r.probed = true;
  }
  if (r.probes.empty()) return;
  double slope = 0;
  if (r.probes.size() >= 2) {
    const auto last = std::prev(r.probes.end()), before = std::prev(last);
    slope = std::max(0.0, (static_cast<double>(last->second) - static_cast<double>(before->second)) /
                              static_cast<double>(last->first - before->first));
  } else {  // one probe (a batch of 2 to 7): proportional to it
    const auto& [c, m] = *r.probes.begin();
    slope = static_cast<double>(m) / static_cast<double>(c);
  }
  double intercept = 0;
  for (const auto& [c, m] : r.probes)
    intercept = std::max(intercept, static_cast<double>(m) - slope * static_cast<double>(c));
  r.slope = slope;
  r.intercept = intercept;
}

// Under the record's lock and the calibration's: a probe of the run's first chunks of
// `samples` as the run goes (probe_against_simulation, like a chunk).
std::optional<uint64_t> Estimator::calibrate_below(Calibration& c, int64_t samples) {
  auto found = c.below.find(samples);
  if (found == c.below.end()) {
    int64_t difference = 0;
    std::string why;
    const Probed probed = probe_against_simulation(samples, &difference, &why, /*like_a_chunk=*/true);
    if (probed == Probed::Measured)  // at least the kernels' scalars, as calibrate() adds
      found = c.below.emplace(samples, std::max<uint64_t>(std::max<int64_t>(difference, 0), kKernelScalars)).first;
    else if (probed == Probed::Failed)
      found = c.below.emplace(samples, std::nullopt).first;  // `bytes` stays
    else
      return std::nullopt;  // no simulation, or no room now: in a later plan
  }
  return found->second;
}

uint64_t Estimator::extra(int64_t chunk) {
  chunk = normalized(chunk);
  const int64_t samples = chunk < 0 ? a_.batch : chunk;
  GraphRecord& r = *record_;
  std::lock_guard<std::mutex> lock(r.mutex);
  uint64_t bytes = 0;
  if (simulated(chunk, kSimulatedChunks, &bytes)) {
    Calibration& c = *r.calibration;
    std::lock_guard<std::mutex> calibration_lock(c.mutex);
    if (!c.done) calibrate(c);
    uint64_t added = c.bytes;
    if (!c.probes.empty()) {
      const int64_t smallest = c.probes.begin()->first, largest = std::prev(c.probes.end())->first;
      if (samples < smallest) added = calibrate_below(c, samples).value_or(added);
      if (samples > largest) added += static_cast<uint64_t>(c.slope * static_cast<double>(samples - largest));
    }
    bytes += added;
  } else {
    if (!r.probed) fit();
    if (!r.probes.empty())
      bytes = static_cast<uint64_t>(std::ceil(r.intercept + r.slope * static_cast<double>(samples)));
    else
      bytes = coarse_estimate(a_, mode_, chunk);
  }
  bytes = static_cast<uint64_t>(std::llround(static_cast<double>(bytes) * estimate_scale.load()));
  const int64_t key = chunk < 0 ? a_.batch : chunk;
  for (const auto& [c, seen] : r.observed)
    if (c <= key || key < 0) bytes = std::max(bytes, seen);
  return bytes;
}

uint64_t simulate_watched(const NodePtr& root, const Analysis& a, RunMode mode, int64_t chunk,
                          const SimulationWatch& watch) {
  return simulate(root, a, mode, a.splits(chunk) ? chunk : -1, kSimulatedChunks, /*commit=*/true, &watch);
}

std::string Estimator::simulation_failure() {
  std::lock_guard<std::mutex> lock(record_->mutex);
  return record_->simulation_failure;
}

std::string Estimator::source() {
  GraphRecord& r = *record_;
  std::lock_guard<std::mutex> lock(r.mutex);
  std::ostringstream os;
  if (r.simulation_failure.empty()) {
    os << "simulated on meta tensors";
    const Calibration& c = *r.calibration;
    std::lock_guard<std::mutex> calibration_lock(r.calibration->mutex);
    if (!c.probes.empty()) {
      os << ", calibrated by real probes of";
      for (const auto& [samples, d] : c.probes) os << " " << samples;
      os << " samples (+" << human_bytes(c.bytes);
      if (c.slope > 0) os << " and " << human_bytes(static_cast<uint64_t>(c.slope)) << " a sample";
      os << " beyond the simulation";
      for (const auto& [samples, d] : c.below)
        if (d) os << "; chunks of " << samples << ": probed as the run's, +" << human_bytes(*d) << " instead";
      os << ")";
    } else if (!c.failure.empty())
      os << ", not calibrated (the probe failed: " << c.failure << ")";
    else
      os << ", not calibrated (no lazy batch to probe with)";
  } else if (!r.probes.empty()) {
    os << "measured on real probes of";
    for (const auto& [c, m] : r.probes) os << " " << c;
    os << " samples and fitted (" << human_bytes(static_cast<uint64_t>(r.intercept)) << " + "
       << human_bytes(static_cast<uint64_t>(r.slope))
       << " a sample), as simulating the graph on meta tensors failed: " << r.simulation_failure;
  } else {
    os << "a coarse estimate: simulating the graph on meta tensors failed: " << r.simulation_failure;
    if (!r.probe_failure.empty()) os << "; probing failed: " << r.probe_failure;
  }
  if (!r.observed.empty()) os << "; never below the peaks of earlier runs of this graph";
  return os.str();
}

void Estimator::record_run(int64_t chunk, uint64_t bytes) {
  chunk = normalized(chunk);
  const int64_t key = chunk < 0 ? a_.batch : chunk;
  std::lock_guard<std::mutex> lock(record_->mutex);
  uint64_t& seen = record_->observed[key];
  seen = std::max(seen, bytes);
}

namespace testing {
void set_simulation_fails(bool fails) {
  simulation_fails.store(fails);
  forget_graph_records();  // what was simulated (or failed to be) before no longer holds
}
uint64_t probes_run() { return probe_count.load(); }
uint64_t simulations_run() { return simulation_count.load(); }
void set_estimate_scale(double scale) { estimate_scale.store(scale); }
}  // namespace testing

}  // namespace koila
