// The bad-input table: every bad argument gets the contract's code and a message that says
// what was wrong. Nothing crashes, nothing aborts.
#include <functional>
#include <iostream>

#include "helpers.h"
#include "op_tables.h"

using namespace koila_test;

namespace {

struct Row {
  const char* what;
  std::function<koila_status*()> call;
  koila_code code;
  const char* message;  // a part the message must contain
};

class BadInput : public ::testing::Test {
 protected:
  Handle x = from_aten(at::randn({4, 3}), 0);               // lazy, batch 0
  Handle c = from_aten(at::randn({4, 3}));                  // concrete
  Handle ints = from_aten(at::arange(12).reshape({4, 3}));  // int64
  Handle img = from_aten(at::randn({2, 3, 8, 8}), 0);
  Handle w = from_aten(at::randn({5, 4}));
  koila_tensor* out = nullptr;

  void run(const std::vector<Row>& rows) {
    for (const Row& row : rows) {
      SCOPED_TRACE(row.what);
      out = reinterpret_cast<koila_tensor*>(0x1);
      koila_status* s = row.call();
      ASSERT_NE(s, nullptr) << "expected an error";
      EXPECT_EQ(koila_status_code(s), row.code) << koila_status_message(s);
      EXPECT_NE(std::string(koila_status_message(s)).find(row.message), std::string::npos)
          << "message: " << koila_status_message(s);
      koila_status_free(s);
      if (out != reinterpret_cast<koila_tensor*>(0x1)) {
        EXPECT_EQ(out, nullptr) << "out must be NULL after a failure";
      }
    }
  }
};

const int64_t s23[] = {2, 3};

}  // namespace

TEST_F(BadInput, NullHandlesAndOutPointers) {
  int flag;
  size_t n;
  koila_dtype d;
  int64_t b;
  double v;
  run({
      {"NULL out", [&] { return koila_add(nullptr, x.get(), x.get()); }, KOILA_ERROR_INVALID_ARGUMENT, "'out' is NULL"},
      {"NULL a", [&] { return koila_add(&out, nullptr, x.get()); }, KOILA_ERROR_INVALID_ARGUMENT, "'a' is NULL"},
      {"NULL x", [&] { return koila_relu(&out, nullptr); }, KOILA_ERROR_INVALID_ARGUMENT, "'x' is NULL"},
      {"NULL weight", [&] { return koila_linear(&out, x.get(), nullptr, nullptr); }, KOILA_ERROR_INVALID_ARGUMENT,
       "'weight' is NULL"},
      {"NULL list entry",
       [&] {
         koila_tensor* list[] = {x.get(), nullptr};
         return koila_cat(&out, list, 2, 1);
       },
       KOILA_ERROR_INVALID_ARGUMENT, "ts[1]"},
      {"NULL list", [&] { return koila_stack(&out, nullptr, 2, 0); }, KOILA_ERROR_INVALID_ARGUMENT, "NULL"},
      {"empty list",
       [&] {
         koila_tensor* list[] = {x.get()};
         return koila_cat(&out, list, 0, 0);
       },
       KOILA_ERROR_INVALID_ARGUMENT, "empty"},
      {"shape of NULL", [&] { return koila_tensor_shape(nullptr, nullptr, 0, &n); }, KOILA_ERROR_INVALID_ARGUMENT,
       "'t' is NULL"},
      {"shape NULL ndim", [&] { return koila_tensor_shape(x.get(), nullptr, 0, nullptr); },
       KOILA_ERROR_INVALID_ARGUMENT, "'ndim'"},
      {"shape NULL dims with capacity", [&] { return koila_tensor_shape(x.get(), nullptr, 2, &n); },
       KOILA_ERROR_INVALID_ARGUMENT, "'dims'"},
      {"dtype NULL out", [&] { return koila_tensor_dtype(x.get(), nullptr); }, KOILA_ERROR_INVALID_ARGUMENT, "'out'"},
      {"dtype of NULL", [&] { return koila_tensor_dtype(nullptr, &d); }, KOILA_ERROR_INVALID_ARGUMENT, "'t'"},
      {"batch_dim of NULL", [&] { return koila_tensor_batch_dim(nullptr, &b); }, KOILA_ERROR_INVALID_ARGUMENT, "'t'"},
      {"is_lazy NULL out", [&] { return koila_tensor_is_lazy(x.get(), nullptr); }, KOILA_ERROR_INVALID_ARGUMENT,
       "'out'"},
      {"item NULL out", [&] { return koila_tensor_item(x.get(), nullptr); }, KOILA_ERROR_INVALID_ARGUMENT, "'out'"},
      {"item of NULL", [&] { return koila_tensor_item(nullptr, &v); }, KOILA_ERROR_INVALID_ARGUMENT, "'t'"},
      {"to_host NULL data", [&] { return koila_tensor_to_host(x.get(), nullptr, 48); }, KOILA_ERROR_INVALID_ARGUMENT,
       "'data'"},
      {"to_string NULL buf with capacity", [&] { return koila_tensor_to_string(x.get(), nullptr, 10, &n); },
       KOILA_ERROR_INVALID_ARGUMENT, "'buf'"},
      {"lazy NULL out", [&] { return koila_lazy(nullptr, c.get(), 0); }, KOILA_ERROR_INVALID_ARGUMENT, "'out'"},
      {"lazy of NULL", [&] { return koila_lazy(&out, nullptr, 0); }, KOILA_ERROR_INVALID_ARGUMENT, "'t'"},
      {"eval of NULL", [&] { return koila_eval(&out, nullptr); }, KOILA_ERROR_INVALID_ARGUMENT, "'t'"},
      {"backward of NULL", [&] { return koila_backward(nullptr); }, KOILA_ERROR_INVALID_ARGUMENT, "'loss'"},
      {"grad NULL out", [&] { return koila_tensor_grad(nullptr, c.get()); }, KOILA_ERROR_INVALID_ARGUMENT, "'out'"},
      {"set_requires_grad of NULL", [&] { return koila_tensor_set_requires_grad(nullptr, 1); },
       KOILA_ERROR_INVALID_ARGUMENT, "'t'"},
      {"zero_grad of NULL", [&] { return koila_tensor_zero_grad(nullptr); }, KOILA_ERROR_INVALID_ARGUMENT, "'t'"},
      {"zeros NULL out", [&] { return koila_tensor_zeros(nullptr, s23, 2, KOILA_FLOAT32, "cpu"); },
       KOILA_ERROR_INVALID_ARGUMENT, "'out'"},
      {"pool NULL kernel", [&] { return koila_max_pool2d(&out, img.get(), nullptr, nullptr, nullptr, 0); },
       KOILA_ERROR_INVALID_ARGUMENT, "'kernel'"},
      {"adaptive NULL size", [&] { return koila_adaptive_avg_pool2d(&out, img.get(), nullptr); },
       KOILA_ERROR_INVALID_ARGUMENT, "'output_size'"},
      {"upsample NULL scale", [&] { return koila_upsample_nearest2d(&out, img.get(), nullptr); },
       KOILA_ERROR_INVALID_ARGUMENT, "'scale'"},
      {"sum NULL dims with count", [&] { return koila_sum(&out, x.get(), nullptr, 2, 0); },
       KOILA_ERROR_INVALID_ARGUMENT, "'dims'"},
      {"is_lazy of NULL", [&] { return koila_tensor_is_lazy(nullptr, &flag); }, KOILA_ERROR_INVALID_ARGUMENT, "'t'"},
  });
}

TEST_F(BadInput, SizesShapesAndDims) {
  float data[6] = {0};
  double v;
  const int64_t negative[] = {2, -3}, absurd[] = {int64_t{1} << 40, int64_t{1} << 40}, huge[] = {int64_t{1} << 45};
  const int64_t bad_perm[] = {0, 0}, short_perm[] = {0};
  run({
      {"from_data wrong nbytes", [&] { return koila_tensor_from_data(&out, data, 20, KOILA_FLOAT32, s23, 2, "cpu"); },
       KOILA_ERROR_INVALID_ARGUMENT, "nbytes is 20 but shape [2, 3] of Float needs 24"},
      {"from_data NULL data", [&] { return koila_tensor_from_data(&out, nullptr, 24, KOILA_FLOAT32, s23, 2, "cpu"); },
       KOILA_ERROR_INVALID_ARGUMENT, "'data' is NULL"},
      {"from_data NULL shape", [&] { return koila_tensor_from_data(&out, data, 24, KOILA_FLOAT32, nullptr, 2, "cpu"); },
       KOILA_ERROR_INVALID_ARGUMENT, "argument 'shape' is NULL but its count is 2"},
      {"negative size", [&] { return koila_tensor_zeros(&out, negative, 2, KOILA_FLOAT32, "cpu"); },
       KOILA_ERROR_INVALID_ARGUMENT, "negative size at dim 1"},
      {"absurd dims overflow", [&] { return koila_tensor_zeros(&out, absurd, 2, KOILA_FLOAT32, "cpu"); },
       KOILA_ERROR_INVALID_ARGUMENT, "too many elements"},
      {"more than the machine holds", [&] { return koila_tensor_ones(&out, huge, 1, KOILA_FLOAT64, "cpu"); },
       KOILA_ERROR_OUT_OF_MEMORY, "exceeds"},
      {"too many dims",
       [&] {
         std::vector<int64_t> many(65, 1);
         return koila_tensor_zeros(&out, many.data(), many.size(), KOILA_FLOAT32, "cpu");
       },
       KOILA_ERROR_INVALID_ARGUMENT, "at most 64"},
      {"to_host wrong nbytes", [&] { return koila_tensor_to_host(x.get(), data, 24); }, KOILA_ERROR_INVALID_ARGUMENT,
       "nbytes is 24 but the tensor ([4, 3] Float) has 48"},
      {"item of a non-scalar", [&] { return koila_tensor_item(x.get(), &v); }, KOILA_ERROR_INVALID_ARGUMENT,
       "exactly one element, but this one has shape [4, 3] (12 elements)"},
      {"lazy batch dim out of range", [&] { return koila_lazy(&out, c.get(), 2); }, KOILA_ERROR_INVALID_ARGUMENT,
       "batch_dim 2 is out of range for a tensor of rank 2"},
      {"lazy negative batch dim out of range", [&] { return koila_lazy(&out, c.get(), -3); },
       KOILA_ERROR_INVALID_ARGUMENT, "batch_dim -3"},
      {"lazy again with another batch dim", [&] { return koila_lazy(&out, x.get(), 1); }, KOILA_ERROR_INVALID_ARGUMENT,
       "already lazy with batch dim 0"},
      {"softmax dim out of range", [&] { return koila_softmax(&out, x.get(), 2); }, KOILA_ERROR_INVALID_ARGUMENT,
       "dim 2 is out of range"},
      {"sum dim out of range",
       [&] {
         const int64_t d[] = {-3};
         return koila_sum(&out, x.get(), d, 1, 0);
       },
       KOILA_ERROR_INVALID_ARGUMENT, "dim -3 is out of range"},
      {"sum repeated dim",
       [&] {
         const int64_t d[] = {0, -2};
         return koila_sum(&out, x.get(), d, 2, 0);
       },
       KOILA_ERROR_INVALID_ARGUMENT, "more than once"},
      {"keepdim not a flag", [&] { return koila_sum(&out, x.get(), nullptr, 0, 7); }, KOILA_ERROR_INVALID_ARGUMENT,
       "keepdim must be 0 or 1"},
      {"transpose dim out of range", [&] { return koila_transpose(&out, x.get(), 0, 5); }, KOILA_ERROR_INVALID_ARGUMENT,
       "d1 5"},
      {"permute repeated dim", [&] { return koila_permute(&out, x.get(), bad_perm, 2); }, KOILA_ERROR_INVALID_ARGUMENT,
       "repeats"},
      {"permute wrong count", [&] { return koila_permute(&out, x.get(), short_perm, 1); }, KOILA_ERROR_INVALID_ARGUMENT,
       "needs 2 dims"},
      {"unsqueeze out of range", [&] { return koila_unsqueeze(&out, x.get(), 4); }, KOILA_ERROR_INVALID_ARGUMENT,
       "out of range"},
      {"flatten start after end", [&] { return koila_flatten(&out, x.get(), 1, 0); }, KOILA_ERROR_INVALID_ARGUMENT,
       "must not come after"},
      {"narrow past the end", [&] { return koila_narrow(&out, x.get(), 1, 2, 5); }, KOILA_ERROR_INVALID_ARGUMENT,
       "do not fit dim 1 of size 3"},
      {"reshape to the wrong size",
       [&] {
         const int64_t s[] = {5, 3};
         return koila_reshape(&out, x.get(), s, 2);
       },
       KOILA_ERROR_SHAPE, "koila_reshape"},
      {"reshape with two -1",
       [&] {
         const int64_t s[] = {-1, -1};
         return koila_reshape(&out, x.get(), s, 2);
       },
       KOILA_ERROR_SHAPE, "[4, 3]"},
      {"reshape bad size",
       [&] {
         const int64_t s[] = {-4, 3};
         return koila_reshape(&out, x.get(), s, 2);
       },
       KOILA_ERROR_INVALID_ARGUMENT, "invalid size -4"},
      {"dropout p > 1", [&] { return koila_dropout(&out, x.get(), 1.5, 1); }, KOILA_ERROR_INVALID_ARGUMENT,
       "between 0 and 1"},
      {"groups 0",
       [&] {
         Handle k = from_aten(at::randn({4, 3, 3, 3}));
         return koila_conv2d(&out, img.get(), k.get(), nullptr, nullptr, nullptr, nullptr, 0);
       },
       KOILA_ERROR_INVALID_ARGUMENT, "groups must be positive"},
      {"upsample scale 0",
       [&] {
         const int64_t scale[] = {2, 0};
         return koila_upsample_nearest2d(&out, img.get(), scale);
       },
       KOILA_ERROR_INVALID_ARGUMENT, "scale must be 1 or more"},
      {"upsample rank 2",
       [&] {
         const int64_t scale[] = {2, 2};
         return koila_upsample_nearest2d(&out, x.get(), scale);
       },
       KOILA_ERROR_SHAPE, "rank 3 or 4"},
      {"unknown reduction", [&] { return koila_mse_loss(&out, x.get(), x.get(), static_cast<koila_reduction>(9)); },
       KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_reduction 9"},
      {"layer_norm empty shape", [&] { return koila_layer_norm(&out, x.get(), nullptr, 0, nullptr, nullptr, 1e-5); },
       KOILA_ERROR_INVALID_ARGUMENT, "at least one dim"},
      {"batch_norm eval without stats",
       [&] { return koila_batch_norm(&out, img.get(), nullptr, nullptr, nullptr, nullptr, 0, 0.1, 1e-5); },
       KOILA_ERROR_INVALID_ARGUMENT, "running_mean and running_var"},
  });
}

// Flags are strictly 0 or 1 and enums are range-checked ints, in every entry point that
// takes one (koila.h, "Conventions").
TEST_F(BadInput, FlagsAndEnumsOutOfRange) {
  koila_plan* plan = reinterpret_cast<koila_plan*>(0x1);
  Handle mask = from_aten(at::ones({4, 4}, at::kBool));
  Handle p = from_aten(at::randn({3}));
  Handle target = from_aten(at::zeros({4}, at::kLong), 0);
  const int64_t k[] = {2, 2}, dim1[] = {1};
  run({
      {"requires_grad 2", [&] { return koila_tensor_set_requires_grad(p.get(), 2); }, KOILA_ERROR_INVALID_ARGUMENT,
       "flag must be 0 or 1, got 2"},
      {"requires_grad -1", [&] { return koila_tensor_set_requires_grad(p.get(), -1); }, KOILA_ERROR_INVALID_ARGUMENT,
       "flag must be 0 or 1"},
      {"dropout train 2", [&] { return koila_dropout(&out, x.get(), 0.5, 2); }, KOILA_ERROR_INVALID_ARGUMENT,
       "train must be 0 or 1, got 2"},
      {"sum keepdim -1", [&] { return koila_sum(&out, x.get(), dim1, 1, -1); }, KOILA_ERROR_INVALID_ARGUMENT,
       "keepdim must be 0 or 1"},
      {"mean keepdim 2", [&] { return koila_mean(&out, x.get(), nullptr, 0, 2); }, KOILA_ERROR_INVALID_ARGUMENT,
       "keepdim must be 0 or 1"},
      {"amax keepdim 3", [&] { return koila_amax(&out, x.get(), nullptr, 0, 3); }, KOILA_ERROR_INVALID_ARGUMENT,
       "keepdim must be 0 or 1"},
      {"amin keepdim 3", [&] { return koila_amin(&out, x.get(), nullptr, 0, 3); }, KOILA_ERROR_INVALID_ARGUMENT,
       "keepdim must be 0 or 1"},
      {"argmax keepdim 2", [&] { return koila_argmax(&out, x.get(), 1, 2); }, KOILA_ERROR_INVALID_ARGUMENT,
       "keepdim must be 0 or 1"},
      {"max_pool ceil_mode 2", [&] { return koila_max_pool2d(&out, img.get(), k, nullptr, nullptr, 2); },
       KOILA_ERROR_INVALID_ARGUMENT, "ceil_mode must be 0 or 1"},
      {"avg_pool ceil_mode 9", [&] { return koila_avg_pool2d(&out, img.get(), k, nullptr, nullptr, 9); },
       KOILA_ERROR_INVALID_ARGUMENT, "ceil_mode must be 0 or 1"},
      {"batch_norm training 2",
       [&] { return koila_batch_norm(&out, img.get(), nullptr, nullptr, nullptr, nullptr, 2, 0.1, 1e-5); },
       KOILA_ERROR_INVALID_ARGUMENT, "training must be 0 or 1"},
      {"attention is_causal 2",
       [&] { return koila_scaled_dot_product_attention(&out, x.get(), x.get(), x.get(), mask.get(), 2); },
       KOILA_ERROR_INVALID_ARGUMENT, "is_causal must be 0 or 1"},
      {"plan mode 2", [&] { return koila_plan_new(&plan, x.get(), static_cast<koila_mode>(2)); },
       KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_mode 2 for argument 'mode'"},
      {"plan mode -1", [&] { return koila_plan_new(&plan, x.get(), static_cast<koila_mode>(-1)); },
       KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_mode -1"},
      {"cross_entropy reduction 3",
       [&] { return koila_cross_entropy(&out, x.get(), target.get(), static_cast<koila_reduction>(3)); },
       KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_reduction 3"},
      {"nll reduction -7",
       [&] { return koila_nll_loss(&out, x.get(), target.get(), static_cast<koila_reduction>(-7)); },
       KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_reduction -7"},
      {"l1 reduction big", [&] { return koila_l1_loss(&out, x.get(), x.get(), static_cast<koila_reduction>(1 << 20)); },
       KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_reduction"},
      {"bce reduction 3",
       [&] { return koila_binary_cross_entropy_with_logits(&out, x.get(), x.get(), static_cast<koila_reduction>(3)); },
       KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_reduction 3"},
      {"ones dtype 9", [&] { return koila_tensor_ones(&out, s23, 2, static_cast<koila_dtype>(9), "cpu"); },
       KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_dtype 9"},
      {"randn dtype -3", [&] { return koila_tensor_randn(&out, s23, 2, static_cast<koila_dtype>(-3), "cpu"); },
       KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_dtype -3"},
  });
  EXPECT_EQ(plan, nullptr) << "a failed koila_plan_new leaves *out NULL";
}

TEST_F(BadInput, ShapesThatDoNotFit) {
  Handle y = from_aten(at::randn({5, 2}), 0);
  Handle wrong_channels = from_aten(at::randn({4, 5, 3, 3}));
  Handle big_kernel = from_aten(at::randn({4, 3, 9, 9}));
  Handle gamma = from_aten(at::randn({7}));
  run({
      {"add not broadcastable", [&] { return koila_add(&out, x.get(), y.get()); }, KOILA_ERROR_SHAPE,
       "koila_add: inputs [4, 3] Float, [5, 2] Float"},
      {"matmul inner mismatch", [&] { return koila_matmul(&out, x.get(), y.get()); }, KOILA_ERROR_SHAPE,
       "[4, 3] Float, [5, 2] Float"},
      {"linear in-features mismatch", [&] { return koila_linear(&out, x.get(), w.get(), nullptr); }, KOILA_ERROR_SHAPE,
       "[5, 4]"},
      {"linear bias of the wrong size",
       [&] {
         Handle w3 = from_aten(at::randn({5, 3}));
         return koila_linear(&out, x.get(), w3.get(), gamma.get());
       },
       KOILA_ERROR_SHAPE, "bias [7] does not broadcast to its result [4, 5]"},
      {"linear dtypes differ",
       [&] {
         Handle w3 = from_aten(at::randn({5, 3}, at::kDouble));
         return koila_linear(&out, x.get(), w3.get(), nullptr);
       },
       KOILA_ERROR_DTYPE, "linear needs x, weight and bias of one dtype, got Float, Double"},
      {"conv channel mismatch",
       [&] { return koila_conv2d(&out, img.get(), wrong_channels.get(), nullptr, nullptr, nullptr, nullptr, 1); },
       KOILA_ERROR_SHAPE, "to have 5 channels, but got 3 channels"},
      {"conv kernel larger than input",
       [&] { return koila_conv2d(&out, img.get(), big_kernel.get(), nullptr, nullptr, nullptr, nullptr, 1); },
       KOILA_ERROR_SHAPE, "Kernel size can't be greater"},
      {"conv rank",
       [&] {
         Handle k = from_aten(at::randn({4, 3, 3}));
         return koila_conv2d(&out, x.get(), k.get(), nullptr, nullptr, nullptr, nullptr, 1);
       },
       KOILA_ERROR_SHAPE, "rank 3 or 4"},
      {"pool rank",
       [&] {
         const int64_t k[] = {2, 2};
         return koila_max_pool2d(&out, x.get(), k, nullptr, nullptr, 0);
       },
       KOILA_ERROR_SHAPE, "rank 3 or 4"},
      {"layer_norm shape",
       [&] {
         const int64_t s[] = {4};
         return koila_layer_norm(&out, x.get(), s, 1, nullptr, nullptr, 1e-5);
       },
       KOILA_ERROR_SHAPE, "koila_layer_norm"},
      {"batch_norm weight size",
       [&] { return koila_batch_norm(&out, img.get(), gamma.get(), nullptr, nullptr, nullptr, 1, 0.1, 1e-5); },
       KOILA_ERROR_SHAPE, "should contain 3 elements not 7"},
      {"cat sizes",
       [&] {
         koila_tensor* l[] = {x.get(), y.get()};
         return koila_cat(&out, l, 2, 1);
       },
       KOILA_ERROR_SHAPE, "koila_cat"},
      {"cat ranks",
       [&] {
         koila_tensor* l[] = {x.get(), img.get()};
         return koila_cat(&out, l, 2, 1);
       },
       KOILA_ERROR_SHAPE, "same rank"},
      {"stack shapes",
       [&] {
         koila_tensor* l[] = {x.get(), y.get()};
         return koila_stack(&out, l, 2, 0);
       },
       KOILA_ERROR_SHAPE, "koila_stack"},
      {"mse shapes", [&] { return koila_mse_loss(&out, x.get(), y.get(), KOILA_REDUCTION_MEAN); }, KOILA_ERROR_SHAPE,
       "input [4, 3] and target [5, 2] must have the same shape"},
      {"cross_entropy target size",
       [&] {
         Handle t = from_aten(at::zeros({5}, at::kLong), 0);
         return koila_cross_entropy(&out, x.get(), t.get(), KOILA_REDUCTION_MEAN);
       },
       KOILA_ERROR_SHAPE, "koila_cross_entropy"},
      {"attention key size",
       [&] {
         Handle k = from_aten(at::randn({4, 2}));
         return koila_scaled_dot_product_attention(&out, x.get(), k.get(), k.get(), nullptr, 0);
       },
       KOILA_ERROR_SHAPE, "expected q [..., L, E]"},
      {"embedding weight rank",
       [&] {
         Handle i = from_aten(at::zeros({3}, at::kLong));
         return koila_embedding(&out, img.get(), i.get());
       },
       KOILA_ERROR_SHAPE, "[num, dim]"},
      {"index_select index rank",
       [&] {
         Handle i = from_aten(at::zeros({2, 2}, at::kLong));
         return koila_index_select(&out, x.get(), 1, i.get());
       },
       KOILA_ERROR_SHAPE, "1-D"},
      {"matmul of a scalar",
       [&] {
         Handle s = from_aten(at::ones({}));
         return koila_matmul(&out, s.get(), x.get());
       },
       KOILA_ERROR_SHAPE, "at least 1 dimension"},
  });
}

TEST_F(BadInput, DtypesAndDevices) {
  float data[6] = {0};
  run({
      {"unknown dtype",
       [&] { return koila_tensor_from_data(&out, data, 24, static_cast<koila_dtype>(42), s23, 2, "cpu"); },
       KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_dtype 42"},
      {"unknown dtype zeros", [&] { return koila_tensor_zeros(&out, s23, 2, static_cast<koila_dtype>(-1), "cpu"); },
       KOILA_ERROR_INVALID_ARGUMENT, "unknown koila_dtype -1"},
      {"randn of ints", [&] { return koila_tensor_randn(&out, s23, 2, KOILA_INT64, "cpu"); }, KOILA_ERROR_DTYPE,
       "floating dtype"},
      {"softmax of ints", [&] { return koila_softmax(&out, ints.get(), 1); }, KOILA_ERROR_DTYPE, "floating point"},
      {"mean of ints", [&] { return koila_mean(&out, ints.get(), nullptr, 0, 0); }, KOILA_ERROR_DTYPE,
       "floating point"},
      {"embedding float indices", [&] { return koila_embedding(&out, w.get(), x.get()); }, KOILA_ERROR_DTYPE,
       "indices must be"},
      {"cross_entropy int32 target",
       [&] {
         Handle t = from_aten(at::zeros({4}, at::kInt), 0);
         return koila_cross_entropy(&out, x.get(), t.get(), KOILA_REDUCTION_MEAN);
       },
       KOILA_ERROR_DTYPE, "KOILA_INT64"},
      {"requires_grad on ints", [&] { return koila_tensor_set_requires_grad(ints.get(), 1); }, KOILA_ERROR_DTYPE,
       "floating point"},
      {"attention int mask",
       [&] {
         Handle m = from_aten(at::zeros({4, 4}, at::kLong));
         return koila_scaled_dot_product_attention(&out, x.get(), x.get(), x.get(), m.get(), 0);
       },
       KOILA_ERROR_DTYPE, "attn_mask"},
      {"no such cuda device", [&] { return koila_tensor_from_data(&out, data, 24, KOILA_FLOAT32, s23, 2, "cuda:99"); },
       KOILA_ERROR_DEVICE, "device \"cuda:99\" is not available"},
      {"cuda:98 here", [&] { return koila_tensor_zeros(&out, s23, 2, KOILA_FLOAT32, "cuda:98"); }, KOILA_ERROR_DEVICE,
       "cuda:98"},
      {"unknown device", [&] { return koila_tensor_zeros(&out, s23, 2, KOILA_FLOAT32, "tpu"); }, KOILA_ERROR_DEVICE,
       "unknown device \"tpu\""},
      {"malformed cuda index", [&] { return koila_tensor_zeros(&out, s23, 2, KOILA_FLOAT32, "cuda:x"); },
       KOILA_ERROR_DEVICE, "unknown device"},
      {"meta is not a device of the API", [&] { return koila_tensor_zeros(&out, s23, 2, KOILA_FLOAT32, "meta"); },
       KOILA_ERROR_DEVICE, "unknown device"},
      {"NULL device", [&] { return koila_tensor_zeros(&out, s23, 2, KOILA_FLOAT32, nullptr); },
       KOILA_ERROR_INVALID_ARGUMENT, "'device'"},
  });
}

TEST_F(BadInput, Autograd) {
  Handle nonscalar = from_aten(at::randn({3}), 0);
  Handle loss_without_params = from_aten(at::ones({}), KOILA_NO_BATCH);
  Handle int_loss = from_aten(at::ones({}, at::kLong), KOILA_NO_BATCH);
  run({
      {"requires_grad on lazy", [&] { return koila_tensor_set_requires_grad(x.get(), 1); },
       KOILA_ERROR_INVALID_ARGUMENT, "t is lazy"},
      {"backward of a non-scalar", [&] { return koila_backward(nonscalar.get()); }, KOILA_ERROR_INVALID_ARGUMENT,
       "exactly one element, but has shape [3]"},
      {"backward with nothing requiring grad", [&] { return koila_backward(loss_without_params.get()); },
       KOILA_ERROR_INVALID_ARGUMENT, "does not depend on any tensor that requires grad"},
      {"backward of an integer loss", [&] { return koila_backward(int_loss.get()); }, KOILA_ERROR_DTYPE,
       "floating point"},
      {"requires_grad on a non-leaf",
       [&] {
         Handle p = from_aten(at::ones({2}));
         koila_status_free(koila_tensor_set_requires_grad(p.get(), 1));
         koila_tensor* y = nullptr;
         koila_status_free(koila_exp(&y, p.get()));
         Handle h(y);
         return koila_tensor_set_requires_grad(h.get(), 0);
       },
       KOILA_ERROR_INVALID_ARGUMENT, "only leaves"},
  });
}

TEST(FailedBackward, LeavesGradientsUntouched) {
  // The loss's evaluation fails halfway (an index out of range): no .grad changes.
  Handle w = from_aten(at::randn({4, 2}));
  ASSERT_OK(koila_tensor_set_requires_grad(w.get(), 1));
  Handle bad_indices = from_aten(at::tensor(std::vector<int64_t>{0, 1, 7}), 0);
  koila_tensor *e = nullptr, *loss = nullptr;
  ASSERT_OK(koila_embedding(&e, w.get(), bad_indices.get()));
  Handle emb(e);
  ASSERT_OK(koila_sum(&loss, emb.get(), nullptr, 0, 0));
  Handle l(loss);
  koila_status* s = koila_backward(l.get());
  EXPECT_EQ(koila_status_code(s), KOILA_ERROR_INVALID_ARGUMENT);
  koila_status_free(s);
  koila_tensor* g = reinterpret_cast<koila_tensor*>(1);
  ASSERT_OK(koila_tensor_grad(&g, w.get()));
  EXPECT_EQ(g, nullptr);
}

TEST(DtypeErrors, ComeFromTheBuildingCallNeverFromEvaluation) {
  // For every dtype and op: either building fails with KOILA_ERROR_DTYPE, or evaluating
  // succeeds. (Which combinations fail depends on LibTorch's kernels for the device: Half on
  // the CPU of LibTorch 1.13 has few, bool has no abs, ...)
  using Unary = koila_status* (*)(koila_tensor**, const koila_tensor*);
  using Binary = koila_status* (*)(koila_tensor**, const koila_tensor*, const koila_tensor*);
#define UNARY(NAME, REF, POSITIVE) {#NAME, koila_##NAME},
#define BINARY(NAME, REF, POSITIVE) {#NAME, koila_##NAME},
  const std::vector<std::pair<const char*, Unary>> unary = {KOILA_UNARY_OPS(UNARY)};
  const std::vector<std::pair<const char*, Binary>> binary = {KOILA_BINARY_OPS(BINARY)};
#undef UNARY
#undef BINARY
  int refused = 0, evaluated = 0;
  for (int d = KOILA_FLOAT32; d <= KOILA_BOOL; ++d) {
    const int64_t shape[] = {2, 4};
    koila_tensor *c = nullptr, *x = nullptr;
    ASSERT_OK(koila_tensor_ones(&c, shape, 2, static_cast<koila_dtype>(d), "cpu"));
    Handle concrete(c);
    ASSERT_OK(koila_lazy(&x, c, 0));
    Handle lazy(x);
    auto expect = [&](const std::string& what, koila_status* built, koila_tensor* out) {
      SCOPED_TRACE(what + " of dtype " + std::to_string(d));
      Handle result(out);
      if (built) {
        EXPECT_EQ(koila_status_code(built), KOILA_ERROR_DTYPE) << koila_status_message(built);
        koila_status_free(built);
        ++refused;
        return;
      }
      koila_tensor* value = nullptr;
      koila_status* s = koila_eval(&value, out);
      EXPECT_EQ(s, nullptr) << "built, then failed at evaluation: " << koila_status_message(s);
      koila_status_free(s);
      koila_tensor_free(value);
      ++evaluated;
    };
    for (const auto& [name, fn] : unary) {
      koila_tensor* out = nullptr;
      koila_status* s = fn(&out, lazy.get());
      expect(name, s, out);
    }
    for (const auto& [name, fn] : binary) {
      koila_tensor* out = nullptr;
      koila_status* s = fn(&out, lazy.get(), lazy.get());
      expect(name, s, out);
    }
    const std::vector<std::pair<const char*, std::function<koila_status*(koila_tensor**)>>> others = {
        {"clamp", [&](koila_tensor** o) { return koila_clamp(o, lazy.get(), 0, 1); }},
        {"pow_scalar", [&](koila_tensor** o) { return koila_pow_scalar(o, lazy.get(), 2); }},
        {"sum", [&](koila_tensor** o) { return koila_sum(o, lazy.get(), nullptr, 0, 0); }},
        {"amax", [&](koila_tensor** o) { return koila_amax(o, lazy.get(), nullptr, 0, 0); }},
        {"argmax", [&](koila_tensor** o) { return koila_argmax(o, lazy.get(), 1, 0); }},
        {"softmax", [&](koila_tensor** o) { return koila_softmax(o, lazy.get(), 1); }},
    };
    for (const auto& [name, fn] : others) {
      koila_tensor* out = nullptr;
      koila_status* s = fn(&out);
      expect(name, s, out);
    }
  }
  EXPECT_GT(evaluated, 0);
  std::cout << evaluated << " combinations evaluated, " << refused << " refused when built\n";
}
