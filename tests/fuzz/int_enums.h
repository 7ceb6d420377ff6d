/* See int_enums.c: koila's enum-taking functions with the enum passed as a plain int. */
#ifndef KOILA_FUZZ_INT_ENUMS_H
#define KOILA_FUZZ_INT_ENUMS_H

#include "koila.h"

#ifdef __cplusplus
extern "C" {
#endif

koila_status* fuzz_tensor_from_data(koila_tensor** out, const void* data, size_t nbytes, int dtype,
                                    const int64_t* shape, size_t ndim, const char* device);
koila_status* fuzz_tensor_zeros(koila_tensor** out, const int64_t* shape, size_t ndim, int dtype, const char* device);
koila_status* fuzz_tensor_ones(koila_tensor** out, const int64_t* shape, size_t ndim, int dtype, const char* device);
koila_status* fuzz_tensor_randn(koila_tensor** out, const int64_t* shape, size_t ndim, int dtype, const char* device);
koila_status* fuzz_plan_new(koila_plan** out, const koila_tensor* t, int mode);
koila_status* fuzz_timeline_part(const koila_timeline* t, int part, uint64_t* out);
koila_status* fuzz_set_batch_stats(int policy);
koila_status* fuzz_set_chunking(int policy);
koila_status* fuzz_set_recompute(int policy);
koila_status* fuzz_cross_entropy(koila_tensor** out, const koila_tensor* a, const koila_tensor* b, int r);
koila_status* fuzz_nll_loss(koila_tensor** out, const koila_tensor* a, const koila_tensor* b, int r);
koila_status* fuzz_mse_loss(koila_tensor** out, const koila_tensor* a, const koila_tensor* b, int r);
koila_status* fuzz_l1_loss(koila_tensor** out, const koila_tensor* a, const koila_tensor* b, int r);
koila_status* fuzz_bce_with_logits(koila_tensor** out, const koila_tensor* a, const koila_tensor* b, int r);

#ifdef __cplusplus
}
#endif

#endif
