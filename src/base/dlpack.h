// DLPack (https://dmlc.github.io/dlpack/), the exchange struct every array library shares:
// LibTorch tensors to and from DLManagedTensor (every DLPack) and DLManagedTensorVersioned
// (DLPack 1.x), without copying. The structs are declared here from the DLPack 1.1
// specification rather than taken from a LibTorch header: 1.13's ATen has only the plain
// form, and 2.x's differ in version. Nothing here knows of graphs or the C API.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace koila::dlpack {

struct Device {
  int32_t device_type;  // kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13, ...
  int32_t device_id;
};
struct DataType {
  uint8_t code;  // kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL: compact and row-major
  uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};
struct Version {
  uint32_t major;
  uint32_t minor;
};
struct ManagedTensorVersioned {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  uint64_t flags;
  Tensor dl_tensor;
};

constexpr uint64_t kFlagReadOnly = 1u << 0;
constexpr uint32_t kMajor = 1, kMinor = 1;  // what koila writes

// Takes `managed` (a ManagedTensor* or, versioned, a ManagedTensorVersioned*): its deleter
// runs exactly once, when the returned tensor's memory is freed or, when this throws, before
// it returns. Code::Unsupported for what a LibTorch tensor cannot hold or koila does
// not take (the message says which), Code::InvalidArgument for a malformed struct.
at::Tensor from_dlpack(void* managed, bool versioned);

// A new ManagedTensor* or ManagedTensorVersioned* sharing `t`'s memory and keeping it alive
// until its deleter runs. Code::Unsupported for a dtype or device DLPack has no code
// for.
void* to_dlpack(const at::Tensor& t, bool versioned);

}  // namespace koila::dlpack
