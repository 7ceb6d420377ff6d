// Conversions between the C API's plain values and LibTorch's types, with validation.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "koila.h"

namespace koila {

// Takes the argument by reference: an unknown value is refused before it is ever loaded as
// a koila_dtype (KOILA_ERROR_INVALID_ARGUMENT, see args.h).
at::ScalarType to_scalar_type(const koila_dtype& dtype);
koila_dtype to_koila_dtype(at::ScalarType type);    // KOILA_ERROR_DTYPE when not in the API
const char* dtype_name(at::ScalarType type);

// Parses "cpu", "cuda", "cuda:N" and checks that the device is available.
c10::Device parse_device(const char* device);

// Validates a shape given as pointer + count (sizes >= 0, total bytes representable).
std::vector<int64_t> checked_shape(const int64_t* shape, size_t ndim, const char* what);
// Element count of a shape, failing on overflow.
uint64_t checked_numel(const std::vector<int64_t>& shape);

// Normalizes a dim of a tensor of rank `rank` (negative counts from the end).
int64_t normalize_dim(int64_t dim, int64_t rank, const char* what);

// "[2, 3]"
std::string shape_string(at::IntArrayRef shape);

// "512 B", "1.5 MiB", "2.0 GiB": bytes for people, in descriptions and messages.
std::string human_bytes(uint64_t bytes);

// Refuses to allocate more than the machine could ever hold, before asking the allocator
// (which on Linux may overcommit and let the process be killed later).
void check_allocation(uint64_t bytes, const c10::Device& device);

// Text out: writes at most `capacity` bytes of `text`, NUL-terminated when capacity > 0,
// and sets *needed (when not NULL) to its full length plus one.
void write_text(const std::string& text, char* buf, size_t capacity, size_t* needed);

}  // namespace koila
