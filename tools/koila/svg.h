// The memory timeline of a plan as a self-contained SVG picture: bytes held op by op
// through the forward and backward, for the planned chunks and for the unsplit run, with
// the budget as a line and the op at the peak named.
#pragma once

#include <string>

#include "report.h"

namespace koila_cli {

std::string timeline_svg(const PlanReport& r, const Session& session);

}  // namespace koila_cli
