// Weight gradients added straight into .grad (issue 28, item 2). A pass whose gradients go
// into the leaves' .grad (a committed run, or a probe that puts them back: GradientTarget in
// chunked_run.cpp) runs linear layers through fused_linear (an unsplit pass of one linear
// layer only when its weight has 1 MiB or more), and convolutions through fused_convolution
// when it is split. When the backward reaches such a layer while its weight already has a .grad
// (every chunk after the first, or a .grad zeroed in place), the weight gradient is added
// into that .grad by the matrix product itself (addmm_) instead of being made as a fresh
// tensor that AccumulateGrad then adds: a split run holds no weight-sized temporary per
// layer on top of the gradients, so splitting pays for models whose large fully connected
// layers dominate. Where the weight has no .grad yet
// (the first chunk), the gradient is made and handed to AccumulateGrad as LibTorch does,
// which keeps it as the .grad without a copy.
//
// The same code runs in the planner's simulations on meta tensors (the stand-ins' meta .grad
// take the additions), so what is estimated is what runs. Gradients equal the unfused ones
// up to float rounding (one addition inside the product rather than after it).
//
// Not fused (the gradient goes through AccumulateGrad as before): passes whose gradients are
// computed whole and added afterwards (a .grad holding earlier gradients before an unsplit
// backward, probes, the tail after a reduction), a backward that records a graph
// (create_graph), and weights whose .grad is not a plain dense tensor of the weight's shape,
// dtype and device. Hooks registered on a fused weight see no gradient of that layer.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace koila {

// One pass that may fuse. While a Forward scope of it lives, linear layers run on this
// thread record the pass; while a Backward scope lives, their backward (on whichever thread
// autograd runs it) adds into .grad. `on` false: a pass that fuses nothing.
class GradFusion {
 public:
  // `split`: the pass runs in several chunks (convolutions fuse only there, see
  // fused_convolution). `several_linear`: the pass runs more than one linear layer (an
  // unsplit pass fuses a small one only then, see fused_linear).
  GradFusion(bool on, bool split, bool several_linear = true);
  GradFusion(const GradFusion&) = delete;
  GradFusion& operator=(const GradFusion&) = delete;

  class Forward {
   public:
    explicit Forward(const GradFusion& fusion);
    ~Forward();
    Forward(const Forward&) = delete;
    Forward& operator=(const Forward&) = delete;

   private:
    uint64_t previous_;
    bool previous_split_;
    bool previous_small_fused_;
  };

  class Backward {
   public:
    explicit Backward(const GradFusion& fusion);
    ~Backward();
    Backward(const Backward&) = delete;
    Backward& operator=(const Backward&) = delete;

   private:
    uint64_t id_;
  };

 private:
  uint64_t id_;  // 0: off
  bool split_;
  bool small_fused_;  // linear layers under 1 MiB fuse too
};

// The pass of the Forward scope this thread is in (none: session 0), and a scope that runs in it
// again: a recomputed segment's second run, inside the backward, fuses its layers as the first
// run would have without recomputation (module/segmented_call.h).
struct FusedPass {
  uint64_t session = 0;
  bool split = false, small_fused = false;
};
FusedPass current_fused_pass();
class FusedPassAgain {
 public:
  explicit FusedPassAgain(const FusedPass& pass);
  ~FusedPassAgain();
  FusedPassAgain(const FusedPassAgain&) = delete;
  FusedPassAgain& operator=(const FusedPassAgain&) = delete;

 private:
  FusedPass previous_;
};

// at::linear; inside a Forward scope, with grad mode on and a weight that is a leaf
// requiring grad, with an autograd node of koila's ("FusedLinearWithBiasBackward",
// "FusedLinearBackward") whose backward fuses as described above; in an unsplit pass that
// runs no other linear layer (GradFusion's `several_linear`) only for a weight of 1 MiB or
// more (a smaller weight's temporary is small, and fusing one small layer saves no time).
at::Tensor fused_linear(const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& bias);

// at::conv1d, conv2d or conv3d (by the weight's rank); inside a Forward scope of a split
// pass, with grad mode on, a batched input, groups 1 and a weight that is a leaf requiring
// grad, through an autograd function whose backward adds the weight gradient into its .grad
// when it exists: ATen has no convolution that adds into a tensor, so weights of 1 MiB or
// more are added in 8 slices of their output channels, each slice's gradient made and added
// (the temporary is an eighth of the weight, for as many more calls of the weight-gradient
// kernel). Only split passes take this path, which costs those calls: an unsplit backward
// into a zeroed .grad keeps LibTorch's convolution.
at::Tensor fused_convolution(const at::Tensor& input, const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups);

// How many weight gradients were added straight into .grad so far in this process (tests).
uint64_t fused_weight_gradients();

namespace testing {
// Turns fusion off (false) for the passes that start afterwards, or on again (the default):
// benchmarks compare the two in one process. Records of graphs planned before keep what
// they measured (forget them: plan/memo.h).
void set_grad_fusion(bool on);
}  // namespace testing

}  // namespace koila
