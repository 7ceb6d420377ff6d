// The C entry points for plans' memory timelines (plan/timeline.h).
#include "plan/timeline.h"
#include "api/args.h"
#include "api/convert.h"
#include "api/handles.h"
#include "base/error.h"

using namespace koila;

namespace {

const TimelineEvent& event_at(const koila_timeline* t, size_t i) {
  const Timeline& timeline = arg::handle(t, "t").timeline;
  if (i >= timeline.events.size())
    fail(Code::InvalidArgument, "event " + std::to_string(i) + " is out of range: the timeline has " +
                                    std::to_string(timeline.events.size()) + " events");
  return timeline.events[i];
}

// An entry point that reads one field of event i into *out.
template <class T, class F>
koila_status* event_field(const char* where, const koila_timeline* t, size_t i, T* out, F&& field) {
  return guard(where, [&] {
    const TimelineEvent& e = event_at(t, i);
    arg::not_null(out, "out");
    *out = field(e);
  });
}

}  // namespace

extern "C" {

KOILA_API koila_status* koila_plan_timeline(koila_timeline** out, const koila_plan* p, int unsplit) {
  return guard(__func__, [&] {
    arg::out(out);
    const Plan& plan = arg::handle(p, "p").plan;
    const bool whole = arg::flag(unsplit, "unsplit");
    *out = new koila_timeline{record_timeline(plan, whole)};
  });
}

KOILA_API koila_status* koila_timeline_length(const koila_timeline* t, size_t* out) {
  return guard(__func__, [&] {
    const Timeline& timeline = arg::handle(t, "t").timeline;
    arg::not_null(out, "out");
    *out = timeline.events.size();
  });
}

KOILA_API koila_status* koila_timeline_op(const koila_timeline* t, size_t i, char* buf, size_t capacity,
                                          size_t* needed) {
  return guard(__func__, [&] { write_text(event_at(t, i).op, buf, capacity, needed); });
}

KOILA_API koila_status* koila_timeline_phase(const koila_timeline* t, size_t i, koila_phase* out) {
  return event_field(__func__, t, i, out, [](const TimelineEvent& e) {
    return e.phase == Phase::Backward ? KOILA_PHASE_BACKWARD : KOILA_PHASE_FORWARD;
  });
}

KOILA_API koila_status* koila_timeline_chunk(const koila_timeline* t, size_t i, int64_t* out) {
  return event_field(__func__, t, i, out, [](const TimelineEvent& e) { return e.chunk; });
}

KOILA_API koila_status* koila_timeline_live_bytes(const koila_timeline* t, size_t i, uint64_t* out) {
  return event_field(__func__, t, i, out, [](const TimelineEvent& e) { return e.live; });
}

KOILA_API koila_status* koila_timeline_peak_bytes(const koila_timeline* t, size_t i, uint64_t* out) {
  return event_field(__func__, t, i, out, [](const TimelineEvent& e) { return e.peak; });
}

KOILA_API koila_status* koila_timeline_peak_index(const koila_timeline* t, size_t* out) {
  return guard(__func__, [&] {
    const Timeline& timeline = arg::handle(t, "t").timeline;
    arg::not_null(out, "out");
    *out = timeline.peak_index();
  });
}

KOILA_API koila_status* koila_timeline_part(const koila_timeline* t, koila_memory_part part, uint64_t* out) {
  return guard(__func__, [&] {
    const Timeline& timeline = arg::handle(t, "t").timeline;
    MemoryPart which = MemoryPart::InUse;
    switch (arg::enumeration(part, "part", "koila_memory_part", KOILA_PART_IN_USE, KOILA_PART_BEYOND_SIMULATION)) {
      case KOILA_PART_IN_USE: which = MemoryPart::InUse; break;
      case KOILA_PART_ACTIVATIONS: which = MemoryPart::Activations; break;
      case KOILA_PART_GRADIENTS: which = MemoryPart::Gradients; break;
      case KOILA_PART_TEMPORARIES: which = MemoryPart::Temporaries; break;
      case KOILA_PART_BEYOND_SIMULATION: which = MemoryPart::BeyondSimulation; break;
    }
    arg::not_null(out, "out");
    *out = timeline.part(which);
  });
}

KOILA_API void koila_timeline_free(koila_timeline* t) { delete t; }

}  // extern "C"
