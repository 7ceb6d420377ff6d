// Seeded runs reproduce: a step seeded with koila_manual_seed draws the same random numbers
// whether or not koila planned its structure before in the process (the kernel check of a new
// op, probes, calibration, sample-mixing checks and an attempt that ran out of memory draw
// nothing the step would), unsplit, in chunks and recomputing; for koila's ops, a TorchScript
// module and a .pt2 program, each with dropout. And koila_rng_save / koila_rng_load put every
// generator back where it was, so that training with dropout resumes bit for bit.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "../examples/scripted_models.h"
#include "helpers.h"
#include "models.h"
#include "module_helpers.h"
#include "plan/memo.h"
#include "plan/planner.h"
#include "temp_dir.h"

namespace koila_test {
namespace {

// Copies of tensors held outside LibTorch's allocator: what a test keeps to compare steps is not
// memory in use that the next step's plan would count (its chunk would change with it).
struct Copy {
  bool defined = false;
  std::vector<float> data;
};
using Grads = std::vector<Copy>;

Copy copy_of(const at::Tensor& t) {
  Copy c;
  if (!t.defined()) return c;
  c.defined = true;
  const at::Tensor flat = t.detach().to(at::kFloat).contiguous().view({-1});
  c.data.assign(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
  return c;
}

bool same(const Copy& a, const Copy& b) { return a.defined && b.defined && a.data == b.data; }

void expect_bit_for_bit(const Grads& a, const Grads& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined && b[i].defined) << what << ": parameter " << i << " has no gradient";
    double most = 0;
    for (size_t k = 0; k < a[i].data.size() && k < b[i].data.size(); ++k)
      most = std::max(most, static_cast<double>(std::abs(a[i].data[k] - b[i].data[k])));
    EXPECT_TRUE(same(a[i], b[i])) << what << ": parameter " << i << " differs by " << most;
  }
}

// A model whose step a test repeats: `build` makes the loss anew (after the seed, as a user's
// loop builds each step), `grads` reads the parameters' gradients and clears them.
struct Model {
  std::function<Handle(std::vector<Handle>& keep)> build;
  std::function<Grads()> grads;
  std::string device = "cpu";
};

uint64_t current_on(const std::string& device) {
  uint64_t current = 0;
  koila_status_free(koila_memory_stats(device.c_str(), &current, nullptr));
  return current;
}

// One seeded step of `m`: the seed, the loss built, its backward; the gradients.
Grads seeded_step(const Model& m, uint64_t seed) {
  EXPECT_EQ(koila_manual_seed(seed), nullptr);
  std::vector<Handle> keep;
  const Handle loss = m.build(keep);
  koila_status* s = koila_backward(loss.get());
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  return m.grads();
}

enum class Budget { None, Split, Recompute };
const char* name(Budget b) { return b == Budget::None ? "unsplit" : b == Budget::Split ? "split" : "recomputing"; }

// Sets the CPU budget for `b` from a plan of the model's loss (that plan, and what it probed,
// then forgotten), and says whether the plan made under it is the kind asked for.
void set_budget(const Model& m, Budget b) {
  const char* device = m.device.c_str();
  ASSERT_EQ(koila_set_memory_budget(device, 0), nullptr);
  if (b == Budget::None) return;
  std::vector<Handle> keep;
  const Handle loss = m.build(keep);
  const koila::RunMode training = koila::RunMode::Training;
  if (b == Budget::Split) {
    // Halfway between the need of chunks of a quarter of the batch and of half of it: the
    // gradients each step keeps for the comparison do not change the chunk.
    const int64_t chunk = plan_of(loss.get(), KOILA_MODE_TRAINING).batch / 4;
    const double need = static_cast<double>(koila::estimate_extra(loss->node, training, chunk)),
                 twice = static_cast<double>(koila::estimate_extra(loss->node, training, 2 * chunk));
    ASSERT_EQ(koila_set_memory_budget(
                  device, current_on(m.device) + static_cast<uint64_t>((need + twice) / 2 * (1 + koila::kMargin))),
              nullptr);
  } else {
    // The largest of 90%, 80%, ... 50% of one sample's need (with the margin) that plans
    // recomputing.
    const double one = static_cast<double>(koila::estimate_extra(loss->node, training, 1)) * (1 + koila::kMargin);
    for (const double fraction : {0.9, 0.8, 0.7, 0.6, 0.5}) {
      ASSERT_EQ(koila_set_memory_budget(device, current_on(m.device) + static_cast<uint64_t>(one * fraction)), nullptr);
      koila_plan* p = nullptr;
      koila_status* s = koila_plan_new(&p, loss.get(), KOILA_MODE_TRAINING);
      const bool planned = s == nullptr;
      koila_status_free(s);
      koila_plan_free(p);
      if (planned) break;
    }
  }
  koila_plan* p = nullptr;
  koila_status* s = koila_plan_new(&p, loss.get(), KOILA_MODE_TRAINING);
  ASSERT_EQ(s, nullptr) << koila_status_message(s);
  if (b == Budget::Split) {
    EXPECT_GT(koila_plan_num_chunks(p), 1) << "the budget does not split the batch";
  } else {
    EXPECT_GT(koila_plan_recomputed_bytes(p), 0u) << "the budget does not recompute";
  }
  koila_plan_free(p);
  m.grads();
}

// The first seeded step of a structure new to the planner against the second and third, under
// each budget; a different seed draws differently (the check can fail).
void expect_first_step_as_later_ones(const Model& m) {
  BudgetGuard restore;
  struct DeviceBudget {
    std::string device;
    ~DeviceBudget() { koila_status_free(koila_set_memory_budget(device.c_str(), 0)); }
  } device_budget{m.device};
  for (const Budget b : {Budget::None, Budget::Split, Budget::Recompute}) {
    SCOPED_TRACE(name(b));
    set_budget(m, b);
    koila::testing::forget_graph_records();  // the next step plans its structure anew
    const Grads first = seeded_step(m, 1234);
    const Grads second = seeded_step(m, 1234);
    const Grads third = seeded_step(m, 1234);
    expect_bit_for_bit(first, second, "the first step against the second");
    expect_bit_for_bit(second, third, "the second step against the third");
    const Grads other = seeded_step(m, 4321);
    ASSERT_FALSE(other.empty());
    EXPECT_FALSE(same(other[0], first[0])) << "another seed drew the same masks";
  }
}

// A residual tower of per-position MLPs with dropout on the hidden layer, as a user writes it
// with koila's ops: x [batch, positions, width] -> x + W2 dropout(relu(W1 x + b1)) + b2, `layers`
// times, then the mean of squares.
struct Tower {
  std::vector<at::Tensor> params;
  std::vector<Handle> shared;
  at::Tensor input;
  double p;
  std::string device;
  Tower(int64_t batch, int64_t positions, int64_t width, int64_t hidden, int layers, double p_,
        const std::string& device_ = "cpu")
      : p(p_), device(device_) {
    const at::Generator g = at::make_generator<at::CPUGeneratorImpl>(7);
    for (int l = 0; l < layers; ++l) {
      params.push_back((at::randn({hidden, width}, g) * 0.1).requires_grad_(true));
      params.push_back((at::randn({hidden}, g) * 0.1).requires_grad_(true));
      params.push_back((at::randn({width, hidden}, g) * 0.1).requires_grad_(true));
      params.push_back((at::randn({width}, g) * 0.1).requires_grad_(true));
    }
    input = at::randn({batch, positions, width}, g).to(device);
    for (at::Tensor& t : params) t = t.detach().to(device).requires_grad_(true);
    for (const at::Tensor& t : params) shared.push_back(koila_models::share(t));
  }
  Handle loss(std::vector<Handle>& keep) const {
    Handle x = koila_models::lazy(input, 0);
    for (size_t l = 0; l + 3 < shared.size(); l += 4) {
      keep.push_back(CALL(koila_linear, x.get(), shared[l].get(), shared[l + 1].get()));
      keep.push_back(CALL(koila_relu, keep.back().get()));
      keep.push_back(CALL(koila_dropout, keep.back().get(), p, 1));
      keep.push_back(CALL(koila_linear, keep.back().get(), shared[l + 2].get(), shared[l + 3].get()));
      x = CALL(koila_add, x.get(), keep.back().get());
    }
    keep.push_back(CALL(koila_mul, x.get(), x.get()));
    return CALL(koila_mean, keep.back().get(), nullptr, 0, 0);
  }
  Grads grads() const {
    Grads out;
    for (const at::Tensor& t : params) {
      out.push_back(copy_of(t.grad()));
      t.mutable_grad() = at::Tensor();
    }
    return out;
  }
  Model model() const {
    return {[this](std::vector<Handle>& keep) { return loss(keep); }, [this] { return grads(); }, device};
  }
};

// The mean of squares of one call of `m` on `input` made lazy.
Handle call_loss(koila_module* m, const at::Tensor& input, std::vector<Handle>& keep) {
  keep.push_back(koila_models::lazy(input, 0));
  keep.push_back(forward(m, {keep.back().get()}));
  keep.push_back(CALL(koila_mul, keep.back().get(), keep.back().get()));
  return CALL(koila_mean, keep.back().get(), nullptr, 0, 0);
}

// The gradients of the module's parameters, each then dropped (not zeroed: a chunked backward
// adds into a zero gradient in another order than it makes a new one).
Grads module_grads(koila_module* m) {
  Grads out;
  for (const Handle& p : parameters(m)) {
    at::Tensor value = p->node->value;
    out.push_back(copy_of(value.grad()));
    value.mutable_grad() = at::Tensor();
  }
  return out;
}

// `blocks` transformer encoder blocks written in TorchScript, with dropout on the attention
// weights, the feed-forward layer and both residual branches, as nn.TransformerEncoderLayer
// (dropout=0.1) has.
torch::jit::Module scripted_encoder(int blocks, int64_t width, int64_t hidden) {
  at::manual_seed(31);
  const double s = 1.0 / std::sqrt(static_cast<double>(width)), t = 1.0 / std::sqrt(static_cast<double>(hidden));
  const std::string w = std::to_string(width);
  std::vector<scripted::Tensor> params;
  std::string source = "def forward(self, x):\n";
  for (int i = 0; i < blocks; ++i) {
    const std::string n = std::to_string(i);
    for (const char* p : {"wq", "wk", "wv"}) params.push_back({p + n, scripted::init({width, width}, s)});
    params.push_back({"ln1_w" + n, at::ones({width})});
    params.push_back({"ln1_b" + n, at::zeros({width})});
    params.push_back({"w1" + n, scripted::init({hidden, width}, s)});
    params.push_back({"b1" + n, scripted::init({hidden}, 0.1)});
    params.push_back({"w2" + n, scripted::init({width, hidden}, t)});
    params.push_back({"b2" + n, scripted::init({width}, 0.1)});
    params.push_back({"ln2_w" + n, at::ones({width})});
    params.push_back({"ln2_b" + n, at::zeros({width})});
    source += "    q = torch.linear(x, self.wq" + n + ")\n    k = torch.linear(x, self.wk" + n +
              ")\n    v = torch.linear(x, self.wv" + n +
              ")\n"
              "    a = torch.dropout(torch.softmax(torch.matmul(q, k.transpose(1, 2)) * 0.125, -1), 0.1, "
              "self.training)\n"
              "    h = torch.layer_norm(x + torch.dropout(torch.matmul(a, v), 0.1, self.training), [" +
              w + "], self.ln1_w" + n + ", self.ln1_b" + n +
              ", 1e-5)\n"
              "    f = torch.dropout(torch.relu(torch.linear(h, self.w1" +
              n + ", self.b1" + n + ")), 0.1, self.training)\n    f = torch.dropout(torch.linear(f, self.w2" + n +
              ", self.b2" + n + "), 0.1, self.training)\n    x = torch.layer_norm(h + f, [" + w + "], self.ln2_w" + n +
              ", self.ln2_b" + n + ", 1e-5)\n";
  }
  source += "    return x\n";
  return scripted::module("Encoder", params, {}, source);
}

TEST(Seeded, KoilasDropoutDrawsAlikeInTheFirstStepOfAStructureAndLaterOnes) {
  const Tower t(8, 512, 32, 64, 12, 0.2);
  expect_first_step_as_later_ones(t.model());
}

TEST(Seeded, ATorchScriptEncoderWithDropoutDrawsAlikeInTheFirstStepAndLaterOnes) {
  torch::jit::Module net = scripted_encoder(4, 64, 128);
  ModuleHandle m = wrap(net);
  const at::Tensor input = at::randn({8, 256, 64});
  expect_first_step_as_later_ones({[&](std::vector<Handle>& keep) { return call_loss(m.get(), input, keep); },
                                   [&] { return module_grads(m.get()); }});
}

TEST(Seeded, AnExportedProgramWithDropoutDrawsAlikeInTheFirstStepAndLaterOnes) {
  const std::string path = std::string(KOILA_EXPORTED_FIXTURES) + "/2.14.1/dropout_encoder.pt2";
  koila_module* raw = nullptr;
  koila_status* s = koila_module_load(&raw, path.c_str(), "cpu");
  ASSERT_EQ(s, nullptr) << koila_status_message(s);
  ModuleHandle m(raw);
  const at::Tensor input = at::randn({8, 128, 32});
  expect_first_step_as_later_ones({[&](std::vector<Handle>& keep) { return call_loss(m.get(), input, keep); },
                                   [&] { return module_grads(m.get()); }});
}

// A first step whose plan falls short runs out of memory and retries in smaller chunks: the
// retry draws what the attempt it replaces drew, so the step equals the later ones, which plan
// the smaller chunk from the start.
TEST(Seeded, ARetryAfterRunningOutDrawsWhatTheAttemptItReplacesDrew) {
  BudgetGuard restore;
  const Tower t(8, 512, 32, 64, 4, 0.2);
  const Model m = t.model();
  set_budget(m, Budget::Split);
  koila::testing::forget_graph_records();
  koila::testing::set_estimate_scale(0.05);  // the first plan believes the whole batch fits
  koila::Plan used;
  EXPECT_EQ(koila_manual_seed(99), nullptr);
  std::vector<Handle> keep;
  const Handle loss = t.loss(keep);
  koila::run_backward(loss->node, &used);
  const Grads first = t.grads();
  koila::testing::set_estimate_scale(1.0);
  const Grads second = seeded_step(m, 99);
  const Grads third = seeded_step(m, 99);
  expect_bit_for_bit(first, second, "the step that retried against the next");
  expect_bit_for_bit(second, third, "the second step against the third");
}

// ---- Generator states in a file -------------------------------------------------------

at::Tensor draw() { return at::randn({64}); }

TEST(Seeded, SavedGeneratorsDrawAgainWhatTheyDrewAfterTheSave) {
  koila_tests::TempDir dir("koila-rng-");
  const std::string path = (dir / "rng.bin");
  ASSERT_EQ(koila_manual_seed(5), nullptr);
  draw();
  ASSERT_EQ(koila_rng_save(path.c_str()), nullptr);
  const at::Tensor after_save = draw();
  const at::Tensor later = draw();
  EXPECT_FALSE(at::equal(after_save, later));
  ASSERT_EQ(koila_rng_load(path.c_str()), nullptr);
  EXPECT_TRUE(at::equal(draw(), after_save));
  EXPECT_TRUE(at::equal(draw(), later));
  // Saving again over the file replaces it whole.
  ASSERT_EQ(koila_rng_save(path.c_str()), nullptr);
  const at::Tensor next = draw();
  ASSERT_EQ(koila_rng_load(path.c_str()), nullptr);
  EXPECT_TRUE(at::equal(draw(), next));
}

TEST(Seeded, ABadGeneratorFileIsAnIoErrorAndChangesNoGenerator) {
  koila_tests::TempDir dir("koila-rng-");
  const std::string good = (dir / "good.bin");
  ASSERT_EQ(koila_manual_seed(6), nullptr);
  ASSERT_EQ(koila_rng_save(good.c_str()), nullptr);
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 64u);
  const auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream((dir / name), std::ios::binary) << content;
    return (dir / name);
  };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x20;
  std::string newer = bytes;
  newer[8] = 9;  // format 9
  std::string optimizer = bytes;
  optimizer.replace(0, 8, "KOILAOPT");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {(dir / "missing.bin"), "cannot open"},
      {dir.path(), "it is a directory"},
      {write("empty.bin", ""), "not a random generator file"},
      {write("garbage.bin", std::string(100, 'x')), "not a random generator file"},
      {write("truncated.bin", bytes.substr(0, bytes.size() - 10)), "truncated"},
      {write("flipped.bin", flipped), "checksum"},
      {write("newer.bin", newer), "format 9"},
      {write("optimizer.bin", optimizer), "not a random generator file"},
  };
  ASSERT_EQ(koila_manual_seed(7), nullptr);
  ASSERT_EQ(koila_rng_save((dir / "now.bin").c_str()), nullptr);
  const at::Tensor expected = draw();
  for (const auto& [path, says] : bad) {
    SCOPED_TRACE(path);
    ASSERT_EQ(koila_rng_load((dir / "now.bin").c_str()), nullptr);
    koila_status* s = koila_rng_load(path.c_str());
    EXPECT_EQ(koila_status_code(s), KOILA_ERROR_IO);
    const std::string message = koila_status_message(s);
    koila_status_free(s);
    EXPECT_NE(message.find(says), std::string::npos) << message;
    EXPECT_NE(message.find("no generator is changed"), std::string::npos) << message;
    EXPECT_TRUE(at::equal(draw(), expected)) << "a failed load changed a generator";
  }
  EXPECT_EQ(outcome(koila_rng_load(nullptr)).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_rng_save(nullptr)).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_rng_save((dir / "no/such/folder/rng.bin").c_str())).first, KOILA_ERROR_IO);
}

// Training with dropout for six steps (SGD with momentum, in chunks), against the same training
// stopped after three: parameters, optimizer and generators saved, the process's generators
// moved on and the parameters overwritten, then all loaded back. Bit for bit, and not without
// the generators' file (the check can fail).
TEST(Seeded, TrainingWithDropoutResumesBitForBitFromTheGeneratorsFile) {
  BudgetGuard restore;
  koila_tests::TempDir dir("koila-resume-");
  const Tower t(8, 256, 32, 64, 4, 0.3);
  const Model m = t.model();
  set_budget(m, Budget::Split);
  std::vector<koila_tensor*> raw;
  for (const Handle& h : t.shared) raw.push_back(h.get());
  koila_optimizer* o = nullptr;
  ASSERT_EQ(koila_optimizer_sgd(&o, raw.data(), raw.size(), 0.05, 0.9, 0.0), nullptr);
  OptimizerHandle opt(o);
  const auto train = [&](int steps) {
    for (int i = 0; i < steps; ++i) {
      std::vector<Handle> keep;
      const Handle loss = t.loss(keep);
      ASSERT_EQ(outcome(koila_backward(loss.get())).first, KOILA_OK);
      ASSERT_EQ(outcome(koila_optimizer_step(opt.get())).first, KOILA_OK);
      ASSERT_EQ(outcome(koila_optimizer_zero_grad(opt.get())).first, KOILA_OK);
    }
  };
  const auto values = [&] {
    Grads out;
    for (const at::Tensor& p : t.params) out.push_back(copy_of(p));
    return out;
  };
  const auto put = [&](const Grads& v) {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < v.size(); ++i)
      t.params[i].copy_(at::from_blob(const_cast<float*>(v[i].data.data()), t.params[i].sizes()));
  };
  const Grads start = values();
  ASSERT_EQ(koila_manual_seed(2026), nullptr);
  train(3);
  const Grads saved = values();
  ASSERT_EQ(koila_optimizer_save(opt.get(), (dir / "opt.bin").c_str()), nullptr);
  ASSERT_EQ(koila_rng_save((dir / "rng.bin").c_str()), nullptr);
  train(3);
  const Grads straight = values();

  for (const bool with_generators : {true, false}) {
    SCOPED_TRACE(with_generators ? "generators loaded" : "generators not loaded");
    put(start);
    ASSERT_EQ(koila_manual_seed(77), nullptr);  // another process's generators
    draw();
    put(saved);
    ASSERT_EQ(koila_optimizer_load(opt.get(), (dir / "opt.bin").c_str()), nullptr);
    if (with_generators) {
      ASSERT_EQ(koila_rng_load((dir / "rng.bin").c_str()), nullptr);
    }
    train(3);
    const Grads resumed = values();
    if (with_generators) {
      expect_bit_for_bit(resumed, straight, "resumed against never stopped");
    } else {
      EXPECT_FALSE(same(resumed[0], straight[0])) << "the masks do not depend on the generators";
    }
  }
}

// ---- On CUDA (scripts/gpu_check.sh runs these on a lent GPU) --------------------------

TEST(Seeded, OnCudaTheFirstStepOfAStructureDrawsAsLaterOnes) {
  SKIP_WITHOUT_CUDA();
  const Tower t(8, 512, 32, 64, 12, 0.2, "cuda:0");
  expect_first_step_as_later_ones(t.model());
}

TEST(Seeded, OnCudaTheGeneratorsFileHoldsTheDevicesGenerator) {
  SKIP_WITHOUT_CUDA();
  koila_tests::TempDir dir("koila-rng-");
  const std::string path = dir / "rng.bin";
  const auto draw_cuda = [] { return at::rand({64}, at::TensorOptions().device(at::kCUDA)).cpu(); };
  ASSERT_EQ(koila_manual_seed(8), nullptr);
  draw_cuda();
  ASSERT_EQ(koila_rng_save(path.c_str()), nullptr);
  const at::Tensor after_save = draw_cuda(), cpu_after_save = draw();
  ASSERT_EQ(koila_rng_load(path.c_str()), nullptr);
  EXPECT_TRUE(at::equal(draw_cuda(), after_save));
  EXPECT_TRUE(at::equal(draw(), cpu_after_save));
}

}  // namespace
}  // namespace koila_test
