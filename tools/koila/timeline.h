// A plan's memory timeline read through the C API (koila_plan_timeline) into plain data,
// for the text and JSON reports and the SVG picture.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "koila.h"

namespace koila_cli {

struct TimelineEvent {
  std::string op;
  bool backward = false;
  int64_t chunk = 0;
  uint64_t live = 0, peak = 0;
};

struct TimelineData {
  bool available = false;
  std::string why_not;  // when not available (the simulation failed: figures were measured)
  bool unsplit = true;
  std::vector<TimelineEvent> events;
  size_t peak_index = 0;
  uint64_t parts[5] = {};  // koila_memory_part: in use, activations, gradients, temporaries, beyond
  uint64_t total() const { return parts[0] + parts[1] + parts[2] + parts[3] + parts[4]; }
};

TimelineData read_timeline(const koila_plan* plan, bool unsplit);

}  // namespace koila_cli
