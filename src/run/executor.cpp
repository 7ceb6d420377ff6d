#include "run/executor.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <algorithm>
#include <optional>
#include <typeinfo>

#include "base/error.h"
#include "base/pointer_index.h"
#include "base/text.h"
#include "run/zeroed_grads.h"

namespace koila {

using NodeIndex = PointerIndex<Node>;

namespace {

// The nodes `roots` depend on, each after its inputs; `done` ends up holding each one's
// position in the order.
// `group_of`: the group whose output a node is (its inputs are the group's); null: none.
std::vector<const Node*> order_of(const std::vector<const Node*>& roots,
                                  const std::unordered_map<const Node*, at::Tensor>* given_values, NodeIndex& done,
                                  const std::unordered_map<const Node*, const NodeGroup*>* group_of = nullptr) {
  std::vector<const Node*> order;
  order.reserve(32);  // (a step's small graph without growing it four times)
  std::vector<std::pair<const Node*, size_t>> stack;
  stack.reserve(16);
  for (const Node* root : roots) {
    if (!root || done.contains(root)) continue;
    stack.emplace_back(root, 0);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      const bool given = given_values && given_values->count(node);
      const NodeGroup* group = nullptr;
      if (group_of && !given) {
        auto found = group_of->find(node);
        if (found != group_of->end()) group = found->second;
      }
      const size_t inputs = given ? 0 : group ? group->inputs.size() : node->inputs.size();
      if (next < inputs) {
        const Node* in = group ? group->inputs[next++] : node->inputs[next++].get();
        if (in && !done.contains(in)) stack.emplace_back(in, 0);
        continue;
      }
      if (done.insert(node, static_cast<uint32_t>(order.size()))) order.push_back(node);
      stack.pop_back();
    }
  }
  return order;
}

std::vector<int64_t> expected_shape(const Meta& meta, const EvalOptions& options) {
  std::vector<int64_t> shape = meta.shape;
  if (options.chunk_length >= 0 && meta.batch_dim >= 0) shape[meta.batch_dim] = options.chunk_length;
  return shape;
}

// Whether `sizes` is expected_shape(meta, options), without building it (once per op run).
bool has_expected_shape(at::IntArrayRef sizes, const Meta& meta, const EvalOptions& options) {
  if (sizes.size() != meta.shape.size()) return false;
  const bool chunked = options.chunk_length >= 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    const bool batch = chunked && static_cast<int64_t>(d) == meta.batch_dim;
    if (sizes[d] != (batch ? options.chunk_length : meta.shape[d])) return false;
  }
  return true;
}

}  // namespace

namespace {

// A tiny graph per thread, made before the thread builds any graph it backpropagates. The
// autograd engine pops the pending task of the highest sequence number first (numbers
// count up per thread), so running this older graph first pops, and discards, whatever a
// failed backward left in the thread's ready queue.
struct ReleaseGraph {
  at::Tensor input, output;
  ReleaseGraph() {  // of zero elements: it holds no memory
    input = at::zeros({0}, at::kFloat).requires_grad_(true);
    output = input.mul(1.0);
  }
};

ReleaseGraph& release_graph() {
  thread_local ReleaseGraph graph;
  return graph;
}

// When a backward fails inside LibTorch's autograd engine (an out-of-memory error within
// the budget), LibTorch 1.13 leaves its pending work in this thread's ready queue, holding
// the failed run's buffers until the thread's next backward. Running the release graph
// releases them now (found by the differential fuzzer's memory check).
void release_failed_backward() noexcept {
  try {
    const ReleaseGraph& g = release_graph();
    torch::autograd::grad({g.output}, {g.input}, {at::ones_like(g.output)}, /*retain_graph=*/true);
  } catch (...) {
    // Nothing to add to the error being reported; the memory goes at the next backward.
  }
}

// EvalOptions::reached_leaves, as an evaluation fills it.
class ReachedLeaves {
 public:
  explicit ReachedLeaves(Tensors* leaves) : leaves_(leaves) {}

  // Op `i` of `s` ran on `args` and gave a result that requires grad.
  void note(const Schedule& s, size_t i, const Tensors& args) {
    const size_t first = s.input_start[i];
    for (size_t k = first; k < s.input_start[i + 1]; ++k) {
      const int64_t p = s.inputs[k];
      if (p < 0 || s.order[static_cast<size_t>(p)]->kind == NodeKind::Op) continue;
      const at::Tensor& v = args[k - first];
      if (!v.requires_grad() || !seen_.insert(v.unsafeGetTensorImpl(), 0)) continue;
      if (v.is_leaf()) {
        add(v);
      } else {
        for (const at::Tensor& leaf : autograd_leaves({v})) add(leaf);
      }
    }
  }

 private:
  void add(const at::Tensor& leaf) {
    if (leaves_seen_.insert(leaf.unsafeGetTensorImpl(), 0)) leaves_->push_back(leaf);
  }

  Tensors* leaves_;
  PointerIndex<c10::TensorImpl> seen_;         // values looked at
  PointerIndex<c10::TensorImpl> leaves_seen_;  // leaves added
};

// Keeps the results of the op with several results at position `i` for its result nodes;
// its own value is the first defined one.
at::Tensor keep_results(std::vector<Tensors>& results, size_t i, size_t n, Tensors all, const Node& node) {
  if (results.empty()) results.resize(n);
  results[i] = std::move(all);
  for (const at::Tensor& t : results[i])
    if (t.defined()) return t;
  fail(Code::Internal, node.op + " gave no result");
}

// The value of result node `node`, whose op sits at position `p`.
at::Tensor result_of(const std::vector<Tensors>& results, int64_t p, const Node& node) {
  const auto r = static_cast<size_t>(node.result);
  if (p < 0 || static_cast<size_t>(p) >= results.size() || r >= results[static_cast<size_t>(p)].size())
    fail(Code::Internal, node.op + " " + std::to_string(r) + " read before its op ran, or past its results");
  const at::Tensor& t = results[static_cast<size_t>(p)][r];
  if (!t.defined())
    fail(Code::Internal, node.op + " " + std::to_string(r) + ": the op gave none where a tensor was inferred");
  return t;
}

// The value of `node`, an output of group `g` of the schedule: the group runs (on `args`, its
// inputs' values) when its first output is reached; each output is kept until it is taken.
at::Tensor group_output(const Schedule& schedule, size_t g, const Node& node, const Tensors& args,
                        const EvalOptions& options, std::vector<std::pair<size_t, Tensors>>& grouped) {
  const NodeGroup& group = (*schedule.groups)[g];
  auto found = std::find_if(grouped.begin(), grouped.end(), [g](const auto& e) { return e.first == g; });
  if (found == grouped.end()) {
    Tensors outs = group.run(args, options);
    if (outs.size() != group.outputs.size()) fail(Code::Internal, "a group gave a wrong number of results");
    grouped.emplace_back(g, std::move(outs));
    found = std::prev(grouped.end());
  }
  const size_t k =
      static_cast<size_t>(std::find(group.outputs.begin(), group.outputs.end(), &node) - group.outputs.begin());
  if (k >= group.outputs.size() || !found->second[k].defined())
    fail(Code::Internal, node.op + ": its group gave no value for it");
  at::Tensor value = std::move(found->second[k]);
  if (std::none_of(found->second.begin(), found->second.end(), [](const at::Tensor& t) { return t.defined(); }))
    grouped.erase(found);
  return value;
}

}  // namespace

Schedule make_schedule(const std::vector<const Node*>& roots, const std::unordered_map<const Node*, at::Tensor>* given,
                       const std::vector<NodeGroup>* groups) {
  Schedule s;
  // The thread's scratch index, emptied after use (a plan of every step makes a schedule; a
  // fresh index cost an allocation, and zeroing, of up to 16 bytes a slot, two slots a node).
  thread_local NodeIndex position;
  struct Emptied {  // after a failure, which may have left keys the order does not list
    NodeIndex& index;
    bool done = false;
    ~Emptied() {
      if (!done) index = NodeIndex();
    }
  } emptied{position};
  std::unordered_map<const Node*, const NodeGroup*> group_of;
  if (groups)
    for (const NodeGroup& g : *groups)
      for (const Node* out : g.outputs) group_of.emplace(out, &g);
  s.order = order_of(roots, given, position, groups ? &group_of : nullptr);
  s.with_given = given != nullptr;
  if (groups) {
    s.groups = groups;
    s.group_at.assign(s.order.size(), -1);
  }
  auto at = [](const Node* node) {  // (position: the thread's)
    const uint32_t p = node ? position.find(node) : NodeIndex::kAbsent;
    if (p == NodeIndex::kAbsent) fail(Code::Internal, "an evaluation of a null node");
    return static_cast<size_t>(p);
  };
  s.uses.assign(s.order.size(), 0);
  s.input_start.reserve(s.order.size() + 1);
  size_t inputs = 0;  // (the nodes were just visited: counting first costs less than growing)
  for (const Node* node : s.order) inputs += node->inputs.size();
  if (groups)
    for (const NodeGroup& g : *groups) inputs += g.inputs.size() * g.outputs.size();
  s.inputs.reserve(inputs);
  for (const Node* node : s.order) {
    s.input_start.push_back(s.inputs.size());
    if (given && given->count(node)) continue;  // its value is given: its inputs are not visited
    if (groups) {
      auto found = group_of.find(node);
      if (found != group_of.end()) {
        s.group_at[s.input_start.size() - 1] = static_cast<int32_t>(found->second - groups->data());
        for (const Node* in : found->second->inputs) {
          const size_t p = at(in);
          s.inputs.push_back(static_cast<int64_t>(p));
          ++s.uses[p];
        }
        continue;
      }
    }
    for (const NodePtr& in : node->inputs) {
      if (!in) {
        s.inputs.push_back(-1);
        continue;
      }
      const size_t p = at(in.get());
      s.inputs.push_back(static_cast<int64_t>(p));
      ++s.uses[p];
    }
  }
  s.input_start.push_back(s.inputs.size());
  for (const Node* root : roots) {
    const size_t p = at(root);
    s.roots.push_back(p);
    ++s.uses[p];  // roots are kept
  }
  position.clear(s.order);
  emptied.done = true;
  return s;
}

Tensors evaluate(const std::vector<const Node*>& roots, const EvalOptions& options) {
  return evaluate(make_schedule(roots, options.given), options);
}

Tensors evaluate(const Schedule& schedule, const EvalOptions& options) {
  if (options.given && !schedule.with_given)
    fail(Code::Internal, "an evaluation with given values used a schedule made without them");
  if (options.grad) (void)release_graph();  // older than every node this evaluation records
  c10::AutoGradMode grad_mode(options.grad);
  const std::vector<const Node*>& order = schedule.order;
  std::vector<uint32_t> uses = schedule.uses;
  auto is_given = [&](const Node* node) { return options.given && options.given->count(node); };

  if (options.reached_leaves && (options.given || !options.grad))
    fail(Code::Internal, "reached leaves are found only in an evaluation that records autograd, without given values");
  std::optional<ReachedLeaves> reached;  // made only when asked for (every evaluation passes here)
  if (options.reached_leaves) reached.emplace(options.reached_leaves);
  std::vector<at::Tensor> values(order.size());
  std::vector<Tensors> several;  // results of ops with several results, by position (made when first needed)
  std::vector<std::pair<size_t, Tensors>> grouped;  // groups computed, with the outputs not yet taken
  Tensors args;
  size_t live = 0;
  EvalStats stats;
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& node = *order[i];
    if (is_given(&node)) {
      values[i] = options.given->at(&node);
      continue;
    }
    if (node.kind != NodeKind::Op) {
      values[i] = options.leaf ? options.leaf(node) : node.value;
      if (options.chunk_length >= 0 && node.meta.batch_dim >= 0)
        values[i] = values[i].narrow(node.meta.batch_dim, options.chunk_start, options.chunk_length);
      continue;
    }
    const size_t first = schedule.input_start[i], end = schedule.input_start[i + 1];
    args.clear();
    for (size_t k = first; k < end; ++k) {
      const int64_t p = schedule.inputs[k];
      args.push_back(p >= 0 ? values[static_cast<size_t>(p)] : at::Tensor());
    }
    const int32_t group = schedule.group_at.empty() ? -1 : schedule.group_at[i];
    if (group >= 0) {
      values[i] = group_output(schedule, static_cast<size_t>(group), node, args, options, grouped);
    } else {
      if (options.op_starts) options.op_starts(node);
      try {
        if (node.result >= 0)
          values[i] = result_of(several, schedule.inputs[first], node);
        else if (node.run_all)
          values[i] = keep_results(several, i, order.size(), node.run_all(args, node), node);
        else
          values[i] = node.run(args, node);
      } catch (const c10::Error&) {
        rethrow_torch_error(node.op + " (inputs " + describe_inputs(node) + ")", Code::InvalidArgument);
      }
    }
    if (reached && values[i].requires_grad()) reached->note(schedule, i, args);
    if (options.observe && group < 0) options.observe(node, args, values[i]);  // (a group's ops were observed)
    args.clear();
    ++stats.ops_run;
    stats.peak_live_values = std::max(stats.peak_live_values, ++live);
    if (!has_expected_shape(values[i].sizes(), node.meta, options))
      fail(Code::Internal, node.op + " produced " + shape_string(values[i].sizes()) + " where " +
                               shape_string(expected_shape(node.meta, options)) + " was inferred");
    for (size_t k = first; k < end; ++k) {
      const int64_t p = schedule.inputs[k];
      if (p < 0) continue;
      if (--uses[static_cast<size_t>(p)] == 0) {
        if (order[static_cast<size_t>(p)]->kind == NodeKind::Op && !is_given(order[static_cast<size_t>(p)])) --live;
        values[static_cast<size_t>(p)] = at::Tensor();
        if (!several.empty()) several[static_cast<size_t>(p)].clear();
      }
    }
  }
  if (options.stats) *options.stats = stats;
  Tensors results;
  results.reserve(schedule.roots.size());
  for (size_t p : schedule.roots) results.push_back(values[p]);
  return results;
}

Tensors evaluate(const std::vector<NodePtr>& roots, const EvalOptions& options) {
  std::vector<const Node*> raw;
  for (const NodePtr& root : roots) raw.push_back(root.get());
  return evaluate(raw, options);
}

at::Tensor evaluate(const NodePtr& root, const EvalOptions& options) {
  return evaluate(std::vector<const Node*>{root.get()}, options)[0];
}

Tensors autograd_leaves(const Tensors& outputs) {
  Tensors leaves;
  PointerIndex<c10::TensorImpl> seen_leaves;
  PointerIndex<torch::autograd::Node> seen;   // (grows with the graph)
  std::vector<torch::autograd::Node*> stack;  // the outputs keep their graph alive
  auto add_leaf = [&](const at::Tensor& t) {
    if (seen_leaves.insert(t.unsafeGetTensorImpl(), 0)) leaves.push_back(t);
  };
  for (const at::Tensor& value : outputs) {
    if (!value.defined() || !value.requires_grad()) continue;
    if (value.is_leaf())
      add_leaf(value);
    else
      stack.push_back(value.grad_fn().get());
  }
  while (!stack.empty()) {
    torch::autograd::Node* fn = stack.back();
    stack.pop_back();
    if (!fn || !seen.insert(fn, 0)) continue;
    // An exact type test: a dynamic_cast per autograd node cost more than the rest of the
    // walk (nothing derives from AccumulateGrad).
    if (typeid(*fn) == typeid(torch::autograd::AccumulateGrad)) {
      add_leaf(static_cast<torch::autograd::AccumulateGrad*>(fn)->variable);
      continue;
    }
    for (const auto& edge : fn->next_edges()) stack.push_back(edge.function.get());
  }
  return leaves;
}

Tensors gradients(const Tensors& outputs, const Tensors& grad_outputs, const Tensors& leaves, bool retain_graph) {
  Tensors outs, gos;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !outputs[i].requires_grad()) continue;
    outs.push_back(outputs[i]);
    gos.push_back(grad_outputs.empty() ? at::Tensor() : grad_outputs[i]);
  }
  if (outs.empty() || leaves.empty()) return Tensors(leaves.size());
  try {
    return torch::autograd::grad(outs, leaves, gos, retain_graph, /*create_graph=*/false, /*allow_unused=*/true);
  } catch (...) {
    release_failed_backward();
    throw;
  }
}

void accumulate_gradients(const Tensors& outputs, const Tensors& grad_outputs, const Tensors& leaves,
                          bool retain_graph) {
  Tensors outs, gos;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !outputs[i].requires_grad()) continue;
    outs.push_back(outputs[i]);
    gos.push_back(grad_outputs.empty() ? at::Tensor() : grad_outputs[i]);
  }
  if (outs.empty() || leaves.empty()) return;
  try {
    // Into every leaf the outputs reach, which `leaves` are: named as inputs, they would
    // cost the engine a pass over the graph to find their edges.
    torch::autograd::backward(outs, gos, retain_graph, /*create_graph=*/false);
  } catch (...) {
    release_failed_backward();
    throw;
  }
}

GradStart grad_start(const at::Tensor& t) {
  if (!t.defined() || !t.requires_grad() || !t.is_leaf()) return GradStart::Absent;
  const at::Tensor& g = t.grad();
  if (!g.defined()) return GradStart::Absent;
  if (known_zero(g)) return GradStart::Zero;  // zeroed by koila and not written since: not read
  if (g.layout() != at::kStrided || g.is_meta() || g.is_complex()) return GradStart::Held;
  if (g.numel() == 0) return GradStart::Zero;
  // Its least and largest elements, into two scalars (any() would first copy it to bools).
  c10::NoGradGuard no_grad;
  const auto [lo, hi] = at::aminmax(g);
  return lo.item<double>() == 0 && hi.item<double>() == 0 ? GradStart::Zero : GradStart::Held;
}

bool reaches_eager_history(const std::vector<const Node*>& nodes) {
  return std::any_of(nodes.begin(), nodes.end(), [](const Node* node) {
    return node->kind != NodeKind::Op && node->value.defined() && node->value.grad_fn() != nullptr;
  });
}

at::Tensor owned_gradient(const at::Tensor& grad, const at::Tensor& leaf) {
  const bool owns_dense_memory = grad.is_non_overlapping_and_dense() && grad.strides() == leaf.strides() &&
                                 grad.storage_offset() == 0 &&
                                 grad.storage().nbytes() == static_cast<size_t>(grad.numel()) * grad.element_size();
  return owns_dense_memory ? grad : at::empty_like(leaf).copy_(grad);
}

void commit_gradients(const Tensors& leaves, const Tensors& grads) {
  c10::NoGradGuard no_grad;
  // All or nothing: every allocation (a dense copy for a leaf without .grad) happens before
  // any .grad changes, so an out-of-memory error within the budget leaves them all as they
  // were; what follows only steals tensors or adds in place.
  Tensors owned(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i)
    if (grads[i].defined() && !leaves[i].grad().defined()) owned[i] = owned_gradient(grads[i], leaves[i]);
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!grads[i].defined()) continue;
    at::Tensor& grad = const_cast<at::Tensor&>(leaves[i]).mutable_grad();
    if (grad.defined())
      grad.add_(grads[i]);
    else
      grad = owned[i];
  }
}

}  // namespace koila
