#include "graph/rnn_meta.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/rnn_relu_native.h>
#include <ATen/ops/rnn_tanh_native.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

namespace koila {

namespace {

thread_local int simulated = -1;  // the c10::DeviceType of the innermost scope; -1: none

using at::Tensor;
using at::TensorList;

// One layer's weights in one direction, as LibTorch's gather_params lists them.
struct Weights {
  Tensor w_ih, w_hh, b_ih, b_hh;  // biases undefined when the layer has none
  Tensor w_hr;                    // an LSTM's projection; undefined: none
};

// The weights of `layers` x `directions` (with `projections`, an LSTM's w_hr after each
// layer's others), or none when `params` does not hold that many: the caller leaves such a
// call to LibTorch, which reports it.
std::vector<Weights> gather(TensorList params, bool has_biases, bool projections, int64_t layers, int64_t directions) {
  const size_t per = (has_biases ? 4 : 2) + (projections ? 1 : 0);
  if (layers <= 0 || params.size() != per * static_cast<size_t>(layers * directions)) return {};
  std::vector<Weights> out;
  for (size_t i = 0; i < params.size(); i += per) {
    Weights w;
    w.w_ih = params[i];
    w.w_hh = params[i + 1];
    if (has_biases) {
      w.b_ih = params[i + 2];
      w.b_hh = params[i + 3];
    }
    if (projections) w.w_hr = params[i + per - 1];
    out.push_back(std::move(w));
  }
  return out;
}

// The cells, as RNN.cpp computes them on the CPU with the input's projection made first
// (`in` is that step's slice of it).
struct LstmCell {
  using Hidden = std::pair<Tensor, Tensor>;  // h, c
  static Hidden step(const Tensor& in, const Hidden& hidden, const Weights& w) {
    const Tensor gates = at::linear(hidden.first, w.w_hh, w.b_hh).add_(in);
    std::vector<Tensor> g = gates.unsafe_chunk(4, 1);
    const Tensor ingate = g[0].sigmoid_();
    const Tensor forgetgate = g[1].sigmoid_();
    const Tensor cellgate = g[2].tanh_();
    const Tensor outgate = g[3].sigmoid_();
    Tensor cy = (forgetgate * hidden.second).add_(ingate * cellgate);
    Tensor hy = outgate * cy.tanh();
    if (w.w_hr.defined()) hy = at::matmul(hy, w.w_hr.t());
    return {std::move(hy), std::move(cy)};
  }
  static const Tensor& output(const Hidden& hidden) { return hidden.first; }
};

struct GruCell {
  using Hidden = Tensor;
  static Hidden step(const Tensor& in, const Hidden& hidden, const Weights& w) {
    std::vector<Tensor> ig = in.unsafe_chunk(3, 1);
    std::vector<Tensor> hg = at::linear(hidden, w.w_hh, w.b_hh).unsafe_chunk(3, 1);
    const Tensor reset = hg[0].add_(ig[0]).sigmoid_();
    const Tensor update = hg[1].add_(ig[1]).sigmoid_();
    const Tensor candidate = ig[2].add(hg[2].mul_(reset)).tanh_();
    return (hidden - candidate).mul_(update).add_(candidate);
  }
  static const Tensor& output(const Hidden& hidden) { return hidden; }
};

template <bool kRelu>
struct SimpleCell {
  using Hidden = Tensor;
  static Hidden step(const Tensor& in, const Hidden& hidden, const Weights& w) {
    const Tensor pre = at::linear(hidden, w.w_hh, w.b_hh).add_(in);
    return kRelu ? at::relu(pre) : at::tanh(pre);
  }
  static const Tensor& output(const Hidden& hidden) { return hidden; }
};

template <typename Cell>
struct LayerResult {
  Tensor output;
  std::vector<typename Cell::Hidden> last;  // one per direction
};

// The steps of one direction over `steps` (the slices of the input's projection, in the
// order they run): each step's output, and the last state.
template <typename Cell>
std::pair<std::vector<Tensor>, typename Cell::Hidden> run_steps(const std::vector<Tensor>& steps,
                                                                typename Cell::Hidden hidden, const Weights& w) {
  std::vector<Tensor> outputs;
  outputs.reserve(steps.size());
  for (const Tensor& in : steps) {
    hidden = Cell::step(in, hidden, w);
    outputs.push_back(Cell::output(hidden));
  }
  return {std::move(outputs), std::move(hidden)};
}

// One layer over the sequence (steps first), each direction's input projected first. What
// is held when follows RNN.cpp: a projection lives until its outputs are stacked (in both
// directions, until they are concatenated); the second direction's is made while the
// first's is still held.
template <typename Cell>
LayerResult<Cell> layer(const Tensor& input, const std::vector<typename Cell::Hidden>& hidden,
                        const std::vector<Weights>& w, size_t first) {
  LayerResult<Cell> r;
  Tensor projection = at::linear(input, w[first].w_ih, w[first].b_ih);
  std::vector<Tensor> steps = projection.unbind(0);
  auto forward = run_steps<Cell>(steps, hidden[0], w[first]);
  if (hidden.size() == 1) {
    r.output = at::stack(forward.first, 0);
    r.last.push_back(std::move(forward.second));
    return r;
  }
  const Tensor forward_output = at::stack(forward.first, 0);
  projection = at::linear(input, w[first + 1].w_ih, w[first + 1].b_ih);
  steps = projection.unbind(0);
  std::reverse(steps.begin(), steps.end());
  auto backward = run_steps<Cell>(steps, hidden[1], w[first + 1]);
  std::reverse(backward.first.begin(), backward.first.end());
  const Tensor backward_output = at::stack(backward.first, 0);
  r.output = at::cat({forward_output, backward_output}, forward_output.dim() - 1);
  r.last.push_back(std::move(forward.second));
  r.last.push_back(std::move(backward.second));
  return r;
}

// The layers, dropout between them in training; the last states of every layer and
// direction in LibTorch's order.
template <typename Cell>
std::pair<Tensor, std::vector<typename Cell::Hidden>> stack_of_layers(const Tensor& input,
                                                                      const std::vector<typename Cell::Hidden>& initial,
                                                                      const std::vector<Weights>& w, int64_t layers,
                                                                      int64_t directions, double dropout, bool train) {
  Tensor x = input;
  std::vector<typename Cell::Hidden> last;
  for (int64_t l = 0; l < layers; ++l) {
    const size_t first = static_cast<size_t>(l * directions);
    std::vector<typename Cell::Hidden> h(initial.begin() + first, initial.begin() + first + directions);
    LayerResult<Cell> r = layer<Cell>(x, h, w, first);
    for (auto& one : r.last) last.push_back(std::move(one));
    x = std::move(r.output);
    if (dropout != 0 && train && l < layers - 1) x = at::dropout(x, dropout, /*train=*/true);
  }
  return {std::move(x), std::move(last)};
}

// Whether an LSTM that trains takes RNN.cpp's path on the CPU. Where LibTorch has oneDNN's
// RNN layer op (PyTorch 2.x), a float LSTM without projections trains through oneDNN
// instead, whose workspace this algorithm does not hold (the calibration by real probes
// makes it up).
bool lstm_takes_cpu_path(const Tensor& input, bool projections) {
  static const bool has_layer = c10::Dispatcher::singleton().findSchema({"aten::mkldnn_rnn_layer", ""}).has_value();
  const bool onednn = has_layer && at::hasMKLDNN() && at::globalContext().userEnabledMkldnn() &&
                      (input.scalar_type() == at::kFloat || input.scalar_type() == at::kBFloat16);
  return projections || !onednn;
}

// Only with gradients: read without them, the CPU's recurrent layers held what the per-step
// composite holds (measured on 1.13 for every kind here: the projection path overestimated
// no-grad reads by 13% to 63%, the composite was exact), so the composite stays there.
bool takes_cpu_path(const Tensor& input) {
  return at::GradMode::is_enabled() && simulating_cpu() && input.is_meta() && input.dim() == 3;
}

std::tuple<Tensor, Tensor, Tensor> lstm_as_on_cpu(const Tensor& input, TensorList hx, TensorList params,
                                                  bool has_biases, int64_t layers, double dropout, bool train,
                                                  bool bidirectional, bool batch_first) {
  const int64_t directions = bidirectional ? 2 : 1;
  // LibTorch's own test for projections: hidden and cell states of different sizes.
  const bool projections = hx.size() == 2 && hx[0].dim() == 3 && hx[1].dim() == 3 && hx[0].size(2) != hx[1].size(2);
  const std::vector<Weights> w = gather(params, has_biases, projections, layers, directions);
  if (!takes_cpu_path(input) || w.empty() || hx.size() != 2 || !lstm_takes_cpu_path(input, projections))
    return at::native::lstm(input, hx, params, has_biases, layers, dropout, train, bidirectional, batch_first);
  const std::vector<Tensor> h = hx[0].unbind(0), c = hx[1].unbind(0);
  std::vector<LstmCell::Hidden> initial;
  for (size_t i = 0; i < h.size(); ++i) initial.emplace_back(h[i], c[i]);
  auto [out, last] = stack_of_layers<LstmCell>(batch_first ? input.transpose(0, 1) : input, initial, w, layers,
                                               directions, dropout, train);
  std::vector<Tensor> hy, cy;
  for (auto& one : last) {
    hy.push_back(std::move(one.first));
    cy.push_back(std::move(one.second));
  }
  return {batch_first ? out.transpose(0, 1) : out, at::stack(hy, 0), at::stack(cy, 0)};
}

template <typename Cell>
std::tuple<Tensor, Tensor> rnn_as_on_cpu(const Tensor& input, const Tensor& hx, const std::vector<Weights>& w,
                                         int64_t layers, int64_t directions, double dropout, bool train,
                                         bool batch_first) {
  auto [out, last] = stack_of_layers<Cell>(batch_first ? input.transpose(0, 1) : input, hx.unbind(0), w, layers,
                                           directions, dropout, train);
  return {batch_first ? out.transpose(0, 1) : out, at::stack(last, 0)};
}

std::tuple<Tensor, Tensor> gru_as_on_cpu(const Tensor& input, const Tensor& hx, TensorList params, bool has_biases,
                                         int64_t layers, double dropout, bool train, bool bidirectional,
                                         bool batch_first) {
  const int64_t directions = bidirectional ? 2 : 1;
  const std::vector<Weights> w = gather(params, has_biases, false, layers, directions);
  if (!takes_cpu_path(input) || w.empty())
    return at::native::gru(input, hx, params, has_biases, layers, dropout, train, bidirectional, batch_first);
  return rnn_as_on_cpu<GruCell>(input, hx, w, layers, directions, dropout, train, batch_first);
}

template <bool kRelu>
std::tuple<Tensor, Tensor> simple_rnn_as_on_cpu(const Tensor& input, const Tensor& hx, TensorList params,
                                                bool has_biases, int64_t layers, double dropout, bool train,
                                                bool bidirectional, bool batch_first) {
  const int64_t directions = bidirectional ? 2 : 1;
  const std::vector<Weights> w = gather(params, has_biases, false, layers, directions);
  if (!takes_cpu_path(input) || w.empty())
    return kRelu
               ? at::native::rnn_relu(input, hx, params, has_biases, layers, dropout, train, bidirectional, batch_first)
               : at::native::rnn_tanh(input, hx, params, has_biases, layers, dropout, train, bidirectional,
                                      batch_first);
  return rnn_as_on_cpu<SimpleCell<kRelu>>(input, hx, w, layers, directions, dropout, train, batch_first);
}

}  // namespace

SimulatedDevice::SimulatedDevice(c10::Device device) : previous_(simulated) {
  simulated = static_cast<int>(device.type());
}

SimulatedDevice::~SimulatedDevice() { simulated = previous_; }

bool simulating_cpu() { return simulated == static_cast<int>(c10::DeviceType::CPU); }

void register_rnn_meta_kernels() {
  // Autograd's key for meta tensors: these ops are composites that autograd sees through, so
  // the kernels here record autograd op by op as LibTorch's composite does.
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::AutogradMeta, __FILE__, __LINE__);
  library.impl("lstm.input", TORCH_FN(lstm_as_on_cpu));
  library.impl("gru.input", TORCH_FN(gru_as_on_cpu));
  library.impl("rnn_tanh.input", TORCH_FN(simple_rnn_as_on_cpu<false>));
  library.impl("rnn_relu.input", TORCH_FN(simple_rnn_as_on_cpu<true>));
}

}  // namespace koila
