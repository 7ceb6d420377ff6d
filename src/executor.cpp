#include "executor.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "error.h"
#include "types.h"

namespace koila {
namespace {

// Nodes reachable from root, each after its inputs.
std::vector<const Node*> topological_order(const Node* root) {
  std::vector<const Node*> order;
  std::unordered_set<const Node*> done;
  std::vector<std::pair<const Node*, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      const Node* in = node->inputs[next++].get();
      if (in && !done.count(in)) stack.emplace_back(in, 0);
      continue;
    }
    if (done.insert(node).second) order.push_back(node);
    stack.pop_back();
  }
  return order;
}

std::vector<int64_t> expected_shape(const Meta& meta, const EvalOptions& options) {
  std::vector<int64_t> shape = meta.shape;
  if (options.chunk_length >= 0 && meta.batch_dim >= 0) shape[meta.batch_dim] = options.chunk_length;
  return shape;
}

}  // namespace

at::Tensor evaluate(const NodePtr& root, const EvalOptions& options) {
  c10::AutoGradMode grad_mode(options.grad);
  const std::vector<const Node*> order = topological_order(root.get());
  std::unordered_map<const Node*, size_t> position;
  std::vector<size_t> uses(order.size(), 0);
  for (size_t i = 0; i < order.size(); ++i) position.emplace(order[i], i);
  for (const Node* node : order)
    for (const NodePtr& in : node->inputs)
      if (in) ++uses[position.at(in.get())];

  std::vector<at::Tensor> values(order.size());
  Tensors args;
  size_t live = 0;
  EvalStats stats;
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& node = *order[i];
    if (node.kind != NodeKind::Op) {
      values[i] = node.value;
      if (options.chunk_length >= 0 && node.meta.batch_dim >= 0)
        values[i] = values[i].narrow(node.meta.batch_dim, options.chunk_start, options.chunk_length);
      continue;
    }
    args.clear();
    for (const NodePtr& in : node.inputs) args.push_back(in ? values[position.at(in.get())] : at::Tensor());
    try {
      values[i] = node.run(args, node);
    } catch (const c10::Error&) {
      rethrow_torch_error(node.op + " (inputs " + describe_inputs(node.inputs) + ")", KOILA_ERROR_INVALID_ARGUMENT);
    }
    args.clear();
    ++stats.ops_run;
    stats.peak_live_values = std::max(stats.peak_live_values, ++live);
    const std::vector<int64_t> expected = expected_shape(node.meta, options);
    if (values[i].sizes() != at::IntArrayRef(expected))
      fail(KOILA_ERROR_INTERNAL, node.op + " produced " + shape_string(values[i].sizes()) + " where " +
                                     shape_string(expected) + " was inferred");
    for (const NodePtr& in : node.inputs) {
      if (!in) continue;
      const size_t p = position.at(in.get());
      if (--uses[p] == 0 && p + 1 != order.size()) {
        if (order[p]->kind == NodeKind::Op) --live;
        values[p] = at::Tensor();
      }
    }
  }
  if (options.stats) *options.stats = stats;
  return values.back();
}

namespace {

// The leaves (AccumulateGrad variables) the autograd graph of `value` reaches.
std::vector<at::Tensor> autograd_leaves(const at::Tensor& value) {
  std::vector<at::Tensor> leaves;
  if (value.is_leaf()) {
    if (value.requires_grad()) leaves.push_back(value);
    return leaves;
  }
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<std::shared_ptr<torch::autograd::Node>> stack{value.grad_fn()};
  while (!stack.empty()) {
    auto fn = std::move(stack.back());
    stack.pop_back();
    if (!fn || !seen.insert(fn.get()).second) continue;
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(fn.get())) {
      leaves.push_back(acc->variable);
      continue;
    }
    for (const auto& edge : fn->next_edges()) stack.push_back(edge.function);
  }
  return leaves;
}

}  // namespace

void backward(const NodePtr& loss) {
  uint64_t numel = checked_numel(loss->meta.shape);
  if (numel != 1)
    fail(KOILA_ERROR_INVALID_ARGUMENT, "the loss must have exactly one element, but has shape " +
                                           shape_string(loss->meta.shape));
  if (!at::isFloatingType(loss->meta.dtype))
    fail(KOILA_ERROR_DTYPE, std::string("the loss must be floating point, but is ") + dtype_name(loss->meta.dtype));

  at::Tensor value = loss->lazy() ? evaluate(loss, EvalOptions{true}) : loss->value;
  std::vector<at::Tensor> leaves = value.requires_grad() ? autograd_leaves(value) : std::vector<at::Tensor>{};
  if (leaves.empty())
    fail(KOILA_ERROR_INVALID_ARGUMENT, "the loss does not depend on any tensor that requires grad "
                                       "(see koila_tensor_set_requires_grad)");
  // Computed first, committed after: a failure leaves every .grad as it was.
  torch::autograd::variable_list grads =
      torch::autograd::grad({value}, leaves, /*grad_outputs=*/{}, /*retain_graph=*/false, /*create_graph=*/false,
                            /*allow_unused=*/true);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!grads[i].defined()) continue;
    at::Tensor& grad = leaves[i].mutable_grad();
    if (grad.defined())
      grad.add_(grads[i]);
    else
      grad = grads[i];
  }
}

}  // namespace koila
