#include "run/recompute.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/error.h"
#include "base/libtorch_compat.h"
#include "base/random_scope.h"

namespace koila {

namespace {

// The segment's backward: runs it again from the inputs it kept, with autograd, drawing the
// random numbers its forward drew, and differentiates it.
struct RecomputeBackward : torch::autograd::Node {
  RecomputeSegment segment;
  EvalOptions options;  // the forward's (its chunk, its leaves)
  std::vector<torch::autograd::SavedVariable> inputs;
  std::vector<bool> needs_grad;
  c10::Device device = c10::Device(c10::kCPU);
  std::vector<at::Tensor> random_states;  // the generators' when the forward began (not on meta)

  std::string name() const override { return "RecomputeBackward"; }
  void release_variables() override {
    for (torch::autograd::SavedVariable& v : inputs) v.reset_data();
    random_states.clear();
  }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    torch::autograd::variable_list result(inputs.size());
    Tensors xs(inputs.size());
    std::unordered_map<const koila::Node*, at::Tensor> given;
    for (size_t i = 0; i < inputs.size(); ++i) {
      xs[i] = inputs[i].unpack().detach();
      if (needs_grad[i]) xs[i].requires_grad_(true);
      given.emplace(segment.inputs[i], xs[i]);
    }
    Tensors outs;
    {
      std::unique_ptr<RandomScope> random;
      if (!random_states.empty()) {
        random = std::make_unique<RandomScope>(device);  // the backward's own draws come back after
        random->replay(random_states);
      }
      c10::AutoGradMode on(true);
      EvalOptions again = options;
      again.grad = true;
      again.given = &given;
      outs = evaluate(segment.outputs, again);
    }
    Tensors roots, grad_outputs, wrt;
    std::vector<size_t> at_input;
    for (size_t k = 0; k < outs.size() && k < grads.size(); ++k)
      if (grads[k].defined() && outs[k].requires_grad()) {
        roots.push_back(outs[k]);
        grad_outputs.push_back(grads[k]);
      }
    for (size_t i = 0; i < xs.size(); ++i)
      if (needs_grad[i] && task_should_compute_output(i)) {
        wrt.push_back(xs[i]);
        at_input.push_back(i);
      }
    if (roots.empty() || wrt.empty()) return result;
    const Tensors g = torch::autograd::grad(roots, wrt, grad_outputs, /*retain_graph=*/false, /*create_graph=*/false,
                                            /*allow_unused=*/true);
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
    if (inputs.count(out)) fail(KOILA_ERROR_INVALID_ARGUMENT, "a segment's output is one of its inputs");
    if (!seen.insert(out).second) continue;
    stack.emplace_back(out, 0);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (node->kind != NodeKind::Op)
        fail(KOILA_ERROR_INVALID_ARGUMENT,
             "a segment reaches a tensor that is not among its inputs (" + node->op + "): its leaves are inputs");
      if (node->mutates_state)
        fail(KOILA_ERROR_UNSUPPORTED, "a segment cannot recompute " + node->op +
                                          ", which changes state in place (a second run would change it again)");
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
    fail(KOILA_ERROR_INTERNAL, "a segment's inputs and their values differ in number");
  if (segment.outputs.empty()) return {};
  (void)segment_ops(segment);  // checks it
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
  node->options.given = nullptr;
  node->options.reached_leaves = nullptr;
  node->options.stats = nullptr;
  node->device = device;
  node->random_states = std::move(states);
  for (const at::Tensor& v : input_values) {
    node->inputs.emplace_back(v, /*is_output=*/false);
    node->needs_grad.push_back(v.requires_grad());
  }
  node->set_next_edges(torch::autograd::collect_next_edges(input_values));
  for (at::Tensor& out : outs) {
    if (!out.defined() || !torch::autograd::isDifferentiableType(out.scalar_type())) {
      node->add_input_metadata(torch::autograd::Node::undefined_input());
      continue;
    }
    // A tensor of its own (not a view, not an input's tensor), whose history is the segment's.
    out = at::_unsafe_view(out, out.sizes());
    torch::autograd::set_history(out, compat::AutogradNodeRef(node));
  }
  return outs;
}

}  // namespace koila
