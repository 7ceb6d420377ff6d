// Internal to dist/ (only src/dist/*.cpp include it; not part of koila's interface): the
// ranks' agreement. Before anything is committed, each rank reports its outcome (an error
// code and message, or success with what its loss averaged over) and the shape of what it
// will hand in; one all-reduce gives every rank every report, and every rank reaches the
// same verdict from them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "dist/comm.h"
#include "run/chunked_run.h"

namespace koila::dist {

// What a rank reports before anything is committed.
struct Report {
  Code code = Code::Ok;
  std::string message;  // when code is not Code::Ok
  LossReduction::Kind kind = LossReduction::Kind::Other;
  double weight = 0;    // what its MEAN loss averaged over
  int64_t tensors = 0;  // how many tensors it will reduce, and their elements
  int64_t elements = 0;
  bool staged = true;  // its gradients' staging buffers fit (see Reduction)
};

// Every rank's report (indexed by rank), on every rank.
std::vector<Report> agree(Group::Comm& comm, int rank, int size, const Report& mine);

// Throws (as a FinalError, the same on every rank) unless every rank succeeded and they
// all hand in the same tensors. `what` names the call; `unchanged` what was kept.
void check_verdict(const std::vector<Report>& reports, int rank, const char* unchanged);

// Reports the failure in flight to the group (when it is still usable) and throws it again,
// or, when it was a FinalError (the agreement already ran), just throws it again.
[[noreturn]] void fail_together(Group::Comm& comm, int rank, int size, Report mine, const char* unchanged);

// This rank's weight in the mean over the ranks, and the scale its gradients get.
double scale_of(const std::vector<Report>& reports, int rank);

}  // namespace koila::dist
