#include "types.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

#include "args.h"
#include "error.h"

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
  fail(KOILA_ERROR_INTERNAL, "koila_dtype without a LibTorch type");
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
  fail(KOILA_ERROR_DTYPE, std::string("dtype ") + c10::toString(type) + " has no koila_dtype");
}

const char* dtype_name(at::ScalarType type) { return c10::toString(type); }

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
  if (index < 0)
    fail(KOILA_ERROR_DEVICE, "unknown device \"" + text + "\" (expected \"cpu\", \"cuda\" or \"cuda:N\")");
  if (!at::hasCUDA())
    fail(KOILA_ERROR_DEVICE, "device \"" + text +
                                 "\" is not available: this LibTorch has no CUDA support or no CUDA device is present");
  const int64_t count = static_cast<int64_t>(at::getNumGPUs());
  if (index >= count)
    fail(KOILA_ERROR_DEVICE, "device \"" + text + "\" is not available: " + std::to_string(count) +
                                 " CUDA device(s) present");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

uint64_t checked_numel(const std::vector<int64_t>& shape) {
  uint64_t numel = 1;
  for (int64_t size : shape) {
    const auto s = static_cast<uint64_t>(size);
    if (s != 0 && numel > (uint64_t{1} << 62) / s)
      fail(KOILA_ERROR_INVALID_ARGUMENT, "shape " + shape_string(shape) + " has too many elements");
    numel *= s;
  }
  return numel;
}

std::vector<int64_t> checked_shape(const int64_t* shape, size_t ndim, const char* what) {
  if (ndim > 64)
    fail(KOILA_ERROR_INVALID_ARGUMENT, std::string(what) + " has " + std::to_string(ndim) +
                                           " dims; at most 64 are supported");
  const std::vector<int64_t> out = arg::ints(shape, ndim, what);
  for (size_t i = 0; i < ndim; ++i)
    if (out[i] < 0)
      fail(KOILA_ERROR_INVALID_ARGUMENT, std::string(what) + " " + shape_string(out) + " has a negative size at dim " +
                                             std::to_string(i));
  checked_numel(out);
  return out;
}

int64_t normalize_dim(int64_t dim, int64_t rank, const char* what) {
  const int64_t lo = rank == 0 ? -1 : -rank, hi = rank == 0 ? 0 : rank - 1;
  if (dim < lo || dim > hi)
    fail(KOILA_ERROR_INVALID_ARGUMENT, std::string(what) + " " + std::to_string(dim) +
                                           " is out of range for a tensor of rank " + std::to_string(rank) +
                                           " (expected " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
  return dim < 0 ? dim + (rank == 0 ? 1 : rank) : dim;
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string shape_string(at::IntArrayRef shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

void check_allocation(uint64_t bytes, const c10::Device& device) {
  if (!device.is_cpu()) return;  // the CUDA allocator fails cleanly by itself
  static const uint64_t physical = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)
                                 : std::numeric_limits<uint64_t>::max();
  }();
  if (bytes > physical)
    fail(KOILA_ERROR_OUT_OF_MEMORY, "a tensor of " + std::to_string(bytes) + " bytes exceeds the " +
                                        std::to_string(physical) + " bytes of memory this machine has");
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
