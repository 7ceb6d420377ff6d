#include "timeline.h"

#include "capi.h"

namespace koila_cli {

TimelineData read_timeline(const koila_plan* plan, bool unsplit) {
  TimelineData d;
  d.unsplit = unsplit;
  koila_timeline* raw = nullptr;
  koila_status* s = koila_plan_timeline(&raw, plan, unsplit ? 1 : 0);
  if (s) {
    d.why_not = first_line(koila_status_message(s));
    koila_status_free(s);
    return d;
  }
  Timeline t(raw);
  size_t n = 0;
  check(koila_timeline_length(t.get(), &n), "koila_timeline_length");
  for (size_t i = 0; i < n; ++i) {
    TimelineEvent e;
    size_t needed = 0;
    check(koila_timeline_op(t.get(), i, nullptr, 0, &needed), "koila_timeline_op");
    std::string op(needed, '\0');
    check(koila_timeline_op(t.get(), i, op.data(), op.size(), &needed), "koila_timeline_op");
    op.resize(needed - 1);
    e.op = op;
    koila_phase phase;
    check(koila_timeline_phase(t.get(), i, &phase), "koila_timeline_phase");
    e.backward = phase == KOILA_PHASE_BACKWARD;
    check(koila_timeline_chunk(t.get(), i, &e.chunk), "koila_timeline_chunk");
    check(koila_timeline_live_bytes(t.get(), i, &e.live), "koila_timeline_live_bytes");
    check(koila_timeline_peak_bytes(t.get(), i, &e.peak), "koila_timeline_peak_bytes");
    d.events.push_back(e);
  }
  check(koila_timeline_peak_index(t.get(), &d.peak_index), "koila_timeline_peak_index");
  for (int p = KOILA_PART_IN_USE; p <= KOILA_PART_BEYOND_SIMULATION; ++p)
    check(koila_timeline_part(t.get(), static_cast<koila_memory_part>(p), &d.parts[p]), "koila_timeline_part");
  d.available = true;
  return d;
}

}  // namespace koila_cli
