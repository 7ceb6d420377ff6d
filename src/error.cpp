#include "error.h"

#include <c10/util/Exception.h>

#include <new>

namespace koila {

void fail(koila_code code, const std::string& message) { throw Error(code, message); }

koila_status& out_of_memory_status() {
  static koila_status status{KOILA_ERROR_OUT_OF_MEMORY, "koila: out of memory"};
  return status;
}

namespace {

koila_status* make_status(koila_code code, const char* where, const std::string& message) noexcept {
  try {
    return new koila_status{code, std::string(where) + ": " + message};
  } catch (...) {
    // No memory left even to report the error: hand out the preallocated status, which
    // koila_status_free knows not to delete.
    return &out_of_memory_status();
  }
}

bool mentions(const std::string& text, const char* needle) {
  return text.find(needle) != std::string::npos;
}

}  // namespace

bool is_out_of_memory(const std::exception& e, const std::string& text) {
  return dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr || mentions(text, "out of memory") ||
         mentions(text, "can't allocate memory");
}

bool is_out_of_memory(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const FinalError&) {
    return false;
  } catch (const Error& err) {
    return err.code() == KOILA_ERROR_OUT_OF_MEMORY;
  } catch (const c10::OutOfMemoryError&) {
    return true;
  } catch (const std::bad_alloc&) {
    return true;
  } catch (...) {
    return false;
  }
}

namespace {

// Classifies an error raised by LibTorch itself.
koila_code code_of(const c10::Error& e, const std::string& text,
                   koila_code fallback = KOILA_ERROR_INVALID_ARGUMENT) {
  if (is_out_of_memory(e, text)) return KOILA_ERROR_OUT_OF_MEMORY;
  if (dynamic_cast<const c10::TypeError*>(&e) || mentions(text, "not implemented for '") ||
      mentions(text, "dtype") || mentions(text, "scalar type") || mentions(text, "bool tensor") ||
      mentions(text, "Boolean inputs"))
    return KOILA_ERROR_DTYPE;
  if (mentions(text, "CUDA") || mentions(text, "device"))
    return KOILA_ERROR_DEVICE;
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) return KOILA_ERROR_UNSUPPORTED;
  if (dynamic_cast<const c10::IndexError*>(&e) || mentions(text, "out of range"))
    return KOILA_ERROR_INVALID_ARGUMENT;
  return fallback;
}

}  // namespace

void rethrow_torch_error(const std::string& context, koila_code fallback) {
  try {
    throw;
  } catch (const c10::Error& e) {
    std::string text = e.what_without_backtrace();
    fail(code_of(e, text, fallback), context + ": " + text);
  }
}

koila_status* status_from_current_exception(const char* where) noexcept {
  try {
    throw;
  } catch (const Error& e) {
    return make_status(e.code(), where, e.what());
  } catch (const c10::Error& e) {
    std::string text = e.what_without_backtrace();
    return make_status(code_of(e, text), where, text);
  } catch (const std::bad_alloc&) {
    return make_status(KOILA_ERROR_OUT_OF_MEMORY, where, "out of memory");
  } catch (const std::exception& e) {
    return make_status(KOILA_ERROR_INTERNAL, where, e.what());
  } catch (...) {
    return make_status(KOILA_ERROR_INTERNAL, where, "unknown exception");
  }
}

}  // namespace koila

extern "C" {

KOILA_API const char* koila_version(void) { return "0.1.0"; }

KOILA_API koila_code koila_status_code(const koila_status* s) { return s ? s->code : KOILA_OK; }

KOILA_API const char* koila_status_message(const koila_status* s) {
  return s ? s->message.c_str() : "";
}

KOILA_API void koila_status_free(koila_status* s) {
  if (s != &koila::out_of_memory_status()) delete s;
}

}  // extern "C"
