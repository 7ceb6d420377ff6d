#include "report.h"

#include <cstdio>

namespace koila_cli {
namespace {

std::string describe(const koila_plan* plan) {
  size_t needed = 0;
  check(koila_plan_describe(plan, nullptr, 0, &needed), "koila_plan_describe");
  std::string text(needed, '\0');
  check(koila_plan_describe(plan, text.data(), text.size(), &needed), "koila_plan_describe");
  text.resize(needed - 1);
  return text;
}

// What was in use before the run (`in_use` bytes), by what the command made.
void in_use_parts(const Session& s, uint64_t in_use, uint64_t input_bytes, std::vector<Part>& parts) {
  const uint64_t buffers = s.module_bytes() > s.parameter_bytes() ? s.module_bytes() - s.parameter_bytes() : 0;
  parts.push_back(
      {"parameters", s.parameter_bytes(), "exact", std::to_string(s.num_parameters()) + " tensors of the module"});
  if (buffers > 0)
    parts.push_back({"module buffers", buffers, "measured", "the module's memory beyond its parameters"});
  parts.push_back({"inputs and targets", input_bytes, "exact", "the batch, held while it runs"});
  if (s.optimizer_bytes() > 0)
    parts.push_back({"optimizer state", s.optimizer_bytes(), "exact",
                     std::string(optimizer_name(s.options().optimizer)) + ": " +
                         std::to_string(optimizer_state_copies(s.options().optimizer)) +
                         " x the parameters, held as after its first step"});
  uint64_t known = 0;
  for (const Part& p : parts) known += p.bytes;
  if (in_use > known) parts.push_back({"other memory in use", in_use - known, "measured", "koila's allocator figures"});
}

bool training(const Session& s) { return s.options().mode == KOILA_MODE_TRAINING; }

void event_json(Json& j, const TimelineEvent& e) {
  j.begin_object()
      .field("op", e.op)
      .field("phase", e.backward ? "backward" : "forward")
      .field("chunk", e.chunk)
      .field("live_bytes", e.live)
      .field("peak_bytes", e.peak)
      .end_object();
}

void timeline_json(Json& j, const char* key, const TimelineData& t) {
  j.begin_object(key);
  j.field("available", t.available);
  if (!t.available) {
    j.field("why_not", t.why_not);
  } else {
    const TimelineEvent& peak = t.events[t.peak_index];
    j.field("peak_index", static_cast<uint64_t>(t.peak_index))
        .field("peak_op", peak.op)
        .field("peak_phase", peak.backward ? "backward" : "forward")
        .field("simulated_peak_bytes", peak.peak)
        .field("estimated_peak_bytes", t.total());
    j.begin_array("events");
    for (const TimelineEvent& e : t.events) event_json(j, e);
    j.end_array();
  }
  j.end_object();
}

}  // namespace

PlanReport make_plan_report(Session& session, const BatchPlan& b) {
  PlanReport r;
  const koila_plan* p = b.plan.get();
  r.batch = koila_plan_batch_size(p);
  r.chunk = koila_plan_chunk_size(p);
  r.chunks = koila_plan_num_chunks(p);
  r.peak = koila_plan_peak_bytes(p);
  r.full_peak = koila_plan_full_peak_bytes(p);
  r.need = koila_plan_needed_bytes(p);
  r.full_need = koila_plan_full_needed_bytes(p);
  r.recomputed = koila_plan_recomputed_bytes(p);
  r.budget = koila_plan_budget_bytes(p);
  r.description = describe(p);
  r.planned = read_timeline(p, false);
  r.unsplit = read_timeline(p, true);
  const TimelineData& t = r.planned;
  if (!t.available) {
    const uint64_t in_use = session.in_use();
    in_use_parts(session, in_use, b.input_bytes, r.parts);
    r.parts.push_back({"the run", r.peak > in_use ? r.peak - in_use : 0, "measured",
                       "real probes fitted to the batch (" + t.why_not + ")"});
    return r;
  }
  in_use_parts(session, t.parts[KOILA_PART_IN_USE], b.input_bytes, r.parts);
  const bool training_split = r.chunks > 1;
  if (training(session)) {
    r.parts.push_back({"activations kept for backward", t.parts[KOILA_PART_ACTIVATIONS], "simulated",
                       "allocated by the forward, held at the peak"});
    r.parts.push_back({"gradients", t.parts[KOILA_PART_GRADIENTS], "simulated",
                       training_split ? ".grad of the parameters held at the peak"
                                      : ".grad held at the peak (an unsplit run adds them at its end)"});
  } else {
    r.parts.push_back(
        {"activations", t.parts[KOILA_PART_ACTIVATIONS], "simulated", "results still needed at the peak"});
  }
  r.parts.push_back({"temporaries", t.parts[KOILA_PART_TEMPORARIES], "simulated",
                     training(session) ? "gradients of activations, buffers of the op at the peak"
                                       : "buffers of the op at the peak"});
  const bool calibrated = r.description.find("calibrated by real probes") != std::string::npos;
  r.parts.push_back({"backend workspaces", t.parts[KOILA_PART_BEYOND_SIMULATION],
                     calibrated ? "calibrated" : "observed",
                     calibrated ? "what real probes took beyond the simulation (oneDNN, cuDNN, cuBLAS)"
                                : "peaks of earlier runs beyond the simulation"});
  return r;
}

std::string setup_text(const Session& s) {
  const Options& o = s.options();
  std::string inputs;
  for (const InputSpec& in : o.inputs) inputs += (inputs.empty() ? "" : ", ") + in.text;
  std::string text = "model      " + o.model + " (" + std::to_string(s.num_parameters()) + " parameters, " +
                     human_bytes(s.parameter_bytes()) + ")\n";
  text += "inputs     " + inputs + " per sample\n";
  text += "device     " + o.device + "\n";
  text += std::string("mode       ") + (o.mode == KOILA_MODE_TRAINING ? "training" : "forward");
  if (s.exported())
    text += std::string(" (an exported program, in the ") + (s.module_training() ? "training" : "evaluation") +
            " mode it was exported in)";
  if (o.loss != Loss::None) text += std::string(", loss ") + loss_name(o);
  if (o.optimizer != OptimizerKind::None) text += std::string(", optimizer ") + optimizer_name(o.optimizer);
  text += "\nbudget     " + human_bytes(s.budget()) + (o.budget == 0 ? " (auto: free memory less a tenth)" : "") + "\n";
  return text;
}

void setup_json(Json& j, const Session& s) {
  const Options& o = s.options();
  j.field("model", o.model).field("device", o.device);
  j.begin_array("inputs");
  for (const InputSpec& in : o.inputs) {
    j.begin_object().field("spec", in.text).field("dtype", dtype_name(in.dtype));
    j.begin_array("shape");
    for (int64_t d : in.shape) j.field(nullptr, d);
    j.end_array().end_object();
  }
  j.end_array();
  j.field("mode", o.mode == KOILA_MODE_TRAINING ? "training" : "forward")
      .field("module_kind", s.exported() ? "exported" : "torchscript")
      .field("module_mode", s.module_training() ? "training" : "evaluation")
      .field("loss", loss_name(o))
      .field("optimizer", optimizer_name(o.optimizer))
      .field("parameters", static_cast<uint64_t>(s.num_parameters()))
      .field("parameter_bytes", s.parameter_bytes())
      .field("budget_bytes", s.budget())
      .field("budget_auto", o.budget == 0);
}

std::string plan_text(const PlanReport& r, const Session& s) {
  std::string text = setup_text(s);
  char line[256];
  text += "\nbatch      " + std::to_string(r.batch) + "\n";
  if (r.chunks == 1 && r.recomputed > 0)
    text += "plan       unsplit, recomputing (the whole batch fits only by recomputing activations)\n";
  else if (r.chunks == 1)
    text += "plan       unsplit (the whole batch fits)\n";
  else
    text += "plan       " + std::to_string(r.chunks) + " chunks of " + std::to_string(r.chunk) +
            (r.recomputed > 0 ? ", recomputing\n" : "\n");
  text += "peak       " + human_bytes(r.peak) + " estimated";
  if (r.chunks > 1) text += " (unsplit: " + human_bytes(r.full_peak) + ")";
  text += "\nneeds      " + human_bytes(r.need) + " of budget, with koila's margin on the estimate";
  if (r.chunks > 1) text += " (unsplit: " + human_bytes(r.full_need) + ")";
  if (r.recomputed > 0)
    text += "\nrecomputes " + human_bytes(r.recomputed) +
            " of activations a chunk frees in its forward and computes again in its backward (what and its cost: "
            "below)";
  text += "\n\nwhere the memory goes at the peak";
  if (r.planned.available) {
    const TimelineEvent& e = r.planned.events[r.planned.peak_index];
    text += " (" + e.op + ", " + (e.backward ? "backward" : "forward");
    if (r.chunks > 1) text += ", chunk " + std::to_string(e.chunk + 1);
    text += ")";
  }
  text += ":\n";
  uint64_t total = 0;
  for (const Part& p : r.parts) {
    std::snprintf(line, sizeof line, "  %-30s %10s  %-10s %s\n", p.name.c_str(), human_bytes(p.bytes).c_str(),
                  p.source.c_str(), p.note.c_str());
    text += line;
    total += p.bytes;
  }
  std::snprintf(line, sizeof line, "  %-30s %10s\n", "total", human_bytes(total).c_str());
  text += line;
  text += "\n" + r.description + "\n";
  return text;
}

void plan_json(Json& j, const PlanReport& r) {
  j.field("batch", r.batch)
      .field("chunk", r.chunk)
      .field("chunks", r.chunks)
      .field("peak_bytes", r.peak)
      .field("unsplit_peak_bytes", r.full_peak)
      .field("needed_bytes", r.need)
      .field("unsplit_needed_bytes", r.full_need)
      .field("recomputed_bytes", r.recomputed)
      .field("plan_budget_bytes", r.budget)
      .field("fits_unsplit", r.chunks == 1 && r.recomputed == 0)
      .field("recomputes", r.recomputed > 0)
      .field("description", r.description);
  j.begin_array("memory");
  for (const Part& p : r.parts)
    j.begin_object()
        .field("part", p.name)
        .field("bytes", p.bytes)
        .field("source", p.source)
        .field("note", p.note)
        .end_object();
  j.end_array();
  timeline_json(j, "timeline", r.planned);
  timeline_json(j, "unsplit_timeline", r.unsplit);
}

}  // namespace koila_cli
