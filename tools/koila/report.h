// `koila plan`'s report: the plan of a batch (batch, chunk, chunks, estimated peaks, budget)
// and where the memory goes at the peak, each part with its source, as text or JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format.h"
#include "session.h"
#include "timeline.h"

namespace koila_cli {

struct Part {
  std::string name;
  uint64_t bytes = 0;
  std::string source;  // "exact", "measured", "simulated", "calibrated", ...
  std::string note;
};

struct PlanReport {
  int64_t batch = 0, chunk = 0, chunks = 1;
  uint64_t peak = 0, full_peak = 0, budget = 0;
  uint64_t need = 0, full_need = 0;  // the budget the run needs, with koila's margin (koila_plan_needed_bytes)
  uint64_t recomputed = 0;           // koila_plan_recomputed_bytes
  std::string description;           // koila_plan_describe
  std::vector<Part> parts;           // add up to `peak`
  TimelineData planned, unsplit;
};

// The report of a batch whose plan succeeded.
PlanReport make_plan_report(Session& session, const BatchPlan& b);

// The header lines both commands print: model, inputs, device, mode, budget.
std::string setup_text(const Session& session);
void setup_json(Json& j, const Session& session);

std::string plan_text(const PlanReport& r, const Session& session);
void plan_json(Json& j, const PlanReport& r);

}  // namespace koila_cli
