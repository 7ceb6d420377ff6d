#include "plan/timeline.h"

#include <algorithm>

#include "base/error.h"
#include "memory/meta_counter.h"
#include "plan/estimate.h"
#include "plan/op_events.h"

namespace koila {
namespace {

// The recording on this thread, while record_timeline() simulates.
struct Recorder : RunObserver, OpListener {
  MetaAllocationScope* scope = nullptr;
  std::vector<at::Tensor> stand_ins;  // the leaves, whose .grad are counted
  Timeline* timeline = nullptr;
  Phase current_phase = Phase::Forward;
  int64_t chunk = 0;
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

  bool listening() const override { return scope != nullptr; }
  void op_ended(std::string_view name, std::string_view suffix, bool backward) override {
    std::string op(name);
    op += suffix;
    if (recomputing() && !backward) op += " (recomputed)";
    push(std::move(op), backward ? Phase::Backward : current_phase, scope->take_window());
  }

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

}  // namespace

size_t Timeline::peak_index() const {
  size_t best = 0;
  for (size_t i = 1; i < events.size(); ++i)
    if (events[i].peak > events[best].peak) best = i;
  return best;
}

uint64_t Timeline::part(MemoryPart which) const {
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
    case MemoryPart::InUse: return base;
    case MemoryPart::Activations: return activations;
    case MemoryPart::Gradients: return grads;
    case MemoryPart::Temporaries: return run - activations - grads;
    case MemoryPart::BeyondSimulation: return beyond();
  }
  fail(Code::Internal, "unknown memory part");
}

Timeline record_timeline(const Plan& plan, bool unsplit) {
  if (!plan.root || !plan.root->lazy())
    fail(Code::Unsupported, "the plan evaluates a concrete value: nothing runs, so there is no timeline");
  const Analysis& a = analysis_of(plan.root, plan.mode);
  Timeline t;
  t.mode = plan.mode;
  const bool split = !unsplit && a.splits(plan.chunk);
  t.unsplit = !split;
  t.chunk = split ? plan.chunk : a.batch;
  t.chunks = split ? plan.chunks : 1;
  t.base = plan.in_use_bytes + plan.reserved_by_others_bytes;
  t.estimate = !unsplit ? plan.peak() : plan.full_peak();
  t.budget = plan.budget_bytes;
  Recorder r;
  r.timeline = &t;
  SimulationWatch watch;
  watch.observer = &r;
  watch.start = [&r](MetaAllocationScope& scope, const std::vector<at::Tensor>& stand_ins) {
    r.stand_ins = stand_ins;
    r.grads_before = r.grads_held();
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
    OpRecording recording(r);
    // The planned run's recomputation (none for the unsplit run's timeline, which is without it).
    simulate_watched(plan.root, plan.device, a, plan.mode, split ? plan.chunk : -1, watch,
                     unsplit ? nullptr : plan.recompute.get());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(Code::Unsupported, std::string("the plan's figures are not simulated (simulating it on meta "
                                        "tensors failed: ") +
                                e.what() + "), so there is no timeline");
  }
  return t;
}

}  // namespace koila
