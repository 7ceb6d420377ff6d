// Split against unsplit need where gradients dominate (issue 28, item 2): for each model,
// with weight-gradient fusion off (as before it) and on, the planner's estimate and the
// measured peak (koila's allocator, beyond what was in use) of a training step's backward
// unsplit and in the chunk size whose estimate is smallest. Prints a table.
//
//   usage: bench_split_need [module.pt NxCxHxW classes]...   (any rank: NxCxTxHxW for video)
//
// Built in: the original project's MNIST MLP (784-512-512-10) at batch 9, and a classifier
// whose fully connected layer dominates (conv 3->64, 2x2 pool, linear 16384->2048, 2048->10)
// at batch 64, both written with koila's ops. Each TorchScript file named (for example
// torchvision's AlexNet, scripted in Python) runs on random images of the given size with
// the mean cross entropy against random classes. The .grad are absent before each step
// (zero_grad(set_to_none=True), PyTorch 2's default).
#include <ATen/ATen.h>
#include <torch/script.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "api/handles.h"
#include "bench_common.h"
#include "kernels/fused_grads.h"
#include "plan/memo.h"
#include "run/analysis.h"
#include "run/chunked_run.h"

namespace {

using koila_models::Handle;

struct Model {
  std::string name;
  int64_t batch = 0;
  std::vector<at::Tensor> params;  // whose .grad are made absent before each run
  std::vector<Handle> keep;        // handles the loss depends on
  Handle loss;
};

// (The result is read through `out` after the call: an argument's value could be taken first.)
Handle call(koila_status* s, koila_tensor** out, const char* what) {
  bench::check(s, what);
  return Handle(*out);
}

at::Tensor param(std::vector<int64_t> shape, double scale) { return (at::randn(shape) * scale).requires_grad_(true); }

Model mnist_mlp() {
  Model m;
  m.name = "original MNIST MLP (koila ops)";
  m.batch = 9;
  at::manual_seed(1);
  for (const auto& [shape, scale] : std::vector<std::pair<std::vector<int64_t>, double>>{
           {{512, 784}, 0.03}, {{512}, 0.01}, {{512, 512}, 0.04}, {{512}, 0.01}, {{10, 512}, 0.04}, {{10}, 0.01}})
    m.params.push_back(param(shape, scale));
  for (const at::Tensor& p : m.params) m.keep.push_back(koila_models::share(p));
  m.keep.push_back(koila_models::lazy(at::randn({m.batch, 784}), 0));
  Handle y = koila_models::lazy(at::randint(10, {m.batch}, at::kLong), 0);
  koila_tensor* out = nullptr;
  Handle h = call(koila_linear(&out, m.keep.back().get(), m.keep[0].get(), m.keep[1].get()), &out, "koila_linear");
  for (size_t i = 1; i < 3; ++i) {
    h = call(koila_relu(&out, h.get()), &out, "koila_relu");
    h = call(koila_linear(&out, h.get(), m.keep[2 * i].get(), m.keep[2 * i + 1].get()), &out, "koila_linear");
  }
  m.loss = call(koila_cross_entropy(&out, h.get(), y.get(), KOILA_REDUCTION_MEAN), &out, "koila_cross_entropy");
  m.keep.push_back(std::move(y));
  return m;
}

Model fc_heavy() {
  Model m;
  m.name = "conv + 16384x2048 linear (koila ops)";
  m.batch = 64;
  at::manual_seed(2);
  m.params = {param({64, 3, 3, 3}, 0.2), param({64}, 0.01),       param({2048, 16384}, 0.008),
              param({2048}, 0.01),       param({10, 2048}, 0.02), param({10}, 0.01)};
  for (const at::Tensor& p : m.params) m.keep.push_back(koila_models::share(p));
  Handle x = koila_models::lazy(at::randn({m.batch, 3, 32, 32}), 0);
  Handle y = koila_models::lazy(at::randint(10, {m.batch}, at::kLong), 0);
  koila_tensor* out = nullptr;
  const int64_t stride[] = {1, 1}, padding[] = {1, 1}, dilation[] = {1, 1}, kernel[] = {2, 2}, none[] = {0, 0};
  Handle h = call(koila_conv2d(&out, x.get(), m.keep[0].get(), m.keep[1].get(), stride, padding, dilation, 1), &out,
                  "koila_conv2d");
  h = call(koila_relu(&out, h.get()), &out, "koila_relu");
  h = call(koila_max_pool2d(&out, h.get(), kernel, kernel, none, 0), &out, "koila_max_pool2d");
  h = call(koila_flatten(&out, h.get(), 1, -1), &out, "koila_flatten");
  h = call(koila_linear(&out, h.get(), m.keep[2].get(), m.keep[3].get()), &out, "koila_linear");
  h = call(koila_relu(&out, h.get()), &out, "koila_relu");
  h = call(koila_linear(&out, h.get(), m.keep[4].get(), m.keep[5].get()), &out, "koila_linear");
  m.loss = call(koila_cross_entropy(&out, h.get(), y.get(), KOILA_REDUCTION_MEAN), &out, "koila_cross_entropy");
  m.keep.push_back(std::move(x));
  m.keep.push_back(std::move(y));
  return m;
}

Model scripted(const std::string& path, const std::vector<int64_t>& shape, int64_t classes) {
  Model m;
  m.name = path;
  m.batch = shape.at(0);
  const int64_t batch = m.batch;
  koila_module* raw = nullptr;
  bench::check(koila_module_load(&raw, path.c_str(), "cpu"), "koila_module_load");
  for (const at::Tensor& p : raw->module.parameters()) m.params.push_back(p);
  at::manual_seed(3);
  Handle x = koila_models::lazy(at::randn(shape), 0);
  Handle y = koila_models::lazy(at::randint(classes, {batch}, at::kLong), 0);
  koila_tensor* out = nullptr;
  koila_tensor* in[] = {x.get()};
  Handle logits = call(koila_module_forward(&out, raw, in, 1), &out, "koila_module_forward");
  koila_module_free(raw);  // the call keeps what it needs
  m.loss = call(koila_cross_entropy(&out, logits.get(), y.get(), KOILA_REDUCTION_MEAN), &out, "koila_cross_entropy");
  m.keep.push_back(std::move(x));
  m.keep.push_back(std::move(y));
  m.keep.push_back(std::move(logits));
  return m;
}

void set_grads_absent(const Model& m) {
  for (const at::Tensor& p : m.params) p.mutable_grad() = at::Tensor();
}

// The measured peak of a backward in chunks of `chunk` (-1: unsplit) beyond what was in use.
uint64_t measured(const Model& m, int64_t chunk) {
  set_grads_absent(m);
  const koila::Analysis& a = koila::analysis_of(m.loss->node, koila::RunMode::Training);
  const uint64_t before = bench::memory("cpu").current;
  bench::check(koila_memory_reset_peak("cpu"), "koila_memory_reset_peak");
  koila::ChunkRun run;
  run.chunk = chunk;
  koila::backward_chunks(m.loss->node, a, run);
  const uint64_t peak = bench::memory("cpu").peak - before;
  set_grads_absent(m);
  return peak;
}

void row(const Model& m, bool fused) {
  koila::testing::set_grad_fusion(fused);
  koila::testing::forget_graph_records();
  set_grads_absent(m);
  const uint64_t unsplit = koila::estimate_extra(m.loss->node, koila::RunMode::Training, -1);
  uint64_t best = UINT64_MAX;
  int64_t chunk = 0;
  for (int64_t c = 1; c < m.batch; c *= 2) {
    const uint64_t e = koila::estimate_extra(m.loss->node, koila::RunMode::Training, c);
    if (e < best) best = e, chunk = c;
  }
  const uint64_t unsplit_measured = measured(m, -1), split_measured = measured(m, chunk);
  std::printf("| %s | %lld | %s | %.2f | %.2f | %lld x %lld | %.2f | %.2f | %.3f | %+.2f |\n", m.name.c_str(),
              static_cast<long long>(m.batch), fused ? "on" : "off", bench::mib(unsplit), bench::mib(unsplit_measured),
              static_cast<long long>(chunk), static_cast<long long>((m.batch + chunk - 1) / chunk), bench::mib(best),
              bench::mib(split_measured), static_cast<double>(split_measured) / static_cast<double>(unsplit_measured),
              bench::mib(split_measured) - bench::mib(unsplit_measured));
  std::fflush(stdout);
}

}  // namespace

// "16x3x128x128" -> {16, 3, 128, 128}.
std::vector<int64_t> shape_of(const std::string& text) {
  std::vector<int64_t> shape;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t x = text.find('x', start);
    shape.push_back(std::atoll(text.substr(start, x == std::string::npos ? std::string::npos : x - start).c_str()));
    if (x == std::string::npos) break;
    start = x + 1;
  }
  return shape;
}

int main(int argc, char** argv) {
  if ((argc - 1) % 3 != 0) {
    std::fprintf(stderr, "usage: %s [module.pt NxCxHxW classes]...\n", argv[0]);
    return 2;
  }
  std::vector<std::function<Model()>> models = {mnist_mlp, fc_heavy};
  for (int i = 1; i + 2 < argc; i += 3) {
    const std::string path = argv[i];
    const std::vector<int64_t> shape = shape_of(argv[i + 1]);
    const int64_t classes = std::atoll(argv[i + 2]);
    models.push_back([path, shape, classes] { return scripted(path, shape, classes); });
  }
  std::printf(
      "| model | batch | fusion | unsplit est. MiB | unsplit meas. MiB | smallest split (chunk x n) | split est. MiB | "
      "split meas. MiB | split / unsplit (meas.) | split - unsplit MiB |\n");
  std::printf("|---|---:|---|---:|---:|---|---:|---:|---:|---:|\n");
  for (const auto& make : models) {
    const Model m = make();
    for (bool fused : {false, true}) row(m, fused);
  }
  return 0;
}
