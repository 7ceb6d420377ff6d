#include "plan/memo.h"

#include <functional>
#include <list>
#include <unordered_map>

#include "base/error.h"
#include "run/executor.h"

namespace koila {

namespace {

using Key = StructureKey;
using KeyHash = StructureKeyHash;

// What the planner keeps per root while the root lives.
struct RootMemo {
  std::weak_ptr<const Node> root;
  std::unique_ptr<Analysis> analysis[2];  // per mode, made at the first plan
  // Per mode, the part of the structure's key that building fixed: the nodes' own keys
  // (Node::key) and which node feeds which, combined at the graph's first plan; what may
  // change between plans (gradient flags, contiguity, how the .grad stand) is added at each
  // plan, from the concrete nodes listed here.
  // Not a std::once_flag: glibc's call_once makes a futex system call each time it runs a
  // function, and every step's graph has a new root (a system call per plan).
  std::mutex fixed_mutex;
  bool fixed_done[2] = {false, false};
  StructureKey fixed[2];
  std::vector<const Node*> concrete[2];
};

int index_of(RunMode mode) { return mode == RunMode::Training ? 1 : 0; }

std::mutex roots_mutex;
std::unordered_map<const Node*, std::unique_ptr<RootMemo>> roots;
size_t roots_after_sweep = 0;  // entries left by the last sweep of dead roots

// The memo of `root`, made when there is none (or only one of a root that died at the same
// address). Entries of dead roots are swept out as the table doubles.
RootMemo& memo_of(const NodePtr& root) {
  std::lock_guard<std::mutex> lock(roots_mutex);
  std::unique_ptr<RootMemo>& slot = roots[root.get()];
  if (!slot || slot->root.expired()) {
    slot = std::make_unique<RootMemo>();
    slot->root = root;
  }
  RootMemo& memo = *slot;
  if (roots.size() > 2 * roots_after_sweep + 64) {
    for (auto it = roots.begin(); it != roots.end();) it = it->second->root.expired() ? roots.erase(it) : std::next(it);
    roots_after_sweep = roots.size();
  }
  return memo;
}

// What building fixed of the structure (see RootMemo::fixed), and its concrete nodes.
void fixed_part(const Analysis& a, RunMode mode, Key* key, std::vector<const Node*>* concrete) {
  key->add(mode == RunMode::Training ? 1 : 2);
  const Schedule& s = a.whole;  // which node feeds which: the inputs' positions in the order
  concrete->reserve(s.order.size());
  for (size_t i = 0; i < s.order.size(); ++i) {
    const Node* node = s.order[i];
    key->add(node->key);
    for (size_t k = s.input_start[i]; k < s.input_start[i + 1]; ++k)
      key->add(static_cast<uint64_t>(s.inputs[k] + 1));  // 0: an absent optional input
    if (node->kind != NodeKind::Op) concrete->push_back(node);
  }
}

// The structure's key, and `without_grads`: the same without how the .grad stand.
Key structure_key(const NodePtr& root, const Analysis& a, RunMode mode, Key* without_grads, GradStarts* starts) {
  const int m = index_of(mode);
  RootMemo& cache = memo_of(root);
  {
    std::lock_guard<std::mutex> lock(cache.fixed_mutex);
    if (!cache.fixed_done[m]) {
      fixed_part(a, mode, &cache.fixed[m], &cache.concrete[m]);
      cache.fixed_done[m] = true;
    }
  }
  Key key = cache.fixed[m];
  Key& bare = *without_grads;
  bare = key;
  if (starts && mode == RunMode::Training) starts->reserve(cache.concrete[m].size());
  for (const Node* node : cache.concrete[m]) {
    const uint64_t flags = (node->value.requires_grad() ? 3 : 4) * 2 + (node->value.is_contiguous() ? 5 : 6);
    key.add(flags);
    bare.add(flags);
    // How its .grad stands: a backward adds into it, or sets it, or snapshots it.
    if (mode == RunMode::Training)
      key.add(7 + static_cast<uint64_t>(starts ? starts->read(node->value) : grad_start(node->value)));
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

const Analysis& analysis_of(const NodePtr& root, RunMode mode) {
  RootMemo& memo = memo_of(root);
  static std::mutex analysis_mutex;
  std::lock_guard<std::mutex> lock(analysis_mutex);
  std::unique_ptr<Analysis>& slot = memo.analysis[index_of(mode)];
  if (!slot) slot = analyze(root, mode);
  return *slot;
}

std::shared_ptr<GraphRecord> graph_record(const NodePtr& root, const Analysis& a, RunMode mode, GradStarts* starts) {
  Key without_grads;
  const Key key = structure_key(root, a, mode, &without_grads, starts);
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
