#include "run/progress.h"

#include <mutex>

namespace koila {
namespace {

std::mutex progress_mutex;
ProgressFn progress_fn = nullptr;
void* progress_user = nullptr;
thread_local bool inside_callback = false;

}  // namespace

void set_progress(ProgressFn fn, void* user) {
  std::lock_guard<std::mutex> lock(progress_mutex);
  progress_fn = fn;
  progress_user = fn ? user : nullptr;
}

void report_progress(const char* what, int64_t done, int64_t total) {
  if (inside_callback) return;
  ProgressFn fn;
  void* user;
  {
    std::lock_guard<std::mutex> lock(progress_mutex);
    fn = progress_fn;
    user = progress_user;
  }
  if (!fn) return;
  struct Inside {
    Inside() { inside_callback = true; }
    ~Inside() { inside_callback = false; }
  } inside;
  fn(user, what, done, total);
}

bool in_progress_callback() { return inside_callback; }

}  // namespace koila
