// Issue 14: a plan's memory timeline (koila_plan_timeline). Its events come from the
// simulation the plan's estimate starts from, so its largest peak plus what the estimate
// adds beyond the simulation is the plan's peak, exactly; and the run it pictures peaks
// where koila's allocator measures.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "helpers.h"

using namespace koila_test;
using koila_models::Kind;
using koila_models::Model;

namespace {

struct PlanHandle {
  koila_plan* p = nullptr;
  ~PlanHandle() { koila_plan_free(p); }
};

struct TimelineHandle {
  koila_timeline* t = nullptr;
  ~TimelineHandle() { koila_timeline_free(t); }
};

struct Events {
  std::vector<std::string> ops;
  std::vector<koila_phase> phases;
  std::vector<int64_t> chunks;
  std::vector<uint64_t> live, peak;
  size_t peak_index = 0;
  uint64_t parts[5] = {};
  uint64_t total() const { return std::accumulate(std::begin(parts), std::end(parts), uint64_t{0}); }
};

Events read_events(const koila_plan* p, int unsplit) {
  Events e;
  TimelineHandle t;
  koila_status* s = koila_plan_timeline(&t.t, p, unsplit);
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  if (!t.t) return e;
  size_t n = 0;
  EXPECT_EQ(koila_timeline_length(t.t, &n), nullptr);
  for (size_t i = 0; i < n; ++i) {
    char name[128];
    size_t needed = 0;
    EXPECT_EQ(koila_timeline_op(t.t, i, name, sizeof name, &needed), nullptr);
    e.ops.push_back(name);
    koila_phase phase;
    int64_t chunk = -1;
    uint64_t live = 0, peak = 0;
    EXPECT_EQ(koila_timeline_phase(t.t, i, &phase), nullptr);
    EXPECT_EQ(koila_timeline_chunk(t.t, i, &chunk), nullptr);
    EXPECT_EQ(koila_timeline_live_bytes(t.t, i, &live), nullptr);
    EXPECT_EQ(koila_timeline_peak_bytes(t.t, i, &peak), nullptr);
    e.phases.push_back(phase);
    e.chunks.push_back(chunk);
    e.live.push_back(live);
    e.peak.push_back(peak);
  }
  EXPECT_EQ(koila_timeline_peak_index(t.t, &e.peak_index), nullptr);
  for (int part = KOILA_PART_IN_USE; part <= KOILA_PART_BEYOND_SIMULATION; ++part)
    EXPECT_EQ(koila_timeline_part(t.t, static_cast<koila_memory_part>(part), &e.parts[part]), nullptr);
  return e;
}

koila_code code_of(koila_status* s) {
  const koila_code c = koila_status_code(s);
  koila_status_free(s);
  return c;
}

// The checks every timeline passes: a peak that is the largest, parts that add up to the
// plan's estimate of the run, bytes never below what was in use.
void expect_accounts_for(const Events& e, uint64_t estimate, const std::string& what) {
  ASSERT_FALSE(e.ops.empty()) << what;
  const uint64_t top = *std::max_element(e.peak.begin(), e.peak.end());
  EXPECT_EQ(e.peak[e.peak_index], top) << what;
  EXPECT_EQ(e.total(), estimate) << what;
  EXPECT_EQ(e.parts[KOILA_PART_IN_USE] + e.parts[KOILA_PART_ACTIVATIONS] + e.parts[KOILA_PART_GRADIENTS] +
                e.parts[KOILA_PART_TEMPORARIES],
            top)
      << what;
  for (size_t i = 0; i < e.ops.size(); ++i) {
    EXPECT_LE(e.live[i], e.peak[i]) << what << " event " << i << " " << e.ops[i];
    EXPECT_GE(e.live[i], e.parts[KOILA_PART_IN_USE]) << what << " event " << i << " " << e.ops[i];
  }
}

// A model's mean loss over a lazy batch of `batch` random samples, planned for training.
struct PlannedLoss {
  Handle x, y, loss;
  PlanHandle plan;
  PlannedLoss(const Model& m, int64_t batch)
      : x(from_aten(m.input(batch), 0)), y(from_aten(m.target(batch), 0)), loss(m.loss(x.get(), y.get())) {
    koila_status* s = koila_plan_new(&plan.p, loss.get(), KOILA_MODE_TRAINING);
    EXPECT_EQ(s, nullptr) << koila_status_message(s);
    koila_status_free(s);
  }
};

}  // namespace

TEST(Timeline, AccountsForThePlansPeakSplitAndUnsplit) {
  for (Kind kind : {Kind::MLP, Kind::CNN, Kind::Transformer})
    for (koila_mode mode : {KOILA_MODE_FORWARD, KOILA_MODE_TRAINING}) {
      BudgetGuard restore;
      const std::string what = std::string(koila_models::name(kind)) + (mode ? " training" : " forward");
      Model m(kind);
      // Batches whose activations outweigh the parameters, so that chunks need less.
      const int64_t batch = kind == Kind::MLP ? 4096 : 512;
      Handle x = from_aten(m.input(batch), 0), y = from_aten(m.target(batch), 0);
      Handle loss = m.loss(x.get(), y.get());
      budget_for_chunk(loss.get(), mode == KOILA_MODE_TRAINING ? koila::RunMode::Training : koila::RunMode::Forward,
                       64);
      PlanHandle p;
      ASSERT_OK(koila_plan_new(&p.p, loss.get(), mode));
      ASSERT_GT(koila_plan_num_chunks(p.p), 1) << what;
      const Events chunked = read_events(p.p, 0), whole = read_events(p.p, 1);
      expect_accounts_for(chunked, koila_plan_peak_bytes(p.p), what + ", chunked");
      expect_accounts_for(whole, koila_plan_full_peak_bytes(p.p), what + ", unsplit");
      // The chunked timeline follows the first two chunks; the unsplit one is one chunk.
      EXPECT_EQ(chunked.chunks.front(), 0) << what;
      EXPECT_EQ(chunked.chunks.back(), 1) << what;
      EXPECT_EQ(*std::max_element(whole.chunks.begin(), whole.chunks.end()), 0) << what;
      EXPECT_GT(whole.peak[whole.peak_index], chunked.peak[chunked.peak_index]) << what;
      const auto backward = [](const Events& e) {
        return std::count(e.phases.begin(), e.phases.end(), KOILA_PHASE_BACKWARD);
      };
      EXPECT_EQ(chunked.phases.front(), KOILA_PHASE_FORWARD) << what;
      if (mode == KOILA_MODE_TRAINING) {
        EXPECT_GT(backward(whole), 0) << what;
        EXPECT_GT(whole.parts[KOILA_PART_ACTIVATIONS], 0u) << what;
        // Linear layers in a split pass into .grad run koila's fused linear (fused_grads.h),
        // and so do those of an unsplit pass that runs several; the CNN's one small linear
        // layer runs unsplit as LibTorch's own.
        const auto has = [](const Events& e, const char* op) {
          return std::find(e.ops.begin(), e.ops.end(), op) != e.ops.end();
        };
        EXPECT_TRUE(has(chunked, "FusedLinearWithBiasBackward")) << what;
        EXPECT_EQ(has(whole, "FusedLinearWithBiasBackward"), kind != Kind::CNN) << what;
        EXPECT_EQ(has(whole, "AddmmBackward0"), kind == Kind::CNN) << what;
      } else {
        EXPECT_EQ(backward(whole), 0) << what;
        EXPECT_EQ(whole.parts[KOILA_PART_GRADIENTS], 0u) << what;
      }
    }
}

// The run the timeline pictures: the unsplit training step of the CNN, measured by koila's
// allocator, peaks where the timeline (plus the calibration beyond it) says, within the
// planner's margin.
TEST(Timeline, ItsPeakIsTheMeasuredPeakOfTheRun) {
  BudgetGuard restore;
  Model m(Kind::CNN);
  PlannedLoss l(m, 32);
  ASSERT_EQ(koila_plan_num_chunks(l.plan.p), 1);
  const Events e = read_events(l.plan.p, 1);
  const uint64_t before = current_cpu();
  ASSERT_EQ(e.parts[KOILA_PART_IN_USE], before);
  ASSERT_OK(koila_memory_reset_peak("cpu"));
  ASSERT_OK(koila_backward(l.loss.get()));
  const double measured = static_cast<double>(peak_cpu() - before);
  const double timeline = static_cast<double>(e.total() - before);
  EXPECT_NEAR(timeline, measured, 0.10 * measured) << "timeline " << timeline << " B, measured " << measured << " B";
  m.zero_grad();
}

TEST(Timeline, BadArgumentsGetAStatus) {
  BudgetGuard restore;
  Model m(Kind::MLP);
  PlannedLoss l(m, 8);
  const PlanHandle& p = l.plan;
  ASSERT_NE(p.p, nullptr);
  koila_timeline* t = reinterpret_cast<koila_timeline*>(1);
  EXPECT_EQ(code_of(koila_plan_timeline(nullptr, p.p, 0)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_plan_timeline(&t, nullptr, 0)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(code_of(koila_plan_timeline(&t, p.p, 2)), KOILA_ERROR_INVALID_ARGUMENT);
  TimelineHandle h;
  ASSERT_OK(koila_plan_timeline(&h.t, p.p, 0));
  size_t n = 0;
  ASSERT_OK(koila_timeline_length(h.t, &n));
  uint64_t bytes = 0;
  int64_t chunk = 0;
  koila_phase phase;
  EXPECT_EQ(code_of(koila_timeline_length(h.t, nullptr)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_timeline_length(nullptr, &n)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_timeline_live_bytes(h.t, n, &bytes)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_timeline_peak_bytes(h.t, n, &bytes)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_timeline_chunk(h.t, n, &chunk)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_timeline_phase(h.t, n, &phase)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_timeline_phase(h.t, 0, nullptr)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_timeline_op(h.t, 0, nullptr, 4, nullptr)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_timeline_op(nullptr, 0, nullptr, 0, nullptr)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_timeline_peak_index(nullptr, &n)), KOILA_ERROR_INVALID_ARGUMENT);
  int bad_part = 5;
  koila_memory_part part;
  std::memcpy(&part, &bad_part, sizeof part);
  EXPECT_EQ(code_of(koila_timeline_part(h.t, part, &bytes)), KOILA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(code_of(koila_timeline_part(h.t, KOILA_PART_IN_USE, nullptr)), KOILA_ERROR_INVALID_ARGUMENT);
  // Asking for the size of a name: NULL buffer with capacity 0.
  size_t needed = 0;
  ASSERT_OK(koila_timeline_op(h.t, 0, nullptr, 0, &needed));
  EXPECT_GT(needed, 1u);
  koila_timeline_free(nullptr);
}

TEST(Timeline, NothingSimulatedMeansNoTimeline) {
  BudgetGuard restore;
  Model m(Kind::MLP);
  // A concrete value: nothing runs.
  Handle concrete = from_aten(at::ones({3}));
  PlanHandle p;
  ASSERT_OK(koila_plan_new(&p.p, concrete.get(), KOILA_MODE_FORWARD));
  koila_timeline* t = nullptr;
  EXPECT_EQ(code_of(koila_plan_timeline(&t, p.p, 1)), KOILA_ERROR_UNSUPPORTED);
  EXPECT_EQ(t, nullptr);
  // Figures measured on real probes because the simulation fails.
  koila::testing::set_simulation_fails(true);
  Handle x = from_aten(m.input(16), 0), y = from_aten(m.target(16), 0);
  Handle loss = m.loss(x.get(), y.get());
  PlanHandle measured;
  ASSERT_OK(koila_plan_new(&measured.p, loss.get(), KOILA_MODE_FORWARD));
  koila_status* s = koila_plan_timeline(&t, measured.p, 0);
  EXPECT_EQ(koila_status_code(s), KOILA_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(koila_status_message(s)).find("not simulated"), std::string::npos) << koila_status_message(s);
  koila_status_free(s);
  EXPECT_EQ(t, nullptr);
}
