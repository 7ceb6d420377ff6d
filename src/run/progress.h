// The progress callback (koila_set_progress): one global setting, reported to by the observer
// real planned runs carry (ProgressReport) after each chunk. Simulations and probes never
// report.
#pragma once

#include <cstdint>

#include "run/observer.h"

namespace koila {

// A progress callback: koila.h's koila_progress_fn.
using ProgressFn = void (*)(void* user, const char* what, int64_t done, int64_t total);

// NULL fn turns reporting off. Thread-safe.
void set_progress(ProgressFn fn, void* user);

// Calls the callback in force, if any, on this thread: `what` is "forward" or "backward",
// done counts 1..total. The lock is not held during the call, so the callback may set or
// clear the setting; reports made while this thread is inside a callback are dropped.
void report_progress(const char* what, int64_t done, int64_t total);

// Whether this thread is inside a progress callback now (a planned run started from one
// would wait on the run that called it, so the planner refuses it).
bool in_progress_callback();

// The observer of a real planned run: reports each completed chunk to the callback in force.
class ProgressReport : public RunObserver {
 public:
  void chunk_done(const char* pass, int64_t done, int64_t total) override { report_progress(pass, done, total); }
};

}  // namespace koila
