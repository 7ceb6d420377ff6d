// Argument checks for the C entry points, written once. Every exported function validates
// what a C, Rust, Java or Julia caller handed it through these helpers, inside guard()
// (error.h), so a bad argument becomes a status whose message names the argument, never a
// crash. The rules, as koila.h states them:
//   - handles and required arrays are not NULL (an array may be NULL when its count is 0);
//   - `out` is set to NULL on entry, so after any failure it is NULL;
//   - flags are strictly 0 or 1;
//   - enums arrive as any int and are range-checked before they are used as the enum.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "api/guard.h"
#include "base/error.h"
#include "graph/graph.h"

namespace koila::arg {

// Fails with Code::InvalidArgument "argument 'name' is NULL".
void not_null(const void* p, const char* name);

// Checks an output pointer and clears what it points to.
template <class T>
void out(T** out, const char* name = "out") {
  not_null(out, name);
  *out = nullptr;
}

// A handle of any kind other than a tensor (module, optimizer, plan): not NULL.
template <class H>
H& handle(H* h, const char* name) {
  not_null(h, name);
  return *h;
}

// A flag: 0 or 1, anything else is refused (a garbage int from a binding is a mistake,
// not "true").
bool flag(int value, const char* name);

// An int that must lie in [lo, hi] to be a value of enum `type_name`.
int enum_value(int value, const char* name, const char* type_name, int lo, int hi);

// An enum argument, read as the int it was passed as. Loading an enum object that holds a
// value outside its enumerators is undefined behaviour in C++, and C, Java and Julia
// callers can pass any int, so the storage is copied out as an int and checked first.
template <class E>
E enumeration(const E& value, const char* name, const char* type_name, int lo, int hi) {
  static_assert(std::is_enum<E>::value && sizeof(E) == sizeof(int), "a C enum passed as int");
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return static_cast<E>(enum_value(raw, name, type_name, lo, hi));
}

// A required int array of `n` entries (NULL only when n is 0).
std::vector<int64_t> ints(const int64_t* p, size_t n, const char* name);

// An optional fixed-length int array: NULL takes `fallback` n times.
std::vector<int64_t> ints_or(const int64_t* p, size_t n, int64_t fallback);

// A required list of `n` tensor handles, none NULL; at least one unless `may_be_empty`.
std::vector<NodePtr> tensors(koila_tensor* const* ts, size_t n, const char* name, bool may_be_empty = false);

// A text output buffer: NULL only when capacity is 0.
void buffer(const char* buf, size_t capacity, const char* name = "buf");

}  // namespace koila::arg
