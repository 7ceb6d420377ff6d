#include "run/chunked_run.h"

#include <c10/core/GradMode.h>
#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "base/pointer_index.h"
#include "kernels/batch_stats.h"
#include "kernels/fused_grads.h"
#include "run/executor.h"
#include "run/zeroed_grads.h"

namespace koila {
namespace {

// Calls body(start, length) for each chunk, the first `max_chunks` only when that is > 0;
// the run's observer sees each start, and each end as a chunk of pass `what`.
// `stats` sees each chunk start and end.
template <class F>
void for_each_chunk(int64_t batch, const ChunkRun& run, const char* what, ChunkStats& stats, F&& body) {
  const int64_t total = (batch + run.chunk - 1) / run.chunk;
  int64_t done = 0;
  for (int64_t start = 0; start < batch; start += run.chunk) {
    if (run.max_chunks > 0 && done == run.max_chunks) return;
    stats.start_chunk();
    if (run.observer) {
      run.observer->chunk_started(done);  // each chunk starts with its forward
      run.observer->phase(Phase::Forward);
    }
    body(start, std::min(run.chunk, batch - start));
    stats.end_chunk();
    ++done;
    if (run.observer) run.observer->chunk_done(what, done, total);
  }
}

// An unsplit run is one chunk.
void report_whole(const ChunkRun& run, const char* what) {
  if (run.observer) run.observer->chunk_done(what, 1, 1);
}

void mark_phase(const ChunkRun& run, Phase phase) {
  if (run.observer) run.observer->phase(phase);
}

// The backward from `outputs` runs next.
void mark_backward(const ChunkRun& run, const Tensors& outputs) {
  if (!run.observer) return;
  run.observer->phase(Phase::Backward);
  run.observer->backward_from(outputs);
}

// How this run treats the running statistics of batch norm in training (batch_stats.h):
// real committed runs of graphs that have it restore them when they fail, and observe each
// chunk's own under KOILA_BATCH_STATS_PER_CHUNK (see ChunkRun::per_chunk_stats).
ChunkStats::Handling stats_handling(const Analysis& a, const ChunkRun& run) {
  if (run.meta || !run.commit || a.stats_coupled.empty()) return ChunkStats::Handling::Off;
  return run.per_chunk_stats && a.splits(run.chunk) ? ChunkStats::Handling::PerChunk : ChunkStats::Handling::Restore;
}

// What every evaluation of the run is given: its leaves, and its ops told to an observer
// that follows them.
EvalOptions options_for(const ChunkRun& run) {
  EvalOptions options;
  options.leaf = run.leaf;
  if (RunObserver* o = run.observer; o && o->follows_ops()) {
    options.op_starts = [o](const Node& node) { o->op_starts(node); };
    options.observe = [o](const Node& node, const Tensors&, const at::Tensor&) { o->op_ran(node); };
  }
  return options;
}

at::TensorOptions tensor_options(const Meta& m, const ChunkRun& run) {
  return at::TensorOptions().dtype(m.dtype).device(run.meta ? c10::Device(c10::kMeta) : m.device);
}

// Per chunk: the count each mean-reducing boundary averaged over (observed as it runs; in
// a simulation, the chunk's length).
struct ChunkCounts {
  std::unordered_map<const Node*, size_t> index;
  std::vector<double> counts;
  ChunkCounts(const std::vector<const Node*>& boundaries) : counts(boundaries.size(), 0) {
    for (size_t k = 0; k < boundaries.size(); ++k) index.emplace(boundaries[k], k);
  }
  // (after whatever options_for has the evaluation observe)
  void observe(EvalOptions& options, const ChunkRun& run) {
    if (run.meta) return;
    options.observe = [this, before = std::move(options.observe)](const Node& node, const Tensors& args,
                                                                  const at::Tensor& value) {
      if (before) before(node, args, value);
      auto found = index.find(&node);
      if (found != index.end() && node.reduction == BatchReduction::Mean) counts[found->second] = node.mean_count(args);
    };
  }
  void start_chunk(int64_t length, const ChunkRun& run) {
    if (run.meta) std::fill(counts.begin(), counts.end(), static_cast<double>(length));
  }
};

// The boundaries' values over the whole batch, from chunks combined by their reduction.
// The chunks' batch statistics go to `stats` (see ChunkRun::per_chunk_stats).
Tensors combine_boundaries(const Analysis& a, const ChunkRun& run, std::vector<double>* totals_out, ChunkStats& stats) {
  const size_t n = a.boundaries.size();
  Tensors combined(n);
  std::vector<double> totals(n, 0);
  ChunkCounts counts(a.boundaries);
  EvalOptions options = options_for(run);
  counts.observe(options, run);
  for_each_chunk(a.batch, run, "forward", stats, [&](int64_t start, int64_t length) {
    options.chunk_start = start;
    options.chunk_length = length;
    counts.start_chunk(length, run);
    Tensors values = evaluate(a.at_boundaries(), options);
    for (size_t k = 0; k < n; ++k) {
      const Node& b = *a.boundaries[k];
      at::Tensor v = values[k];
      values[k] = at::Tensor();
      at::Tensor& acc = combined[k];
      switch (b.reduction) {
        case BatchReduction::Sum: acc = acc.defined() ? acc.add_(v) : v.clone(); break;
        case BatchReduction::Mean:
          if (counts.counts[k] == 0) break;  // nothing averaged in this chunk (e.g. all targets ignored)
          acc = acc.defined() ? acc.add_(v, counts.counts[k]) : v.mul(counts.counts[k]);
          totals[k] += counts.counts[k];
          break;
        case BatchReduction::Max: acc = acc.defined() ? at::maximum(acc, v) : v.clone(); break;
        case BatchReduction::Min: acc = acc.defined() ? at::minimum(acc, v) : v.clone(); break;
        case BatchReduction::None: fail(Code::Internal, "a boundary without a reduction");
      }
    }
  });
  for (size_t k = 0; k < n; ++k) {
    const Node& b = *a.boundaries[k];
    if (b.reduction != BatchReduction::Mean) continue;
    if (totals[k] == 0)  // a mean over nothing, as LibTorch computes it
      combined[k] = at::full(b.meta.shape, NAN, tensor_options(b.meta, run));
    else
      combined[k].div_(totals[k]);
  }
  if (totals_out) *totals_out = std::move(totals);
  return combined;
}

[[noreturn]] void no_leaves() {
  fail(Code::InvalidArgument,
       "the loss does not depend on any tensor that requires grad "
       "(see koila_tensor_set_requires_grad)");
}

// Where a chunked backward's gradients go, and how it is undone. Gradients are added into
// .grad as they come (chunk by chunk, each as autograd has it), so the run holds no second
// copy of them; before the first addition into a leaf's .grad, how it stood is noted:
// absent and all-zero gradients are restored as such, any other is snapshotted (in host
// memory when the device is not the CPU) and zeroed, this call's sum added to it at the
// end. Until finish(), destruction (a failure) restores every .grad.
// Probes (run.commit false) never keep what they add to .grad: they hold what the real run
// would hold (the gradients of leaves without .grad, the snapshots) and drop the rest, or
// (rolled_back) add into .grad as a committed run does and put every .grad back at the end.
class GradientTarget {
 public:
  GradientTarget(const ChunkRun& run, const c10::Device& device, const GradFusion& fusion)
      : run_(run), into_grad_(run.commit || run.rolled_back), host_(device.type() != c10::kCPU), fusion_(fusion) {}
  GradientTarget(const GradientTarget&) = delete;
  GradientTarget& operator=(const GradientTarget&) = delete;
  ~GradientTarget() {
    if (finished_ || !into_grad_) return;
    try {
      for (Entry& e : entries_) {
        at::Tensor& grad = grad_of(e);
        switch (e.start) {
          case GradStart::Absent: grad = at::Tensor(); break;
          case GradStart::Zero:
            if (grad.defined()) note_zeroed(grad.zero_());
            break;
          case GradStart::Held:
            if (e.saved.defined()) grad.copy_(e.saved);
            break;
        }
      }
    } catch (...) {
      // Restoring allocates nothing; nothing to add to the error being reported.
    }
  }

  bool any_leaves() const { return !entries_.empty(); }

  // How `leaf`'s .grad stands before the run adds to it (in a simulation, as the real
  // tensor's does).
  static GradStart start_of(const ChunkRun& run, const at::Tensor& leaf) {
    if (!run.meta) return run.grad_starts ? run.grad_starts->of(leaf) : grad_start(leaf);
    if (!leaf.grad().defined()) return GradStart::Absent;
    return run.grad_is_zero && run.grad_is_zero(leaf) ? GradStart::Zero : GradStart::Held;
  }

  // Gradients computed elsewhere (the tail after the boundaries): added into .grad.
  void add(const Tensors& leaves, const Tensors& grads) {
    prepare(leaves);
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!grads[i].defined()) continue;
      Entry& e = entries_[index_.find(leaves[i].unsafeGetTensorImpl())];
      if (!into_grad_ && e.start != GradStart::Absent) continue;  // a probe: dropped
      at::Tensor& grad = into_grad_ ? grad_of(e) : e.held;
      if (grad.defined())
        grad.add_(grads[i]);
      else
        grad = owned_gradient(grads[i], leaves[i]);  // later chunks add into it in place
    }
  }

  // Backward from `outputs` into the leaves' .grad (`starts`: as for prepare()).
  void backward(const Tensors& outputs, const Tensors& grad_outputs, const Tensors& leaves, bool retain,
                const std::vector<GradStart>* starts = nullptr) {
    if (!into_grad_) {
      add(leaves, gradients(outputs, grad_outputs, leaves, retain));
      return;
    }
    prepare(leaves, starts);
    const GradFusion::Backward fused(fusion_);  // weight gradients added straight into .grad
    accumulate_gradients(outputs, grad_outputs, leaves, retain);
  }

  // The end: divides this call's sums by `divisor` (> 0: a mean whose total was known only
  // after the last chunk), hands them to the run's before_commit, and adds the snapshots
  // back.
  void finish(double divisor, const LossReduction& reduction) {
    for (Entry& e : entries_) {
      at::Tensor& grad = into_grad_ ? grad_of(e) : e.held;
      if (grad.defined() && divisor > 0) grad.div_(divisor);
    }
    if (run_.before_commit && run_.commit && !run_.meta) {
      Tensors leaves, grads;  // .grad holds this call's sum alone until the snapshots are back
      for (Entry& e : entries_) {
        leaves.push_back(e.leaf);
        grads.push_back(grad_of(e));
      }
      run_.before_commit(leaves, grads, reduction);
    }
    for (Entry& e : entries_) {
      at::Tensor& grad = into_grad_ ? grad_of(e) : e.held;
      if (!grad.defined()) continue;
      if (!into_grad_ || e.start != GradStart::Held) continue;
      if (!e.saved.defined())  // a simulation of a snapshot in host memory: its copy back
        grad.add_(at::empty_like(grad));
      else
        grad.add_(e.saved.device() == grad.device() ? e.saved : e.saved.to(grad.device()));
    }
    finished_ = true;
  }

 private:
  struct Entry {
    at::Tensor leaf;
    GradStart start = GradStart::Absent;
    at::Tensor saved;  // the .grad before the call (GradStart::Held)
    at::Tensor held;   // a probe's stand-in for the .grad it does not touch
  };

  static at::Tensor& grad_of(Entry& e) { return const_cast<at::Tensor&>(e.leaf).mutable_grad(); }

  // Notes how the .grad of leaves not seen before stands (`starts`, when given, says so for
  // each of `leaves`), before anything is added to it.
  void prepare(const Tensors& leaves, const std::vector<GradStart>* starts = nullptr) {
    c10::NoGradGuard no_grad;
    entries_.reserve(entries_.size() + leaves.size());
    for (size_t i = 0; i < leaves.size(); ++i) {
      const at::Tensor& leaf = leaves[i];
      if (index_.contains(leaf.unsafeGetTensorImpl())) continue;
      Entry e;
      e.leaf = leaf;
      const at::Tensor& grad = leaf.grad();
      e.start = starts ? (*starts)[i] : start_of(run_, leaf);
      if (e.start == GradStart::Held) {
        if (!host_)
          e.saved = grad.clone();
        else if (!run_.meta)  // host memory: not the device's (a simulation holds nothing)
          e.saved = grad.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
      }
      index_.insert(leaf.unsafeGetTensorImpl(), static_cast<uint32_t>(entries_.size()));
      entries_.push_back(std::move(e));
      if (into_grad_ && entries_.back().start == GradStart::Held) grad_of(entries_.back()).zero_();
    }
  }

  const ChunkRun& run_;
  const bool into_grad_;  // gradients go into the leaves' .grad (committed runs, rolled-back probes)
  const bool host_;
  const GradFusion& fusion_;
  std::vector<Entry> entries_;
  PointerIndex<c10::TensorImpl> index_;  // the leaf's position in entries_
  bool finished_ = false;
};

// Whether the run shows its gradients to a before_commit (real committed runs that have one).
bool shows_gradients(const ChunkRun& run) { return run.before_commit && run.commit && !run.meta; }

// How the loss reduced the batch (see LossReduction), from the counts its MEAN boundaries
// averaged over (indexed like a.boundaries).
LossReduction loss_reduction(const Analysis& a, const std::vector<double>& mean_counts) {
  LossReduction r;
  if (a.boundaries.empty()) return r;
  bool only_sums = true, any_mean = false;
  for (size_t k = 0; k < a.boundaries.size(); ++k) {
    const BatchReduction reduction = a.boundaries[k]->reduction;
    if (reduction == BatchReduction::Mean) {
      if (any_mean && mean_counts[k] != r.count)
        fail(Code::Unsupported, "the loss combines means over the batch that averaged over different counts (" +
                                    std::to_string(r.count) + " and " + std::to_string(mean_counts[k]) +
                                    "); a group weighs each shard by one count");
      any_mean = true;
      r.count = mean_counts[k];
    } else if (reduction != BatchReduction::Sum) {
      only_sums = false;
    }
  }
  if (any_mean)
    r.kind = LossReduction::Kind::Mean;
  else if (only_sums)
    r.kind = LossReduction::Kind::Sum;
  return r;
}

// Gradients computed whole (not added as autograd went): shown to before_commit, then added.
void commit_whole(const ChunkRun& run, const Tensors& leaves, Tensors grads, const LossReduction& reduction) {
  if (!run.commit) return;
  if (shows_gradients(run)) hand_over(run.before_commit, leaves, grads, reduction);
  commit_gradients(leaves, grads);
}

}  // namespace

void hand_over(const BeforeCommit& before_commit, const Tensors& leaves, Tensors& grads,
               const LossReduction& reduction) {
  for (size_t i = 0; i < leaves.size(); ++i)
    if (grads[i].defined()) grads[i] = owned_gradient(grads[i], leaves[i]);
  before_commit(leaves, grads, reduction);
}

at::Tensor forward_chunks(const NodePtr& root, const Analysis& a, const ChunkRun& run) {
  if (!a.splits(run.chunk)) {
    ChunkStats stats(stats_handling(a, run), a.nodes());
    at::Tensor result = evaluate(a.whole, options_for(run))[0];
    stats.end_chunk();
    stats.prepare();
    stats.commit();
    report_whole(run, "forward");
    return result;
  }
  if (a.root_batched) {
    const Meta& m = root->meta;
    at::Tensor result = at::empty(m.shape, tensor_options(m, run));
    EvalOptions options = options_for(run);
    ChunkStats stats(stats_handling(a, run), a.nodes());
    for_each_chunk(a.batch, run, "forward", stats, [&](int64_t start, int64_t length) {
      options.chunk_start = start;
      options.chunk_length = length;
      result.narrow(m.batch_dim, start, length).copy_(evaluate(a.whole, options)[0]);
    });
    stats.prepare();
    stats.commit();
    return result;
  }
  ChunkStats stats(stats_handling(a, run), a.nodes());
  const Tensors combined = combine_boundaries(a, run, nullptr, stats);
  std::unordered_map<const Node*, at::Tensor> given;
  for (size_t k = 0; k < combined.size(); ++k) given.emplace(a.boundaries[k], combined[k]);
  EvalOptions tail = options_for(run);
  tail.given = &given;
  at::Tensor result = evaluate(root, tail);
  stats.prepare();
  stats.commit();
  return result;
}

namespace {
// The schedule a backward pass's forward evaluates in place of `base`: the recomputing one when
// the run recomputes (made for `base`).
const Schedule& forward_schedule(const ChunkRun& run, const Schedule& base) {
  if (!run.recompute) return base;
  if (run.recompute->base != &base)
    fail(Code::Internal, "a recomputation was planned for another schedule than the run's");
  return run.recompute->schedule;
}

// A backward pass's forward of `base` (see forward_schedule), its linear layers fusing their
// weight gradients as `fusion` says and its programs segmented where the recomputation says so.
Tensors forward_for_backward(const ChunkRun& run, const GradFusion& fusion, const Schedule& base,
                             const EvalOptions& options) {
  const GradFusion::Forward fusing(fusion);
  const SegmentingPrograms inside(run.recompute && run.recompute->inside_programs,
                                  run.recompute && !run.recompute->programs_share_leaves);
  return evaluate(forward_schedule(run, base), options);
}

// The unsplit backward: one forward and one backward of the whole graph, its gradients added
// into .grad as autograd goes where no .grad holds earlier ones, else computed whole, then added.
void backward_whole(const NodePtr& root, const Analysis& a, const ChunkRun& run, const GradFusion& fusion,
                    bool retain) {
  ChunkStats stats(stats_handling(a, run), a.nodes());
  EvalOptions options = options_for(run);
  options.grad = true;
  ChunkCounts counts(a.boundaries);
  if (shows_gradients(run)) counts.observe(options, run);
  Tensors leaves;
  options.reached_leaves = &leaves;
  at::Tensor value = forward_for_backward(run, fusion, a.whole, options)[0];
  if (!value.requires_grad()) leaves.clear();  // what autograd reaches from it: nothing
  if (leaves.empty()) no_leaves();
  mark_backward(run, {value});
  const LossReduction reduction = shows_gradients(run) ? loss_reduction(a, counts.counts) : LossReduction{};
  std::vector<GradStart> starts;  // read once (a zero .grad is found by reading it whole)
  starts.reserve(leaves.size());
  if (run.commit)
    for (const at::Tensor& leaf : leaves) starts.push_back(GradientTarget::start_of(run, leaf));
  const bool none_held = std::find(starts.begin(), starts.end(), GradStart::Held) == starts.end();
  if (run.commit && none_held) {
    // Absent or zero .grad (the usual training loop): autograd adds into them as it goes,
    // as it does for a chunk, and a failure puts them back. (Capturing every gradient
    // first, as below, costs the engine a pass over the graph to find the leaves' edges,
    // and an addition per leaf after it.)
    c10::NoGradGuard outside;
    GradientTarget target(run, root->meta.device, fusion);
    target.backward({value}, {}, leaves, retain, &starts);
    stats.end_chunk();
    stats.prepare();
    target.finish(0, reduction);
    stats.commit();
  } else {
    // A .grad that holds earlier gradients: this run's are computed whole, then added,
    // so that a failure leaves the .grad untouched without a snapshot of it.
    const Tensors grads = gradients({value}, {}, leaves, retain);
    stats.end_chunk();
    stats.prepare();
    commit_whole(run, leaves, grads, reduction);
    stats.commit();
  }
  report_whole(run, "backward");
}

// A split backward whose loss is computed from the boundaries (not one itself): the tail after
// them runs once on their combined values; its gradients reach the boundaries (`upstream`, d
// loss / d boundary) and the leaves it uses directly (added into `target`). `totals`: what each
// mean boundary averaged over in the whole batch.
void backward_tail(const NodePtr& root, const Analysis& a, const ChunkRun& run, bool retain, GradientTarget& target,
                   Tensors& upstream, std::vector<double>& totals) {
  const size_t n = a.boundaries.size();
  // Its statistics are put back: the loop below computes them again.
  ChunkStats combining(stats_handling(a, run), a.nodes());
  const Tensors combined = combine_boundaries(a, run, &totals, combining);
  std::unordered_map<const Node*, at::Tensor> given;
  Tensors stand_ins;
  for (size_t k = 0; k < n; ++k) {
    at::Tensor v = combined[k].detach();
    if (at::isFloatingType(v.scalar_type())) v.requires_grad_(true);
    stand_ins.push_back(v);
    given.emplace(a.boundaries[k], v);
  }
  EvalOptions tail = options_for(run);
  tail.grad = true;
  tail.given = &given;
  mark_phase(run, Phase::Forward);
  at::Tensor value = evaluate(root, tail);
  if (!value.requires_grad()) no_leaves();
  const Tensors leaves = autograd_leaves({value});
  mark_backward(run, {value});
  const Tensors grads = gradients({value}, {}, leaves, retain);
  Tensors params, param_grads;
  for (size_t i = 0; i < leaves.size(); ++i) {
    bool is_stand_in = false;
    for (size_t k = 0; k < n; ++k)
      if (leaves[i].unsafeGetTensorImpl() == stand_ins[k].unsafeGetTensorImpl()) {
        upstream[k] = grads[i];
        is_stand_in = true;
      }
    if (!is_stand_in) {
      params.push_back(leaves[i]);
      param_grads.push_back(grads[i]);
    }
  }
  target.add(params, param_grads);
}

// The gradient a chunk's boundary `values` are given: the loss's (`upstream`, or 1 where the
// boundary is the loss) times their weight; those that contribute nothing are dropped from
// `values`. Adds what each mean averaged over in the chunk to `weights_total`.
Tensors chunk_grad_outputs(const Analysis& a, const ChunkCounts& counts, const std::vector<double>& totals,
                           const Tensors& upstream, std::vector<double>& weights_total, Tensors& values) {
  const size_t n = a.boundaries.size();
  Tensors grad_outputs(n);
  for (size_t k = 0; k < n; ++k) {
    const Node& b = *a.boundaries[k];
    // Weight of this chunk's value in the combined one: 1 for a sum; for a mean its share
    // of the elements averaged over (known up front, or applied at the end when the
    // boundary is the loss itself).
    double w = 1;
    if (b.reduction == BatchReduction::Mean) {
      w = counts.counts[k];
      if (!a.root_is_boundary) w = totals[k] > 0 ? w / totals[k] : 0;
      weights_total[k] += counts.counts[k];
    }
    if (w == 0 || (!a.root_is_boundary && !upstream[k].defined())) {
      values[k] = at::Tensor();  // contributes nothing
      continue;
    }
    grad_outputs[k] = a.root_is_boundary ? at::full_like(values[k], w) : upstream[k].mul(w);
  }
  return grad_outputs;
}

// The leaves are found again whenever a boundary contributes for the first time (one that
// averaged over nothing in the chunks before may reach other leaves), so that the target notes
// how each .grad stood before anything is added into it. `reached`: boundaries some chunk
// backpropagated; new leaves are appended to `leaves`.
void add_new_leaves(const Tensors& values, std::vector<bool>& reached, Tensors& leaves) {
  bool first_reach = false;
  for (size_t k = 0; k < reached.size(); ++k)
    if (values[k].defined() && !reached[k]) reached[k] = first_reach = true;
  if (first_reach) {  // added to those found before (a probe computes gradients for these alone)
    std::unordered_set<const c10::TensorImpl*> known;
    for (const at::Tensor& leaf : leaves) known.insert(leaf.unsafeGetTensorImpl());
    for (const at::Tensor& leaf : autograd_leaves(values))
      if (known.insert(leaf.unsafeGetTensorImpl()).second) leaves.push_back(leaf);
  }
}

// The end of a split backward, once every chunk ran: fails when chunks contributed but reached
// no leaf; else commits the gradients and statistics (not when rolled back: `target` then puts
// every .grad back as it is destroyed).
void finish_chunks(const Analysis& a, const ChunkRun& run, GradientTarget& target, ChunkStats& stats,
                   const std::vector<double>& weights_total, const std::vector<bool>& reached) {
  const LossReduction reduction = shows_gradients(run) ? loss_reduction(a, weights_total) : LossReduction{};
  if (!target.any_leaves()) {
    if (std::find(reached.begin(), reached.end(), true) != reached.end()) no_leaves();  // some chunk contributed
    // Every chunk averaged over nothing (e.g. all targets ignored): nothing to add.
    if (shows_gradients(run)) run.before_commit({}, {}, reduction);
    return;
  }
  if (run.rolled_back) return;  // the target puts every .grad back as it was
  const bool mean = a.root_is_boundary && a.boundaries[0]->reduction == BatchReduction::Mean;
  stats.prepare();
  target.finish(mean && weights_total[0] > 0 ? weights_total[0] : 0, reduction);
  stats.commit();
}
}  // namespace

void backward_chunks(const NodePtr& root, const Analysis& a, const ChunkRun& run) {
  const bool retain = reaches_eager_history(a.nodes());
  // Passes whose gradients go into .grad run linear layers that may add their weight
  // gradients into it directly (fused_grads.h); where gradients are computed whole, the
  // backward runs outside a GradFusion::Backward and nothing is fused.
  const GradFusion fusion(run.commit || run.rolled_back, a.splits(run.chunk), a.linear_layers > 1);
  if (!a.splits(run.chunk)) {
    backward_whole(root, a, run, fusion, retain);
    return;
  }
  c10::NoGradGuard outside;  // the additions below are not part of any graph
  const size_t n = a.boundaries.size();
  // d loss / d boundary, and the gradients the rest of the graph contributes directly.
  Tensors upstream(n);
  std::vector<double> totals(n, 0);
  GradientTarget target(run, root->meta.device, fusion);
  if (!a.root_is_boundary) backward_tail(root, a, run, retain, target, upstream, totals);

  ChunkCounts counts(a.boundaries);
  EvalOptions options = options_for(run);
  options.grad = true;
  counts.observe(options, run);
  std::vector<double> weights_total(n, 0);
  Tensors leaves;
  std::vector<bool> reached(n, false);  // boundaries whose value some chunk backpropagated
  ChunkStats stats(stats_handling(a, run), a.nodes());
  for_each_chunk(a.batch, run, "backward", stats, [&](int64_t start, int64_t length) {
    options.chunk_start = start;
    options.chunk_length = length;
    counts.start_chunk(length, run);
    Tensors values = forward_for_backward(run, fusion, a.at_boundaries(), options);
    const Tensors grad_outputs = chunk_grad_outputs(a, counts, totals, upstream, weights_total, values);
    add_new_leaves(values, reached, leaves);
    mark_backward(run, values);
    target.backward(values, grad_outputs, leaves, retain);
  });
  finish_chunks(a, run, target, stats, weights_total, reached);
}

}  // namespace koila
