// Issue 13, item 2: batch statistics per chunk (koila_set_batch_stats). Under
// KOILA_BATCH_STATS_PER_CHUNK a graph that batch norm in training couples only through its
// statistics splits; each chunk normalizes with its own, gradients are those of the chunks'
// losses weighted by their share (against eager LibTorch run chunk by chunk), and the
// running statistics end as one update with the whole batch's mean and unbiased variance
// (against the formula on the whole batch). Under EXACT (the default) the refusal names the
// option. Failed runs, retries after running out of memory included, leave the running
// statistics as they were. The real-model side (torchvision's batch-norm CNNs against
// PyTorch's own chunked run) is in tests/corpus.
#include <torch/csrc/jit/serialization/import.h>

#include <unistd.h>

#include "module/module.h"
#include "module_helpers.h"
#include "plan/memo.h"
#include "plan/planner.h"
#include "scripted_models.h"
#include "temp_dir.h"

using namespace koila_test;

namespace {

constexpr double kMomentum = 0.1, kEps = 1e-5;

// Sets the policy for a test and puts back the default after it.
struct PolicyGuard {
  explicit PolicyGuard(koila_batch_stats policy) {
    koila_status* s = koila_set_batch_stats(policy);
    EXPECT_EQ(s, nullptr) << koila_status_message(s);
    koila_status_free(s);
  }
  ~PolicyGuard() { koila_status_free(koila_set_batch_stats(KOILA_BATCH_STATS_EXACT)); }
};

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what, double rtol = 1e-5) {
  ASSERT_TRUE(got.defined()) << what << " is undefined";
  const double scale = want.abs().max().item<double>();
  const double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(diff, rtol * std::max(scale, 1.0)) << what << ": differs by " << diff << " (largest " << scale << ")";
}

// y = batch_norm(x) in training over a lazy batch of images [N, 3, 4, 4], loss = mean
// squared error against a lazy target; weight and bias require grad, the running
// statistics are the caller's tensors (shared with koila, updated in place).
struct BatchNormGraph {
  at::Tensor xs, ts, weight, bias, running_mean, running_var;
  Handle x, t, w, b, rm, rv, y, loss;

  explicit BatchNormGraph(int64_t batch) {
    at::manual_seed(7);
    xs = at::randn({batch, 3, 4, 4}) * 2 + 1;
    ts = at::randn({batch, 3, 4, 4});
    weight = (at::rand({3}) + 0.5).set_requires_grad(true);
    bias = at::randn({3}).set_requires_grad(true);
    running_mean = at::randn({3});
    running_var = at::rand({3}) + 0.5;
    x = koila_models::lazy(xs, 0);
    t = koila_models::lazy(ts, 0);
    w = koila_models::share(weight);
    b = koila_models::share(bias);
    rm = koila_models::share(running_mean);
    rv = koila_models::share(running_var);
    y = CALL(koila_batch_norm, x.get(), w.get(), b.get(), rm.get(), rv.get(), 1, kMomentum, kEps);
    loss = CALL(koila_mse_loss, y.get(), t.get(), KOILA_REDUCTION_MEAN);
  }

  // Eager LibTorch, chunk by chunk: each chunk normalized with its own statistics, its mean
  // loss weighted by its share of the batch. Returns the outputs; grads into *dw, *db.
  at::Tensor per_chunk(int64_t chunk, at::Tensor* dw, at::Tensor* db) const {
    const at::Tensor w2 = weight.detach().clone().requires_grad_(true);
    const at::Tensor b2 = bias.detach().clone().requires_grad_(true);
    const int64_t n = xs.size(0);
    std::vector<at::Tensor> outs;
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t len = std::min(chunk, n - start);
      const at::Tensor yc = at::batch_norm(xs.narrow(0, start, len), w2, b2, {}, {}, true, kMomentum, kEps, false);
      (at::mse_loss(yc, ts.narrow(0, start, len)) * (double(len) / double(n))).backward();
      outs.push_back(yc.detach());
    }
    if (dw) *dw = w2.grad();
    if (db) *db = b2.grad();
    return at::cat(outs);
  }

  // One update of (mean, var) with the whole batch's mean and unbiased variance.
  static std::pair<at::Tensor, at::Tensor> updated(const at::Tensor& mean, const at::Tensor& var,
                                                   const at::Tensor& data, double factor) {
    const at::Tensor d = data.to(at::kDouble);
    return {((1 - factor) * mean.to(at::kDouble) + factor * d.mean({0, 2, 3})).to(at::kFloat),
            ((1 - factor) * var.to(at::kDouble) + factor * d.var({0, 2, 3}, /*unbiased=*/true)).to(at::kFloat)};
  }
};

TEST(BatchStats, SetterRefusesUnknownPolicies) {
  for (int bad : {-1, 2, 99}) {
    auto [code, message] = outcome(koila_set_batch_stats(static_cast<koila_batch_stats>(bad)));
    EXPECT_EQ(code, KOILA_ERROR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(message.find("koila_set_batch_stats"), std::string::npos) << message;
    EXPECT_NE(message.find("policy"), std::string::npos) << message;
  }
}

// The default refuses, naming the option; the graph and its statistics stay untouched.
TEST(BatchStats, ExactRefusesToSplitAndNamesTheOption) {
  BudgetGuard restore;
  BatchNormGraph g(50);
  const at::Tensor rm0 = g.running_mean.clone();
  EXPECT_TRUE(node(g.y.get()).couples.empty()) << node(g.y.get()).couples;
  EXPECT_NE(node(g.y.get()).stats_couples.find("normalizes with statistics over the batch"), std::string::npos);
  budget_for_chunk(g.loss.get(), koila::RunMode::Training, 16);
  koila_plan* p = nullptr;
  auto [code, message] = outcome(koila_plan_new(&p, g.loss.get(), KOILA_MODE_TRAINING));
  EXPECT_EQ(code, KOILA_ERROR_NOT_SPLITTABLE) << message;
  EXPECT_NE(message.find("koila_batch_norm in training normalizes with statistics over the batch"), std::string::npos)
      << message;
  EXPECT_NE(message.find("koila_set_batch_stats(KOILA_BATCH_STATS_PER_CHUNK)"), std::string::npos) << message;
  auto [run_code, run_message] = outcome(koila_backward(g.loss.get()));
  EXPECT_EQ(run_code, KOILA_ERROR_NOT_SPLITTABLE) << run_message;
  EXPECT_FALSE(g.weight.grad().defined());
  EXPECT_TRUE(at::equal(g.running_mean, rm0));
}

// Chunks of 16, 16, 16 and 2: gradients as eager LibTorch chunk by chunk, one update of the
// running statistics with the whole batch's; then a chunked read of y makes one more.
TEST(BatchStats, PerChunkGradientsAndOneUpdateOfTheRunningStatistics) {
  BudgetGuard restore;
  PolicyGuard policy(KOILA_BATCH_STATS_PER_CHUNK);
  BatchNormGraph g(50);
  const at::Tensor rm0 = g.running_mean.clone(), rv0 = g.running_var.clone();
  budget_for_chunk(g.loss.get(), koila::RunMode::Training, 16);
  const PlanInfo plan = plan_of(g.loss.get(), KOILA_MODE_TRAINING);
  ASSERT_EQ(plan.chunk, 16) << plan.text;
  EXPECT_EQ(plan.chunks, 4) << plan.text;
  EXPECT_NE(plan.text.find("Batch statistics: per chunk (KOILA_BATCH_STATS_PER_CHUNK; koila_batch_norm"),
            std::string::npos)
      << plan.text;
  EXPECT_TRUE(at::equal(g.running_mean, rm0)) << "planning changed the running statistics";

  ASSERT_OK(koila_backward(g.loss.get()));
  at::Tensor dw, db;
  g.per_chunk(16, &dw, &db);
  expect_close(g.weight.grad(), dw, "weight gradient");
  expect_close(g.bias.grad(), db, "bias gradient");
  at::Tensor full_dw;  // (the unsplit gradient differs: the option changes the function)
  g.per_chunk(50, &full_dw, nullptr);
  EXPECT_GT((dw - full_dw).abs().max().item<double>(), 1e-4);
  const auto [rm1, rv1] = BatchNormGraph::updated(rm0, rv0, g.xs, kMomentum);
  expect_close(g.running_mean, rm1, "running mean after the backward");
  expect_close(g.running_var, rv1, "running variance after the backward");

  // A chunked read of the loss: the chunks' losses weighted by their share, one more update.
  budget_for_chunk(g.loss.get(), koila::RunMode::Forward, 16);
  const PlanInfo read = plan_of(g.loss.get(), KOILA_MODE_FORWARD);
  ASSERT_GT(read.chunks, 1) << read.text;
  double value = 0;
  ASSERT_OK(koila_tensor_item(g.loss.get(), &value));
  const at::Tensor ys = g.per_chunk(read.chunk, nullptr, nullptr);
  double expected = 0;
  for (int64_t start = 0; start < 50; start += read.chunk) {
    const int64_t len = std::min<int64_t>(read.chunk, 50 - start);
    expected += at::mse_loss(ys.narrow(0, start, len), g.ts.narrow(0, start, len)).item<double>() * len / 50.0;
  }
  EXPECT_NEAR(value, expected, 1e-5 * std::abs(expected));
  const auto [rm2, rv2] = BatchNormGraph::updated(rm1, rv1, g.xs, kMomentum);
  expect_close(g.running_mean, rm2, "running mean after the read");
  expect_close(g.running_var, rv2, "running variance after the read");

  // Unsplit, the option changes nothing: the whole batch's statistics, the kernel's update.
  ASSERT_OK(koila_set_memory_budget("cpu", 0));
  g.weight.mutable_grad() = at::Tensor();
  ASSERT_OK(koila_backward(g.loss.get()));
  expect_close(g.weight.grad(), full_dw, "unsplit weight gradient");
  const auto [rm3, rv3] = BatchNormGraph::updated(rm2, rv2, g.xs, kMomentum);
  expect_close(g.running_mean, rm3, "running mean after the unsplit backward");
}

// Runs out of memory: the unsplit attempt the plan believed in (the kernel updated the
// statistics) and chunked attempts fail, each rolled back; the retry that fits makes the
// one update. When every attempt fails, the statistics are as they were.
TEST(BatchStats, FailedAttemptsLeaveTheRunningStatisticsAsTheyWere) {
  BudgetGuard restore;
  PolicyGuard policy(KOILA_BATCH_STATS_PER_CHUNK);
  BatchNormGraph g(64);
  const at::Tensor rm0 = g.running_mean.clone(), rv0 = g.running_var.clone();
  const uint64_t chunk8 = koila::estimate_extra(g.loss->node, koila::RunMode::Training, 8);

  koila::testing::set_estimate_scale(0.001);  // every plan believes the whole batch fits
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + chunk8 + chunk8 / 4));  // chunks of 8 fit, 16 do not
  koila::Plan used;
  koila::run_backward(g.loss->node, &used);
  ASSERT_GT(used.chunks, 1) << used.describe();
  EXPECT_LE(used.chunk, 8) << used.describe();
  EXPECT_TRUE(used.per_chunk_stats) << used.describe();
  at::Tensor dw, db;
  g.per_chunk(used.chunk, &dw, &db);
  expect_close(g.weight.grad(), dw, "weight gradient after the retries");
  const auto [rm1, rv1] = BatchNormGraph::updated(rm0, rv0, g.xs, kMomentum);
  expect_close(g.running_mean, rm1, "running mean after the retries (one update)");
  expect_close(g.running_var, rv1, "running variance after the retries (one update)");

  // Not even a sample fits (the structure's record of those runs forgotten, so that the
  // plan still believes the whole batch fits and every attempt runs).
  koila::testing::forget_graph_records();
  const at::Tensor rm_before = g.running_mean.clone(), rv_before = g.running_var.clone();
  const at::Tensor grad_before = g.weight.grad().clone();
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + chunk8 / 8));
  auto [code, message] = outcome(koila_backward(g.loss.get()));
  EXPECT_EQ(code, KOILA_ERROR_OUT_OF_MEMORY) << message;
  EXPECT_TRUE(at::equal(g.running_mean, rm_before));
  EXPECT_TRUE(at::equal(g.running_var, rv_before));
  EXPECT_TRUE(at::equal(g.weight.grad(), grad_before));
}

// A TorchScript module written as nn.BatchNorm2d with momentum=None is: it counts its
// batches in num_batches_tracked before normalizing and updates with 1/count (a cumulative
// average). Split in 4 chunks under PER_CHUNK, the count goes up by one and the update uses
// the factor of one full-batch call.
TEST(BatchStats, ModuleWithCumulativeAverageCountsOneBatch) {
  BudgetGuard restore;
  PolicyGuard policy(KOILA_BATCH_STATS_PER_CHUNK);
  at::manual_seed(11);
  torch::jit::Module bn =
      scripted::module("BatchNormCumulative", {{"weight", at::rand({3}) + 0.5}, {"bias", at::randn({3})}},
                       {{"running_mean", at::randn({3})},
                        {"running_var", at::rand({3}) + 0.5},
                        {"num_batches_tracked", at::full({}, 3, at::kLong)}},
                       "def forward(self, x):\n"
                       "    factor = 0.0\n"
                       "    if self.training:\n"
                       "        self.num_batches_tracked.add_(1)\n"
                       "        factor = 1.0 / float(self.num_batches_tracked)\n"
                       "    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,\n"
                       "                            self.training, factor, 1e-5, False)\n");
  koila_module wrapped{bn, c10::Device(c10::kCPU)};
  const at::Tensor xs = at::randn({32, 3, 4, 4}) * 3 - 1;
  Handle x = koila_models::lazy(xs, 0);
  koila_tensor* in[] = {x.get()};
  Handle y = CALL(koila_module_forward, &wrapped, in, 1);
  EXPECT_TRUE(node(y.get()).couples.empty()) << node(y.get()).couples;
  EXPECT_NE(node(y.get()).stats_couples.find("(module BatchNormCumulative) normalizes with statistics over the batch "
                                             "in its BatchNorm layers in training (the module itself)"),
            std::string::npos)
      << node(y.get()).stats_couples;
  Handle sq = CALL(koila_mul, y.get(), y.get());
  Handle loss = CALL(koila_mean, sq.get(), nullptr, 0, 0);

  const at::Tensor weight = bn.attr("weight").toTensor(), bias = bn.attr("bias").toTensor();
  const at::Tensor rm0 = bn.attr("running_mean").toTensor().clone(), rv0 = bn.attr("running_var").toTensor().clone();
  budget_for_chunk(loss.get(), koila::RunMode::Training, 8);
  const PlanInfo plan = plan_of(loss.get(), KOILA_MODE_TRAINING);
  ASSERT_EQ(plan.chunks, 4) << plan.text;
  ASSERT_OK(koila_backward(loss.get()));

  EXPECT_EQ(bn.attr("num_batches_tracked").toTensor().item<int64_t>(), 4);
  const auto [rm1, rv1] = BatchNormGraph::updated(rm0, rv0, xs, 1.0 / 4);
  expect_close(bn.attr("running_mean").toTensor(), rm1, "running mean");
  expect_close(bn.attr("running_var").toTensor(), rv1, "running variance");

  // Gradients: eager LibTorch chunk by chunk, each chunk's mean weighted by its share.
  const at::Tensor w2 = weight.detach().clone().requires_grad_(true), b2 = bias.detach().clone().requires_grad_(true);
  for (int64_t start = 0; start < 32; start += 8) {
    const at::Tensor yc = at::batch_norm(xs.narrow(0, start, 8), w2, b2, {}, {}, true, 0.0, 1e-5, false);
    (yc.mul(yc).mean() * 0.25).backward();
  }
  expect_close(weight.grad(), w2.grad(), "weight gradient");
  expect_close(bias.grad(), b2.grad(), "bias gradient");
}

// A module of one batch norm over 3 channels (momentum 0.1), in TorchScript.
torch::jit::Module one_batch_norm(const std::string& name) {
  return scripted::module(
      name, {{"weight", at::rand({3}) + 0.5}, {"bias", at::randn({3})}},
      {{"running_mean", at::randn({3})}, {"running_var", at::rand({3}) + 0.5}},
      "def forward(self, x):\n"
      "    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,\n"
      "                            self.training, 0.1, 1e-5, False)\n");
}

// A module call runs koila's batch norm (op_routes.h): the clone a call runs (its graphs
// inlined) calls koila::batch_norm and no aten::batch_norm, while the loaded module's
// compilation unit keeps aten::batch_norm (what koila_module_save writes, which PyTorch
// loads); the module computes what it computed before (eval and train mode, against
// LibTorch's kernel).
TEST(BatchStats, LoadedModulesCallKoilasBatchNorm) {
  at::manual_seed(12);
  torch::jit::Module bn = one_batch_norm("BatchNormRouted");
  const koila_tests::TempDir dir("koila_bn_route_");
  const std::string path = dir / "bn.pt";
  bn.save(path);
  koila_module* raw = nullptr;
  ASSERT_OK(koila_module_load(&raw, path.c_str(), "cpu"));
  std::unique_ptr<koila_module, decltype(&koila_module_free)> loaded(raw, koila_module_free);
  EXPECT_EQ(count_calls(unit_graphs(loaded->module), "batch_norm"), std::make_pair(size_t{1}, size_t{0}));
  {
    Handle x = from_aten(at::randn({2, 3, 2, 2}));
    koila_tensor* in[] = {x.get()};
    Handle y = CALL(koila_module_forward, loaded.get(), in, 1);
  }
  ASSERT_TRUE(loaded->runnable.has_value());
  EXPECT_EQ(count_calls(method_graphs(*loaded->runnable), "batch_norm").first, 0u);
  EXPECT_GE(count_calls(method_graphs(*loaded->runnable), "batch_norm").second, 1u);
  EXPECT_EQ(count_calls(method_graphs(loaded->module), "batch_norm").second, 0u);
  // What koila saves calls LibTorch's operators only.
  const std::string saved = dir / "saved.pt";
  ASSERT_OK(koila_module_save(loaded.get(), saved.c_str()));
  const torch::jit::Module reloaded = torch::jit::load(saved);
  EXPECT_EQ(count_calls(unit_graphs(reloaded), "batch_norm"), std::make_pair(size_t{1}, size_t{0}));
  const at::Tensor xs = at::randn({6, 3, 2, 2});
  for (int train : {0, 1}) {
    SCOPED_TRACE(train ? "train" : "eval");
    ASSERT_OK(koila_module_train(loaded.get(), train));
    const at::Tensor rm = loaded->module.attr("running_mean").toTensor().clone();
    const at::Tensor rv = loaded->module.attr("running_var").toTensor().clone();
    Handle x = from_aten(xs);
    koila_tensor* in[] = {x.get()};
    Handle y = CALL(koila_module_forward, loaded.get(), in, 1);
    const at::Tensor expected = at::batch_norm(xs, loaded->module.attr("weight").toTensor(),
                                               loaded->module.attr("bias").toTensor(), rm, rv, train, 0.1, 1e-5, false);
    expect_close(to_aten(y.get()), expected, "output");
    expect_close(loaded->module.attr("running_mean").toTensor(), rm, "running mean updated as LibTorch does");
  }
}

// A module whose batch norms did not go through koila (here: its runnable clone made
// without routing) cannot have its statistics combined per chunk: the chunked backward
// fails with KOILA_ERROR_INTERNAL instead of leaving wrong running statistics.
TEST(BatchStats, UnroutedModuleBatchNormsFailInsteadOfMisleading) {
  BudgetGuard restore;
  PolicyGuard policy(KOILA_BATCH_STATS_PER_CHUNK);
  at::manual_seed(13);
  torch::jit::Module bn = one_batch_norm("BatchNormUnrouted");
  koila_module wrapped{bn, c10::Device(c10::kCPU)};
  wrapped.runnable = bn.clone(/*inplace=*/true);  // as koila would make it, but not routed
  const at::Tensor rm0 = bn.attr("running_mean").toTensor().clone();
  Handle x = koila_models::lazy(at::randn({32, 3, 4, 4}), 0);
  koila_tensor* in[] = {x.get()};
  Handle y = CALL(koila_module_forward, &wrapped, in, 1);
  Handle sq = CALL(koila_mul, y.get(), y.get());
  Handle loss = CALL(koila_mean, sq.get(), nullptr, 0, 0);
  budget_for_chunk(loss.get(), koila::RunMode::Training, 8);
  koila_status* status = koila_backward(loss.get());
  const koila_code code = koila_status_code(status);
  const std::string message = koila_status_message(status);
  koila_status_free(status);
  EXPECT_EQ(code, KOILA_ERROR_INTERNAL) << message;
  EXPECT_NE(message.find("batch norms in training were not observed"), std::string::npos) << message;
  EXPECT_TRUE(at::equal(bn.attr("running_mean").toTensor(), rm0)) << "the failed run put them back";
}

}  // namespace
