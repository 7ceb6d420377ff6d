#include "plan_memo.h"

#include <functional>
#include <list>
#include <unordered_map>

#include "error.h"
#include "executor.h"

namespace koila {

void StructureKey::add(const std::string& s) {
  add(s.size());
  add(static_cast<uint64_t>(std::hash<std::string>{}(s)));
}

namespace {

using Key = StructureKey;

struct KeyHash {
  size_t operator()(const Key& k) const { return static_cast<size_t>(k.a ^ (k.b * 31)); }
};

// What building fixed of the structure (see PlanCache::fixed), and its concrete nodes.
void fixed_part(const Analysis& a, Mode mode, Key* key, std::vector<const Node*>* concrete) {
  key->add(mode == Mode::Training ? 1 : 2);
  const Schedule& s = a.whole;  // which node feeds which: the inputs' positions in the order
  for (size_t i = 0; i < s.order.size(); ++i) {
    const Node* node = s.order[i];
    key->add(static_cast<uint64_t>(node->kind));
    key->add(node->op);
    key->add(node->signature);
    key->add(node->couples);
    key->add(static_cast<uint64_t>(node->reduction));
    const Meta& m = node->meta;
    key->add(m.shape.size());
    for (int64_t d : m.shape) key->add(static_cast<uint64_t>(d));
    key->add(static_cast<uint64_t>(m.dtype));
    key->add(static_cast<uint64_t>(m.device.type()) * 1000 + static_cast<uint64_t>(m.device.index() + 1));
    key->add(static_cast<uint64_t>(m.batch_dim + 1));
    key->add(node->inputs.size());
    for (size_t k = s.input_start[i]; k < s.input_start[i + 1]; ++k)
      key->add(static_cast<uint64_t>(s.inputs[k] + 1));  // 0: an absent optional input
    if (node->kind != NodeKind::Op) concrete->push_back(node);
  }
}

// The structure's key, and `without_grads`: the same without how the .grad stand.
Key structure_key(const NodePtr& root, const Analysis& a, Mode mode, Key* without_grads) {
  const int m = mode == Mode::Training ? 1 : 0;
  PlanCache* cache = root->plan_cache.get();  // made by analysis_of, which gave `a`
  if (!cache) fail(KOILA_ERROR_INTERNAL, "the structure key of a graph that was not analysed");
  std::call_once(cache->fixed_once[m], [&] { fixed_part(a, mode, &cache->fixed[m], &cache->concrete[m]); });
  Key key = cache->fixed[m];
  Key& bare = *without_grads;
  bare = key;
  for (const Node* node : cache->concrete[m]) {
    const uint64_t flags = (node->value.requires_grad() ? 3 : 4) * 2 + (node->value.is_contiguous() ? 5 : 6);
    key.add(flags);
    bare.add(flags);
    // How its .grad stands: a backward adds into it, or sets it, or snapshots it.
    if (mode == Mode::Training) key.add(7 + static_cast<uint64_t>(grad_start(node->value)));
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

std::shared_ptr<GraphRecord> graph_record(const NodePtr& root, const Analysis& a, Mode mode) {
  Key without_grads;
  const Key key = structure_key(root, a, mode, &without_grads);
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
