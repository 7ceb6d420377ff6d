// Modules with several results (koila_module_forward_all) on TorchScript modules: tuples,
// dicts and None flattened in order, one run of the module for all its results, each result
// with its own batch dim (an LSTM's h and c carry the batch in dim 1), training steps whole
// and split equal to eager LibTorch's computation of the same functions, and what is
// refused. Exported programs with several results: test_exported.cpp (heads, lstm_full).
#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

#include "corpus/corpus.h"
#include "helpers.h"
#include "models.h"
#include "module/module.h"
#include "module_helpers.h"
#include "scripted_models.h"

using namespace koila_test;

namespace {

// Returns (a, None, {"b": b, "c": c}) over one trunk, and counts its runs in `seen`.
torch::jit::Module heads(uint64_t seed) {
  at::manual_seed(seed);
  return scripted::module("Heads",
                          {{"w", scripted::init({12, 16}, 0.3)},
                           {"wa", scripted::init({16, 5}, 0.3)},
                           {"wb", scripted::init({16, 3}, 0.3)},
                           {"wc", scripted::init({16, 2}, 0.3)}},
                          {{"seen", at::zeros({1})}},
                          "def forward(self, x):\n"
                          "    self.seen.add_(1.0)\n"
                          "    h = torch.tanh(torch.matmul(x, self.w))\n"
                          "    b = {'b': torch.matmul(h, self.wb), 'c': torch.matmul(h, self.wc)}\n"
                          "    return (torch.matmul(h, self.wa), None, b)\n");
}

// The same functions computed by eager LibTorch on the module's own parameters.
std::vector<at::Tensor> heads_by_hand(const torch::jit::Module& m, const at::Tensor& x) {
  const at::Tensor h = at::tanh(at::matmul(x, m.attr("w").toTensor()));
  return {at::matmul(h, m.attr("wa").toTensor()), at::matmul(h, m.attr("wb").toTensor()),
          at::matmul(h, m.attr("wc").toTensor())};
}

// sum over the results of mean(r * r), lazily.
Handle squares_loss(const std::vector<const koila_tensor*>& results) {
  Handle loss;
  for (const koila_tensor* r : results) {
    Handle sq = CALL(koila_mul, r, r);
    Handle term = CALL(koila_mean, sq.get(), nullptr, 0, 0);
    loss = loss ? CALL(koila_add, loss.get(), term.get()) : std::move(term);
  }
  return loss;
}

at::Tensor squares_loss_by_hand(const std::vector<at::Tensor>& results) {
  at::Tensor loss = at::zeros({});
  for (const at::Tensor& r : results) loss = loss + (r * r).mean();
  return loss;
}

void expect_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want, double tolerance,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].defined() && want[i].defined()) << what << " " << i;
    EXPECT_TRUE(at::allclose(got[i], want[i], tolerance, tolerance))
        << what << " " << i << ": max diff " << (got[i] - want[i]).abs().max().item<double>();
  }
}

float seen(const torch::jit::Module& m) { return m.attr("seen").toTensor().item<float>(); }

TEST(Results, TheCountComesFirstAndRunsNothing) {
  const torch::jit::Module module = heads(1);
  ModuleHandle m = wrap(module);
  const at::Tensor xs = at::randn({8, 12});
  Handle x = from_aten(xs);  // concrete: the module would run at once
  koila_tensor* input = x.get();
  size_t count = 0;
  auto [code, message] = outcome(koila_module_forward_all(nullptr, 0, &count, m.get(), &input, 1));
  EXPECT_EQ(code, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(count, 4u);
  EXPECT_NE(message.find("returns 4 results"), std::string::npos) << message;
  EXPECT_EQ(seen(module), 0.0f) << "asking for the count ran the module";
  // Too small a capacity: the count again, no handle written.
  koila_tensor* out[4] = {nullptr, nullptr, nullptr, nullptr};
  std::tie(code, message) = outcome(koila_module_forward_all(out, 3, &count, m.get(), &input, 1));
  EXPECT_EQ(code, KOILA_ERROR_INVALID_ARGUMENT) << message;
  EXPECT_EQ(out[0], nullptr);
  EXPECT_EQ(seen(module), 0.0f);

  // Computed at once: one run for all four, None as NULL, values as LibTorch's.
  std::vector<Handle> results = forward_all(m.get(), {input});
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(seen(module), 1.0f);
  EXPECT_FALSE(results[1]) << "the None entry";
  const std::vector<at::Tensor> want = heads_by_hand(module, xs);
  expect_close({to_aten(results[0].get()), to_aten(results[2].get()), to_aten(results[3].get())}, want, 1e-6,
               "eager result");
  // An eager result records autograd, as LibTorch's would.
  EXPECT_FALSE(node(results[2].get()).lazy());
  EXPECT_TRUE(node(results[2].get()).value.requires_grad());
}

// A training step on a lazy batch, whole and in chunks: the results, the loss over all of
// them and every gradient equal eager LibTorch's; the module runs once per evaluation.
TEST(Results, TrainingStepOverEveryResultEqualsEagerLibTorch) {
  for (bool split : {false, true}) {
    SCOPED_TRACE(split ? "split" : "whole");
    const torch::jit::Module module = heads(2);
    const at::Tensor xs = at::randn({64, 12});
    clear_grads(module);
    squares_loss_by_hand(heads_by_hand(module, xs)).backward();
    const std::vector<at::Tensor> want = grads_of(module);
    clear_grads(module);

    ModuleHandle m = wrap(module);
    Handle x = koila_models::lazy(xs, 0);
    std::vector<Handle> results = forward_all(m.get(), {x.get()});
    ASSERT_EQ(results.size(), 4u);
    ASSERT_FALSE(results[1]);
    for (size_t k : {0, 2, 3}) EXPECT_EQ(batch_dim_of(results[k].get()), 0) << "result " << k;
    EXPECT_EQ(seen(module), 0.0f) << "building the call ran the module for real";
    Handle loss = squares_loss({results[0].get(), results[2].get(), results[3].get()});
    BudgetGuard budget;
    if (split) {
      const uint64_t b = koila_corpus::budget_for_chunks(loss.get(), KOILA_MODE_TRAINING, 2, 256);
      ASSERT_GT(b, 0u) << "no budget splits the run";
      ASSERT_OK(koila_set_memory_budget("cpu", b));
      EXPECT_GE(plan_of(loss.get(), KOILA_MODE_TRAINING).chunks, 2);
    }
    ASSERT_OK(koila_backward(loss.get()));
    koila_status_free(koila_set_memory_budget("cpu", 0));
    expect_close(grads_of(module), want, 1e-5, "gradient");
    if (!split) {
      EXPECT_EQ(seen(module), 1.0f) << "one run of the module for its three results";
    }
    const std::vector<at::Tensor> values = heads_by_hand(module, xs);
    expect_close({to_aten(results[0].get()), to_aten(results[2].get()), to_aten(results[3].get())}, values, 1e-5,
                 "result");
  }
}

// torch.lstm's whole return, (output, (h, c)): h and c carry the batch in dim 1, and a split
// backward through all three equals LibTorch's.
TEST(Results, LstmFullReturnCarriesTheBatchInEachResultsOwnDim) {
  at::manual_seed(4);
  std::vector<scripted::Tensor> params;
  c10::List<at::Tensor> flat;
  for (int64_t layer = 0; layer < 2; ++layer) {
    const int64_t in = layer == 0 ? 4 : 6;
    for (auto [name, shape] : {std::pair<std::string, std::vector<int64_t>>{"w_ih", {24, in}},
                               {"w_hh", {24, 6}},
                               {"b_ih", {24}},
                               {"b_hh", {24}}})
      params.push_back({name + std::to_string(layer), scripted::init(shape, 0.3)});
  }
  torch::jit::Module lstm = scripted::module("LstmFull", params, {},
                                             "def forward(self, x):\n"
                                             "    h0 = torch.zeros([2, x.size(0), 6], dtype=x.dtype, device=x.device)\n"
                                             "    w = [self.w_ih0, self.w_hh0, self.b_ih0, self.b_hh0,\n"
                                             "         self.w_ih1, self.w_hh1, self.b_ih1, self.b_hh1]\n"
                                             "    out, hn, cn = torch.lstm(x, [h0, h0], w, True, 2, 0.0, False, "
                                             "False, True)\n"
                                             "    return out, (hn, cn)\n");
  const at::Tensor xs = at::randn({32, 5, 4});
  // LibTorch's own LSTM on the module's parameters.
  std::vector<at::Tensor> weights;  // registered in aten::lstm's order
  for (const at::Tensor& p : lstm.parameters()) weights.push_back(p);
  const at::Tensor h0 = at::zeros({2, 32, 6});
  auto [out, hn, cn] = at::lstm(xs, {h0, h0}, weights, true, 2, 0.0, false, false, true);
  squares_loss_by_hand({out, hn, cn}).backward();
  const std::vector<at::Tensor> want = grads_of(lstm);
  const std::vector<at::Tensor> values{out.detach(), hn.detach(), cn.detach()};
  clear_grads(lstm);

  ModuleHandle m = wrap(lstm);
  Handle x = koila_models::lazy(xs, 0);
  std::vector<Handle> results = forward_all(m.get(), {x.get()});
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(batch_dim_of(results[0].get()), 0);
  EXPECT_EQ(batch_dim_of(results[1].get()), 1);
  EXPECT_EQ(batch_dim_of(results[2].get()), 1);
  Handle loss = squares_loss({results[0].get(), results[1].get(), results[2].get()});
  BudgetGuard budget;
  const uint64_t b = koila_corpus::budget_for_chunks(loss.get(), KOILA_MODE_TRAINING, 2, 256);
  ASSERT_GT(b, 0u) << "no budget splits the run";
  ASSERT_OK(koila_set_memory_budget("cpu", b));
  ASSERT_OK(koila_backward(loss.get()));
  koila_status_free(koila_set_memory_budget("cpu", 0));
  expect_close(grads_of(lstm), want, 1e-5, "gradient");
  expect_close({to_aten(results[0].get()), to_aten(results[1].get()), to_aten(results[2].get())}, values, 1e-5,
               "result");
}

// A result that does not carry the batch (a sum over it) mixes samples: the call runs whole,
// and a budget that needs a split says which result is the reason.
TEST(Results, AResultWithoutTheBatchMakesTheWholeCallCouple) {
  at::manual_seed(5);
  const torch::jit::Module module = scripted::module("Pooled", {{"w", scripted::init({12, 8}, 0.3)}}, {},
                                                     "def forward(self, x):\n"
                                                     "    y = torch.tanh(torch.matmul(x, self.w))\n"
                                                     "    return y, y.sum(0)\n");
  const at::Tensor xs = at::randn({64, 12});
  ModuleHandle m = wrap(module);
  Handle x = koila_models::lazy(xs, 0);
  std::vector<Handle> results = forward_all(m.get(), {x.get()});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(batch_dim_of(results[1].get()), -1);
  const at::Tensor y = at::tanh(at::matmul(xs, module.attr("w").toTensor())).detach();
  EXPECT_TRUE(at::allclose(to_aten(results[1].get()), y.sum(0), 1e-5, 1e-5));
  Handle loss = squares_loss({results[0].get(), results[1].get()});
  BudgetGuard budget;
  const PlanInfo whole = plan_of(loss.get(), KOILA_MODE_TRAINING);
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + (whole.full_peak - current_cpu()) / 4));
  const auto [code, message] = outcome(koila_backward(loss.get()));
  EXPECT_EQ(code, KOILA_ERROR_NOT_SPLITTABLE) << message;
  EXPECT_NE(message.find("its result 1"), std::string::npos) << message;
}

TEST(Results, OneTensorGivesOneAndOtherKindsAreRefused) {
  at::manual_seed(6);
  const at::Tensor w = scripted::init({12, 3}, 0.3);
  Handle x = koila_models::lazy(at::randn({8, 12}), 0);
  koila_tensor* input = x.get();

  ModuleHandle one = wrap(scripted::module("One", {{"w", w}}, {},
                                           "def forward(self, x):\n"
                                           "    return torch.matmul(x, self.w)\n"));
  std::vector<Handle> single = forward_all(one.get(), {input});
  ASSERT_EQ(single.size(), 1u);
  Handle direct = forward(one.get(), {input});
  EXPECT_TRUE(at::equal(to_aten(single[0].get()), to_aten(direct.get())));

  ModuleHandle pair = wrap(scripted::module("Pair", {{"w", w}}, {},
                                            "def forward(self, x):\n"
                                            "    y = torch.matmul(x, self.w)\n"
                                            "    return y, y + 1\n"));
  koila_tensor* out = nullptr;
  auto [code, message] = outcome(koila_module_forward(&out, pair.get(), &input, 1));
  EXPECT_EQ(code, KOILA_ERROR_UNSUPPORTED);
  EXPECT_NE(message.find("koila_module_forward_all"), std::string::npos) << message;

  ModuleHandle with_int = wrap(scripted::module("WithInt", {{"w", w}}, {},
                                                "def forward(self, x):\n"
                                                "    return torch.matmul(x, self.w), 3\n"));
  size_t count = 0;
  koila_tensor* outs[2] = {nullptr, nullptr};
  std::tie(code, message) = outcome(koila_module_forward_all(outs, 2, &count, with_int.get(), &input, 1));
  EXPECT_EQ(code, KOILA_ERROR_UNSUPPORTED);
  EXPECT_NE(message.find("int"), std::string::npos) << message;
  EXPECT_EQ(outs[0], nullptr);

  std::tie(code, message) = outcome(koila_module_forward_all(outs, 2, nullptr, pair.get(), &input, 1));
  EXPECT_EQ(code, KOILA_ERROR_INVALID_ARGUMENT) << message;
  std::tie(code, message) = outcome(koila_module_forward_all(nullptr, 2, &count, pair.get(), &input, 1));
  EXPECT_EQ(code, KOILA_ERROR_INVALID_ARGUMENT) << message;
}

// Calls of one structure are inferred once, every result included.
TEST(Results, CallsOfOneStructureAreInferredOnce) {
  const torch::jit::Module module = heads(7);
  ModuleHandle m = wrap(module);
  Handle x1 = koila_models::lazy(at::randn({16, 12}), 0);
  std::vector<Handle> first = forward_all(m.get(), {x1.get()});
  const uint64_t after_first = koila::testing::module_inferences();
  for (int step = 0; step < 5; ++step) {
    Handle x = koila_models::lazy(at::randn({16, 12}), 0);
    std::vector<Handle> again = forward_all(m.get(), {x.get()});
    ASSERT_EQ(again.size(), 4u);
  }
  EXPECT_EQ(koila::testing::module_inferences(), after_first);
}

}  // namespace
