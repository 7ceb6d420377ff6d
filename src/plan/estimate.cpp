#include "plan/estimate.h"

#include <c10/core/GradMode.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <optional>
#include <sstream>
#include <string_view>
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
#include "plan/op_events.h"
#include "run/chunked_run.h"
#include "run/executor.h"

namespace koila {
namespace {

std::atomic<bool> simulation_fails{false};
std::atomic<bool> ops_followed{true};  // testing::set_ops_followed
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

// What the caching allocator model needed beyond a simulation's peak (0 off CUDA, where it is
// not run), scaled as every figure is.
uint64_t allocator_beyond(const Simulated& sim) {
  const uint64_t bytes = sim.allocator_peak > sim.peak ? sim.allocator_peak - sim.peak : 0;
  return static_cast<uint64_t>(std::llround(static_cast<double>(bytes) * estimate_scale.load()));
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

// The family an op is keyed by (OpPoint): the backward of koila's fused linear layers and
// convolutions (fused_grads.cpp, which probes do not fuse) is keyed as LibTorch's, one for
// one: a chunk's k-th convolution backward is the probe's k-th.
std::string_view family(std::string_view name) {
  const auto starts = [name](std::string_view prefix) { return name.substr(0, prefix.size()) == prefix; };
  if (starts("FusedLinear") || name == "AddmmBackward0" || name == "MmBackward0") return "linear";
  if (starts("FusedConvolution") || name == "ConvolutionBackward0") return "convolution";
  return name;
}

// Follows a run op by op for the calibration (OpPoint, op_events.h), the bytes held taken
// from `take` (false: it cannot say, and the points are incomplete). A forward's ops are the
// graph's op nodes as the executor runs them (RunObserver::op_ran), and inside a node that
// runs a program (a module call) the LibTorch ops it runs, through RecordFunction; a
// backward's are its autograd functions (BackwardOps). RecordFunction is on only inside
// programs: while a thread-local callback exists, LibTorch builds a record for every op
// and every op nested in one, and autograd's engine rebuilds its callback lists at every
// function. The 1001-node graph's first plan took 1.51-1.57 times as long as without
// following with every op through RecordFunction, 1.13-1.24 with backwards through
// BackwardOps, about 1.06 so (1.095 in instructions: docs/BENCHMARKS.md#bench_planning; the
// earlier ratios are in docs/benchmarks-log/log.md §21 and §22).
class OpPoints : public RunObserver, public OpListener {
 public:
  using Take = std::function<bool(uint64_t* live, uint64_t* peak)>;
  OpPoints(std::vector<OpPoint>& points, Take take) : points_(points), take_(std::move(take)) {}

  bool complete() const { return complete_; }

  // Follows the ops inside programs through `recording` (paused until one runs; null: none).
  void follow_with(OpRecording* recording) { recording_ = recording; }
  // The run ended: its last backward function too.
  void finish() { backward_.finish(); }

  void chunk_started(int64_t) override {
    backward_.finish();
    seen_.clear();
  }
  void phase(Phase next) override {
    phase_ = next;
    if (next == Phase::Forward) backward_.finish();  // (the backward before it ended)
  }
  void backward_from(const std::vector<at::Tensor>& outputs) override { backward_.start(outputs); }
  bool follows_ops() const override { return true; }
  void op_starts(const Node& node) override {
    if (!node.runs_program || !recording_ || in_program_) return;
    in_program_ = true;
    recording_->resume();
  }
  void op_ran(const Node& node) override {
    if (in_program_) {  // its own ops were told
      if (!node.runs_program) return;
      recording_->pause();
      in_program_ = false;
      return;
    }
    op_ended(node.op, {}, /*backward=*/false);
  }
  bool listening() const override { return in_program_; }
  void op_ended(std::string_view name, std::string_view suffix, bool backward) override {
    const std::string_view f = family(name);
    uint64_t named = std::hash<std::string_view>{}(f);
    if (f.data() == name.data()) named = named * 31 + std::hash<std::string_view>{}(suffix);  // (not a family's)
    const uint64_t kind = named * 2 + (backward || phase_ == Phase::Backward ? 1 : 0);
    const uint64_t before = seen_[kind]++;
    OpPoint p;
    p.key = kind ^ (before * 0x9e3779b97f4a7c15ULL + (kind << 6) + (kind >> 2));
    p.accumulates = name.find("AccumulateGrad") != std::string_view::npos;
    if (!take_(&p.live, &p.peak)) {
      complete_ = false;
      return;
    }
    points_.push_back(p);
  }

 private:
  std::vector<OpPoint>& points_;
  Take take_;
  Phase phase_ = Phase::Forward;
  std::unordered_map<uint64_t, uint64_t> seen_;  // ops of each kind so far in the chunk
  bool complete_ = true;
  OpRecording* recording_ = nullptr;
  bool in_program_ = false;  // a program's node runs: RecordFunction's ops told
  BackwardOps backward_{*this};
};

void run_mode(const NodePtr& root, const Analysis& a, RunMode mode, const ChunkRun& run) {
  if (mode == RunMode::Forward) {
    c10::NoGradGuard no_grad;
    forward_chunks(root, a, run);
  } else {
    backward_chunks(root, a, run);
  }
}

// run_mode with its ops noted in `ops` (OpPoints), the bytes held taken from `take`; `ops`
// left empty where `take` could not say.
void run_followed(const NodePtr& root, const Analysis& a, RunMode mode, ChunkRun run, std::vector<OpPoint>& ops,
                  OpPoints::Take take) {
  OpPoints points(ops, std::move(take));
  run.observer = &points;
  {
    OpRecording recording(points, /*paused=*/true);  // (on inside programs only)
    points.follow_with(&recording);
    run_mode(root, a, mode, run);
    points.finish();
    points.follow_with(nullptr);
  }
  if (!points.complete()) ops.clear();
}

// `commit` false: the simulation of a probe (see probe()), whose gradients are computed and
// dropped instead of added into .grad.
// `ops`: its ops (OpPoints) are noted there (not with a watch).
// `allocator_peak`: on CUDA, what the caching allocator must be allowed to reserve for the
// simulated allocations (MetaAllocationScope::model_allocator).
uint64_t simulate(const NodePtr& root, const PlacedDevice& device, const Analysis& a, RunMode mode, int64_t chunk,
                  int64_t max_chunks, bool commit, const SimulationWatch* watch = nullptr,
                  std::vector<OpPoint>* ops = nullptr, uint64_t* allocator_peak = nullptr,
                  const RecomputePlan* recompute = nullptr) {
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
  run.recompute = recompute;
  if (watch) run.observer = watch->observer;
  run.commit = commit;
  MetaAllocationScope scope;
  if (allocator_peak && device.is_cuda()) scope.model_allocator(allocator_expandable(device));
  const SimulatedDevice simulated(device);  // its kernels' paths (rnn_meta.h)
  if (watch) watch->start(scope, stand_ins);
  // Gradients go into the stand-ins' .grad, as they would into the real ones.
  if (ops && !watch) {
    scope.record_windows();
    run_followed(root, a, mode, run, *ops, [&scope](uint64_t* live, uint64_t* peak) {
      const MetaAllocationScope::Window w = scope.take_window();
      *live = w.live;
      *peak = w.peak;
      return true;
    });
  } else {
    run_mode(root, a, mode, run);
  }
  if (watch) watch->end(scope);
  if (allocator_peak) *allocator_peak = scope.allocator_needed_peak();
  return scope.peak();
}

// A real run of the first `max_chunks` chunks of `chunk` samples, gradients dropped; what
// ops may change in place (running statistics) is copied first, the random state restored
// after. Held to the budget and to `room` beyond what is in use: a probe that does not fit
// fails instead of going over either. `like_a_chunk`: the gradients go into the leaves'
// .grad as the run's do (each as autograd has it; a held .grad snapshotted and zeroed first),
// and every .grad is put back afterwards as after a failed run (ChunkRun::rolled_back), so
// that the probe holds what the run's chunks hold rather than every gradient at once, and
// needs no more room than they do. (It copied the leaves before: a model whose parameters
// outweigh its activations, torchvision's convnext_tiny, then never had the room to probe a
// chunk of one sample, whose depthwise convolutions' backward takes workspaces that chunks
// of 2 and 4 do not, and its plan fell 56% short.) Like a run, it is not to share its leaves
// with a run on another thread.
// `ops`: its ops (OpPoints) are noted there; left empty where the device's figures are not
// this thread's own (RunMemory::take_window).
// `needed`: where the run itself (not the probe's copies) runs out of memory, what it needed
// at least (what it held and asked for: the CPU's figure; on a device, more than it held).
uint64_t probe(const NodePtr& root, const PlacedDevice& device, const Analysis& a, RunMode mode, int64_t chunk,
               int64_t max_chunks, uint64_t room, uint64_t budget_bytes, bool like_a_chunk = false,
               std::vector<OpPoint>* ops = nullptr, uint64_t* needed = nullptr) {
  probe_count.fetch_add(1);
  // Everything the probe allocates stays within the budget and the room, its copies of
  // state included (the random generators' are kept outside the tracked memory:
  // base/random_scope.h); only what the run itself takes is the probe's peak. What a library
  // keeps for the process once first used there (cuBLAS's workspace) is taken before, not
  // counted as the graph's.
  prepare_device(device);
  const uint64_t current = memory_stats(device).current;
  BudgetScope limit(device, std::min(budget_bytes, current + std::min(room, UINT64_MAX - current)));
  std::unordered_map<const Node*, at::Tensor> copies;
  for (const Node* node : a.nodes()) {
    if (node->kind != NodeKind::Op || !node->mutates_state) continue;
    for (const NodePtr& in : node->inputs)
      if (in && in->kind != NodeKind::Op && !in->value.requires_grad() && in->meta.batch_dim < 0 &&
          !copies.count(in.get()))
        copies.emplace(in.get(), in->value.clone());
  }
  RandomScope random(device);
  ChunkRun run;
  run.chunk = chunk;
  run.max_chunks = max_chunks;
  run.commit = false;
  run.rolled_back = like_a_chunk && mode == RunMode::Training;  // (a forward has no gradients to place)
  run.leaf = [&copies](const Node& node) {
    auto found = copies.find(&node);
    return found != copies.end() ? found->second : node.value;
  };
  RunMemory usage(device);
  try {
    if (ops && usage.take_window()) {
      run_followed(root, a, mode, run, *ops, [&usage](uint64_t* live, uint64_t* peak) {
        const std::optional<RunMemory::Window> w = usage.take_window();
        if (!w) return false;
        *live = w->live;
        *peak = w->peak;
        return true;
      });
    } else {
      run_mode(root, a, mode, run);
      if (ops) ops->clear();
    }
  } catch (...) {
    if (needed && is_out_of_memory(std::current_exception())) *needed = std::max(usage.refused(), usage.peak() + 1);
    throw;
  }
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

// The ops of one run (a probe's, or its simulation's) by key, an op that the other run does
// not have folded into the next one that it has (its peak counts there; what it left held
// shows in that op's own figures): real kernels may run ops their meta kernels do not
// (checks of values), and the reverse.
std::unordered_map<uint64_t, OpPoint> shared_ops(const std::vector<OpPoint>& ops, const std::vector<OpPoint>& other) {
  std::unordered_set<uint64_t> theirs;
  for (const OpPoint& p : other) theirs.insert(p.key);
  std::unordered_map<uint64_t, OpPoint> shared;
  uint64_t peak = 0;
  for (const OpPoint& p : ops) {
    peak = std::max(peak, p.peak);
    if (!theirs.count(p.key)) continue;
    OpPoint& q = shared[p.key];
    q = p;
    q.peak = peak;
    peak = 0;
  }
  return shared;
}

// What a probe held beyond its simulation op by op (OpExtra by key), where at least 90% of
// the simulation's ops are the probe's too; empty otherwise.
std::unordered_map<uint64_t, OpExtra> extra_by_op(const std::vector<OpPoint>& real, const std::vector<OpPoint>& sim) {
  std::unordered_map<uint64_t, OpExtra> by_op;
  if (real.empty() || sim.empty()) return by_op;
  const std::unordered_map<uint64_t, OpPoint> r = shared_ops(real, sim), m = shared_ops(sim, real);
  if (m.size() * 10 < sim.size() * 9) return by_op;
  for (const auto& [key, p] : r) {
    const OpPoint& q = m.at(key);
    const OpExtra e{static_cast<int64_t>(p.peak) - static_cast<int64_t>(q.peak),
                    static_cast<int64_t>(p.live) - static_cast<int64_t>(q.live)};
    by_op[key] = e;
  }
  return by_op;
}

// What a pass in `chunks` chunks that keeps batch statistics per chunk (batch_stats.h) holds
// beyond its simulation, which does not keep them: a copy of the running statistics and
// counters the graph names, the counters once more, and per chunk each batch norm call's
// mean and inverse standard deviation ([C] each, as the running mean and variance), all of
// them at the last chunk. Held from the first chunk to the end: added to the peak.
uint64_t per_chunk_stats_bytes(const Analysis& a, int64_t chunks) {
  uint64_t statistics = 0, counters = 0;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const Node* node : a.nodes()) {
    for (const at::Tensor& t : node->stats_buffers)
      if (seen.insert(t.unsafeGetTensorImpl()).second) statistics += static_cast<uint64_t>(t.nbytes());
    for (const at::Tensor& t : node->stats_counters)
      if (seen.insert(t.unsafeGetTensorImpl()).second) counters += static_cast<uint64_t>(t.nbytes());
  }
  return statistics + 2 * counters + static_cast<uint64_t>(std::max<int64_t>(chunks, 1)) * statistics;
}

}  // namespace

Estimator::Estimator(const NodePtr& root, const Analysis& a, RunMode mode)
    : root_(root),
      a_(a),
      mode_(mode),
      record_(graph_record(root, a, mode, &grad_starts_)),
      device_(root->meta.device),
      budget_(budget(device_)) {}

int64_t Estimator::normalized(int64_t chunk) const { return a_.splits(chunk) ? chunk : -1; }

// Under the record's lock.
const Simulated* Estimator::simulated(int64_t chunk, int64_t max_chunks, bool as_probe) {
  GraphRecord& r = *record_;
  if (!r.simulation_failure.empty()) return nullptr;
  const auto key = std::make_pair(chunk, as_probe ? -max_chunks : max_chunks);  // probes: negative counts
  auto found = r.simulated.find(key);
  if (found == r.simulated.end()) {
    try {
      Simulated sim;
      // Ops followed on the CPU only: a device's probes cannot be (probe()), so their
      // simulations' ops would be recorded for nothing.
      const bool follow = ops_followed.load() && device_.is_cpu();
      sim.peak = simulate(root_, device_, a_, mode_, chunk, max_chunks, !as_probe, nullptr, follow ? &sim.ops : nullptr,
                          &sim.allocator_peak);
      found = r.simulated.emplace(key, std::move(sim)).first;
    } catch (...) {
      r.simulation_failure = reason(std::current_exception());
      return nullptr;
    }
  }
  return &found->second;
}

// Under the record's lock: a real probe of the first chunk of `samples` against the
// simulation of the same probe; `difference` is what the probe took beyond it (or less).
// `like_a_chunk`: the run's first chunks instead, gradients going into .grad and put back
// afterwards (see probe()), against the run's own simulation of them.
Estimator::Probed Estimator::probe_against_simulation(int64_t samples, int64_t* difference, std::string* why,
                                                      bool like_a_chunk, std::unordered_map<uint64_t, OpExtra>* by_op) {
  const int64_t chunks = like_a_chunk ? kSimulatedChunks : 1;
  const Simulated* sim = simulated(samples, chunks, /*as_probe=*/!like_a_chunk);
  if (!sim) return Probed::NoSimulation;
  if (static_cast<double>(sim->peak) * (1 + kMargin) > static_cast<double>(room_)) return Probed::NoRoom;
  uint64_t needed = 0;  // set where the probe's run itself ran out of memory
  try {
    std::vector<OpPoint> ops;
    const bool follow = by_op && !sim->ops.empty();  // (nothing to compare with otherwise)
    const uint64_t real = probe(root_, device_, a_, mode_, samples, chunks, room_, budget_, like_a_chunk,
                                follow ? &ops : nullptr, &needed);
    *difference = static_cast<int64_t>(real) - static_cast<int64_t>(sim->peak);
    if (by_op) *by_op = extra_by_op(ops, sim->ops);
    return Probed::Measured;
  } catch (...) {
    const std::exception_ptr e = std::current_exception();
    *why = reason(e);
    // The run itself ran out of this plan's room: that chunk, and larger ones, need at least
    // what it needed (the probe's own copies running out say nothing of the run).
    if (needed > 0) needed_at_least_[samples] = std::max(needed_at_least_[samples], needed);
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
  bool by_op = true;  // every probe's ops matched its simulation's
  for (int64_t samples : sizes) {
    int64_t difference = 0;
    std::string why;
    std::unordered_map<uint64_t, OpExtra> ops;
    const Probed probed = probe_against_simulation(samples, &difference, &why, false, &ops);
    if (probed == Probed::NoSimulation) return;
    if (probed == Probed::NoRoom) break;  // later
    c.done = true;
    if (probed == Probed::Measured) {
      c.probes[samples] = difference;
      by_op = by_op && !ops.empty();
      c.by_op[samples] = std::move(ops);
      c.failure.clear();
      continue;
    }
    c.failure = why;
    if (probed == Probed::OutOfMemory) {  // no room now (other runs, a smaller budget): again in a later plan
      c.done = false;
      c.probes.clear();
      c.by_op.clear();
      return;
    }
    break;
  }
  if (!by_op) c.by_op.clear();
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
      r.probes[samples] = probe(root_, device_, a_, mode_, samples, 2, room_, budget_);
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
std::optional<uint64_t> Estimator::calibrate_as_run(Calibration& c, int64_t samples) {
  auto found = c.as_run.find(samples);
  if (found == c.as_run.end()) {
    int64_t difference = 0;
    std::string why;
    const Probed probed = probe_against_simulation(samples, &difference, &why, /*like_a_chunk=*/true);
    if (probed == Probed::Measured)  // at least the kernels' scalars, as calibrate() adds
      found = c.as_run.emplace(samples, std::max<uint64_t>(std::max<int64_t>(difference, 0), kKernelScalars)).first;
    else if (probed == Probed::Failed)
      found = c.as_run.emplace(samples, std::nullopt).first;  // `bytes` stays
    else
      return std::nullopt;  // no simulation, or no room now (or it ran out of it): in a later plan
  }
  return found->second;
}

namespace {

// What the probes held beyond their simulations at the op `key` (during it, or after it:
// `live`), for a chunk of `samples`: a chunk of a probe's size, what that probe took; else
// the most of the probes, and beyond the largest the growth from the smaller to the larger
// a sample. At least 0; nullopt: no probe ran that op.
std::optional<double> op_extra(const Calibration& c, uint64_t key, bool live, int64_t samples) {
  std::vector<std::pair<int64_t, double>> seen;  // by samples
  for (const auto& [n, ops] : c.by_op) {
    const auto found = ops.find(key);
    if (found == ops.end()) continue;
    const double v = static_cast<double>(live ? found->second.live : found->second.peak);
    if (n == samples) return std::max(0.0, v);
    seen.emplace_back(n, v);
  }
  if (seen.empty()) return std::nullopt;
  double most = seen.front().second;
  for (const auto& [n, v] : seen) most = std::max(most, v);
  if (seen.size() >= 2 && samples > seen.back().first) {
    const auto &hi = seen.back(), &lo = seen[seen.size() - 2];
    most += std::max(0.0, (hi.second - lo.second) / static_cast<double>(hi.first - lo.first)) *
            static_cast<double>(samples - hi.first);
  }
  return std::max(0.0, most);
}

}  // namespace

// Under the calibration's lock: the chunk's simulated ops each with what the probes held
// beyond the simulation at the same op, the most of them over the simulated peak; at least
// the kernels' scalars. Ops that no probe ran: the run's accumulation into .grad with what
// the probes still held after the op before it; any other with `global`, the figure of the
// probes' peaks, as without ops to compare.
uint64_t Estimator::added_op_by_op(const Calibration& c, const Simulated& sim, int64_t samples, uint64_t global) {
  double most = static_cast<double>(sim.peak), held = 0;
  for (const OpPoint& op : sim.ops) {
    double extra = op.accumulates ? held : std::max(held, static_cast<double>(global));
    if (const std::optional<double> at_op = op_extra(c, op.key, /*live=*/false, samples)) {
      extra = *at_op;
      held = op_extra(c, op.key, /*live=*/true, samples).value_or(0);
    }
    most = std::max(most, static_cast<double>(op.peak) + extra);
  }
  const double added = std::ceil(most - static_cast<double>(sim.peak));
  return std::max<uint64_t>(static_cast<uint64_t>(added), kKernelScalars);
}

uint64_t Estimator::extra(int64_t chunk) {
  chunk = normalized(chunk);
  const int64_t samples = chunk < 0 ? a_.batch : chunk;
  GraphRecord& r = *record_;
  std::lock_guard<std::mutex> lock(r.mutex);
  uint64_t bytes = 0;
  if (const Simulated* sim = simulated(chunk, kSimulatedChunks)) {
    bytes = sim->peak + added_beyond(chunk, samples, *sim);
  } else {
    if (!r.probed) fit();
    if (!r.probes.empty())
      bytes = static_cast<uint64_t>(std::ceil(r.intercept + r.slope * static_cast<double>(samples)));
    else
      bytes = coarse_estimate(a_, mode_, chunk);
  }
  if (per_chunk_stats(a_, batch_stats_, chunk)) bytes += per_chunk_stats_bytes(a_, (a_.batch + chunk - 1) / chunk);
  bytes = static_cast<uint64_t>(std::llround(static_cast<double>(bytes) * estimate_scale.load()));
  // A probe's run of this many samples or fewer ran out of this plan's room: at least what it needed.
  for (const auto& [n, needed] : needed_at_least_)
    if (n <= samples) bytes = std::max(bytes, needed);
  const int64_t key = chunk < 0 ? a_.batch : chunk;
  for (const auto& [c, seen] : r.observed)
    if (c <= key || key < 0) bytes = std::max(bytes, seen);
  return bytes;
}

uint64_t Estimator::added_beyond(int64_t chunk, int64_t samples, const Simulated& sim) {
  Calibration& c = *record_->calibration;
  std::lock_guard<std::mutex> calibration_lock(c.mutex);
  if (!c.done) calibrate(c);
  uint64_t added = c.bytes;
  if (!c.probes.empty()) {
    const int64_t smallest = c.probes.begin()->first, largest = std::prev(c.probes.end())->first;
    if (samples < smallest)
      added = calibrate_as_run(c, samples).value_or(added);
    else {
      const auto same = c.probes.find(samples);
      if (same != c.probes.end())  // a chunk of a probe's size: what that probe took, not the larger's
        added = std::max<uint64_t>(static_cast<uint64_t>(std::max<int64_t>(same->second, 0)), kKernelScalars);
      else if (samples > largest)
        added += static_cast<uint64_t>(c.slope * static_cast<double>(samples - largest));
      if (!c.by_op.empty() && !sim.ops.empty()) {
        // The calibration is final once it has ops (calibrate): computed once per chunk size,
        // not at every plan (a plan of every step walks no ops).
        if (!sim.added_op_by_op) sim.added_op_by_op = added_op_by_op(c, sim, samples, added);
        added = *sim.added_op_by_op;
      } else if (chunk >= 0 && samples <= largest) {
        // No ops to follow (a device's probes, whose figures are the process's): what a probe
        // took at its own peak is not what the run takes at the run's (cuDNN's workspace in a
        // convolution's backward, beside gradients the run adds as it goes: convnext_tiny's
        // chunks of 2 on an H200 were estimated 24% short). A chunk within the probes' sizes
        // is probed as the run goes, as a smaller one is.
        added = calibrate_as_run(c, samples).value_or(added);
      }
    }
  } else if (!c.done && chunk >= 0 && samples < 2) {
    // The calibration probes (2 samples and more) ran out of this plan's room: a chunk of one
    // is probed as the run goes, as it is below the probes.
    added = calibrate_as_run(c, samples).value_or(added);
  }
  return added;
}

std::optional<uint64_t> Estimator::extra_recomputed(const RecomputePlan& plan, uint64_t* allocator) {
  const int64_t chunk = normalized(plan.chunk);
  const int64_t samples = chunk < 0 ? a_.batch : chunk;
  GraphRecord& r = *record_;
  std::lock_guard<std::mutex> lock(r.mutex);
  const Simulated* sim = simulated(chunk, kSimulatedChunks);
  if (!sim) return std::nullopt;  // (no simulation: nothing to choose segments by)
  const auto key = std::make_pair(chunk, plan.key());
  auto found = r.recomputed.find(key);
  if (found == r.recomputed.end()) {
    Simulated recomputed;
    try {
      recomputed.peak = simulate(root_, device_, a_, mode_, chunk, kSimulatedChunks, /*commit=*/true, nullptr, nullptr,
                                 &recomputed.allocator_peak, &plan);
    } catch (...) {
      return std::nullopt;
    }
    found = r.recomputed.emplace(key, recomputed).first;
  }
  const Simulated& run = found->second;
  uint64_t added = added_beyond(chunk, samples, *sim);
  {
    // Where the probes were followed op by op: a recomputed op's forward runs again during the
    // backward, when more is held than when it first ran, so what any op took beyond its
    // simulation may fall at the recomputing run's peak (batch norm's temporaries over its
    // input, on the CPU: a run of 6 of them recomputed took 535 KiB more than simulated).
    Calibration& c = *r.calibration;
    std::lock_guard<std::mutex> calibration_lock(c.mutex);
    if (!c.by_op.empty())
      for (const OpPoint& op : sim->ops)
        if (const std::optional<double> at_op = op_extra(c, op.key, /*live=*/false, samples))
          added = std::max(added, static_cast<uint64_t>(std::ceil(*at_op)));
  }
  // What a real run of the same chunk without recomputation took beyond its simulation (where
  // no probe could calibrate: a batch of one sample has no smaller chunk to probe): the kernels'
  // workspaces it showed are the recomputing run's too (a U-Net's convolutions on the CPU, 4 MiB
  // beyond the simulation of 17).
  const auto seen_plain = r.observed.find(samples);
  if (seen_plain != r.observed.end() && seen_plain->second > sim->peak)
    added = std::max(added, seen_plain->second - sim->peak);
  const uint64_t stats =
      per_chunk_stats(a_, batch_stats_, chunk) ? per_chunk_stats_bytes(a_, (a_.batch + chunk - 1) / chunk) : 0;
  // What a recomputing run of this chunk took beyond its own simulation: kernels' workspaces
  // where its peak fell, inside a segment's backward, which no plain run showed (the CPU's
  // oneDNN convolutions' buffers: bench_recompute's unet-bn ran 16 MiB beyond the plain run's
  // figure). Another choice's run meets the same kernels there: the figure is its too.
  for (const auto& [other, seen] : r.observed_recomputed) {
    if (other.first != chunk) continue;
    const auto its = r.recomputed.find(other);
    if (its != r.recomputed.end() && seen > its->second.peak + stats)
      added = std::max(added, seen - its->second.peak - stats);
  }
  uint64_t bytes = run.peak + added + stats;
  bytes = static_cast<uint64_t>(std::llround(static_cast<double>(bytes) * estimate_scale.load()));
  const auto seen = r.observed_recomputed.find(key);
  if (seen != r.observed_recomputed.end()) bytes = std::max(bytes, seen->second);
  if (allocator) *allocator = device_.is_cuda() ? allocator_beyond(run) : 0;
  return bytes;
}

namespace {

// A forward of `schedule` on meta tensors with autograd, in a chunk of `chunk` samples (-1: the
// whole batch), module calls and programs segmenting their own graph where `segmenting`
// (run/recompute.h). `observe` sees each node's value as it is made; `done` sees the roots and
// the counting scope once the forward is over, while every value autograd keeps is alive.
// Throws where the simulation cannot run.
void meta_forward(const Analysis& a, RunMode mode, const PlacedDevice& device, const Schedule& schedule, int64_t chunk,
                  bool segmenting, const std::function<void(const Node&, const at::Tensor&)>& observe,
                  const std::function<void(const MetaLeaves&, const Tensors&, const MetaAllocationScope&)>& done) {
  const MetaLeaves leaves(a.nodes(), mode);
  EvalOptions options;
  options.grad = true;
  options.leaf = [&leaves](const Node& node) { return leaves(node); };
  if (chunk >= 0) {
    options.chunk_start = 0;
    options.chunk_length = chunk;
  }
  if (observe)
    options.observe = [&observe](const Node& node, const Tensors&, const at::Tensor& value) { observe(node, value); };
  MetaAllocationScope scope;  // (meta: nothing is allocated)
  const SimulatedDevice simulated(device);
  c10::AutoGradMode on(true);
  const SegmentingPrograms inside(segmenting);
  const Tensors roots = evaluate(schedule, options);
  done(leaves, roots, scope);
}

}  // namespace

std::vector<double> Estimator::saved_by_autograd(const Schedule& schedule, int64_t chunk) {
  chunk = normalized(chunk);
  {
    std::lock_guard<std::mutex> lock(record_->mutex);
    const auto known = record_->saved_by_autograd.find(chunk);
    if (known != record_->saved_by_autograd.end() && known->second.size() == schedule.order.size())
      return known->second;
  }
  const size_t n = schedule.order.size();
  std::vector<double> saved(n, 0);
  try {
    std::unordered_map<const Node*, size_t> position;
    for (size_t i = 0; i < n; ++i) position.emplace(schedule.order[i], i);
    std::vector<std::pair<size_t, c10::weak_intrusive_ptr<c10::StorageImpl>>> values;
    const auto observe = [&](const Node& node, const at::Tensor& value) {
      if (value.defined() && value.has_storage())
        values.emplace_back(position.at(&node), value.storage().getWeakStorageImpl());
    };
    meta_forward(a_, mode_, device_, schedule, chunk, false, observe,
                 [&](const MetaLeaves& leaves, const Tensors& roots, const MetaAllocationScope&) {
                   // (a leaf's, and a root's, are not the forward's to free)
                   std::unordered_set<const c10::StorageImpl*> counted;
                   for (const auto& [impl, stand_in] : leaves.by_impl)
                     if (stand_in.has_storage()) counted.insert(stand_in.storage().unsafeGetStorageImpl());
                   for (const at::Tensor& root : roots)
                     if (root.defined() && root.has_storage()) counted.insert(root.storage().unsafeGetStorageImpl());
                   for (const auto& [i, weak] : values) {
                     const c10::intrusive_ptr<c10::StorageImpl> alive = weak.lock();
                     if (!alive || !counted.insert(alive.get()).second) continue;
                     saved[i] = static_cast<double>(alive->nbytes());
                   }
                 });
  } catch (...) {
    return {};
  }
  std::lock_guard<std::mutex> lock(record_->mutex);
  record_->saved_by_autograd[chunk] = saved;
  return saved;
}

uint64_t Estimator::freed_inside_programs(const Schedule& schedule, int64_t chunk) {
  chunk = normalized(chunk);
  {
    std::lock_guard<std::mutex> lock(record_->mutex);
    const auto known = record_->freed_inside_programs.find(chunk);
    if (known != record_->freed_inside_programs.end()) return known->second;
  }
  uint64_t kept[2] = {0, 0};
  try {
    for (const bool segmenting : {false, true})
      meta_forward(a_, mode_, device_, schedule, chunk, segmenting, {},
                   [&](const MetaLeaves&, const Tensors&, const MetaAllocationScope& scope) {
                     kept[segmenting] = scope.current();
                   });
  } catch (...) {
    return 0;
  }
  const uint64_t freed = kept[0] > kept[1] ? kept[0] - kept[1] : 0;
  std::lock_guard<std::mutex> lock(record_->mutex);
  record_->freed_inside_programs[chunk] = freed;
  return freed;
}

void Estimator::record_recomputed_run(const RecomputePlan& plan, uint64_t bytes) {
  const auto key = std::make_pair(normalized(plan.chunk), plan.key());
  std::lock_guard<std::mutex> lock(record_->mutex);
  uint64_t& seen = record_->observed_recomputed[key];
  seen = std::max(seen, bytes);
}

uint64_t Estimator::allocator_overhead(int64_t chunk) {
  if (!device_.is_cuda()) return 0;
  chunk = normalized(chunk);
  std::lock_guard<std::mutex> lock(record_->mutex);
  const Simulated* sim = simulated(chunk, kSimulatedChunks);
  if (!sim)
    return static_cast<uint64_t>(std::llround(static_cast<double>(kUnmodelledAllocatorBytes) * estimate_scale.load()));
  return allocator_beyond(*sim);
}

uint64_t simulate_watched(const NodePtr& root, const PlacedDevice& device, const Analysis& a, RunMode mode,
                          int64_t chunk, const SimulationWatch& watch, const RecomputePlan* recompute) {
  return simulate(root, device, a, mode, a.splits(chunk) ? chunk : -1, kSimulatedChunks, /*commit=*/true, &watch,
                  nullptr, nullptr, recompute);
}

std::string Estimator::simulation_failure() {
  std::lock_guard<std::mutex> lock(record_->mutex);
  return record_->simulation_failure;
}

namespace {

// The sample counts of probes, as a reader says them: "4", "2 and 4", "1, 2 and 4".
template <class Map>
std::string sizes_listed(const Map& probes) {
  std::string text;
  size_t k = 0;
  for (const auto& entry : probes) {
    text += (k == 0 ? "" : k + 1 == probes.size() ? " and " : ", ") + std::to_string(entry.first);
    ++k;
  }
  return text;
}

}  // namespace

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
      os << " " << sizes_listed(c.probes);
      if (!c.by_op.empty()) {
        os << " samples op by op (what each op took beyond its simulation, added to that op's; +"
           << human_bytes(c.bytes) << " at the probes' peaks";
      } else {
        os << " samples (+" << human_bytes(c.bytes);
        if (c.slope > 0) os << " and " << human_bytes(static_cast<uint64_t>(c.slope)) << " a sample";
        os << " beyond the simulation";
      }
      for (const auto& [samples, d] : c.as_run)
        if (d) os << "; chunks of " << samples << ": probed as the run's, +" << human_bytes(*d) << " instead";
      os << ")";
    } else if (!c.failure.empty())
      os << ", not calibrated (the probe failed: " << c.failure << ")";
    else
      os << ", not calibrated (no lazy batch to probe with)";
  } else if (!r.probes.empty()) {
    os << "measured on real probes of " << sizes_listed(r.probes) << " samples and fitted ("
       << human_bytes(static_cast<uint64_t>(r.intercept)) << " + " << human_bytes(static_cast<uint64_t>(r.slope))
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
void set_ops_followed(bool followed) {
  ops_followed.store(followed);
  forget_graph_records();  // what was simulated with (or without) its ops no longer holds
}

uint64_t probes_run() { return probe_count.load(); }
uint64_t simulations_run() { return simulation_count.load(); }
void set_estimate_scale(double scale) { estimate_scale.store(scale); }
}  // namespace testing

}  // namespace koila
