#include "module/call_segments.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "kernels/batch_stats.h"
#include "module/call.h"
#include "module/twin.h"

namespace koila::module_detail {

namespace {

using JitNode = torch::jit::Node;
using JitValue = torch::jit::Value;

// The forward's graph, its top-level nodes and where each value is made and last read.
struct Layout {
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<JitNode*> nodes;
  std::unordered_map<const JitNode*, size_t> position;
  JitValue* self = nullptr;
  // Values read again in each segment rather than crossing: the module, its attributes, constants.
  std::unordered_set<const JitValue*> rederived;
};

// The top-level node that `user` is (or sits inside); the graph's return: nodes.size().
size_t top_position(const Layout& l, JitNode* user) {
  while (user->owningBlock() != l.graph->block()) user = user->owningBlock()->owningNode();
  if (user == l.graph->return_node()) return l.nodes.size();
  return l.position.at(user);
}

// -1 for the graph's inputs.
int64_t made_at(const Layout& l, const JitValue* v) {
  if (v->node()->kind() == c10::prim::Param) return -1;
  return static_cast<int64_t>(l.position.at(v->node()));
}

// Whether `type` holds no tensor and nothing mutable beyond lists of plain values.
bool plain_type(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::NoneType:
    case c10::TypeKind::StringType:
    case c10::TypeKind::DeviceObjType:
    case c10::TypeKind::NumberType: return true;
    default: break;
  }
  if (const auto list = type->cast<c10::ListType>()) return plain_type(list->getElementType());
  if (const auto optional = type->cast<c10::OptionalType>()) return plain_type(optional->getElementType());
  if (const auto tuple = type->cast<c10::TupleType>()) {
    for (const c10::TypePtr& element : tuple->elements())
      if (!plain_type(element)) return false;
    return true;
  }
  return false;
}

bool tensor_type(const c10::TypePtr& type) { return type->kind() == c10::TypeKind::TensorType; }

// Whether a node after `v` is made may write `v` (or a view of it) in place.
bool may_be_written(const JitValue* v, int depth = 0) {
  if (depth > 8) return true;
  for (const torch::jit::Use& use : v->uses()) {
    const JitNode* user = use.user;
    if (!user->blocks().empty()) return true;  // carried into a loop or a branch: not followed
    const c10::FunctionSchema* schema = user->maybeSchema();
    if (!schema) {
      // prim ops (list and tuple construction, unpacking) pass values on: follow them.
      for (const JitValue* out : user->outputs())
        if (may_be_written(out, depth + 1)) return true;
      continue;
    }
    if (use.offset >= schema->arguments().size()) return true;  // (varargs)
    const auto* alias = schema->arguments()[use.offset].alias_info();
    if (!alias) continue;
    if (alias->isWrite()) return true;
    for (const JitValue* out : user->outputs())  // a view of it
      if (may_be_written(out, depth + 1)) return true;
  }
  return false;
}

// The attribute path of `v` from the module `self` ({} when it is not one).
bool attribute_path(const JitValue* self, const JitValue* v, std::vector<std::string>& path) {
  if (v == self) return true;
  const JitNode* n = v->node();
  if (n->kind() != c10::prim::GetAttr) return false;
  if (!attribute_path(self, n->input(0), path)) return false;
  path.push_back(n->s(c10::attr::name));
  return true;
}

// The values the forward's result flattens to, as results.h flattens it: tuples, lists and dicts
// built in the graph, followed to their tensors.
bool result_values(const JitValue* v, std::vector<JitValue*>& out) {
  const JitNode* n = v->node();
  if (tensor_type(v->type())) {
    out.push_back(const_cast<JitValue*>(v));
    return true;
  }
  if (v->type()->kind() == c10::TypeKind::NoneType) {
    out.push_back(nullptr);
    return true;
  }
  if (n->kind() == c10::prim::TupleConstruct || n->kind() == c10::prim::ListConstruct) {
    for (const JitValue* in : n->inputs())
      if (!result_values(in, out)) return false;
    return true;
  }
  if (n->kind() == c10::prim::DictConstruct) {
    for (size_t i = 1; i < n->inputs().size(); i += 2)
      if (!result_values(n->input(i), out)) return false;
    return true;
  }
  return false;
}

uint64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(t.element_size()) : 0;
}

at::Tensor on_meta(const at::Tensor& t) {
  if (!t.defined()) return t;
  return at::empty(t.sizes(), t.options().device(c10::kMeta));
}

// The bytes each top-level node makes (its tensor results that are not views of what exists),
// from one run of a copy of the graph returning every one of them, on meta tensors.
std::optional<std::vector<uint64_t>> measure(const Call& call, const torch::jit::Module& target, const Tensors& args,
                                             const Layout& l,
                                             std::unordered_map<const JitValue*, uint64_t>& value_bytes) {
  std::unordered_map<JitValue*, JitValue*> copies;
  auto copy = std::make_shared<torch::jit::Graph>();
  for (JitValue* in : l.graph->inputs()) copies[in] = copy->addInput()->setType(in->type());
  std::vector<std::pair<size_t, JitValue*>> measured;  // (position, value of the original)
  for (size_t i = 0; i < l.nodes.size(); ++i) {
    JitNode* c = copy->createClone(l.nodes[i], [&](JitValue* v) { return copies.at(v); });
    copy->insertNode(c);
    for (size_t k = 0; k < c->outputs().size(); ++k) {
      copies[l.nodes[i]->output(k)] = c->output(k);
      if (tensor_type(c->output(k)->type())) measured.emplace_back(i, l.nodes[i]->output(k));
    }
  }
  if (measured.empty()) return std::nullopt;
  std::vector<JitValue*> outs;
  for (const auto& [i, v] : measured) outs.push_back(copies.at(v));
  copy->registerOutput(copy->insertNode(copy->createTuple(outs))->output());
  Tensors meta_args(args.size());
  std::unordered_map<const c10::TensorImpl*, at::Tensor> stand_in;
  for (size_t i = 0; i < args.size(); ++i) {
    meta_args[i] = args[i].defined() && !args[i].is_meta() ? on_meta(args[i]) : args[i];
    if (args[i].defined()) stand_in[args[i].unsafeGetTensorImpl()] = meta_args[i];
  }
  const torch::jit::Module meta = twin(call.module, target, [&](const at::Tensor& t) {
    const auto found = stand_in.find(t.unsafeGetTensorImpl());
    return found != stand_in.end() ? found->second : t.defined() && !t.is_meta() ? on_meta(t) : t;
  });
  std::vector<c10::IValue> stack = forward_arguments(call, meta, meta_args);
  stack.insert(stack.begin(), meta._ivalue());
  try {
    const c10::NoGradGuard no_grad;
    const UnobservedStats unobserved;
    const torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
    torch::jit::GraphFunction function("koila_measure", copy, nullptr);
    function.run(stack);
  } catch (const std::exception&) {
    return std::nullopt;  // (meta tensors cannot run it: the call runs whole)
  }
  if (stack.size() != 1 || !stack[0].isTuple()) return std::nullopt;
  const std::vector<c10::IValue> values = stack[0].toTupleRef().elements().vec();
  stack = values;
  if (stack.size() != measured.size()) return std::nullopt;
  // What a value makes is the memory under it that did not exist before: a view of an earlier
  // value makes nothing, a view of a new buffer (a linear layer's result over 3-d inputs,
  // reshaped from its matrix product) makes that buffer.
  const auto under = [](const at::Tensor& t) -> std::pair<const void*, uint64_t> {
    if (t.has_storage() && t.storage().unsafeGetStorageImpl())
      return {t.storage().unsafeGetStorageImpl(), static_cast<uint64_t>(t.storage().nbytes())};
    return {t.unsafeGetTensorImpl(), tensor_bytes(t)};
  };
  std::vector<uint64_t> made(l.nodes.size(), 0);
  std::unordered_set<const void*> counted;
  for (const at::Tensor& a : meta_args)
    if (a.defined()) counted.insert(under(a).first);
  for (size_t k = 0; k < measured.size(); ++k) {
    if (!stack[k].isTensor()) continue;
    const at::Tensor t = stack[k].toTensor();
    if (!t.defined()) continue;
    value_bytes[measured[k].second] = tensor_bytes(t);
    const auto [memory, bytes] = under(t);
    if (counted.insert(memory).second) made[measured[k].first] += bytes;
  }
  return made;
}

// The cut after each node where one is allowed, and the values crossing it.
struct Cuts {
  std::vector<bool> allowed;                           // after node i
  std::vector<std::vector<const JitValue*>> crossing;  // at each allowed cut
};

Cuts allowed_cuts(const Layout& l) {
  const size_t n = l.nodes.size();
  Cuts cuts;
  cuts.allowed.assign(n, true);
  cuts.crossing.assign(n, {});
  if (n > 0) cuts.allowed[n - 1] = false;  // (the end)
  const auto consider = [&](const JitValue* v) {
    if (l.rederived.count(v)) return;
    size_t last = 0;
    bool used = false;
    for (const torch::jit::Use& use : v->uses()) {
      last = std::max(last, top_position(l, use.user));
      used = true;
    }
    if (!used) return;
    const int64_t made = made_at(l, v);
    const size_t from = made < 0 ? 0 : static_cast<size_t>(made);
    if (last == 0 || from >= last) return;
    const bool ok = (tensor_type(v->type()) || plain_type(v->type())) && !may_be_written(v);
    // Crossing every cut from its making to its last reader (a graph input, from the start: the
    // segments that read it take it as an input; it may not be written either).
    for (size_t c = from; c < last && c < n; ++c) {
      if (!ok) cuts.allowed[c] = false;
      if (made >= 0) cuts.crossing[c].push_back(v);
    }
  };
  for (size_t i = 1; i < l.graph->inputs().size(); ++i) {
    const JitValue* in = l.graph->inputs()[i];
    if (!(tensor_type(in->type()) || plain_type(in->type())) || may_be_written(in))
      return Cuts{std::vector<bool>(n, false), {}};
  }
  for (const JitNode* node : l.nodes)
    for (const JitValue* out : node->outputs()) consider(out);
  return cuts;
}

// Chen et al.'s greedy: segments of at most `most` bytes made, cut where allowed.
std::vector<size_t> greedy(const Cuts& cuts, const std::vector<uint64_t>& made, double most) {
  std::vector<size_t> chosen;
  uint64_t in_segment = 0;
  for (size_t i = 0; i < made.size(); ++i) {
    in_segment += made[i];
    const bool last = i + 1 == made.size();
    const bool next_overflows = !last && static_cast<double>(in_segment + made[i + 1]) > most;
    if (!last && cuts.allowed[i] && next_overflows) {
      chosen.push_back(i);
      in_segment = 0;
    }
  }
  return chosen;
}

// The timeline model of a call's cuts. The backward runs the segments in reverse: while a
// segment's backward runs, the values kept at the cuts up to its start are held (the inputs of
// the segments before it, and its own), and it makes its values again with their gradients
// (about twice what it makes); the segments after it are done. A set of cuts' modelled peak is
// the most of those. The greedy's own model (kept values plus twice the largest segment) counts
// every kept value against the largest segment, which a CNN's first segments, its largest, never
// meet: they run last, with little kept before them.
class CutTimeline {
 public:
  CutTimeline(const Layout& l, const Cuts& cuts, const std::vector<uint64_t>& made,
              const std::unordered_map<const JitValue*, uint64_t>& value_bytes)
      : n_(made.size()), made_before_(made.size() + 1, 0), crossing_(made.size()) {
    for (size_t i = 0; i < n_; ++i) made_before_[i + 1] = made_before_[i] + made[i];
    for (size_t c = 0; c < n_; ++c) {
      if (!cuts.allowed[c]) continue;
      allowed_.push_back(c);
      std::vector<std::pair<size_t, uint64_t>>& at = crossing_[c];
      for (const JitValue* v : cuts.crossing[c]) {
        const auto found = value_bytes.find(v);
        at.emplace_back(static_cast<size_t>(made_at(l, v)), found == value_bytes.end() ? 0 : found->second);
      }
      std::sort(at.begin(), at.end());
      for (size_t k = at.size(); k-- > 1;) at[k - 1].second += at[k].second;  // (suffix sums)
    }
  }

  // The modelled peak of cutting after each node of `chosen` (ascending).
  double peak(const std::vector<size_t>& chosen) const {
    double kept = 0, most = 0;
    int64_t from = -1;
    for (size_t k = 0; k <= chosen.size(); ++k) {
      const size_t to = k < chosen.size() ? chosen[k] : n_ - 1;
      most = std::max(most, kept + 2.0 * made_in(from, to));
      if (k < chosen.size()) kept += static_cast<double>(new_at(to, from));
      from = static_cast<int64_t>(to);
    }
    return most;
  }

  // The cuts of the least modelled peak (to 1%), by bisection on the peak; empty where no cut
  // lowers it or the graph has too many cuts to search.
  std::vector<size_t> least() const {
    const size_t m = allowed_.size();
    if (m == 0 || m > kMostCuts) return {};
    double lo = 0, hi = peak({});
    std::vector<size_t> best;
    for (int step = 0; step < 40 && hi - lo > hi / 128; ++step) {
      const double mid = lo + (hi - lo) / 2;
      std::optional<std::vector<size_t>> found = within(mid);
      if (found) {
        hi = mid;
        best = std::move(*found);
      } else {
        lo = mid;
      }
    }
    return best;
  }

 private:
  static constexpr size_t kMostCuts = 4096;  // (the search takes their square, each bisection step)

  // Bytes made by the nodes after `from` (-1: the start) up to `to`.
  double made_in(int64_t from, size_t to) const {
    return static_cast<double>(made_before_[to + 1] - made_before_[static_cast<size_t>(from + 1)]);
  }
  // Bytes kept at cut `to` that a segment starting after cut `from` made: the values crossing
  // it made after `from` (those made before cross `from` too, and are kept there).
  uint64_t new_at(size_t to, int64_t from) const {
    const std::vector<std::pair<size_t, uint64_t>>& at = crossing_[to];
    const auto first = std::upper_bound(
        at.begin(), at.end(), from,
        [](int64_t f, const std::pair<size_t, uint64_t>& e) { return f < static_cast<int64_t>(e.first); });
    return first == at.end() ? 0 : first->second;
  }

  // Cuts under which every segment's modelled peak is at most `room`, nullopt where none are.
  // What is kept grows with each cut by what depends on that cut and the one before only, so the
  // least kept at each cut (over the cuts before it) is all a later segment needs to know.
  std::optional<std::vector<size_t>> within(double room) const {
    constexpr double kNone = std::numeric_limits<double>::infinity();
    const size_t m = allowed_.size();
    std::vector<double> kept(m, kNone);  // the least kept after cutting at allowed_[k]
    std::vector<int64_t> from(m, -1);    // the cut before it (-1: the start)
    const auto fits = [&](double before, int64_t start, size_t to) {
      return before + 2.0 * made_in(start, to) <= room;
    };
    if (fits(0, -1, n_ - 1)) return std::vector<size_t>{};  // (no cut needed)
    for (size_t k = 0; k < m; ++k) {
      const size_t to = allowed_[k];
      if (fits(0, -1, to)) {
        kept[k] = static_cast<double>(new_at(to, -1));
        from[k] = -1;
      }
      for (size_t j = 0; j < k; ++j) {
        if (kept[j] == kNone) continue;
        const auto start = static_cast<int64_t>(allowed_[j]);
        if (!fits(kept[j], start, to)) continue;
        const double after = kept[j] + static_cast<double>(new_at(to, start));
        if (after < kept[k]) {
          kept[k] = after;
          from[k] = static_cast<int64_t>(j);
        }
      }
    }
    // The last segment, to the end.
    int64_t last = -2;  // (none yet)
    double least = kNone;
    for (size_t k = 0; k < m; ++k)
      if (kept[k] != kNone && fits(kept[k], static_cast<int64_t>(allowed_[k]), n_ - 1) && kept[k] < least) {
        least = kept[k];
        last = static_cast<int64_t>(k);
      }
    if (last == -2) return std::nullopt;
    std::vector<size_t> chosen;
    for (int64_t k = last; k >= 0; k = from[static_cast<size_t>(k)]) chosen.push_back(allowed_[static_cast<size_t>(k)]);
    std::reverse(chosen.begin(), chosen.end());
    return chosen;
  }

  size_t n_;
  std::vector<uint64_t> made_before_;
  std::vector<std::vector<std::pair<size_t, uint64_t>>> crossing_;  // (made at, bytes from here on)
  std::vector<size_t> allowed_;
};

Layout layout_of(const std::shared_ptr<torch::jit::Graph>& graph) {
  Layout l;
  l.graph = graph;
  for (JitNode* n : graph->block()->nodes()) {
    l.position[n] = l.nodes.size();
    l.nodes.push_back(n);
  }
  l.self = graph->inputs().empty() ? nullptr : graph->inputs()[0];
  if (l.self) l.rederived.insert(l.self);
  for (JitNode* n : l.nodes) {
    const bool constant = n->kind() == c10::prim::Constant;
    const bool attribute = n->kind() == c10::prim::GetAttr && l.rederived.count(n->input(0));
    if (constant || attribute)
      for (const JitValue* out : n->outputs()) l.rederived.insert(out);
  }
  return l;
}

// Makes segment [first, last] of `l` a function: its rederived values made again inside it.
CallSegment make_segment(const Layout& l, size_t first, size_t last,
                         const std::unordered_set<const JitValue*>& wanted) {
  CallSegment s;
  auto g = std::make_shared<torch::jit::Graph>();
  std::unordered_map<JitValue*, JitValue*> inside;
  inside[l.self] = g->addInput()->setType(l.self->type());
  std::function<JitValue*(JitValue*)> map = [&](JitValue* v) -> JitValue* {
    const auto found = inside.find(v);
    if (found != inside.end()) return found->second;
    if (l.rederived.count(v)) {  // a constant or an attribute: made again here
      std::vector<std::string> path;
      if (v->node()->kind() == c10::prim::GetAttr && tensor_type(v->type()) && attribute_path(l.self, v, path))
        s.reads.push_back(std::move(path));
      JitNode* c = g->createClone(v->node(), map);
      g->insertNode(c);
      for (size_t k = 0; k < c->outputs().size(); ++k) inside[v->node()->output(k)] = c->output(k);
      return inside.at(v);
    }
    JitValue* input = g->addInput()->setType(v->type());
    s.inputs.push_back(v);
    inside[v] = input;
    return input;
  };
  for (size_t i = first; i <= last; ++i) {
    JitNode* original = l.nodes[i];
    if (original->kind() == c10::prim::Constant ||
        (original->kind() == c10::prim::GetAttr && l.rederived.count(original->output(0))))
      continue;  // made where used
    JitNode* c = g->createClone(original, map);
    g->insertNode(c);
    for (size_t k = 0; k < c->outputs().size(); ++k) inside[original->output(k)] = c->output(k);
  }
  std::vector<JitValue*> outs;
  for (size_t i = first; i <= last; ++i)
    for (JitValue* out : l.nodes[i]->outputs()) {
      if (l.rederived.count(out) || !wanted.count(out)) continue;
      s.outputs.push_back(out);
      outs.push_back(inside.at(out));
    }
  // (A function returns one value: a tuple of the segment's.)
  g->registerOutput(g->insertNode(g->createTuple(outs))->output());
  s.function = std::make_shared<torch::jit::GraphFunction>("koila_segment", g, nullptr);
  return s;
}

// The branches of `graph` (at any depth) whose condition is a bool attribute of the module: the
// attribute's path from the module (names, outermost first) and its value in `module`, for each.
struct Branch {
  JitNode* node;
  std::vector<std::string> path;
  bool value;
};
std::vector<Branch> attribute_branches(torch::jit::Graph& graph, const c10::IValue& module) {
  std::vector<Branch> out;
  if (graph.inputs().empty()) return out;
  const JitValue* self = graph.inputs()[0];
  std::function<void(torch::jit::Block*)> visit = [&](torch::jit::Block* block) {
    for (JitNode* n : block->nodes()) {
      for (torch::jit::Block* inner : n->blocks()) visit(inner);
      if (n->kind() != c10::prim::If || n->inputs().size() != 1) continue;
      std::vector<std::string> path;
      if (!attribute_path(self, n->input(0), path) || path.empty()) continue;
      const c10::IValue value = attribute_value(module, path);
      if (value.isBool()) out.push_back(Branch{n, std::move(path), value.toBool()});
    }
  };
  visit(graph.block());
  return out;
}

// A copy of the forward's graph with the branches that test a bool attribute of the module (a
// residual block's use_res_connect, a layer's training, densenet's memory_efficient) replaced by
// the side `target` takes: a branch is one top-level node, which no cut enters, so a model made
// of such blocks (torchvision's mobilenet_v2: 17 of its 18) was one segment per block at best.
// What runs is the same ops as the whole forward runs for this module.
std::shared_ptr<torch::jit::Graph> taken_branches(torch::jit::Graph& graph, const torch::jit::Module& target) {
  std::shared_ptr<torch::jit::Graph> copy = graph.copy();
  const std::vector<Branch> branches = attribute_branches(*copy, target._ivalue());
  if (branches.empty()) return copy;
  for (const Branch& b : branches) {
    const torch::jit::WithInsertPoint here(b.node);
    b.node->replaceInput(0, copy->insertConstant(b.value));
  }
  torch::jit::ConstantPropagationImmutableTypes(copy);  // (inlines the sides taken; drops the rest)
  return copy;
}

std::shared_ptr<const CallSegments> segments_of(const Call& call, const torch::jit::Module& target,
                                                const Tensors& args) {
  const std::shared_ptr<torch::jit::Graph> graph = taken_branches(*call.module.get_method("forward").graph(), target);
  const Layout l = layout_of(graph);
  if (!l.self || l.nodes.size() < 2 || graph->outputs().size() != 1) return nullptr;
  auto out = std::make_shared<CallSegments>();
  out->graph = graph;
  if (!result_values(graph->outputs()[0], out->results)) return nullptr;
  for (const JitValue* r : out->results)
    if (r && l.rederived.count(r)) return nullptr;  // (a parameter returned as it is)
  const Cuts cuts = allowed_cuts(l);
  if (std::none_of(cuts.allowed.begin(), cuts.allowed.end(), [](bool b) { return b; })) return nullptr;
  std::unordered_map<const JitValue*, uint64_t> value_bytes;
  const std::optional<std::vector<uint64_t>> made = measure(call, target, args, l, value_bytes);
  if (!made) return nullptr;
  uint64_t total = 0, biggest = 1;
  for (uint64_t b : *made) {
    total += b;
    biggest = std::max(biggest, b);
  }
  // The cuts with the least modelled peak in the timeline model: its own search's, or the
  // greedy's over a geometric series of segment sizes where one peaks lower.
  const CutTimeline timeline(l, cuts, *made, value_bytes);
  std::vector<size_t> best = timeline.least();
  double best_peak = best.empty() ? -1 : timeline.peak(best);
  for (double most = static_cast<double>(biggest); most <= 2.0 * static_cast<double>(total) + 1; most *= 1.25) {
    std::vector<size_t> chosen = greedy(cuts, *made, most);
    const double peak = timeline.peak(chosen);
    if (!chosen.empty() && (best_peak < 0 || peak < best_peak)) {
      best_peak = peak;
      best = std::move(chosen);
    }
  }
  if (best.empty()) return nullptr;
  // The values wanted out of a segment: those read by a later segment, and the results.
  std::unordered_set<const JitValue*> wanted(out->results.begin(), out->results.end());
  for (size_t c : best)
    for (const JitValue* v : cuts.crossing[c]) wanted.insert(v);
  size_t first = 0;
  best.push_back(l.nodes.size() - 1);
  for (size_t last : best) {
    out->segments.push_back(make_segment(l, first, last, wanted));
    first = last + 1;
  }
  // Tensors the forward writes in place (read from copies by the second run).
  std::set<std::vector<std::string>> written_paths;
  for (const JitNode* n : l.nodes) {
    std::vector<const JitValue*> candidates;
    if (n->kind() == c10::prim::GetAttr && tensor_type(n->output()->type()) && l.rederived.count(n->output()) &&
        may_be_written(n->output()))
      candidates.push_back(n->output());
    const std::string kind = n->kind().toQualString();
    if ((kind == "koila::batch_norm" || kind == "aten::batch_norm") && n->inputs().size() > 4) {
      candidates.push_back(n->input(3));
      candidates.push_back(n->input(4));
    }
    for (const JitValue* v : candidates) {
      std::vector<std::string> path;
      if (attribute_path(l.self, v, path) && !path.empty()) written_paths.insert(path);
    }
  }
  out->written.assign(written_paths.begin(), written_paths.end());
  return out;
}

}  // namespace

c10::IValue attribute_value(const c10::IValue& module, const std::vector<std::string>& path) {
  c10::IValue v = module;
  for (const std::string& name : path) {
    if (!v.isObject() || !v.toObjectRef().type()->hasAttribute(name)) return c10::IValue();
    v = v.toObjectRef().getAttr(name);
  }
  return v;
}

std::vector<c10::IValue> forward_arguments(const Call& call, const torch::jit::Module& target, const Tensors& args) {
  std::vector<c10::IValue> stack(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(call.n_inputs));
  stack.insert(stack.begin(), target._ivalue());
  call.module.get_method("forward").function().getSchema().checkAndNormalizeInputs(stack, {});
  stack.erase(stack.begin());
  return stack;
}

// The paths of the bool attributes that `graph`'s branches test (attribute_branches), found once
// per graph (a call segments every chunk of every step).
std::vector<std::vector<std::string>> branch_paths(const std::shared_ptr<torch::jit::Graph>& graph,
                                                   const torch::jit::Module& target) {
  struct Entry {
    std::shared_ptr<torch::jit::Graph> graph;  // (its address is the key)
    std::vector<std::vector<std::string>> paths;
  };
  static std::mutex mutex;
  static std::map<const torch::jit::Graph*, Entry> known;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto found = known.find(graph.get());
    if (found != known.end()) return found->second.paths;
  }
  Entry made{graph, {}};
  for (Branch& b : attribute_branches(*graph, target._ivalue())) made.paths.push_back(std::move(b.path));
  std::lock_guard<std::mutex> lock(mutex);
  return known.emplace(graph.get(), std::move(made)).first->second.paths;
}

std::shared_ptr<const CallSegments> call_segments(const Call& call, const torch::jit::Module& target,
                                                  const Tensors& args) {
  // By graph and the inputs' shapes and dtypes (the graph is kept alive by its entry).
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(call.module.get_method("forward").graph().get()));
  for (size_t i = 0; i < call.n_inputs && i < args.size(); ++i) {
    key += "|";
    if (!args[i].defined()) continue;
    key += std::string(c10::toString(args[i].scalar_type()));
    for (int64_t d : args[i].sizes()) key += "," + std::to_string(d);
  }
  // and by the sides its branches take (taken_branches; the graph fixes which branches).
  key += "|";
  for (const std::vector<std::string>& path : branch_paths(call.module.get_method("forward").graph(), target)) {
    const c10::IValue value = attribute_value(target._ivalue(), path);
    key += !value.isBool() ? '-' : value.toBool() ? '1' : '0';
  }
  struct Entry {
    std::shared_ptr<torch::jit::Graph> graph;  // (its address is in the key)
    std::shared_ptr<const CallSegments> segments;
  };
  static std::mutex mutex;
  static std::map<std::string, Entry> known;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto found = known.find(key);
    if (found != known.end()) return found->second.segments;
  }
  // On a thread of its own: the measuring run's meta tensors are not the simulation's that
  // calls this (meta_counter.h counts this thread's).
  Entry made{call.module.get_method("forward").graph(), nullptr};
  std::exception_ptr failure;
  std::thread([&] {
    try {
      made.segments = segments_of(call, target, args);
    } catch (...) {
      failure = std::current_exception();
    }
  }).join();
  if (failure) std::rethrow_exception(failure);
  std::lock_guard<std::mutex> lock(mutex);
  return known.emplace(key, std::move(made)).first->second.segments;
}

}  // namespace koila::module_detail
