// Issue 28, item 2: in a backward whose gradients go into .grad, linear layers add their
// weight gradients into the weight's .grad inside the matrix product (kernels/fused_grads.h),
// so that a split run holds no weight-sized temporary per layer and splitting pays where
// gradients dominate. Checked against eager LibTorch's gradients and koila's allocator.
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/jit/serialization/import.h>

#include "grad_helpers.h"
#include "kernels/fused_grads.h"
#include "module/module.h"
#include "module_helpers.h"
#include "plan/memo.h"
#include "plan/planner.h"
#include "run/chunked_run.h"
#include "scripted_models.h"
#include "temp_dir.h"

using namespace koila_test;

namespace {

// The original project's MNIST MLP (its README): 784 -> 512 -> 512 -> 10 with ReLU.
const std::vector<int64_t> kOriginalMnistMlp = {784, 512, 512, 10};

// Sets the CPU budget to what is held now plus the estimate for chunks of `chunk` samples
// with the planner's margin: the planner picks that chunk when nothing larger fits.
void budget_just_for_chunk(const koila_tensor* t, int64_t chunk) {
  ASSERT_OK(koila_set_memory_budget("cpu", SmallestSplit(t, {chunk}).budget(current_cpu())));
}

double error(uint64_t estimated, uint64_t measured) {
  return (static_cast<double>(estimated) - static_cast<double>(measured)) / static_cast<double>(measured);
}

}  // namespace

// The case: the original project's MNIST MLP at batch 9, .grad absent (the first
// step, or zero_grad(set_to_none=True)). Unfused, every chunk after the first made a fresh
// 1.6 MB weight gradient before adding it into .grad, and no split plan needed less than
// the unsplit run. Fused, chunks need less, a budget below the unsplit need runs split
// within it, the estimates match what the runs measure, and the gradients are PyTorch's.
TEST(FusedGrads, TheOriginalMnistMlpSplitsBelowItsUnsplitNeed) {
  BudgetGuard restore;
  MnistMlp m(9, 21, kOriginalMnistMlp);
  const auto expected = m.eager_grads();
  const SmallestSplit split(m.loss.get(), {8, 4, 2, 1});
  const uint64_t unsplit = split.unsplit, chunked = split.chunked;
  uint64_t current = 0, budget = 0;
  ASSERT_NO_FATAL_FAILURE(split.set_budget_below_unsplit(&current, &budget));
  const PlanInfo p = plan_of(m.loss.get(), KOILA_MODE_TRAINING);
  EXPECT_GT(p.chunks, 1) << p.text;
  const uint64_t fused_before = koila::fused_weight_gradients();
  const uint64_t extra = backward_extra(m.loss.get());
  const uint64_t fused = koila::fused_weight_gradients() - fused_before;
  EXPECT_LE(current + extra, budget) << p.text;
  // Three weights, each fused in every chunk after the first.
  EXPECT_EQ(fused, 3u * static_cast<uint64_t>(p.chunks - 1));
  expect_grads(m.grads(), expected, "split", 1e-5);
  EXPECT_LE(std::abs(error(chunked, extra)), 0.01) << "estimated " << chunked << ", measured " << extra;

  m.set_grads_absent();
  ASSERT_OK(koila_set_memory_budget("cpu", 0));
  const uint64_t unsplit_measured = backward_extra(m.loss.get());
  expect_grads(m.grads(), expected, "unsplit", 1e-5);
  EXPECT_LT(extra, unsplit_measured);
  EXPECT_LE(std::abs(error(unsplit, unsplit_measured)), 0.01)
      << "estimated " << unsplit << ", measured " << unsplit_measured;
  std::printf(
      "[ original mnist mlp, batch 9, absent .grad ] unsplit estimated %llu B, measured %llu B; chunks of %lld "
      "estimated %llu B, measured %llu B (%lld chunks, %llu weight gradients fused)\n",
      static_cast<unsigned long long>(unsplit), static_cast<unsigned long long>(unsplit_measured),
      static_cast<long long>(p.chunk), static_cast<unsigned long long>(chunked), static_cast<unsigned long long>(extra),
      static_cast<long long>(p.chunks), static_cast<unsigned long long>(fused));
  m.set_grads_absent();
}

// A .grad that holds earlier gradients: an unsplit backward computes this call's gradients
// whole (nothing fused, so that a failure leaves .grad as it was) and adds them; a split one
// fuses into the zeroed .grad and adds the earlier values back. Both equal earlier + new.
TEST(FusedGrads, HeldGradientsAddUpSplitOrNot) {
  MnistMlp m(16, 22, kOriginalMnistMlp);
  const auto fresh = m.eager_grads();
  std::vector<at::Tensor> held;
  for (const at::Tensor& p : m.params) held.push_back(at::randn(p.sizes()));
  std::vector<at::Tensor> expected;
  for (size_t i = 0; i < held.size(); ++i) expected.push_back(held[i] + fresh[i]);
  for (int64_t chunk : {int64_t{-1}, int64_t{4}}) {
    SCOPED_TRACE(chunk < 0 ? "unsplit" : "chunks of 4");
    for (size_t i = 0; i < held.size(); ++i) m.params[i].mutable_grad() = held[i].clone();
    // (The planner prefers the unsplit run here: a split one snapshots the held .grad.)
    const uint64_t fused_before = koila::fused_weight_gradients();
    koila::ChunkRun run;
    run.chunk = chunk;
    koila::backward_chunks(m.loss->node, koila::analysis_of(m.loss->node, koila::RunMode::Training), run);
    const uint64_t fused = koila::fused_weight_gradients() - fused_before;
    // Unsplit: computed whole, nothing fused; split: .grad zeroed for the call, every chunk fuses.
    EXPECT_EQ(fused, chunk < 0 ? 0u : 3u * 4u);
    expect_grads(m.grads(), expected, chunk < 0 ? "unsplit" : "split");
  }
  m.set_grads_absent();
}

// An unsplit pass into zeroed .grad: a lone small linear layer runs as LibTorch's own
// (fusing one small layer saves no time: docs/benchmarks-log/log.md §27), a pass of several
// fuses them all, and a lone layer of 1 MiB or more still fuses (its temporary is not
// small). Gradients equal eager LibTorch's in each case, and the estimate is the run's.
TEST(FusedGrads, AnUnsplitPassFusesASmallLinearLayerOnlyAmongOthers) {
  struct Case {
    const char* what;
    std::vector<int64_t> widths;  // input width, then each layer's output width
    uint64_t fused;
  };
  const Case cases[] = {{"one small layer", {256, 10}, 0},
                        {"two small layers", {256, 256, 10}, 2},
                        {"one layer of 1.2 MB", {600, 512}, 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    at::manual_seed(43);
    const int64_t batch = 64;
    std::vector<at::Tensor> params;
    for (size_t i = 0; i + 1 < c.widths.size(); ++i) {
      params.push_back((at::randn({c.widths[i + 1], c.widths[i]}) * 0.05).requires_grad_(true));
      params.push_back((at::randn({c.widths[i + 1]}) * 0.01).requires_grad_(true));
    }
    const at::Tensor xs = at::randn({batch, c.widths[0]});
    at::Tensor eager = xs;
    for (size_t i = 0; i < params.size(); i += 2) {
      eager = at::linear(eager, params[i], params[i + 1]);
      if (i + 2 < params.size()) eager = at::tanh(eager);
    }
    eager.square().mean().backward();
    std::vector<at::Tensor> expected;
    for (const at::Tensor& t : params) expected.push_back(t.grad().clone());

    std::vector<Handle> p;
    for (const at::Tensor& t : params) p.push_back(koila_models::share(t));
    Handle h = koila_models::lazy(xs, 0);
    for (size_t i = 0; i < p.size(); i += 2) {
      h = CALL(koila_linear, h.get(), p[i].get(), p[i + 1].get());
      if (i + 2 < p.size()) h = CALL(koila_tanh, h.get());
    }
    Handle sq = CALL(koila_mul, h.get(), h.get());
    Handle loss = CALL(koila_mean, sq.get(), nullptr, 0, 0);
    koila::testing::forget_graph_records();
    for (const at::Tensor& t : params) t.mutable_grad() = at::zeros_like(t);  // zeroed in place, as zero_grad
    const uint64_t estimated = koila::estimate_extra(loss->node, koila::RunMode::Training, -1);
    const uint64_t fused_before = koila::fused_weight_gradients(), before = current_cpu();
    koila_status_free(koila_memory_reset_peak("cpu"));
    koila::ChunkRun run;  // unsplit
    koila::backward_chunks(loss->node, koila::analysis_of(loss->node, koila::RunMode::Training), run);
    const uint64_t measured = peak_cpu() - before;
    EXPECT_EQ(koila::fused_weight_gradients() - fused_before, c.fused);
    std::vector<at::Tensor> got;
    for (const at::Tensor& t : params) got.push_back(t.grad().clone());
    expect_grads(got, expected, c.what, 1e-5);
    EXPECT_LE(std::abs(error(estimated, measured)), 0.01) << "estimated " << estimated << ", measured " << measured;
  }
}

// TorchScript modules: the linear layers of the clone a call runs are koila::linear
// (op_routes.h), so a split backward fuses there too; gradients equal LibTorch's own run
// of the module, and what koila_module_save writes still calls aten::linear.
TEST(FusedGrads, ModulesFuseTheirLinearLayers) {
  BudgetGuard restore;
  torch::jit::Module net = scripted::mlp(31, "tanh");
  ModuleHandle m = wrap(net);
  at::manual_seed(32);
  const at::Tensor xs = at::randn({32, 784});
  const at::Tensor ys = at::randint(10, {32}, at::kLong);
  clear_grads(net);
  at::cross_entropy_loss(net.forward({xs}).toTensor(), ys).backward();
  const std::vector<at::Tensor> expected = grads_of(net);
  clear_grads(net);

  Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0);
  Handle out = forward(m.get(), {x.get()});
  Handle loss = CALL(koila_cross_entropy, out.get(), y.get(), KOILA_REDUCTION_MEAN);
  budget_just_for_chunk(loss.get(), 8);
  const PlanInfo p = plan_of(loss.get(), KOILA_MODE_TRAINING);
  ASSERT_EQ(p.chunks, 4) << p.text;
  const uint64_t fused_before = koila::fused_weight_gradients();
  ASSERT_OK(koila_backward(loss.get()));
  EXPECT_EQ(koila::fused_weight_gradients() - fused_before, 2u * 3u);  // two layers, chunks 2 to 4
  expect_grads(grads_of(net), expected, "module, split");
  clear_grads(net);

  const koila_tests::TempDir dir("koila_fused_");
  const std::string path = dir / "mlp.pt";
  ASSERT_OK(koila_module_save(m.get(), path.c_str()));
  size_t koila_ops = 0;
  const Graphs graphs = method_graphs(torch::jit::load(path));
  for_each_node(graphs, [&](const torch::jit::Node* n) {
    koila_ops += n->kind().ns() == c10::Symbol::fromQualString("namespaces::koila");
  });
  EXPECT_EQ(koila_ops, 0u);
  EXPECT_EQ(count_calls(graphs, "linear").first, 2u);
}

// The autograd node of a fused layer, written as LibTorch writes its own: named as its
// timelines show it, its result not a view (a batch of matrices reshapes the product), its
// forward LibTorch's linear bit for bit, and its backward LibTorch's gradients for the
// input, the weight (added into the zeroed .grad) and the bias. Its saved input is
// version-checked as LibTorch's nodes check theirs, and a second backward without
// retain_graph is refused, as LibTorch refuses it.
TEST(FusedGrads, TheLinearNodeBehavesAsLibTorchsOwn) {
  for (const bool bias : {true, false}) {
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{6, 5}, {3, 4, 5}, {5}}) {
      SCOPED_TRACE(std::string(bias ? "with bias, " : "without bias, ") + "input rank " + std::to_string(shape.size()));
      at::manual_seed(61);
      const at::Tensor x = at::randn(shape).requires_grad_(true), w = at::randn({7, 5}).requires_grad_(true);
      const at::Tensor b = bias ? at::randn({7}).requires_grad_(true) : at::Tensor();
      const c10::optional<at::Tensor> b_opt = bias ? c10::optional<at::Tensor>(b) : c10::nullopt;
      const at::Tensor eager = at::linear(x, w, b_opt);
      const at::Tensor g = at::randn(eager.sizes());
      const std::vector<at::Tensor> leaves = bias ? std::vector<at::Tensor>{x, w, b} : std::vector<at::Tensor>{x, w};
      const std::vector<at::Tensor> expected = torch::autograd::grad({eager}, leaves, {g});

      const koila::GradFusion fusion(/*on=*/true, /*split=*/true);
      at::Tensor y;
      {
        const koila::GradFusion::Forward fusing(fusion);
        y = koila::fused_linear(x, w, b_opt);
      }
      ASSERT_TRUE(y.grad_fn());
      EXPECT_EQ(y.grad_fn()->name(), bias ? "FusedLinearWithBiasBackward" : "FusedLinearBackward");
      EXPECT_EQ(y.grad_fn()->next_edges().size(), bias ? 3u : 2u);
      EXPECT_FALSE(y.is_view());
      EXPECT_TRUE(at::equal(y.detach(), eager.detach()));
      w.mutable_grad() = at::zeros_like(w);  // zeroed in place: the product adds into it
      const uint64_t fused_before = koila::fused_weight_gradients();
      {
        const koila::GradFusion::Backward adding(fusion);
        y.backward(g);
      }
      EXPECT_EQ(koila::fused_weight_gradients() - fused_before, 1u);
      EXPECT_TRUE(at::allclose(x.grad(), expected[0], 1e-5, 1e-6));
      EXPECT_TRUE(at::allclose(w.grad(), expected[1], 1e-5, 1e-6));
      if (bias) {
        EXPECT_TRUE(at::allclose(b.grad(), expected[2], 1e-5, 1e-6));
      }
      try {
        y.backward(g);
        ADD_FAILURE() << "a second backward through a released node ran";
      } catch (const c10::Error& e) {
        EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
      }

      // The saved input changed in place after the forward: the backward says so.
      const at::Tensor h = x * 2;
      at::Tensor z;
      {
        const koila::GradFusion::Forward fusing(fusion);
        z = koila::fused_linear(h, w, b_opt);
      }
      {
        c10::NoGradGuard no_grad;
        h.add_(1);
      }
      try {
        z.backward(g);
        ADD_FAILURE() << "a backward from a changed input ran";
      } catch (const c10::Error& e) {
        EXPECT_NE(std::string(e.what()).find("inplace operation"), std::string::npos) << e.what();
      }
    }
  }
}

// Outside a backward into .grad (a forward, a read with gradients off, an eager call),
// koila's linear is LibTorch's: nothing is fused and the values are equal bit for bit.
TEST(FusedGrads, ForwardsAreLibTorchsLinear) {
  MnistMlp m(8, 23, kOriginalMnistMlp);
  const uint64_t fused_before = koila::fused_weight_gradients();
  const at::Tensor lazy = to_aten(m.loss.get());
  EXPECT_TRUE(at::equal(lazy, m.eager_loss().detach()));
  EXPECT_EQ(koila::fused_weight_gradients(), fused_before);
}

// Convolutions in a split pass: a 2.25 MiB weight (256 -> 256, 3x3) is added into .grad in
// eighths of its output channels, a small one (3 -> 256) whole; gradients equal LibTorch's,
// the estimates are never short of the measured peaks, and the split run holds less than
// the unfused one did (which made the whole 2.25 MiB gradient in every chunk after the first).
TEST(FusedGrads, SplitConvolutionsAddTheirWeightGradientsInSlices) {
  at::manual_seed(41);
  const std::vector<at::Tensor> params = {
      (at::randn({256, 3, 3, 3}) * 0.2).requires_grad_(true), (at::randn({256}) * 0.01).requires_grad_(true),
      (at::randn({256, 256, 3, 3}) * 0.02).requires_grad_(true), (at::randn({256}) * 0.01).requires_grad_(true)};
  const at::Tensor xs = at::randn({8, 3, 6, 6});
  std::vector<Handle> p;
  for (const at::Tensor& t : params) p.push_back(koila_models::share(t));
  Handle x = koila_models::lazy(xs, 0);
  const int64_t one[] = {1, 1};
  Handle h = CALL(koila_conv2d, x.get(), p[0].get(), p[1].get(), one, one, one, 1);
  h = CALL(koila_tanh, h.get());
  h = CALL(koila_conv2d, h.get(), p[2].get(), p[3].get(), one, one, one, 1);
  Handle sq = CALL(koila_mul, h.get(), h.get());
  Handle loss = CALL(koila_mean, sq.get(), nullptr, 0, 0);
  for (const at::Tensor& t : params) t.mutable_grad() = at::Tensor();
  at::conv2d(at::tanh(at::conv2d(xs, params[0], params[1], 1, 1)), params[2], params[3], 1, 1)
      .square()
      .mean()
      .backward();
  std::vector<at::Tensor> expected;
  for (const at::Tensor& t : params) expected.push_back(t.grad().clone());

  uint64_t measured[2] = {0, 0}, estimated[2] = {0, 0};
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "not fused");
    koila::testing::set_grad_fusion(fused);
    koila::testing::forget_graph_records();
    for (const at::Tensor& t : params) t.mutable_grad() = at::Tensor();
    estimated[fused] = koila::estimate_extra(loss->node, koila::RunMode::Training, 2);
    // In chunks of 2 whether or not the planner would pick them (unfused, it would not split).
    const uint64_t fused_before = koila::fused_weight_gradients(), before = current_cpu();
    koila_status_free(koila_memory_reset_peak("cpu"));
    koila::ChunkRun run;
    run.chunk = 2;
    koila::backward_chunks(loss->node, koila::analysis_of(loss->node, koila::RunMode::Training), run);
    measured[fused] = peak_cpu() - before;
    EXPECT_EQ(koila::fused_weight_gradients() - fused_before, fused ? 2u * 3u : 0u);  // chunks 2 to 4
    std::vector<at::Tensor> got;
    for (const at::Tensor& t : params) got.push_back(t.grad().clone());
    expect_grads(got, expected, fused ? "fused" : "not fused", 1e-4);
    // Never short; fused, +4.4% over here (the simulation of the sliced kernel calls holds
    // a little more than oneDNN's, about three chunk activations).
    EXPECT_GE(error(estimated[fused], measured[fused]), -0.01)
        << "estimated " << estimated[fused] << ", measured " << measured[fused];
    EXPECT_LE(error(estimated[fused], measured[fused]), fused ? 0.05 : 0.01)
        << "estimated " << estimated[fused] << ", measured " << measured[fused];
  }
  koila::testing::set_grad_fusion(true);
  koila::testing::forget_graph_records();
  for (const at::Tensor& t : params) t.mutable_grad() = at::Tensor();
  // The unfused run made the large weight's whole gradient; the fused one an eighth of it.
  const uint64_t weight = 256 * 256 * 9 * 4;
  EXPECT_GE(measured[0] - measured[1], weight / 2) << measured[0] << " -> " << measured[1];
  std::printf("[ conv 3->256->256 in chunks of 2 ] measured %llu B unfused, %llu B fused\n",
              static_cast<unsigned long long>(measured[0]), static_cast<unsigned long long>(measured[1]));
}
