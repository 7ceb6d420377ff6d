// Conversions of the C API's plain values (dtype enums, device strings, shapes given as
// pointer + count, text buffers) to and from LibTorch's types, with validation.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "koila.h"

namespace koila {

// Takes the argument by reference: an unknown value is refused before it is ever loaded as
// a koila_dtype (Code::InvalidArgument, see args.h).
at::ScalarType to_scalar_type(const koila_dtype& dtype);
koila_dtype to_koila_dtype(at::ScalarType type);  // Code::Dtype when not in the API

// Parses "cpu", "cuda", "cuda:N" and checks that the device is available.
c10::Device parse_device(const char* device);

// A loss's reduction. By reference: an unknown value is refused before it is ever loaded as
// a koila_reduction.
at::Reduction::Reduction to_reduction(const koila_reduction& r);

// Validates a shape given as pointer + count (sizes >= 0, total bytes representable).
std::vector<int64_t> checked_shape(const int64_t* shape, size_t ndim, const char* what);

// Text out: writes at most `capacity` bytes of `text`, NUL-terminated when capacity > 0,
// and sets *needed (when not NULL) to its full length plus one.
void write_text(const std::string& text, char* buf, size_t capacity, size_t* needed);

}  // namespace koila
