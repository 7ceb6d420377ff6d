#include "capi.h"

namespace koila_cli {

std::string first_line(const std::string& text) {
  size_t start = text.find_first_not_of(" \n");
  if (start == std::string::npos) return "";
  std::string line = text.substr(start, text.find('\n', start) - start);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

void check(koila_status* s, const std::string& context) {
  if (!s) return;
  const std::string message = first_line(koila_status_message(s));
  koila_status_free(s);
  throw CliError(context + ": " + message);
}

size_t element_size(koila_dtype dtype) {
  switch (dtype) {
    case KOILA_FLOAT64:
    case KOILA_INT64: return 8;
    case KOILA_FLOAT32:
    case KOILA_INT32: return 4;
    case KOILA_FLOAT16:
    case KOILA_BFLOAT16: return 2;
    case KOILA_INT8:
    case KOILA_UINT8:
    case KOILA_BOOL: return 1;
  }
  return 0;
}

}  // namespace koila_cli
