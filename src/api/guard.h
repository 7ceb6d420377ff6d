// The one firewall at the C boundary: guard() runs an entry point's body and turns every
// exception into a koila_status, so that nothing C++ ever crosses into C. Every exported
// function uses it.
#pragma once

#include <string>
#include <utility>

#include "base/error.h"
#include "koila.h"

struct koila_status {
  koila_code code;
  std::string message;
};

namespace koila {

// The C API's code for an engine's Code.
koila_code to_koila_code(Code code);

// The status handed out when even allocating a status fails; never deleted.
koila_status& out_of_memory_status();

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
