// The lazy graph. A node is (op, attributes captured by its run function, inputs) plus
// everything inferred about its result when it was built: shape, dtype, device, where the
// batch dim went, and whether the op mixes samples across the batch. Nodes hold their
// inputs, never their users, so a tensor keeps alive exactly the recipe it needs.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/structure_key.h"

namespace koila {

struct Node;
using NodePtr = std::shared_ptr<const Node>;
using Tensors = std::vector<at::Tensor>;

// How an op that ends the batch combines across chunks.
enum class BatchReduction { None, Sum, Mean, Max, Min };

// What is known about a value without computing it.
struct Meta {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  c10::Device device = c10::Device(c10::kCPU);
  int64_t batch_dim = -1;   // dim of this value that carries the batch; -1: none
  bool from_batch = false;  // depends on batched data (also after a reduction ended the batch)
  int64_t batch_size() const { return batch_dim >= 0 ? shape[batch_dim] : -1; }
};

// Where the batch goes through one op.
struct BatchResult {
  int64_t batch_dim = -1;
  std::string couples;  // non-empty: the op mixes samples; says how
  // Non-empty (with couples empty): the op mixes samples only through batch statistics
  // (batch norm in training), which BatchStats::PerChunk lets each chunk compute for
  // itself; the batch dim goes on as batch_dim says. Says how.
  std::string stats_couples;
  BatchReduction reduction = BatchReduction::None;
};

using RunFn = std::function<at::Tensor(const Tensors& inputs, const Node& self)>;
// An op with several results (a module whose forward returns a tuple, a list or a dict):
// all of them, undefined where there is none (see Node::run_all).
using RunAllFn = std::function<Tensors(const Tensors& inputs, const Node& self)>;
using BatchRule = std::function<BatchResult(const std::vector<const Meta*>& in, const Meta& out)>;
// For an op that averages over the batch: how many elements one evaluation averaged over,
// from the arguments it ran on (e.g. the targets that are not ignored). Chunks of a mean
// combine weighted by it.
using CountFn = std::function<double(const Tensors& args)>;

enum class NodeKind {
  Constant,  // a concrete tensor (parameters, data, results of eager ops)
  Input,     // a lazy wrapper around a concrete tensor, possibly batched
  Op,        // a deferred operation
};

struct Node {
  // The fields every evaluation and plan reads of every node come first, so that a pass
  // over a graph touches as few cache lines of each node as it can (LibTorch's own work
  // between two passes evicts them); what only some ops use follows.
  NodeKind kind = NodeKind::Op;
  BatchReduction reduction = BatchReduction::None;
  bool mutates_state = false;  // see OpSpec::mutates_state
  bool runs_program = false;   // see OpSpec::runs_program
  uint32_t linear_layers = 0;  // see OpSpec::linear_layers
  // A result node: its one input is a node with `run_all`, and its value is that node's
  // result number `result`, which the evaluation keeps for it. -1: not a result node.
  int64_t result = -1;
  std::vector<NodePtr> inputs;
  Meta meta;
  at::Tensor value;  // Constant and Input nodes: the tensor (shared, not copied)
  // What building fixed of this node's own structure (kind, op, signature, coupling,
  // reduction, shape, dtype, device, batch dim, number of inputs), hashed once when it is
  // built; a plan combines the keys of a graph's nodes with which node feeds which
  // (plan/memo.h) to find what it knows of graphs built the same way.
  StructureKey key;
  RunFn run;  // Op nodes: how to compute the value from the inputs
  // Ops with several results: how an evaluation computes them all, once (`run` is then
  // used only when the node is computed at once). The node's own value is its first
  // defined result; result nodes (`result` above) take the others.
  RunAllFn run_all;
  std::string couples;             // non-empty when this op mixes samples across the batch
  std::string stats_couples;       // see BatchResult::stats_couples
  std::string op;                  // "koila_add"; for leaves "constant" / "input"
  Tensors stats_counters;          // see OpSpec::stats_counters
  Tensors stats_buffers;           // see OpSpec::stats_buffers
  CountFn mean_count;              // set when reduction is Mean
  size_t shown_inputs = SIZE_MAX;  // error messages describe only the first inputs (a module
                                   // call's parameters are inputs too, but not the caller's)
  std::string signature;           // see OpSpec::signature

  bool lazy() const { return kind != NodeKind::Constant; }
};

// The description of one operator call: everything koila needs to know about the op in
// one place. Each operator's entry point fills one in and hands it to build().
// Shape and dtype come from running `run` on meta tensors, which computes nothing (see
// meta_kernels.h for the ops LibTorch lacks meta kernels for).
struct OpSpec {
  const char* name = nullptr;
  RunFn run = {};
  // See Node::run_all and Node::result.
  RunAllFn run_all = {};
  int64_t result = -1;
  // Where the batch goes; when empty, the elementwise (broadcasting) rule.
  BatchRule batch = {};
  // Meta kernels check shapes, not whether a kernel exists for these dtypes on this device
  // (Half on CPU, bool for abs, ...). Ops whose arguments stay valid for any sizes of the
  // same rank set this, and build() runs them once per (op, dtypes, device) on tensors of
  // ones, so that a missing kernel is a Code::Dtype from the building call.
  bool probe_kernel = false;
  // For ops that can average over the batch (see CountFn); default: all elements of input 0.
  CountFn mean_count = {};
  // Infers the result's shape and dtype instead of running `run` on meta tensors (for ops
  // that need more than that, e.g. a TorchScript module call). Throws koila::Error.
  std::function<Meta(const std::vector<const Meta*>& in, const Node& self)> infer = {};
  // How many inputs error messages describe (default: all).
  size_t shown_inputs = SIZE_MAX;
  // What else, beyond the op's name, its inputs and the shapes, changes the memory it needs
  // (a training flag): graphs that differ only there are planned apart (see plan/memo.h).
  std::string signature = {};
  // The op may change concrete inputs that do not require grad in place (batch norm's
  // running statistics): the planner's real probes run it on copies of them.
  bool mutates_state = false;
  // The op runs a program of many LibTorch ops (a module call): the calibration of
  // estimates follows those one by one (plan/estimate.cpp), not the node as one op.
  bool runs_program = false;
  // How many linear layers the op runs (koila_linear: 1; a module call: the linear calls of
  // its program): a pass fuses small linear layers only where it runs more than one
  // (fused_grads.h).
  uint32_t linear_layers = 0;
  // Counters the op increments before each batch norm it runs (a module's
  // num_batches_tracked): chunks with their own batch statistics restore them between
  // chunks (batch_stats.h).
  Tensors stats_counters = {};
  // The running statistics the op's batch norms in training update in place: a failed run
  // restores them (batch_stats.h).
  Tensors stats_buffers = {};
};

NodePtr make_constant(at::Tensor value);
NodePtr make_input(at::Tensor value, int64_t batch_dim);

// Validates and builds an op: infers shape and dtype (failing with a message that names
// the op and the shapes), tracks the batch, and computes the value at once when no input
// is lazy. Optional inputs are NULL in `inputs` and reach `run` as undefined tensors.
NodePtr build(OpSpec spec, const std::vector<NodePtr>& inputs);

// A meta (shape-only) tensor for a Meta.
at::Tensor meta_tensor(const Meta& meta);

// Reads a Meta off a real or meta tensor (batch fields unset).
Meta meta_of(const at::Tensor& t);

std::string describe_inputs(const std::vector<NodePtr>& inputs);
// The inputs of an op node as its error messages show them (see Node::shown_inputs).
std::string describe_inputs(const Node& node);

}  // namespace koila
