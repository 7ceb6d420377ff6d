#include "api/guard.h"

namespace koila {

koila_status& out_of_memory_status() {
  static koila_status status{KOILA_ERROR_OUT_OF_MEMORY, "koila: out of memory"};
  return status;
}

koila_status* status_from_current_exception(const char* where) noexcept {
  try {
    const Complaint c = complaint_from_current_exception();
    return new koila_status{c.code, std::string(where) + ": " + c.message};
  } catch (...) {
    // No memory left even to report the error: hand out the preallocated status, which
    // koila_status_free knows not to delete.
    return &out_of_memory_status();
  }
}

}  // namespace koila

extern "C" {

KOILA_API const char* koila_version(void) { return "0.1.0"; }

KOILA_API koila_code koila_status_code(const koila_status* s) { return s ? s->code : KOILA_OK; }

KOILA_API const char* koila_status_message(const koila_status* s) { return s ? s->message.c_str() : ""; }

KOILA_API void koila_status_free(koila_status* s) {
  if (s != &koila::out_of_memory_status()) delete s;
}

}  // extern "C"
