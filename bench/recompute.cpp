// Recomputation under a budget (issue 51): for each model, one sample (a long sequence, a
// large image), a training step unconstrained (recomputation off, unsplit), then under budgets of
// 1/2 and 1/4 of the activation memory (what the unconstrained step took beyond what was in use
// and its parameters' gradients) and at the least budget that plans, recomputing as koila chooses (each beside the
// parameters' gradients, which no recomputation frees: they are not activations). Prints per row the budget, what the
// plan recomputes and its estimated extra forward work, the fastest step's time against the unconstrained step's, and
// the measured peak (koila's allocator) against the budget; and what the plan's peak is made of (its timeline's parts):
// the activations held then (kept and recomputed), the temporaries (gradients of activations in flight) and what the
// estimate adds beyond its simulation (kernels' workspaces that earlier runs showed).
//
//   usage: bench_recompute [repeats [model...]]   (default 3; a warm-up step before each; every
//                                                  model unless some are named)
//
// Each constrained step is timed right after an unconstrained one, and the fastest of each taken
// (the machine's speed drifts, at times by 2x, by more than the differences measured: the fastest
// step is the one least slowed by it; medians gave ratios below 1).
//
// Models, written with koila's ops (parameters are eager tensors; the .grad are taken away
// before each step, zero_grad(set_to_none=True)):
//   transformer  6 pre-norm layers, width 128, one attention head, 4x MLP, 1024 positions
//   resnet       a 3x3 stem and 8 residual blocks (conv, relu, conv, add, relu), 32 channels, 128x128
//   unet         three levels (16, 32, 64 channels; 2x2 max pooling; nearest upsampling by 2; skip
//                connections concatenated), 128x128
//   mlp          24 x (linear 256 -> 256, gelu) over 2048 positions
//   resnet34     torchvision's resnet34 (batch norm in training), one 512 x 512 image
//   unet-bn      milesial/Pytorch-UNet's U-Net (batch norm in training) at half its widths, 256 x 256
// The first four are small enough to time quickly and to see every part of a plan in; the last
// two are real architectures, whose activations are dominated by their first layers.
// The loss is the mean of the output's squares. bench/recompute_checkpoint.py runs the same
// models in PyTorch with torch.utils.checkpoint, as the reference.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/handles.h"
#include "bench_common.h"

namespace {

using bench::mib;
using koila_models::check;
using koila_models::Handle;

// A graph under construction: every handle kept, parameters as eager tensors.
struct Builder {
  std::vector<Handle> keep;
  std::vector<at::Tensor> params;

  koila_tensor* hold(koila_tensor* t) {
    keep.emplace_back(t);
    return t;
  }
  koila_tensor* param(std::vector<int64_t> shape, double scale) {
    at::Tensor p = (at::randn(shape) * scale).requires_grad_(true);
    params.push_back(p);
    keep.push_back(koila_models::share(p));
    return keep.back().get();
  }
  template <class F, class... A>
  koila_tensor* op(F fn, A... args) {
    koila_tensor* out = nullptr;
    check(fn(&out, args...), "an op of the benchmark's model");
    return hold(out);
  }
  koila_tensor* linear(koila_tensor* x, int64_t in, int64_t out) {
    koila_tensor* w = param({out, in}, 1.0 / std::sqrt(static_cast<double>(in)));
    koila_tensor* b = param({out}, 0.0);
    return op(koila_linear, x, w, b);
  }
  koila_tensor* conv(koila_tensor* x, int64_t in, int64_t out, int64_t kernel = 3, int64_t step = 1) {
    const double fan_in = static_cast<double>(kernel * kernel * in);
    koila_tensor* w = param({out, in, kernel, kernel}, 1.0 / std::sqrt(fan_in));
    const int64_t stride[2] = {step, step}, padding[2] = {kernel / 2, kernel / 2}, dilation[2] = {1, 1};
    return op(koila_conv2d, x, w, static_cast<const koila_tensor*>(nullptr), stride, padding, dilation, int64_t{1});
  }
  // Batch norm in training (batch statistics; running statistics updated), as nn.BatchNorm2d.
  koila_tensor* batch_norm(koila_tensor* x, int64_t channels) {
    koila_tensor* g = param({channels}, 0.0);
    at::Tensor(params.back()).detach().fill_(1.0);
    koila_tensor* b = param({channels}, 0.0);
    keep.push_back(koila_models::share(at::zeros({channels})));
    koila_tensor* mean = keep.back().get();
    keep.push_back(koila_models::share(at::ones({channels})));
    koila_tensor* var = keep.back().get();
    return op(koila_batch_norm, x, g, b, mean, var, 1, 0.1, 1e-5);
  }
  // conv, batch norm, relu: the unit of torchvision's ResNets and of U-Nets' double convolutions.
  koila_tensor* conv_bn_relu(koila_tensor* x, int64_t in, int64_t out, int64_t kernel = 3, int64_t step = 1) {
    return op(koila_relu, batch_norm(conv(x, in, out, kernel, step), out));
  }
  koila_tensor* layer_norm(koila_tensor* x, int64_t width) {
    koila_tensor* g = param({width}, 0.0);
    at::Tensor(params.back()).detach().fill_(1.0);
    koila_tensor* b = param({width}, 0.0);
    const int64_t shape[1] = {width};
    return op(koila_layer_norm, x, shape, size_t{1}, g, b, 1e-5);
  }
  // Nearest upsampling by 2 of [N, C, H, W] (F.interpolate(scale_factor=2, mode="nearest")).
  koila_tensor* upsample(koila_tensor* x) {
    const int64_t twice[2] = {2, 2};
    return op(koila_upsample_nearest2d, x, twice);
  }
  koila_tensor* loss(koila_tensor* y) {
    koila_tensor* sq = op(koila_mul, y, y);
    return op(koila_mean, sq, static_cast<const int64_t*>(nullptr), size_t{0}, 0);
  }
};

struct Model {
  const char* name;
  std::string shape;
  std::function<koila_tensor*(Builder&)> build;
};

koila_tensor* transformer(Builder& b) {
  const int64_t t = 1024, d = 128;
  b.keep.push_back(koila_models::lazy(at::randn({1, t, d}), 0));
  koila_tensor* x = b.keep.back().get();
  for (int layer = 0; layer < 6; ++layer) {
    koila_tensor* h = b.layer_norm(x, d);
    koila_tensor* q = b.linear(h, d, d);
    koila_tensor* k = b.linear(h, d, d);
    koila_tensor* v = b.linear(h, d, d);
    koila_tensor* a = b.op(koila_scaled_dot_product_attention, q, k, v, static_cast<const koila_tensor*>(nullptr), 0);
    x = b.op(koila_add, x, b.linear(a, d, d));
    h = b.layer_norm(x, d);
    h = b.op(koila_gelu, b.linear(h, d, 4 * d));
    x = b.op(koila_add, x, b.linear(h, 4 * d, d));
  }
  return b.loss(x);
}

koila_tensor* resnet(Builder& b) {
  const int64_t c = 32, side = 128;
  b.keep.push_back(koila_models::lazy(at::randn({1, 3, side, side}), 0));
  koila_tensor* x = b.op(koila_relu, b.conv(b.keep.back().get(), 3, c));
  for (int block = 0; block < 8; ++block) {
    koila_tensor* h = b.conv(b.op(koila_relu, b.conv(x, c, c)), c, c);
    x = b.op(koila_relu, b.op(koila_add, x, h));
  }
  return b.loss(x);
}

// torchvision's resnet34 (BasicBlocks of 3, 4, 6, 3 in four stages of 64 to 512 channels, each
// stage after the first halving the side with a 1x1 projection on its first block's skip; a 7x7
// stride-2 stem, batch norm, relu and 3x3 stride-2 max pooling; average pooling and a linear
// layer to 1000 classes), one 512 x 512 image.
koila_tensor* resnet34(Builder& b) {
  b.keep.push_back(koila_models::lazy(at::randn({1, 3, 512, 512}), 0));
  koila_tensor* x = b.conv_bn_relu(b.keep.back().get(), 3, 64, 7, 2);
  const int64_t kernel[2] = {3, 3}, stride[2] = {2, 2}, padding[2] = {1, 1};
  x = b.op(koila_max_pool2d, x, kernel, stride, padding, 0);
  const int blocks[4] = {3, 4, 6, 3};
  int64_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = int64_t{64} << stage;
    for (int block = 0; block < blocks[stage]; ++block) {
      const int64_t step = stage > 0 && block == 0 ? 2 : 1;
      koila_tensor* h = b.batch_norm(b.conv(b.conv_bn_relu(x, in, width, 3, step), width, width), width);
      koila_tensor* skip = step == 1 ? x : b.batch_norm(b.conv(x, in, width, 1, step), width);
      x = b.op(koila_relu, b.op(koila_add, skip, h));
      in = width;
    }
  }
  const int64_t one[2] = {1, 1};
  x = b.op(koila_adaptive_avg_pool2d, x, one);
  const int64_t flat[2] = {1, 512};
  x = b.op(koila_reshape, x, flat, size_t{2});
  return b.loss(b.linear(x, 512, 1000));
}

koila_tensor* unet(Builder& b) {
  const int64_t side = 128;
  b.keep.push_back(koila_models::lazy(at::randn({1, 3, side, side}), 0));
  koila_tensor* x = b.keep.back().get();
  const int64_t widths[3] = {16, 32, 64};
  const int64_t kernel[2] = {2, 2}, stride[2] = {2, 2}, padding[2] = {0, 0};
  std::vector<koila_tensor*> skips;
  int64_t in = 3;
  for (int level = 0; level < 3; ++level) {
    const int64_t w = widths[level];
    x = b.op(koila_relu, b.conv(b.op(koila_relu, b.conv(x, in, w)), w, w));
    skips.push_back(x);
    x = b.op(koila_max_pool2d, x, kernel, stride, padding, 0);
    in = w;
  }
  x = b.op(koila_relu, b.conv(x, in, 2 * in));
  in = 2 * in;
  for (int level = 2; level >= 0; --level) {
    const int64_t w = widths[level];
    x = b.upsample(x);
    koila_tensor* const both[2] = {x, skips[static_cast<size_t>(level)]};
    x = b.op(koila_cat, both, size_t{2}, int64_t{1});
    x = b.op(koila_relu, b.conv(b.op(koila_relu, b.conv(x, in + w, w)), w, w));
    in = w;
  }
  return b.loss(b.conv(x, in, 1));
}

// The U-Net of Ronneberger et al. as it is usually written now (milesial/Pytorch-UNet, at half its
// widths, nearest upsampling): double convolutions (conv 3x3, batch norm, relu, twice) at 32, 64,
// 128, 256 and 512 channels, 2x2 max pooling down, upsampling by 2, the skip concatenated and a
// double convolution up, a 1x1 convolution to 2 classes; one 256 x 256 image.
koila_tensor* unet_bn(Builder& b) {
  b.keep.push_back(koila_models::lazy(at::randn({1, 3, 256, 256}), 0));
  koila_tensor* x = b.keep.back().get();
  const int64_t kernel[2] = {2, 2}, stride[2] = {2, 2}, padding[2] = {0, 0};
  const auto twice = [&](koila_tensor* v, int64_t in, int64_t out) {
    return b.conv_bn_relu(b.conv_bn_relu(v, in, out), out, out);
  };
  std::vector<koila_tensor*> skips;
  x = twice(x, 3, 32);
  int64_t in = 32;
  for (int level = 1; level <= 4; ++level) {
    skips.push_back(x);
    x = twice(b.op(koila_max_pool2d, x, kernel, stride, padding, 0), in, 2 * in);
    in *= 2;
  }
  for (int level = 3; level >= 0; --level) {
    koila_tensor* const both[2] = {skips[static_cast<size_t>(level)], b.upsample(x)};
    x = twice(b.op(koila_cat, both, size_t{2}, int64_t{1}), in + in / 2, in / 2);
    in /= 2;
  }
  return b.loss(b.conv(x, in, 2, 1));
}

koila_tensor* mlp(Builder& b) {
  b.keep.push_back(koila_models::lazy(at::randn({1, 2048, 256}), 0));
  koila_tensor* x = b.keep.back().get();
  for (int layer = 0; layer < 24; ++layer) x = b.op(koila_gelu, b.linear(x, 256, 256));
  return b.loss(x);
}

void set_recompute(koila_recompute policy) { check(koila_set_recompute(policy), "koila_set_recompute"); }
void set_budget(uint64_t bytes) { check(koila_set_memory_budget("cpu", bytes), "koila_set_memory_budget"); }

void clear_grads(Builder& b) {
  for (at::Tensor param : b.params) param.mutable_grad() = at::Tensor();
}

// Whether a training plan of `loss` is made under `budget` (with the .grad absent, as the steps
// find them).
bool plans(Builder& b, const koila_tensor* loss, uint64_t budget) {
  clear_grads(b);
  set_budget(budget);
  koila_plan* p = nullptr;
  koila_status* s = koila_plan_new(&p, loss, KOILA_MODE_TRAINING);
  const bool ok = s == nullptr;
  koila_status_free(s);
  koila_plan_free(p);
  set_budget(0);
  return ok;
}

struct Step {
  bool ran = true;  // false: ran out of memory under a plan that said it fits
  std::string error;
  uint64_t estimate = 0;  // the plan's peak
  double seconds = 0;
  double plan_seconds = 0;  // of a plan made again (the step's own included in `seconds`)
  uint64_t peak = 0;        // measured, beyond what was in use
  int64_t chunks = 0;
  uint64_t recomputed = 0;
  std::string work;   // "+75%" (the plan's estimate of extra forward work)
  std::string parts;  // at the plan's peak: "activations / temporaries / beyond the simulation" MiB
};

// One timed step under `budget` with `policy` (0: the automatic budget); false when it failed
// (`error` says why).
bool one_step(Builder& b, const koila_tensor* loss, uint64_t budget, koila_recompute policy, double* seconds,
              uint64_t* peak, std::string* error) {
  set_recompute(policy);
  set_budget(budget);
  clear_grads(b);
  const bench::Memory before = bench::memory("cpu");
  check(koila_memory_reset_peak("cpu"), "koila_memory_reset_peak");
  const double start = bench::now_seconds();
  koila_status* s = koila_backward(loss);
  *seconds = bench::now_seconds() - start;
  *peak = bench::memory("cpu").peak - before.current;
  set_budget(0);
  if (!s) return true;
  *error = koila_status_message(s);
  koila_status_free(s);
  return false;
}

// The plan under `budget` and `repeats` steps under it, each after an unconstrained step (budget
// automatic, recomputation off), so that both are timed in the same stretch of the machine's
// time; `unconstrained` gets the fastest of those.
Step step(Builder& b, const koila_tensor* loss, uint64_t budget, koila_recompute policy, int repeats,
          double* unconstrained) {
  Step r;
  set_recompute(policy);
  set_budget(budget);
  clear_grads(b);
  koila_plan* p = nullptr;
  check(koila_plan_new(&p, loss, KOILA_MODE_TRAINING), "koila_plan_new");
  {  // what a plan of a step costs once the structure's choices are made (every step plans)
    const double start = bench::now_seconds();
    for (int i = 0; i < 5; ++i) {
      koila_plan* again = nullptr;
      check(koila_plan_new(&again, loss, KOILA_MODE_TRAINING), "koila_plan_new");
      koila_plan_free(again);
    }
    r.plan_seconds = (bench::now_seconds() - start) / 5;
  }
  r.chunks = koila_plan_num_chunks(p);
  r.estimate = koila_plan_peak_bytes(p);
  r.recomputed = koila_plan_recomputed_bytes(p);
  const std::string text = bench::describe(loss, KOILA_MODE_TRAINING);
  const size_t at = text.find("% more forward work");
  if (at != std::string::npos) {
    const size_t from = text.rfind("about ", at);
    r.work = "+" + text.substr(from + 6, at - from - 6) + "%";
  }
  {  // what the plan's peak is made of (its timeline)
    koila_timeline* t = nullptr;
    check(koila_plan_timeline(&t, p, 0), "koila_plan_timeline");
    uint64_t part[3] = {0, 0, 0};
    const koila_memory_part which[3] = {KOILA_PART_ACTIVATIONS, KOILA_PART_TEMPORARIES, KOILA_PART_BEYOND_SIMULATION};
    for (int k = 0; k < 3; ++k) check(koila_timeline_part(t, which[k], &part[k]), "koila_timeline_part");
    koila_timeline_free(t);
    char text[64];
    std::snprintf(text, sizeof text, "%.1f / %.1f / %.1f", mib(part[0]), mib(part[1]), mib(part[2]));
    r.parts = text;
  }
  koila_plan_free(p);
  set_budget(0);
  std::vector<double> times, free_times;
  for (int i = 0; i <= repeats; ++i) {  // (the first round: a warm-up)
    double seconds = 0, free_seconds = 0;
    uint64_t peak = 0, free_peak = 0;
    std::string error;
    if (!one_step(b, loss, 0, KOILA_RECOMPUTE_OFF, &free_seconds, &free_peak, &error))
      throw std::runtime_error("the unconstrained step failed: " + error);
    if (!one_step(b, loss, budget, policy, &seconds, &peak, &error)) {
      r.ran = false;
      r.error = error;
      return r;
    }
    if (i > 0) {
      times.push_back(seconds);
      free_times.push_back(free_seconds);
    }
    r.peak = std::max(r.peak, peak);
  }
  r.seconds = *std::min_element(times.begin(), times.end());
  *unconstrained = *std::min_element(free_times.begin(), free_times.end());
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  at::manual_seed(0);
  std::vector<Model> models = {
      {"transformer", "1 x 1024 x 128, 6 layers", transformer},
      {"resnet", "1 x 3 x 128 x 128, 8 blocks", resnet},
      {"unet", "1 x 3 x 128 x 128, 3 levels", unet},
      {"mlp", "1 x 2048 x 256, 24 layers", mlp},
      {"resnet34", "1 x 3 x 512 x 512, torchvision's layout", resnet34},
      {"unet-bn", "1 x 3 x 256 x 256, 5 levels of 32-512 channels", unet_bn},
  };
  if (argc > 2) {  // only the models named
    std::vector<Model> named;
    for (const Model& m : models)
      for (int i = 2; i < argc; ++i)
        if (m.name == std::string(argv[i])) named.push_back(m);
    models = named;
  }
  std::printf("koila recomputation: one sample per step, CPU, fastest of %d steps (after a warm-up)\n\n", repeats);
  std::printf(
      "| model | budget | budget MiB | chunks | recomputed MiB | extra forward work (est.) | step ms | x unconstrained "
      "| of which planning ms | estimated peak MiB | at the peak: activations / temporaries / beyond the simulation "
      "MiB | measured peak MiB | within budget |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|\n");
  for (const Model& m : models) {
    Builder b;
    koila_tensor* loss = m.build(b);
    set_recompute(KOILA_RECOMPUTE_OFF);
    set_budget(0);
    const uint64_t in_use = bench::memory("cpu").current;
    double free_seconds = 0;
    const Step free = step(b, loss, 0, KOILA_RECOMPUTE_OFF, repeats, &free_seconds);
    // What the unconstrained step took beyond what was in use, less the parameters' gradients
    // (which every plan makes, and no recomputation frees): the activations (and the gradients of
    // activations in flight), of which the budgets below allow fractions beside those gradients.
    uint64_t gradients = 0;
    for (const at::Tensor& param : b.params) gradients += static_cast<uint64_t>(param.numel() * param.element_size());
    const uint64_t activations = free.peak > gradients ? free.peak - gradients : free.peak;
    const uint64_t floor = in_use + gradients;
    std::printf("| %s (%s) | unconstrained | - | 1 | 0 | - | %.0f | 1.00 | %.1f | %.1f | %s | %.1f | - |\n", m.name,
                m.shape.c_str(), 1e3 * free.seconds, 1e3 * free.plan_seconds, mib(free.estimate), free.parts.c_str(),
                mib(in_use + free.peak));
    set_recompute(KOILA_RECOMPUTE_AS_NEEDED);
    // The least budget that plans, to 1% of the activation memory; found again after a step under
    // it, which shows what the kernels take beyond their simulation where a recomputing run
    // peaks (the CPU's oneDNN convolutions: unet-bn), as a user's second step finds it. Found
    // after the rows of 1/2 and 1/4 ran (their steps teach the plans as much).
    const auto least = [&] {
      uint64_t lo = in_use, hi = floor + activations * 2;
      while (hi - lo > activations / 100 + 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        (plans(b, loss, mid) ? hi : lo) = mid;
      }
      return hi;
    };
    const auto least_after_a_step = [&] {
      const uint64_t first = least();
      double seconds = 0;
      uint64_t peak = 0;
      std::string error;
      one_step(b, loss, first, KOILA_RECOMPUTE_AS_NEEDED, &seconds, &peak, &error);  // (it may run out: then refused)
      return least();
    };
    struct Row {
      const char* label;
      uint64_t budget;
    };
    const auto run_row = [&](const Row& row) {
      if (!plans(b, loss, row.budget)) {
        std::printf("| %s | %s | %.1f | refused | | | | | | | | | |\n", m.name, row.label, mib(row.budget));
        return;
      }
      double unconstrained = 0;
      const Step s = step(b, loss, row.budget, KOILA_RECOMPUTE_AS_NEEDED, repeats, &unconstrained);
      if (!s.ran) {
        std::fprintf(stderr, "%s: %s\n", m.name, s.error.c_str());
        const bool ran_out = s.error.find("out of memory within") != std::string::npos;
        std::printf("| %s | %s | %.1f | %lld | %.1f | %s | %s | | | %.1f | %s | | %s |\n", m.name, row.label,
                    mib(row.budget), static_cast<long long>(s.chunks), mib(s.recomputed), s.work.c_str(),
                    ran_out ? "OUT OF MEMORY" : "refused when run", mib(s.estimate), s.parts.c_str(),
                    s.error.substr(0, 300).c_str());
        return;
      }
      std::printf("| %s | %s (%.2f) | %.1f | %lld | %.1f | %s | %.0f | %.2f | %.1f | %.1f | %s | %.1f | %s |\n", m.name,
                  row.label,
                  row.budget > floor ? static_cast<double>(row.budget - floor) / static_cast<double>(activations) : 0.0,
                  mib(row.budget), static_cast<long long>(s.chunks), mib(s.recomputed),
                  s.work.empty() ? "0%" : s.work.c_str(), 1e3 * s.seconds, s.seconds / unconstrained,
                  1e3 * s.plan_seconds, mib(s.estimate), s.parts.c_str(), mib(in_use + s.peak),
                  in_use + s.peak <= row.budget ? "yes" : "NO");
    };
    run_row({"1/2 of activations", floor + activations / 2});
    run_row({"1/4 of activations", floor + activations / 4});
    run_row({"least that plans", least_after_a_step()});
    std::fflush(stdout);
  }
  set_recompute(KOILA_RECOMPUTE_AS_NEEDED);
  return 0;
}
