// Internal to dist/ (only src/dist/*.cpp include it; not part of koila's interface): a
// group's c10d process group, and the collectives started on it, each waited on within the
// group's timeout. A collective that fails or times out marks the group broken: its ranks
// are out of step or gone, and every later call on the group fails at once.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <string>

#include "base/libtorch_compat.h"
#include "dist/group.h"

namespace koila {

struct Group::Comm {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::CommBackend> pg;
  std::chrono::milliseconds timeout{0};
  c10::Device device = c10::Device(c10::kCPU);  // where the collectives' tensors live
  bool broken = false;                          // a collective failed: the peers are out of step or gone
};

namespace dist {

// Marks the group broken and throws (a FinalError: Code::Io) naming `what` and `why`.
[[noreturn]] void communication_failed(Group::Comm& comm, const std::string& what, const std::string& why);

// The text of the exception in flight.
std::string current_error_text();

// Fails (Code::Io) when an earlier collective of the group failed.
void check_usable(const Group::Comm& comm);

// A started collective.
class Pending {
 public:
  Pending(Group::Comm& comm, c10::intrusive_ptr<c10d::Work> work, const char* what)
      : comm_(comm), work_(std::move(work)), what_(what) {}
  void wait();

 private:
  Group::Comm& comm_;
  c10::intrusive_ptr<c10d::Work> work_;
  const char* what_;
};

// A sum over the ranks, into `t` on every rank.
Pending start_all_reduce(Group::Comm& comm, at::Tensor& t);
// Root's `t`, into `t` on every rank.
Pending start_broadcast(Group::Comm& comm, at::Tensor& t, int root);

}  // namespace dist
}  // namespace koila
