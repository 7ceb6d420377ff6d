// Recurrent layers simulated as the CPU runs them (issue 28). LibTorch's lstm, gru, rnn_tanh
// and rnn_relu on the CPU project a layer's whole sequence through its input weights at
// once, one [steps, batch, gates x hidden] tensor held while the layer runs, where on any
// other device (the meta device included) each step projects its own input. A simulation
// on meta tensors of a run on the CPU missed that tensor: a 2-layer LSTM's training peak was
// estimated 14% short (measured with koila's allocator: 326 MiB at batch 512, 280 simulated).
//
// While a SimulatedDevice scope on this thread says the CPU, these ops on meta tensors that
// record gradients take the CPU's path, op for op (RNN.cpp's FullLayer and FullBidirectionalLayer with the input
// computed first, its cells, the stacking of outputs and final states), recording autograd
// as the CPU does. Elsewhere, and where the CPU itself holds what the composite holds (reads
// without gradients, measured) or takes another path (an LSTM that trains through oneDNN:
// without projections on PyTorch 2.x; a packed sequence), LibTorch's own composite runs, as
// before: for oneDNN's LSTM the calibration by real probes makes up what the simulation
// cannot show (its workspace).
#pragma once

#include <c10/core/Device.h>

namespace koila {

// The device a simulation on meta tensors stands for, on this thread, while it lives.
class SimulatedDevice {
 public:
  explicit SimulatedDevice(c10::Device device);
  ~SimulatedDevice();
  SimulatedDevice(const SimulatedDevice&) = delete;
  SimulatedDevice& operator=(const SimulatedDevice&) = delete;

 private:
  int previous_;
};

// Whether the innermost SimulatedDevice on this thread is the CPU.
bool simulating_cpu();

// Registers the kernels (called by ensure_meta_kernels).
void register_rnn_meta_kernels();

}  // namespace koila
