// The real-model corpus (tests/corpus/make_corpus.py) through koila's C API, shared by the
// corpus test and bench/corpus.cpp: the manifest, PyTorch's reference results, a model's
// lazy graph (module call + mean cross entropy), and one measured run of it: the plan's
// estimate against the measured peak, the budget, the results and gradients.
//
// Figures follow the planner's own terms: the estimate is the plan's extra (its peak less
// the bytes in use when it was made), the measured figure is the peak koila's CPU tracking
// allocator saw during the run (reset just before) less the bytes in use before the run.
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "koila.h"

namespace koila_corpus {

// ---- Handles and statuses --------------------------------------------------------------

// Owning handles: each releases its object with the matching koila_*_free.
template <auto Free>
struct Deleter {
  template <class T>
  void operator()(T* p) const {
    Free(p);
  }
};
using Tensor = std::unique_ptr<koila_tensor, Deleter<koila_tensor_free>>;
using Module = std::unique_ptr<koila_module, Deleter<koila_module_free>>;
using Plan = std::unique_ptr<koila_plan, Deleter<koila_plan_free>>;

// A status taken over: code and message, the status freed.
struct Outcome {
  koila_code code = KOILA_OK;
  std::string message;
  bool ok() const { return code == KOILA_OK; }
};

inline Outcome outcome(koila_status* s) {
  Outcome o{koila_status_code(s), koila_status_message(s)};
  koila_status_free(s);
  return o;
}

// Throws on a failed call, naming it: for set-up steps that are not under test.
inline void check(koila_status* s, const std::string& what) {
  const Outcome o = outcome(s);
  if (!o.ok()) throw std::runtime_error(what + ": " + o.message);
}

// Text from a koila call that writes into (buf, capacity, needed): asks for the size, then
// reads it.
template <class Write>
std::string text_of(Write&& write, const char* what) {
  size_t needed = 0;
  check(write(nullptr, 0, &needed), what);
  std::string text(needed, '\0');
  check(write(text.data(), needed, &needed), what);
  text.resize(needed - 1);
  return text;
}

inline std::string describe(const koila_plan* p) {
  return text_of([&](char* buf, size_t n, size_t* needed) { return koila_plan_describe(p, buf, n, needed); },
                 "koila_plan_describe");
}

// The device the corpus runs on: KOILA_CORPUS_DEVICE (cuda:0 in the GPU check), else the CPU.
inline const char* corpus_device() {
  static const std::string device = [] {
    const char* env = std::getenv("KOILA_CORPUS_DEVICE");
    return std::string(env && *env ? env : "cpu");
  }();
  return device.c_str();
}

inline uint64_t device_in_use() {
  uint64_t current = 0;
  check(koila_memory_stats(corpus_device(), &current, nullptr), "koila_memory_stats");
  return current;
}

inline uint64_t device_peak() {
  uint64_t peak = 0;
  check(koila_memory_stats(corpus_device(), nullptr, &peak), "koila_memory_stats");
  return peak;
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// ---- The manifest ----------------------------------------------------------------------

// One line of manifest.txt.
struct Entry {
  std::string name;
  std::vector<int64_t> input_shape;
  std::string dtype;  // "float32" or "int64"
  bool batchnorm = false;
  std::string exported;            // "script" or "trace"
  std::vector<std::string> modes;  // module modes with references: "train", "eval"
  int64_t params = 0;
  // Module modes the model is also saved in as an exported program (NAME.MODE.pt2, made by
  // a PyTorch 2.x; none with one that has no torch.export).
  std::vector<std::string> programs;
  // Results of the model's forward (several: koila_module_forward_all, flattened), and its
  // loss: the sum over them of each one's mean cross entropy against the targets
  // ("cross_entropy_mean") or mean square ("squares_mean").
  size_t results = 1;
  std::string loss = "cross_entropy_mean";
};

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, sep);) out.push_back(item);
  return out;
}

inline std::vector<Entry> read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.txt";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path + " (built by the koila_corpus target)");
  std::vector<Entry> entries;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Entry e;
    fields >> e.name;
    for (std::string field; fields >> field;) {
      const size_t eq = field.find('=');
      if (eq == std::string::npos) throw std::runtime_error(path + ": bad field '" + field + "'");
      const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
      if (key == "input") {
        for (const std::string& d : split(value, 'x')) e.input_shape.push_back(std::stoll(d));
      } else if (key == "dtype") {
        e.dtype = value;
      } else if (key == "batchnorm") {
        e.batchnorm = value == "1";
      } else if (key == "export") {
        e.exported = value;
      } else if (key == "modes") {
        e.modes = split(value, ',');
      } else if (key == "params") {
        e.params = std::stoll(value);
      } else if (key == "pt2") {
        e.programs = split(value, ',');
      } else if (key == "results") {
        e.results = std::stoul(value);
      } else if (key == "loss") {
        e.loss = value;
      }
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

// ---- PyTorch's reference results -------------------------------------------------------

struct Reference {
  at::Tensor input, target, logits, loss;
  std::vector<std::pair<std::string, at::Tensor>> grads;  // parameter name, d loss / d parameter
  // PyTorch's own gradient accumulation over chunks of one sample against its whole batch:
  // the largest over the parameters of max |difference| / max |gradient|; -1 where not given.
  double chunks_of_one_distance = -1;
};

// NAME.MODE.ref.pt: buffers input, target, logits, loss, then grad__<parameter> in
// named_parameters() order ('.' written "__"), and chunks_of_one_distance where given.
inline Reference read_reference(const std::string& dir, const std::string& name, const std::string& module_mode) {
  const std::string path = dir + "/" + name + "." + module_mode + ".ref.pt";
  torch::jit::Module m = torch::jit::load(path);
  Reference r;
  for (const auto& b : m.named_buffers(/*recurse=*/false)) {
    if (b.name == "input") {
      r.input = b.value;
    } else if (b.name == "target") {
      r.target = b.value;
    } else if (b.name == "logits") {
      r.logits = b.value;
    } else if (b.name == "loss") {
      r.loss = b.value;
    } else if (b.name == "chunks_of_one_distance") {
      r.chunks_of_one_distance = b.value.item<double>();
    } else if (b.name.rfind("grad__", 0) == 0) {
      std::string param = b.name.substr(6);
      for (size_t i; (i = param.find("__")) != std::string::npos;) param.replace(i, 2, ".");
      r.grads.emplace_back(param, b.value);
    }
  }
  if (!r.input.defined() || !r.target.defined() || !r.logits.defined() || !r.loss.defined())
    throw std::runtime_error(path + ": input, target, logits or loss missing");
  return r;
}

// ---- A model's lazy graph ----------------------------------------------------------------

// A concrete koila tensor holding a copy of `t`, on `device`.
inline Tensor from_aten(const at::Tensor& t, const std::string& device = corpus_device()) {
  const at::Tensor c = t.contiguous();
  const koila_dtype dtype = c.scalar_type() == at::kLong ? KOILA_INT64 : KOILA_FLOAT32;
  if (c.scalar_type() != at::kLong && c.scalar_type() != at::kFloat)
    throw std::runtime_error("corpus tensors are float32 or int64");
  koila_tensor* out = nullptr;
  check(koila_tensor_from_data(&out, c.data_ptr(), c.numel() * c.element_size(), dtype, c.sizes().data(), c.dim(),
                               device.c_str()),
        "koila_tensor_from_data");
  return Tensor(out);
}

inline Tensor lazy(const koila_tensor* t, int64_t batch_dim) {
  koila_tensor* out = nullptr;
  check(koila_lazy(&out, t, batch_dim), "koila_lazy");
  return Tensor(out);
}

// Reads a tensor's value (float32), evaluating it when it is lazy; `out` must be allocated
// with its shape.
inline Outcome read_into(const koila_tensor* t, at::Tensor& out) {
  return outcome(koila_tensor_to_host(t, out.data_ptr(), out.numel() * out.element_size()));
}

// The module's parameters, in named_parameters() order.
inline std::vector<Tensor> parameters_of(koila_module* m) {
  size_t n = 0;
  check(koila_module_num_parameters(m, &n), "koila_module_num_parameters");
  std::vector<Tensor> params;
  for (size_t i = 0; i < n; ++i) {
    koila_tensor* p = nullptr;
    check(koila_module_parameter(&p, m, i), "koila_module_parameter");
    params.emplace_back(p);
  }
  return params;
}

// A model loaded through koila with the lazy graph built: logits = model(x), loss = mean
// cross entropy of logits and y. x and y are lazy with batch dim 0. `exported`: the model's
// torch.export program for that mode (NAME.MODE.pt2) instead of its TorchScript (NAME.pt).
// An entry with only a name: a model with one result and the cross-entropy loss.
inline Entry entry_named(const std::string& name) {
  Entry e;
  e.name = name;
  return e;
}

struct Graph {
  Module module;
  std::vector<Tensor> params;
  std::vector<std::string> param_names;
  Tensor input, target, x, y, logits, loss;
  std::vector<Tensor> others;  // the results after the first (logits), for models with several

  Graph(const std::string& dir, const std::string& name, bool train, const Reference& ref, bool exported = false)
      : Graph(dir, entry_named(name), train, ref, exported) {}

  Graph(const std::string& dir, const Entry& e, bool train, const Reference& ref, bool exported = false) {
    const std::string& name = e.name;
    koila_module* m = nullptr;
    const std::string file = exported ? name + (train ? ".train" : ".eval") + ".pt2" : name + ".pt";
    check(koila_module_load(&m, (dir + "/" + file).c_str(), corpus_device()), "koila_module_load " + file);
    module.reset(m);
    check(koila_module_train(m, train ? 1 : 0), "koila_module_train");
    params = parameters_of(m);
    for (size_t i = 0; i < params.size(); ++i) {
      param_names.push_back(text_of(
          [&](char* buf, size_t n, size_t* needed) { return koila_module_parameter_name(m, i, buf, n, needed); },
          "koila_module_parameter_name"));
    }
    input = from_aten(ref.input);
    target = from_aten(ref.target);
    x = lazy(input.get(), 0);
    y = lazy(target.get(), 0);
    koila_tensor* in[] = {x.get()};
    koila_tensor* out = nullptr;
    if (e.results > 1) {
      std::vector<koila_tensor*> all(e.results, nullptr);
      size_t count = 0;
      check(koila_module_forward_all(all.data(), all.size(), &count, m, in, 1), "koila_module_forward_all " + name);
      if (count != e.results)
        throw std::runtime_error(name + ": " + std::to_string(count) + " results, not " + std::to_string(e.results) +
                                 " as the manifest says");
      logits.reset(all[0]);
      for (size_t k = 1; k < all.size(); ++k) others.emplace_back(all[k]);
    } else {
      check(koila_module_forward(&out, m, in, 1), "koila_module_forward " + name);
      logits.reset(out);
    }
    // The loss: one term per result, summed.
    std::vector<const koila_tensor*> results{logits.get()};
    for (const Tensor& r : others) results.push_back(r.get());
    for (const koila_tensor* r : results) {
      if (e.loss == "squares_mean") {
        check(koila_mul(&out, r, r), "koila_mul");
        Tensor squares(out);
        check(koila_mean(&out, squares.get(), nullptr, 0, 0), "koila_mean");
      } else {
        check(koila_cross_entropy(&out, r, y.get(), KOILA_REDUCTION_MEAN), "koila_cross_entropy");
      }
      Tensor term(out);
      if (!loss) {
        loss = std::move(term);
        continue;
      }
      check(koila_add(&out, loss.get(), term.get()), "koila_add");
      loss.reset(out);
    }
  }

  // What a run in `mode` evaluates: the logits (forward) or the loss (training).
  const koila_tensor* target_of(koila_mode mode) const {
    return mode == KOILA_MODE_TRAINING ? loss.get() : logits.get();
  }

  // The parameters' gradients (zeros where a parameter has none).
  std::vector<at::Tensor> grads() const {
    std::vector<at::Tensor> out;
    for (const Tensor& p : params) {
      koila_tensor* g = nullptr;
      check(koila_tensor_grad(&g, p.get()), "koila_tensor_grad");
      Tensor grad(g);
      size_t ndim = 0;
      check(koila_tensor_shape(p.get(), nullptr, 0, &ndim), "koila_tensor_shape");
      std::vector<int64_t> dims(ndim);
      check(koila_tensor_shape(p.get(), dims.data(), ndim, &ndim), "koila_tensor_shape");
      at::Tensor value = at::zeros(dims);
      if (grad) check(koila_tensor_to_host(grad.get(), value.data_ptr(), value.numel() * sizeof(float)), "to_host");
      out.push_back(value);
    }
    return out;
  }

  void zero_grad() const {
    for (const Tensor& p : params) {
      koila_tensor* g = nullptr;
      check(koila_tensor_grad(&g, p.get()), "koila_tensor_grad");
      Tensor grad(g);
      if (grad) check(koila_tensor_zero_grad(p.get()), "koila_tensor_zero_grad");
    }
  }
};

// ---- One run -------------------------------------------------------------------------------

constexpr uint64_t kUnlimited = uint64_t{1} << 50;

struct RunResult {
  Outcome planned;                  // koila_plan_new's outcome
  Outcome ran;                      // the run's outcome (not attempted when planning failed)
  std::string description;          // the plan's (or the failed plan's message)
  uint64_t budget = 0;              // the budget in force (absolute bytes)
  uint64_t before = 0;              // bytes in use before the run
  uint64_t estimate = 0;            // the plan's extra: peak_bytes - before
  uint64_t full_estimate = 0;       // the plan's unsplit extra
  uint64_t measured = 0;            // measured peak - before
  uint64_t peak = 0;                // measured peak (absolute)
  int64_t chunk = -1, chunks = -1;  // as planned
  // As run (the progress callback): the chunks of its last attempt, and how many times it ran
  // out of memory under its plan and started again in smaller chunks. A retry's peak is all
  // the device's figures show on CUDA (each attempt resets them), so a run that retried is
  // not the plan's and its `measured` is not the plan's peak.
  int64_t ran_chunks = 0, retries = 0;
  double plan_seconds = 0, run_seconds = 0;
  at::Tensor logits;  // forward: the logits read

  // (estimate - measured) / measured, of the extras.
  double error() const { return measured ? (double(estimate) - double(measured)) / double(measured) : 0.0; }
};

// Plans and runs `mode` on g under `budget` (absolute bytes; kUnlimited for an unsplit run):
// forward reads the logits, training backpropagates the loss (gradients added into .grad).
inline RunResult run(const Graph& g, koila_mode mode, uint64_t budget) {
  RunResult r;
  r.budget = budget;
  check(koila_set_memory_budget(corpus_device(), budget), "koila_set_memory_budget");
  const koila_tensor* t = g.target_of(mode);
  at::Tensor logits;  // allocated before the run, so that the peak counts koila's bytes only
  if (mode == KOILA_MODE_FORWARD) {
    size_t ndim = 0;
    int64_t dims[8];
    check(koila_tensor_shape(t, dims, 8, &ndim), "koila_tensor_shape");
    logits = at::empty(std::vector<int64_t>(dims, dims + ndim));
  }
  r.before = device_in_use();
  koila_plan* p = nullptr;
  const auto start = std::chrono::steady_clock::now();
  r.planned = outcome(koila_plan_new(&p, t, mode));
  r.plan_seconds = seconds_since(start);
  Plan plan(p);
  if (!r.planned.ok()) {
    r.description = r.planned.message;
  } else {
    r.description = describe(plan.get());
    r.estimate = koila_plan_peak_bytes(plan.get()) - r.before;
    r.full_estimate = koila_plan_full_peak_bytes(plan.get()) - r.before;
    r.chunk = koila_plan_chunk_size(plan.get());
    r.chunks = koila_plan_num_chunks(plan.get());
  }
  plan.reset();
  check(koila_memory_reset_peak(corpus_device()), "koila_memory_reset_peak");
  r.before = device_in_use();
  struct Progress {
    int64_t chunks = 0, retries = 0;
    std::map<std::string, int64_t> starts;  // phase -> times it began at chunk 1
  } progress;
  check(koila_set_progress(
            [](void* user, const char* phase, int64_t done, int64_t total) {
              auto& p = *static_cast<Progress*>(user);
              p.chunks = total;
              if (done == 1 && ++p.starts[phase] > 1) p.retries = std::max(p.retries, p.starts[phase] - 1);
            },
            &progress),
        "koila_set_progress");
  const auto run_start = std::chrono::steady_clock::now();
  r.ran = mode == KOILA_MODE_TRAINING ? outcome(koila_backward(t)) : read_into(t, logits);
  r.run_seconds = seconds_since(run_start);
  check(koila_set_progress(nullptr, nullptr), "koila_set_progress");
  r.ran_chunks = progress.chunks;
  r.retries = progress.retries;
  r.peak = device_peak();
  r.measured = r.peak - r.before;
  if (mode == KOILA_MODE_FORWARD && r.ran.ok()) r.logits = logits;
  check(koila_set_memory_budget(corpus_device(), 0), "koila_set_memory_budget");
  return r;
}

// The largest budget (absolute bytes) under which the plan of `t` for `mode` has at least
// `min_chunks` chunks, found by bisection on the planner's own answers (to `resolution`
// bytes); 0 when none does.
inline uint64_t budget_for_chunks(const koila_tensor* t, koila_mode mode, int64_t min_chunks,
                                  uint64_t resolution = 4096) {
  auto chunks_under = [&](uint64_t budget) -> int64_t {  // 0: no plan (out of memory)
    check(koila_set_memory_budget(corpus_device(), budget), "koila_set_memory_budget");
    koila_plan* p = nullptr;
    const Outcome o = outcome(koila_plan_new(&p, t, mode));
    Plan plan(p);
    return o.ok() ? koila_plan_num_chunks(plan.get()) : 0;
  };
  check(koila_set_memory_budget(corpus_device(), kUnlimited), "koila_set_memory_budget");
  koila_plan* p = nullptr;
  check(koila_plan_new(&p, t, mode), "koila_plan_new");
  Plan full(p);
  const uint64_t held = device_in_use();
  uint64_t lo = held, hi = koila_plan_full_peak_bytes(full.get()) * 2 - held;  // lo: many chunks or none; hi: one
  full.reset();
  uint64_t best = 0;
  while (hi - lo > resolution) {
    const uint64_t mid = lo + (hi - lo) / 2;
    const int64_t n = chunks_under(mid);
    if (n >= min_chunks) {
      best = mid;
      lo = mid;
    } else if (n == 0) {
      lo = mid;  // not even one sample fits: more budget
    } else {
      hi = mid;
    }
  }
  check(koila_set_memory_budget(corpus_device(), 0), "koila_set_memory_budget");
  return best;
}
// The least budget (absolute bytes) under which the plan of `t` for `mode` does not refuse, by
// bisection on the planner's answers (to `resolution` bytes), under the recomputation policy in
// force; 0 when even twice the unsplit peak does not plan.
inline uint64_t least_budget_that_plans(const koila_tensor* t, koila_mode mode, uint64_t resolution = 4096) {
  auto plans = [&](uint64_t budget) {
    check(koila_set_memory_budget(corpus_device(), budget), "koila_set_memory_budget");
    koila_plan* p = nullptr;
    const Outcome o = outcome(koila_plan_new(&p, t, mode));
    Plan plan(p);
    return o.ok();
  };
  check(koila_set_memory_budget(corpus_device(), kUnlimited), "koila_set_memory_budget");
  koila_plan* p = nullptr;
  check(koila_plan_new(&p, t, mode), "koila_plan_new");
  Plan full(p);
  const uint64_t held = device_in_use();
  uint64_t lo = held, hi = koila_plan_full_peak_bytes(full.get()) * 2 - held;
  full.reset();
  if (!plans(hi)) hi = 0;
  while (hi > 0 && hi - lo > resolution) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (plans(mid) ? hi : lo) = mid;
  }
  check(koila_set_memory_budget(corpus_device(), 0), "koila_set_memory_budget");
  return hi;
}

inline uint64_t budget_for_chunks(const Graph& g, koila_mode mode, int64_t min_chunks) {
  return budget_for_chunks(g.target_of(mode), mode, min_chunks);
}

// Where the plan's figure came from, in a word or two: the words "coarse", "simulated",
// "measured" and "calibrated" as they appear in the description's "Source: ..." sentence
// (joined with '+'), or, for descriptions without one, "coarse" when the description says
// the estimate is coarse and "simulated" otherwise.
inline std::string source_of(const std::string& description) {
  std::string text = description;
  for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const size_t at = text.find("source:");
  if (at == std::string::npos) return text.find("coarse") != std::string::npos ? "coarse" : "simulated";
  std::string sentence = text.substr(at + 7);
  sentence = sentence.substr(0, sentence.find(". "));
  std::vector<std::pair<size_t, std::string>> found;
  for (const char* word : {"coarse", "simulated", "measured", "calibrated"}) {
    const size_t where = sentence.find(word);
    if (where != std::string::npos) found.emplace_back(where, word);
  }
  std::sort(found.begin(), found.end());
  std::string out;
  for (const auto& f : found) out += (out.empty() ? "" : "+") + f.second;
  return out.empty() ? sentence : out;
}

// Why simulating the graph on meta tensors failed, when the description says it did (the
// estimate then comes from elsewhere: "coarse", or measured on probes); "" otherwise.
inline std::string simulation_failure(const std::string& description) {
  const std::string marker = "meta tensors failed: ";
  const size_t at = description.find(marker);
  if (at == std::string::npos) return "";
  std::string reason = description.substr(at + marker.size());
  // The reason ends where the description's next sentence or clause begins.
  for (const char* next : {". It ", ". The ", ". Not ", "; never below"}) {
    const size_t end = reason.find(next);
    if (end != std::string::npos) reason.erase(end);
  }
  while (!reason.empty() && (reason.back() == '.' || reason.back() == ')' || reason.back() == ' ')) reason.pop_back();
  return reason;
}

// How far a result is from PyTorch's: max |a - reference|, against the reference's largest
// magnitude and a floor (for a value that nearly cancels out, see the corpus test).
struct Difference {
  double diff = 0, scale = 0, floor = 0;
  bool within(double rtol) const { return diff <= std::max(rtol * scale, floor); }
  double relative() const { return scale > 0 ? diff / scale : diff; }
};

inline Difference difference(const at::Tensor& a, const at::Tensor& reference, double floor) {
  Difference d;
  d.diff = (a.to(at::kDouble) - reference.to(at::kDouble)).abs().max().item<double>();
  d.scale = reference.abs().max().item<double>();
  d.floor = floor;
  return d;
}

}  // namespace koila_corpus
