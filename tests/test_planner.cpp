// Memory measurement, budgets, plans, and chunked forward/backward: results and gradients
// under tight budgets equal the unsplit ones (and plain LibTorch), and the measured peak
// stays within the budget.
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "base/pointer_index.h"
#include "base/text.h"
#include "helpers.h"
#include "memory/cpu_allocator.h"
#include "memory/device_memory.h"
#include "memory/machine_memory.h"
#include "memory/run_memory.h"
#include "models.h"
#include "plan/memo.h"
#include "plan/planner.h"
#include "run/analysis.h"

using namespace koila_test;
using koila_models::Kind;
using koila_models::Model;

namespace {

std::vector<at::Tensor> grads_of(const Model& m) {
  std::vector<at::Tensor> g;
  for (const at::Tensor& p : m.params()) g.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return g;
}

void expect_close(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined() && b[i].defined()) << what << " gradient " << i;
    // Relative to the gradient's largest entry: chunks sum in a different order.
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    const double scale = b[i].abs().max().item<double>();
    EXPECT_LE(diff, rtol * scale + atol) << what << " gradient " << i << " differs by " << diff << " (largest entry "
                                         << scale << ")";
  }
}

// Reads the loss and backpropagates it in chunks of `chunk`: the value and the gradients
// must match plain LibTorch's.
void check_loss_in_chunks(const Model& m, const koila_tensor* loss, int64_t chunk, double expected_value,
                          const std::vector<at::Tensor>& expected_grads, const std::string& what) {
  budget_for_chunk(loss, koila::RunMode::Forward, chunk);
  double value = 0;
  EXPECT_EQ(plan_of(loss, KOILA_MODE_FORWARD).chunk, chunk) << what;
  ASSERT_OK(koila_tensor_item(loss, &value));
  EXPECT_NEAR(value, expected_value, 1e-4 * std::max(1.0, std::fabs(expected_value))) << what;
  budget_for_chunk(loss, koila::RunMode::Training, chunk);
  EXPECT_EQ(plan_of(loss, KOILA_MODE_TRAINING).chunk, chunk) << what;
  ASSERT_OK(koila_backward(loss));
  expect_close(grads_of(m), expected_grads, 1e-4, 1e-5, what);
}

}  // namespace

TEST(Memory, CountsCpuTensors) {
  const uint64_t before = current_cpu();
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  {
    at::Tensor t = at::empty({1024, 1024});  // 4 MiB through LibTorch's allocator
    EXPECT_EQ(current_cpu(), before + 4u * 1024 * 1024);
    EXPECT_GE(peak_cpu(), before + 4u * 1024 * 1024);
  }
  EXPECT_EQ(current_cpu(), before);
  EXPECT_GE(peak_cpu(), before + 4u * 1024 * 1024);
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  EXPECT_EQ(peak_cpu(), before);
  // Tensors made through the C API count too.
  const int64_t shape[] = {256, 256};
  koila_tensor* t = nullptr;
  ASSERT_OK(koila_tensor_zeros(&t, shape, 2, KOILA_FLOAT64, "cpu"));
  EXPECT_EQ(current_cpu(), before + 256u * 256 * 8);
  koila_tensor_free(t);
  EXPECT_EQ(current_cpu(), before);
}

// A run measured by the device's own peak restarts it (RunMemory where no slot follows the run:
// CUDA, or every slot taken), and the caller's figure still counts what was held before: on
// CUDA every attempt of a planned run used to reset the peak a caller had asked for, so that
// after a retry koila_memory_stats gave the last attempt's alone.
TEST(Memory, ARunRestartingTheDevicesPeakLeavesTheCallersFigure) {
  const c10::Device cpu(c10::kCPU);
  const uint64_t before = current_cpu();
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  { at::Tensor t = at::empty({1024, 1024}); }  // 4 MiB, gone again
  koila::restart_device_peak(cpu);
  EXPECT_LT(koila::device_peak(cpu), before + (4u << 20)) << "the run's own figure starts afresh";
  EXPECT_GE(peak_cpu(), before + (4u << 20)) << "the caller's figure keeps what was held before";
  { at::Tensor t = at::empty({512, 1024}); }  // 2 MiB, after the restart
  EXPECT_GE(koila::device_peak(cpu), before + (2u << 20));
  EXPECT_GE(peak_cpu(), before + (4u << 20));
  ASSERT_OK(koila_memory_reset_peak("cpu"));  // the caller's reset clears both
  EXPECT_EQ(peak_cpu(), before);
  EXPECT_EQ(koila::device_peak(cpu), before);
}

TEST(Memory, MkldnnStyleRawAllocationsWork) {
  // raw_allocate requires data == context; a convolution and a matmul run through it.
  const uint64_t before = current_cpu();
  void* p = c10::GetAllocator(c10::kCPU)->raw_allocate(1000);
  EXPECT_EQ(current_cpu(), before + 1000);
  c10::GetAllocator(c10::kCPU)->raw_deallocate(p);
  EXPECT_EQ(current_cpu(), before);
  const at::Tensor y = at::conv2d(at::randn({2, 3, 8, 8}), at::randn({4, 3, 3, 3}));
  EXPECT_EQ(y.sizes(), at::IntArrayRef({2, 4, 6, 6}));
}

// A run's figures (RunMemory) follow blocks its thread allocated wherever they are freed:
// its own thread keeps them with plain stores, other threads' frees apart (accounting.h).
TEST(Memory, RunFiguresFollowBlocksFreedOnOtherThreads) {
  static constexpr uint64_t kMiB = 1024 * 1024;
  koila::RunMemory outer(c10::Device(c10::kCPU));
  at::Tensor kept = at::empty({static_cast<int64_t>(kMiB / 4)});  // 1 MiB
  {
    koila::RunMemory run(c10::Device(c10::kCPU));
    at::Tensor a = at::empty({static_cast<int64_t>(2 * kMiB / 4)});  // 2 MiB
    EXPECT_EQ(run.current(), 2 * kMiB);
    std::thread([moved = std::move(a)]() mutable { moved = at::Tensor(); }).join();  // freed there
    EXPECT_EQ(run.current(), 0u);
    EXPECT_EQ(outer.current(), kMiB);
    at::Tensor b = at::empty({static_cast<int64_t>(3 * kMiB / 4)});  // 3 MiB
    EXPECT_EQ(run.current(), 3 * kMiB);
    EXPECT_EQ(run.peak(), 3 * kMiB);  // 5 had the other thread's free been lost
    EXPECT_EQ(outer.peak(), 4 * kMiB);
    // Blocks of another thread's run are that run's: nothing here.
    std::thread([] {
      koila::RunMemory theirs(c10::Device(c10::kCPU));
      at::Tensor c = at::empty({static_cast<int64_t>(kMiB / 4)});
      EXPECT_EQ(theirs.current(), kMiB);
    }).join();
    EXPECT_EQ(run.current(), 3 * kMiB);
    EXPECT_EQ(run.peak(), 3 * kMiB);
  }
  EXPECT_EQ(outer.current(), kMiB);
  EXPECT_EQ(outer.peak(), 4 * kMiB);
}

TEST(Memory, Budgets) {
  BudgetGuard restore;
  uint64_t automatic = 0;
  ASSERT_OK(koila_memory_budget("cpu", &automatic));
  EXPECT_GT(automatic, current_cpu());
  ASSERT_OK(koila_set_memory_budget("cpu", 123456789));
  uint64_t b = 0;
  ASSERT_OK(koila_memory_budget("cpu", &b));
  EXPECT_EQ(b, 123456789u);
  ASSERT_OK(koila_set_memory_budget("cpu", 0));
  ASSERT_OK(koila_memory_budget("cpu", &b));
  EXPECT_GT(b, current_cpu());
  EXPECT_NE(b, 123456789u);
}

// What the kernel says the process could still be given, read independently of koila: the
// machine's MemAvailable, or less where the cgroup's limit is tighter.
uint64_t kernel_free_cpu() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0, available = 0;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") available = kib * 1024;
  }
  auto number = [](const char* path) {
    std::ifstream in(path);
    uint64_t n = 0;
    return in >> n ? n : UINT64_MAX;  // ("max", or no such file)
  };
  const uint64_t limit = number("/sys/fs/cgroup/memory.max"), used = number("/sys/fs/cgroup/memory.current");
  if (limit != UINT64_MAX && used != UINT64_MAX) available = std::min(available, limit > used ? limit - used : 0);
  return available;
}

TEST(Memory, FreeCpuMemoryIsWhatTheKernelReports) {
  // koila reads /proc/meminfo and the cgroup's files again and again from descriptors it
  // keeps open: each reading is the kernel's figure of the moment (between an independent
  // reading before and one after, give or take what other processes do meanwhile), not the
  // first one's, nor a fallback's.
  constexpr uint64_t kSlack = 256ull << 20;
  std::vector<at::Tensor> held;
  for (int i = 0; i < 3; ++i) {
    const uint64_t before = kernel_free_cpu();
    const uint64_t read = koila::cpu_free_bytes();
    const uint64_t after = kernel_free_cpu();
    ASSERT_GT(before, 0u) << "this machine's /proc/meminfo has no MemAvailable";
    EXPECT_GE(read + kSlack, std::min(before, after)) << "reading " << i;
    EXPECT_LE(read, std::max(before, after) + kSlack) << "reading " << i;
    held.push_back(at::ones({128 << 20}, at::kByte));  // 128 MiB more in use, written (so resident)
  }
}

TEST(Memory, BadArguments) {
  uint64_t v = 0;
  auto expect_code = [](koila_status* s, koila_code code, const char* words) {
    EXPECT_EQ(koila_status_code(s), code) << koila_status_message(s);
    EXPECT_NE(std::strstr(koila_status_message(s), words), nullptr) << koila_status_message(s);
    koila_status_free(s);
  };
  expect_code(koila_set_memory_budget(nullptr, 1), KOILA_ERROR_INVALID_ARGUMENT, "device");
  expect_code(koila_set_memory_budget("tpu", 1), KOILA_ERROR_DEVICE, "tpu");
  expect_code(koila_memory_budget("cpu", nullptr), KOILA_ERROR_INVALID_ARGUMENT, "out");
  expect_code(koila_memory_stats("gpu", &v, &v), KOILA_ERROR_DEVICE, "gpu");
  expect_code(koila_memory_reset_peak("cuda:x"), KOILA_ERROR_DEVICE, "cuda:x");
  if (!at::hasCUDA()) {  // a clean refusal, not a crash, where there is no CUDA
    expect_code(koila_memory_stats("cuda", &v, &v), KOILA_ERROR_DEVICE, "cuda");
    expect_code(koila_set_memory_budget("cuda:0", 1), KOILA_ERROR_DEVICE, "cuda");
  }
  expect_code(koila_plan_new(nullptr, nullptr, KOILA_MODE_FORWARD), KOILA_ERROR_INVALID_ARGUMENT, "out");
  koila_plan* p = reinterpret_cast<koila_plan*>(1);
  expect_code(koila_plan_new(&p, nullptr, KOILA_MODE_FORWARD), KOILA_ERROR_INVALID_ARGUMENT, "'t'");
  EXPECT_EQ(p, nullptr);
  Handle x = from_aten(at::randn({4, 3}), 0);
  expect_code(koila_plan_new(&p, x.get(), static_cast<koila_mode>(7)), KOILA_ERROR_INVALID_ARGUMENT, "koila_mode");
  expect_code(koila_plan_new(&p, x.get(), KOILA_MODE_TRAINING), KOILA_ERROR_INVALID_ARGUMENT, "one element");
  expect_code(koila_plan_describe(nullptr, nullptr, 0, nullptr), KOILA_ERROR_INVALID_ARGUMENT, "'p'");
  EXPECT_EQ(koila_plan_batch_size(nullptr), -1);
  EXPECT_EQ(koila_plan_chunk_size(nullptr), -1);
  EXPECT_EQ(koila_plan_num_chunks(nullptr), 0);
  EXPECT_EQ(koila_plan_peak_bytes(nullptr), 0u);
  koila_plan_free(nullptr);
}

TEST(Plan, WholeBatchRunsUnsplitWhenItFits) {
  BudgetGuard restore;
  const Model m(Kind::MLP);
  Handle x = koila_models::lazy(m.input(9), 0), y = koila_models::lazy(m.target(9), 0);
  Handle loss = m.loss(x.get(), y.get());
  for (koila_mode mode : {KOILA_MODE_FORWARD, KOILA_MODE_TRAINING}) {
    const PlanInfo p = plan_of(loss.get(), mode);
    EXPECT_EQ(p.batch, 9);
    EXPECT_EQ(p.chunk, 9);  // a batch of 9 that fits runs as one, not as 8 + 1
    EXPECT_EQ(p.chunks, 1);
    EXPECT_EQ(p.peak, p.full_peak);
    EXPECT_GT(p.peak, current_cpu());
    EXPECT_NE(p.text.find("fits unsplit"), std::string::npos) << p.text;
  }
  // Without a lazy batch.
  Handle c = from_aten(at::randn({3, 3}), KOILA_NO_BATCH);
  Handle s = CALL(koila_sum, c.get(), nullptr, 0, 0);
  const PlanInfo p = plan_of(s.get(), KOILA_MODE_FORWARD);
  EXPECT_EQ(p.batch, -1);
  EXPECT_EQ(p.chunk, -1);
  EXPECT_EQ(p.chunks, 1);
  EXPECT_NE(p.text.find("no lazy batch"), std::string::npos) << p.text;
}

TEST(Plan, PicksTheLargestPowerOfTwoThatFits) {
  BudgetGuard restore;
  const Model m(Kind::MLP);
  Handle x = koila_models::lazy(m.input(100), 0), y = koila_models::lazy(m.target(100), 0);
  Handle logits = m.features(x.get());
  const uint64_t e16 = koila::estimate_extra(logits->node, koila::RunMode::Forward, 16);
  const uint64_t e32 = koila::estimate_extra(logits->node, koila::RunMode::Forward, 32);
  ASSERT_LT(e16, e32);
  // Room for chunks of 16 but not 32.
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + (e16 + e32) * 1.1 / 2));
  const PlanInfo p = plan_of(logits.get(), KOILA_MODE_FORWARD);
  EXPECT_EQ(p.chunk, 16);
  EXPECT_EQ(p.chunks, 7);  // 6 x 16 + 4
  EXPECT_LT(p.peak, p.full_peak);
  EXPECT_LE(p.peak, p.budget);
  EXPECT_NE(p.text.find("7 chunks of 16 (the last of 4)"), std::string::npos) << p.text;
  EXPECT_NE(p.text.find("batch 100"), std::string::npos) << p.text;
}

// What the device's allocator holds unused and cannot give back (on CUDA, free blocks in
// segments shared with live tensors, which a cap on what it reserves counts) is taken as the
// bytes in use are: it raises the plan's need by itself and leaves less room for chunks, but
// not the estimated peak, which counts what tensors hold. Injected here on the CPU; on CUDA
// it is the caching allocator's inactive split bytes (memory/device_memory.h).
TEST(Plan, WhatTheAllocatorHoldsUnusedIsTakenLikeBytesInUse) {
  BudgetGuard restore;
  struct Held {
    ~Held() { koila::testing::set_held_unreleasable(0); }
  } reset;
  const Model m(Kind::MLP);
  Handle x = koila_models::lazy(m.input(100), 0);
  Handle logits = m.features(x.get());
  const uint64_t e16 = koila::estimate_extra(logits->node, koila::RunMode::Forward, 16);
  const uint64_t e32 = koila::estimate_extra(logits->node, koila::RunMode::Forward, 32);
  ASSERT_LT(e16, e32);
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + e32 * 1.1 + (e32 - e16) / 4));
  const PlanInfo free_of_it = plan_of(logits.get(), KOILA_MODE_FORWARD);
  EXPECT_EQ(free_of_it.chunk, 32) << free_of_it.text;
  EXPECT_EQ(free_of_it.text.find("holds unused"), std::string::npos) << free_of_it.text;

  const uint64_t held = (e32 - e16) / 2;  // more than the room chunks of 32 leave
  koila::testing::set_held_unreleasable(held);
  const PlanInfo p = plan_of(logits.get(), KOILA_MODE_FORWARD);
  EXPECT_EQ(p.chunk, 16) << p.text;
  EXPECT_LE(p.need, p.budget) << p.text;
  EXPECT_NE(p.text.find("plus " + koila::human_bytes(held) + " that the allocator holds unused"), std::string::npos)
      << p.text;
  // At the same chunk, the need is the held bytes higher and the peak the same.
  ASSERT_OK(koila_set_memory_budget("cpu", 0));
  koila::testing::set_held_unreleasable(0);
  const PlanInfo roomy = plan_of(logits.get(), KOILA_MODE_FORWARD);
  koila::testing::set_held_unreleasable(held);
  const PlanInfo roomy_held = plan_of(logits.get(), KOILA_MODE_FORWARD);
  ASSERT_EQ(roomy.chunks, 1);
  ASSERT_EQ(roomy_held.chunks, 1);
  EXPECT_EQ(roomy_held.peak, roomy.peak);
  EXPECT_NEAR(static_cast<double>(roomy_held.need), static_cast<double>(roomy.need + held), 1.0);
  // The run keeps to the plan: 16 under the tight budget, as planned.
  ASSERT_OK(koila_set_memory_budget("cpu", free_of_it.budget));
  int64_t ran = 0;
  ASSERT_OK(koila_set_progress([](void* u, const char*, int64_t, int64_t total) { *static_cast<int64_t*>(u) = total; },
                               &ran));
  koila_tensor* out = nullptr;
  ASSERT_OK(koila_eval(&out, logits.get()));
  koila_tensor_free(out);
  ASSERT_OK(koila_set_progress(nullptr, nullptr));
  EXPECT_EQ(ran, p.chunks);
}

// Forward values and training gradients of each model under budgets that force chunks equal
// the unsplit run and plain LibTorch; the measured peak stays within the budget.
class ChunkedModels : public ::testing::TestWithParam<Kind> {};

TEST_P(ChunkedModels, EqualUnsplitAndStayWithinBudget) {
  BudgetGuard restore;
  const Model m(GetParam(), at::kCPU, 7);
  // Uneven batches. The MLP's activations are small next to its parameters, so its chunks
  // only pay off (with the gradient sums they keep) on a larger batch.
  const bool mlp = GetParam() == Kind::MLP;
  const int64_t batch = mlp ? 1000 : 37, chunk = mlp ? 128 : 8, chunks = (batch + chunk - 1) / chunk;
  const at::Tensor xs = m.input(batch), ys = m.target(batch);
  Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0);
  Handle logits = m.features(x.get());
  Handle loss = m.loss(x.get(), y.get());

  // Plain LibTorch.
  m.zero_grad();
  const at::Tensor eager_logits = m.eager_features(xs).detach();
  m.eager_loss(xs, ys).backward();
  const std::vector<at::Tensor> eager_grads = grads_of(m);
  m.zero_grad();

  // Forward in chunks.
  budget_for_chunk(logits.get(), koila::RunMode::Forward, chunk);
  PlanInfo p = plan_of(logits.get(), KOILA_MODE_FORWARD);
  EXPECT_EQ(p.chunk, chunk) << p.text;
  EXPECT_EQ(p.chunks, chunks) << p.text;
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  const at::Tensor out = at::empty({batch, 10});
  const uint64_t before = current_cpu();
  ASSERT_OK(koila_tensor_to_host(logits.get(), out.data_ptr(), out.numel() * sizeof(float)));
  EXPECT_LE(peak_cpu(), p.budget) << p.text;
  EXPECT_LE(peak_cpu(), p.peak + (p.peak - before) / 10) << "estimate exceeded by more than 10%: " << p.text;
  EXPECT_TRUE(at::allclose(out, eager_logits, 1e-4, 1e-5)) << (out - eager_logits).abs().max();

  // The loss value, a mean over chunks.
  double value = 0;
  ASSERT_OK(koila_tensor_item(loss.get(), &value));
  EXPECT_NEAR(value, m.eager_loss(xs, ys).item<double>(), 1e-5);

  // Training in chunks.
  budget_for_chunk(loss.get(), koila::RunMode::Training, chunk);
  p = plan_of(loss.get(), KOILA_MODE_TRAINING);
  EXPECT_EQ(p.chunk, chunk) << p.text;
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  ASSERT_OK(koila_backward(loss.get()));
  EXPECT_LE(peak_cpu(), p.budget) << p.text;
  expect_close(grads_of(m), eager_grads, 1e-4, 1e-6, "chunked");

  // Unsplit through koila gives the same; a second backward adds (as in PyTorch).
  ASSERT_OK(koila_set_memory_budget("cpu", 0));
  EXPECT_EQ(plan_of(loss.get(), KOILA_MODE_TRAINING).chunks, 1);
  m.zero_grad();
  ASSERT_OK(koila_backward(loss.get()));
  expect_close(grads_of(m), eager_grads, 1e-4, 1e-6, "unsplit");
  budget_for_chunk(loss.get(), koila::RunMode::Training, chunk * 2);
  ASSERT_OK(koila_backward(loss.get()));
  std::vector<at::Tensor> doubled;
  for (const at::Tensor& g : eager_grads) doubled.push_back(g * 2);
  expect_close(grads_of(m), doubled, 1e-4, 1e-6, "accumulated");
  m.zero_grad();
}

INSTANTIATE_TEST_SUITE_P(Models, ChunkedModels, ::testing::Values(Kind::MLP, Kind::CNN, Kind::Transformer),
                         [](const ::testing::TestParamInfo<Kind>& info) { return koila_models::name(info.param); });

TEST(Chunked, SumLossAndIgnoredTargets) {
  BudgetGuard restore;
  const Model m(Kind::MLP, at::kCPU, 3);
  // Large enough that chunks need less than the whole batch even with the gradient sums
  // they keep (the MLP's activations are small next to its parameters).
  const int64_t batch = 2000;  // 7 chunks of 256 and one of 208
  const at::Tensor xs = m.input(batch);
  at::Tensor ys = m.target(batch);
  // Targets ignored (-100) cluster in the first chunks: a mean over chunks weighted by
  // samples would be wrong; it must count the targets that are not ignored.
  ys.narrow(0, 0, 300).fill_(-100);
  ys[1990] = -100;
  Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0);
  for (koila_reduction r : {KOILA_REDUCTION_MEAN, KOILA_REDUCTION_SUM}) {
    Handle loss = m.loss(x.get(), y.get(), r);
    m.zero_grad();
    const at::Tensor eager = m.eager_loss(xs, ys, r == KOILA_REDUCTION_MEAN ? at::Reduction::Mean : at::Reduction::Sum);
    eager.backward();
    const auto expected = grads_of(m);
    m.zero_grad();
    check_loss_in_chunks(m, loss.get(), 256, eager.item<double>(), expected,
                         r == KOILA_REDUCTION_MEAN ? "mean" : "sum");
  }
}

TEST(Chunked, PermutedBatchDimAndLiteralReshape) {
  BudgetGuard restore;
  // The batch is dim 1 of the input; permute moves it to 0, a reshape written with the
  // literal batch size merges the two trailing dims, and the result keeps the batch.
  at::manual_seed(5);
  const int64_t batch = 24;
  const at::Tensor xs = at::randn({6, batch, 4, 5});
  const at::Tensor w = at::randn({20, 3}).set_requires_grad(true);
  Handle x = koila_models::lazy(xs, 1), wh = koila_models::share(w);
  const int64_t perm[] = {1, 0, 2, 3}, shape[] = {batch, 6, 20};
  Handle p = CALL(koila_permute, x.get(), perm, 4);
  Handle r = CALL(koila_reshape, p.get(), shape, 3);
  Handle t = CALL(koila_tanh, r.get());
  Handle o = CALL(koila_matmul, t.get(), wh.get());
  EXPECT_EQ(batch_dim_of(o.get()), 0);
  Handle loss = CALL(koila_mean, o.get(), nullptr, 0, 0);

  const at::Tensor expected = at::matmul(at::tanh(xs.permute({1, 0, 2, 3}).reshape({batch, 6, 20})), w);
  expected.mean().backward();
  const at::Tensor expected_grad = w.grad().clone();
  w.mutable_grad() = at::Tensor();

  budget_for_chunk(o.get(), koila::RunMode::Forward, 4);
  EXPECT_EQ(plan_of(o.get(), KOILA_MODE_FORWARD).chunks, 6);
  EXPECT_TRUE(at::allclose(to_aten(o.get()), expected.detach(), 1e-5, 1e-6));
  budget_for_chunk(loss.get(), koila::RunMode::Training, 8);
  EXPECT_EQ(plan_of(loss.get(), KOILA_MODE_TRAINING).chunks, 3);
  ASSERT_OK(koila_backward(loss.get()));
  EXPECT_TRUE(at::allclose(w.grad(), expected_grad, 1e-5, 1e-6)) << (w.grad() - expected_grad).abs().max();
}

TEST(Chunked, TailAfterTheReductions) {
  BudgetGuard restore;
  // loss = 0.5 * mean(ce) + sum over the batch of mse (a second reduction) + |w|^2 (no batch),
  // squared at the end: the gradient of the tail depends on the reductions' values.
  const Model m(Kind::MLP, at::kCPU, 11);
  const int64_t batch = 2000;
  const at::Tensor xs = m.input(batch), ys = m.target(batch), zs = at::randn({batch, 10});
  Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0), z = koila_models::lazy(zs, 0);
  Handle logits = m.features(x.get());
  Handle ce = CALL(koila_cross_entropy, logits.get(), y.get(), KOILA_REDUCTION_MEAN);
  Handle mse = CALL(koila_mse_loss, logits.get(), z.get(), KOILA_REDUCTION_SUM);
  Handle half = CALL(koila_mul_scalar, ce.get(), 0.5);
  Handle sum = CALL(koila_add, half.get(), mse.get());
  const at::Tensor& w = m.params()[4];
  Handle wh = koila_models::share(w);
  Handle w2 = CALL(koila_mul, wh.get(), wh.get());
  Handle reg = CALL(koila_sum, w2.get(), nullptr, 0, 0);
  Handle total = CALL(koila_add, sum.get(), reg.get());
  Handle loss = CALL(koila_mul, total.get(), total.get());
  EXPECT_FALSE(node(loss.get()).couples.size());

  m.zero_grad();
  const at::Tensor lg = m.eager_features(xs);
  const at::Tensor t = 0.5 * at::cross_entropy_loss(lg, ys) + at::mse_loss(lg, zs, at::Reduction::Sum) + (w * w).sum();
  const at::Tensor eager = t * t;
  eager.backward();
  const auto expected = grads_of(m);
  m.zero_grad();
  check_loss_in_chunks(m, loss.get(), 256, eager.item<double>(), expected, "tail");
  m.zero_grad();
}

TEST(Chunked, MaxAndMinOverTheBatchForward) {
  BudgetGuard restore;
  const at::Tensor xs = at::randn({500, 64});
  Handle x = koila_models::lazy(xs, 0);
  Handle e = CALL(koila_exp, x.get());
  const int64_t d0[] = {0};
  Handle mx = CALL(koila_amax, e.get(), d0, 1, 0);
  Handle mn = CALL(koila_amin, e.get(), nullptr, 0, 0);
  Handle s = CALL(koila_sum, e.get(), d0, 1, 1);
  for (auto [h, expected] : std::vector<std::pair<const koila_tensor*, at::Tensor>>{
           {mx.get(), xs.exp().amax(0)}, {mn.get(), xs.exp().amin()}, {s.get(), xs.exp().sum(0, true)}}) {
    budget_for_chunk(h, koila::RunMode::Forward, 64);
    EXPECT_EQ(plan_of(h, KOILA_MODE_FORWARD).chunks, 8);
    EXPECT_TRUE(at::allclose(to_aten(h), expected, 1e-5, 1e-5));
  }
}

TEST(Refusals, CoupledGraphRunsUnsplitOrIsNotSplittable) {
  BudgetGuard restore;
  at::manual_seed(2);
  const at::Tensor xs = at::randn({64, 8, 16});
  const at::Tensor gamma = at::ones({8}).set_requires_grad(true), beta = at::zeros({8}).set_requires_grad(true);
  const at::Tensor rm = at::zeros({8}), rv = at::ones({8});
  Handle x = koila_models::lazy(xs, 0), g = koila_models::share(gamma), b = koila_models::share(beta);
  Handle m = koila_models::share(rm), v = koila_models::share(rv);
  Handle bn = CALL(koila_batch_norm, x.get(), g.get(), b.get(), m.get(), v.get(), 1, 0.1, 1e-5);
  Handle sq = CALL(koila_mul, bn.get(), bn.get());
  Handle loss = CALL(koila_mean, sq.get(), nullptr, 0, 0);
  // Fits: runs unsplit, like eager LibTorch.
  ASSERT_OK(koila_backward(loss.get()));
  const at::Tensor grad = gamma.grad().clone();
  // Does not fit: refused, naming the op; gradients untouched.
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + 1000));
  koila_plan* p = nullptr;
  for (koila_status* s : {koila_plan_new(&p, loss.get(), KOILA_MODE_TRAINING), koila_backward(loss.get())}) {
    EXPECT_EQ(koila_status_code(s), KOILA_ERROR_NOT_SPLITTABLE) << koila_status_message(s);
    EXPECT_NE(std::strstr(koila_status_message(s), "koila_batch_norm"), nullptr) << koila_status_message(s);
    EXPECT_NE(std::strstr(koila_status_message(s), "statistics over the batch"), nullptr) << koila_status_message(s);
    koila_status_free(s);
  }
  EXPECT_EQ(p, nullptr);
  EXPECT_TRUE(at::equal(gamma.grad(), grad));
  // Softmax over the batch dim, read in forward.
  Handle sm = CALL(koila_softmax, x.get(), 0);
  koila_status* s = koila_tensor_to_host(sm.get(), at::empty({64, 8, 16}).data_ptr(), 64 * 8 * 16 * 4);
  EXPECT_EQ(koila_status_code(s), KOILA_ERROR_NOT_SPLITTABLE) << koila_status_message(s);
  EXPECT_NE(std::strstr(koila_status_message(s), "koila_softmax"), nullptr) << koila_status_message(s);
  koila_status_free(s);
  // amax over the batch in training: its gradient is not split.
  const int64_t d0[] = {0};
  const at::Tensor w = at::ones({16}).set_requires_grad(true);
  Handle wh = koila_models::share(w);
  Handle xw = CALL(koila_mul, x.get(), wh.get());
  Handle mx = CALL(koila_amax, xw.get(), d0, 1, 0);
  Handle ml = CALL(koila_sum, mx.get(), nullptr, 0, 0);
  s = koila_backward(ml.get());
  EXPECT_EQ(koila_status_code(s), KOILA_ERROR_NOT_SPLITTABLE) << koila_status_message(s);
  EXPECT_NE(std::strstr(koila_status_message(s), "koila_amax"), nullptr) << koila_status_message(s);
  koila_status_free(s);
  EXPECT_FALSE(w.grad().defined());
}

TEST(Refusals, NotOneSampleFits) {
  BudgetGuard restore;
  const Model m(Kind::MLP);
  Handle x = koila_models::lazy(m.input(16), 0), y = koila_models::lazy(m.target(16), 0);
  Handle loss = m.loss(x.get(), y.get());
  m.zero_grad();
  ASSERT_OK(koila_backward(loss.get()));
  const auto before = grads_of(m);
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + 4096));
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  const uint64_t held = current_cpu();
  koila_status* s = koila_backward(loss.get());
  EXPECT_EQ(koila_status_code(s), KOILA_ERROR_OUT_OF_MEMORY) << koila_status_message(s);
  EXPECT_NE(std::strstr(koila_status_message(s), "Not even a chunk of one sample fits"), nullptr)
      << koila_status_message(s);
  koila_status_free(s);
  double v = 0;
  s = koila_tensor_item(loss.get(), &v);
  EXPECT_EQ(koila_status_code(s), KOILA_ERROR_OUT_OF_MEMORY) << koila_status_message(s);
  koila_status_free(s);
  EXPECT_LE(peak_cpu(), held + 4096);  // nothing ran
  expect_close(grads_of(m), before, 0, 0, "untouched");
  // Without a lazy batch there is nothing to split.
  Handle c = from_aten(at::randn({64, 64}), KOILA_NO_BATCH);
  Handle e = CALL(koila_exp, c.get());
  s = koila_tensor_to_host(e.get(), at::empty({64, 64}).data_ptr(), 64 * 64 * 4);
  EXPECT_EQ(koila_status_code(s), KOILA_ERROR_OUT_OF_MEMORY) << koila_status_message(s);
  EXPECT_NE(std::strstr(koila_status_message(s), "no lazy batch"), nullptr) << koila_status_message(s);
  koila_status_free(s);
  m.zero_grad();
}

// A CNN's lazy training loss over a batch of 32, with PyTorch's gradients for it, and no
// .grad on its parameters: for the tests of what happens when memory runs out.
class OutOfMemory : public ::testing::Test {
 protected:
  OutOfMemory() {
    m.zero_grad();
    m.eager_loss(xs, ys).backward();
    expected = grads_of(m);
    m.zero_grad();
  }
  ~OutOfMemory() override { m.zero_grad(); }

  BudgetGuard restore;
  const Model m{Kind::CNN, at::kCPU, 4};
  const at::Tensor xs = m.input(32), ys = m.target(32);
  Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0);
  Handle loss = m.loss(x.get(), y.get());
  std::vector<at::Tensor> expected;
};

TEST_F(OutOfMemory, RealOutOfMemoryRetriesWithHalfTheChunk) {
  // The planner believes chunks of 16 fit, but the device holds only what chunks of 4 need:
  // the run hits real out-of-memory errors and retries with 8, then 4.
  const uint64_t e4 = koila::estimate_extra(loss->node, koila::RunMode::Training, 4);
  const uint64_t e8 = koila::estimate_extra(loss->node, koila::RunMode::Training, 8);
  const uint64_t e16 = koila::estimate_extra(loss->node, koila::RunMode::Training, 16);
  const uint64_t limit = current_cpu() + (e4 + e8) / 2;
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + (e16 * 1.15)));
  koila::testing::set_cpu_limit(limit);
  koila::Plan used;
  ASSERT_NO_THROW(koila::run_backward(loss->node, &used));
  koila::testing::set_cpu_limit(0);
  EXPECT_EQ(used.chunk, 4) << used.describe();
  expect_close(grads_of(m), expected, 1e-4, 1e-6, "after retries");
  const auto after = grads_of(m);
  // When not even one sample fits for real: KOILA_ERROR_OUT_OF_MEMORY, gradients untouched.
  koila::testing::set_cpu_limit(current_cpu() + 1000);
  koila_status* s = koila_backward(loss.get());
  koila::testing::set_cpu_limit(0);
  EXPECT_EQ(koila_status_code(s), KOILA_ERROR_OUT_OF_MEMORY) << koila_status_message(s);
  koila_status_free(s);
  expect_close(grads_of(m), after, 0, 0, "untouched");
}

// The budget is a hard limit (issue 12, item 3): when estimates fall short, the planned run
// is refused by koila's allocator as it would overrun, and retries with a smaller chunk;
// the measured peak stays within the budget, gradients equal PyTorch's, and what the
// refused attempts held is released (LibTorch keeps a failed backward's pending work until
// the thread's next backward unless koila releases it).
TEST_F(OutOfMemory, TheBudgetIsAHardLimitWhenEstimatesFallShort) {
  const uint64_t e16 = koila::estimate_extra(loss->node, koila::RunMode::Training, 16);
  const uint64_t before = current_cpu();
  const uint64_t budget = before + static_cast<uint64_t>(static_cast<double>(e16) * 1.1);
  ASSERT_OK(koila_set_memory_budget("cpu", budget));
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  koila::testing::set_estimate_scale(0.25);  // every estimate 4 times too low
  koila::Plan planned = koila::make_plan(loss->node, koila::RunMode::Training);
  koila::Plan used;
  EXPECT_NO_THROW(koila::run_backward(loss->node, &used));
  koila::testing::set_estimate_scale(1);
  uint64_t peak = 0;
  ASSERT_OK(koila_memory_stats("cpu", nullptr, &peak));
  EXPECT_GT(planned.chunk, 16) << "the short estimates should plan a chunk that does not fit: " << planned.describe();
  EXPECT_LE(used.chunk, 16) << used.describe();
  EXPECT_LE(peak, budget);
  expect_close(grads_of(m), expected, 1e-4, 1e-6, "after refusals and retries");
  uint64_t grad_bytes = 0;  // the gradients the backward created (zero_grad dropped them)
  for (const at::Tensor& p : m.params()) grad_bytes += p.numel() * p.element_size();
  EXPECT_EQ(current_cpu(), before + grad_bytes) << "the refused attempts left memory held";
}

TEST(Graph, PointerIndexKeepsWhatItStoredAsItGrows) {
  // The walks over whole graphs (orders, schedules, structure keys, autograd leaves) index
  // nodes with it: every stored node is found with its number through many regrowths, a
  // second insert keeps the first number, and what was never stored is absent.
  std::vector<std::unique_ptr<int>> objects;
  for (int i = 0; i < 5000; ++i) objects.push_back(std::make_unique<int>(i));
  koila::PointerIndex<int> index(4);
  for (uint32_t i = 0; i < objects.size(); ++i) ASSERT_TRUE(index.insert(objects[i].get(), i));
  EXPECT_EQ(index.size(), objects.size());
  for (uint32_t i = 0; i < objects.size(); ++i) {
    EXPECT_EQ(index.find(objects[i].get()), i);
    EXPECT_FALSE(index.insert(objects[i].get(), i + 1));
    EXPECT_EQ(index.find(objects[i].get()), i);
  }
  const int other = 0;
  EXPECT_FALSE(index.contains(&other));
  EXPECT_EQ(index.find(&other), koila::PointerIndex<int>::kAbsent);
  EXPECT_EQ(index.size(), objects.size());
}

TEST(Graph, PointerIndexHoldsAFewPointersInsideItselfAndItsCopiesAreTheirOwn) {
  // The indexes a step makes hold a few dozen pointers in their own slots (no allocation);
  // past that they move to the heap and keep every number. Copies and moves, inline or not,
  // find what the original held, and what either stores later stays its own.
  using Index = koila::PointerIndex<int>;
  std::vector<std::unique_ptr<int>> objects;
  for (int i = 0; i < 100; ++i) objects.push_back(std::make_unique<int>(i));
  const uint32_t fits = Index::kInlineSlots / 2;
  Index index;
  for (uint32_t i = 0; i < fits; ++i) ASSERT_TRUE(index.insert(objects[i].get(), 7 * i));
  EXPECT_TRUE(index.is_inline());
  Index copy = index;
  ASSERT_TRUE(copy.insert(objects[fits].get(), 1));  // the copy outgrows its slots, not the original
  EXPECT_FALSE(copy.is_inline());
  EXPECT_TRUE(index.is_inline());
  EXPECT_FALSE(index.contains(objects[fits].get()));
  for (uint32_t i = 0; i < fits; ++i) {
    EXPECT_EQ(index.find(objects[i].get()), 7 * i);
    EXPECT_EQ(copy.find(objects[i].get()), 7 * i);
  }
  EXPECT_EQ(copy.find(objects[fits].get()), 1u);
  Index moved = std::move(copy);
  for (uint32_t i = fits + 1; i < objects.size(); ++i) ASSERT_TRUE(moved.insert(objects[i].get(), i));
  for (uint32_t i = 0; i < objects.size(); ++i)
    EXPECT_EQ(moved.find(objects[i].get()), i < fits ? 7 * i : i == fits ? 1u : i);
  const Index moved_inline = std::move(index);
  EXPECT_TRUE(moved_inline.is_inline());
  for (uint32_t i = 0; i < fits; ++i) EXPECT_EQ(moved_inline.find(objects[i].get()), 7 * i);
  EXPECT_FALSE(Index(Index::kInlineSlots).is_inline());  // (more expected than fit: on the heap at once)
}

TEST(Graph, PointerIndexEmptiedByItsKeysIsAsNew) {
  // Schedules reuse one index per thread, emptied by the keys they put in: after that
  // nothing is found, the same or other keys go in with new numbers, and a key list that
  // names a pointer never stored empties it all instead of searching forever.
  std::vector<std::unique_ptr<int>> objects;
  for (int i = 0; i < 300; ++i) objects.push_back(std::make_unique<int>(i));
  koila::PointerIndex<int> index;
  std::vector<const int*> keys;
  for (uint32_t i = 0; i < 200; ++i) {
    ASSERT_TRUE(index.insert(objects[i].get(), i));
    keys.push_back(objects[i].get());
  }
  index.clear(keys);
  EXPECT_EQ(index.size(), 0u);
  for (const auto& o : objects) EXPECT_FALSE(index.contains(o.get()));
  for (uint32_t i = 100; i < 300; ++i) ASSERT_TRUE(index.insert(objects[i].get(), 1000 + i));
  for (uint32_t i = 0; i < 300; ++i)
    EXPECT_EQ(index.find(objects[i].get()), i < 100 ? koila::PointerIndex<int>::kAbsent : 1000 + i);
  const int stranger = 0;
  std::vector<const int*> wrong{objects[150].get(), &stranger};
  index.clear(wrong);
  EXPECT_EQ(index.size(), 0u);
  for (const auto& o : objects) EXPECT_FALSE(index.contains(o.get()));
}

TEST(Graph, SchedulesMadeOneAfterAnotherOnAThreadAreTheirOwn) {
  // make_schedule's index is the thread's, reused: a schedule of one graph, then of a
  // larger one sharing nodes with it, then of the first again, each lists its own nodes
  // once, inputs before users, with the positions of its own order.
  Handle x = from_aten(at::randn({4, 3}), 0);
  Handle a = CALL(koila_tanh, x.get());
  Handle b = CALL(koila_add, a.get(), a.get());
  Handle c = CALL(koila_mul, b.get(), x.get());
  auto check = [](const std::vector<const koila::Node*>& roots, size_t nodes) {
    const koila::Schedule s = koila::make_schedule(roots);
    ASSERT_EQ(s.order.size(), nodes);
    std::set<const koila::Node*> seen(s.order.begin(), s.order.end());
    EXPECT_EQ(seen.size(), nodes);
    for (size_t i = 0; i < s.order.size(); ++i)
      for (size_t k = s.input_start[i]; k < s.input_start[i + 1]; ++k) {
        ASSERT_GE(s.inputs[k], 0);
        ASSERT_LT(static_cast<size_t>(s.inputs[k]), i);
        EXPECT_EQ(s.order[static_cast<size_t>(s.inputs[k])], s.order[i]->inputs[k - s.input_start[i]].get());
      }
    ASSERT_EQ(s.roots.size(), roots.size());
    for (size_t r = 0; r < roots.size(); ++r) EXPECT_EQ(s.order[s.roots[r]], roots[r]);
  };
  check({&node(a.get())}, 2);
  check({&node(c.get())}, 4);
  check({&node(b.get())}, 3);
  check({&node(c.get()), &node(a.get())}, 4);
}

TEST(Plan, TheDescriptionNamesWhatIsEvaluated) {
  // Written when it is read, not at every plan: a forward's plan names the result's shape
  // and dtype, a backward's the loss, and a refusal says the same.
  Handle x = from_aten(at::randn({8, 3}), 0);
  Handle y = CALL(koila_tanh, x.get());
  Handle loss = CALL(koila_sum, y.get(), nullptr, 0, 0);
  char text[2048];
  size_t needed = 0;
  koila_plan* p = nullptr;
  ASSERT_OK(koila_plan_new(&p, y.get(), KOILA_MODE_FORWARD));
  ASSERT_OK(koila_plan_describe(p, text, sizeof text, &needed));
  koila_plan_free(p);
  EXPECT_EQ(std::string(text).rfind("evaluation of [8, 3] Float on cpu", 0), 0u) << text;
  ASSERT_OK(koila_plan_new(&p, loss.get(), KOILA_MODE_FORWARD));
  ASSERT_OK(koila_plan_describe(p, text, sizeof text, &needed));
  koila_plan_free(p);
  EXPECT_EQ(std::string(text).rfind("evaluation of [] Float on cpu", 0), 0u) << text;
  ASSERT_OK(koila_plan_new(&p, loss.get(), KOILA_MODE_TRAINING));
  ASSERT_OK(koila_plan_describe(p, text, sizeof text, &needed));
  koila_plan_free(p);
  EXPECT_EQ(std::string(text).rfind("backward from [] Float on cpu", 0), 0u) << text;
  ASSERT_OK(koila_set_memory_budget("cpu", 1));
  koila_status* refused = koila_plan_new(&p, y.get(), KOILA_MODE_FORWARD);
  ASSERT_OK(koila_set_memory_budget("cpu", 0));
  EXPECT_EQ(koila_status_code(refused), KOILA_ERROR_OUT_OF_MEMORY) << koila_status_message(refused);
  EXPECT_NE(std::strstr(koila_status_message(refused), "evaluation of [8, 3] Float on cpu"), nullptr)
      << koila_status_message(refused);
  koila_status_free(refused);
}

TEST(Plan, TheStructureKeyFollowsWhatChangesAfterBuilding) {
  // What building fixed is hashed once per graph; gradient flags and how the .grad stand
  // are read at every plan: a graph planned again after they change gets the record of its
  // new state, and the old one when they change back.
  const Model m(Kind::MLP);
  Handle x = koila_models::lazy(m.input(8), 0), y = koila_models::lazy(m.target(8), 0);
  Handle loss = m.loss(x.get(), y.get());
  const koila::NodePtr& root = loss->node;
  const koila::Analysis& a = koila::analysis_of(root, koila::RunMode::Training);
  m.zero_grad();
  const at::Tensor& p = m.params()[0];
  p.mutable_grad() = at::Tensor();
  const auto absent = koila::graph_record(root, a, koila::RunMode::Training);
  EXPECT_EQ(koila::graph_record(root, a, koila::RunMode::Training), absent);
  p.mutable_grad() = at::ones_like(p);
  const auto held = koila::graph_record(root, a, koila::RunMode::Training);
  EXPECT_NE(held, absent);
  p.mutable_grad() = at::Tensor();
  EXPECT_EQ(koila::graph_record(root, a, koila::RunMode::Training), absent);
  p.requires_grad_(false);
  const auto frozen = koila::graph_record(root, a, koila::RunMode::Training);
  p.requires_grad_(true);
  EXPECT_NE(frozen, absent);
  EXPECT_EQ(koila::graph_record(root, a, koila::RunMode::Training), absent);
  // The same structure built again finds the same record.
  Handle again = m.loss(x.get(), y.get());
  EXPECT_EQ(koila::graph_record(again->node, koila::analysis_of(again->node, koila::RunMode::Training),
                                koila::RunMode::Training),
            absent);
}

// Arguments that change the memory an op needs but not its result's shape are part of its
// structure: graphs that differ only there are estimated apart (dropout keeps no mask at p = 0,
// one of the input's size below 1, and only its result at p = 1; causal attention makes its
// mask, a permutation's order its result's strides). A hyperparameter sweep in one process
// would otherwise plan p = 0.5 by p = 0's figures.
TEST(Plan, ArgumentsThatChangeMemoryAreInTheStructureKey) {
  const at::Tensor xs = at::randn({8, 256, 64}).requires_grad_(true);
  const auto record_of = [](const Handle& loss) {
    const koila::NodePtr& root = loss->node;
    return koila::graph_record(root, koila::analysis_of(root, koila::RunMode::Training), koila::RunMode::Training);
  };
  const auto dropout_loss = [&xs](double p, std::vector<Handle>& keep) {
    keep.push_back(koila_models::lazy(xs, 0));
    keep.push_back(CALL(koila_tanh, keep.back().get()));
    keep.push_back(CALL(koila_dropout, keep.back().get(), p, 1));
    keep.push_back(CALL(koila_mul, keep.back().get(), keep.back().get()));
    return CALL(koila_mean, keep.back().get(), nullptr, 0, 0);
  };
  std::vector<Handle> keep;
  const Handle none = dropout_loss(0.0, keep), half = dropout_loss(0.5, keep), tenth = dropout_loss(0.1, keep),
               all = dropout_loss(1.0, keep);
  EXPECT_NE(record_of(none), record_of(half));
  EXPECT_NE(record_of(all), record_of(half));
  EXPECT_EQ(record_of(tenth), record_of(half)) << "p strictly between 0 and 1 keeps the same tensors";
  const uint64_t without = koila::estimate_extra(none->node, koila::RunMode::Training, -1);
  const uint64_t with = koila::estimate_extra(half->node, koila::RunMode::Training, -1);
  EXPECT_GE(with, without + 8 * 256 * 64 * 4) << "p = 0.5 keeps a mask of the input's size that p = 0 does not";

  const auto attention_loss = [&xs](int causal, std::vector<Handle>& keep) {
    keep.push_back(koila_models::lazy(xs, 0));
    koila_tensor* q = keep.back().get();
    keep.push_back(CALL(koila_scaled_dot_product_attention, q, q, q, nullptr, causal));
    return CALL(koila_mean, keep.back().get(), nullptr, 0, 0);
  };
  EXPECT_NE(record_of(attention_loss(0, keep)), record_of(attention_loss(1, keep)));

  // A permutation's order sets the strides of its result, which a reshape after it copies or not.
  const auto permuted_loss = [](std::vector<int64_t> order, std::vector<Handle>& keep) {
    keep.push_back(koila_models::lazy(at::randn({8, 64, 64}), 0));
    keep.push_back(CALL(koila_permute, keep.back().get(), order.data(), order.size()));
    const int64_t flat[2] = {8, 64 * 64};
    keep.push_back(CALL(koila_reshape, keep.back().get(), flat, 2));
    return CALL(koila_mean, keep.back().get(), nullptr, 0, 0);
  };
  EXPECT_NE(record_of(permuted_loss({0, 1, 2}, keep)), record_of(permuted_loss({0, 2, 1}, keep)));
}

TEST(Plan, FreeingTheGraphFreesItsTensors) {
  // The planner's memo lives with the graph and must not keep it alive.
  const uint64_t before = current_cpu();
  {
    const Model m(Kind::MLP);
    Handle x = koila_models::lazy(m.input(64), 0), y = koila_models::lazy(m.target(64), 0);
    Handle loss = m.loss(x.get(), y.get());
    ASSERT_OK(koila_backward(loss.get()));
    plan_of(loss.get(), KOILA_MODE_FORWARD);
    m.zero_grad();
  }
  EXPECT_EQ(current_cpu(), before);
}

TEST(Plan, MeasuredEstimateWhenTheSimulationFails) {
  // An op the meta device cannot run (none of koila's own, but e.g. a module's custom op):
  // the planner measures real probes of 1 and 2 samples instead, once per graph structure,
  // fits peak against chunk size, says so, and the runs stay within the budget.
  BudgetGuard restore;
  koila::testing::set_simulation_fails(true);
  const Model m(Kind::CNN, at::kCPU, 9);
  const at::Tensor xs = m.input(16), ys = m.target(16);
  Handle x = koila_models::lazy(xs, 0), y = koila_models::lazy(ys, 0);
  m.zero_grad();
  m.eager_loss(xs, ys).backward();
  const auto expected = grads_of(m);
  m.zero_grad();
  const uint64_t probes = koila::testing::probes_run();
  Handle loss = m.loss(x.get(), y.get());
  const PlanInfo p = plan_of(loss.get(), KOILA_MODE_TRAINING);
  EXPECT_NE(p.text.find("measured on real probes of 1, 2 and 4 samples"), std::string::npos) << p.text;
  EXPECT_NE(p.text.find("simulating the graph on meta tensors failed"), std::string::npos) << p.text;
  EXPECT_EQ(koila::testing::probes_run() - probes, 3u);
  Handle again = m.loss(x.get(), y.get());  // the graph rebuilt, as every step does
  plan_of(again.get(), KOILA_MODE_TRAINING);
  EXPECT_EQ(koila::testing::probes_run() - probes, 3u) << "a rebuilt graph was probed again";
  // Unsplit: the estimate against the measured peak.
  const uint64_t before = current_cpu();
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  ASSERT_OK(koila_backward(again.get()));
  const uint64_t measured = peak_cpu() - before;
  EXPECT_GE(static_cast<double>(p.full_peak - before) * (1 + koila::kMargin), static_cast<double>(measured));
  expect_close(grads_of(m), expected, 1e-4, 1e-6, "unsplit");
  m.zero_grad();
  // In chunks of 4: within the budget.
  Handle chunked = m.loss(x.get(), y.get());
  budget_for_chunk(chunked.get(), koila::RunMode::Training, 4);
  uint64_t budget = 0;
  ASSERT_OK(koila_memory_budget("cpu", &budget));
  ASSERT_EQ(plan_of(chunked.get(), KOILA_MODE_TRAINING).chunks, 4);
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  ASSERT_OK(koila_backward(chunked.get()));
  EXPECT_LE(peak_cpu(), budget);
  expect_close(grads_of(m), expected, 1e-4, 1e-6, "in chunks of 4");
  m.zero_grad();
}

// Estimates against measurement for mse_loss, whose CPU kernel holds temporaries its meta
// kernel does not (the differential fuzzer measured estimates 1.5 times short): within 1%.
TEST(Estimates, MseLossCountsTheTemporariesOfItsKernel) {
  BudgetGuard restore;
  const at::Tensor xs = at::randn({64, 16, 4, 3}, at::kDouble), ts = at::randn({64, 16, 4, 3}, at::kDouble);
  const at::Tensor p = at::randn({4, 3}, at::kDouble).requires_grad_(true);
  Handle x = koila_models::lazy(xs, 0), t = koila_models::lazy(ts, 0), param = koila_models::share(p);
  Handle h = CALL(koila_mul, x.get(), param.get());
  for (koila_reduction r : {KOILA_REDUCTION_SUM, KOILA_REDUCTION_MEAN}) {
    Handle loss = CALL(koila_mse_loss, h.get(), t.get(), r);
    for (koila::RunMode mode : {koila::RunMode::Forward, koila::RunMode::Training}) {
      SCOPED_TRACE(std::string(r == KOILA_REDUCTION_SUM ? "sum" : "mean") +
                   (mode == koila::RunMode::Forward ? ", forward" : ", training"));
      p.mutable_grad() = at::Tensor();
      const uint64_t estimated = koila::estimate_extra(loss->node, mode, -1);
      const uint64_t before = current_cpu();
      ASSERT_OK(koila_memory_reset_peak("cpu"));
      if (mode == koila::RunMode::Forward) {
        double v = 0;
        ASSERT_OK(koila_tensor_item(loss.get(), &v));
      } else {
        ASSERT_OK(koila_backward(loss.get()));
      }
      uint64_t peak = 0;
      ASSERT_OK(koila_memory_stats("cpu", nullptr, &peak));
      const uint64_t measured = peak - before;
      const double error =
          (static_cast<double>(estimated) - static_cast<double>(measured)) / static_cast<double>(measured);
      EXPECT_LE(std::abs(error), 0.01) << "estimated " << estimated << ", measured " << measured;
    }
  }
}
