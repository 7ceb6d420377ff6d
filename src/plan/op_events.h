// The top-level operators of a run on this thread, as they end: the aten ops of a forward and
// the autograd functions of a backward (LibTorch's RecordFunction, thread-local callbacks),
// each told to a listener once with a readable name ("aten::conv2d",
// "ConvolutionBackward0"). Ops that run inside another are part of it. The memory timeline
// (timeline.h) follows runs so; the calibration op by op (estimate.cpp) follows only the ops
// inside module calls so, which cost a first plan far less: the graph's own ops as the
// executor runs them, backwards through hooks on their autograd functions (BackwardOps).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace koila {

// One top-level op of a run as the calibration follows it: a key made of its phase, its name
// and how many ops of that name and phase came before it in its chunk (so that the ops of a
// probe and of a run in chunks of another size find each other), and the bytes held during
// it (`peak`) and after it (`live`), beyond what was in use when the run started.
struct OpPoint {
  uint64_t key = 0;
  uint64_t peak = 0;
  uint64_t live = 0;
  // LibTorch's AccumulateGrad: adds a gradient into .grad (or makes it the .grad), the same
  // work on meta tensors as on a device's, so that what a probe held beyond its simulation
  // before it is still held after it.
  bool accumulates = false;
};

class OpListener {
 public:
  virtual ~OpListener() = default;
  // Whether ops are followed now (ops that start while not are not told).
  virtual bool listening() const = 0;
  // A top-level op ended, named `name` followed by `suffix` (koila's autograd functions:
  // "FusedConvolution" and "Backward"; otherwise empty), views valid during the call;
  // `backward`: it is an autograd function of a backward.
  virtual void op_ended(std::string_view name, std::string_view suffix, bool backward) = 0;
};

// Tells `listener` of this thread's top-level ops while it lives. Nests (the inner recording
// is told while it lives). Autograd's device threads (CUDA) are not followed: their ops are
// not told.
class OpRecording {
 public:
  // `paused`: as if pause() were called at once.
  explicit OpRecording(OpListener& listener, bool paused = false);
  ~OpRecording();
  OpRecording(const OpRecording&) = delete;
  OpRecording& operator=(const OpRecording&) = delete;

  // Stops following until resume(), between ops (a backward followed by BackwardOps
  // instead): while a thread-local callback exists, autograd's engine rebuilds LibTorch's
  // callback lists for every function it runs, and LibTorch records every op nested in
  // one. An inner recording's callbacks are its outer one's: they stay, and only the
  // listener's listening() keeps it from being told.
  void pause();
  void resume();

  struct State {
    OpListener* listener = nullptr;
    int depth = 0;   // ops open on this thread (only the outermost is told)
    int inner = -1;  // inside a recomputed segment's backward: the depth of the ops it runs (told too)
  };

 private:
  State state_;
  State* outer_;
  uint64_t handle_ = 0;  // the callbacks' (0: the outer recording's serve, or paused)
  bool paused_ = false;
};

// Follows the autograd functions of a backward without RecordFunction: a hook before each
// function that the backward from `outputs` can reach tells `listener` that the function
// before it ended (op_ended, `backward` true, named as LibTorch names it); the last is told
// by finish(). What happens between two functions (the engine's additions of their
// gradients) is part of the earlier one, as with RecordFunction. The hooks are removed at
// finish() (and at destruction, where nothing is told): the leaves' AccumulateGrad
// functions outlive a run. Functions on autograd's device threads are told on those
// threads: for the CPU only.
class BackwardOps {
 public:
  explicit BackwardOps(OpListener& listener);
  ~BackwardOps();
  BackwardOps(const BackwardOps&) = delete;
  BackwardOps& operator=(const BackwardOps&) = delete;

  // Hooks every function the backward from `outputs` can reach (finishing the backward
  // before, if any).
  void start(const std::vector<at::Tensor>& outputs);
  // The last function that ran ended; the hooks are removed.
  void finish();

  // From the hooks: `function` is about to run.
  void function_starts(const torch::autograd::Node& function);

 private:
  void end_running();  // tells the function running that it ended
  void remove_hooks();

  OpListener& listener_;
  struct Hooked;  // the functions hooked (weak references)
  std::unique_ptr<Hooked> hooked_;
  std::string running_;  // the function running (its name; empty: none)
};

}  // namespace koila
