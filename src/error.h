// The C boundary: koila::Error carries a koila_code; guard() turns every exception into a
// koila_status so that nothing C++ ever crosses into C. Every exported function uses it.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "koila.h"

struct koila_status {
  koila_code code;
  std::string message;
};

namespace koila {

class Error : public std::runtime_error {
 public:
  Error(koila_code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  koila_code code() const { return code_; }

 private:
  koila_code code_;
};

// An error that a planned run must not retry with a smaller chunk, whatever its code: it
// arose after the run's work was shared with other processes (a process group's
// collectives, group.h), which a retry would repeat out of step with them.
class FinalError : public Error {
 public:
  using Error::Error;
};

// The status handed out when even allocating a status fails; never deleted.
koila_status& out_of_memory_status();

[[noreturn]] void fail(koila_code code, const std::string& message);

// Inside a catch block for a LibTorch error: throws it again as a koila::Error whose
// message starts with `context`. Errors LibTorch does not classify get `fallback`.
[[noreturn]] void rethrow_torch_error(const std::string& context, koila_code fallback);

// Whether a LibTorch error (or the TorchScript interpreter's wrapping of one, whose `text`
// keeps the message) says the device ran out of memory.
bool is_out_of_memory(const std::exception& e, const std::string& text);
// Whether an exception in flight (koila's, LibTorch's or the C++ runtime's) is an
// out-of-memory error.
bool is_out_of_memory(const std::exception_ptr& e);

// Maps the exception in flight to a status whose message starts with `where`.
koila_status* status_from_current_exception(const char* where) noexcept;

template <class F>
koila_status* guard(const char* where, F&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (...) {
    return status_from_current_exception(where);
  }
}

}  // namespace koila
