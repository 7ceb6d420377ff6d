// One budget, many threads. A planned run reserves the extra bytes its plan estimated on
// its device for as long as it runs; a plan made meanwhile on another thread counts what
// the running ones have reserved and not yet allocated as in use, so that together they
// stay within the budget. (What they have allocated is in the device's usage already.)
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "memory/run_memory.h"

namespace koila {

class Reservation {
 public:
  // `usage` follows what the run has allocated so far; it must outlive the reservation.
  Reservation(const c10::Device& device, uint64_t bytes, const RunMemory& usage);
  ~Reservation();
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

 private:
  size_t id_;
};

// Bytes reserved on `device` by the runs alive now and not yet allocated by them.
uint64_t outstanding_reservations(const c10::Device& device);

// The number of runs alive on `device`, and a count of the reservations ever released
// there (a waiter compares it to see that one ended).
size_t runs_alive(const c10::Device& device);
uint64_t runs_ended(const c10::Device& device);

// Waits until a reservation on `device` is released after `ended` were, or none is alive.
void wait_for_run_to_end(const c10::Device& device, uint64_t ended);

}  // namespace koila
