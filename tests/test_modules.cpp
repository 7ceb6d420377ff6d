// TorchScript modules and optimizers: forward values and chunked training gradients equal
// plain LibTorch, the batch is shown to flow through a module (or the module couples it),
// optimizers match torch::optim, save/load round-trips, and bad input fails cleanly.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "api/handles.h"
#include "base/error.h"
#include "graph/meta_kernels.h"
#include "helpers.h"
#include "module/module.h"
#include "module_helpers.h"
#include "plan/planner.h"
#include "scripted_models.h"
#include "temp_dir.h"

using namespace koila_test;

namespace {

std::vector<at::Tensor> param_list(const torch::jit::Module& m) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : m.parameters()) out.push_back(p);
  return out;
}

std::vector<at::Tensor> grads(const torch::jit::Module& m) {
  std::vector<at::Tensor> g;
  for (const at::Tensor& p : m.parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return g;
}

void zero_grads(const torch::jit::Module& m) {
  for (const at::Tensor& p : m.parameters())
    if (p.grad().defined()) p.mutable_grad().zero_();
}

void expect_close(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, double rtol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined() && b[i].defined()) << what << " tensor " << i;
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    const double scale = b[i].abs().max().item<double>();
    EXPECT_LE(diff, rtol * scale + 1e-7) << what << " tensor " << i << " differs by " << diff << " (largest " << scale
                                         << ")";
  }
}

// The CNN written again with plain ATen calls, from the module's parameters.
at::Tensor eager_cnn(const torch::jit::Module& m, const at::Tensor& x) {
  auto p = [&](const char* name) { return m.attr(name).toTensor(); };
  at::Tensor h = at::relu(at::conv2d(x, p("conv1_weight"), p("conv1_bias"), 1, 1));
  h = at::max_pool2d(h, {2, 2});
  h = at::relu(at::conv2d(h, p("conv2_weight"), p("conv2_bias"), 1, 1));
  h = at::max_pool2d(h, {2, 2});
  return at::linear(h.flatten(1), p("fc_weight"), p("fc_bias"));
}

}  // namespace

TEST(Modules, ForwardEqualsPlainLibTorchUnsplitAndInChunks) {
  BudgetGuard restore;
  torch::jit::Module cnn = scripted::cnn(1);
  ModuleHandle m = wrap(cnn);
  const at::Tensor xs = at::randn({37, 3, 32, 32});
  Handle x = koila_models::lazy(xs, 0);
  Handle y = forward(m.get(), {x.get()});

  int lazy = 0;
  ASSERT_OK(koila_tensor_is_lazy(y.get(), &lazy));
  EXPECT_EQ(lazy, 1);
  EXPECT_EQ(shape_of(y.get()), (std::vector<int64_t>{37, 10}));
  EXPECT_EQ(batch_dim_of(y.get()), 0);
  EXPECT_TRUE(node(y.get()).couples.empty()) << node(y.get()).couples;

  at::Tensor expected;
  {
    c10::NoGradGuard no_grad;
    expected = cnn.forward({xs}).toTensor();
    EXPECT_TRUE(at::allclose(expected, eager_cnn(cnn, xs), 1e-5, 1e-6));
  }
  EXPECT_TRUE(at::allclose(to_aten(y.get()), expected, 1e-5, 1e-6));

  budget_for_chunk(y.get(), koila::RunMode::Forward, 8);
  const PlanInfo p = plan_of(y.get(), KOILA_MODE_FORWARD);
  EXPECT_EQ(p.chunk, 8);
  EXPECT_EQ(p.chunks, 5);
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  const at::Tensor out = at::empty({37, 10});
  const uint64_t before = current_cpu();
  ASSERT_OK(koila_tensor_to_host(y.get(), out.data_ptr(), out.numel() * sizeof(float)));
  EXPECT_LE(peak_cpu(), p.budget);
  EXPECT_LE(peak_cpu(), p.peak + (p.peak - before) / 10) << "estimate exceeded by more than 10%";
  EXPECT_TRUE(at::allclose(out, expected, 1e-5, 1e-6)) << (out - expected).abs().max();
}

TEST(Modules, ChunkedTrainingGradientsEqualFullBatch) {
  BudgetGuard restore;
  for (const bool mlp : {false, true}) {
    SCOPED_TRACE(mlp ? "mlp" : "cnn");
    torch::jit::Module net = mlp ? scripted::mlp(2) : scripted::cnn(2);
    ModuleHandle m = wrap(net);
    const int64_t batch = mlp ? 2000 : 37, chunk = mlp ? 256 : 8;
    const at::Tensor xs = mlp ? at::randn({batch, 784}) : at::randn({batch, 3, 32, 32});
    const at::Tensor ys = at::randint(10, {batch}, at::kLong);

    // Plain LibTorch, full batch.
    zero_grads(net);
    at::cross_entropy_loss(net.forward({xs}).toTensor(), ys).backward();
    const std::vector<at::Tensor> expected = grads(net);
    zero_grads(net);

    Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0);
    Handle logits = forward(m.get(), {x.get()});
    Handle loss = CALL(koila_cross_entropy, logits.get(), y.get(), KOILA_REDUCTION_MEAN);
    budget_for_chunk(loss.get(), koila::RunMode::Training, chunk);
    const PlanInfo p = plan_of(loss.get(), KOILA_MODE_TRAINING);
    EXPECT_EQ(p.chunk, chunk);
    EXPECT_GT(p.chunks, 4);
    ASSERT_OK(koila_memory_reset_peak("cpu"));
    const uint64_t before = current_cpu();
    ASSERT_OK(koila_backward(loss.get()));
    EXPECT_LE(peak_cpu(), p.budget);
    EXPECT_LE(peak_cpu(), p.peak + (p.peak - before) / 10) << "estimate exceeded by more than 10%";
    expect_close(grads(net), expected, 1e-4, "chunked gradients");

    // The gradients are the module's: koila_module_parameter aliases them.
    std::vector<Handle> params = parameters(m.get());
    ASSERT_EQ(params.size(), expected.size());
    for (size_t i = 0; i < params.size(); ++i) {
      koila_tensor* g = nullptr;
      ASSERT_OK(koila_tensor_grad(&g, params[i].get()));
      ASSERT_NE(g, nullptr);
      Handle grad(g);
      EXPECT_TRUE(at::allclose(to_aten(grad.get()), param_list(net)[i].grad()));
    }
    zero_grads(net);
  }
}

// LibTorch's CPU convolution takes other buffers for one sample than for the calibration
// probes' 2 and 4 (no oneDNN for one small image): chunks of one get a probe of their own,
// which runs as the run's chunks do (gradients into copies of the parameters as they come).
// Without it, this CNN's backward in chunks of one measured 329,864 bytes against 280,792
// estimated (15% short, beyond the margin), and under the budget planned for them it was
// refused.
TEST(ModuleEstimates, ChunksOfOneSampleAreCalibratedByTheirOwnProbe) {
  BudgetGuard restore;
  torch::jit::Module cnn = scripted::cnn(3);
  ModuleHandle m = wrap(cnn);
  const at::Tensor xs = at::randn({20, 3, 32, 32});
  const at::Tensor ys = at::randint(10, {20}, at::kLong);
  Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0);
  Handle logits = forward(m.get(), {x.get()});
  Handle loss = CALL(koila_cross_entropy, logits.get(), y.get(), KOILA_REDUCTION_MEAN);
  plan_of(loss.get(), KOILA_MODE_TRAINING);  // calibrated with room
  budget_for_chunk(loss.get(), koila::RunMode::Training, 1);
  const PlanInfo p = plan_of(loss.get(), KOILA_MODE_TRAINING);
  ASSERT_EQ(p.chunk, 1) << p.text;
  EXPECT_NE(p.text.find("chunks of 1: probed as the run's"), std::string::npos) << p.text;
  const uint64_t before = current_cpu();
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  ASSERT_OK(koila_backward(loss.get()));
  const uint64_t measured = peak_cpu() - before;
  EXPECT_GE(static_cast<double>(p.peak - before) * (1 + koila::kMargin), static_cast<double>(measured)) << p.text;
  // The probe runs as the run's chunks do (issue 28, item 4): 11% over before, when it held
  // every gradient at once.
  const double error =
      (static_cast<double>(p.peak - before) - static_cast<double>(measured)) / static_cast<double>(measured);
  EXPECT_LE(std::abs(error), 0.02) << p.text;
  std::printf("[ chunks of one ] estimate %+.2f%% of the measured %llu bytes\n", 100 * error,
              static_cast<unsigned long long>(measured));
  // The gradients are the unsplit ones.
  const std::vector<at::Tensor> chunked = grads(cnn);
  zero_grads(cnn);
  at::cross_entropy_loss(cnn.forward({xs}).toTensor(), ys).backward();
  const std::vector<at::Tensor> eager = grads(cnn);
  ASSERT_EQ(chunked.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i)
    EXPECT_TRUE(at::allclose(chunked[i], eager[i], 1e-4, 1e-6)) << "parameter " << i;
}

// A training loop through koila (graph built once; chunked) against the same loop in plain
// LibTorch with torch::optim.
class OptimizerLoop : public ::testing::TestWithParam<bool> {};

TEST_P(OptimizerLoop, MatchesTorchOptim) {
  BudgetGuard restore;
  const bool adam = GetParam();
  torch::jit::Module a = scripted::cnn(3), b = scripted::cnn(3);
  ModuleHandle m = wrap(a);
  const at::Tensor xs = at::randn({20, 3, 32, 32});
  const at::Tensor ys = at::randint(10, {20}, at::kLong);

  std::vector<Handle> params = parameters(m.get());
  std::vector<koila_tensor*> raw;
  for (const Handle& h : params) raw.push_back(h.get());
  koila_optimizer* o = nullptr;
  if (adam)
    ASSERT_OK(koila_optimizer_adam(&o, raw.data(), raw.size(), 1e-3, 0.8, 0.99, 1e-7, 1e-2));
  else
    ASSERT_OK(koila_optimizer_sgd(&o, raw.data(), raw.size(), 0.05, 0.9, 1e-3));
  OptimizerHandle opt(o);

  std::vector<at::Tensor> b_params;
  for (const at::Tensor& p : b.parameters()) b_params.push_back(p);
  std::unique_ptr<torch::optim::Optimizer> reference;
  if (adam)
    reference = std::make_unique<torch::optim::Adam>(
        b_params, torch::optim::AdamOptions(1e-3).betas(std::make_tuple(0.8, 0.99)).eps(1e-7).weight_decay(1e-2));
  else
    reference =
        std::make_unique<torch::optim::SGD>(b_params, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));

  Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0);
  Handle logits = forward(m.get(), {x.get()});
  Handle loss = CALL(koila_cross_entropy, logits.get(), y.get(), KOILA_REDUCTION_MEAN);
  budget_for_chunk(loss.get(), koila::RunMode::Training, 4);
  double first = 0, last = 0;
  for (int step = 0; step < 4; ++step) {
    ASSERT_OK(koila_optimizer_zero_grad(opt.get()));
    double value = 0;
    ASSERT_OK(koila_tensor_item(loss.get(), &value));
    // Chunked (the optimizer's state, made by the first step, leaves less room after it).
    EXPECT_GT(plan_of(loss.get(), KOILA_MODE_TRAINING).chunks, 1);
    ASSERT_OK(koila_backward(loss.get()));
    ASSERT_OK(koila_optimizer_step(opt.get()));

    reference->zero_grad();
    at::Tensor ref_loss = at::cross_entropy_loss(b.forward({xs}).toTensor(), ys);
    EXPECT_NEAR(value, ref_loss.item<double>(), 1e-4) << "step " << step;
    ref_loss.backward();
    reference->step();

    std::vector<at::Tensor> pa, pb;
    for (const at::Tensor& p : a.parameters()) pa.push_back(p.detach());
    for (const at::Tensor& p : b.parameters()) pb.push_back(p.detach());
    expect_close(pa, pb, 1e-4, "parameters after step " + std::to_string(step));
    (step == 0 ? first : last) = value;
  }
  EXPECT_LT(last, first);
  // zero_grad zeroes in place.
  ASSERT_OK(koila_optimizer_zero_grad(opt.get()));
  for (const at::Tensor& p : a.parameters()) EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, OptimizerLoop, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "adam" : "sgd"; });

TEST(Modules, BatchFlowsThroughOrIsCoupled) {
  BudgetGuard restore;
  const at::Tensor xs = at::randn({6, 8});
  Handle x = koila_models::lazy(xs, 0);
  auto built = [&](const std::string& source, const koila_tensor* input = nullptr) {
    torch::jit::Module mod = scripted::module("M", {{"w", at::randn({8})}}, {}, source);
    ModuleHandle m = wrap(mod);
    return forward(m.get(), {const_cast<koila_tensor*>(input ? input : x.get())});
  };
  // Per-sample: batch dim 0, not coupled.
  Handle per_sample = built("def forward(self, x):\n    return torch.tanh(x * self.w)\n");
  EXPECT_EQ(batch_dim_of(per_sample.get()), 0);
  EXPECT_TRUE(node(per_sample.get()).couples.empty());
  // The batch moves: transposed output carries it at dim 1.
  Handle moved = built("def forward(self, x):\n    return (x * self.w).t()\n");
  EXPECT_EQ(batch_dim_of(moved.get()), 1);
  EXPECT_TRUE(node(moved.get()).couples.empty()) << node(moved.get()).couples;
  // A lazy input whose batch is dim 1.
  Handle xt = koila_models::lazy(xs.t().contiguous(), 1);
  Handle from_dim1 = built("def forward(self, x):\n    return torch.relu(x.t() * self.w)\n", xt.get());
  EXPECT_EQ(batch_dim_of(from_dim1.get()), 0);
  EXPECT_TRUE(node(from_dim1.get()).couples.empty()) << node(from_dim1.get()).couples;
  // Mixing samples: centering over the batch, reversing it, a reduction over it, a batch
  // size written into the module.
  const std::pair<const char*, const char*> coupled[] = {
      {"def forward(self, x):\n    return x - x.mean(0, True) * self.w\n", "mixes samples"},
      {"def forward(self, x):\n    return torch.flip(x, [0]) * self.w\n", "mixes samples"},
      {"def forward(self, x):\n    return (x * self.w).sum(0)\n", "does not carry the batch"},
      {"def forward(self, x):\n    return x.reshape(3, 16) * 2.0\n", "accepts a batch of 6 but not of 3"},
      {"def forward(self, x):\n    return x.reshape(-1) * 2.0\n", "no single dim"},
  };
  for (const auto& [source, why] : coupled) {
    Handle h = built(source);
    EXPECT_NE(node(h.get()).couples.find(why), std::string::npos) << source << " -> " << node(h.get()).couples;
    EXPECT_NE(node(h.get()).couples.find("(module M)"), std::string::npos) << node(h.get()).couples;
  }
  // Values are right whatever the verdict.
  Handle centered = built("def forward(self, x):\n    return x - x.mean(0, True)\n");
  EXPECT_TRUE(at::allclose(to_aten(centered.get()), xs - xs.mean(0, true), 1e-5, 1e-6));
}

// The sample-mixing probe on a module whose runs differ without any change of input, as
// kernels with nondeterministic reductions do (cuDNN's, some of CUDA's): a stand-in whose
// buffer counts its calls and adds 1e-3 of the count to every result, more than allclose's
// tolerance. Its samples stay apart (the noise of two runs on the same samples is measured
// first); the same noise with a real reduction over the batch still mixes them.
TEST(Modules, TheMixingProbeToleratesNoiseButNotMixing) {
  BudgetGuard restore;
  const at::Tensor xs = at::randn({6, 8});
  Handle x = koila_models::lazy(xs, 0);
  auto built = [&](const std::string& source) {
    torch::jit::Module mod = scripted::module("Noisy", {{"w", at::randn({8})}}, {{"calls", at::zeros({1})}}, source);
    ModuleHandle m = wrap(mod);
    return forward(m.get(), {x.get()});
  };
  Handle noisy =
      built("def forward(self, x):\n    self.calls.add_(1.0)\n    return torch.tanh(x * self.w) + 1e-3 * self.calls\n");
  EXPECT_TRUE(node(noisy.get()).couples.empty()) << node(noisy.get()).couples;
  EXPECT_EQ(batch_dim_of(noisy.get()), 0);
  Handle mixing = built(
      "def forward(self, x):\n    self.calls.add_(1.0)\n"
      "    return torch.tanh(x * self.w) + 1e-3 * self.calls + 0.5 * x.mean(0, True)\n");
  EXPECT_NE(node(mixing.get()).couples.find("mixes samples"), std::string::npos) << node(mixing.get()).couples;
}

TEST(Modules, BatchNormInTrainingCouplesAndEvalDoesNot) {
  BudgetGuard restore;
  torch::jit::Module bn = scripted::batch_norm(4);
  ModuleHandle m = wrap(bn);
  const at::Tensor xs = at::randn({64, 8}) * 3 + 1;
  Handle x = koila_models::lazy(xs, 0);
  const at::Tensor running_mean = bn.attr("running_mean").toTensor().clone();

  Handle train = forward(m.get(), {x.get()});
  // It mixes samples only through its statistics (with the layer evaluating, it does not).
  EXPECT_TRUE(node(train.get()).couples.empty()) << node(train.get()).couples;
  EXPECT_NE(node(train.get())
                .stats_couples.find("(module BatchNorm) normalizes with statistics over the batch in its "
                                    "BatchNorm layers in training (the module itself)"),
            std::string::npos)
      << node(train.get()).stats_couples;
  // Building ran probes but changed no buffer.
  EXPECT_TRUE(at::equal(bn.attr("running_mean").toTensor(), running_mean));

  ASSERT_OK(koila_module_train(m.get(), 0));
  int training = -1;
  ASSERT_OK(koila_module_is_training(m.get(), &training));
  EXPECT_EQ(training, 0);
  Handle eval = forward(m.get(), {x.get()});
  EXPECT_TRUE(node(eval.get()).couples.empty()) << node(eval.get()).couples;

  // Training mode was captured when `train` was built: it still normalizes with the batch
  // statistics (and, fitting, runs unsplit), and updates the running statistics.
  Handle sq = CALL(koila_mul, train.get(), train.get());
  Handle loss = CALL(koila_mean, sq.get(), nullptr, 0, 0);
  const at::Tensor normalized = (xs - xs.mean(0)) / (xs.var(0, false) + 1e-5).sqrt();
  const at::Tensor w = bn.attr("weight").toTensor().detach(), b = bn.attr("bias").toTensor().detach();
  EXPECT_TRUE(at::allclose(to_aten(train.get()), normalized * w + b, 1e-4, 1e-5));
  EXPECT_FALSE(at::equal(bn.attr("running_mean").toTensor(), running_mean));
  // Too little memory for the whole batch: not splittable, naming the module.
  const uint64_t need = koila::estimate_extra(loss->node, koila::RunMode::Training, -1);
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + need / 2));
  auto [code, message] = outcome(koila_backward(loss.get()));
  EXPECT_EQ(code, KOILA_ERROR_NOT_SPLITTABLE);
  EXPECT_NE(message.find("koila_module_forward (module BatchNorm) normalizes with statistics"), std::string::npos)
      << message;
  EXPECT_NE(message.find("koila_set_batch_stats(KOILA_BATCH_STATS_PER_CHUNK)"), std::string::npos) << message;
  EXPECT_FALSE(bn.attr("weight").toTensor().grad().defined());
  // The eval-mode call splits.
  Handle eval_sq = CALL(koila_mul, eval.get(), eval.get());
  Handle eval_loss = CALL(koila_mean, eval_sq.get(), nullptr, 0, 0);
  budget_for_chunk(eval_loss.get(), koila::RunMode::Training, 16);
  EXPECT_EQ(plan_of(eval_loss.get(), KOILA_MODE_TRAINING).chunks, 4);
  ASSERT_OK(koila_backward(eval_loss.get()));
  EXPECT_TRUE(bn.attr("weight").toTensor().grad().defined());
}

TEST(Modules, BuildingLeavesTheRandomStreamAndDropoutKeepsSamplesApart) {
  BudgetGuard restore;
  torch::jit::Module cnn = scripted::cnn(5, 0.5);
  ModuleHandle m = wrap(cnn);
  ASSERT_OK(koila_manual_seed(11));
  const at::Tensor expected = at::randn({4});
  ASSERT_OK(koila_manual_seed(11));
  Handle x = koila_models::lazy(at::randn({8, 3, 32, 32}), 0);
  ASSERT_OK(koila_manual_seed(11));
  Handle y = forward(m.get(), {x.get()});
  EXPECT_TRUE(at::equal(at::randn({4}), expected)) << "building the call consumed random numbers";
  // Dropout draws masks, but the same masks for the same seed: samples are kept apart.
  EXPECT_TRUE(node(y.get()).couples.empty()) << node(y.get()).couples;
  // In eval mode the call is deterministic; train mode captured at build time is not.
  ASSERT_OK(koila_module_train(m.get(), 0));
  Handle z = forward(m.get(), {x.get()});
  EXPECT_TRUE(at::equal(to_aten(z.get()), to_aten(z.get())));
  EXPECT_FALSE(at::equal(to_aten(y.get()), to_aten(y.get())));
}

TEST(Modules, ConcreteInputsComputeAtOnceWithGradients) {
  torch::jit::Module mlp = scripted::mlp(6);
  ModuleHandle m = wrap(mlp);
  const at::Tensor xs = at::randn({5, 784});
  Handle x = from_aten(xs);
  Handle y = forward(m.get(), {x.get()});
  int lazy = 1;
  ASSERT_OK(koila_tensor_is_lazy(y.get(), &lazy));
  EXPECT_EQ(lazy, 0);
  Handle s = CALL(koila_sum, y.get(), nullptr, 0, 0);
  ASSERT_OK(koila_backward(s.get()));
  zero_grads(mlp);
  mlp.forward({xs}).toTensor().sum().backward();
  // Gradients added twice: once through koila, once directly (zeroed in between).
  EXPECT_TRUE(mlp.attr("fc1").toModule().attr("weight").toTensor().grad().defined());
  std::vector<Handle> params = parameters(m.get());
  char name[64];
  size_t needed = 0;
  ASSERT_OK(koila_module_parameter_name(m.get(), 2, name, sizeof name, &needed));
  EXPECT_STREQ(name, "fc2.weight");
  EXPECT_EQ(needed, std::strlen("fc2.weight") + 1);
}

TEST(Modules, SaveAndLoadRoundTrip) {
  const koila_tests::TempDir dir("koila_modules_");
  torch::jit::Module cnn = scripted::cnn(7);
  ModuleHandle m = wrap(cnn);
  const std::string path = dir / "cnn.pt";
  ASSERT_OK(koila_module_save(m.get(), path.c_str()));
  koila_module* loaded_raw = nullptr;
  ASSERT_OK(koila_module_load(&loaded_raw, path.c_str(), "cpu"));
  ModuleHandle loaded(loaded_raw);
  size_t n = 0, n2 = 0;
  ASSERT_OK(koila_module_num_parameters(m.get(), &n));
  ASSERT_OK(koila_module_num_parameters(loaded.get(), &n2));
  EXPECT_EQ(n, 6u);
  EXPECT_EQ(n2, n);
  std::vector<Handle> a = parameters(m.get()), b = parameters(loaded.get());
  for (size_t i = 0; i < n; ++i) EXPECT_TRUE(at::equal(to_aten(a[i].get()), to_aten(b[i].get())));
  // Loaded parameters keep requires_grad (an optimizer accepts them).
  std::vector<koila_tensor*> raw;
  for (const Handle& h : b) raw.push_back(h.get());
  koila_optimizer* o = nullptr;
  ASSERT_OK(koila_optimizer_sgd(&o, raw.data(), raw.size(), 0.1, 0, 0));
  koila_optimizer_free(o);

  const at::Tensor xs = at::randn({3, 3, 32, 32});
  Handle x = koila_models::lazy(xs, 0);
  Handle y1 = forward(m.get(), {x.get()}), y2 = forward(loaded.get(), {x.get()});
  EXPECT_TRUE(at::equal(to_aten(y1.get()), to_aten(y2.get())));

  // Modules may be freed before the results built from them.
  loaded.reset();
  EXPECT_TRUE(at::equal(to_aten(y1.get()), to_aten(y2.get())));

  // A device this machine does not have (whether or not it has CUDA).
  auto [code, message] = outcome(koila_module_load(&loaded_raw, path.c_str(), "cuda:99"));
  EXPECT_EQ(code, KOILA_ERROR_DEVICE) << message;
  EXPECT_EQ(loaded_raw, nullptr);
}

TEST(Modules, BadFilesFailCleanly) {
  const koila_tests::TempDir dir("koila_modules_");
  torch::jit::Module cnn = scripted::cnn(8);
  ModuleHandle m = wrap(cnn);
  const std::string good = dir / "good.pt";
  ASSERT_OK(koila_module_save(m.get(), good.c_str()));
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const char* name, const std::string& content) {
    const std::string path = dir / name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
  };
  const std::string paths[] = {
      dir / "missing.pt",
      dir.path(),
      write("empty.pt", ""),
      write("text.pt", "this is not a TorchScript archive\n"),
      write("truncated.pt", bytes.substr(0, bytes.size() / 2)),
      write("damaged.pt", bytes.substr(0, bytes.size() - 200) + std::string(200, 'x')),
  };
  for (const std::string& path : paths) {
    koila_module* out = reinterpret_cast<koila_module*>(0x1);
    auto [code, message] = outcome(koila_module_load(&out, path.c_str(), "cpu"));
    EXPECT_EQ(code, KOILA_ERROR_IO) << path << ": " << message;
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_EQ(out, nullptr);
  }
  auto [code, message] = outcome(koila_module_save(m.get(), (dir / "no/such/dir.pt").c_str()));
  EXPECT_EQ(code, KOILA_ERROR_IO) << message;
  EXPECT_NE(message.find("no/such/dir.pt"), std::string::npos) << message;
}

TEST(Modules, BadCallsFailWhenBuilt) {
  torch::jit::Module cnn = scripted::cnn(9);
  ModuleHandle m = wrap(cnn);
  Handle x = koila_models::lazy(at::randn({4, 3, 32, 32}), 0);
  koila_tensor* out = nullptr;
  koila_tensor* in[] = {x.get(), x.get()};

  // The module's own complaints, when the call is built.
  Handle small = koila_models::lazy(at::randn({4, 3, 28, 28}), 0);
  in[0] = small.get();
  auto [code, message] = outcome(koila_module_forward(&out, m.get(), in, 1));
  EXPECT_EQ(code, KOILA_ERROR_SHAPE) << message;
  EXPECT_NE(message.find("mat1 and mat2 shapes cannot be multiplied"), std::string::npos) << message;
  EXPECT_NE(message.find("ConvNet"), std::string::npos) << message;
  EXPECT_NE(message.find("[4, 3, 28, 28]"), std::string::npos) << message;
  Handle channels = koila_models::lazy(at::randn({4, 5, 32, 32}), 0);
  in[0] = channels.get();
  std::tie(code, message) = outcome(koila_module_forward(&out, m.get(), in, 1));
  EXPECT_EQ(code, KOILA_ERROR_SHAPE) << message;
  EXPECT_NE(message.find("channels"), std::string::npos) << message;
  in[0] = x.get();
  std::tie(code, message) = outcome(koila_module_forward(&out, m.get(), in, 2));
  EXPECT_EQ(code, KOILA_ERROR_INVALID_ARGUMENT) << message;
  EXPECT_NE(message.find("argument"), std::string::npos) << message;
  std::tie(code, message) = outcome(koila_module_forward(&out, m.get(), in, 0));
  EXPECT_EQ(code, KOILA_ERROR_INVALID_ARGUMENT) << message;
  EXPECT_EQ(out, nullptr);

  // NULLs and indices.
  EXPECT_EQ(outcome(koila_module_forward(nullptr, m.get(), in, 1)).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_module_forward(&out, nullptr, in, 1)).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_module_forward(&out, m.get(), nullptr, 1)).first, KOILA_ERROR_INVALID_ARGUMENT);
  koila_tensor* null_in[] = {nullptr};
  EXPECT_EQ(outcome(koila_module_forward(&out, m.get(), null_in, 1)).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_module_parameter(&out, m.get(), 6)).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_module_train(m.get(), 2)).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_module_train(nullptr, 1)).first, KOILA_ERROR_INVALID_ARGUMENT);
  size_t n = 0;
  EXPECT_EQ(outcome(koila_module_num_parameters(nullptr, &n)).first, KOILA_ERROR_INVALID_ARGUMENT);
  koila_module* sink = nullptr;
  EXPECT_EQ(outcome(koila_module_load(&sink, nullptr, "cpu")).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_module_save(nullptr, "/tmp/x.pt")).first, KOILA_ERROR_INVALID_ARGUMENT);
  koila_module_free(nullptr);

  // A module that returns a tuple.
  torch::jit::Module pair = scripted::module("Pair", {}, {}, "def forward(self, x):\n    return x, x\n");
  ModuleHandle p = wrap(pair);
  std::tie(code, message) = outcome(koila_module_forward(&out, p.get(), in, 1));
  EXPECT_EQ(code, KOILA_ERROR_UNSUPPORTED) << message;
  EXPECT_NE(message.find("one tensor"), std::string::npos) << message;
}

TEST(Optimizers, BadArgumentsFail) {
  torch::jit::Module mlp = scripted::mlp(10);
  ModuleHandle m = wrap(mlp);
  std::vector<Handle> params = parameters(m.get());
  koila_optimizer* o = nullptr;
  koila_tensor* ok[] = {params[0].get(), params[1].get()};
  auto sgd = [&](koila_tensor* const* ps, size_t n, double lr, double momentum, double wd) {
    return outcome(koila_optimizer_sgd(&o, ps, n, lr, momentum, wd));
  };
  EXPECT_EQ(sgd(ok, 0, 0.1, 0, 0).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(sgd(nullptr, 2, 0.1, 0, 0).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(sgd(ok, 2, -0.1, 0, 0).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(sgd(ok, 2, NAN, 0, 0).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(sgd(ok, 2, 0.1, -1, 0).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(sgd(ok, 2, 0.1, 0, INFINITY).first, KOILA_ERROR_INVALID_ARGUMENT);
  koila_tensor* twice[] = {params[0].get(), params[0].get()};
  EXPECT_NE(sgd(twice, 2, 0.1, 0, 0).second.find("twice"), std::string::npos);
  Handle lazy = koila_models::lazy(at::randn({3}), 0);
  koila_tensor* with_lazy[] = {lazy.get()};
  EXPECT_NE(sgd(with_lazy, 1, 0.1, 0, 0).second.find("lazy"), std::string::npos);
  Handle plain = from_aten(at::randn({3}));
  koila_tensor* no_grad[] = {plain.get()};
  EXPECT_NE(sgd(no_grad, 1, 0.1, 0, 0).second.find("does not require grad"), std::string::npos);
  Handle ints = from_aten(at::ones({3}, at::kLong));
  koila_tensor* int_params[] = {ints.get()};
  EXPECT_EQ(sgd(int_params, 1, 0.1, 0, 0).first, KOILA_ERROR_DTYPE);
  EXPECT_EQ(o, nullptr);
  auto adam = [&](double b1, double b2, double eps) {
    return outcome(koila_optimizer_adam(&o, ok, 2, 1e-3, b1, b2, eps, 0)).first;
  };
  EXPECT_EQ(adam(1.0, 0.999, 1e-8), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(adam(0.9, -0.1, 1e-8), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(adam(0.9, 0.999, -1), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_optimizer_step(nullptr)).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_optimizer_zero_grad(nullptr)).first, KOILA_ERROR_INVALID_ARGUMENT);
  koila_optimizer_free(nullptr);
  // A step without gradients changes nothing.
  ASSERT_OK(koila_optimizer_adam(&o, ok, 2, 1e-3, 0.9, 0.999, 1e-8, 0));
  OptimizerHandle opt(o);
  const at::Tensor before = param_list(mlp)[0].detach().clone();
  ASSERT_OK(koila_optimizer_step(opt.get()));
  EXPECT_TRUE(at::equal(param_list(mlp)[0].detach(), before));
}

TEST(Modules, OpsWithoutMetaKernelsAreProbedOnRealSamples) {
  BudgetGuard restore;
  koila::ensure_meta_kernels();  // koila's own fill-ins first: they are part of what runs on meta
  bool meta_op = true;           // LibTorch 1.13 has no Meta kernel for logcumsumexp; later versions may
  try {
    at::logcumsumexp(at::empty({2, 3}, at::kMeta), 1);
  } catch (const std::exception&) {
    meta_op = false;
  }
  const at::Tensor xs = at::randn({10, 8}), w = at::randn({8});
  Handle x = koila_models::lazy(xs, 0);
  torch::jit::Module per_sample =
      scripted::module("Lcse", {{"w", w}}, {}, "def forward(self, x):\n    return torch.logcumsumexp(x, 1) * self.w\n");
  ModuleHandle m = wrap(per_sample);
  Handle y = forward(m.get(), {x.get()});
  EXPECT_EQ(shape_of(y.get()), (std::vector<int64_t>{10, 8}));
  EXPECT_EQ(batch_dim_of(y.get()), 0);
  EXPECT_TRUE(node(y.get()).couples.empty()) << node(y.get()).couples;
  EXPECT_TRUE(at::allclose(to_aten(y.get()), at::logcumsumexp(xs, 1) * w));
  // Training in chunks (measured on real probes when the simulation cannot run the module).
  Handle sq = CALL(koila_mul, y.get(), y.get());
  Handle loss = CALL(koila_sum, sq.get(), nullptr, 0, 0);
  budget_for_chunk(loss.get(), koila::RunMode::Training, 2);
  koila_plan* p = nullptr;
  ASSERT_OK(koila_plan_new(&p, loss.get(), KOILA_MODE_TRAINING));
  EXPECT_EQ(koila_plan_num_chunks(p), 5);
  char text[1024];
  size_t needed = 0;
  ASSERT_OK(koila_plan_describe(p, text, sizeof text, &needed));
  EXPECT_EQ(std::string(text).find("measured on real probes") != std::string::npos, !meta_op) << text;
  koila_plan_free(p);
  ASSERT_OK(koila_backward(loss.get()));
  const at::Tensor expected_grad = (2 * at::logcumsumexp(xs, 1).pow(2) * w).sum(0);
  EXPECT_TRUE(at::allclose(param_list(per_sample)[0].grad(), expected_grad, 1e-4, 1e-5));

  // Rolling along the batch mixes samples.
  ASSERT_OK(koila_set_memory_budget("cpu", 0));
  torch::jit::Module mixing =
      scripted::module("RollBatch", {}, {}, "def forward(self, x):\n    return torch.roll(x, 1, 0)\n");
  ModuleHandle mm = wrap(mixing);
  Handle z = forward(mm.get(), {x.get()});
  EXPECT_NE(node(z.get()).couples.find("mixes samples"), std::string::npos) << node(z.get()).couples;
  EXPECT_TRUE(at::equal(to_aten(z.get()), at::roll(xs, {1}, {0})));
}

TEST(Modules, TheCallersOptimizedRunsDoNotReachKoila) {
  BudgetGuard restore;
  torch::jit::Module cnn = scripted::cnn(12);
  const at::Tensor xs = at::randn({24, 3, 32, 32});
  const at::Tensor ys = at::randint(10, {24}, at::kLong);
  // The caller runs the module itself first, with LibTorch's optimizing executor (which
  // then keeps a plan specialized for these inputs, autodiff subgraphs included).
  for (int i = 0; i < 4; ++i) {
    torch::jit::GraphOptimizerEnabledGuard optimize(true);
    zero_grads(cnn);
    at::cross_entropy_loss(cnn.forward({xs}).toTensor(), ys).backward();
  }
  const std::vector<at::Tensor> expected = grads(cnn);
  zero_grads(cnn);

  ModuleHandle m = wrap(cnn);
  Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0);
  Handle logits = forward(m.get(), {x.get()});
  Handle loss = CALL(koila_cross_entropy, logits.get(), y.get(), KOILA_REDUCTION_MEAN);
  budget_for_chunk(loss.get(), koila::RunMode::Training, 8);
  const PlanInfo p = plan_of(loss.get(), KOILA_MODE_TRAINING);
  EXPECT_EQ(p.text.find("coarse"), std::string::npos) << p.text;
  EXPECT_EQ(p.chunks, 3) << p.text;
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  ASSERT_OK(koila_backward(loss.get()));
  EXPECT_LE(peak_cpu(), p.budget);
  expect_close(grads(cnn), expected, 1e-4, "after optimized runs");
  // And the caller's optimized runs still work after koila's.
  zero_grads(cnn);
  at::cross_entropy_loss(cnn.forward({xs}).toTensor(), ys).backward();
  expect_close(grads(cnn), expected, 1e-4, "the caller's run afterwards");
}

namespace {

// Plans a backward from `loss` (expecting a simulated estimate, not a measured or coarse
// one), runs it, and returns the estimated and the measured bytes beyond what was in use.
std::pair<uint64_t, uint64_t> simulated_backward(const koila_tensor* loss) {
  const PlanInfo p = plan_of(loss, KOILA_MODE_TRAINING);
  EXPECT_NE(p.text.find("Source: simulated on meta tensors"), std::string::npos) << p.text;
  const uint64_t before = current_cpu();
  koila_status_free(koila_memory_reset_peak("cpu"));  // fails only for a bad device name
  koila_status* s = koila_backward(loss);
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  return {p.full_peak - before, peak_cpu() - before};
}

// The gradients of sum(m(xs)^2), computed eagerly; m's .grad are left zero.
std::vector<at::Tensor> eager_square_grads(const torch::jit::Module& m, const at::Tensor& xs) {
  zero_grads(m);
  torch::jit::Module(m).forward({xs}).toTensor().pow(2).sum().backward();
  std::vector<at::Tensor> g = grads(m);
  zero_grads(m);
  return g;
}

// sum(m(x)^2) through koila, x lazy in dim 0.
struct LazySquares {
  Handle x, out, squares, loss;
  LazySquares(koila_module* m, const at::Tensor& xs)
      : x(koila_models::lazy(xs, 0)),
        out(forward(m, {x.get()})),
        squares(CALL(koila_mul, out.get(), out.get())),
        loss(CALL(koila_sum, squares.get(), nullptr, 0, 0)) {}
};

}  // namespace

// MobileNet's activations, ReLU6 (hardtanh) and Hardswish, applied in place as torchvision
// does, had no meta kernels in LibTorch 1.13: a module using them fell back to the coarse
// estimate (issue 12 measured mobilenet_v2 93% short). They are simulated now.
TEST(Modules, MobileNetActivationsAreSimulated) {
  BudgetGuard restore;
  torch::jit::Module net = scripted::module(
      "Activations", {{"w1", scripted::init({64, 32}, 0.3)}, {"w2", scripted::init({16, 64}, 0.3)}}, {},
      "def forward(self, x):\n"
      "    h = torch.matmul(x, self.w1.t())\n"
      "    h = torch.hardtanh_(h, 0.0, 6.0)\n"
      "    h = torch.matmul(h, self.w2.t())\n"
      "    return torch.hardswish_(h)\n");
  const at::Tensor xs = at::randn({256, 32}), ts = at::randn({256, 16});
  zero_grads(net);
  at::mse_loss(net.forward({xs}).toTensor(), ts).backward();
  const std::vector<at::Tensor> expected = grads(net);
  zero_grads(net);

  ModuleHandle m = wrap(net);
  Handle x = koila_models::lazy(xs, 0), t = koila_models::lazy(ts, 0);
  Handle out = forward(m.get(), {x.get()});
  Handle loss = CALL(koila_mse_loss, out.get(), t.get(), KOILA_REDUCTION_MEAN);
  const auto [estimated, measured] = simulated_backward(loss.get());
  const double error = (static_cast<double>(estimated) - static_cast<double>(measured)) / static_cast<double>(measured);
  EXPECT_LE(std::abs(error), 0.05) << "estimated " << estimated << ", measured " << measured;
  expect_close(grads(net), expected, 1e-4, "koila vs eager");
}

// nn.LSTM (and GRU, RNN) keeps its parameters a second time in a list attribute,
// _flat_weights, which its forward passes to aten::lstm. The simulation substituted meta
// stand-ins for parameters but not inside that list, so it mixed meta and real tensors and
// fell back to the coarse estimate (issue 12: a 2-layer LSTM classifier 84% short; this
// one 65% short). Tensors in list attributes are substituted too now.
TEST(Modules, ParametersInListAttributesAreSimulated) {
  BudgetGuard restore;
  at::manual_seed(3);
  torch::jit::Module lstm("Lstm");
  c10::List<at::Tensor> flat;
  for (int64_t layer = 0; layer < 2; ++layer) {
    const int64_t in = layer == 0 ? 8 : 16;
    for (auto [name, shape] : {std::pair<std::string, std::vector<int64_t>>{"w_ih", {64, in}},
                               {"w_hh", {64, 16}},
                               {"b_ih", {64}},
                               {"b_hh", {64}}}) {
      at::Tensor p = (at::randn(shape) * 0.2).requires_grad_(true);
      lstm.register_parameter(name + std::to_string(layer), p, false);
      flat.push_back(p);
    }
  }
  lstm.register_attribute("flat", c10::ListType::ofTensors(), flat);
  lstm.register_attribute("training", c10::BoolType::get(), true);
  lstm.define(
      "def forward(self, x):\n"
      "    h0 = torch.zeros([2, x.size(0), 16], dtype=x.dtype, device=x.device)\n"
      "    out, hn, cn = torch.lstm(x, [h0, h0], self.flat, True, 2, 0.0, self.training, False, True)\n"
      "    return out\n");
  const at::Tensor xs = at::randn({32, 12, 8});
  const std::vector<at::Tensor> expected = eager_square_grads(lstm, xs);
  ModuleHandle m = wrap(lstm);
  const LazySquares lazy(m.get(), xs);
  const auto [estimated, measured] = simulated_backward(lazy.loss.get());
  // The coarse estimate was 35% of the measured peak, the bare simulation 82% until it took
  // the CPU's path through the LSTM (see RecurrentSimulation below).
  EXPECT_GE(static_cast<double>(estimated) * (1 + koila::kMargin), static_cast<double>(measured))
      << "estimated " << estimated << ", measured " << measured;
  expect_close(grads(lstm), expected, 1e-4, "koila vs eager");
}

// LibTorch's recurrent layers on the CPU project a layer's whole sequence through its input
// weights before the steps run, and hold that projection until the layer's outputs are
// stacked; on meta tensors each step projected its own input, so the simulation of a CPU run
// missed it (a 2-layer LSTM classifier at batch 512: 14% short, calibration included). The
// planner's simulation now takes the CPU's path (graph/rnn_meta.h). Each case is an op as
// nn.LSTM, nn.GRU and nn.RNN call it, over its flat weights (see above).
struct Recurrent {
  const char* name;
  const char* op;  // torch.lstm, torch.gru, torch.rnn_tanh or torch.rnn_relu
  int64_t gates, layers;
  bool bidirectional, biases;
  int64_t projection = 0;  // LSTM only: proj_size
};

class RecurrentSimulation : public ::testing::TestWithParam<Recurrent> {};

TEST_P(RecurrentSimulation, HoldsWhatTheCpuHolds) {
  const Recurrent& r = GetParam();
  BudgetGuard restore;
  at::manual_seed(5);
  const int64_t features = 8, hidden = 48, directions = r.bidirectional ? 2 : 1;
  const int64_t out_size = r.projection > 0 ? r.projection : hidden;
  torch::jit::Module net("Recurrent");
  c10::List<at::Tensor> flat;
  int64_t count = 0;
  auto add = [&](std::vector<int64_t> shape) {
    at::Tensor p = (at::randn(shape) * 0.2).requires_grad_(true);
    net.register_parameter("p" + std::to_string(count++), p, false);
    flat.push_back(p);
  };
  for (int64_t layer = 0; layer < r.layers; ++layer)
    for (int64_t d = 0; d < directions; ++d) {
      const int64_t in = layer == 0 ? features : out_size * directions;
      add({r.gates * hidden, in});
      add({r.gates * hidden, out_size});
      if (r.biases) {
        add({r.gates * hidden});
        add({r.gates * hidden});
      }
      if (r.projection > 0) add({r.projection, hidden});
    }
  net.register_attribute("flat", c10::ListType::ofTensors(), flat);
  net.register_attribute("training", c10::BoolType::get(), true);
  const std::string states = std::to_string(r.layers * directions);
  const std::string args = std::string(r.biases ? "True" : "False") + ", " + std::to_string(r.layers) +
                           ", 0.0, self.training, " + (r.bidirectional ? "True" : "False") + ", True)\n";
  const bool lstm = std::string(r.op) == "torch.lstm";
  std::string source =
      "def forward(self, x):\n"
      "    h0 = torch.zeros([" +
      states + ", x.size(0), " + std::to_string(out_size) + "], dtype=x.dtype, device=x.device)\n";
  if (lstm) {
    source += "    c0 = torch.zeros([" + states + ", x.size(0), " + std::to_string(hidden) +
              "], dtype=x.dtype, device=x.device)\n";
    source += "    out, hn, cn = torch.lstm(x, [h0, c0], self.flat, " + args;
  } else {
    source += "    out, hn = " + std::string(r.op) + "(x, h0, self.flat, " + args;
  }
  source += "    return out\n";
  net.define(source);
  const at::Tensor xs = at::randn({128, 16, features});
  const std::vector<at::Tensor> expected = eager_square_grads(net, xs);
  ModuleHandle m = wrap(net);
  const LazySquares lazy(m.get(), xs);
  // What the calibration by real probes added beyond the simulation: the simulation's own
  // shortfall, as far as probes of a few samples see it (all of it, at these sizes).
  uint64_t beyond = 0;
  {
    koila_plan* plan = nullptr;
    ASSERT_EQ(koila_plan_new(&plan, lazy.loss.get(), KOILA_MODE_TRAINING), nullptr);
    koila_timeline* timeline = nullptr;
    ASSERT_EQ(koila_plan_timeline(&timeline, plan, /*unsplit=*/1), nullptr);
    EXPECT_EQ(koila_timeline_part(timeline, KOILA_PART_BEYOND_SIMULATION, &beyond), nullptr);
    koila_timeline_free(timeline);
    koila_plan_free(plan);
  }
  const auto [estimated, measured] = simulated_backward(lazy.loss.get());
  const double error = (static_cast<double>(estimated) - static_cast<double>(measured)) / static_cast<double>(measured);
  // PyTorch 2.x's CPU trains an LSTM without projections through oneDNN, whose workspace
  // the simulation cannot show: there the calibration makes it up, and the estimate is held
  // to koila's margin only.
  const bool onednn = lstm && r.projection == 0 && at::hasMKLDNN() &&
                      c10::Dispatcher::singleton().findSchema({"aten::mkldnn_rnn_layer", ""}).has_value();
  if (onednn) {
    EXPECT_GE(static_cast<double>(estimated) * (1 + koila::kMargin), static_cast<double>(measured))
        << "estimated " << estimated << ", measured " << measured;
  } else {
    EXPECT_LE(std::abs(error), 0.01) << "estimated " << estimated << ", measured " << measured;
    EXPECT_LE(static_cast<double>(beyond), 0.01 * static_cast<double>(measured))
        << "the simulation alone was short by " << beyond << " of " << measured << " bytes";
  }
  std::printf("[ recurrent ] %s: training estimate %+.2f%% of the measured peak, %.1f%% of it calibrated%s\n", r.name,
              100 * error, 100 * static_cast<double>(beyond) / static_cast<double>(measured),
              onednn ? " (oneDNN's LSTM)" : "");
  expect_close(grads(net), expected, 1e-4, "koila vs eager");

  // Read without gradients, where the simulation of an LSTM keeps LibTorch's composite.
  const PlanInfo read = plan_of(lazy.out.get(), KOILA_MODE_FORWARD);
  const uint64_t before = current_cpu();
  koila_status_free(koila_memory_reset_peak("cpu"));
  koila_tensor* value = nullptr;
  ASSERT_EQ(koila_eval(&value, lazy.out.get()), nullptr);
  koila_tensor_free(value);
  const double read_estimate = static_cast<double>(read.full_peak - before);
  const double read_measured = static_cast<double>(peak_cpu() - before);
  const double read_error = (read_estimate - read_measured) / read_measured;
  if (onednn) {  // oneDNN's LSTM without gradients too
    EXPECT_GE(read_estimate * (1 + koila::kMargin), read_measured)
        << "forward: estimated " << read_estimate << ", measured " << read_measured << "\n"
        << read.text;
  } else {
    EXPECT_LE(std::abs(read_error), 0.01)
        << "forward: estimated " << read_estimate << ", measured " << read_measured << "\n"
        << read.text;
  }
  std::printf("[ recurrent ] %s: forward estimate %+.2f%% of the measured peak\n", r.name, 100 * read_error);
}

INSTANTIATE_TEST_SUITE_P(Modules, RecurrentSimulation,
                         ::testing::Values(Recurrent{"lstm_2_layers", "torch.lstm", 4, 2, false, true},
                                           Recurrent{"lstm_bidirectional_no_bias", "torch.lstm", 4, 2, true, false},
                                           Recurrent{"lstm_projection", "torch.lstm", 4, 2, false, true, 24},
                                           Recurrent{"gru_bidirectional", "torch.gru", 3, 2, true, true},
                                           Recurrent{"rnn_tanh", "torch.rnn_tanh", 1, 1, false, true},
                                           Recurrent{"rnn_relu_3_layers", "torch.rnn_relu", 1, 3, false, false}),
                         [](const ::testing::TestParamInfo<Recurrent>& info) { return std::string(info.param.name); });

// Swin's shifted windows roll two dims at once; LibTorch 1.13 has no Meta kernel for roll,
// so a Swin Transformer fell back to measured probes. Its CPU kernel rolls one dim at a
// time and holds the intermediate: the simulation counts it.
TEST(Modules, RollIsSimulated) {
  BudgetGuard restore;
  const at::Tensor w = at::randn({6, 5}, at::kDouble).requires_grad_(true);
  torch::jit::Module roll = scripted::module("Roll2", {{"w", w}}, {},
                                             "def forward(self, x):\n"
                                             "    return torch.roll(x * self.w, (1, -2), (1, 2))\n");
  const at::Tensor xs = at::randn({64, 6, 5}, at::kDouble);
  Handle x = koila_models::lazy(xs, 0);
  ModuleHandle m = wrap(roll);
  Handle out = forward(m.get(), {x.get()});
  Handle squares = CALL(koila_mul, out.get(), out.get());
  Handle loss = CALL(koila_sum, squares.get(), nullptr, 0, 0);
  const auto [estimated, measured] = simulated_backward(loss.get());
  const double error = (static_cast<double>(estimated) - static_cast<double>(measured)) / static_cast<double>(measured);
  EXPECT_LE(std::abs(error), 0.05) << "estimated " << estimated << ", measured " << measured;
  const at::Tensor expected = (2 * xs * xs * w).sum(0);  // roll only moves elements
  EXPECT_TRUE(at::allclose(param_list(roll)[0].grad(), expected, 1e-9, 1e-9));
}

// The interpreter's traceback quotes source lines after the failing call ("# partition
// windows" in Swin); the complaint is LibTorch's error, not one of those lines.
TEST(Modules, ComplaintsQuoteTheErrorNotTheSource) {
  const std::runtime_error traceback(
      "The following operation failed in the TorchScript interpreter.\n"
      "Traceback of TorchScript, original code (most recent call last):\n"
      "  File \"swin_transformer.py\", line 143, in shifted_window_attention\n"
      "        x = torch.roll(x, shifts=(-shift_size[0], -shift_size[1]), dims=(1, 2))\n"
      "            ~~~~~~~~~~ <--- HERE\n"
      "\n"
      "    # partition windows\n"
      "    num_windows = (pad_H // window_size[0]) * (pad_W // window_size[1])\n"
      "RuntimeError: Could not run 'aten::roll' with arguments from the 'Meta' backend. This could be because "
      "the operator doesn't exist for this backend, or was omitted during the selective/custom build process.\n");
  EXPECT_EQ(koila::torch_complaint(traceback), "Could not run 'aten::roll' with arguments from the 'Meta' backend.");
}
