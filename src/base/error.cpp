#include "base/error.h"

#include <c10/util/Exception.h>

#include <new>

namespace koila {

void fail(Code code, const std::string& message) { throw Error(code, message); }

namespace {

bool mentions(const std::string& text, const char* needle) { return text.find(needle) != std::string::npos; }

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
    return err.code() == Code::OutOfMemory;
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
Code code_of(const c10::Error& e, const std::string& text, Code fallback = Code::InvalidArgument) {
  if (is_out_of_memory(e, text)) return Code::OutOfMemory;
  if (dynamic_cast<const c10::TypeError*>(&e) || mentions(text, "not implemented for '") || mentions(text, "dtype") ||
      mentions(text, "scalar type") || mentions(text, "bool tensor") || mentions(text, "Boolean inputs"))
    return Code::Dtype;
  if (mentions(text, "CUDA") || mentions(text, "device")) return Code::Device;
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) return Code::Unsupported;
  if (dynamic_cast<const c10::IndexError*>(&e) || mentions(text, "out of range")) return Code::InvalidArgument;
  return fallback;
}

}  // namespace

void rethrow_torch_error(const std::string& context, Code fallback) {
  try {
    throw;
  } catch (const c10::Error& e) {
    std::string text = e.what_without_backtrace();
    fail(code_of(e, text, fallback), context + ": " + text);
  }
}

Complaint complaint_from_current_exception() {
  try {
    throw;
  } catch (const Error& e) {
    return {e.code(), e.what()};
  } catch (const c10::Error& e) {
    std::string text = e.what_without_backtrace();
    return {code_of(e, text), text};
  } catch (const std::bad_alloc&) {
    return {Code::OutOfMemory, "out of memory"};
  } catch (const std::exception& e) {
    return {Code::Internal, e.what()};
  } catch (...) {
    return {Code::Internal, "unknown exception"};
  }
}

std::string torch_complaint(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  const size_t raised = text.find("\nException raised from");
  if (raised != std::string::npos) text.erase(raised);
  // "Could not run 'aten::roll' with arguments from the 'Meta' backend. This could be
  // because ..." and a list of every dispatch key: the first sentence says it.
  const size_t because = text.find(". This could be because the operator doesn't exist");
  if (because != std::string::npos) text.erase(because + 1);
  const std::string marker = "<--- HERE\n";
  const size_t here = text.rfind(marker);
  if (here != std::string::npos) {
    text.erase(0, here + marker.size());
    // Source lines of the innermost frame may follow the marker; the error is the first
    // line that names one ("RuntimeError: ...").
    size_t line = 0;
    while (line < text.size()) {
      const size_t end = text.find('\n', line);
      const std::string head = text.substr(line, end == std::string::npos ? std::string::npos : end - line);
      const size_t colon = head.find(": ");
      const std::string name = colon == std::string::npos ? std::string() : head.substr(0, colon);
      const bool names_error = !name.empty() && name.find(' ') == std::string::npos &&
                               (name.size() >= 5 && (name.compare(name.size() - 5, 5, "Error") == 0 ||
                                                     name.find("Exception") != std::string::npos));
      if (names_error) {
        text.erase(0, line);
        break;
      }
      if (end == std::string::npos) break;
      line = end + 1;
    }
  }
  const size_t start = text.find_first_not_of(" \n");
  text = start == std::string::npos ? std::string() : text.substr(start);
  for (const char* prefix : {"RuntimeError: ", "Exception: ", "builtins.RuntimeError: "})
    if (text.rfind(prefix, 0) == 0) text.erase(0, std::string(prefix).size());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace koila
