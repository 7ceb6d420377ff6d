// The model of the process-group tests, through the C API: an MLP (6 -> 32 -> 4, float64)
// with cross entropy over a fixed batch of 61 samples, some of whose targets are ignored
// (-100), split into uneven shards. Shared by the worker processes and by the test that
// computes the single-process reference.
#pragma once

#include <cstdint>
#include <vector>

#include "koila.h"

namespace group_model {

constexpr int64_t kBatch = 61, kIn = 6, kHidden = 32, kClasses = 4;
constexpr size_t kParams = 4;

struct Model {
  koila_tensor* params[kParams] = {};
};

struct Shard {
  int64_t start = 0, length = 0;
};

// Rank r of n gets a share of the batch proportional to r + 1 (uneven on purpose).
inline Shard shard_of(int rank, int size) {
  const int64_t total = static_cast<int64_t>(size) * (size + 1) / 2;
  int64_t before = static_cast<int64_t>(rank) * (rank + 1) / 2;
  Shard s;
  s.start = kBatch * before / total;
  s.length = kBatch * (before + rank + 1) / total - s.start;
  return s;
}

// Parameters drawn from `seed`, requiring grad.
inline koila_status* make_params(Model* m, uint64_t seed) {
  const int64_t shapes[kParams][2] = {{kHidden, kIn}, {kHidden, 0}, {kClasses, kHidden}, {kClasses, 0}};
  if (koila_status* s = koila_manual_seed(seed)) return s;
  for (size_t i = 0; i < kParams; ++i) {
    if (koila_status* s = koila_tensor_randn(&m->params[i], shapes[i], shapes[i][1] ? 2 : 1, KOILA_FLOAT64, "cpu"))
      return s;
    if (koila_status* s = koila_tensor_set_requires_grad(m->params[i], 1)) return s;
  }
  return nullptr;
}

inline void free_params(Model* m) {
  for (koila_tensor*& p : m->params) {
    koila_tensor_free(p);
    p = nullptr;
  }
}

// The loss over samples [start, start + length) of the batch; lazy (batch dim 0) or eager.
inline koila_status* loss_over(koila_tensor** out, const Model* m, int64_t start, int64_t length,
                               koila_reduction reduction, bool lazy) {
  *out = nullptr;
  koila_tensor *all = nullptr, *x = nullptr, *y = nullptr, *h = nullptr, *a = nullptr, *logits = nullptr;
  std::vector<double> inputs(kBatch * kIn);
  std::vector<int64_t> targets(length);
  for (int64_t i = 0; i < length; ++i) targets[i] = (start + i) % 5 == 3 ? -100 : ((start + i) * 7) % kClasses;
  const int64_t batch_shape[2] = {kBatch, kIn};
  const int64_t x_shape[2] = {length, kIn};
  koila_status* s = koila_manual_seed(7);
  if (!s) s = koila_tensor_randn(&all, batch_shape, 2, KOILA_FLOAT64, "cpu");
  if (!s) s = koila_tensor_to_host(all, inputs.data(), inputs.size() * sizeof(double));
  if (!s)
    s = koila_tensor_from_data(&x, inputs.data() + start * kIn, length * kIn * sizeof(double), KOILA_FLOAT64, x_shape,
                               2, "cpu");
  if (!s) s = koila_tensor_from_data(&y, targets.data(), length * sizeof(int64_t), KOILA_INT64, &length, 1, "cpu");
  if (!s && lazy) {
    koila_tensor *lx = nullptr, *ly = nullptr;
    s = koila_lazy(&lx, x, 0);
    if (!s) s = koila_lazy(&ly, y, 0);
    koila_tensor_free(x);
    koila_tensor_free(y);
    x = lx;
    y = ly;
  }
  if (!s) s = koila_linear(&h, x, m->params[0], m->params[1]);
  if (!s) s = koila_relu(&a, h);
  if (!s) s = koila_linear(&logits, a, m->params[2], m->params[3]);
  if (!s) s = koila_cross_entropy(out, logits, y, reduction);
  for (koila_tensor* t : {all, x, y, h, a, logits}) koila_tensor_free(t);
  return s;
}

inline std::vector<double> read_all(koila_tensor* const* ts, bool grads = false) {
  std::vector<double> values;
  for (size_t i = 0; i < kParams; ++i) {
    koila_tensor* t = ts[i];
    if (grads && koila_tensor_grad(&t, ts[i])) return {};
    size_t ndim = 0;
    int64_t dims[2] = {1, 1};
    koila_tensor_shape(ts[i], dims, 2, &ndim);
    const size_t numel = static_cast<size_t>(dims[0] * (ndim == 2 ? dims[1] : 1));
    std::vector<double> v(numel, 0.0);
    if (t) koila_status_free(koila_tensor_to_host(t, v.data(), numel * sizeof(double)));
    if (grads) koila_tensor_free(t);
    values.insert(values.end(), v.begin(), v.end());
  }
  return values;
}

// The parameters' gradients (zeros where there is none).
inline std::vector<double> read_all_grads(koila_tensor* const* ts) { return read_all(ts, true); }

}  // namespace group_model
