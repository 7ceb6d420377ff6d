// Recomputation (issue 51): a segment of a lazy graph whose forward keeps nothing that autograd
// would save inside it, and whose backward runs the segment again, with autograd, from the inputs
// it kept, then differentiates that. What the segment's ops save for their backward (activations,
// masks) lives only while its backward runs, at the price of running its forward twice. A
// RecomputePlan makes segments of ranges of a run's schedule (the planner chooses them:
// plan/recompute_choice.h) and a schedule that runs them (NodeGroup, executor.h).
//
// Exact: the second run draws the same random numbers as the first (the generators its device
// can draw from are set to their states when the first began, and put back after), so dropout
// masks and stochastic depth replay; on the CPU, whose kernels are deterministic, the gradients
// equal those of the segment run once with autograd, bit for bit. Ops that change state in place
// (batch norm's running statistics, a module's buffers) change it in the first run only: the
// second runs on copies of that state taken before the first, so it sees what the first saw and
// changes nothing. The same code runs on meta tensors, for the planner's simulations (nothing is
// drawn there).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/edge.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/libtorch_compat.h"
#include "graph/graph.h"
#include "run/executor.h"

namespace koila {

// A segment: `outputs` computed from the values of `inputs`, nodes outside it (every node that
// `outputs` reach and that is not computed inside the segment: the values it starts from, the
// parameters it uses, and its leaves). Every op node between them is the segment's.
struct RecomputeSegment {
  std::vector<const Node*> inputs;
  std::vector<const Node*> outputs;
  // Per input (or none: all false): a leaf that no op outside the segment reads, whose gradient
  // its backward adds into the .grad directly where the backward around does (segment_gradients).
  std::vector<bool> only_here;
};

// The nodes a segment computes (between `inputs` and `outputs`); fails with
// Code::InvalidArgument where `outputs` reach a leaf that is not among `inputs`.
std::vector<const Node*> segment_ops(const RecomputeSegment& segment);

// The values of the segment's outputs from `input_values` (one for each input, in order). Under
// grad mode, where some input requires grad, each output's history is one autograd node that
// keeps the inputs and the random generators' states and, in the backward, runs the segment again
// to differentiate it; nothing else of the segment is kept. `options`: as the evaluation around
// it (its chunk, its leaves); `given` and `reached_leaves` are the segment's own. The backward
// runs with the same options: what their functions refer to (a simulation's stand-ins, an
// observer) must outlive it, as they do in a chunk whose backward follows its forward.
Tensors run_recomputed(const RecomputeSegment& segment, const Tensors& input_values, const EvalOptions& options);

// `out` as the next result of `node`, an autograd node that runs a segment again: a tensor of
// its own (not a view, not an input's tensor) whose history is `node`; an undefined or
// non-differentiable `out` is kept as it is, and takes its place among `node`'s inputs as none.
at::Tensor segment_result(at::Tensor out, const compat::AutogradNodeRef& node);

// What a run recomputes: ranges of the op nodes of a schedule's order (the run's: the whole
// graph's, or its boundaries' when it is split), each a segment whose inputs are what its ops
// read from before it (earlier ops' values and leaves) and whose outputs are its values read after
// it (or roots). `schedule` runs the same roots with every segment recomputed.
struct RecomputePlan {
  const Schedule* base = nullptr;                 // the schedule it replaces (not owned)
  std::vector<std::pair<size_t, size_t>> ranges;  // positions in base->order, first and last, in order
  std::vector<RecomputeSegment> segments;
  std::vector<NodeGroup> groups;  // one per segment (run_recomputed)
  Schedule schedule;
  // Of one chunk (`chunk` samples; the batch when unsplit): bytes of the values its segments'
  // ops compute that are not outputs and that autograd would have kept (freed in the forward,
  // computed again in the backward), and
  // the forward's cost of their ops (recompute_cost) against the whole forward's.
  // With inside_programs, freed_bytes counts what the programs' own segments free too (found
  // by the planner's simulation: Estimator::freed_inside_programs).
  int64_t chunk = -1;
  uint64_t freed_bytes = 0;
  double recomputed_cost = 0, forward_cost = 0;
  size_t recomputed_ops = 0;
  // Module calls and exported programs (runs_program ops) run in segments of their own graph
  // (module/segmented_call.h): a whole-model call's backward then holds one segment's
  // activations, not the model's. Set where recomputing koila's ops alone does not fit.
  bool inside_programs = false;
  size_t segmented_programs = 0;       // those programs
  bool programs_share_leaves = false;  // a leaf they read is read by another op too
  // What the segments' ops are, for descriptions: "koila_linear x4, koila_relu x4, ...".
  std::string summary() const;
  // The ranges, hashed (a structure's record keeps figures by it, plan/memo.h).
  uint64_t key() const;
};

// The plan recomputing `ranges` of `base` (see RecomputePlan), for chunks of `chunk` samples
// (`batch` when unsplit). Ranges must be ordered and disjoint; those without an op are dropped.
// `saved` (when not empty): for each position of `base`, the bytes autograd saves of its value,
// which is what freeing it frees (RecomputePlan::freed_bytes); else every value's bytes count.
// `programs_freed`: with `inside_programs`, what the programs' segments free (added to
// RecomputePlan::freed_bytes).
std::shared_ptr<const RecomputePlan> make_recompute_plan(const Schedule& base,
                                                         std::vector<std::pair<size_t, size_t>> ranges, int64_t chunk,
                                                         const std::vector<double>& saved = {},
                                                         bool inside_programs = false, uint64_t programs_freed = 0);

// Whether this thread is running a segment's backward (RecomputeBackward), and within it, the
// segment's forward again: the memory timeline shows the ops inside (plan/op_events.h), and marks
// those of the forward run again as recomputed.
bool in_recompute_backward();
bool recomputing();

// Marks this thread, while it lives, as running a recomputed segment's backward (a
// RecomputeBackward here, a module call's SegmentBackward in module/segmented_call.cpp).
class InRecomputeBackward {
 public:
  InRecomputeBackward();
  ~InRecomputeBackward();
  InRecomputeBackward(const InRecomputeBackward&) = delete;
  InRecomputeBackward& operator=(const InRecomputeBackward&) = delete;
};
// Marks, while it lives, the segment's forward run again inside its backward (recomputing()).
class RunningAgain {
 public:
  RunningAgain();
  ~RunningAgain();
  RunningAgain(const RunningAgain&) = delete;
  RunningAgain& operator=(const RunningAgain&) = delete;

 private:
  bool previous_;
};

// A segment's input as its backward runs the segment again on it, where the gradient that reaches
// it is taken rather than added into a .grad: `x` detached, with a history of its own whose
// function keeps that gradient (segment_gradients returns it, as it arrives: its strides too).
at::Tensor gradient_taking(const at::Tensor& x);

// A segment's backward, once it has run the segment again: from `roots` with `grad_outputs`, the
// gradients of `wrt` (undefined where unreached), each gradient_taking's or an autograd leaf of the
// run itself (a parameter). Where every such leaf has `into_leaves[j]`, their gradients are added
// into their .grad as they are made and come back undefined (else every gradient comes back,
// LibTorch's autograd having no backward that both adds into a leaf and returns another's): a
// segment's backward then holds none of its
// parameters' gradients until its end (one chunk after another: a weight-sized temporary per
// layer), and fused layers (kernels/fused_grads.h) add into .grad inside it as outside. That is
// for the caller to allow only where the backward around adds into every leaf
// (backward_accumulates_into_leaves()) and no other op reads the leaf (the order in which its
// gradient's parts add up stays the run's without recomputation: bit for bit on the CPU).
Tensors segment_gradients(const std::vector<torch::autograd::Edge>& roots, const Tensors& grad_outputs,
                          const Tensors& wrt, const std::vector<bool>& into_leaves);

// Whether the backward running on this thread adds into every leaf it reaches (a committed run's
// torch::autograd::backward), rather than returning the gradients of some (a probe's, or a run's
// into a .grad that holds earlier gradients: torch::autograd::grad).
bool backward_accumulates_into_leaves();

// Whether module calls and programs run now segment their own graph (RecomputePlan::
// inside_programs): set by a run's forward that recomputes so, and by a segment's backward run
// again from one.
// `into_leaves`: the programs' parameters are read by no other op of the run, so that a segment's
// backward may add their gradients into .grad as it makes them (segment_gradients).
bool segmenting_programs();
bool segmented_programs_add_into_leaves();
class SegmentingPrograms {
 public:
  explicit SegmentingPrograms(bool on, bool into_leaves = false);
  ~SegmentingPrograms();
  SegmentingPrograms(const SegmentingPrograms&) = delete;
  SegmentingPrograms& operator=(const SegmentingPrograms&) = delete;

 private:
  bool previous_, previous_into_leaves_;
};

// For each position of `schedule`, the last position that reads its value (a root: the order's
// size; a value nobody reads: 0).
std::vector<size_t> last_reads(const Schedule& schedule);

// The bytes of `node`'s value in a chunk of `chunk` samples (-1: the whole batch).
uint64_t value_bytes(const Node& node, int64_t chunk);
// A rough count of the arithmetic of `node`'s op in a chunk of `chunk` samples: its result's
// elements, times what each sums over for products (linear layers, convolutions, matrix
// products: the reduced dimension, read from its weight or its first input).
double forward_cost(const Node& node, int64_t chunk);

}  // namespace koila
