#include "memory/meta_counter.h"

#include <c10/core/Allocator.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "base/error.h"
#include "base/libtorch_compat.h"
#include "memory/accounting.h"
#include "memory/caching_allocator_model.h"
#include "memory/cpu_allocator.h"

namespace koila {

using memory_detail::raise_peak;

namespace {

// ---- Meta: counts what meta tensors would take --------------------------------------------

thread_local std::shared_ptr<MetaAllocationScope::Counter> active_meta_counter;

}  // namespace

struct MetaAllocationScope::Counter {
  std::atomic<uint64_t> current{0};
  std::atomic<uint64_t> peak{0};
  // Windows (timelines only, see record_windows()): under the mutex.
  std::atomic<bool> windows{false};
  std::mutex mutex;
  bool backward = false;  // allocations from now on are the backward's
  uint64_t forward = 0;   // bytes held that the forward allocated
  MetaAllocationScope::Window window;
  // The device's allocator, where modelled (model_allocator): under model_mutex.
  std::mutex model_mutex;
  std::unique_ptr<CachingAllocatorModel> model;
  std::atomic<bool> modelled{false};  // (CPU simulations take no lock)

  uint64_t model_malloc(uint64_t bytes) {
    if (!modelled.load(std::memory_order_relaxed)) return 0;
    std::lock_guard<std::mutex> lock(model_mutex);
    return model->malloc(bytes);
  }
  void model_free(uint64_t handle) {
    if (handle == 0) return;
    std::lock_guard<std::mutex> lock(model_mutex);
    model->free(handle);
  }

  // Returns whether the allocation counts as the forward's.
  bool add(uint64_t bytes) {
    const uint64_t now = current.fetch_add(bytes) + bytes;
    raise_peak(peak, now);
    if (!windows.load()) return false;
    std::lock_guard<std::mutex> lock(mutex);
    if (!backward) forward += bytes;
    if (now >= window.peak) {
      window.peak = now;
      window.forward_at_peak = forward;
    }
    return !backward;
  }
  void remove(uint64_t bytes, bool was_forward) {
    current.fetch_sub(bytes);
    if (!was_forward) return;
    std::lock_guard<std::mutex> lock(mutex);
    forward -= bytes;
  }
};

namespace {

struct MetaRecord {
  uint64_t bytes;
  bool forward;
  std::shared_ptr<MetaAllocationScope::Counter> counter;
  uint64_t model_handle;  // in the counter's allocator model (0: none)
};

void meta_delete(void* context) {
  auto* record = static_cast<MetaRecord*>(context);
  if (record == nullptr) return;
  record->counter->remove(record->bytes, record->forward);
  record->counter->model_free(record->model_handle);
  delete record;
}

class TrackingMetaAllocator final : public compat::Allocator {
 public:
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

 protected:
  c10::DataPtr make(size_t bytes) const override {
    const c10::Device device(c10::kMeta);
    const auto& counter = active_meta_counter;
    if (!counter || bytes == 0) return {nullptr, nullptr, &meta_delete, device};
    const bool forward = counter->add(bytes);
    const uint64_t handle = counter->model_malloc(bytes);
    return {nullptr, new MetaRecord{bytes, forward, counter, handle}, &meta_delete, device};
  }
};

TrackingMetaAllocator tracking_meta_allocator;

}  // namespace

void memory_detail::install_meta_allocator() {
  c10::SetAllocator(c10::kMeta, &tracking_meta_allocator, /*priority=*/100);
}

MetaAllocationScope::MetaAllocationScope() : counter_(std::make_shared<Counter>()) {
  ensure_memory_tracking();
  if (active_meta_counter) fail(Code::Internal, "nested meta allocation scopes");
  active_meta_counter = counter_;
}

MetaAllocationScope::~MetaAllocationScope() { active_meta_counter.reset(); }

uint64_t MetaAllocationScope::current() const { return counter_->current.load(); }
uint64_t MetaAllocationScope::peak() const { return counter_->peak.load(); }
void MetaAllocationScope::add_temporary(uint64_t bytes) {
  counter_->remove(bytes, counter_->add(bytes));
  counter_->model_free(counter_->model_malloc(bytes));
}

void MetaAllocationScope::model_allocator(bool expandable) {
  std::lock_guard<std::mutex> lock(counter_->model_mutex);
  counter_->model = std::make_unique<CachingAllocatorModel>(expandable);
  counter_->modelled.store(true);
}

uint64_t MetaAllocationScope::allocator_needed_peak() const {
  std::lock_guard<std::mutex> lock(counter_->model_mutex);
  return counter_->model ? counter_->model->needed_peak() : 0;
}

void MetaAllocationScope::record_windows() {
  Counter& c = *counter_;
  std::lock_guard<std::mutex> lock(c.mutex);
  c.windows.store(true);
  c.window = Window{c.current.load(), c.current.load(), c.forward};
}

void MetaAllocationScope::set_backward(bool backward) {
  std::lock_guard<std::mutex> lock(counter_->mutex);
  counter_->backward = backward;
}

MetaAllocationScope::Window MetaAllocationScope::take_window() {
  Counter& c = *counter_;
  std::lock_guard<std::mutex> lock(c.mutex);
  Window w = c.window;
  w.live = c.current.load();
  c.window = Window{w.live, w.live, c.forward};
  return w;
}

}  // namespace koila
