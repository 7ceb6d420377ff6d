// Exported programs (.pt2 archives of torch.export) loaded and trained through the C API,
// against PyTorch's own results for the same programs: tests/exported/make_programs.py
// wrote them with PyTorch 2.11, 2.13 and 2.14.1 into tests/data/exported/<version>/ (see its
// docstring), together with the logits, loss, gradients and buffers PyTorch computed on the
// program loaded back (torch.export.load(...).module()).
#include <caffe2/serialize/inline_container.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "base/libtorch_compat.h"
#include "corpus/corpus.h"
#include "kernels/fused_grads.h"
#include "module_helpers.h"
#include "plan/planner.h"
#include "temp_dir.h"

namespace koila_test {
namespace {

const std::string kFixtures = KOILA_EXPORTED_FIXTURES;

struct Case {
  std::string version, name, mode, batch;
  size_t outputs = 1;            // results of its forward (several: koila_module_forward_all)
  std::string loss = "ce_each";  // make_programs.py's loss_of
  std::string path() const { return kFixtures + "/" + version + "/" + name + ".pt2"; }
  std::string label() const { return name + " (PyTorch " + version + ")"; }
};

// For gtest's names of a failed case.
void PrintTo(const Case& c, std::ostream* os) { *os << c.label(); }

// The PyTorch versions whose fixtures every test runs on, in one process per test and
// program (a process per version too cost more in starting LibTorch than the tests took).
const char* const kVersions[] = {"2.11.0", "2.13.0", "2.14.1"};

// The programs of one version's MANIFEST.
std::vector<Case> programs_of(const std::string& version) {
  std::vector<Case> out;
  std::ifstream manifest(kFixtures + "/" + version + "/MANIFEST");
  std::string line;
  while (std::getline(manifest, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    Case c;
    c.version = version;
    words >> c.name;
    std::string word;
    while (words >> word) {
      if (word.rfind("mode=", 0) == 0) c.mode = word.substr(5);
      if (word.rfind("batch=", 0) == 0) c.batch = word.substr(6);
      if (word.rfind("outputs=", 0) == 0) c.outputs = std::stoul(word.substr(8));
      if (word.rfind("loss=", 0) == 0) c.loss = word.substr(5);
    }
    out.push_back(c);
  }
  return out;
}

std::vector<Case> cases() { return programs_of(kVersions[std::size(kVersions) - 1]); }

// Runs `check` on the program `c` as each version wrote it (each version's fixtures hold
// every program).
void for_every_version(const Case& c, void (*check)(const Case&)) {
  for (const char* version : kVersions) {
    bool found = false;
    for (const Case& p : programs_of(version))
      if (p.name == c.name) {
        SCOPED_TRACE(p.label());
        check(p);
        found = true;
      }
    if (!found) ADD_FAILURE() << "no " << c.name << " in the fixtures of PyTorch " << version;
  }
}

// NAME.ref.pt: a dict of tensors, in the order make_programs.py wrote them.
std::vector<std::pair<std::string, at::Tensor>> reference(const Case& c) {
  std::ifstream file(kFixtures + "/" + c.version + "/" + c.name + ".ref.pt", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& kv : torch::pickle_load(bytes).toGenericDict())
    out.emplace_back(kv.key().toStringRef(), kv.value().toTensor());
  return out;
}

at::Tensor ref_at(const std::vector<std::pair<std::string, at::Tensor>>& ref, const std::string& key) {
  for (const auto& [k, v] : ref)
    if (k == key) return v;
  ADD_FAILURE() << "no " << key << " in the reference";
  return at::Tensor();
}

std::string underscored(std::string name) {
  std::string out;
  for (char c : name) out += c == '.' ? std::string("__") : std::string(1, c);
  return out;
}

// Whether the LibTorch under test has what the case needs: LibTorch 1.13 has no
// scaled_dot_product_attention (PyTorch 2.0).
bool runs_here(const Case& c) { return !(c.name == "attention" && koila::compat::kLibTorchMajor < 2); }

ModuleHandle load(const std::string& path) {
  koila_module* m = nullptr;
  koila_status* s = koila_module_load(&m, path.c_str(), "cpu");
  EXPECT_EQ(s, nullptr) << koila_status_message(s);
  koila_status_free(s);
  return ModuleHandle(m);
}

std::vector<std::pair<std::string, Handle>> named(koila_module* m, bool buffers) {
  size_t n = 0;
  koila_status_free(buffers ? koila_module_num_buffers(m, &n) : koila_module_num_parameters(m, &n));
  std::vector<std::pair<std::string, Handle>> out;
  for (size_t i = 0; i < n; ++i) {
    char name[256];
    size_t needed = 0;
    koila_status_free(buffers ? koila_module_buffer_name(m, i, name, sizeof name, &needed)
                              : koila_module_parameter_name(m, i, name, sizeof name, &needed));
    koila_tensor* t = nullptr;
    koila_status* s = buffers ? koila_module_buffer(&t, m, i) : koila_module_parameter(&t, m, i);
    EXPECT_EQ(s, nullptr) << koila_status_message(s);
    koila_status_free(s);
    out.emplace_back(name, Handle(t));
  }
  return out;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(diff, tolerance) << what << ": max |koila - PyTorch| = " << diff;
}

class Exported : public ::testing::TestWithParam<Case> {};

// The program's results for `x`: koila_module_forward_all's where it has several.
std::vector<Handle> results_of(const Case& c, koila_module* m, const Handle& x) {
  if (c.outputs > 1) return forward_all(m, {x.get()});
  std::vector<Handle> one;
  one.push_back(forward(m, {x.get()}));
  return one;
}

// The case's loss (make_programs.py's loss_of): one term per result, summed.
Handle loss_of(const Case& c, const std::vector<Handle>& results, const Handle& y) {
  Handle loss;
  for (const Handle& r : results) {
    Handle term;
    if (c.loss == "squares") {
      Handle squares = CALL(koila_mul, r.get(), r.get());
      term = CALL(koila_mean, squares.get(), nullptr, 0, 0);
    } else {
      term = CALL(koila_cross_entropy, r.get(), y.get(), KOILA_REDUCTION_MEAN);
    }
    loss = loss ? CALL(koila_add, loss.get(), term.get()) : std::move(term);
  }
  return loss;
}

// A training step (forward, mean cross entropy, backward) through koila, lazy input; the
// logits, loss, gradients and buffers after it against PyTorch's.
void expect_training_step(const Case& c, bool split) {
  const auto ref = reference(c);
  ModuleHandle m = load(c.path());
  ASSERT_TRUE(m);
  const Handle x = from_aten(ref_at(ref, "input"), 0);
  const Handle y = from_aten(ref_at(ref, "target"), 0);
  const std::vector<Handle> results = results_of(c, m.get(), x);
  ASSERT_EQ(results.size(), c.outputs);
  for (const Handle& r : results) ASSERT_TRUE(r);
  Handle loss = loss_of(c, results, y);
  BudgetGuard budget;
  if (split) {
    const uint64_t b = koila_corpus::budget_for_chunks(loss.get(), KOILA_MODE_TRAINING, 2, /*resolution=*/256);
    ASSERT_GT(b, 0u) << "no budget splits the run";
    ASSERT_OK(koila_set_memory_budget("cpu", b));
  }
  const uint64_t fused_before = koila::fused_weight_gradients();
  ASSERT_OK(koila_backward(loss.get()));
  koila_status_free(koila_set_memory_budget("cpu", 0));
  // The program's linear layers (all but lstm_full have one) run as koila::linear
  // (op_routes.h): chunks after the first add their weight gradients into .grad.
  if (split && c.name != "lstm_full") {
    EXPECT_GT(koila::fused_weight_gradients(), fused_before);
  }
  // The buffers first: reading the logits or the loss evaluates the call again, and a batch
  // norm in training moves its statistics at every evaluation, as in PyTorch.
  if (!split)
    for (const auto& [name, b] : named(m.get(), true))
      expect_close(to_aten(b.get()), ref_at(ref, "buffer__" + underscored(name)), 1e-5, "buffer " + name);
  const double tolerance = split ? 1e-4 : 1e-5;
  if (c.outputs == 1) expect_close(to_aten(results[0].get()), ref_at(ref, "logits"), tolerance, "logits");
  for (size_t k = 0; c.outputs > 1 && k < results.size(); ++k) {
    // Each result carries the batch where PyTorch's does (an LSTM's h and c in dim 1).
    const at::Tensor want = ref_at(ref, "result" + std::to_string(k));
    const int64_t batch = ref_at(ref, "input").size(0);
    int64_t dim = -1;
    for (int64_t d = 0; d < want.dim() && dim < 0; ++d)
      if (want.size(d) == batch) dim = d;
    EXPECT_EQ(batch_dim_of(results[k].get()), dim) << "result " << k;
    expect_close(to_aten(results[k].get()), want, tolerance, "result " + std::to_string(k));
  }
  expect_close(to_aten(loss.get()), ref_at(ref, "loss"), tolerance, "loss");
  for (const auto& [name, p] : named(m.get(), false)) {
    koila_tensor* g = nullptr;
    ASSERT_OK(koila_tensor_grad(&g, p.get()));
    Handle grad(g);
    ASSERT_TRUE(grad) << name << " has no gradient";
    expect_close(to_aten(grad.get()), ref_at(ref, "grad__" + underscored(name)), 10 * tolerance, "grad of " + name);
  }
}

void LoadsWithItsKindNamesAndMode(const Case& c) {
  if (!runs_here(c)) GTEST_SKIP() << "needs LibTorch 2.x";
  ModuleHandle m = load(c.path());
  ASSERT_TRUE(m);
  koila_module_kind kind = KOILA_MODULE_TORCHSCRIPT;
  ASSERT_OK(koila_module_kind_of(m.get(), &kind));
  EXPECT_EQ(kind, KOILA_MODULE_EXPORTED);
  int training = -1;
  ASSERT_OK(koila_module_is_training(m.get(), &training));
  EXPECT_EQ(training, c.mode == "train" ? 1 : 0);
  // Names and order as PyTorch's named_parameters() / named_buffers() (the reference's).
  std::vector<std::string> want_params, want_buffers, got_params, got_buffers;
  for (const auto& [k, v] : reference(c)) {
    if (k.rfind("grad__", 0) == 0) want_params.push_back(k.substr(6));
    if (k.rfind("buffer__", 0) == 0) want_buffers.push_back(k.substr(8));
  }
  for (const auto& [name, t] : named(m.get(), false)) got_params.push_back(underscored(name));
  for (const auto& [name, t] : named(m.get(), true)) got_buffers.push_back(underscored(name));
  EXPECT_EQ(got_params, want_params);
  EXPECT_EQ(got_buffers, want_buffers);
}

void TrainingStepEqualsPyTorch(const Case& c) {
  if (!runs_here(c)) GTEST_SKIP() << "needs LibTorch 2.x";
  expect_training_step(c, /*split=*/false);
}

void SplitTrainingStepEqualsPyTorch(const Case& c) {
  if (!runs_here(c)) GTEST_SKIP() << "needs LibTorch 2.x";
  if (c.name == "convbn_train") GTEST_SKIP() << "batch norm in training couples the batch (see test_batch_stats)";
  if (c.batch == "fixed") {
    // A fixed batch cannot be split: the plan says so and says how to export instead.
    const auto ref = reference(c);
    ModuleHandle m = load(c.path());
    const Handle x = from_aten(ref_at(ref, "input"), 0), y = from_aten(ref_at(ref, "target"), 0);
    Handle logits = forward(m.get(), {x.get()});
    Handle loss = CALL(koila_cross_entropy, logits.get(), y.get(), KOILA_REDUCTION_MEAN);
    BudgetGuard budget;
    const PlanInfo whole = plan_of(loss.get(), KOILA_MODE_TRAINING);
    ASSERT_OK(koila_set_memory_budget("cpu", whole.full_peak - 512));  // the whole batch does not fit
    const auto [code, message] = outcome(koila_backward(loss.get()));
    EXPECT_EQ(code, KOILA_ERROR_NOT_SPLITTABLE) << message;
    EXPECT_NE(message.find("exported with a fixed batch"), std::string::npos) << message;
    EXPECT_NE(message.find("dynamic_shapes"), std::string::npos) << message;
    return;
  }
  expect_training_step(c, /*split=*/true);
}

void KeepsTheModeItWasExportedIn(const Case& c) {
  if (!runs_here(c) || c.name.rfind("convbn", 0) != 0) GTEST_SKIP() << "for the programs with batch norm";
  ModuleHandle m = load(c.path());
  const bool training = c.mode == "train";
  ASSERT_OK(koila_module_train(m.get(), training ? 1 : 0));  // its own mode: fine
  const auto [code, message] = outcome(koila_module_train(m.get(), training ? 0 : 1));
  EXPECT_EQ(code, KOILA_ERROR_UNSUPPORTED);
  EXPECT_NE(message.find(std::string("exported in ") + (training ? "training" : "evaluation")), std::string::npos)
      << message;
  int now = -1;
  ASSERT_OK(koila_module_is_training(m.get(), &now));
  EXPECT_EQ(now, training ? 1 : 0);
}

void SavesWhatPyTorchLoadsAndKoilaReadsBack(const Case& c) {
  if (!runs_here(c)) GTEST_SKIP() << "needs LibTorch 2.x";
  ModuleHandle m = load(c.path());
  // Change every parameter, so that the saved payloads differ from the archive's.
  for (const auto& [name, p] : named(m.get(), false)) {
    at::Tensor t = p.get()->node->value;
    c10::NoGradGuard no_grad;
    t.add_(0.25);
  }
  const koila_tests::TempDir dir("koila_exported_");
  const std::string saved = dir / "saved.pt2";
  ASSERT_OK(koila_module_save(m.get(), saved.c_str()));
  ModuleHandle again = load(saved);
  ASSERT_TRUE(again);
  const auto before = named(m.get(), false), after = named(again.get(), false);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(before[i].first, after[i].first);
    EXPECT_TRUE(to_aten(before[i].second.get()).equal(to_aten(after[i].second.get()))) << before[i].first;
  }
#ifdef KOILA_EXPORT_CHECK
  // PyTorch itself: torch.export.load reads it, with exactly these parameters and buffers
  // (for one PyTorch's fixtures: each check starts a Python, some seconds).
  if (c.version == "2.14.1") {
    c10::Dict<std::string, at::Tensor> expected;
    for (bool buffers : {false, true})
      for (const auto& [name, t] : named(m.get(), buffers)) expected.insert(name, to_aten(t.get()));
    const std::string expected_path = dir / "expected.pt", input_path = dir / "input.pt";
    for (const auto& [path, value] :
         {std::pair<std::string, c10::IValue>{expected_path, expected}, {input_path, ref_at(reference(c), "input")}}) {
      const std::vector<char> bytes = torch::pickle_save(value);
      std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    const std::string command = std::string(KOILA_EXPORT_CHECK) + " " + saved + " " + expected_path + " " + input_path;
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
#endif
}

TEST_P(Exported, LoadsWithItsKindNamesAndMode) { for_every_version(GetParam(), LoadsWithItsKindNamesAndMode); }

TEST_P(Exported, TrainingStepEqualsPyTorch) { for_every_version(GetParam(), TrainingStepEqualsPyTorch); }

TEST_P(Exported, SplitTrainingStepEqualsPyTorch) { for_every_version(GetParam(), SplitTrainingStepEqualsPyTorch); }

TEST_P(Exported, KeepsTheModeItWasExportedIn) { for_every_version(GetParam(), KeepsTheModeItWasExportedIn); }

TEST_P(Exported, SavesWhatPyTorchLoadsAndKoilaReadsBack) {
  for_every_version(GetParam(), SavesWhatPyTorchLoadsAndKoilaReadsBack);
}

INSTANTIATE_TEST_SUITE_P(Programs, Exported, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- An exported call in the rest of koila --------------------------------------------

void note_progress(void* user, const char* what, int64_t done, int64_t total) {
  static_cast<std::vector<std::string>*>(user)->push_back(std::string(what) + " " + std::to_string(done) + "/" +
                                                          std::to_string(total));
}

// What koila tells of a run, and a process group's backward, hold for an exported program's
// call as for any module's: the split plan's timeline (its parts add up to the plan's
// peak), progress for each chunk, and a group of one rank (Gloo) whose chunked backward
// gives PyTorch's gradients.
TEST(ExportedRuns, TimelineProgressAndAProcessGroup) {
  const Case c{"2.14.1", "mlp", "train", "dynamic"};
  const auto ref = reference(c);
  ModuleHandle m = load(c.path());
  ASSERT_TRUE(m);
  const Handle x = from_aten(ref_at(ref, "input"), 0), y = from_aten(ref_at(ref, "target"), 0);
  Handle logits = forward(m.get(), {x.get()});
  Handle loss = CALL(koila_cross_entropy, logits.get(), y.get(), KOILA_REDUCTION_MEAN);
  BudgetGuard budget;
  const uint64_t b = koila_corpus::budget_for_chunks(loss.get(), KOILA_MODE_TRAINING, 2, /*resolution=*/256);
  ASSERT_GT(b, 0u) << "no budget splits the run";
  ASSERT_OK(koila_set_memory_budget("cpu", b));

  koila_plan* plan = nullptr;
  ASSERT_OK(koila_plan_new(&plan, loss.get(), KOILA_MODE_TRAINING));
  const int64_t chunks = koila_plan_num_chunks(plan);
  EXPECT_GE(chunks, 2);
  koila_timeline* timeline = nullptr;
  ASSERT_OK(koila_plan_timeline(&timeline, plan, /*unsplit=*/0));
  size_t events = 0;
  ASSERT_OK(koila_timeline_length(timeline, &events));
  EXPECT_GT(events, 10u) << "the timeline of a forward and backward through the program's ops";
  uint64_t sum = 0;
  for (koila_memory_part part : {KOILA_PART_IN_USE, KOILA_PART_ACTIVATIONS, KOILA_PART_GRADIENTS,
                                 KOILA_PART_TEMPORARIES, KOILA_PART_BEYOND_SIMULATION}) {
    uint64_t bytes = 0;
    ASSERT_OK(koila_timeline_part(timeline, part, &bytes));
    sum += bytes;
  }
  EXPECT_EQ(sum, koila_plan_peak_bytes(plan));
  koila_timeline_free(timeline);
  koila_plan_free(plan);

  std::vector<std::string> seen;
  ASSERT_OK(koila_set_progress(note_progress, &seen));
  const koila_tests::TempDir dir("koila_exported_group_");
  const std::string init = "file://" + (dir / "store");
  koila_group* group = nullptr;
  const auto [code, message] = outcome(koila_group_new(&group, "gloo", init.c_str(), 0, 1, 5000));
  std::vector<Handle> params;
  std::vector<koila_tensor*> raw;
  for (auto& [name, p] : named(m.get(), false)) {
    raw.push_back(p.get());
    params.push_back(std::move(p));
  }
  std::pair<koila_code, std::string> ran;
  if (code == KOILA_OK) {
    ran = outcome(koila_group_backward(group, loss.get(), raw.data(), raw.size()));
    koila_group_free(group);
  } else {
    EXPECT_EQ(code, KOILA_ERROR_UNSUPPORTED) << message;  // a LibTorch without Gloo
    ran = outcome(koila_backward(loss.get()));
  }
  koila_status_free(koila_set_progress(nullptr, nullptr));
  ASSERT_EQ(ran.first, KOILA_OK) << ran.second;
  std::vector<std::string> want;
  for (int64_t k = 1; k <= chunks; ++k) want.push_back("backward " + std::to_string(k) + "/" + std::to_string(chunks));
  std::vector<std::string> backward;
  for (const std::string& e : seen)
    if (e.rfind("backward", 0) == 0) backward.push_back(e);
  EXPECT_EQ(backward, want);
  for (const auto& [name, p] : named(m.get(), false)) {
    koila_tensor* g = nullptr;
    ASSERT_OK(koila_tensor_grad(&g, p.get()));
    Handle grad(g);
    ASSERT_TRUE(grad) << name;
    expect_close(to_aten(grad.get()), ref_at(ref, "grad__" + underscored(name)), 1e-4, "grad of " + name);
  }
}

// ---- What koila refuses, and how ------------------------------------------------------

std::string fixture(const std::string& name) { return kFixtures + "/2.14.1/" + name + ".pt2"; }

// A copy of `from` with `record` replaced by `content` (or left out when null).
void rewrite(const std::string& from, const std::string& to, const std::string& record, const char* content) {
  caffe2::serialize::PyTorchStreamReader in(from);
  caffe2::serialize::PyTorchStreamWriter out(to);
  for (const std::string& name : in.getAllRecords()) {
    if (name.rfind(".data/", 0) == 0) continue;
    if (name == record) {
      if (content) out.writeRecord(name, content, std::strlen(content));
      continue;
    }
    auto [data, size] = in.getRecord(name);
    out.writeRecord(name, data.get(), size);
  }
  out.writeEndOfFile();
}

std::pair<koila_code, std::string> load_outcome(const std::string& path) {
  koila_module* m = nullptr;
  auto result = outcome(koila_module_load(&m, path.c_str(), "cpu"));
  EXPECT_EQ(m, nullptr);
  koila_module_free(m);
  return result;
}

TEST(ExportedErrors, TruncatedAndCorruptArchivesAreIOErrors) {
  const koila_tests::TempDir dir("koila_exported_");
  std::ifstream in(fixture("mlp"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string truncated = dir / "truncated.pt2";
  for (size_t keep : {bytes.size() / 2, bytes.size() - 30, size_t(100)}) {
    std::ofstream(truncated, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(keep));
    const auto [code, message] = load_outcome(truncated);
    EXPECT_EQ(code, KOILA_ERROR_IO) << keep << " bytes: " << message;
    EXPECT_NE(message.find(truncated), std::string::npos) << message;
  }
  // The program's JSON cut short, and a weight record shorter than its tensor.
  const std::string bad_json = dir / "bad_json.pt2";
  rewrite(fixture("mlp"), bad_json, "models/model.json", "{\"graph_module\": {\"graph\": ");
  auto [code, message] = load_outcome(bad_json);
  EXPECT_EQ(code, KOILA_ERROR_IO) << message;
  EXPECT_NE(message.find("not valid JSON"), std::string::npos) << message;
  const std::string short_weight = dir / "short_weight.pt2";
  rewrite(fixture("mlp"), short_weight, "data/weights/weight_0", "abcd");
  std::tie(code, message) = load_outcome(short_weight);
  EXPECT_EQ(code, KOILA_ERROR_IO) << message;
  EXPECT_NE(message.find("past the end"), std::string::npos) << message;
}

TEST(ExportedErrors, UnknownVersionsAreUnsupportedAndNamed) {
  const koila_tests::TempDir dir("koila_exported_");
  const std::string archive = dir / "version.pt2";
  rewrite(fixture("mlp"), archive, "archive_version", "7");
  auto [code, message] = load_outcome(archive);
  EXPECT_EQ(code, KOILA_ERROR_UNSUPPORTED) << message;
  EXPECT_NE(message.find("version 7"), std::string::npos) << message;

  // Schema major version 9: the program's JSON with its version changed.
  caffe2::serialize::PyTorchStreamReader reader(fixture("mlp"));
  auto [data, size] = reader.getRecord("models/model.json");
  std::string json(static_cast<const char*>(data.get()), size);
  const std::string from = "\"schema_version\": {\"major\": 8";
  const size_t at = json.find(from);
  ASSERT_NE(at, std::string::npos);
  json.replace(at, from.size(), "\"schema_version\": {\"major\": 9");
  const std::string schema = dir / "schema.pt2";
  rewrite(fixture("mlp"), schema, "models/model.json", json.c_str());
  std::tie(code, message) = load_outcome(schema);
  EXPECT_EQ(code, KOILA_ERROR_UNSUPPORTED) << message;
  EXPECT_NE(message.find("schema version 9"), std::string::npos) << message;
}

TEST(ExportedErrors, InputsOfAnotherShapeOrDtypeAreRefused) {
  ModuleHandle m = load(fixture("mlp"));
  const Handle wrong_shape = from_aten(at::randn({8, 4, 4}), 0);
  koila_tensor* out = nullptr;
  koila_tensor* in[] = {wrong_shape.get()};
  auto [code, message] = outcome(koila_module_forward(&out, m.get(), in, 1));
  EXPECT_EQ(code, KOILA_ERROR_SHAPE) << message;
  EXPECT_NE(message.find("[*, 3, 4]"), std::string::npos) << message;
  const Handle wrong_dtype = from_aten(at::randn({8, 3, 4}, at::kDouble), 0);
  in[0] = wrong_dtype.get();
  std::tie(code, message) = outcome(koila_module_forward(&out, m.get(), in, 1));
  EXPECT_EQ(code, KOILA_ERROR_DTYPE) << message;
  std::tie(code, message) = outcome(koila_module_forward(&out, m.get(), in, 0));
  EXPECT_EQ(code, KOILA_ERROR_INVALID_ARGUMENT) << message;
}

TEST(ExportedErrors, OperatorsNewerThanThisLibTorchAreNamed) {
  if (koila::compat::kLibTorchMajor >= 2) GTEST_SKIP() << "LibTorch 2.x has every operator of the fixtures";
  const auto [code, message] = load_outcome(fixture("attention"));
  EXPECT_EQ(code, KOILA_ERROR_UNSUPPORTED) << message;
  EXPECT_NE(message.find("aten::scaled_dot_product_attention"), std::string::npos) << message;
}

}  // namespace
}  // namespace koila_test
