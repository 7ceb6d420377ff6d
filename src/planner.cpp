#include "planner.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "error.h"
#include "executor.h"
#include "memory.h"
#include "types.h"

namespace koila {

namespace {

// Fraction of an estimate kept free on top of it, for what the simulation cannot see
// (workspaces inside kernels, allocator rounding).
constexpr double kMargin = 0.10;

std::atomic<double> estimate_scale{1.0};
std::atomic<bool> simulation_fails{false};

// What the planner needs to know about a graph; depends on its structure only. It lives in
// the root's cache, so it points at nodes without owning them (the root owns them).
struct Analysis {
  std::vector<const Node*> nodes;   // topological order, root last
  int64_t batch = -1;               // size of the lazy batch, -1: none
  std::string coupled;              // non-empty: why the batch cannot be split
  bool root_batched = false;        // the result carries the batch: chunks are concatenated
  std::vector<const Node*> boundaries;  // reductions over the batch the (unbatched) root depends on
  bool root_is_boundary = false;
};

}  // namespace

struct PlanCache {
  std::unique_ptr<Analysis> analysis[2];
  std::string coarse;  // non-empty: why the simulation failed and estimates are coarse
  std::map<std::pair<std::string, int64_t>, uint64_t> estimates;  // (mode + leaves' grad flags, chunk)
};

namespace {

std::mutex cache_mutex;

const char* reduction_name(BatchReduction r) {
  switch (r) {
    case BatchReduction::Sum: return "sum";
    case BatchReduction::Mean: return "mean";
    case BatchReduction::Max: return "max";
    case BatchReduction::Min: return "min";
    case BatchReduction::None: break;
  }
  return "none";
}

std::unique_ptr<Analysis> analyze(const NodePtr& root, Mode mode) {
  auto a = std::make_unique<Analysis>();
  a->nodes = topological_order({root.get()});
  for (const Node* node : a->nodes) {
    if (node->kind == NodeKind::Input && node->meta.batch_dim >= 0) {
      const int64_t size = node->meta.batch_size();
      if (a->batch < 0) {
        a->batch = size;
      } else if (size != a->batch && a->coupled.empty()) {
        a->coupled = "the lazy inputs have different batch sizes (" + std::to_string(a->batch) + " and " +
                     std::to_string(size) + ")";
      }
    }
    if (node->kind != NodeKind::Op) continue;
    if (!node->couples.empty() && a->coupled.empty()) a->coupled = node->op + " " + node->couples;
    bool batched_input = false;
    for (const NodePtr& in : node->inputs) batched_input |= in && in->meta.batch_dim >= 0;
    if (node->reduction != BatchReduction::None && batched_input) {
      a->boundaries.push_back(node);
      if (mode == Mode::Training && a->coupled.empty() &&
          (node->reduction == BatchReduction::Max || node->reduction == BatchReduction::Min))
        a->coupled = node->op + " takes the " + reduction_name(node->reduction) +
                     " over the batch, whose gradient cannot be split into chunks";
    }
  }
  if (a->batch < 0) {
    a->boundaries.clear();
    a->coupled.clear();
    return a;
  }
  a->root_batched = root->meta.batch_dim >= 0;
  if (a->root_batched) a->boundaries.clear();  // any reduction feeding it couples the batch already
  a->root_is_boundary = a->boundaries.size() == 1 && a->boundaries[0] == root.get();
  if (!a->root_batched && a->boundaries.empty() && a->coupled.empty())
    a->coupled = root->op + " gives a result that neither carries the batch nor reduces over it";
  return a;
}

const Analysis& analysis_of(const NodePtr& root, Mode mode) {
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (!root->plan_cache) root->plan_cache = std::make_shared<PlanCache>();
  auto& slot = root->plan_cache->analysis[mode == Mode::Training ? 1 : 0];
  if (!slot) slot = analyze(root, mode);
  return *slot;
}

bool is_split(const Analysis& a, int64_t chunk) { return a.batch >= 0 && chunk >= 0 && chunk < a.batch; }

// ---- Simulation -------------------------------------------------------------------------

// Meta stand-ins for the graph's concrete tensors, made before counting starts (they exist
// already); the same tensor used twice gets the same stand-in.
struct MetaLeaves {
  std::unordered_map<const c10::TensorImpl*, at::Tensor> by_impl;
  Tensors requiring_grad;

  explicit MetaLeaves(const std::vector<const Node*>& nodes) {
    for (const Node* node : nodes) {
      if (node->kind == NodeKind::Op) continue;
      const at::Tensor& real = node->value;
      if (by_impl.count(real.unsafeGetTensorImpl())) continue;
      at::Tensor stand_in = at::empty_strided(real.sizes(), real.strides(), real.options().device(at::kMeta));
      if (real.requires_grad()) {
        stand_in.requires_grad_(true);
        requiring_grad.push_back(stand_in);
      }
      by_impl.emplace(real.unsafeGetTensorImpl(), stand_in);
    }
  }
  at::Tensor operator()(const Node& node) const { return by_impl.at(node.value.unsafeGetTensorImpl()); }
};

at::Tensor meta_of_node(const Node& node) { return meta_tensor(node.meta); }

uint64_t simulate(const Analysis& a, const NodePtr& root, Mode mode, int64_t chunk) {
  if (simulation_fails.load()) throw std::runtime_error("simulation disabled for a test");
  const MetaLeaves leaves(a.nodes);
  EvalOptions options;
  options.leaf = [&leaves](const Node& node) { return leaves(node); };
  const bool split = is_split(a, chunk);
  if (split) options.chunk_length = chunk;

  MetaAllocationScope scope;
  if (!split) {
    if (mode == Mode::Forward) {
      at::Tensor value = evaluate(root, options);
      return scope.peak();
    }
    options.grad = true;
    at::Tensor value = evaluate(root, options);
    Tensors grads = gradients({value}, {}, autograd_leaves({value}));
    return scope.peak();
  }
  if (a.root_batched) {  // the result is preallocated, chunks are copied into it
    at::Tensor result = meta_of_node(*root);
    at::Tensor value = evaluate(root, options);
    return scope.peak();
  }
  // Reductions over the batch: their combined values, then the rest of the graph.
  std::unordered_map<const Node*, at::Tensor> combined;
  for (const Node* b : a.boundaries) {
    at::Tensor value = meta_of_node(*b);
    if (mode == Mode::Training && at::isFloatingType(value.scalar_type())) value.requires_grad_(true);
    combined.emplace(b, value);
  }
  Tensors tail_grads;
  if (mode == Mode::Forward || !a.root_is_boundary) {
    evaluate(a.boundaries, options);
    EvalOptions tail = options;
    tail.chunk_length = -1;
    tail.given = &combined;
    tail.grad = mode == Mode::Training;
    at::Tensor value = evaluate(root, tail);
    if (mode == Mode::Forward) return scope.peak();
    tail_grads = gradients({value}, {}, autograd_leaves({value}));
  }
  // Training, chunk by chunk: gradients accumulate next to the chunk's forward and backward.
  Tensors accumulators;
  for (const at::Tensor& leaf : leaves.requiring_grad) accumulators.push_back(at::empty_like(leaf));
  options.grad = true;
  Tensors values = evaluate(a.boundaries, options);
  Tensors grad_outputs;
  for (const at::Tensor& v : values) grad_outputs.push_back(at::ones_like(v));
  Tensors grads = gradients(values, grad_outputs, autograd_leaves(values));
  return scope.peak();
}

// When an op cannot run on meta tensors (no meta kernel for it or for its backward): every
// result held at once, three times over for training (activations, what autograd saves,
// gradients), plus the gradients of the parameters twice. Errs high.
uint64_t coarse_estimate(const Analysis& a, Mode mode, int64_t chunk) {
  double bytes = 0, params = 0;
  for (const Node* node : a.nodes) {
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
  if (mode == Mode::Training) bytes = 3 * bytes + 2 * params;
  return static_cast<uint64_t>(bytes);
}

std::string grad_signature(const Analysis& a, Mode mode) {
  std::string s(1, mode == Mode::Training ? 'T' : 'F');
  if (mode == Mode::Training)
    for (const Node* node : a.nodes)
      if (node->kind != NodeKind::Op) s += node->value.requires_grad() ? '1' : '0';
  return s;
}

uint64_t estimate(const Analysis& a, const NodePtr& root, Mode mode, int64_t chunk) {
  if (!is_split(a, chunk)) chunk = -1;
  const auto key = std::make_pair(grad_signature(a, mode), chunk);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto found = root->plan_cache->estimates.find(key);
    if (found != root->plan_cache->estimates.end()) return found->second;
  }
  uint64_t bytes;
  std::string why;
  try {
    bytes = simulate(a, root, mode, chunk);
  } catch (const c10::Error& e) {
    why = e.what_without_backtrace();
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!why.empty()) bytes = coarse_estimate(a, mode, chunk);
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (!why.empty() && root->plan_cache->coarse.empty()) root->plan_cache->coarse = why.substr(0, why.find('\n'));
  root->plan_cache->estimates.emplace(key, bytes);
  return bytes;
}

uint64_t scaled(uint64_t bytes) {
  return static_cast<uint64_t>(std::llround(static_cast<double>(bytes) * estimate_scale.load()));
}

std::string human(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

int64_t largest_power_of_two_at_most(int64_t n) {
  int64_t p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

void check_loss(const NodePtr& loss) {
  const uint64_t numel = checked_numel(loss->meta.shape);
  if (numel != 1)
    fail(KOILA_ERROR_INVALID_ARGUMENT, "the loss must have exactly one element, but has shape " +
                                           shape_string(loss->meta.shape));
  if (!at::isFloatingType(loss->meta.dtype))
    fail(KOILA_ERROR_DTYPE, std::string("the loss must be floating point, but is ") + dtype_name(loss->meta.dtype));
}

bool fits(const Plan& p, uint64_t extra) {
  const double total = static_cast<double>(p.current) + static_cast<double>(extra) * (1.0 + kMargin);
  return total <= static_cast<double>(p.budget);
}

Plan plan_with(const NodePtr& root, Mode mode, bool refuse) {
  if (mode == Mode::Training) check_loss(root);
  Plan p;
  p.mode = mode;
  p.device = canonical_device(root->meta.device);
  p.target = shape_string(root->meta.shape) + " " + dtype_name(root->meta.dtype);
  p.current = memory_stats(p.device).current;
  p.budget = budget(p.device);
  if (!root->lazy()) {  // a concrete value: nothing to evaluate (backward walks LibTorch's graph)
    p.chunk = -1;
    return p;
  }
  const Analysis& a = analysis_of(root, mode);
  p.batch = a.batch;
  p.coupled = a.coupled;
  p.full_extra = scaled(estimate(a, root, mode, -1));
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    p.coarse = root->plan_cache->coarse;
  }
  p.chunk = a.batch;
  p.extra = p.full_extra;
  if (fits(p, p.full_extra)) return p;

  if (a.batch >= 0 && a.coupled.empty() && a.batch > 1) {
    // The largest power of two below the batch whose estimate fits (estimates grow with the chunk).
    int64_t lo = 0, hi = 0;  // exponents
    while ((int64_t{1} << (hi + 1)) < a.batch) ++hi;
    int64_t best = -1;
    uint64_t best_extra = 0;
    while (lo <= hi) {
      const int64_t mid = (lo + hi) / 2;
      const int64_t c = int64_t{1} << mid;
      const uint64_t extra = scaled(estimate(a, root, mode, c));
      if (fits(p, extra)) {
        best = c;
        best_extra = extra;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    if (best > 0) {
      p.chunk = best;
      p.chunks = (a.batch + best - 1) / best;
      p.extra = best_extra;
      return p;
    }
    p.chunk = 1;
    p.chunks = a.batch;
    p.extra = scaled(estimate(a, root, mode, 1));
  }
  if (!refuse) return p;
  const koila_code code = a.batch >= 0 && !a.coupled.empty() ? KOILA_ERROR_NOT_SPLITTABLE : KOILA_ERROR_OUT_OF_MEMORY;
  fail(code, p.describe());
}

bool is_out_of_memory(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return err.code() == KOILA_ERROR_OUT_OF_MEMORY;
  } catch (const c10::OutOfMemoryError&) {
    return true;
  } catch (const std::bad_alloc&) {
    return true;
  } catch (...) {
    return false;
  }
}

// Runs `attempt(chunk)` holding the plan's budget as a hard limit, halving the chunk after
// an out-of-memory error (an estimate that fell short, or a device that ran out).
template <class F>
void with_retry(Plan& plan, const Analysis* a, F&& attempt) {
  for (;;) {
    try {
      BudgetScope hard_limit(plan.device, plan.budget);
      attempt(plan.chunk);
      return;
    } catch (...) {
      const std::exception_ptr e = std::current_exception();
      if (!a || !is_out_of_memory(e) || a->batch < 0 || !a->coupled.empty() || plan.chunk <= 1) throw;
      plan.chunk = largest_power_of_two_at_most(plan.chunk / 2);
      plan.chunks = (a->batch + plan.chunk - 1) / plan.chunk;
    }
  }
}

template <class F>
void for_each_chunk(int64_t batch, int64_t chunk, F&& body) {
  for (int64_t start = 0; start < batch; start += chunk) body(start, std::min(chunk, batch - start));
}

// Per chunk: the count each mean-reducing boundary averaged over (observed as it runs).
struct ChunkCounts {
  std::unordered_map<const Node*, size_t> index;
  std::vector<double> counts;
  explicit ChunkCounts(const std::vector<const Node*>& boundaries) : counts(boundaries.size(), 0) {
    for (size_t k = 0; k < boundaries.size(); ++k) index.emplace(boundaries[k], k);
  }
  void observe(EvalOptions& options) {
    options.observe = [this](const Node& node, const Tensors& args, const at::Tensor&) {
      auto found = index.find(&node);
      if (found != index.end() && node.reduction == BatchReduction::Mean) counts[found->second] = node.mean_count(args);
    };
  }
};

// The boundaries' values over the whole batch, from chunks combined by their reduction.
Tensors combine_boundaries(const Analysis& a, int64_t chunk, std::vector<double>* totals_out) {
  const size_t n = a.boundaries.size();
  Tensors combined(n);
  std::vector<double> totals(n, 0);
  ChunkCounts counts(a.boundaries);
  EvalOptions options;
  counts.observe(options);
  for_each_chunk(a.batch, chunk, [&](int64_t start, int64_t length) {
    options.chunk_start = start;
    options.chunk_length = length;
    Tensors values = evaluate(a.boundaries, options);
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
        case BatchReduction::None: fail(KOILA_ERROR_INTERNAL, "a boundary without a reduction");
      }
    }
  });
  for (size_t k = 0; k < n; ++k) {
    const Node& b = *a.boundaries[k];
    if (b.reduction != BatchReduction::Mean) continue;
    if (totals[k] == 0)  // a mean over nothing, as LibTorch computes it
      combined[k] = at::full(b.meta.shape, NAN, at::TensorOptions().dtype(b.meta.dtype).device(b.meta.device));
    else
      combined[k].div_(totals[k]);
  }
  if (totals_out) *totals_out = std::move(totals);
  return combined;
}

at::Tensor forward_with_chunk(const NodePtr& root, const Analysis& a, int64_t chunk) {
  if (!is_split(a, chunk)) return evaluate(root);
  if (a.root_batched) {
    const Meta& m = root->meta;
    at::Tensor result = at::empty(m.shape, at::TensorOptions().dtype(m.dtype).device(m.device));
    EvalOptions options;
    for_each_chunk(a.batch, chunk, [&](int64_t start, int64_t length) {
      options.chunk_start = start;
      options.chunk_length = length;
      result.narrow(m.batch_dim, start, length).copy_(evaluate(root, options));
    });
    return result;
  }
  const Tensors combined = combine_boundaries(a, chunk, nullptr);
  std::unordered_map<const Node*, at::Tensor> given;
  for (size_t k = 0; k < combined.size(); ++k) given.emplace(a.boundaries[k], combined[k]);
  EvalOptions tail;
  tail.given = &given;
  return evaluate(root, tail);
}

[[noreturn]] void no_leaves() {
  fail(KOILA_ERROR_INVALID_ARGUMENT, "the loss does not depend on any tensor that requires grad "
                                     "(see koila_tensor_set_requires_grad)");
}

// Gradients by leaf, summed over the pieces a backward is computed in.
struct GradientSum {
  Tensors leaves, grads;
  std::unordered_map<const c10::TensorImpl*, size_t> index;
  void add(const Tensors& ls, const Tensors& gs) {
    for (size_t i = 0; i < ls.size(); ++i) {
      if (!gs[i].defined()) continue;
      auto [it, fresh] = index.emplace(ls[i].unsafeGetTensorImpl(), leaves.size());
      if (fresh) {
        leaves.push_back(ls[i]);
        grads.push_back(owned_gradient(gs[i], ls[i]));  // later chunks add into it in place
      } else {
        grads[it->second].add_(gs[i]);
      }
    }
  }
};

void backward_with_chunk(const NodePtr& root, const Analysis& a, int64_t chunk) {
  const bool retain = reaches_eager_history(a.nodes);
  if (!is_split(a, chunk)) {
    EvalOptions options;
    options.grad = true;
    at::Tensor value = evaluate(root, options);
    const Tensors leaves = autograd_leaves({value});
    if (leaves.empty()) no_leaves();
    commit_gradients(leaves, gradients({value}, {}, leaves, retain));
    return;
  }
  at::NoGradGuard outside;  // the sums below are not part of any graph
  const size_t n = a.boundaries.size();
  // d loss / d boundary, and the gradients the rest of the graph contributes directly.
  Tensors upstream(n);
  std::vector<double> totals(n, 0);
  GradientSum sum;
  if (!a.root_is_boundary) {
    const Tensors combined = combine_boundaries(a, chunk, &totals);
    std::unordered_map<const Node*, at::Tensor> given;
    Tensors stand_ins;
    for (size_t k = 0; k < n; ++k) {
      at::Tensor v = combined[k].detach();
      if (at::isFloatingType(v.scalar_type())) v.requires_grad_(true);
      stand_ins.push_back(v);
      given.emplace(a.boundaries[k], v);
    }
    EvalOptions tail;
    tail.grad = true;
    tail.given = &given;
    at::Tensor value = evaluate(root, tail);
    if (!value.requires_grad()) no_leaves();
    const Tensors leaves = autograd_leaves({value});
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
    sum.add(params, param_grads);
  }

  ChunkCounts counts(a.boundaries);
  EvalOptions options;
  options.grad = true;
  counts.observe(options);
  std::vector<double> weights_total(n, 0);
  Tensors leaves;
  bool leaves_known = false;
  for_each_chunk(a.batch, chunk, [&](int64_t start, int64_t length) {
    options.chunk_start = start;
    options.chunk_length = length;
    Tensors values = evaluate(a.boundaries, options);
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
    if (!leaves_known) {
      leaves = autograd_leaves(values);
      leaves_known = std::any_of(values.begin(), values.end(), [](const at::Tensor& v) { return v.defined(); });
    }
    sum.add(leaves, gradients(values, grad_outputs, leaves, retain));
  });
  if (a.root_is_boundary && a.boundaries[0]->reduction == BatchReduction::Mean && weights_total[0] > 0)
    for (at::Tensor& g : sum.grads) g.div_(weights_total[0]);
  if (sum.leaves.empty()) {
    if (leaves_known) no_leaves();
    return;  // every chunk averaged over nothing (e.g. all targets ignored): nothing to add
  }
  commit_gradients(sum.leaves, sum.grads);
}

}  // namespace

std::string Plan::describe() const {
  std::ostringstream os;
  os << (mode == Mode::Training ? "backward from " : "evaluation of ") << target << " on " << device.str();
  if (batch < 0) {
    os << "; no lazy batch";
  } else {
    os << "; batch " << batch;
  }
  const bool split = batch >= 0 && chunk >= 0 && chunk < batch;
  if (split) {
    os << ", " << chunks << " chunks of " << chunk;
    const int64_t last = batch - (chunks - 1) * chunk;
    if (last != chunk) os << " (the last of " << last << ")";
  } else {
    os << ", unsplit";
  }
  os << ". Estimated peak " << human(peak()) << " (" << human(current) << " in use + " << human(extra) << ")";
  if (split) os << ", unsplit " << human(full_peak());
  os << "; budget " << human(budget) << ".";
  if (!coarse.empty()) os << " (A coarse estimate: simulating the graph on meta tensors failed: " << coarse << ")";
  const bool fits_unsplit = fits(*this, full_extra);
  if (!fits_unsplit && batch >= 0 && !coupled.empty()) {
    os << " The unsplit run does not fit and the batch cannot be split: " << coupled << ".";
  } else if (!fits_unsplit && batch < 0) {
    os << " It does not fit, and there is no lazy batch to split (wrap the input with koila_lazy and a batch dim).";
  } else if (!fits_unsplit && !fits(*this, extra)) {
    os << " Not even a chunk of one sample fits.";
  } else if (split) {
    os << " The unsplit run does not fit; " << chunk << " is the largest power of two whose chunks fit.";
  } else {
    os << " It fits unsplit.";
  }
  return os.str();
}

Plan make_plan(const NodePtr& root, Mode mode) { return plan_with(root, mode, /*refuse=*/true); }

uint64_t estimate_extra(const NodePtr& root, Mode mode, int64_t chunk) {
  if (!root->lazy()) return 0;
  return estimate(analysis_of(root, mode), root, mode, chunk);
}

at::Tensor run_forward(const NodePtr& root, Plan* used) {
  if (!root->lazy()) return root->value;
  at::NoGradGuard no_grad;
  Plan plan = make_plan(root, Mode::Forward);
  const Analysis& a = analysis_of(root, Mode::Forward);
  at::Tensor result;
  with_retry(plan, &a, [&](int64_t chunk) { result = forward_with_chunk(root, a, chunk); });
  if (used) *used = plan;
  return result;
}

void run_backward(const NodePtr& loss, Plan* used) {
  check_loss(loss);
  if (!loss->lazy()) {
    const at::Tensor& value = loss->value;
    const Tensors leaves = value.requires_grad() ? autograd_leaves({value}) : Tensors{};
    if (leaves.empty()) no_leaves();
    commit_gradients(leaves, gradients({value}, {}, leaves));
    if (used) *used = plan_with(loss, Mode::Training, false);
    return;
  }
  Plan plan = make_plan(loss, Mode::Training);
  const Analysis& a = analysis_of(loss, Mode::Training);
  with_retry(plan, &a, [&](int64_t chunk) { backward_with_chunk(loss, a, chunk); });
  if (used) *used = plan;
}

namespace testing {
void set_estimate_scale(double scale) { estimate_scale.store(scale); }
void set_simulation_fails(bool fails) { simulation_fails.store(fails); }
}  // namespace testing

}  // namespace koila
