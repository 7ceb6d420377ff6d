// Process groups: data-parallel training across processes, on LibTorch's c10d (Gloo for CPU
// tensors, NCCL for CUDA ones when LibTorch has it), with c10d's FileStore or TCPStore for
// the rendezvous. koila adds no transport of its own.
//
// A group backward runs the planned (chunked) backward of each rank's own shard under its
// own budget, then, before any gradient is final, the ranks agree: one all-reduce carries
// each rank's outcome (its error code and message, or success with the count its MEAN loss
// averaged over) and the shape of what it will reduce. Only when every rank succeeded are
// the gradients all-reduced, in buckets, and added into .grad; otherwise every rank fails
// naming the failing rank, and the backward's rollback leaves every .grad as it was.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/graph.h"

namespace koila {

class Group {
 public:
  // Joins (Code::Io when the others do not come within `timeout`).
  Group(const std::string& backend, const std::string& init, int rank, int size, std::chrono::milliseconds timeout);
  // Joins the group a launcher describes in the environment (koila_group_new_from_env).
  static std::unique_ptr<Group> from_env(const std::string& backend, std::chrono::milliseconds timeout);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // LOCAL_RANK from a launcher, else the rank

  // Every rank ends with root's values of the tensors (concrete, same shapes on every rank).
  // `collect` reads the caller's arguments: a failure there fails every rank.
  void broadcast(const std::function<std::vector<NodePtr>()>& collect, int root);

  // See koila_group_backward. `collect` reads the caller's arguments (the loss, then the
  // params): a failure there fails every rank, as any failure of the local backward does.
  void backward(const std::function<std::pair<NodePtr, std::vector<NodePtr>>()>& collect);

  struct Comm;  // the c10d process group (dist/comm.h, internal to dist/)

 private:
  Group(int rank, int size, int local_rank, std::unique_ptr<Comm> comm);

  const int rank_;
  const int size_;
  const int local_rank_;
  std::unique_ptr<Comm> comm_;
};

}  // namespace koila
