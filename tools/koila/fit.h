// `koila fit`: the largest batch that runs unsplit under the budget, and the chunk a batch
// of --batch runs in, found from koila's plans alone (nothing runs out of memory): a line
// through the estimates of two batches guesses the answer, plans around the guess settle
// it, so that the answer fits unsplit by koila's own plan and one more sample does not.
// --verify then runs the answer once and measures its peak.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "format.h"
#include "report.h"
#include "session.h"

namespace koila_cli {

struct BatchVerdict {
  bool fits = false;       // runs unsplit by koila's plan (without recomputation, or with: FitResult)
  uint64_t full_peak = 0;  // estimated unsplit peak (0 when not planned)
  uint64_t full_need = 0;  // the budget the unsplit run needs: with koila's margin (0 when not planned)
  std::string why;         // when it does not fit
};

struct FitResult {
  int64_t largest = 0;                    // largest batch that runs unsplit (0: not even 1)
  std::map<int64_t, BatchVerdict> tried;  // every batch size planned
  // Training under --recompute as-needed: the same, recomputing where it does not fit without
  // (planned under KOILA_RECOMPUTE_PREFERRED); -1: not searched.
  int64_t largest_recomputing = -1;
  std::map<int64_t, BatchVerdict> tried_recomputing;
  PlanReport at_batch;  // the plan of --batch
  bool batch_planned = false;
  std::string batch_why;  // when --batch could not be planned at all
  bool verified = false;
  uint64_t measured_peak = 0;
  int64_t measured_chunks = 0;
  // The plan the verifying run was given (made just before it), and how the run went against
  // it: a plan of more than one chunk means the estimate rose between the search and the run
  // (what the search's plans probed or observed meanwhile); a retry, that the run ran out of
  // memory under its plan (the estimate fell short) and rolled back to smaller chunks.
  int64_t planned_chunks = 0;
  uint64_t planned_peak = 0;  // koila_plan_peak_bytes of that plan
  int64_t retries = 0;
};

FitResult find_fit(Session& session);

std::string fit_text(const FitResult& r, const Session& session);
void fit_json(Json& j, const FitResult& r);

}  // namespace koila_cli
