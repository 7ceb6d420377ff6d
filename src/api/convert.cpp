#include "api/convert.h"

#include <algorithm>
#include <cstring>

#include "api/args.h"
#include "base/dims.h"
#include "base/error.h"
#include "base/text.h"

namespace koila {

at::ScalarType to_scalar_type(const koila_dtype& dtype) {
  switch (arg::enumeration(dtype, "dtype", "koila_dtype", KOILA_FLOAT32, KOILA_BOOL)) {
    case KOILA_FLOAT32: return at::kFloat;
    case KOILA_FLOAT64: return at::kDouble;
    case KOILA_FLOAT16: return at::kHalf;
    case KOILA_BFLOAT16: return at::kBFloat16;
    case KOILA_INT64: return at::kLong;
    case KOILA_INT32: return at::kInt;
    case KOILA_INT8: return at::kChar;
    case KOILA_UINT8: return at::kByte;
    case KOILA_BOOL: return at::kBool;
  }
  fail(Code::Internal, "koila_dtype without a LibTorch type");
}

at::Reduction::Reduction to_reduction(const koila_reduction& r) {
  switch (arg::enumeration(r, "r", "koila_reduction", KOILA_REDUCTION_NONE, KOILA_REDUCTION_SUM)) {
    case KOILA_REDUCTION_NONE: return at::Reduction::None;
    case KOILA_REDUCTION_MEAN: return at::Reduction::Mean;
    case KOILA_REDUCTION_SUM: return at::Reduction::Sum;
  }
  fail(Code::Internal, "koila_reduction without a LibTorch reduction");
}

koila_dtype to_koila_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return KOILA_FLOAT32;
    case at::kDouble: return KOILA_FLOAT64;
    case at::kHalf: return KOILA_FLOAT16;
    case at::kBFloat16: return KOILA_BFLOAT16;
    case at::kLong: return KOILA_INT64;
    case at::kInt: return KOILA_INT32;
    case at::kChar: return KOILA_INT8;
    case at::kByte: return KOILA_UINT8;
    case at::kBool: return KOILA_BOOL;
    default: break;
  }
  fail(Code::Dtype, std::string("dtype ") + c10::toString(type) + " has no koila_dtype");
}

c10::Device parse_device(const char* device) {
  arg::not_null(device, "device");
  const std::string text(device);
  if (text == "cpu") return c10::Device(c10::kCPU);
  int64_t index = -1;
  if (text == "cuda") {
    index = 0;
  } else if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() <= 9) {
    index = 0;
    for (size_t i = 5; i < text.size(); ++i) {
      if (text[i] < '0' || text[i] > '9') {
        index = -1;
        break;
      }
      index = index * 10 + (text[i] - '0');
    }
  }
  if (index < 0) fail(Code::Device, "unknown device \"" + text + "\" (expected \"cpu\", \"cuda\" or \"cuda:N\")");
  if (!at::hasCUDA())
    fail(Code::Device,
         "device \"" + text + "\" is not available: this LibTorch has no CUDA support or no CUDA device is present");
  const int64_t count = static_cast<int64_t>(at::getNumGPUs());
  if (index >= count)
    fail(Code::Device,
         "device \"" + text + "\" is not available: " + std::to_string(count) + " CUDA device(s) present");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

std::vector<int64_t> checked_shape(const int64_t* shape, size_t ndim, const char* what) {
  if (ndim > 64)
    fail(Code::InvalidArgument, std::string(what) + " has " + std::to_string(ndim) + " dims; at most 64 are supported");
  const std::vector<int64_t> out = arg::ints(shape, ndim, what);
  for (size_t i = 0; i < ndim; ++i)
    if (out[i] < 0)
      fail(Code::InvalidArgument,
           std::string(what) + " " + shape_string(out) + " has a negative size at dim " + std::to_string(i));
  checked_numel(out);
  return out;
}

void write_text(const std::string& text, char* buf, size_t capacity, size_t* needed) {
  arg::buffer(buf, capacity);
  if (needed) *needed = text.size() + 1;
  if (capacity == 0) return;
  const size_t n = std::min(capacity - 1, text.size());
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
}

}  // namespace koila
