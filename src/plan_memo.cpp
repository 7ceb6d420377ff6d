#include "plan_memo.h"

#include <functional>
#include <list>
#include <unordered_map>

#include "executor.h"

namespace koila {
namespace {

// Two independent 64-bit hashes of the structure: a collision of both is not a practical
// concern, and the text itself (tens of bytes a node) is not kept. Strings (ops, signatures)
// enter as their length and std::hash, so two strings of one length that std::hash maps to
// one value would look alike to both: a chance of 2^-64 a pair.
struct Key {
  uint64_t a = 1469598103934665603ull, b = 0x9e3779b97f4a7c15ull;
  void add(uint64_t v) {
    a = (a ^ v) * 1099511628211ull;
    b ^= v + 0x9e3779b97f4a7c15ull + (b << 6) + (b >> 2);
  }
  void add(const std::string& s) {
    add(s.size());
    add(static_cast<uint64_t>(std::hash<std::string>{}(s)));
  }
  bool operator==(const Key& o) const { return a == o.a && b == o.b; }
};

struct KeyHash {
  size_t operator()(const Key& k) const { return static_cast<size_t>(k.a ^ (k.b * 31)); }
};

// The structure's key, and `without_grads`: the same without how the .grad stand.
Key structure_key(const Analysis& a, Mode mode, Key* without_grads) {
  Key key;
  Key& bare = *without_grads;
  auto add = [&](const auto& v) {
    key.add(v);
    bare.add(v);
  };
  add(mode == Mode::Training ? 1 : 2);
  std::unordered_map<const Node*, uint64_t> position;
  position.reserve(a.nodes.size());
  for (const Node* node : a.nodes) {
    position.emplace(node, position.size());
    add(static_cast<uint64_t>(node->kind));
    add(node->op);
    add(node->signature);
    add(node->couples);
    add(static_cast<uint64_t>(node->reduction));
    const Meta& m = node->meta;
    add(m.shape.size());
    for (int64_t d : m.shape) add(static_cast<uint64_t>(d));
    add(static_cast<uint64_t>(m.dtype));
    add(static_cast<uint64_t>(m.device.type()) * 1000 + static_cast<uint64_t>(m.device.index() + 1));
    add(static_cast<uint64_t>(m.batch_dim + 1));
    if (node->kind != NodeKind::Op) {
      add(node->value.requires_grad() ? 3 : 4);
      add(node->value.is_contiguous() ? 5 : 6);
      // How its .grad stands: a backward adds into it, or sets it, or snapshots it.
      if (mode == Mode::Training) key.add(7 + static_cast<uint64_t>(grad_start(node->value)));
    }
    add(node->inputs.size());
    for (const NodePtr& in : node->inputs) add(in ? position.at(in.get()) + 1 : 0);
  }
  return key;
}

std::mutex records_mutex;
// Most recently used first.
std::list<std::pair<Key, std::shared_ptr<GraphRecord>>> records;
std::unordered_map<Key, decltype(records)::iterator, KeyHash> by_key;
// Keyed without the .grad states; an entry lives as long as a record holds it.
std::unordered_map<Key, std::weak_ptr<Calibration>, KeyHash> calibrations;

std::shared_ptr<Calibration> calibration_for(const Key& without_grads) {
  std::weak_ptr<Calibration>& slot = calibrations[without_grads];
  std::shared_ptr<Calibration> c = slot.lock();
  if (!c) {
    c = std::make_shared<Calibration>();
    slot = c;
  }
  return c;
}

}  // namespace

std::shared_ptr<GraphRecord> graph_record(const NodePtr&, const Analysis& a, Mode mode) {
  Key without_grads;
  const Key key = structure_key(a, mode, &without_grads);
  std::lock_guard<std::mutex> lock(records_mutex);
  auto found = by_key.find(key);
  if (found != by_key.end()) {
    records.splice(records.begin(), records, found->second);
    return found->second->second;
  }
  auto record = std::make_shared<GraphRecord>();
  record->calibration = calibration_for(without_grads);
  records.emplace_front(key, record);
  by_key.emplace(key, records.begin());
  if (records.size() > kMaxRecords) {
    by_key.erase(records.back().first);
    records.pop_back();
    for (auto it = calibrations.begin(); it != calibrations.end();)  // those no record holds
      it = it->second.expired() ? calibrations.erase(it) : std::next(it);
  }
  return record;
}

namespace testing {
void forget_graph_records() {
  std::lock_guard<std::mutex> lock(records_mutex);
  by_key.clear();
  records.clear();
  calibrations.clear();
}
}  // namespace testing

}  // namespace koila
