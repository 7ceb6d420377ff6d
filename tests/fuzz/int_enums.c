/* The enum-taking functions of koila.h, called from C with any int, as C, Java and Julia
   callers do. C converts the int to the enum type without undefined behaviour (a C enum
   is an integer type); the API fuzzer, written in C++, calls these instead of passing an
   out-of-range enum object itself. */
#include "int_enums.h"

koila_status *fuzz_tensor_from_data(koila_tensor **out, const void *data, size_t nbytes, int dtype,
                                    const int64_t *shape, size_t ndim, const char *device) {
  return koila_tensor_from_data(out, data, nbytes, (koila_dtype)dtype, shape, ndim, device);
}
koila_status *fuzz_tensor_zeros(koila_tensor **out, const int64_t *shape, size_t ndim, int dtype, const char *device) {
  return koila_tensor_zeros(out, shape, ndim, (koila_dtype)dtype, device);
}
koila_status *fuzz_tensor_ones(koila_tensor **out, const int64_t *shape, size_t ndim, int dtype, const char *device) {
  return koila_tensor_ones(out, shape, ndim, (koila_dtype)dtype, device);
}
koila_status *fuzz_tensor_randn(koila_tensor **out, const int64_t *shape, size_t ndim, int dtype, const char *device) {
  return koila_tensor_randn(out, shape, ndim, (koila_dtype)dtype, device);
}
koila_status *fuzz_plan_new(koila_plan **out, const koila_tensor *t, int mode) {
  return koila_plan_new(out, t, (koila_mode)mode);
}
koila_status *fuzz_timeline_part(const koila_timeline *t, int part, uint64_t *out) {
  return koila_timeline_part(t, (koila_memory_part)part, out);
}
koila_status *fuzz_set_batch_stats(int policy) { return koila_set_batch_stats((koila_batch_stats)policy); }
koila_status *fuzz_set_chunking(int policy) { return koila_set_chunking((koila_chunking)policy); }
koila_status *fuzz_set_recompute(int policy) { return koila_set_recompute((koila_recompute)policy); }
koila_status *fuzz_cross_entropy(koila_tensor **out, const koila_tensor *a, const koila_tensor *b, int r) {
  return koila_cross_entropy(out, a, b, (koila_reduction)r);
}
koila_status *fuzz_nll_loss(koila_tensor **out, const koila_tensor *a, const koila_tensor *b, int r) {
  return koila_nll_loss(out, a, b, (koila_reduction)r);
}
koila_status *fuzz_mse_loss(koila_tensor **out, const koila_tensor *a, const koila_tensor *b, int r) {
  return koila_mse_loss(out, a, b, (koila_reduction)r);
}
koila_status *fuzz_l1_loss(koila_tensor **out, const koila_tensor *a, const koila_tensor *b, int r) {
  return koila_l1_loss(out, a, b, (koila_reduction)r);
}
koila_status *fuzz_bce_with_logits(koila_tensor **out, const koila_tensor *a, const koila_tensor *b, int r) {
  return koila_binary_cross_entropy_with_logits(out, a, b, (koila_reduction)r);
}
