#include "run/zeroed_grads.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "base/pointer_index.h"

namespace koila {
namespace {

// Keyed by the TensorImpl; the weak reference keeps its address from being reused by
// another tensor while the entry lives (it keeps the object's memory, not its data).
struct Entry {
  const c10::TensorImpl* key;
  c10::weak_intrusive_ptr<c10::TensorImpl> impl;
  int64_t version;  // -1: written since, not known to be zero
};

// One flat index and one array, not a hash map with a node per tensor: a training loop
// notes and looks up every parameter's .grad each step, and a thousand scattered map nodes
// missed the cache on each (perf: a third of koila's own time zeroing gradients).
std::mutex mutex;
PointerIndex<c10::TensorImpl> index(1024);  // key -> position in entries
std::vector<Entry> entries;
size_t prune_at = 1024;

// Under the mutex: drops the entries of tensors that are gone or were written since.
void prune() {
  std::vector<Entry> kept;
  for (Entry& e : entries)
    if (e.version >= 0 && !e.impl.expired()) kept.push_back(std::move(e));
  entries.swap(kept);
  index = PointerIndex<c10::TensorImpl>(std::max<size_t>(1024, entries.size()));
  for (size_t i = 0; i < entries.size(); ++i) index.insert(entries[i].key, static_cast<uint32_t>(i));
  prune_at = std::max<size_t>(1024, 2 * entries.size());
}

}  // namespace

void note_zeroed(const at::Tensor& grad) {
  if (!grad.defined() || !grad.is_leaf() || grad.is_inference()) return;  // (no version counter to trust)
  const c10::TensorImpl* key = grad.unsafeGetTensorImpl();
  std::lock_guard<std::mutex> lock(mutex);
  const uint32_t found = index.find(key);
  if (found != PointerIndex<c10::TensorImpl>::kAbsent) {
    entries[found].version = grad._version();  // the same TensorImpl: its weak reference stays
    return;
  }
  if (entries.size() >= prune_at) prune();
  index.insert(key, static_cast<uint32_t>(entries.size()));
  entries.push_back(Entry{key, c10::weak_intrusive_ptr<c10::TensorImpl>(grad.getIntrusivePtr()), grad._version()});
}

bool known_zero(const at::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mutex);
  const uint32_t found = index.find(grad.unsafeGetTensorImpl());
  if (found == PointerIndex<c10::TensorImpl>::kAbsent) return false;
  Entry& e = entries[found];
  if (e.version < 0 || e.impl.expired() || e.version != grad._version()) {
    e.version = -1;
    return false;
  }
  return true;
}

}  // namespace koila
