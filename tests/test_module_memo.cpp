// The inference memo of module calls (src/module/inference_memo.h): a module call is
// inferred (meta runs, real-sample probe) once per structure of call, not once per step; a
// changed training flag, another input structure or a reloaded module is inferred anew; a
// module whose samples mix stays refused however often its inference is reused; a result
// whose shape follows the batch size some other way is inferred at every call; results and
// gradients equal plain LibTorch's throughout.
#include <torch/csrc/jit/api/module.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "helpers.h"
#include "module/module.h"
#include "module_helpers.h"
#include "plan/planner.h"
#include "scripted_models.h"

using namespace koila_test;

namespace {

uint64_t inferences() { return koila::testing::module_inferences(); }

// The lazy mean of the squared result, for a backward.
Handle square_mean(const koila_tensor* y) {
  Handle sq = CALL(koila_mul, y, y);
  return CALL(koila_mean, sq.get(), nullptr, 0, 0);
}

}  // namespace

TEST(ModuleMemo, InfersOncePerStructureAndAgainForAnotherTrainingFlag) {
  BudgetGuard restore;
  torch::jit::Module bn = scripted::batch_norm(4);
  ModuleHandle m = wrap(bn);
  const uint64_t start = inferences();
  for (int step = 0; step < 5; ++step) {
    Handle x = koila_models::lazy(at::randn({64, 8}), 0);
    Handle y = forward(m.get(), {x.get()});
    EXPECT_EQ(batch_dim_of(y.get()), 0);
    EXPECT_TRUE(node(y.get()).couples.empty()) << node(y.get()).couples;
    EXPECT_NE(node(y.get()).stats_couples.find("BatchNorm layers in training"), std::string::npos);
  }
  EXPECT_EQ(inferences() - start, 1u) << "five calls of one structure";

  // Evaluating: another structure, inferred once; its verdict differs (it keeps samples apart).
  ASSERT_OK(koila_module_train(m.get(), 0));
  for (int step = 0; step < 3; ++step) {
    Handle x = koila_models::lazy(at::randn({64, 8}), 0);
    Handle y = forward(m.get(), {x.get()});
    EXPECT_TRUE(node(y.get()).couples.empty()) << node(y.get()).couples;
    EXPECT_TRUE(node(y.get()).stats_couples.empty()) << node(y.get()).stats_couples;
  }
  EXPECT_EQ(inferences() - start, 2u);

  // Training again: the first structure's findings, not the evaluating ones.
  ASSERT_OK(koila_module_train(m.get(), 1));
  {
    Handle x = koila_models::lazy(at::randn({64, 8}), 0);
    Handle y = forward(m.get(), {x.get()});
    EXPECT_FALSE(node(y.get()).stats_couples.empty());
  }
  EXPECT_EQ(inferences() - start, 2u);

  // Another batch size of the same structure: one meta run confirms the rule; no inference.
  {
    Handle x = koila_models::lazy(at::randn({40, 8}), 0);
    Handle y = forward(m.get(), {x.get()});
    EXPECT_EQ(shape_of(y.get()), (std::vector<int64_t>{40, 8}));
    EXPECT_EQ(batch_dim_of(y.get()), 0);
  }
  EXPECT_EQ(inferences() - start, 2u);

  // Batches of 2 and of 1 are probed differently: each its own structure.
  for (int64_t batch : {2, 1, 2, 1}) {
    Handle x = koila_models::lazy(at::randn({batch, 8}), 0);
    Handle y = forward(m.get(), {x.get()});
    EXPECT_EQ(shape_of(y.get()), (std::vector<int64_t>{batch, 8}));
  }
  EXPECT_EQ(inferences() - start, 4u);

  // The batch along another dim of the input: another structure.
  {
    torch::jit::Module t = scripted::module("T", {}, {{"scale", at::full({1}, 2.0)}},
                                            "def forward(self, x):\n    return torch.tanh(x) * self.scale\n");
    ModuleHandle tm = wrap(t);
    const uint64_t before = inferences();
    Handle a = koila_models::lazy(at::randn({6, 8}), 0);
    Handle ya = forward(tm.get(), {a.get()});
    Handle b = koila_models::lazy(at::randn({8, 8}), 1);
    Handle yb = forward(tm.get(), {b.get()});
    EXPECT_EQ(batch_dim_of(yb.get()), 1);
    EXPECT_EQ(inferences() - before, 2u);
  }

  // A module loaded again (here: another handle on a clone) starts with nothing remembered.
  ModuleHandle again = wrap(bn.clone());
  const uint64_t before = inferences();
  Handle x = koila_models::lazy(at::randn({64, 8}), 0);
  Handle y = forward(again.get(), {x.get()});
  EXPECT_EQ(inferences() - before, 1u);
}

// Calls share the constant nodes of the module's tensors (LoadedModule::state_nodes) while
// each still stands for its tensor; a tensor the module replaced gets a node of its own,
// and the call computes with it.
TEST(ModuleMemo, CallsShareTheNodesOfTheModulesTensorsWhileTheyStand) {
  BudgetGuard restore;
  torch::jit::Module bn = scripted::batch_norm(4);
  ModuleHandle m = wrap(bn);
  const at::Tensor xs = at::randn({16, 8});
  Handle x1 = koila_models::lazy(xs, 0), x2 = koila_models::lazy(xs, 0);
  Handle y1 = forward(m.get(), {x1.get()}), y2 = forward(m.get(), {x2.get()});
  const koila::Node &a = node(y1.get()), &b = node(y2.get());
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  ASSERT_GT(a.inputs.size(), 2u) << "the input and the module's tensors";
  EXPECT_NE(a.inputs[0].get(), b.inputs[0].get()) << "the lazy inputs are the caller's";
  for (size_t i = 1; i < a.inputs.size(); ++i) EXPECT_EQ(a.inputs[i].get(), b.inputs[i].get()) << "tensor " << i;

  // The module gets a new weight (another tensor, the same shape), as a caller may set it.
  at::Tensor old_weight = bn.attr("weight").toTensor();
  const at::Tensor new_weight = (old_weight.detach() * 3 + 1).requires_grad_(true);
  bn.register_parameter("weight", new_weight, /*is_buffer=*/false);

  Handle x3 = koila_models::lazy(xs, 0);
  Handle y3 = forward(m.get(), {x3.get()});
  const koila::Node& c = node(y3.get());
  ASSERT_EQ(c.inputs.size(), b.inputs.size());
  size_t replaced = 0;
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    if (c.inputs[i]->value.is_same(new_weight)) {
      ++replaced;
      EXPECT_NE(c.inputs[i].get(), b.inputs[i].get()) << "a new node for the new weight";
      EXPECT_TRUE(b.inputs[i]->value.is_same(old_weight));
    } else {
      EXPECT_EQ(c.inputs[i].get(), b.inputs[i].get()) << "tensor " << i;
    }
  }
  EXPECT_EQ(replaced, 1u);
  // The call computes with the new weight: as the same module run by LibTorch.
  const at::Tensor expected = bn.forward({xs}).toTensor();
  EXPECT_TRUE(at::allclose(to_aten(y3.get()), expected.detach()));
  EXPECT_FALSE(at::allclose(to_aten(y2.get()), expected.detach()));
}

TEST(ModuleMemo, AModuleThatMixesSamplesIsRefusedAfterAThousandCachedSteps) {
  BudgetGuard restore;
  torch::jit::Module mix = scripted::module("Mix", {{"w", at::randn({8})}}, {},
                                            "def forward(self, x):\n    return (x - x.mean(0, True)) * self.w\n");
  ModuleHandle m = wrap(mix);
  const at::Tensor w = mix.attr("w").toTensor();
  const uint64_t start = inferences();
  for (int step = 0; step < 1000; ++step) {
    const at::Tensor xs = at::randn({16, 8});
    Handle x = koila_models::lazy(xs, 0);
    Handle y = forward(m.get(), {x.get()});
    ASSERT_NE(node(y.get()).couples.find("(module Mix) mixes samples"), std::string::npos)
        << "step " << step << ": " << node(y.get()).couples;
    if (step % 100 != 99) continue;
    // Too little memory for the whole batch: refused, naming the module, gradients untouched.
    Handle loss = square_mean(y.get());
    w.mutable_grad() = at::Tensor();
    const uint64_t need = koila::estimate_extra(loss->node, koila::RunMode::Training, -1);
    ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + need / 2));
    auto [code, message] = outcome(koila_backward(loss.get()));
    EXPECT_EQ(code, KOILA_ERROR_NOT_SPLITTABLE) << message;
    EXPECT_NE(message.find("(module Mix) mixes samples"), std::string::npos) << message;
    EXPECT_FALSE(w.grad().defined());
    // With room, the whole batch at once: the gradient plain LibTorch computes.
    ASSERT_OK(koila_set_memory_budget("cpu", 0));
    ASSERT_OK(koila_backward(loss.get()));
    const at::Tensor wr = w.detach().clone().requires_grad_(true);
    const at::Tensor yr = (xs - xs.mean(0, true)) * wr;
    (yr * yr).mean().backward();
    EXPECT_TRUE(at::allclose(w.grad(), wr.grad(), 1e-5, 1e-6)) << "step " << step;
  }
  EXPECT_EQ(inferences() - start, 1u);
}

TEST(ModuleMemo, ResultsAndGradientsEqualPlainLibTorchAcrossBatchSizes) {
  BudgetGuard restore;
  torch::jit::Module cnn = scripted::cnn(3);
  torch::jit::Module plain = scripted::cnn(3);  // the same parameters, for LibTorch alone
  ModuleHandle m = wrap(cnn);
  const uint64_t start = inferences();
  const int64_t batches[] = {8, 8, 5, 8, 3, 8, 6, 8, 5, 8};
  for (size_t step = 0; step < std::size(batches); ++step) {
    const int64_t batch = batches[step];
    const at::Tensor xs = at::randn({batch, 3, 32, 32});
    Handle x = koila_models::lazy(xs, 0);
    Handle y = forward(m.get(), {x.get()});
    ASSERT_EQ(shape_of(y.get()), (std::vector<int64_t>{batch, 10}));
    ASSERT_TRUE(node(y.get()).couples.empty()) << node(y.get()).couples;
    const at::Tensor expected = plain.forward({xs}).toTensor();
    EXPECT_TRUE(at::allclose(to_aten(y.get()), expected, 1e-4, 1e-5)) << "step " << step;
    // Training, split in chunks of 2 on odd steps, unsplit on even ones.
    Handle loss = square_mean(y.get());
    clear_grads(cnn);
    clear_grads(plain);
    if (step % 2) budget_for_chunk(loss.get(), koila::RunMode::Training, 2);
    ASSERT_OK(koila_backward(loss.get()));
    ASSERT_OK(koila_set_memory_budget("cpu", 0));
    (expected * expected).mean().backward();
    const std::vector<at::Tensor> got = grads_of(cnn), want = grads_of(plain);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(at::allclose(got[i], want[i], 1e-4, 1e-6)) << "step " << step << ", parameter " << i;
  }
  // Batch sizes 5, 6 and 8 share the structure (3 or more samples probed), 3 too: one inference.
  EXPECT_EQ(inferences() - start, 1u);
}

TEST(ModuleMemo, AResultThatFollowsTheBatchSomeOtherWayIsInferredAtEveryCall) {
  BudgetGuard restore;
  // Flattening: the result has batch x 8 elements, no dim carries the batch.
  torch::jit::Module flat = scripted::module("Flat", {{"w", at::randn({8})}}, {},
                                             "def forward(self, x):\n    return (x * self.w).reshape(-1)\n");
  ModuleHandle f = wrap(flat);
  uint64_t start = inferences();
  for (int step = 0; step < 3; ++step) {
    Handle x = koila_models::lazy(at::randn({6, 8}), 0);
    Handle y = forward(f.get(), {x.get()});
    EXPECT_NE(node(y.get()).couples.find("no single dim"), std::string::npos) << node(y.get()).couples;
  }
  EXPECT_EQ(inferences() - start, 3u);

  // The first six samples: at batch 4 (and 2) the result follows the batch along dim 0,
  // at batch 8 it does not. The rule found at 4 is checked at 8, not trusted.
  torch::jit::Module head =
      scripted::module("Head", {{"w", at::randn({8})}}, {}, "def forward(self, x):\n    return x[:6] * self.w\n");
  ModuleHandle h = wrap(head);
  start = inferences();
  for (int64_t batch : {4, 4, 8, 8}) {
    const at::Tensor xs = at::randn({batch, 8});
    Handle x = koila_models::lazy(xs, 0);
    Handle y = forward(h.get(), {x.get()});
    const int64_t rows = std::min<int64_t>(batch, 6);
    ASSERT_EQ(shape_of(y.get()), (std::vector<int64_t>{rows, 8})) << "batch " << batch;
    if (batch == 4) {
      EXPECT_EQ(batch_dim_of(y.get()), 0);
      EXPECT_TRUE(node(y.get()).couples.empty()) << node(y.get()).couples;
    } else {
      EXPECT_NE(node(y.get()).couples.find("no single dim"), std::string::npos) << node(y.get()).couples;
    }
    EXPECT_TRUE(at::allclose(to_aten(y.get()), xs.slice(0, 0, 6) * head.attr("w").toTensor().detach(), 1e-6, 1e-7));
  }
  // Batch 4 once (then remembered), batch 8 twice (never remembered).
  EXPECT_EQ(inferences() - start, 3u);
}

// The planner remembers estimates per structure of graph (plan/memo.h). Two modules of one
// class name and one set of parameter shapes but other code (two files' `Net`, a model and its
// next version) are two structures: the second is simulated, not estimated by the first's
// figures. Here the second keeps 5 activations a layer where the first keeps 1: planned after
// the first has run, its plan must still hold its run within the budget.
TEST(ModuleMemo, ModulesOfOneClassNameButOtherCodeAreEstimatedApart) {
  BudgetGuard restore;
  const int64_t width = 64;
  const auto make = [width](bool heavy) {
    at::manual_seed(3);
    std::vector<scripted::Tensor> params;
    std::string source = "def forward(self, x):\n    h = x\n";
    for (int i = 0; i < 6; ++i) {
      const std::string w = "w" + std::to_string(i);
      params.push_back({w, scripted::init({width, width}, 1.0 / std::sqrt(static_cast<double>(width)))});
      source += "    h = torch.tanh(torch.matmul(h, self." + w + "))\n";
      if (heavy) source += "    h = torch.sigmoid(torch.exp(torch.tanh(h)) * h)\n";
    }
    source += "    return h\n";
    return scripted::module("Net", params, {}, source);
  };
  const at::Tensor xs = at::randn({256, 32, width});
  uint64_t light_estimate = 0;
  for (const bool heavy : {false, true}) {
    SCOPED_TRACE(heavy ? "the heavy Net, after the light one" : "the light Net");
    torch::jit::Module net = make(heavy);
    ModuleHandle m = wrap(net);
    Handle x = koila_models::lazy(xs, 0);
    Handle y = forward(m.get(), {x.get()});
    Handle loss = square_mean(y.get());
    ASSERT_OK(koila_set_memory_budget("cpu", 0));
    const uint64_t estimate = koila::estimate_extra(loss->node, koila::RunMode::Training, -1);
    if (!heavy) light_estimate = estimate;
    if (heavy) {
      EXPECT_GT(estimate, light_estimate * 2) << "the heavy Net estimated with the light one's figures";
    }
    // Under a budget its estimate fits unsplit (with koila's margin): the run stays within it.
    const uint64_t budget = current_cpu() + static_cast<uint64_t>(static_cast<double>(estimate) * 1.12);
    ASSERT_OK(koila_set_memory_budget("cpu", budget));
    koila_status_free(koila_memory_reset_peak("cpu"));
    ASSERT_OK(koila_backward(loss.get()));
    EXPECT_LE(peak_cpu(), budget);
    clear_grads(net);
  }
}
