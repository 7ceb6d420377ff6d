// Issue 29: DLPack. Tensors shared with other array libraries without a copy, both ways and
// in both forms of the struct; the producer's deleter called exactly once, whatever
// happens; and ATen's own DLPack producer and consumer (at::toDLPack / at::fromDLPack) as
// the independent other side.
#include <ATen/DLConvertor.h>
#include <ATen/dlpack.h>

#include <cstddef>

#include "base/dlpack.h"
#include "base/text.h"
#include "helpers.h"
#include "module_helpers.h"

using namespace koila_test;
namespace dl = koila::dlpack;

namespace {

// koila's structs have ATen's layout (the plain form, which every LibTorch ships).
static_assert(sizeof(dl::ManagedTensor) == sizeof(DLManagedTensor), "DLManagedTensor");
static_assert(offsetof(dl::ManagedTensor, deleter) == offsetof(DLManagedTensor, deleter), "deleter");
static_assert(offsetof(dl::Tensor, byte_offset) == offsetof(DLTensor, byte_offset), "byte_offset");
static_assert(offsetof(dl::Tensor, strides) == offsetof(DLTensor, strides), "strides");
#ifdef DLPACK_FLAG_BITMASK_READ_ONLY  // the versioned form, where ATen has it (2.x)
static_assert(sizeof(dl::ManagedTensorVersioned) == sizeof(DLManagedTensorVersioned), "versioned");
static_assert(offsetof(dl::ManagedTensorVersioned, flags) == offsetof(DLManagedTensorVersioned, flags), "flags");
static_assert(offsetof(dl::ManagedTensorVersioned, dl_tensor) == offsetof(DLManagedTensorVersioned, dl_tensor),
              "dl_tensor");
#endif

// A producer: a buffer of floats it owns, shared through either form, counting deleter calls.
struct Producer {
  std::vector<float> data;
  std::vector<int64_t> shape, strides;
  int deleted = 0;
  dl::ManagedTensor plain{};
  dl::ManagedTensorVersioned versioned{};

  explicit Producer(std::vector<int64_t> shape_, std::vector<int64_t> strides_ = {}, size_t elements = 0)
      : shape(std::move(shape_)), strides(std::move(strides_)) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    data.resize(elements ? elements : static_cast<size_t>(n));
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;
    dl::Tensor t{};
    t.data = data.data();
    t.device = {1, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = {2, 32, 1};
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    plain.dl_tensor = t;
    plain.manager_ctx = this;
    plain.deleter = [](dl::ManagedTensor* self) { ++static_cast<Producer*>(self->manager_ctx)->deleted; };
    versioned.dl_tensor = t;
    versioned.version = {1, 0};
    versioned.manager_ctx = this;
    versioned.deleter = [](dl::ManagedTensorVersioned* self) { ++static_cast<Producer*>(self->manager_ctx)->deleted; };
  }
  dl::Tensor& tensor(bool v) { return v ? versioned.dl_tensor : plain.dl_tensor; }
  void* managed(bool v) { return v ? static_cast<void*>(&versioned) : static_cast<void*>(&plain); }
};

class DLPack : public ::testing::TestWithParam<bool> {};

// A producer's buffer becomes a koila tensor without a copy: koila reads its values, an
// optimizer step through koila writes into it, and the deleter runs once, when the last
// koila tensor goes.
TEST_P(DLPack, ImportSharesTheProducersMemory) {
  const bool v = GetParam();
  Producer prod({2, 3});
  koila_tensor* t = nullptr;
  ASSERT_OK(koila_tensor_from_dlpack(&t, prod.managed(v), v ? 1 : 0));
  Handle h(t);
  EXPECT_EQ(h->node->value.data_ptr(), prod.data.data());
  EXPECT_TRUE(at::equal(to_aten(h.get()), at::arange(6, at::kFloat).reshape({2, 3}) * 0.5));
  int lazy = 1;
  ASSERT_OK(koila_tensor_is_lazy(h.get(), &lazy));
  EXPECT_EQ(lazy, 0);
  // An SGD step on it, as on a parameter: the producer sees the new values.
  ASSERT_OK(koila_tensor_set_requires_grad(h.get(), 1));
  h->node->value.mutable_grad() = at::ones({2, 3});
  koila_tensor* raw[] = {h.get()};
  koila_optimizer* o = nullptr;
  ASSERT_OK(koila_optimizer_sgd(&o, raw, 1, 0.25, 0, 0));
  OptimizerHandle opt(o);
  ASSERT_OK(koila_optimizer_step(opt.get()));
  EXPECT_EQ(prod.data[0], -0.25f);
  EXPECT_EQ(prod.data[5], 2.25f);
  // A second handle on the same tensor keeps the memory: the deleter waits for the last.
  koila_tensor* again = nullptr;
  ASSERT_OK(koila_eval(&again, h.get()));
  opt.reset();
  h.reset();
  EXPECT_EQ(prod.deleted, 0);
  koila_tensor_free(again);
  EXPECT_EQ(prod.deleted, 1);
}

// Strides (a transposed view) and a byte offset (a slice) are taken as they are.
TEST_P(DLPack, StridesAndByteOffsets) {
  const bool v = GetParam();
  Producer prod({3, 2}, {1, 3}, 12);               // the transpose of a [2, 3] block
  prod.tensor(v).byte_offset = 6 * sizeof(float);  // the second [2, 3] block of 12 floats
  koila_tensor* t = nullptr;
  ASSERT_OK(koila_tensor_from_dlpack(&t, prod.managed(v), v ? 1 : 0));
  Handle h(t);
  const at::Tensor want = (at::arange(6, 12, at::kFloat) * 0.5).reshape({2, 3}).t();
  EXPECT_TRUE(at::equal(to_aten(h.get()), want));
  EXPECT_EQ(h->node->value.strides(), at::IntArrayRef({1, 3}));
  h.reset();
  EXPECT_EQ(prod.deleted, 1);
}

// What koila cannot hold, or a malformed struct: the right status, and the deleter called
// exactly once before the call returns.
TEST_P(DLPack, RefusalsCallTheDeleterOnce) {
  const bool v = GetParam();
  struct Case {
    const char* what;
    std::function<void(Producer&)> spoil;
    koila_code code;
    const char* says;
  };
  std::vector<Case> cases = {
      {"two lanes", [&](Producer& p) { p.tensor(v).dtype.lanes = 2; }, KOILA_ERROR_UNSUPPORTED, "lanes"},
      {"int16",
       [&](Producer& p) {
         p.tensor(v).dtype = {0, 16, 1};
       },
       KOILA_ERROR_UNSUPPORTED, "dtype"},
      {"complex64",
       [&](Producer& p) {
         p.tensor(v).dtype = {5, 64, 1};
       },
       KOILA_ERROR_UNSUPPORTED, "dtype"},
      {"OpenCL",
       [&](Producer& p) {
         p.tensor(v).device = {4, 0};
       },
       KOILA_ERROR_UNSUPPORTED, "device type"},
      {"a negative stride",
       [&](Producer& p) {
         p.strides = {-3, 1};
         p.tensor(v).strides = p.strides.data();
       },
       KOILA_ERROR_UNSUPPORTED, "negative"},
      {"misaligned", [&](Producer& p) { p.tensor(v).byte_offset = 2; }, KOILA_ERROR_UNSUPPORTED, "aligned"},
      {"negative ndim", [&](Producer& p) { p.tensor(v).ndim = -1; }, KOILA_ERROR_INVALID_ARGUMENT, "ndim"},
      {"NULL shape", [&](Producer& p) { p.tensor(v).shape = nullptr; }, KOILA_ERROR_INVALID_ARGUMENT, "shape is NULL"},
      {"a negative size", [&](Producer& p) { p.shape[1] = -3; }, KOILA_ERROR_INVALID_ARGUMENT, "negative"},
      {"NULL data", [&](Producer& p) { p.tensor(v).data = nullptr; }, KOILA_ERROR_INVALID_ARGUMENT, "data is NULL"},
  };
  if (!at::hasCUDA())
    cases.push_back({"CUDA without CUDA",
                     [&](Producer& p) {
                       p.tensor(v).device = {2, 0};
                     },
                     KOILA_ERROR_UNSUPPORTED, "CUDA"});
  if (v) {
    cases.push_back({"read-only", [&](Producer& p) { p.versioned.flags = dl::kFlagReadOnly; }, KOILA_ERROR_UNSUPPORTED,
                     "read-only"});
    cases.push_back({"DLPack 2.0",
                     [&](Producer& p) {
                       p.versioned.version = {2, 0};
                     },
                     KOILA_ERROR_UNSUPPORTED, "DLPack 2.0"});
    cases.push_back({"DLPack 0.8",
                     [&](Producer& p) {
                       p.versioned.version = {0, 8};
                     },
                     KOILA_ERROR_UNSUPPORTED, "DLPack 0.8"});
  }
  for (const Case& c : cases) {
    Producer prod({2, 3});
    c.spoil(prod);
    koila_tensor* t = nullptr;
    auto [code, message] = outcome(koila_tensor_from_dlpack(&t, prod.managed(v), v ? 1 : 0));
    EXPECT_EQ(code, c.code) << c.what << ": " << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << c.what << ": " << message;
    EXPECT_EQ(t, nullptr) << c.what;
    EXPECT_EQ(prod.deleted, 1) << c.what;
  }
  // out NULL: still owned, still released once.
  Producer prod({2});
  EXPECT_EQ(outcome(koila_tensor_from_dlpack(nullptr, prod.managed(v), v ? 1 : 0)).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(prod.deleted, 1);
  // A producer without a deleter (allowed: nothing to free).
  Producer none({2});
  none.plain.deleter = nullptr;
  none.versioned.deleter = nullptr;
  koila_tensor* t = nullptr;
  ASSERT_OK(koila_tensor_from_dlpack(&t, none.managed(v), v ? 1 : 0));
  koila_tensor_free(t);
}

TEST(DLPackArgs, AnUnknownFormIsRefusedWithoutTouchingTheStruct) {
  Producer prod({2});
  koila_tensor* t = nullptr;
  auto [code, message] = outcome(koila_tensor_from_dlpack(&t, prod.managed(false), 2));
  EXPECT_EQ(code, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("not touched"), std::string::npos) << message;
  EXPECT_EQ(prod.deleted, 0);
  EXPECT_EQ(outcome(koila_tensor_from_dlpack(&t, nullptr, 0)).first, KOILA_ERROR_INVALID_ARGUMENT);
  void* out = nullptr;
  Handle x = from_aten(at::ones({2}));
  EXPECT_EQ(outcome(koila_tensor_to_dlpack(&out, x.get(), 2)).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_tensor_to_dlpack(nullptr, x.get(), 0)).first, KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(outcome(koila_tensor_to_dlpack(&out, nullptr, 0)).first, KOILA_ERROR_INVALID_ARGUMENT);
}

// Export: the struct describes the tensor's own memory (sizes, strides, dtype code, device),
// keeps it alive until the consumer's deleter call, and a lazy tensor is evaluated first.
TEST_P(DLPack, ExportSharesKoilasMemory) {
  const bool v = GetParam();
  const at::Tensor base = at::arange(12, at::kFloat).reshape({3, 4});
  Handle x(koila::new_handle(koila::make_constant(base.t())));  // strides [1, 4]
  void* out = nullptr;
  ASSERT_OK(koila_tensor_to_dlpack(&out, x.get(), v ? 1 : 0));
  const dl::Tensor& d =
      v ? static_cast<dl::ManagedTensorVersioned*>(out)->dl_tensor : static_cast<dl::ManagedTensor*>(out)->dl_tensor;
  if (v) {
    auto* m = static_cast<dl::ManagedTensorVersioned*>(out);
    EXPECT_EQ(m->version.major, 1u);
    EXPECT_EQ(m->flags, 0u);
  }
  EXPECT_EQ(d.data, base.data_ptr());
  EXPECT_EQ(d.ndim, 2);
  EXPECT_EQ(std::vector<int64_t>(d.shape, d.shape + 2), std::vector<int64_t>({4, 3}));
  EXPECT_EQ(std::vector<int64_t>(d.strides, d.strides + 2), std::vector<int64_t>({1, 4}));
  EXPECT_EQ(d.dtype.code, 2);
  EXPECT_EQ(d.dtype.bits, 32);
  EXPECT_EQ(d.device.device_type, 1);
  EXPECT_EQ(d.byte_offset, 0u);
  // The memory outlives koila's handle until the deleter.
  x.reset();
  EXPECT_EQ(static_cast<float*>(d.data)[4], 4.0f);  // base's storage, still there
  if (v) {
    auto* m = static_cast<dl::ManagedTensorVersioned*>(out);
    m->deleter(m);
  } else {
    auto* m = static_cast<dl::ManagedTensor*>(out);
    m->deleter(m);
  }
  // A lazy tensor: evaluated, then exported.
  Handle lazy = koila_models::lazy(at::ones({4, 2}), 0);
  Handle doubled = CALL(koila_add, lazy.get(), lazy.get());
  ASSERT_OK(koila_tensor_to_dlpack(&out, doubled.get(), v ? 1 : 0));
  Handle back = CALL(koila_tensor_from_dlpack, out, v ? 1 : 0);
  EXPECT_TRUE(at::equal(to_aten(back.get()), at::full({4, 2}, 2.0f)));
}

// Every dtype of koila's, there and back, with its DLPack code.
TEST_P(DLPack, EveryDtypeRoundTrips) {
  const bool v = GetParam();
  const std::vector<std::tuple<at::ScalarType, int, int>> types = {
      {at::kFloat, 2, 32}, {at::kDouble, 2, 64}, {at::kHalf, 2, 16}, {at::kBFloat16, 4, 16}, {at::kLong, 0, 64},
      {at::kInt, 0, 32},   {at::kChar, 0, 8},    {at::kByte, 1, 8},  {at::kBool, 6, 8}};
  for (const auto& [type, code, bits] : types) {
    const at::Tensor value = (at::arange(6) % 3).to(type).reshape({2, 3});
    Handle x(koila::new_handle(koila::make_constant(value)));
    void* out = nullptr;
    ASSERT_OK(koila_tensor_to_dlpack(&out, x.get(), v ? 1 : 0));
    const dl::Tensor& d =
        v ? static_cast<dl::ManagedTensorVersioned*>(out)->dl_tensor : static_cast<dl::ManagedTensor*>(out)->dl_tensor;
    EXPECT_EQ(d.dtype.code, code) << koila::dtype_name(type);
    EXPECT_EQ(d.dtype.bits, bits) << koila::dtype_name(type);
    Handle back = CALL(koila_tensor_from_dlpack, out, v ? 1 : 0);
    EXPECT_EQ(back->node->value.data_ptr(), value.data_ptr());
    EXPECT_TRUE(at::equal(back->node->value, value)) << koila::dtype_name(type);
  }
  // A 0-dim tensor: shape and strides are still pointers (consumers read them).
  Handle scalar(koila::new_handle(koila::make_constant(at::scalar_tensor(2.5))));
  void* one = nullptr;
  ASSERT_OK(koila_tensor_to_dlpack(&one, scalar.get(), v ? 1 : 0));
  const dl::Tensor& d0 =
      v ? static_cast<dl::ManagedTensorVersioned*>(one)->dl_tensor : static_cast<dl::ManagedTensor*>(one)->dl_tensor;
  EXPECT_EQ(d0.ndim, 0);
  EXPECT_NE(d0.shape, nullptr);
  EXPECT_NE(d0.strides, nullptr);
  Handle scalar_back = CALL(koila_tensor_from_dlpack, one, v ? 1 : 0);
  EXPECT_EQ(to_aten(scalar_back.get()).item<double>(), 2.5);
  // Empty tensors too.
  Handle empty(koila::new_handle(koila::make_constant(at::empty({0, 3}))));
  void* out = nullptr;
  ASSERT_OK(koila_tensor_to_dlpack(&out, empty.get(), v ? 1 : 0));
  Handle back = CALL(koila_tensor_from_dlpack, out, v ? 1 : 0);
  EXPECT_EQ(shape_of(back.get()), std::vector<int64_t>({0, 3}));
}

INSTANTIATE_TEST_SUITE_P(Forms, DLPack, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "versioned" : "plain"; });

// ATen's own DLPack code on the other side: what ATen exports koila takes, and what koila
// exports ATen takes, sharing memory both ways.
TEST(DLPackWithATen, BothDirections) {
  const at::Tensor value = at::randn({3, 5}).t();
  DLManagedTensor* from_aten = at::toDLPack(value);
  Handle k = CALL(koila_tensor_from_dlpack, from_aten, 0);
  EXPECT_EQ(k->node->value.data_ptr(), value.data_ptr());
  EXPECT_TRUE(at::equal(to_aten(k.get()), value));
  void* out = nullptr;
  ASSERT_OK(koila_tensor_to_dlpack(&out, k.get(), 0));
  const at::Tensor in_aten = at::fromDLPack(static_cast<DLManagedTensor*>(out));
  EXPECT_EQ(in_aten.data_ptr(), value.data_ptr());
  EXPECT_TRUE(at::equal(in_aten, value));
  EXPECT_EQ(in_aten.strides(), value.strides());
}

}  // namespace
