#include "plan/op_events.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include <algorithm>

#include "base/libtorch_compat.h"
#include "base/pointer_index.h"
#include "run/recompute.h"

namespace koila {

namespace {

constexpr std::string_view kBackwardPrefix = "autograd::engine::evaluate_function: ";

// A C++ autograd function's node is named after its class
// ("torch::autograd::CppNode<koila::(anonymous namespace)::FusedConvolution>"): read as the
// class's own name ("FusedConvolution"), with `suffix` "Backward" to add, as LibTorch names
// its nodes. A view of `name`. (Nodes written as LibTorch writes its own, as koila's fused
// linear backward is, name themselves.)
std::string_view readable(std::string_view name, std::string_view* suffix) {
  const size_t open = name.find("CppNode<");
  const size_t close = name.rfind('>');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return name;
  std::string_view inner = name.substr(open + 8, close - open - 8);
  const size_t colon = inner.rfind("::");
  if (colon != std::string_view::npos) inner = inner.substr(colon + 2);
  *suffix = "Backward";
  return inner;
}

thread_local OpRecording::State* recording_here = nullptr;

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) {
  OpRecording::State* s = recording_here;
  if (!s || !s->listener->listening()) return nullptr;
  if (s->inner < 0 && in_recompute_backward()) s->inner = s->depth;
  ++s->depth;
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  OpRecording::State* s = recording_here;
  if (!s || !s->listener->listening()) return;
  // Top-level ops, and inside a recomputed segment's backward (one top-level function) the ops
  // it runs: the segment's forward again, then its backward.
  --s->depth;
  if (s->depth < s->inner) s->inner = -1;  // the segment's backward ended
  if (s->depth > 0 && s->depth != s->inner) return;
  if (s->depth < 0) s->depth = 0;
  // Read in place: the calibration follows every op of several runs in a first plan.
  std::string_view name(fn.name()), suffix;
  bool backward = false;
  const bool prefixed = name.substr(0, kBackwardPrefix.size()) == kBackwardPrefix;
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION || prefixed) {
    backward = true;
    if (prefixed) name.remove_prefix(kBackwardPrefix.size());
    name = readable(name, &suffix);
  }
  try {
    s->listener->op_ended(name, suffix, backward);
  } catch (...) {
    // LibTorch only logs what a callback throws; a missing op shows in what follows it.
  }
}

at::CallbackHandle add_callbacks() {
  return at::addThreadLocalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                        .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

// A weak reference to an autograd function, as the LibTorch of the build holds them
// (compat::AutogradNodeRef: std::shared_ptr in 1.13, c10::intrusive_ptr in 2.14).
template <class Strong>
struct WeakOf;
template <class T>
struct WeakOf<std::shared_ptr<T>> {
  using type = std::weak_ptr<T>;
};
template <class T>
struct WeakOf<c10::intrusive_ptr<T>> {
  using type = c10::weak_intrusive_ptr<T>;
};
using FunctionRef = compat::AutogradNodeRef;
using WeakFunction = WeakOf<FunctionRef>::type;

// Before each function of a followed backward (BackwardOps): returns the gradients as they
// came (a copy of the list, which the engine puts in place of its own).
struct FunctionStarts : torch::autograd::FunctionPreHook {
  FunctionStarts(BackwardOps* owner, const torch::autograd::Node* function) : owner(owner), function(function) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    owner->function_starts(*function);
    return grads;
  }
  BackwardOps* owner;
  const torch::autograd::Node* function;  // the node that holds this hook
};

}  // namespace

struct BackwardOps::Hooked {
  std::vector<WeakFunction> functions;
};

OpRecording::OpRecording(OpListener& listener, bool paused)
    : state_{&listener, 0}, outer_(recording_here), paused_(paused && !outer_) {
  if (!outer_ && !paused_) handle_ = add_callbacks();  // an inner recording uses the outer one's callbacks
  recording_here = &state_;
}

void OpRecording::pause() {
  if (paused_ || outer_) return;
  paused_ = true;
  at::removeCallback(handle_);
  handle_ = 0;
}

void OpRecording::resume() {
  if (!paused_) return;
  paused_ = false;
  handle_ = add_callbacks();
}

OpRecording::~OpRecording() {
  recording_here = outer_;
  if (handle_) at::removeCallback(handle_);
}

BackwardOps::BackwardOps(OpListener& listener) : listener_(listener), hooked_(std::make_unique<Hooked>()) {}

BackwardOps::~BackwardOps() { remove_hooks(); }

void BackwardOps::start(const std::vector<at::Tensor>& outputs) {
  finish();
  std::vector<const FunctionRef*> stack;     // (held by the graph)
  PointerIndex<torch::autograd::Node> seen;  // (as autograd_leaves walks the same graph)
  for (const at::Tensor& out : outputs)
    if (out.defined() && out.grad_fn()) stack.push_back(&out.grad_fn());
  while (!stack.empty()) {
    const FunctionRef& fn = *stack.back();
    stack.pop_back();
    if (!seen.insert(fn.get(), 0)) continue;
    fn->add_pre_hook(std::make_unique<FunctionStarts>(this, fn.get()));
    hooked_->functions.emplace_back(fn);
    for (const torch::autograd::Edge& e : fn->next_edges())
      if (e.function) stack.push_back(&e.function);
  }
}

void BackwardOps::function_starts(const torch::autograd::Node& function) {
  end_running();
  running_ = function.name();
}

void BackwardOps::finish() {
  end_running();
  remove_hooks();
}

void BackwardOps::end_running() {
  if (running_.empty()) return;
  std::string_view suffix;
  const std::string_view name = readable(running_, &suffix);
  try {
    listener_.op_ended(name, suffix, /*backward=*/true);
  } catch (...) {
    // As for RecordFunction's callbacks: a missing op shows in what follows it.
  }
  running_.clear();
}

void BackwardOps::remove_hooks() {
  for (const WeakFunction& weak : hooked_->functions) {
    const FunctionRef fn = weak.lock();
    if (!fn) continue;
    auto& hooks = fn->pre_hooks();
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(),
                               [this](const std::unique_ptr<torch::autograd::FunctionPreHook>& h) {
                                 const auto* mine = dynamic_cast<const FunctionStarts*>(h.get());
                                 return mine && mine->owner == this;
                               }),
                hooks.end());
  }
  hooked_->functions.clear();
}

}  // namespace koila
