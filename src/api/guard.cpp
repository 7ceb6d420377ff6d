#include "api/guard.h"

namespace koila {

koila_code to_koila_code(Code code) {
  switch (code) {
    case Code::Ok: return KOILA_OK;
    case Code::InvalidArgument: return KOILA_ERROR_INVALID_ARGUMENT;
    case Code::Shape: return KOILA_ERROR_SHAPE;
    case Code::Dtype: return KOILA_ERROR_DTYPE;
    case Code::Device: return KOILA_ERROR_DEVICE;
    case Code::OutOfMemory: return KOILA_ERROR_OUT_OF_MEMORY;
    case Code::NotSplittable: return KOILA_ERROR_NOT_SPLITTABLE;
    case Code::Io: return KOILA_ERROR_IO;
    case Code::Unsupported: return KOILA_ERROR_UNSUPPORTED;
    case Code::Internal: return KOILA_ERROR_INTERNAL;
  }
  return KOILA_ERROR_INTERNAL;  // a value outside the enum: a bug, reported as one
}

koila_status& out_of_memory_status() {
  static koila_status status{KOILA_ERROR_OUT_OF_MEMORY, "koila: out of memory"};
  return status;
}

koila_status* status_from_current_exception(const char* where) noexcept {
  try {
    const Complaint c = complaint_from_current_exception();
    return new koila_status{to_koila_code(c.code), std::string(where) + ": " + c.message};
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
