#include "module/segmented_call.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/libtorch_compat.h"
#include "base/random_scope.h"
#include "kernels/batch_stats.h"
#include "kernels/fused_grads.h"
#include "module/call_errors.h"
#include "module/call_segments.h"
#include "module/twin.h"
#include "run/recompute.h"

namespace koila::module_detail {

namespace {

using JitValue = torch::jit::Value;

// Runs `segment` on `stack` (the module, then its inputs), leaving its outputs there.
void run_segment(const CallSegment& segment, std::vector<c10::IValue>& stack) {
  segment.function->run(stack);
  if (stack.size() == 1 && stack[0].isTuple()) {
    std::vector<c10::IValue> outs = stack[0].toTupleRef().elements().vec();
    stack = std::move(outs);
  }
}

// One segment's backward: runs the segment again from the inputs it kept, with autograd, drawing
// the random numbers its first run drew, and differentiates it. Its inputs' gradients go to the
// segments (or the call's arguments) that made them, the state's to its leaves, as a backward
// without segments sends them, one segment at a time.
struct SegmentBackward : torch::autograd::Node {
  std::shared_ptr<const CallSegments> segments;
  size_t index = 0;
  std::vector<c10::IValue> inputs;  // the segment's, those that need grad detached
  std::vector<bool> needs_grad;     // per input: an edge of this node
  c10::IValue module;               // reading copies of what the forward wrote
  Tensors state;                    // the state tensors that require grad (edges after the inputs')
  std::vector<bool> state_here;     // per state tensor: read by this segment alone (of the run's ops)
  c10::Device device = c10::Device(c10::kCPU);
  std::vector<at::Tensor> random_states;  // when the first run began (not on meta)
  FusedPass pass;                         // of the first run: the second fuses as it would have
  std::string call_name;

  std::string name() const override { return "SegmentBackward"; }
  void release_variables() override {
    inputs.clear();
    module = c10::IValue();
    state.clear();
    random_states.clear();
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (!segments) fail(Code::InvalidArgument, "module " + call_name + ": a segment was differentiated twice");
    const InRecomputeBackward inside;  // (the timeline shows the ops it runs)
    const CallSegment& segment = segments->segments[index];
    // The parameters this segment alone reads get their gradients added into .grad as they are
    // made, where the backward around adds into them; the others' come back (segment_gradients).
    const bool into_grad = backward_accumulates_into_leaves();
    size_t n_edges = 0;
    for (bool b : needs_grad) n_edges += b ? 1 : 0;
    torch::autograd::variable_list result(n_edges + state.size());
    std::vector<c10::IValue> stack{module};
    Tensors xs;
    std::vector<size_t> x_edge;
    size_t edge = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      c10::IValue v = inputs[i];
      if (needs_grad[i]) {
        if (task_should_compute_output(edge)) {
          at::Tensor x = gradient_taking(v.toTensor());
          xs.push_back(x);
          x_edge.push_back(edge);
          v = x;
        }
        ++edge;
      }
      stack.push_back(std::move(v));
    }
    {
      const UnobservedStats unobserved;  // the first run's batch statistics were recorded
      const torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
      std::unique_ptr<RandomScope> random;
      if (!random_states.empty()) {
        random = std::make_unique<RandomScope>(device);
        random->replay(random_states);
      }
      const c10::AutoGradMode on(true);
      const FusedPassAgain fused(pass);
      const RunningAgain again;  // (marked "recomputed" in the timeline)
      run_segment(segment, stack);
    }
    if (stack.size() != segment.outputs.size())
      fail(Code::Internal, "module " + call_name + ": a segment run again gave another number of values");
    torch::autograd::edge_list roots;
    Tensors grad_outputs;
    size_t k = 0;  // (grads: one per output that is a tensor)
    for (const c10::IValue& out : stack) {
      if (!out.isTensor()) continue;
      const at::Tensor t = out.toTensor();
      if (k < grads.size() && grads[k].defined() && t.defined() && t.requires_grad()) {
        roots.push_back(torch::autograd::impl::gradient_edge(t));
        grad_outputs.push_back(grads[k]);
      }
      ++k;
    }
    stack.clear();  // (the outputs run again need not live while their backward runs)
    Tensors wrt = xs;
    std::vector<size_t> wrt_edge = x_edge;
    std::vector<bool> into_leaves(xs.size(), false);
    for (size_t i = 0; i < state.size(); ++i)
      if (task_should_compute_output(n_edges + i)) {
        wrt.push_back(state[i]);
        wrt_edge.push_back(n_edges + i);
        into_leaves.push_back(into_grad && state_here[i] && state[i].is_leaf());
      }
    if (!roots.empty() && !wrt.empty()) {
      const Tensors g = segment_gradients(roots, grad_outputs, wrt, into_leaves);
      for (size_t j = 0; j < g.size(); ++j) result[wrt_edge[j]] = g[j];
    }
    segments.reset();
    release_variables();
    return result;
  }
};

// The tensor at attribute `path` of `module` (undefined where there is none).
at::Tensor attribute_at(const c10::IValue& module, const std::vector<std::string>& path) {
  const c10::IValue v = attribute_value(module, path);
  return v.isTensor() ? v.toTensor() : at::Tensor();
}

}  // namespace

std::optional<Tensors> run_segmented(const Call& call, const torch::jit::Module& target, const Tensors& args,
                                     Code fallback) {
  if (!segmenting_programs() || !c10::GradMode::is_enabled()) return std::nullopt;
  bool any_grad = false, on_meta = false;
  c10::Device device = c10::Device(c10::kCPU);
  for (const at::Tensor& a : args) {
    if (!a.defined()) continue;
    any_grad = any_grad || a.requires_grad();
    on_meta = on_meta || a.is_meta();
    if (a.device().type() != c10::kCPU && !a.is_meta()) device = a.device();
  }
  if (!any_grad) return std::nullopt;
  std::shared_ptr<const CallSegments> segments;
  try {
    segments = call_segments(call, target, args);
  } catch (const std::exception&) {
    segments = nullptr;  // (the call runs whole)
  }
  if (!segments) return std::nullopt;

  Tensors state;  // that require grad: every segment's backward sends them theirs
  for (size_t i = call.n_inputs; i < args.size(); ++i)
    if (args[i].defined() && args[i].requires_grad()) state.push_back(args[i]);
  // How many segments read each (none where the plan says another op reads them too: the
  // segments' backward then adds into none of their .grad, see segment_gradients).
  std::vector<size_t> readers(state.size(), 0);
  std::vector<std::unordered_set<size_t>> reads(segments->segments.size());
  if (segmented_programs_add_into_leaves()) {
    std::unordered_map<const c10::TensorImpl*, size_t> position;
    for (size_t i = 0; i < state.size(); ++i) position.emplace(state[i].unsafeGetTensorImpl(), i);
    for (size_t s = 0; s < segments->segments.size(); ++s)
      for (const std::vector<std::string>& path : segments->segments[s].reads) {
        const at::Tensor t = attribute_at(target._ivalue(), path);
        const auto found = t.defined() ? position.find(t.unsafeGetTensorImpl()) : position.end();
        if (found != position.end() && reads[s].insert(found->second).second) ++readers[found->second];
      }
  }
  // Copies of what the forward writes in place, before it does: the second runs read them.
  std::unordered_map<const c10::TensorImpl*, at::Tensor> copies;
  for (const std::vector<std::string>& path : segments->written) {
    const at::Tensor t = attribute_at(target._ivalue(), path);
    if (t.defined()) copies.emplace(t.unsafeGetTensorImpl(), t.clone());
  }
  const c10::IValue again = copies.empty() ? target._ivalue() : twin(call.module, target, [&](const at::Tensor& t) {
                                                                  const auto found =
                                                                      copies.find(t.unsafeGetTensorImpl());
                                                                  return found == copies.end() ? t : found->second;
                                                                })._ivalue();
  std::unordered_map<const JitValue*, c10::IValue> values;
  {
    const std::vector<c10::IValue> arguments = forward_arguments(call, target, args);
    const auto& inputs = segments->graph->inputs();
    for (size_t i = 1; i < inputs.size() && i - 1 < arguments.size(); ++i) values[inputs[i]] = arguments[i - 1];
  }
  as_call(call, fallback, [&] {
    const torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
    for (size_t s = 0; s < segments->segments.size(); ++s) {
      const CallSegment& segment = segments->segments[s];
      auto node = compat::make_autograd_node<SegmentBackward>();
      node->segments = segments;
      node->index = s;
      node->module = again;
      node->device = device;
      node->call_name = call.name;
      node->pass = current_fused_pass();
      if (!on_meta) node->random_states = RandomScope(device).states();
      std::vector<c10::IValue> stack{target._ivalue()};
      Tensors edges;
      for (const JitValue* in : segment.inputs) {
        const c10::IValue& v = values.at(in);
        const bool grad = v.isTensor() && v.toTensor().defined() && v.toTensor().requires_grad();
        node->needs_grad.push_back(grad);
        node->inputs.push_back(grad ? c10::IValue(v.toTensor().detach()) : v);
        if (grad) edges.push_back(v.toTensor());
        stack.push_back(v);
      }
      {
        const c10::NoGradGuard no_grad;
        run_segment(segment, stack);
      }
      if (stack.size() != segment.outputs.size())
        fail(Code::Internal, "module " + call.name + ": a segment gave another number of values");
      bool differentiable = !edges.empty() || !state.empty();
      for (const at::Tensor& t : state) edges.push_back(t);
      node->state = state;
      for (size_t i = 0; i < state.size(); ++i) node->state_here.push_back(readers[i] == 1 && reads[s].count(i) > 0);
      if (differentiable) node->set_next_edges(torch::autograd::collect_next_edges(edges));
      for (size_t j = 0; j < stack.size(); ++j) {
        c10::IValue out = std::move(stack[j]);
        if (differentiable && out.isTensor()) out = segment_result(out.toTensor(), compat::AutogradNodeRef(node));
        values[segment.outputs[j]] = std::move(out);
      }
    }
  });
  Tensors results;
  for (const JitValue* r : segments->results) {
    const c10::IValue* v = r ? &values.at(r) : nullptr;
    results.push_back(v && v->isTensor() ? v->toTensor() : at::Tensor());
  }
  return results;
}

}  // namespace koila::module_detail
