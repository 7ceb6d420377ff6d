// Running a graph: evaluating lazy tensors (whole or one chunk of the batch) and the
// autograd pieces the planner assembles into a backward pass.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <unordered_map>

#include "graph/graph.h"

namespace koila {

// What an evaluation did, for tests and the planner.
struct EvalStats {
  size_t ops_run = 0;
  size_t peak_live_values = 0;  // most intermediate results held at once
};

struct EvalOptions {
  bool grad = false;        // record autograd (for backward)
  int64_t chunk_start = 0;  // with chunk_length >= 0: evaluate only these samples of the batch
  int64_t chunk_length = -1;
  EvalStats* stats = nullptr;  // filled in when given
  // Values to use for these nodes instead of computing them (their inputs are not visited).
  const std::unordered_map<const Node*, at::Tensor>* given = nullptr;
  // The value of a Constant or Input node before any narrowing (default: the node's tensor).
  // The planner's simulation passes meta stand-ins here.
  std::function<at::Tensor(const Node&)> leaf;
  // Called before each op runs, and after it with the arguments it ran on and its result.
  std::function<void(const Node&)> op_starts;
  std::function<void(const Node&, const Tensors& args, const at::Tensor& value)> observe;
  // With `grad`, when given: filled with the leaves whose .grad a backward from the roots
  // would fill, in the order reached, found as the evaluation goes instead of by a walk over
  // the autograd graph afterwards (autograd_leaves), which costs a pass over every autograd
  // node. A Constant or Input node's value that requires grad is reached when an op that
  // uses it gives a result that requires grad; when that value has autograd history (a
  // chunk's narrowing, an eager result), the leaves behind it are. One difference from
  // autograd_leaves: an op's input that requires grad counts as reached whenever the op's
  // result does, also when the op does not differentiate it (a parameter a module leaves
  // unused); a backward leaves such a leaf's .grad as it is. Not with `given`.
  Tensors* reached_leaves = nullptr;
};

// Nodes computed together, by one function, from the values of `inputs` (recomputed segments:
// run/recompute.h): an evaluation whose schedule has the group computes its outputs with `run`
// when it reaches the first of them, and the nodes between are not visited. Every input must
// come before that first output in the schedule's order (a contiguous range of an order, whose
// inputs precede it, is such a group).
struct NodeGroup {
  std::vector<const Node*> inputs;
  std::vector<const Node*> outputs;
  std::function<Tensors(const Tensors& inputs, const EvalOptions& options)> run;
};

// How to evaluate a set of roots, worked out once (a graph run in chunks, or every step,
// evaluates the same roots again): the nodes the roots depend on in topological order (each
// after its inputs, the roots themselves included), where each op's inputs sit in it, and how many users each value has
// (a root counts one more, it is kept).
struct Schedule {
  std::vector<const Node*> order;
  std::vector<size_t> input_start;  // order.size() + 1 offsets into `inputs`
  std::vector<int64_t> inputs;      // positions in `order`; -1: an absent optional input
  std::vector<uint32_t> uses;
  std::vector<size_t> roots;  // positions in `order`
  bool with_given = false;    // made for EvalOptions::given (those nodes' inputs left out)
  // Made with groups: for each position, the group whose output it is (its inputs are the
  // group's), or -1; empty without groups. The groups must outlive the schedule.
  std::vector<int32_t> group_at;
  const std::vector<NodeGroup>* groups = nullptr;
};
// Nodes in `given` count as leaves (see EvalOptions::given); the schedule serves only
// evaluations with those given values.
// With `groups`: their outputs are computed by them (see NodeGroup).
Schedule make_schedule(const std::vector<const Node*>& roots,
                       const std::unordered_map<const Node*, at::Tensor>* given = nullptr,
                       const std::vector<NodeGroup>* groups = nullptr);

// Evaluates `roots` against the current values of their inputs. Each intermediate is released
// as soon as its last user has run; the roots are kept.
Tensors evaluate(const std::vector<const Node*>& roots, const EvalOptions& options);
// The same with a schedule made before; `options.given` only if the schedule was made with
// the same `given`.
Tensors evaluate(const Schedule& schedule, const EvalOptions& options);
Tensors evaluate(const std::vector<NodePtr>& roots, const EvalOptions& options);
at::Tensor evaluate(const NodePtr& root, const EvalOptions& options = {});

// The tensors whose .grad a backward from `outputs` would fill (AccumulateGrad leaves,
// also those behind concrete non-leaf tensors).
Tensors autograd_leaves(const Tensors& outputs);

// d(sum of outputs[i] * grad_outputs[i]) / d leaves; undefined where a leaf is unused.
// An empty grad_outputs means ones. `retain_graph` keeps the autograd graph for another
// backward (see reaches_eager_history). A failed backward releases at once what LibTorch
// would hold until the thread's next backward.
Tensors gradients(const Tensors& outputs, const Tensors& grad_outputs, const Tensors& leaves,
                  bool retain_graph = false);

// Whether a backward through `nodes` walks autograd history that was recorded eagerly: a
// concrete tensor computed from parameters (p * p built from concrete tensors only). That
// history belongs to the caller's tensors and every backward of a lazy loss walks it again,
// so such a backward must retain it; otherwise the graph is freed as backward goes, which
// keeps the peak low.
bool reaches_eager_history(const std::vector<const Node*>& nodes);

// Backward from `outputs` (weighted by grad_outputs, as for gradients()) that adds into the
// .grad of every leaf they reach, which `leaves` must be (autograd_leaves of `outputs`, or
// of outputs of the same graph over another chunk), each gradient as soon as autograd has it (the
// chunk's gradients are never all held at once). A failed backward releases at once what
// LibTorch would hold; the .grad it reached are left as they are (the caller restores them).
void accumulate_gradients(const Tensors& outputs, const Tensors& grad_outputs, const Tensors& leaves,
                          bool retain_graph = false);

// How a tensor's .grad stands before a backward: absent, all zeros (as zero_grad leaves it),
// or holding anything else (also when that cannot be read: meta or sparse gradients).
enum class GradStart { Absent, Zero, Held };
GradStart grad_start(const at::Tensor& t);

// A gradient that may be kept and added into in place: `grad` itself when it owns dense
// memory laid out like `leaf`, else a dense copy. Autograd often hands back views instead
// (an expanded ones for a sum, whose elements share one location; a slice of a buffer).
at::Tensor owned_gradient(const at::Tensor& grad, const at::Tensor& leaf);

// Adds grads into the leaves' .grad (setting it when there is none). Never fails halfway
// for valid input: call it only once every gradient has been computed.
void commit_gradients(const Tensors& leaves, const Tensors& grads);

}  // namespace koila
