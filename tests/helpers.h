// Shared by the C++ suites: moving data between eager LibTorch and koila handles.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "api/convert.h"
#include "graph/graph.h"
#include "koila.h"
#include "memory/cpu_allocator.h"
#include "models.h"
#include "plan/estimate.h"
#include "plan/planner.h"

namespace koila_test {

// Marks an input as concrete (not wrapped with koila_lazy).
constexpr int64_t kConcrete = INT64_MAX;

using koila_models::Handle;

// Expects success; on failure reports the status message.
#define ASSERT_OK(expr)                                              \
  do {                                                               \
    koila_status* status_ = (expr);                                  \
    std::string message_ = koila_status_message(status_);            \
    koila_status_free(status_);                                      \
    ASSERT_EQ(status_, nullptr) << #expr << " failed: " << message_; \
  } while (0)

inline koila_dtype to_dtype(at::ScalarType t) { return koila::to_koila_dtype(t); }
inline at::ScalarType scalar_type_of(koila_dtype d) { return koila::to_scalar_type(d); }

// A koila tensor holding a copy of `t`; lazy with `batch_dim` unless kConcrete.
inline Handle from_aten(const at::Tensor& t, int64_t batch_dim = kConcrete) {
  at::Tensor c = t.contiguous();
  koila_tensor* out = nullptr;
  koila_status* s = koila_tensor_from_data(&out, c.data_ptr(), c.numel() * c.element_size(), to_dtype(c.scalar_type()),
                                           c.sizes().data(), c.dim(), "cpu");
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  if (batch_dim == kConcrete) return Handle(out);
  koila_tensor* lazy = nullptr;
  s = koila_lazy(&lazy, out, batch_dim);
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  koila_tensor_free(out);
  return Handle(lazy);
}

inline std::vector<int64_t> shape_of(const koila_tensor* t) {
  size_t ndim = 0;
  koila_status_free(koila_tensor_shape(t, nullptr, 0, &ndim));
  std::vector<int64_t> dims(ndim);
  koila_status* s = koila_tensor_shape(t, dims.data(), dims.size(), &ndim);
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  return dims;
}

// Reads a koila tensor's value into an eager tensor (evaluating it).
inline at::Tensor to_aten(const koila_tensor* t) {
  koila_dtype d;
  koila_status_free(koila_tensor_dtype(t, &d));
  at::Tensor out = at::empty(shape_of(t), at::TensorOptions().dtype(scalar_type_of(d)));
  koila_status* s = koila_tensor_to_host(t, out.data_ptr(), out.numel() * out.element_size());
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  return out;
}

inline int64_t batch_dim_of(const koila_tensor* t) {
  int64_t b = -2;
  koila_status_free(koila_tensor_batch_dim(t, &b));
  return b;
}

// The tensor an op call returns through `out`, expecting success.
inline Handle call(koila_status* status, koila_tensor* out) {
  EXPECT_EQ(status, nullptr) << koila_status_message(status);
  koila_status_free(status);
  return Handle(out);
}

#define CALL(fn, ...)                          \
  [&] {                                        \
    koila_tensor* out_ = nullptr;              \
    koila_status* s_ = fn(&out_, __VA_ARGS__); \
    return ::koila_test::call(s_, out_);       \
  }()

// The internal node, for what the C API does not show (coupling, reductions).
inline const koila::Node& node(const koila_tensor* t) { return *t->node; }

// ---- CUDA: tests that need a device skip without one ---------------------------------

// Why CUDA cannot run here (no device, or a LibTorch without CUDA), or "" when it can.
inline std::string no_cuda_reason() {
  koila_tensor* t = nullptr;
  const int64_t shape[1] = {1};
  koila_status* s = koila_tensor_zeros(&t, shape, 1, KOILA_FLOAT32, "cuda");
  koila_tensor_free(t);
  if (s == nullptr) return "";
  std::string why = koila_status_message(s);
  koila_status_free(s);
  return why;
}

#define SKIP_WITHOUT_CUDA()                                                                           \
  do {                                                                                                \
    const std::string why_ = ::koila_test::no_cuda_reason();                                          \
    if (!why_.empty()) GTEST_SKIP() << "needs a CUDA device and a CUDA LibTorch, not here: " << why_; \
  } while (0)

// ---- Planning: memory figures, budgets and plans -------------------------------------

inline uint64_t current_cpu() {
  uint64_t current = 0;
  koila_status_free(koila_memory_stats("cpu", &current, nullptr));
  return current;
}

inline uint64_t peak_cpu() {
  uint64_t peak = 0;
  koila_status_free(koila_memory_stats("cpu", nullptr, &peak));
  return peak;
}

// Restores the automatic budget, the estimate scale and the allocation limit when a test ends.
struct BudgetGuard {
  ~BudgetGuard() {
    koila_status_free(koila_set_memory_budget("cpu", 0));
    koila::testing::set_estimate_scale(1.0);
    koila::testing::set_cpu_limit(0);
    koila::testing::set_simulation_fails(false);
  }
};

struct PlanInfo {
  int64_t batch = 0, chunk = 0, chunks = 0;
  uint64_t peak = 0, full_peak = 0, budget = 0;
  uint64_t need = 0;  // koila_plan_needed_bytes
  std::string text;
};

inline PlanInfo plan_of(const koila_tensor* t, koila_mode mode) {
  koila_plan* p = nullptr;
  koila_status* s = koila_plan_new(&p, t, mode);
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  PlanInfo info;
  if (!p) return info;
  info.batch = koila_plan_batch_size(p);
  info.chunk = koila_plan_chunk_size(p);
  info.chunks = koila_plan_num_chunks(p);
  info.peak = koila_plan_peak_bytes(p);
  info.full_peak = koila_plan_full_peak_bytes(p);
  info.budget = koila_plan_budget_bytes(p);
  info.need = koila_plan_needed_bytes(p);
  size_t needed = 0;
  koila_status_free(koila_plan_describe(p, nullptr, 0, &needed));
  info.text.resize(needed);
  koila_status_free(koila_plan_describe(p, info.text.data(), needed, &needed));
  info.text.resize(needed - 1);
  koila_plan_free(p);
  return info;
}

// Sets the CPU budget to what is held now plus what chunks of `chunk` samples are estimated
// to need (with the planner's margin and a little more), so the planner picks that chunk.
inline void budget_for_chunk(const koila_tensor* t, koila::RunMode mode, int64_t chunk) {
  const uint64_t extra = koila::estimate_extra(t->node, mode, chunk);
  ASSERT_OK(koila_set_memory_budget("cpu", current_cpu() + static_cast<uint64_t>(extra * 1.12)));
}

}  // namespace koila_test
