// The real-model corpus (issue 12): torchvision and torch.nn models written by
// make_corpus.py as TorchScript, run through koila's C API against PyTorch's own logits
// and full-batch gradients. For each model, module mode (train; eval too for batch-norm
// models) and koila mode (forward: read the logits; training: backward of the mean cross
// entropy):
//   Unsplit      the plan's estimate against the measured peak: no under-estimate beyond
//                the planner's 10% margin; results equal PyTorch's;
//   ForcedSplit  under the largest budget whose plan has at least 3 chunks: the measured
//                peak stays within the budget, the chunked estimate holds within the
//                margin too, and results equal PyTorch's; batch norm in train mode refuses
//                cleanly with KOILA_ERROR_NOT_SPLITTABLE instead (the default,
//                KOILA_BATCH_STATS_EXACT, whose message names the option).
//   PerChunk     batch-norm models in train mode under KOILA_BATCH_STATS_PER_CHUNK, in
//                4 chunks: logits and gradients equal PyTorch's own chunked run (each
//                chunk normalized with its own statistics, weighted by its share; in
//                float64, koila held to PyTorch's own float32 accuracy where that is lower),
//                and the running statistics equal one update with the statistics of
//                the whole batch each layer saw (PyTorch, in float64, from the layers'
//                inputs over all chunks); the peak stays within the budget. Training
//                also runs under a quarter of the unsplit need.
// Summary.MedianEstimateError: median |error| of the unsplit estimates over the corpus <= 3%.
//
// Tolerances. koila's unsplit run executes the same LibTorch kernels as PyTorch did, so
// its results agree to float32 rounding; chunked runs sum in another order (convolutions
// and matrix products over a chunk instead of the batch, gradients accumulated over
// chunks). Per tensor, max |koila - PyTorch| must be within 1e-4 (logits, loss) or 1e-3
// (gradients) of the tensor's own largest magnitude, or, for gradients, within 1e-5 of the
// largest gradient magnitude of the model: a gradient that nearly cancels out is known
// only to the rounding of the terms it sums (densenet's first batch-norm weight in train
// mode, 5e-6 of the largest gradient, is 2.5% off its float64 value in PyTorch's own
// float32 run). Observed otherwise: below 2e-5 of the tensor's largest magnitude.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "base/libtorch_compat.h"
#include "corpus.h"

using namespace koila_corpus;

namespace {

constexpr double kLogitsTolerance = 1e-4;
constexpr double kGradTolerance = 1e-3;
constexpr double kGradFloor = 1e-5;  // of the model's largest gradient magnitude
constexpr double kMargin = 0.10;     // the planner's margin: measured <= estimate * (1 + margin)
// The chunks ForcedSplit forces at least: 3, or KOILA_CORPUS_MIN_CHUNKS (the GPU check: 4).
const int64_t kMinChunks = [] {
  const char* env = std::getenv("KOILA_CORPUS_MIN_CHUNKS");
  return env && *env ? std::max<int64_t>(2, std::atoll(env)) : int64_t{3};
}();

// On a GPU, TF32 off in cuDNN and cuBLAS, as PyTorch's references there were computed
// (gpu_references.py): the corpus compares koila's chunking, not TF32's rounding. Both kinds
// of LibTorch setting: the older flags, and 2.10's precisions per op, which its kernels read.
[[maybe_unused]] const bool kNoTf32 = [] {
  if (std::string(corpus_device()).rfind("cuda", 0) == 0) {
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setAllowTF32CuBLAS(false);
    static koila::compat::CudaIeeePrecision ieee;  // for the whole process
  }
  return true;
}();

std::string corpus_dir() {
  const char* env = std::getenv("KOILA_CORPUS_DIR");
  return env && *env ? env : KOILA_CORPUS_DIR;
}

struct Case {
  Entry entry;
  std::string module_mode;  // "train" or "eval"
  koila_mode mode;
  bool exported = false;  // the model's torch.export program (NAME.MODE.pt2), not its TorchScript

  bool train() const { return module_mode == "train"; }
  // Batch norm in train mode mixes samples: it runs unsplit or not at all.
  bool couples() const { return entry.batchnorm && train(); }
  std::string label() const {
    return entry.name + (exported ? ".pt2" : "") + " (" + module_mode + " mode, " +
           (mode == KOILA_MODE_TRAINING ? "training" : "forward") + ")";
  }
};

// For gtest's messages about a failed case.
void PrintTo(const Case& c, std::ostream* os) { *os << c.label(); }

std::vector<Case> cases() {
  std::vector<Case> out;
  std::vector<Entry> entries;
  try {
    entries = read_manifest(corpus_dir());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "corpus: %s\n", e.what());
    return out;
  }
  for (const Entry& e : entries)
    for (const std::string& m : e.modes)
      for (koila_mode mode : {KOILA_MODE_FORWARD, KOILA_MODE_TRAINING}) {
        out.push_back(Case{e, m, mode});
        // Its exported twin goes through the same checks against the same references, in
        // training (a forward case repeats its TorchScript twin's figures: the same ATen ops
        // run on the same tensors, and the training case runs that forward too; CI time).
        if (mode == KOILA_MODE_TRAINING && std::find(e.programs.begin(), e.programs.end(), m) != e.programs.end())
          out.push_back(Case{e, m, mode, /*exported=*/true});
      }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return c.entry.name + (c.exported ? "_pt2" : "") + "_" + c.module_mode + "_" +
         (c.mode == KOILA_MODE_TRAINING ? "training" : "forward");
}

void print_run(const Case& c, const char* what, const RunResult& r) {
  const std::string retried = r.retries == 0 ? ""
                                             : " (ran out of memory under it: ran in " + std::to_string(r.ran_chunks) +
                                                   " after " + std::to_string(r.retries) + " retries)";
  std::printf(
      "[corpus] %s %s: estimate %.2f MiB, measured %.2f MiB, error %+.1f%%, %lld chunk(s) of %lld%s, "
      "budget %s, source %s\n[corpus]   plan: %s\n",
      c.label().c_str(), what, mib(r.estimate), mib(r.measured), 100 * r.error(), static_cast<long long>(r.chunks),
      static_cast<long long>(r.chunk), retried.c_str(),
      r.budget >= kUnlimited ? "unlimited" : (std::to_string(mib(r.budget)) + " MiB").c_str(),
      source_of(r.description).c_str(), r.description.c_str());
  const std::string failure = simulation_failure(r.description);
  if (!failure.empty()) std::printf("[corpus]   not simulated on meta tensors: %s\n", failure.c_str());
}

// The run was the plan's: its chunks, without running out of memory and retrying in smaller
// ones (an estimate that fell short under the hard budget, or under the CUDA cap at the plan's
// need) or, recomputing, planning again.
void expect_as_planned(const RunResult& r) {
  EXPECT_EQ(r.retries, 0) << "the run ran out of memory under its plan and retried " << r.retries
                          << " time(s), ending in " << r.ran_chunks << " chunk(s)\n"
                          << r.description;
  EXPECT_EQ(r.ran_chunks, r.chunks) << r.description;
}

// No under-estimate beyond the planner's margin.
void expect_within_margin(const RunResult& r) {
  EXPECT_LE(double(r.measured), double(r.estimate) * (1 + kMargin))
      << "under-estimate beyond the margin: measured " << r.measured << " B, estimated " << r.estimate << " B ("
      << 100 * r.error() << "%)\n"
      << r.description;
}

// Issue 28's target, either way: the estimate within 10% of the measured peak, or within
// 64 KiB of it (the kernels' scalars and the allocator's rounding on the smallest models).
// The oneDNN LSTM's training in chunks of 2 on LibTorch 2.x was +29% (0.43 against 0.33
// MiB) while a chunk of a probe's size took the larger probe's extra.
constexpr double kTarget = 0.10;
constexpr double kTargetBytes = 64 * 1024;
void expect_within_target(const RunResult& r) {
  const double off = std::abs(double(r.estimate) - double(r.measured));
  EXPECT_TRUE(off <= kTarget * double(r.measured) || off <= kTargetBytes)
      << "estimate " << r.estimate << " B against " << r.measured << " B measured (" << 100 * r.error()
      << "%): beyond 10% and 64 KiB\n"
      << r.description;
}

// The run's results against PyTorch's: the logits (forward) or every parameter's gradient
// and the loss (training).
void expect_results(const Case& c, const Graph& g, const Reference& ref, const RunResult& r, const char* what,
                    double grad_tolerance = kGradTolerance) {
  if (c.mode == KOILA_MODE_FORWARD) {
    ASSERT_TRUE(r.logits.defined());
    const Difference d = difference(r.logits, ref.logits, 0.0);
    std::printf("[corpus] %s %s: logits differ by %.2e (relative)\n", c.label().c_str(), what, d.relative());
    EXPECT_TRUE(d.within(kLogitsTolerance))
        << what << ": logits differ from PyTorch's by " << d.diff << " (largest " << d.scale << ")";
    return;
  }
  const std::vector<at::Tensor> grads = g.grads();
  ASSERT_EQ(grads.size(), ref.grads.size());
  double largest = 0;
  for (const auto& g : ref.grads) largest = std::max(largest, g.second.abs().max().item<double>());
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Difference d = difference(grads[i], ref.grads[i].second, kGradFloor * largest);
    EXPECT_TRUE(d.within(grad_tolerance))
        << what << ": gradient of " << ref.grads[i].first << " differs from PyTorch's by " << d.diff << " (largest "
        << d.scale << "; the model's largest gradient " << largest << ")";
    if (d.relative() >= worst) worst = d.relative(), worst_name = ref.grads[i].first;
  }
  std::printf("[corpus] %s %s: %zu gradients, largest difference %.2e (relative, %s)\n", c.label().c_str(), what,
              grads.size(), worst, worst_name.c_str());
}

class Corpus : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    ref_ = read_reference(corpus_dir(), c.entry.name, c.module_mode);
    graph_ = std::make_unique<Graph>(corpus_dir(), c.entry, c.train(), ref_, c.exported);
    // The module's parameters are the ones the references were computed for, in order.
    ASSERT_EQ(graph_->param_names.size(), ref_.grads.size());
    for (size_t i = 0; i < ref_.grads.size(); ++i) ASSERT_EQ(graph_->param_names[i], ref_.grads[i].first);
    // The checks of chunking and refusals are those of plans without recomputation (as they
    // were before it existed); TrainsBelowOneSamplesNeedRecomputing turns it on.
    check(koila_set_recompute(KOILA_RECOMPUTE_OFF), "koila_set_recompute");
  }
  void TearDown() override {
    koila_status_free(koila_set_memory_budget(corpus_device(), 0));
    koila_status_free(koila_set_recompute(KOILA_RECOMPUTE_AS_NEEDED));
  }

  Reference ref_;
  std::unique_ptr<Graph> graph_;
};

TEST_P(Corpus, Unsplit) {
  const Case& c = GetParam();
  const RunResult r = run(*graph_, c.mode, kUnlimited);
  ASSERT_TRUE(r.planned.ok()) << r.planned.message;
  print_run(c, "unsplit", r);
  ASSERT_TRUE(r.ran.ok()) << r.ran.message;
  EXPECT_EQ(r.chunks, 1) << r.description;
  expect_as_planned(r);
  expect_within_margin(r);
  expect_within_target(r);
  expect_results(c, *graph_, ref_, r, "unsplit");
  if (c.mode == KOILA_MODE_TRAINING) {
    double loss = 0;
    ASSERT_TRUE(outcome(koila_tensor_item(graph_->loss.get(), &loss)).ok());
    const double expected = ref_.loss.item<double>();
    EXPECT_LE(std::abs(loss - expected), kLogitsTolerance * std::abs(expected)) << loss << " vs " << expected;
  }
}

TEST_P(Corpus, ForcedSplit) {
  const Case& c = GetParam();
  if (c.couples()) {
    // Half of what the unsplit run needs: the planner would split, but batch norm in
    // training mixes the samples, so it must refuse, naming why, and change nothing.
    const RunResult full = run(*graph_, c.mode, kUnlimited);
    ASSERT_TRUE(full.ran.ok()) << full.ran.message;
    graph_->zero_grad();
    const uint64_t budget = device_in_use() + full.full_estimate / 2;
    const RunResult r = run(*graph_, c.mode, budget);
    std::printf("[corpus] %s under %.2f MiB: %s\n", c.label().c_str(), mib(budget), r.planned.message.c_str());
    EXPECT_EQ(r.planned.code, KOILA_ERROR_NOT_SPLITTABLE) << r.planned.message;
    EXPECT_NE(r.planned.message.find("batch"), std::string::npos) << r.planned.message;
    EXPECT_NE(r.planned.message.find("koila_set_batch_stats(KOILA_BATCH_STATS_PER_CHUNK)"), std::string::npos)
        << r.planned.message;
    EXPECT_EQ(r.ran.code, KOILA_ERROR_NOT_SPLITTABLE) << r.ran.message;
    EXPECT_LE(r.peak, budget) << "a refused run allocated beyond the budget";
    if (c.mode == KOILA_MODE_TRAINING) {
      for (const at::Tensor& grad : graph_->grads()) EXPECT_EQ(grad.abs().max().item<double>(), 0.0);
    }
    return;
  }
  const uint64_t budget = budget_for_chunks(*graph_, c.mode, kMinChunks);
  ASSERT_GT(budget, 0u) << "no budget gives a plan of " << kMinChunks << " chunks or more";
  const RunResult r = run(*graph_, c.mode, budget);
  ASSERT_TRUE(r.planned.ok()) << r.planned.message;
  print_run(c, "forced split", r);
  EXPECT_GE(r.chunks, kMinChunks) << r.description;
  ASSERT_TRUE(r.ran.ok()) << r.ran.message;
  EXPECT_LE(r.peak, budget) << "the run went " << r.peak - budget << " B over its budget\n" << r.description;
  expect_as_planned(r);
  expect_within_margin(r);
  expect_within_target(r);
  expect_results(c, *graph_, ref_, r, "forced split");
}

// Issue 50: a plan that says chunks of 1, 2 or 4 fit runs them within the budget. The budget
// is the largest under which the plan has that chunk (the tightest a user could meet), so
// that an estimate short of a chunk's real need shows as the run going over it, or as the
// device's hard limit refusing it. The results are PyTorch's.
TEST_P(Corpus, ChunksOfOneTwoAndFourStayWithinTheirBudget) {
  const Case& c = GetParam();
  if (c.couples()) GTEST_SKIP() << "batch norm in training runs unsplit (ForcedSplit checks its refusal)";
  const int64_t batch = c.entry.input_shape[0];
  for (const int64_t chunk : {int64_t{4}, int64_t{2}, int64_t{1}}) {
    if (chunk >= batch) continue;
    const std::string what = "chunks of " + std::to_string(chunk);
    // The tightest budget that plans it. Searched again where the plan made at it refuses
    // after all: plans probe what they have room for, which can raise the estimates near the
    // search's end (a refusal breaks no promise; a run out of memory would).
    uint64_t budget = 0;
    RunResult r;
    for (int search = 0; search < 3; ++search) {
      graph_->zero_grad();
      budget = budget_for_chunks(*graph_, c.mode, (batch + chunk - 1) / chunk);
      if (budget == 0) break;
      r = run(*graph_, c.mode, budget);
      if (r.planned.ok()) break;
    }
    if (budget == 0 || !r.planned.ok()) {
      // A chunk that needs as much as a larger one (a backend's other kernels for one
      // sample) is never planned: the plan refuses where the larger does not fit.
      std::printf("[corpus] %s %s: no budget plans them%s%s\n", c.label().c_str(), what.c_str(),
                  budget ? "; the last plan refused: " : "", budget ? r.planned.message.c_str() : "");
      EXPECT_TRUE(budget == 0 || r.planned.code == KOILA_ERROR_OUT_OF_MEMORY) << r.planned.message;
      continue;
    }
    print_run(c, what.c_str(), r);
    // (A chunk whose split run holds more than a smaller one's, as the first step's chunks of 4
    // of convnext_tiny hold beside the .grad they create, is never planned: the tightest budget
    // above the smaller chunk's gives the whole batch.)
    EXPECT_LE(r.chunk, chunk) << r.description;
    ASSERT_TRUE(r.ran.ok()) << what << " ran out of memory under a plan that said they fit: " << r.ran.message << "\n"
                            << r.description;
    EXPECT_LE(r.peak, budget) << what << ": the run went " << r.peak - budget << " B over its budget\n"
                              << r.description;
    expect_as_planned(r);
    expect_within_target(r);
    // Chunks of one sample add eight float32 sums where PyTorch's batch adds one, and backends
    // choose other kernels for one sample: held to PyTorch's own gradient accumulation over
    // chunks of one, as far from its whole batch as koila's run is (unet_small's mid.3.weight:
    // 6.43e-06 either way, 1.3e-3 of its largest element; on an AVX-512 EPYC, resnet18's
    // layer4.1.conv2.weight in eval mode 7.72e-3 either way, oneDNN's one-sample convolutions),
    // with a fifth more, and never below twice the usual tolerance.
    const double own = ref_.chunks_of_one_distance;
    if (r.chunk == 1 && c.mode == KOILA_MODE_TRAINING)
      std::printf("[corpus] %s %s: PyTorch's own chunks of 1 differ by %.2e\n", c.label().c_str(), what.c_str(), own);
    expect_results(c, *graph_, ref_, r, what.c_str(),
                   r.chunk == 1 ? std::max(2 * kGradTolerance, 1.2 * own) : kGradTolerance);
  }
}

// Issue 51: below what one sample needs without recomputation (below the unsplit batch's need
// where batch norm in training mixes the batch), a model trains recomputing, within the budget and
// with PyTorch's gradients, or is refused with the least budget that would fit. The budget is the
// least that plans recomputing (bisected), run where it is below the need; where recomputation
// saves nothing (small models whose need is mostly gradients), 95% of the need is refused. The
// corpus's models are TorchScript modules and .pt2 programs, one call each: the call runs in
// segments of its own graph (module/segmented_call.h).
TEST_P(Corpus, BelowOneSamplesNeedItTrainsRecomputingOrSaysTheLeastBudgetThatWould) {
  const Case& c = GetParam();
  if (c.mode != KOILA_MODE_TRAINING) GTEST_SKIP() << "an evaluation keeps nothing for a backward to recompute";
  const koila_tensor* t = graph_->target_of(c.mode);
  const uint64_t need = least_budget_that_plans(t, c.mode);  // (recomputation off: SetUp)
  ASSERT_GT(need, 0u);
  check(koila_set_recompute(KOILA_RECOMPUTE_AS_NEEDED), "koila_set_recompute");
  const uint64_t held = device_in_use();
  const uint64_t least = least_budget_that_plans(t, c.mode);
  const char* whose = c.couples() ? "the unsplit run's" : "one sample's";
  std::printf("[corpus] %s: %s need %.2f MiB beyond what is held, recomputing %.2f MiB (%.0f%%)\n", c.label().c_str(),
              whose, mib(need - held), mib(least > held ? least - held : 0),
              least > held ? 100.0 * static_cast<double>(least - held) / static_cast<double>(need - held) : 0.0);
  if (least == 0 || least >= need) {
    // Recomputation frees nothing that counts here: below the need, a refusal that says the
    // least budget that would do, and nothing changed.
    graph_->zero_grad();
    const uint64_t budget = held + static_cast<uint64_t>(0.95 * static_cast<double>(need - held));
    const RunResult r = run(*graph_, c.mode, budget);
    ASSERT_FALSE(r.planned.ok()) << r.description;
    std::printf("[corpus] %s at 95%% of %s need: refused: %s\n", c.label().c_str(), whose, r.planned.message.c_str());
    EXPECT_EQ(r.planned.code, c.couples() ? KOILA_ERROR_NOT_SPLITTABLE : KOILA_ERROR_OUT_OF_MEMORY);
    EXPECT_NE(r.planned.message.find("is the least budget that would"), std::string::npos) << r.planned.message;
    EXPECT_EQ(r.ran.code, r.planned.code) << r.ran.message;
    for (const at::Tensor& grad : graph_->grads()) EXPECT_EQ(grad.abs().max().item<double>(), 0.0);
    return;
  }
  // The tightest budget that plans recomputing, below the need: it trains within it, with
  // PyTorch's gradients.
  graph_->zero_grad();
  const RunResult r = run(*graph_, c.mode, least);
  ASSERT_TRUE(r.planned.ok()) << r.planned.message;
  std::printf(
      "[corpus] %s recomputing under %.2f MiB (%s need: %.2f MiB): estimate %.2f MiB, measured %.2f MiB, %lld "
      "chunk(s) of %lld\n[corpus]   plan: %s\n",
      c.label().c_str(), mib(least), whose, mib(need), mib(r.estimate), mib(r.measured),
      static_cast<long long>(r.chunks), static_cast<long long>(r.chunk), r.description.c_str());
  EXPECT_NE(r.description.find("Recomputed:"), std::string::npos) << r.description;
  ASSERT_TRUE(r.ran.ok()) << "ran out of memory under a recomputing plan that said it fits: " << r.ran.message << "\n"
                          << r.description;
  EXPECT_LE(r.peak, least) << "the run went " << r.peak - least << " B over its budget\n" << r.description;
  expect_as_planned(r);
  expect_within_margin(r);
  expect_results(c, *graph_, ref_, r, "recomputing", r.chunk == 1 ? 2 * kGradTolerance : kGradTolerance);
  // Against the same chunks without recomputation (at the need, recomputation off): on the CPU,
  // whose kernels are deterministic, bit for bit where each gradient adds its parts in the same
  // order (9 of the 11 models that recompute here); where a value that several ops read (a
  // skip connection crossing segments) gets its parts in another order, to float rounding.
  std::vector<at::Tensor> recomputed;
  for (const at::Tensor& g : graph_->grads()) recomputed.push_back(g.clone());
  graph_->zero_grad();
  check(koila_set_recompute(KOILA_RECOMPUTE_OFF), "koila_set_recompute");
  const RunResult plain = run(*graph_, c.mode, device_in_use() + (need - held));
  ASSERT_TRUE(plain.ran.ok()) << plain.ran.message;
  if (plain.chunk != r.chunk || corpus_device() != std::string("cpu")) return;
  const std::vector<at::Tensor> without = graph_->grads();
  ASSERT_EQ(without.size(), recomputed.size());
  size_t bitwise = 0;
  for (size_t i = 0; i < without.size(); ++i) {
    if (at::equal(recomputed[i], without[i])) {
      ++bitwise;
      continue;
    }
    const double scale = std::max(1e-3, without[i].abs().max().item<double>());
    EXPECT_LE((recomputed[i] - without[i]).abs().max().item<double>(), 1e-5 * scale) << graph_->param_names[i];
  }
  std::printf("[corpus] %s: %zu of %zu gradients bit for bit those of the same chunks without recomputation\n",
              c.label().c_str(), bitwise, without.size());
}

INSTANTIATE_TEST_SUITE_P(Models, Corpus, ::testing::ValuesIn(cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Corpus);

// ---- Batch statistics per chunk ------------------------------------------------------

constexpr double kStatsTolerance = 1e-4;  // of the buffer's largest magnitude

// The buffers of the module behind `m` now, by name (saved through the C API and read back).
std::map<std::string, at::Tensor> module_buffers(koila_module* m) {
  size_t n = 0;
  check(koila_module_num_buffers(m, &n), "koila_module_num_buffers");
  std::map<std::string, at::Tensor> out;
  for (size_t i = 0; i < n; ++i) {
    const std::string name =
        text_of([&](char* buf, size_t cap, size_t* needed) { return koila_module_buffer_name(m, i, buf, cap, needed); },
                "koila_module_buffer_name");
    koila_tensor* b = nullptr;
    check(koila_module_buffer(&b, m, i), "koila_module_buffer");
    Tensor buffer(b);
    koila_dtype dtype;
    check(koila_tensor_dtype(buffer.get(), &dtype), "koila_tensor_dtype");
    size_t ndim = 0;
    int64_t dims[8];
    check(koila_tensor_shape(buffer.get(), dims, 8, &ndim), "koila_tensor_shape");
    at::Tensor value =
        at::empty(std::vector<int64_t>(dims, dims + ndim), dtype == KOILA_INT64 ? at::kLong : at::kFloat);
    check(koila_tensor_to_host(buffer.get(), value.data_ptr(), value.numel() * value.element_size()),
          "koila_tensor_to_host");
    out.emplace(name, value);
  }
  return out;
}

// What NAME.per_chunk.ref.pt holds beyond a Reference (read in one pass): the chunk size,
// the expected buffers (stat__L__B is buffer B of layer L, '.' written "__") and PyTorch's
// own float32 errors against its float64 run ("logits", and each parameter's gradient).
struct PerChunkExtras {
  int64_t chunk = -1;
  std::map<std::string, at::Tensor> stats;
  std::map<std::string, double> errors;
};

PerChunkExtras read_per_chunk_extras(const std::string& dir, const std::string& name) {
  auto dotted = [](std::string s) {
    for (size_t i; (i = s.find("__")) != std::string::npos;) s.replace(i, 2, ".");
    return s;
  };
  torch::jit::Module m = torch::jit::load(dir + "/" + name + ".per_chunk.ref.pt");
  PerChunkExtras out;
  for (const auto& b : m.named_buffers(/*recurse=*/false)) {
    if (b.name == "chunk") out.chunk = b.value.item<int64_t>();
    if (b.name == "err_logits") out.errors.emplace("logits", b.value.item<double>());
    if (b.name.rfind("errgrad__", 0) == 0) out.errors.emplace(dotted(b.name.substr(9)), b.value.item<double>());
    if (b.name.rfind("stat__", 0) == 0) out.stats.emplace(dotted(b.name.substr(6)), b.value);
  }
  return out;
}

// koila's float32 run against PyTorch's float64 one, held to the tolerances of the forced
// split or, where PyTorch's own float32 run is further off (chunks normalized with their own
// statistics can be ill-conditioned), to kPyTorchErrorFactor times PyTorch's own error.
// That error is one sample of float32 rounding noise: on mobilenet_v2 in chunks of 8,
// koila's run is bitwise PyTorch's scripted run in the same process, yet 1.1% off float64
// where PyTorch's eager run was 0.8% off, and per tensor up to 5.8 times PyTorch's figure.
// A fault (statistics of the wrong samples, a chunk weighted wrongly) is off by far more.
constexpr double kPyTorchErrorFactor = 10;

void expect_as_accurate_as_pytorch(const Case& c, const Graph& g, const Reference& ref, const RunResult& r,
                                   const std::map<std::string, double>& errors) {
  auto check_one = [&](const std::string& name, const at::Tensor& got, const at::Tensor& want, double rtol,
                       double floor) {
    const auto error = errors.find(name);
    EXPECT_NE(error, errors.end()) << "no PyTorch error recorded for " << name;
    const double pytorch = error == errors.end() ? 0.0 : error->second;
    const Difference d = difference(got, want, std::max(floor, kPyTorchErrorFactor * pytorch));
    EXPECT_TRUE(d.within(rtol)) << name << " differs from PyTorch's float64 value by " << d.diff << " (largest "
                                << d.scale << "; PyTorch's own float32 run by " << pytorch << ")";
    return d.diff / std::max({d.scale * rtol, d.floor, 1e-30});
  };
  double worst = 0;
  std::string worst_name;
  if (c.mode == KOILA_MODE_FORWARD) {
    ASSERT_TRUE(r.logits.defined());
    worst = check_one("logits", r.logits, ref.logits, kLogitsTolerance, 0.0);
    worst_name = "logits";
  } else {
    const std::vector<at::Tensor> grads = g.grads();
    ASSERT_EQ(grads.size(), ref.grads.size());
    double largest = 0;
    for (const auto& grad : ref.grads) largest = std::max(largest, grad.second.abs().max().item<double>());
    for (size_t i = 0; i < grads.size(); ++i) {
      const double ratio =
          check_one(ref.grads[i].first, grads[i], ref.grads[i].second, kGradTolerance, kGradFloor * largest);
      if (ratio >= worst) worst = ratio, worst_name = ref.grads[i].first;
    }
  }
  std::printf("[corpus] %s per-chunk statistics: results within %.2f of their tolerance at most (%s)\n",
              c.label().c_str(), worst, worst_name.c_str());
}

std::vector<Case> batch_norm_training_cases() {
  std::vector<Case> out;
  for (const Case& c : cases())
    if (c.couples()) out.push_back(c);
  return out;
}

class PerChunk : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { ASSERT_TRUE(outcome(koila_set_batch_stats(KOILA_BATCH_STATS_PER_CHUNK)).ok()); }
  void TearDown() override {
    koila_status_free(koila_set_batch_stats(KOILA_BATCH_STATS_EXACT));
    koila_status_free(koila_set_memory_budget(corpus_device(), 0));
  }
};

TEST_P(PerChunk, EqualsPyTorchsChunkedRun) {
  const Case& c = GetParam();
  const std::string dir = corpus_dir();
  const Reference ref = read_reference(dir, c.entry.name, "per_chunk");
  const PerChunkExtras extras = read_per_chunk_extras(dir, c.entry.name);
  const int64_t chunk = extras.chunk;
  ASSERT_GT(chunk, 0) << "the per-chunk reference has no chunk size";
  const Graph g(dir, c.entry, /*train=*/true, ref, c.exported);
  const std::map<std::string, at::Tensor> before = module_buffers(g.module.get());

  const uint64_t budget = budget_for_chunks(g, c.mode, 4);
  ASSERT_GT(budget, 0u) << "no budget gives a plan of 4 chunks or more";
  const RunResult r = run(g, c.mode, budget);
  ASSERT_TRUE(r.planned.ok()) << r.planned.message;
  print_run(c, "per-chunk statistics", r);
  ASSERT_TRUE(r.ran.ok()) << r.ran.message;
  ASSERT_EQ(r.chunk, chunk) << "the reference was computed in chunks of " << chunk << "\n" << r.description;
  EXPECT_NE(r.description.find("Batch statistics: per chunk"), std::string::npos) << r.description;
  EXPECT_LE(r.peak, budget) << "the run went " << r.peak - budget << " B over its budget\n" << r.description;
  expect_as_planned(r);
  // What the pass keeps per chunk (each batch norm's mean and inverse standard deviation of
  // every chunk, until the one update) is counted: without it the forward reads were 7-17%
  // short (mobilenet_v3_small: 48 KiB a chunk).
  expect_within_margin(r);
  expect_within_target(r);
  EXPECT_GE(r.error(), -0.03) << r.description;
  expect_as_accurate_as_pytorch(c, g, ref, r, extras.errors);

  // One update of the running statistics, with the whole batch's.
  const std::map<std::string, at::Tensor>& stats = extras.stats;
  ASSERT_FALSE(stats.empty());
  const std::map<std::string, at::Tensor> after = module_buffers(g.module.get());
  double worst = 0;
  for (const auto& [name, want] : stats) {
    ASSERT_TRUE(after.count(name)) << "no buffer " << name << " in the module";
    const at::Tensor& got = after.at(name);
    if (want.scalar_type() == at::kLong) {
      EXPECT_TRUE(at::equal(got, want)) << name << ": " << got.item<int64_t>() << ", expected " << want.item<int64_t>();
      continue;
    }
    // A mean near zero is known to the rounding of the data it averages: at least the
    // tolerance of the layer's spread (the square root of its running variance).
    double floor = 0;
    const size_t at_mean = name.rfind("running_mean");
    if (at_mean != std::string::npos) {
      const std::string var = name.substr(0, at_mean) + "running_var";
      if (stats.count(var)) floor = kStatsTolerance * std::sqrt(stats.at(var).abs().max().item<double>());
    }
    const Difference d = difference(got, want, floor);
    const Difference moved = difference(before.at(name), want, 0.0);
    EXPECT_TRUE(d.within(kStatsTolerance)) << name << " differs from PyTorch's by " << d.diff << " (largest " << d.scale
                                           << "; before the run it differed by " << moved.diff << ")";
    worst = std::max(worst, d.relative());
  }
  std::printf("[corpus] %s per-chunk statistics: %zu buffers, largest difference %.2e (relative)\n", c.label().c_str(),
              stats.size(), worst);
}

// Training under a quarter of what the unsplit run needs.
TEST_P(PerChunk, TrainsUnderAQuarterOfTheUnsplitNeed) {
  const Case& c = GetParam();
  if (c.mode != KOILA_MODE_TRAINING) GTEST_SKIP() << "training only";
  const std::string dir = corpus_dir();
  const Reference ref = read_reference(dir, c.entry.name, "train");
  const Graph g(dir, c.entry, /*train=*/true, ref, c.exported);
  const RunResult full = run(g, c.mode, kUnlimited);
  ASSERT_TRUE(full.ran.ok()) << full.ran.message;
  g.zero_grad();
  const uint64_t budget = device_in_use() + full.full_estimate / 4;
  const RunResult r = run(g, c.mode, budget);
  std::printf("[corpus] %s under a quarter of the unsplit need (%.2f of %.2f MiB): %s\n", c.label().c_str(),
              mib(full.full_estimate / 4), mib(full.full_estimate),
              r.ran.ok() ? r.description.c_str() : r.ran.message.c_str());
  ASSERT_TRUE(r.planned.ok()) << r.planned.message;
  ASSERT_TRUE(r.ran.ok()) << r.ran.message;
  EXPECT_GT(r.chunks, 1);
  EXPECT_LE(r.peak, budget) << "the run went " << r.peak - budget << " B over its budget\n" << r.description;
  std::printf("[corpus]   measured %.2f MiB beyond what was held (the unsplit step: %.2f MiB)\n", mib(r.measured),
              mib(full.measured));
  for (const at::Tensor& grad : g.grads()) EXPECT_TRUE(at::isfinite(grad).all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(Models, PerChunk, ::testing::ValuesIn(batch_norm_training_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PerChunk);

// Issue 13's target for chunking without a second copy of the gradients: resnet18 in eval
// mode trains under half of what its unsplit step needs (and under a quarter).
TEST(Summary, Resnet18EvalTrainsUnderAFractionOfItsNeed) {
  const std::string dir = corpus_dir();
  const Reference ref = read_reference(dir, "resnet18", "eval");
  const Graph g(dir, "resnet18", /*train=*/false, ref);
  const RunResult full = run(g, KOILA_MODE_TRAINING, kUnlimited);
  ASSERT_TRUE(full.ran.ok()) << full.ran.message;
  for (int fraction : {2, 4}) {
    g.zero_grad();
    const uint64_t budget = device_in_use() + full.measured / fraction;
    const RunResult r = run(g, KOILA_MODE_TRAINING, budget);
    std::printf("[corpus] resnet18 (eval mode, training) under 1/%d of the unsplit step's measured %.2f MiB: %s%s\n",
                fraction, mib(full.measured), r.ran.ok() ? "" : "FAILED ",
                r.ran.ok() ? r.description.c_str() : r.ran.message.c_str());
    ASSERT_TRUE(r.ran.ok()) << r.ran.message;
    EXPECT_LE(r.peak, budget) << "the run went " << r.peak - budget << " B over its budget";
    std::printf("[corpus]   measured %.2f MiB beyond what was held (%.0f%% of the unsplit step's)\n", mib(r.measured),
                100.0 * double(r.measured) / double(full.measured));
  }
}

// The attention models (issue 28): on LibTorch 2.x the CPU runs scaled_dot_product_attention
// through its flash kernel, which never holds the attention weights; a simulation through
// the meta device's "math" choice counted them and estimated transformer_encoder 31% over
// its measured peak (forward and training) and vit_small 23% (training). Now reads are
// within 2% and training within 15%: at the corpus's 8 samples what remains is mostly
// constant (the flash kernels' per-thread blocks, which the calibration probes find where
// attention peaks and add at every size: +56 KiB of vit_small's 0.94 MiB).
TEST(Summary, AttentionIsEstimatedAsTheCpuRunsIt) {
  int checked = 0;
  for (const Case& c : cases()) {
    if (c.entry.name != "transformer_encoder" && c.entry.name != "vit_small") continue;
    const Reference ref = read_reference(corpus_dir(), c.entry.name, c.module_mode);
    const Graph g(corpus_dir(), c.entry, c.train(), ref, c.exported);
    const RunResult r = run(g, c.mode, kUnlimited);
    ASSERT_TRUE(r.ran.ok()) << c.label() << ": " << r.ran.message;
    std::printf("[corpus] %-45s estimate %8.2f MiB  measured %8.2f MiB  error %+6.1f%%\n", c.label().c_str(),
                mib(r.estimate), mib(r.measured), 100 * r.error());
    EXPECT_LE(std::abs(r.error()), c.mode == KOILA_MODE_FORWARD ? 0.02 : 0.15) << c.label() << ": " << r.description;
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no attention model in the corpus at " << corpus_dir();
}

// What the calibration probes take beyond their simulation is added op by op, where it was
// taken. Added at the peak instead (the most any op showed), it over-estimated resnet18's
// forward reads by 19% unsplit and 64% in chunks of 8 (a workspace of a late layer at 2 and
// 4 samples, extrapolated to the first layers' peak), convnext_small's training by 6%
// unsplit and 18% in chunks of 2, and left resnet18's training in chunks of 8 7.5% short.
TEST(Summary, CalibrationIsAddedWhereItsOpsTookIt) {
  int checked = 0;
  for (const Case& c : cases()) {
    const bool resnet_read = c.entry.name == "resnet18" && c.mode == KOILA_MODE_FORWARD;
    const bool convnext = c.entry.name == "convnext_small" && c.mode == KOILA_MODE_TRAINING && !c.exported;
    const bool resnet_train = c.entry.name == "resnet18" && c.mode == KOILA_MODE_TRAINING && !c.exported && !c.train();
    if (!resnet_read && !convnext && !resnet_train) continue;
    const Reference ref = read_reference(corpus_dir(), c.entry.name, c.module_mode);
    Graph g(corpus_dir(), c.entry, c.train(), ref, c.exported);
    for (const bool split : {false, true}) {
      if (split && c.couples()) continue;
      g.zero_grad();
      const uint64_t budget = split ? budget_for_chunks(g, c.mode, kMinChunks) : kUnlimited;
      ASSERT_GT(budget, 0u) << c.label() << ": no budget gives a plan of " << kMinChunks << " chunks or more";
      const RunResult r = run(g, c.mode, budget);
      ASSERT_TRUE(r.ran.ok()) << c.label() << ": " << r.ran.message;
      if (split) {
        EXPECT_GE(r.chunks, kMinChunks) << r.description;
      }
      std::printf("[corpus] %-45s %d chunk(s): estimate %8.2f MiB  measured %8.2f MiB  error %+6.1f%%\n",
                  c.label().c_str(), static_cast<int>(r.chunks), mib(r.estimate), mib(r.measured), 100 * r.error());
      EXPECT_LE(std::abs(r.error()), split ? 0.05 : 0.03)
          << c.label() << (split ? " split: " : " unsplit: ") << r.description;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << "no resnet18 or convnext_small in the corpus at " << corpus_dir();
}

// The target over the whole corpus: the median |error| of the unsplit estimates.
TEST(Summary, MedianEstimateError) {
  const std::vector<Case> all = cases();
  ASSERT_FALSE(all.empty()) << "no corpus in " << corpus_dir();
  std::vector<double> errors;
  for (const Case& c : all) {
    const Reference ref = read_reference(corpus_dir(), c.entry.name, c.module_mode);
    const Graph g(corpus_dir(), c.entry, c.train(), ref, c.exported);
    const RunResult r = run(g, c.mode, kUnlimited);
    ASSERT_TRUE(r.ran.ok()) << c.label() << ": " << r.ran.message;
    std::printf("[corpus] %-45s estimate %8.2f MiB  measured %8.2f MiB  error %+6.1f%%  %s\n", c.label().c_str(),
                mib(r.estimate), mib(r.measured), 100 * r.error(), source_of(r.description).c_str());
    errors.push_back(std::abs(r.error()));
  }
  std::sort(errors.begin(), errors.end());
  const double median =
      errors.size() % 2 ? errors[errors.size() / 2] : (errors[errors.size() / 2 - 1] + errors[errors.size() / 2]) / 2;
  std::printf("[corpus] median |error| %.1f%% over %zu runs\n", 100 * median, errors.size());
  EXPECT_LE(median, 0.03) << "median |error| of the estimates over the corpus";
}

}  // namespace
