#include "run/zeroed_grads.h"

#include <mutex>
#include <unordered_map>

namespace koila {
namespace {

// Keyed by the TensorImpl; the weak reference keeps its address from being reused by
// another tensor while the entry lives (it keeps the object's memory, not its data).
struct Entry {
  c10::weak_intrusive_ptr<c10::TensorImpl> impl;
  int64_t version;
};

std::mutex mutex;
std::unordered_map<const c10::TensorImpl*, Entry> zeroed;
size_t prune_at = 1024;

// Under the mutex: drops the entries of tensors that are gone.
void prune() {
  for (auto it = zeroed.begin(); it != zeroed.end();) it = it->second.impl.expired() ? zeroed.erase(it) : std::next(it);
  prune_at = std::max<size_t>(1024, 2 * zeroed.size());
}

}  // namespace

void note_zeroed(const at::Tensor& grad) {
  if (!grad.defined() || !grad.is_leaf() || grad.is_inference()) return;  // (no version counter to trust)
  std::lock_guard<std::mutex> lock(mutex);
  zeroed.insert_or_assign(grad.unsafeGetTensorImpl(),
                          Entry{c10::weak_intrusive_ptr<c10::TensorImpl>(grad.getIntrusivePtr()), grad._version()});
  if (zeroed.size() >= prune_at) prune();
}

bool known_zero(const at::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mutex);
  auto found = zeroed.find(grad.unsafeGetTensorImpl());
  if (found == zeroed.end()) return false;
  if (found->second.impl.expired() || found->second.version != grad._version()) {
    zeroed.erase(found);
    return false;
  }
  return true;
}

}  // namespace koila
