// Text helpers of the koila command's reports: byte sizes for people, and a small JSON
// writer (objects, arrays, strings escaped as RFC 8259 says).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace koila_cli {

// "58.1 MiB", "512 B".
std::string human_bytes(uint64_t bytes);

class Json {
 public:
  Json& begin_object(const char* key = nullptr);
  Json& end_object();
  Json& begin_array(const char* key = nullptr);
  Json& end_array();
  Json& field(const char* key, const std::string& value);
  Json& field(const char* key, const char* value) { return field(key, std::string(value)); }
  Json& field(const char* key, int64_t value);
  Json& field(const char* key, uint64_t value);
  Json& field(const char* key, int value) { return field(key, static_cast<int64_t>(value)); }
  Json& field(const char* key, bool value);
  Json& field(const char* key, double value);
  Json& null_field(const char* key);
  std::string str() const { return out_ + "\n"; }

 private:
  void key(const char* k);
  Json& open(const char* k, char bracket);  // a value that holds others: { or [
  Json& close(char bracket);
  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
};

}  // namespace koila_cli
