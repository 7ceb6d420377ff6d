#include "plan/timeline.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "memory/meta_counter.h"
#include "plan/estimate.h"

namespace koila {
namespace {

constexpr const char* kBackwardPrefix = "autograd::engine::evaluate_function: ";

// A C++ autograd function's node is named after its class
// ("torch::autograd::CppNode<koila::(anonymous namespace)::FusedLinear>"): shown as the
// class's own name with "Backward" ("FusedLinearBackward"), as LibTorch names its nodes.
std::string readable(std::string name) {
  const size_t open = name.find("CppNode<");
  const size_t close = name.rfind('>');
  if (open == std::string::npos || close == std::string::npos || close < open) return name;
  std::string inner = name.substr(open + 8, close - open - 8);
  const size_t colon = inner.rfind("::");
  if (colon != std::string::npos) inner = inner.substr(colon + 2);
  return inner + "Backward";
}

// The recording on this thread, while record_timeline() simulates.
struct Recorder : RunObserver {
  MetaAllocationScope* scope = nullptr;
  std::vector<at::Tensor> stand_ins;  // the leaves, whose .grad are counted
  Timeline* timeline = nullptr;
  Phase current_phase = Phase::Forward;
  int64_t chunk = 0;
  int depth = 0;              // observed ops open on this thread (only the outermost makes an event)
  uint64_t grads_before = 0;  // .grad held before the run (not counted by the scope)

  // The chunk strategy's marks (the simulation carries the recorder as its observer).
  void chunk_started(int64_t index) override { chunk = index; }
  void phase(Phase next) override {
    if (!scope) return;
    current_phase = next;
    scope->set_backward(next == Phase::Backward);
  }

  uint64_t grads_held() const {
    uint64_t bytes = 0;
    for (const at::Tensor& t : stand_ins) {
      const at::Tensor& g = t.grad();
      if (g.defined()) bytes += static_cast<uint64_t>(g.numel()) * g.element_size();
    }
    return bytes;
  }
  uint64_t grads() const {
    const uint64_t held = grads_held();
    return held > grads_before ? held - grads_before : 0;
  }

  void event(std::string op, Phase phase_of_op) { push(std::move(op), phase_of_op, scope->take_window()); }

  void push(std::string op, Phase phase_of_op, const MetaAllocationScope::Window& w) {
    TimelineEvent e;
    e.op = std::move(op);
    e.phase = phase_of_op;
    e.chunk = chunk;
    e.live = timeline->base + w.live;
    e.peak = timeline->base + w.peak;
    e.forward_at_peak = w.forward_at_peak;
    e.grads = grads();
    timeline->events.push_back(std::move(e));
  }
};

thread_local Recorder* recording_here = nullptr;

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) {
  if (recording_here && recording_here->scope) ++recording_here->depth;
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  Recorder* r = recording_here;
  if (!r || !r->scope || --r->depth > 0) return;
  r->depth = 0;
  std::string name = fn.name();
  Phase phase = r->current_phase;
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION || name.rfind(kBackwardPrefix, 0) == 0) {
    phase = Phase::Backward;
    if (name.rfind(kBackwardPrefix, 0) == 0) name = name.substr(std::strlen(kBackwardPrefix));
    name = readable(std::move(name));
  }
  try {
    r->event(std::move(name), phase);
  } catch (...) {
    // LibTorch only logs what a callback throws; a missing event shows in the totals.
  }
}

// Installs the recorder and its callbacks on this thread for its lifetime.
class Recording {
 public:
  explicit Recording(Recorder& r) : outer_(recording_here) {
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                             .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
    recording_here = &r;
  }
  ~Recording() {
    recording_here = outer_;
    at::removeCallback(handle_);
  }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

 private:
  Recorder* outer_;
  at::CallbackHandle handle_;
};

}  // namespace

size_t Timeline::peak_index() const {
  size_t best = 0;
  for (size_t i = 1; i < events.size(); ++i)
    if (events[i].peak > events[best].peak) best = i;
  return best;
}

uint64_t Timeline::part(koila_memory_part which) const {
  const TimelineEvent& e = events[peak_index()];
  const uint64_t run = e.peak - base;  // what the run holds at its peak
  uint64_t activations = 0, grads = 0;
  if (mode == RunMode::Training) {
    activations = std::min(e.forward_at_peak, run);
    grads = std::min(e.grads, run - activations);
  } else {
    activations = std::min(e.live - base, run);  // results still held after the op
  }
  switch (which) {
    case KOILA_PART_IN_USE: return base;
    case KOILA_PART_ACTIVATIONS: return activations;
    case KOILA_PART_GRADIENTS: return grads;
    case KOILA_PART_TEMPORARIES: return run - activations - grads;
    case KOILA_PART_BEYOND_SIMULATION: return beyond();
  }
  fail(KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_memory_part");
}

Timeline record_timeline(const Plan& plan, bool unsplit) {
  if (!plan.root || !plan.root->lazy())
    fail(KOILA_ERROR_UNSUPPORTED, "the plan evaluates a concrete value: nothing runs, so there is no timeline");
  const Analysis& a = analysis_of(plan.root, plan.mode);
  Timeline t;
  t.mode = plan.mode;
  const bool split = !unsplit && a.splits(plan.chunk);
  t.unsplit = !split;
  t.chunk = split ? plan.chunk : a.batch;
  t.chunks = split ? plan.chunks : 1;
  t.base = plan.in_use_bytes + plan.reserved_by_others_bytes;
  t.estimate = split ? plan.peak() : plan.full_peak();
  t.budget = plan.budget_bytes;
  Recorder r;
  r.timeline = &t;
  SimulationWatch watch;
  watch.observer = &r;
  watch.start = [&r](MetaAllocationScope& scope, const std::vector<at::Tensor>& stand_ins) {
    r.stand_ins = stand_ins;
    r.grads_before = r.grads_held();
    r.depth = 0;
    scope.record_windows();
    r.scope = &scope;
  };
  watch.end = [&r, &t](MetaAllocationScope& scope) {
    // What was allocated after the last observed op (a final chunk's copy, say).
    const MetaAllocationScope::Window w = scope.take_window();
    if (t.events.empty() || w.peak > t.events.back().live - t.base) r.push("(end of run)", r.current_phase, w);
    r.scope = nullptr;
  };
  try {
    Recording recording(r);
    simulate_watched(plan.root, a, plan.mode, split ? plan.chunk : -1, watch);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(KOILA_ERROR_UNSUPPORTED, std::string("the plan's figures are not simulated (simulating it on meta "
                                              "tensors failed: ") +
                                      e.what() + "), so there is no timeline");
  }
  return t;
}

}  // namespace koila
