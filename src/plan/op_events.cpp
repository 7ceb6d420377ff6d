#include "plan/op_events.h"

#include <ATen/record_function.h>

#include <cstring>

namespace koila {

namespace {

constexpr const char* kBackwardPrefix = "autograd::engine::evaluate_function: ";

// A C++ autograd function's node is named after its class
// ("torch::autograd::CppNode<koila::(anonymous namespace)::FusedLinear>"): shown as the
// class's own name with "Backward" ("FusedLinearBackward"), as LibTorch names its nodes.
std::string readable(std::string name) {
  const size_t open = name.find("CppNode<");
  const size_t close = name.rfind('>');
  if (open == std::string::npos || close == std::string::npos || close < open) return name;
  std::string inner = name.substr(open + 8, close - open - 8);
  const size_t colon = inner.rfind("::");
  if (colon != std::string::npos) inner = inner.substr(colon + 2);
  return inner + "Backward";
}

thread_local OpRecording::State* recording_here = nullptr;

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) {
  OpRecording::State* s = recording_here;
  if (s && s->listener->listening()) ++s->depth;
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  OpRecording::State* s = recording_here;
  if (!s || !s->listener->listening() || --s->depth > 0) return;
  s->depth = 0;
  std::string name = fn.name();
  bool backward = false;
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION || name.rfind(kBackwardPrefix, 0) == 0) {
    backward = true;
    if (name.rfind(kBackwardPrefix, 0) == 0) name = name.substr(std::strlen(kBackwardPrefix));
    name = readable(std::move(name));
  }
  try {
    s->listener->op_ended(std::move(name), backward);
  } catch (...) {
    // LibTorch only logs what a callback throws; a missing op shows in what follows it.
  }
}

}  // namespace

OpRecording::OpRecording(OpListener& listener) : state_{&listener, 0}, outer_(recording_here) {
  if (!outer_)  // an inner recording uses the outer one's callbacks
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                             .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  recording_here = &state_;
}

OpRecording::~OpRecording() {
  recording_here = outer_;
  if (handle_) at::removeCallback(handle_);
}

}  // namespace koila
