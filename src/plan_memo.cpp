#include "plan_memo.h"

#include <list>
#include <unordered_map>

#include "executor.h"

namespace koila {
namespace {

// Two independent 64-bit hashes of the structure's text: a collision of both is not a
// practical concern, and the text itself (tens of bytes a node) is not kept.
struct Key {
  uint64_t a = 1469598103934665603ull, b = 0x9e3779b97f4a7c15ull;
  void add(uint64_t v) {
    a = (a ^ v) * 1099511628211ull;
    b ^= v + 0x9e3779b97f4a7c15ull + (b << 6) + (b >> 2);
  }
  void add(const std::string& s) {
    add(s.size());
    for (unsigned char c : s) add(c);
  }
  bool operator==(const Key& o) const { return a == o.a && b == o.b; }
};

struct KeyHash {
  size_t operator()(const Key& k) const { return static_cast<size_t>(k.a ^ (k.b * 31)); }
};

Key structure_key(const Analysis& a, Mode mode) {
  Key key;
  key.add(mode == Mode::Training ? 1 : 2);
  std::unordered_map<const Node*, uint64_t> position;
  position.reserve(a.nodes.size());
  for (const Node* node : a.nodes) {
    position.emplace(node, position.size());
    key.add(static_cast<uint64_t>(node->kind));
    key.add(node->op);
    key.add(node->signature);
    key.add(node->couples);
    key.add(static_cast<uint64_t>(node->reduction));
    const Meta& m = node->meta;
    key.add(m.shape.size());
    for (int64_t d : m.shape) key.add(static_cast<uint64_t>(d));
    key.add(static_cast<uint64_t>(m.dtype));
    key.add(static_cast<uint64_t>(m.device.type()) * 1000 + static_cast<uint64_t>(m.device.index() + 1));
    key.add(static_cast<uint64_t>(m.batch_dim + 1));
    if (node->kind != NodeKind::Op) {
      key.add(node->value.requires_grad() ? 3 : 4);
      key.add(node->value.is_contiguous() ? 5 : 6);
      // How its .grad stands: a backward adds into it, or sets it, or snapshots it.
      if (mode == Mode::Training) key.add(7 + static_cast<uint64_t>(grad_start(node->value)));
    }
    key.add(node->inputs.size());
    for (const NodePtr& in : node->inputs) key.add(in ? position.at(in.get()) + 1 : 0);
  }
  return key;
}

std::mutex records_mutex;
// Most recently used first.
std::list<std::pair<Key, std::shared_ptr<GraphRecord>>> records;
std::unordered_map<Key, decltype(records)::iterator, KeyHash> by_key;

}  // namespace

std::shared_ptr<GraphRecord> graph_record(const NodePtr&, const Analysis& a, Mode mode) {
  const Key key = structure_key(a, mode);
  std::lock_guard<std::mutex> lock(records_mutex);
  auto found = by_key.find(key);
  if (found != by_key.end()) {
    records.splice(records.begin(), records, found->second);
    return found->second->second;
  }
  records.emplace_front(key, std::make_shared<GraphRecord>());
  by_key.emplace(key, records.begin());
  if (records.size() > kMaxRecords) {
    by_key.erase(records.back().first);
    records.pop_back();
  }
  return records.front().second;
}

namespace testing {
void forget_graph_records() {
  std::lock_guard<std::mutex> lock(records_mutex);
  by_key.clear();
  records.clear();
}
}  // namespace testing

}  // namespace koila
