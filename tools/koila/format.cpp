#include "format.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace koila_cli {

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

namespace {
std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': q += "\\\""; break;
      case '\\': q += "\\\\"; break;
      case '\n': q += "\\n"; break;
      case '\t': q += "\\t"; break;
      case '\r': q += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          q += buf;
        } else {
          q += static_cast<char>(c);
        }
    }
  }
  return q + "\"";
}
}  // namespace

void Json::key(const char* k) {
  if (!first_.empty()) {
    if (!first_.back()) out_ += ",";
    first_.back() = false;
    out_ += "\n" + std::string(2 * first_.size(), ' ');
  }
  if (k) out_ += quoted(k) + ": ";
}

Json& Json::open(const char* k, char bracket) {
  key(k);
  out_ += bracket;
  first_.push_back(true);
  return *this;
}

Json& Json::close(char bracket) {
  const bool empty = first_.back();
  first_.pop_back();
  if (!empty) out_ += "\n" + std::string(2 * first_.size(), ' ');
  out_ += bracket;
  return *this;
}

Json& Json::begin_object(const char* k) { return open(k, '{'); }
Json& Json::end_object() { return close('}'); }
Json& Json::begin_array(const char* k) { return open(k, '['); }
Json& Json::end_array() { return close(']'); }

Json& Json::field(const char* k, const std::string& value) {
  key(k);
  out_ += quoted(value);
  return *this;
}

Json& Json::field(const char* k, int64_t value) {
  key(k);
  out_ += std::to_string(value);
  return *this;
}

Json& Json::field(const char* k, uint64_t value) {
  key(k);
  out_ += std::to_string(value);
  return *this;
}

Json& Json::field(const char* k, bool value) {
  key(k);
  out_ += value ? "true" : "false";
  return *this;
}

Json& Json::field(const char* k, double value) {
  key(k);
  if (!std::isfinite(value)) {
    out_ += "null";
    return *this;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  out_ += buf;
  return *this;
}

Json& Json::null_field(const char* k) {
  key(k);
  out_ += "null";
  return *this;
}

}  // namespace koila_cli
