#include "graph/graph.h"

#include <c10/core/GradMode.h>
#include <algorithm>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "base/error.h"
#include "base/random_scope.h"
#include "base/text.h"
#include "graph/batch_rules.h"
#include "graph/meta_kernels.h"

namespace koila {

at::Tensor meta_tensor(const Meta& meta) {
  return at::empty(meta.shape, at::TensorOptions().dtype(meta.dtype).device(at::kMeta));
}

Meta meta_of(const at::Tensor& t) {
  Meta m;
  m.shape = t.sizes().vec();
  m.dtype = t.scalar_type();
  if (!t.is_meta()) m.device = t.device();
  return m;
}

namespace {

// A device as one number, for structure keys.
uint64_t device_code(const c10::Device& d) {
  return static_cast<uint64_t>(d.type()) * 1000 + static_cast<uint64_t>(d.index() + 1);
}

// Hashes what building fixed of the node's own structure (see Node::key).
void seal(Node& node) {
  StructureKey& key = node.key;
  key.add(static_cast<uint64_t>(node.kind));
  key.add(node.op);
  key.add(node.signature);
  key.add(node.couples);
  key.add(static_cast<uint64_t>(node.reduction));
  key.add(static_cast<uint64_t>(node.result + 1));
  key.add(node.run_all ? 1 : 0);
  const Meta& m = node.meta;
  key.add(m.shape.size());
  for (int64_t d : m.shape) key.add(static_cast<uint64_t>(d));
  key.add(static_cast<uint64_t>(m.dtype));
  key.add(device_code(m.device));
  key.add(static_cast<uint64_t>(m.batch_dim + 1));
  key.add(node.inputs.size());
}

}  // namespace

NodePtr make_constant(at::Tensor value) {
  auto node = std::make_shared<Node>();
  node->kind = NodeKind::Constant;
  node->op = "constant";
  node->meta = meta_of(value);
  node->value = std::move(value);
  seal(*node);
  return node;
}

NodePtr make_input(at::Tensor value, int64_t batch_dim) {
  auto node = std::make_shared<Node>();
  node->kind = NodeKind::Input;
  node->op = "input";
  node->meta = meta_of(value);
  node->meta.batch_dim = batch_dim;
  node->meta.from_batch = batch_dim >= 0;
  node->value = std::move(value);
  seal(*node);
  return node;
}

std::string describe_inputs(const std::vector<NodePtr>& inputs) {
  std::ostringstream os;
  bool first = true;
  for (const NodePtr& in : inputs) {
    if (!in) continue;
    os << (first ? "" : ", ") << shape_string(in->meta.shape) << ' ' << dtype_name(in->meta.dtype);
    first = false;
  }
  return os.str();
}

std::string describe_inputs(const Node& node) {
  if (node.shown_inputs >= node.inputs.size()) return describe_inputs(node.inputs);
  return describe_inputs(std::vector<NodePtr>(node.inputs.begin(), node.inputs.begin() + node.shown_inputs));
}

namespace {

Meta infer_on_meta(const OpSpec& spec, const std::vector<const Meta*>& in, const Node& self) {
  Tensors tensors;
  tensors.reserve(in.size());
  for (const Meta* m : in) tensors.push_back(m ? meta_tensor(*m) : at::Tensor());
  return meta_of(spec.run(tensors, self));
}

c10::Device common_device(const std::vector<NodePtr>& inputs) {
  const Node* first = nullptr;
  for (const NodePtr& in : inputs) {
    if (!in) continue;
    if (!first) {
      first = in.get();
    } else if (in->meta.device != first->meta.device) {
      fail(Code::Device,
           "inputs are on different devices (" + first->meta.device.str() + " and " + in->meta.device.str() + ")");
    }
  }
  if (!first) fail(Code::InvalidArgument, "no input tensor");
  return first->meta.device;
}

std::vector<int64_t> probe_shape(size_t rank) {
  std::vector<int64_t> shape(rank, 1);
  for (size_t i = 0; i < std::min<size_t>(rank, 8); ++i) shape[i] = 2;
  return shape;
}

// Runs the op once on small tensors of ones with the inputs' ranks, dtypes and device (the
// random generators' states put back after it), remembering the verdict for each combination.
// Sizes are 2 (in at most 8 dims), not 1: some kernels skip their dtype dispatch when a reduced
// dim has size 1.
// Keyed by a hash of (op, each input's dtype and rank, device), which every op build makes:
// text keys cost more than the rest of building a small op. (Were two keys to collide, a
// missing kernel would be found when the op runs instead of when it is built.)

void probe_kernel(const OpSpec& spec, const std::vector<NodePtr>& inputs, const Node& self) {
  StructureKey key;
  key.add(self.op);
  for (const NodePtr& in : inputs)
    key.add(in ? (static_cast<uint64_t>(in->meta.dtype) << 32) + in->meta.shape.size() + 1 : 0);
  key.add(device_code(self.meta.device));  // the inputs' (build() checked that they agree)
  static std::mutex mutex;
  static std::unordered_map<StructureKey, std::string, StructureKeyHash> verdicts;  // empty: the kernel runs
  std::lock_guard<std::mutex> lock(mutex);
  auto found = verdicts.find(key);
  if (found == verdicts.end()) {
    Tensors ones;
    for (const NodePtr& in : inputs)
      ones.push_back(in ? at::ones(probe_shape(in->meta.shape.size()),
                                   at::TensorOptions().dtype(in->meta.dtype).device(in->meta.device))
                        : at::Tensor());
    std::string verdict;
    try {
      c10::NoGradGuard no_grad;
      // A random op (dropout) draws here: the generators the caller seeds are put back, so
      // that the first build of an op draws nothing a seeded run would.
      const RandomScope random(self.meta.device);
      spec.run(ones, self);
    } catch (const c10::Error& e) {
      verdict = e.what_without_backtrace();
    }
    found = verdicts.emplace(key, verdict).first;
  }
  if (!found->second.empty()) fail(Code::Dtype, "inputs " + describe_inputs(inputs) + ": " + found->second);
}

}  // namespace

NodePtr build(OpSpec spec, const std::vector<NodePtr>& inputs) {
  ensure_meta_kernels();
  auto node = std::make_shared<Node>();
  node->op = spec.name;
  node->run = spec.run;
  node->run_all = std::move(spec.run_all);
  node->result = spec.result;
  node->inputs = inputs;
  node->shown_inputs = spec.shown_inputs;
  node->signature = spec.signature;
  node->mutates_state = spec.mutates_state;
  node->runs_program = spec.runs_program;
  node->linear_layers = spec.linear_layers;
  node->stats_counters = std::move(spec.stats_counters);
  node->stats_buffers = std::move(spec.stats_buffers);
  const c10::Device device = common_device(inputs);

  std::vector<const Meta*> metas;
  metas.reserve(inputs.size());
  bool any_lazy = false, any_batch = false, any_batched = false, any_reduced = false;
  for (const NodePtr& in : inputs) {
    metas.push_back(in ? &in->meta : nullptr);
    if (!in) continue;
    any_lazy |= in->lazy();
    any_batch |= in->meta.from_batch;
    any_batched |= in->meta.batch_dim >= 0;
    any_reduced |= in->meta.from_batch && in->meta.batch_dim < 0;
  }

  try {
    node->meta = spec.infer ? spec.infer(metas, *node) : infer_on_meta(spec, metas, *node);
  } catch (const Error&) {
    throw;
  } catch (const c10::Error&) {
    rethrow_torch_error("inputs " + describe_inputs(*node), Code::Shape);
  } catch (const std::exception& e) {  // a few LibTorch shape checks throw std::runtime_error
    fail(Code::Shape, "inputs " + describe_inputs(*node) + ": " + e.what());
  }
  node->meta.device = device;
  if (spec.probe_kernel && any_lazy) probe_kernel(spec, inputs, *node);

  if (any_batch) {
    // Batch rules decide where a batch dim goes, so they run only when an input still
    // carries one. A value computed from the batch after a reduction ended it (a loss, a
    // mean over the batch) has no batch dim left to place: its results stay unbatched,
    // and combining chunks of it is the reduction's business.
    BatchResult r;
    if (any_batched) r = spec.batch ? spec.batch(metas, node->meta) : batch::elementwise(metas, node->meta);
    if (any_batched && any_reduced && r.couples.empty())
      r = batch::couple("combines a result reduced over the batch with batched data");
    node->meta.batch_dim = r.batch_dim;
    node->meta.from_batch = true;
    node->couples = std::move(r.couples);
    if (node->couples.empty()) node->stats_couples = std::move(r.stats_couples);
    node->reduction = r.reduction;
    if (r.reduction == BatchReduction::Mean)
      node->mean_count =
          spec.mean_count ? spec.mean_count : [](const Tensors& args) { return static_cast<double>(args[0].numel()); };
  }

  if (any_lazy) {
    seal(*node);
    return node;
  }

  // Every input is concrete: compute now, as eager LibTorch would (recording autograd).
  Tensors values;
  values.reserve(inputs.size());
  for (const NodePtr& in : inputs) values.push_back(in ? in->value : at::Tensor());
  at::Tensor result;
  try {
    result = spec.run(values, *node);
  } catch (const c10::Error&) {
    rethrow_torch_error("inputs " + describe_inputs(*node), Code::InvalidArgument);
  }
  if (result.sizes() != at::IntArrayRef(node->meta.shape) || result.scalar_type() != node->meta.dtype)
    fail(Code::Internal, std::string(spec.name) + " computed " + shape_string(result.sizes()) + " " +
                             dtype_name(result.scalar_type()) + " but inferred " + shape_string(node->meta.shape) +
                             " " + dtype_name(node->meta.dtype));
  return make_constant(std::move(result));
}

}  // namespace koila
