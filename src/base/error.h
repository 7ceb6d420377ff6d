// Errors: koila::Error carries a Code; every stage throws it (through fail()), and the
// C boundary (api/guard.h) turns it, and anything LibTorch or the C++ runtime throws, into a
// koila_status, converting the Code into the C API's koila_code there.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace koila {

// What went wrong, as the C API reports it: api/guard.cpp converts each to the koila_code of the
// same name (KOILA_OK, KOILA_ERROR_INVALID_ARGUMENT, ...), in a switch over every value.
enum class Code : int {
  Ok,
  InvalidArgument,  // a NULL handle, a bad dim or size, ...
  Shape,            // shapes that do not fit the op
  Dtype,
  Device,         // an unknown or unavailable device
  OutOfMemory,    // not even a chunk of one sample fits the budget
  NotSplittable,  // the graph mixes samples across the batch and does not fit unsplit
  Io,             // a file missing, unreadable or corrupt
  Unsupported,
  Internal,
};

class Error : public std::runtime_error {
 public:
  Error(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

// An error that a planned run must not retry with a smaller chunk, whatever its code: it
// arose after the run's work was shared with other processes (a process group's
// collectives, group.h), which a retry would repeat out of step with them.
class FinalError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void fail(Code code, const std::string& message);

// Inside a catch block for a LibTorch error: throws it again as a koila::Error whose
// message starts with `context`. Errors LibTorch does not classify get `fallback`.
[[noreturn]] void rethrow_torch_error(const std::string& context, Code fallback);

// Whether a LibTorch error (or the TorchScript interpreter's wrapping of one, whose `text`
// keeps the message) says the device ran out of memory.
bool is_out_of_memory(const std::exception& e, const std::string& text);
// Whether an exception in flight (koila's, LibTorch's or the C++ runtime's) is an
// out-of-memory error.
bool is_out_of_memory(const std::exception_ptr& e);

// The code and message of the exception in flight (koila's, LibTorch's, the C++ runtime's
// or anything else): what a status reports. Allocates the message; may throw bad_alloc.
struct Complaint {
  Code code = Code::Internal;
  std::string message;
};
Complaint complaint_from_current_exception();

// The text LibTorch or the TorchScript interpreter gives for an exception, without
// backtraces, reduced to the error itself when the interpreter wrapped it in a traceback.
std::string torch_complaint(const std::exception& e);

}  // namespace koila
