// Two independent 64-bit hashes of a structure (a graph node's, a whole graph's): a
// collision of both is not a practical concern, and the text itself (tens of bytes a node)
// is not kept. Strings (ops, signatures) enter as their length and std::hash, so two strings
// of one length that std::hash maps to one value would look alike to both: a chance of
// 2^-64 a pair.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace koila {

struct StructureKey {
  uint64_t a = 1469598103934665603ull, b = 0x9e3779b97f4a7c15ull;
  void add(uint64_t v) {
    a = (a ^ v) * 1099511628211ull;
    b ^= v + 0x9e3779b97f4a7c15ull + (b << 6) + (b >> 2);
  }
  void add(const std::string& s) {
    add(s.size());
    add(static_cast<uint64_t>(std::hash<std::string>{}(s)));
  }
  void add(const StructureKey& k) {
    add(k.a);
    add(k.b);
  }
  bool operator==(const StructureKey& o) const { return a == o.a && b == o.b; }
};

// For hash maps keyed by a StructureKey.
struct StructureKeyHash {
  size_t operator()(const StructureKey& k) const { return static_cast<size_t>(k.a ^ (k.b * 31)); }
};

}  // namespace koila
