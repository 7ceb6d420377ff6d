#include "run/recompute.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/error.h"
#include "base/libtorch_compat.h"
#include "base/random_scope.h"
#include "base/text.h"
#include "kernels/batch_stats.h"
#include "kernels/fused_grads.h"

namespace koila {

namespace {

thread_local bool running_again = false;
thread_local int backward_depth = 0;   // RecomputeBackward functions running on this thread
thread_local bool segmenting = false;  // SegmentingPrograms
thread_local bool segmenting_into_leaves = false;

// The function of a gradient_taking input: keeps the gradient that reaches it.
struct TakeGradient : torch::autograd::Node {
  at::Tensor grad;
  std::string name() const override { return "TakeGradient"; }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (!grads.empty()) grad = std::move(grads[0]);
    return {};
  }
};

// The segment's backward: runs it again from the inputs it kept, with autograd, drawing the
// random numbers its forward drew, and differentiates it.
struct RecomputeBackward : torch::autograd::Node {
  RecomputeSegment segment;
  EvalOptions options;               // the forward's (its chunk, its leaves)
  bool segmenting_programs = false;  // as in the forward
  bool programs_into_leaves = false;
  // The inputs that require grad, saved as autograd saves (their versions checked); the others
  // (data, integer values, state) kept as they are: state that the first run changed in place
  // is replaced by its copy from before (`state`).
  std::vector<torch::autograd::SavedVariable> inputs;
  Tensors plain;
  std::vector<bool> needs_grad;
  Tensors leaves;  // per input: itself where it is an autograd leaf requiring grad (a parameter)
  FusedPass pass;  // of the first run: run again into .grad, the segment fuses as it would have
  c10::Device device = c10::Device(c10::kCPU);
  std::vector<at::Tensor> random_states;  // the generators' when the forward began (not on meta)

  std::string name() const override { return "RecomputeBackward"; }
  void release_variables() override {
    for (torch::autograd::SavedVariable& v : inputs) v.reset_data();
    plain.clear();
    leaves.clear();
    random_states.clear();
  }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    const InRecomputeBackward inside;
    // Into the parameters' .grad where the backward around adds into them: the segment runs
    // again on the parameters themselves. Else on detached copies, whose gradients come back.
    const bool into_leaves = backward_accumulates_into_leaves();
    torch::autograd::variable_list result(inputs.size());
    Tensors xs(inputs.size());
    std::vector<bool> direct(inputs.size(), false);
    std::unordered_map<const koila::Node*, at::Tensor> given;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!needs_grad[i]) {
        xs[i] = plain[i];
      } else {
        at::Tensor saved = inputs[i].unpack();  // (checks that nothing wrote it in place since)
        direct[i] = into_leaves && leaves[i].defined();
        xs[i] = direct[i] ? leaves[i] : gradient_taking(saved);
      }
      given.emplace(segment.inputs[i], xs[i]);
    }
    Tensors outs;
    {
      const UnobservedStats unobserved;  // the first run's batch statistics were recorded
      const RunningAgain again_mark;
      std::unique_ptr<RandomScope> random;
      if (!random_states.empty()) {
        random = std::make_unique<RandomScope>(device);  // the backward's own draws come back after
        random->replay(random_states);
      }
      c10::AutoGradMode on(true);
      const FusedPassAgain fused(into_leaves ? pass : FusedPass{});
      const SegmentingPrograms inside(segmenting_programs, programs_into_leaves);
      EvalOptions again = options;
      again.grad = true;
      again.given = &given;
      outs = evaluate(segment.outputs, again);
    }
    torch::autograd::edge_list roots;
    Tensors grad_outputs, wrt;
    std::vector<size_t> at_input;
    std::vector<bool> wrt_direct;
    for (size_t k = 0; k < outs.size() && k < grads.size(); ++k)
      if (grads[k].defined() && outs[k].requires_grad()) {
        roots.push_back(torch::autograd::impl::gradient_edge(outs[k]));
        grad_outputs.push_back(std::move(grads[k]));
      }
    outs.clear();
    grads.clear();
    for (size_t i = 0; i < xs.size(); ++i)
      if (needs_grad[i] && task_should_compute_output(i)) {
        wrt.push_back(xs[i]);
        at_input.push_back(i);
        wrt_direct.push_back(direct[i]);
      }
    if (roots.empty() || wrt.empty()) return result;
    const Tensors g = segment_gradients(roots, grad_outputs, wrt, wrt_direct);
    for (size_t j = 0; j < g.size(); ++j) result[at_input[j]] = g[j];
    return result;
  }
};

}  // namespace

std::vector<const Node*> segment_ops(const RecomputeSegment& segment) {
  const std::unordered_set<const Node*> inputs(segment.inputs.begin(), segment.inputs.end());
  std::vector<const Node*> order;  // post-order: each after its inputs
  std::unordered_set<const Node*> seen;
  std::vector<std::pair<const Node*, size_t>> stack;
  for (const Node* out : segment.outputs) {
    if (inputs.count(out)) fail(Code::InvalidArgument, "a segment's output is one of its inputs");
    if (!seen.insert(out).second) continue;
    stack.emplace_back(out, 0);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (node->kind != NodeKind::Op)
        fail(Code::InvalidArgument,
             "a segment reaches a tensor that is not among its inputs (" + node->op + "): its leaves are inputs");
      if (next < node->inputs.size()) {
        const Node* in = node->inputs[next++].get();
        if (in && !inputs.count(in) && seen.insert(in).second) stack.emplace_back(in, 0);
        continue;
      }
      order.push_back(node);
      stack.pop_back();
    }
  }
  return order;
}

Tensors run_recomputed(const RecomputeSegment& segment, const Tensors& input_values, const EvalOptions& options) {
  if (input_values.size() != segment.inputs.size())
    fail(Code::Internal, "a segment's inputs and their values differ in number");
  if (segment.outputs.empty()) return {};
  std::unordered_map<const Node*, at::Tensor> given;
  bool any_grad = false;
  c10::Device device = c10::Device(c10::kCPU);
  bool on_meta = false;
  for (size_t i = 0; i < input_values.size(); ++i) {
    given.emplace(segment.inputs[i], input_values[i]);
    any_grad = any_grad || input_values[i].requires_grad();
    if (input_values[i].device().type() != c10::kCPU) device = input_values[i].device();
    on_meta = on_meta || input_values[i].is_meta();
  }
  // State that the segment's ops may change in place (leaves of ops that change state, that
  // require no grad and carry no batch): copied before the first run, for the second.
  std::vector<bool> is_state(segment.inputs.size(), false);
  {
    const std::unordered_set<const Node*> ins(segment.inputs.begin(), segment.inputs.end());
    for (const Node* op : segment_ops(segment)) {  // (checks the segment)
      if (!op->mutates_state) continue;
      for (const NodePtr& in : op->inputs)
        if (in && in->kind != NodeKind::Op && ins.count(in.get()))
          for (size_t i = 0; i < segment.inputs.size(); ++i)
            if (segment.inputs[i] == in.get() && !input_values[i].requires_grad() && in->meta.batch_dim < 0)
              is_state[i] = true;
    }
  }
  Tensors state(segment.inputs.size());
  for (size_t i = 0; i < segment.inputs.size(); ++i)
    if (is_state[i] && any_grad && c10::GradMode::is_enabled()) state[i] = input_values[i].clone();
  EvalOptions inner = options;
  inner.grad = false;
  inner.given = &given;
  inner.reached_leaves = nullptr;
  std::vector<at::Tensor> states;
  if (!on_meta) states = RandomScope(device).states();  // (meta ops draw nothing)
  Tensors outs;
  {
    c10::NoGradGuard no_grad;
    outs = evaluate(segment.outputs, inner);
  }
  if (!c10::GradMode::is_enabled() || !any_grad) return outs;
  auto node = compat::make_autograd_node<RecomputeBackward>();
  node->segment = segment;
  node->options = options;
  node->segmenting_programs = segmenting;
  node->programs_into_leaves = segmenting_into_leaves;
  node->options.given = nullptr;
  node->options.reached_leaves = nullptr;
  node->options.stats = nullptr;
  node->device = device;
  node->random_states = std::move(states);
  for (size_t i = 0; i < input_values.size(); ++i) {
    const at::Tensor& v = input_values[i];
    const bool grad = v.requires_grad();
    node->inputs.emplace_back(grad ? v : at::Tensor(), /*is_output=*/false);
    node->plain.push_back(grad ? at::Tensor() : is_state[i] ? state[i] : v);
    node->needs_grad.push_back(grad);
    const bool only_here = i < segment.only_here.size() && segment.only_here[i];
    node->leaves.push_back(grad && only_here && v.is_leaf() ? v : at::Tensor());
  }
  node->pass = current_fused_pass();
  node->set_next_edges(torch::autograd::collect_next_edges(input_values));
  for (at::Tensor& out : outs) out = segment_result(std::move(out), compat::AutogradNodeRef(node));
  return outs;
}

at::Tensor segment_result(at::Tensor out, const compat::AutogradNodeRef& node) {
  if (!out.defined() || !torch::autograd::isDifferentiableType(out.scalar_type())) {
    node->add_input_metadata(torch::autograd::Node::undefined_input());
    return out;
  }
  out = at::_unsafe_view(out, out.sizes());
  torch::autograd::set_history(out, node);
  return out;
}

bool backward_accumulates_into_leaves() {
  const auto* exec_info = torch::autograd::get_current_graph_task_exec_info();
  return exec_info != nullptr && exec_info->empty();  // (a task that captures lists what it needs)
}

at::Tensor gradient_taking(const at::Tensor& x) {
  return segment_result(x.detach(), compat::make_autograd_node<TakeGradient>());
}

Tensors segment_gradients(const std::vector<torch::autograd::Edge>& roots, const Tensors& grad_outputs,
                          const Tensors& wrt, const std::vector<bool>& into_leaves) {
  if (wrt.size() != into_leaves.size()) fail(Code::Internal, "segment_gradients: one flag per tensor");
  // Every wrt's function among the outputs (only what reaches one runs). From the roots' edges,
  // not the outputs: the segment's outputs run again need not live while it runs (their
  // functions keep what they saved; one no op inside read, such as a residual block's sum, is
  // freed first).
  torch::autograd::edge_list outputs;
  outputs.reserve(wrt.size());
  std::vector<bool> taker(wrt.size(), false);
  bool added = false, captured = false;  // into some .grad; a leaf's gradient wanted back
  for (size_t j = 0; j < wrt.size(); ++j) {
    const at::Tensor& x = wrt[j];
    taker[j] = dynamic_cast<TakeGradient*>(x.grad_fn().get()) != nullptr;
    if (!taker[j] && !x.is_leaf())
      fail(Code::Internal, "segment_gradients: a tensor neither a leaf nor taking its gradient");
    added = added || (!taker[j] && into_leaves[j]);
    captured = captured || (!taker[j] && !into_leaves[j]);
    outputs.push_back(torch::autograd::impl::gradient_edge(x));
  }
  torch::autograd::Engine& engine = torch::autograd::Engine::get_default_engine();
  if (captured || !added) {
    // Every gradient comes back (where some leaf's must: its accumulator cannot both run and
    // not), taken at each function's input.
    return engine.execute(roots, grad_outputs, /*keep_graph=*/false, /*create_graph=*/false,
                          /*accumulate_grad=*/false, outputs);
  }
  // Each function runs: a taker keeps its gradient, a leaf's accumulator adds into its .grad.
  engine.execute(roots, grad_outputs, /*keep_graph=*/false, /*create_graph=*/false, /*accumulate_grad=*/true, outputs);
  Tensors grads(wrt.size());
  for (size_t j = 0; j < wrt.size(); ++j)
    if (taker[j]) grads[j] = std::move(dynamic_cast<TakeGradient*>(wrt[j].grad_fn().get())->grad);
  return grads;
}

bool recomputing() { return running_again; }
bool segmenting_programs() { return segmenting; }
bool segmented_programs_add_into_leaves() { return segmenting && segmenting_into_leaves; }
SegmentingPrograms::SegmentingPrograms(bool on, bool into_leaves)
    : previous_(segmenting), previous_into_leaves_(segmenting_into_leaves) {
  segmenting = on;
  segmenting_into_leaves = into_leaves;
}
SegmentingPrograms::~SegmentingPrograms() {
  segmenting = previous_;
  segmenting_into_leaves = previous_into_leaves_;
}
bool in_recompute_backward() { return backward_depth > 0; }
InRecomputeBackward::InRecomputeBackward() { ++backward_depth; }
InRecomputeBackward::~InRecomputeBackward() { --backward_depth; }
RunningAgain::RunningAgain() : previous_(running_again) { running_again = true; }
RunningAgain::~RunningAgain() { running_again = previous_; }

std::vector<size_t> last_reads(const Schedule& schedule) {
  const size_t n = schedule.order.size();
  std::vector<size_t> last(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = schedule.input_start[i]; k < schedule.input_start[i + 1]; ++k)
      if (schedule.inputs[k] >= 0) {
        const auto p = static_cast<size_t>(schedule.inputs[k]);
        last[p] = std::max(last[p], i);
      }
  for (size_t r : schedule.roots) last[r] = n;
  return last;
}

uint64_t value_bytes(const Node& node, int64_t chunk) {
  double n = static_cast<double>(c10::elementSize(node.meta.dtype));
  for (size_t d = 0; d < node.meta.shape.size(); ++d)
    n *= static_cast<double>(chunk >= 0 && static_cast<int64_t>(d) == node.meta.batch_dim ? chunk : node.meta.shape[d]);
  return static_cast<uint64_t>(n);
}

double forward_cost(const Node& node, int64_t chunk) {
  const double out =
      static_cast<double>(value_bytes(node, chunk)) / static_cast<double>(c10::elementSize(node.meta.dtype));
  const std::string& op = node.op;
  const auto has = [&op](const char* part) { return op.find(part) != std::string::npos; };
  if (!(has("linear") || has("matmul") || has("conv") || has("mm") || has("attention") || has("einsum") ||
        node.linear_layers > 0 || node.runs_program))
    return out;
  // Attention [..., L, E] x [..., S, E] x [..., S, Ev] -> [..., L, Ev]: two products over the S
  // keys, L x S x E for the scores and L x S x Ev for their weighted sum (counted as a product
  // over E alone, a transformer's attention looked 16 times cheaper than it is at 1024 keys).
  if (has("attention") && node.inputs.size() >= 3 && node.inputs[0] && node.inputs[1] &&
      node.inputs[0]->meta.shape.size() >= 2 && node.inputs[1]->meta.shape.size() >= 2 && !node.meta.shape.empty()) {
    const auto e = static_cast<double>(node.inputs[0]->meta.shape.back());
    const auto keys = static_cast<double>(node.inputs[1]->meta.shape[node.inputs[1]->meta.shape.size() - 2]);
    const auto ev = static_cast<double>(std::max<int64_t>(1, node.meta.shape.back()));
    return out / ev * keys * (e + ev);
  }
  // What each result element sums over: a weight's elements per output feature (linear layers,
  // convolutions), else the first input's last dimension (matrix products).
  double reduced = 1;
  for (const NodePtr& in : node.inputs)
    if (in && in->kind != NodeKind::Op && in->value.defined() && in->value.requires_grad() &&
        in->meta.shape.size() >= 2) {
      double per = 1;
      for (size_t d = 1; d < in->meta.shape.size(); ++d) per *= static_cast<double>(in->meta.shape[d]);
      reduced = std::max(reduced, per);
    }
  if (reduced == 1 && !node.inputs.empty() && node.inputs[0] && !node.inputs[0]->meta.shape.empty())
    reduced = static_cast<double>(node.inputs[0]->meta.shape.back());
  return out * std::max(1.0, reduced);
}

uint64_t RecomputePlan::key() const {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& [first, last] : ranges) {
    h = (h ^ first) * 1099511628211ULL;
    h = (h ^ last) * 1099511628211ULL;
  }
  return inside_programs ? (h ^ 0x9e3779b97f4a7c15ULL) * 1099511628211ULL : h;
}

std::string RecomputePlan::summary() const {
  std::map<std::string, size_t> ops;
  for (const RecomputeSegment& s : segments)
    for (const Node* n : segment_ops(s)) ++ops[n->op];
  std::vector<std::pair<size_t, std::string>> by_count;
  for (const auto& [op, n] : ops) by_count.emplace_back(n, op);
  std::sort(by_count.begin(), by_count.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::string text;
  for (size_t k = 0; k < by_count.size() && k < 6; ++k)
    text +=
        (k ? ", " : "") + by_count[k].second + (by_count[k].first > 1 ? " x" + std::to_string(by_count[k].first) : "");
  if (by_count.size() > 6) text += ", ...";
  if (segmented_programs > 0)
    text += std::string(text.empty() ? "" : "; ") + std::to_string(segmented_programs) +
            (segmented_programs == 1 ? " module call" : " module calls") + " in segments of its own graph";
  return text;
}

std::shared_ptr<const RecomputePlan> make_recompute_plan(const Schedule& base,
                                                         std::vector<std::pair<size_t, size_t>> ranges, int64_t chunk,
                                                         const std::vector<double>& saved, bool inside_programs,
                                                         uint64_t programs_freed) {
  auto plan = std::make_shared<RecomputePlan>();
  plan->inside_programs = inside_programs;
  plan->base = &base;
  plan->chunk = chunk;
  const size_t n = base.order.size();
  const std::vector<size_t> last_use = last_reads(base);
  // How many ops read each position (an op reading a value twice counts once).
  std::vector<size_t> readers(n, 0);
  for (size_t i = 0; i < n; ++i) {
    std::unordered_set<int64_t> read;
    for (size_t k = base.input_start[i]; k < base.input_start[i + 1]; ++k)
      if (base.inputs[k] >= 0 && read.insert(base.inputs[k]).second) ++readers[static_cast<size_t>(base.inputs[k])];
  }
  for (size_t i = 0; i < n; ++i)
    if (base.order[i]->kind == NodeKind::Op) plan->forward_cost += forward_cost(*base.order[i], chunk);
  if (inside_programs) {
    // A program runs in segments of its own graph, recomputing them in its backward: in a range
    // too, its forward would run a third time. Ranges are cut around programs.
    std::vector<std::pair<size_t, size_t>> apart;
    for (const auto& [first, last] : ranges) {
      size_t from = first;
      for (size_t i = first; i <= last && i < n; ++i)
        if (base.order[i]->kind == NodeKind::Op && base.order[i]->runs_program) {
          if (i > from) apart.emplace_back(from, i - 1);
          from = i + 1;
        }
      if (from <= last) apart.emplace_back(from, last);
    }
    ranges = std::move(apart);
    for (size_t i = 0; i < n; ++i)
      if (base.order[i]->kind == NodeKind::Op && base.order[i]->runs_program) {
        plan->recomputed_cost += forward_cost(*base.order[i], chunk);
        ++plan->segmented_programs;
        for (size_t k = base.input_start[i]; k < base.input_start[i + 1]; ++k) {
          const int64_t p = base.inputs[k];
          if (p >= 0 && base.order[static_cast<size_t>(p)]->kind != NodeKind::Op && readers[static_cast<size_t>(p)] > 1)
            plan->programs_share_leaves = true;
        }
      }
  }
  size_t previous_end = 0;
  for (const auto& [first, last] : ranges) {
    if (first > last || last >= n || first < previous_end)
      fail(Code::Internal, "recomputed ranges must be ordered, disjoint and within the schedule");
    previous_end = last + 1;
    RecomputeSegment segment;
    std::unordered_set<const Node*> inputs;
    std::vector<size_t> input_at;                  // their positions
    std::unordered_map<size_t, size_t> read_here;  // position -> ops of the range reading it
    uint64_t freed = 0;
    double cost = 0;
    size_t ops = 0;
    for (size_t i = first; i <= last; ++i) {
      const Node* node = base.order[i];
      if (node->kind != NodeKind::Op) continue;
      ++ops;
      cost += forward_cost(*node, chunk);
      std::unordered_set<int64_t> read;
      for (size_t k = base.input_start[i]; k < base.input_start[i + 1]; ++k) {
        const int64_t p = base.inputs[k];
        if (p < 0) continue;
        const Node* in = base.order[static_cast<size_t>(p)];
        const bool inside =
            static_cast<size_t>(p) >= first && static_cast<size_t>(p) <= last && in->kind == NodeKind::Op;
        if (!inside && inputs.insert(in).second) {
          segment.inputs.push_back(in);
          input_at.push_back(static_cast<size_t>(p));
        }
        if (!inside && read.insert(p).second) ++read_here[static_cast<size_t>(p)];
      }
      if (last_use[i] > last)
        segment.outputs.push_back(node);
      else
        freed += saved.empty() ? value_bytes(*node, chunk) : static_cast<uint64_t>(saved[i]);
    }
    if (ops == 0 || segment.outputs.empty()) continue;
    for (size_t p : input_at)
      segment.only_here.push_back(base.order[p]->kind != NodeKind::Op && read_here[p] == readers[p]);
    plan->ranges.emplace_back(first, last);
    plan->freed_bytes += freed;
    plan->recomputed_cost += cost;
    plan->recomputed_ops += ops;
    plan->segments.push_back(std::move(segment));
  }
  if (plan->segmented_programs > 0) plan->freed_bytes += programs_freed;
  plan->groups.reserve(plan->segments.size());
  for (const RecomputeSegment& segment : plan->segments)
    plan->groups.push_back(NodeGroup{
        segment.inputs, segment.outputs,
        [&segment](const Tensors& ins, const EvalOptions& options) { return run_recomputed(segment, ins, options); }});
  std::vector<const Node*> roots;
  for (size_t r : base.roots) roots.push_back(base.order[r]);
  plan->schedule = make_schedule(roots, nullptr, &plan->groups);
  return plan;
}

}  // namespace koila
