#include "api/args.h"

#include "api/tensor_handle.h"

namespace koila::arg {

void not_null(const void* p, const char* name) {
  if (p == nullptr) fail(Code::InvalidArgument, std::string("argument '") + name + "' is NULL");
}

bool flag(int value, const char* name) {
  if (value != 0 && value != 1)
    fail(Code::InvalidArgument, std::string(name) + " must be 0 or 1, got " + std::to_string(value));
  return value == 1;
}

int enum_value(int value, const char* name, const char* type_name, int lo, int hi) {
  if (value < lo || value > hi)
    fail(Code::InvalidArgument, "unknown " + std::string(type_name) + " " + std::to_string(value) + " for argument '" +
                                    name + "' (expected " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
  return value;
}

std::vector<int64_t> ints(const int64_t* p, size_t n, const char* name) {
  if (n > 0 && p == nullptr)
    fail(Code::InvalidArgument, std::string("argument '") + name + "' is NULL but its count is " + std::to_string(n));
  return n > 0 ? std::vector<int64_t>(p, p + n) : std::vector<int64_t>{};
}

std::vector<int64_t> ints_or(const int64_t* p, size_t n, int64_t fallback) {
  return p ? std::vector<int64_t>(p, p + n) : std::vector<int64_t>(n, fallback);
}

std::vector<NodePtr> tensors(koila_tensor* const* ts, size_t n, const char* name, bool may_be_empty) {
  if (n == 0 && !may_be_empty)
    fail(Code::InvalidArgument, std::string("the list '") + name + "' is empty (its count is 0)");
  if (n > 0) not_null(ts, name);
  std::vector<NodePtr> nodes;
  nodes.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string what = std::string(name) + "[" + std::to_string(i) + "]";
    nodes.push_back(node_of(ts[i], what.c_str()));
  }
  return nodes;
}

void buffer(const char* buf, size_t capacity, const char* name) {
  if (capacity > 0 && buf == nullptr)
    fail(Code::InvalidArgument,
         std::string("argument '") + name + "' is NULL but capacity is " + std::to_string(capacity));
}

}  // namespace koila::arg
