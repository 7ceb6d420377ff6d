// The top-level operators of a run on this thread, as they end: the aten ops of a forward and
// the autograd functions of a backward (LibTorch's RecordFunction, thread-local callbacks),
// each told to a listener once with a readable name ("aten::conv2d",
// "ConvolutionBackward0"). Ops that run inside another are part of it. The memory timeline
// (timeline.h) and the calibration op by op (estimate.cpp) both follow runs so.
#pragma once

#include <cstdint>
#include <string>

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
  // A top-level op ended; `backward`: it is an autograd function of a backward.
  virtual void op_ended(std::string name, bool backward) = 0;
};

// Tells `listener` of this thread's top-level ops while it lives. Nests (the inner recording
// is told while it lives). Autograd's device threads (CUDA) are not followed: their ops are
// not told.
class OpRecording {
 public:
  explicit OpRecording(OpListener& listener);
  ~OpRecording();
  OpRecording(const OpRecording&) = delete;
  OpRecording& operator=(const OpRecording&) = delete;

  struct State {
    OpListener* listener = nullptr;
    int depth = 0;  // ops open on this thread (only the outermost is told)
  };

 private:
  State state_;
  State* outer_;
  uint64_t handle_ = 0;  // the callbacks' (0: the outer recording's serve)
};

}  // namespace koila
