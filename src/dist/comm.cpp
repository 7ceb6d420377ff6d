#include "dist/comm.h"

#include <c10/util/Exception.h>

#include <exception>

#include "base/error.h"

namespace koila::dist {

namespace {

// Collectives write into their tensors past LibTorch's dispatcher, which would count the
// write in the tensor's version; it is counted here, so that whatever knows a tensor by its
// version (zeroed_grads.h) sees it written.
void count_write(const at::Tensor& t) {
  if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

[[noreturn]] void communication_failed(Group::Comm& comm, const std::string& what, const std::string& why) {
  comm.broken = true;
  throw FinalError(Code::Io, what + " failed (a rank died, left, or did not arrive within " +
                                 std::to_string(comm.timeout.count()) + " ms): " + why +
                                 ". The group cannot be used any more: free it");
}

std::string current_error_text() {
  try {
    throw;
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

void Pending::wait() {
  try {
    if (!work_->wait(comm_.timeout)) communication_failed(comm_, what_, "timed out");
  } catch (const FinalError&) {
    throw;
  } catch (...) {
    communication_failed(comm_, what_, current_error_text());
  }
}

void check_usable(const Group::Comm& comm) {
  if (comm.broken)
    fail(Code::Io,
         "an earlier collective of this group failed (a rank died or timed out); free the group and "
         "join a new one");
}

Pending start_all_reduce(Group::Comm& comm, at::Tensor& t) {
  count_write(t);
  std::vector<at::Tensor> ts{t};
  try {
    return Pending(comm, comm.pg->allreduce(ts), "all-reduce");
  } catch (...) {
    communication_failed(comm, "all-reduce", current_error_text());
  }
}

Pending start_broadcast(Group::Comm& comm, at::Tensor& t, int root) {
  count_write(t);
  std::vector<at::Tensor> ts{t};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  try {
    return Pending(comm, comm.pg->broadcast(ts, options), "broadcast");
  } catch (...) {
    communication_failed(comm, "broadcast", current_error_text());
  }
}

}  // namespace koila::dist
