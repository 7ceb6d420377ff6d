#include "base/dlpack.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/strides.h>
#include <torch/cuda.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/text.h"

namespace koila::dlpack {
namespace {

// The layouts fixed by the specification (64-bit targets).
static_assert(sizeof(Tensor) == 48 && offsetof(Tensor, byte_offset) == 40, "DLTensor's layout");
static_assert(sizeof(ManagedTensor) == 64 && offsetof(ManagedTensor, deleter) == 56, "DLManagedTensor's layout");
static_assert(sizeof(ManagedTensorVersioned) == 80 && offsetof(ManagedTensorVersioned, dl_tensor) == 32,
              "DLManagedTensorVersioned's layout");

enum DeviceType : int32_t { kCPU = 1, kCUDA = 2, kCUDAHost = 3, kCUDAManaged = 13 };
enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kComplex = 5, kBool = 6 };

// The producer's struct, released (its deleter called) exactly once: when the last copy of
// the tensor's deleter goes, whether the import succeeded or not.
class Owner {
 public:
  Owner(void* managed, bool versioned) : managed_(managed), versioned_(versioned) {}
  ~Owner() {
    if (versioned_) {
      auto* m = static_cast<ManagedTensorVersioned*>(managed_);
      if (m->deleter != nullptr) m->deleter(m);
    } else {
      auto* m = static_cast<ManagedTensor*>(managed_);
      if (m->deleter != nullptr) m->deleter(m);
    }
  }
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;

 private:
  void* managed_;
  bool versioned_;
};

[[noreturn]] void unsupported(const std::string& why) {
  fail(Code::Unsupported, "cannot take this DLPack tensor: " + why);
}
[[noreturn]] void malformed(const std::string& why) {
  fail(Code::InvalidArgument, "the DLPack tensor is malformed: " + why);
}

at::ScalarType scalar_type_of(const DataType& t) {
  if (t.lanes != 1)
    unsupported("its dtype has " + std::to_string(t.lanes) + " lanes (vector types); koila takes lanes = 1");
  const auto pair = [](uint8_t code, uint8_t bits) { return (int(code) << 8) | bits; };
  switch (pair(t.code, t.bits)) {
    case (kFloat << 8) | 32: return at::kFloat;
    case (kFloat << 8) | 64: return at::kDouble;
    case (kFloat << 8) | 16: return at::kHalf;
    case (kBfloat << 8) | 16: return at::kBFloat16;
    case (kInt << 8) | 64: return at::kLong;
    case (kInt << 8) | 32: return at::kInt;
    case (kInt << 8) | 8: return at::kChar;
    case (kUInt << 8) | 8: return at::kByte;
    case (kBool << 8) | 8: return at::kBool;
    default: break;
  }
  unsupported("its dtype (code " + std::to_string(t.code) + ", " + std::to_string(t.bits) +
              " bits) is not one of koila's (float32, float64, float16, bfloat16, int64, int32, int8, uint8, bool)");
}

DataType data_type_of(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return {kFloat, 32, 1};
    case at::kDouble: return {kFloat, 64, 1};
    case at::kHalf: return {kFloat, 16, 1};
    case at::kBFloat16: return {kBfloat, 16, 1};
    case at::kLong: return {kInt, 64, 1};
    case at::kInt: return {kInt, 32, 1};
    case at::kChar: return {kInt, 8, 1};
    case at::kByte: return {kUInt, 8, 1};
    case at::kBool: return {kBool, 8, 1};
    default: fail(Code::Unsupported, std::string("DLPack export of dtype ") + dtype_name(type) + " is not supported");
  }
}

c10::Device device_of(const Device& d) {
  switch (d.device_type) {
    case kCPU:
    case kCUDAHost:  // pinned host memory: the CPU reads it
      return c10::Device(c10::kCPU);
    case kCUDA:
    case kCUDAManaged: {
      if (!at::hasCUDA()) unsupported("it is on a CUDA device, and this koila (or this machine) has no CUDA");
      const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
      if (d.device_id < 0 || d.device_id >= count)
        unsupported("it is on CUDA device " + std::to_string(d.device_id) + ", and this machine has " +
                    std::to_string(count));
      return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(d.device_id));
    }
    default:
      unsupported("its device type is " + std::to_string(d.device_type) +
                  "; koila takes the CPU (1), pinned host memory (3) and CUDA (2, 13)");
  }
}

at::Tensor import(const Tensor& t, const std::shared_ptr<Owner>& owner) {
  if (t.ndim < 0) malformed("ndim is " + std::to_string(t.ndim));
  if (t.ndim > 0 && t.shape == nullptr) malformed("shape is NULL with ndim " + std::to_string(t.ndim));
  const at::ScalarType type = scalar_type_of(t.dtype);
  const c10::Device device = device_of(t.device);
  std::vector<int64_t> sizes(t.shape, t.shape + t.ndim);
  int64_t numel = 1;
  for (int64_t s : sizes) {
    if (s < 0) malformed("a size is negative (shape " + shape_string(sizes) + ")");
    if (s != 0 && numel > INT64_MAX / s) malformed("its element count overflows (shape " + shape_string(sizes) + ")");
    numel *= s;
  }
  std::vector<int64_t> strides;
  if (t.strides != nullptr) {
    strides.assign(t.strides, t.strides + t.ndim);
    for (int64_t s : strides)
      if (s < 0)
        unsupported("its strides " + shape_string(strides) + " have a negative one, which LibTorch cannot hold");
  } else {
    const auto compact = c10::contiguous_strides(sizes);
    strides.assign(compact.begin(), compact.end());
  }
  const size_t element = c10::elementSize(type);
  if (numel > 0 && t.data == nullptr) malformed("data is NULL with " + std::to_string(numel) + " elements");
  char* data = static_cast<char*>(t.data) + t.byte_offset;
  if (reinterpret_cast<uintptr_t>(data) % element != 0)
    unsupported("data plus byte_offset " + std::to_string(t.byte_offset) + " is not aligned to its " +
                std::to_string(element) + "-byte elements");
  // The deleter's copies of `owner` keep the producer's struct until LibTorch frees the memory.
  return at::from_blob(
      data, sizes, strides, [owner](void*) {}, at::TensorOptions().dtype(type).device(device));
}

// What an exported struct points into, freed by its deleter.
struct Export {
  at::Tensor tensor;
  std::vector<int64_t> shape, strides;
  ManagedTensor plain{};
  ManagedTensorVersioned versioned{};
};

void delete_plain(ManagedTensor* self) { delete static_cast<Export*>(self->manager_ctx); }
void delete_versioned(ManagedTensorVersioned* self) { delete static_cast<Export*>(self->manager_ctx); }

}  // namespace

at::Tensor from_dlpack(void* managed, bool versioned) {
  if (managed == nullptr) fail(Code::InvalidArgument, "managed must not be NULL");
  std::shared_ptr<Owner> owner;
  try {
    owner = std::make_shared<Owner>(managed, versioned);
  } catch (...) {
    Owner release(managed, versioned);  // the deleter runs here, once, also without memory
    throw;
  }
  if (!versioned) return import(static_cast<ManagedTensor*>(managed)->dl_tensor, owner);
  const auto* m = static_cast<ManagedTensorVersioned*>(managed);
  if (m->version.major != kMajor)
    unsupported("it is DLPack " + std::to_string(m->version.major) + "." + std::to_string(m->version.minor) +
                ", and koila reads DLPack 1.x");
  if (m->flags & kFlagReadOnly)
    unsupported("it is read-only (DLPACK_FLAG_BITMASK_READ_ONLY), and koila's tensors are writable; copy it first");
  return import(m->dl_tensor, owner);
}

void* to_dlpack(const at::Tensor& t, bool versioned) {
  auto e = std::make_unique<Export>();
  e->tensor = t.detach();
  Tensor& d = versioned ? e->versioned.dl_tensor : e->plain.dl_tensor;
  d.dtype = data_type_of(t.scalar_type());
  if (t.device().is_cpu())
    d.device = {kCPU, 0};
  else if (t.device().is_cuda())
    d.device = {kCUDA, t.device().index()};
  else
    fail(Code::Unsupported, "DLPack export from device " + t.device().str() + " is not supported");
  e->shape = t.sizes().vec();
  e->strides = t.strides().vec();
  // Never NULL, also for a 0-dim tensor: consumers read shape and strides whatever ndim is.
  e->shape.reserve(1);
  e->strides.reserve(1);
  d.data = e->tensor.numel() > 0 ? e->tensor.data_ptr() : nullptr;
  d.ndim = static_cast<int32_t>(t.dim());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  if (versioned) {
    e->versioned.version = {kMajor, kMinor};
    e->versioned.manager_ctx = e.get();
    e->versioned.deleter = delete_versioned;
    e->versioned.flags = 0;
    return &e.release()->versioned;
  }
  e->plain.manager_ctx = e.get();
  e->plain.deleter = delete_plain;
  return &e.release()->plain;
}

}  // namespace koila::dlpack
