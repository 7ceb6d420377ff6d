// Text for people: shapes, dtypes and byte counts as descriptions and messages show them.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace koila {

// "float", "long": LibTorch's name of a dtype.
const char* dtype_name(at::ScalarType type);

// "[2, 3]"
std::string shape_string(at::IntArrayRef shape);

// "512 B", "1.5 MiB", "2.0 GiB".
std::string human_bytes(uint64_t bytes);

}  // namespace koila
