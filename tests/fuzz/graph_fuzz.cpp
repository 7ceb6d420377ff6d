// koila_graph_fuzz: a differential fuzzer of koila's core promise. Reads and gradients of a
// lazy graph evaluated in chunks (forced by a small CPU memory budget) must equal those of
// the same graph evaluated unsplit, which must in turn equal the same ops run eagerly on
// concrete tensors.
//
//   usage: koila_graph_fuzz --seed S --graphs N [--first I] [--verbose]
//
// For each graph (fully determined by the seed and the graph index, so that one failing
// graph can be rerun alone with --first I --graphs 1) the fuzzer
//   1. generates a random splittable graph: a lazy batched input (batch dim anywhere, batch
//      size 3..40), a chain of 2..8 per-sample smooth ops with concrete parameters that
//      require grad, and a scalar loss that reduces over the batch;
//   2. evaluates and backpropagates the same ops on the concrete (non-lazy) input, which
//      LibTorch runs eagerly: the independent reference;
//   3. evaluates and backpropagates the lazy graph under the automatic budget (unsplit);
//   4. sets budgets between what is in use and the unsplit run's estimated peak, so that the
//      planner must split the batch, and evaluates, backpropagates (also twice, checking that
//      gradients accumulate) and reads a per-sample intermediate (or a max/min over the
//      batch) in chunks;
// and checks that every value and gradient agrees (float64: relative 1e-9, float32: 1e-4),
// that plans are consistent with the contract, and that freeing every handle gives back
// every byte of tensor memory. Only koila's C API is used, so that the program also runs
// in sanitizer builds (every handle and status is freed: LeakSanitizer stays quiet).
//
// On a failure it prints the seed, the graph index, the graph (ops with shapes; * marks the
// batch dim), the budget and the values that differ, and exits 1.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "../op_tables.h"
#include "common.h"
#include "koila.h"

namespace {

// ---- Constructs that found bugs ------------------------------------------------------------
//
// These constructs each exposed a bug, now fixed, with a regression test in
// tests/test_regressions.cpp; the generator keeps making them:
//   - squeeze at the batch dim (a no-op for the whole batch, not for a chunk of one);
//   - expressions of parameters alone computed at once (p * p), whose eager autograd
//     history every backward of the lazy loss walks again;
//   - gradients that reach a leaf expanded (stride 0): add/sub with a parameter shaped
//     like one sample, an input that requires grad reduced by a sum first;
//   - float32 gelu followed by a permute (LibTorch 1.13's gelu_backward ignored the
//     strides of its incoming gradient).

// ---- Deterministic randomness ---------------------------------------------------------------

// Deterministic randomness (see splitmix64 in common.h).
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() { return splitmix64(state); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int64_t range(int64_t lo, int64_t hi) {  // [lo, hi]
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool chance(double p) { return uniform() < p; }
  template <class V>
  auto& pick(V& v) {
    return v[static_cast<size_t>(range(0, static_cast<int64_t>(std::size(v)) - 1))];
  }
};

uint64_t graph_seed(uint64_t seed, uint64_t index) {
  Rng r(seed ^ (0xD1B54A32D192ED03ull * (index + 1)));
  r.next();
  return r.next();
}

// ---- Failure reporting ---------------------------------------------------------------------

struct Context {
  uint64_t seed = 0;
  int64_t graph = -1;
  std::string description;  // the graph, as generated so far
  std::string stage;        // what the fuzzer was doing
  uint64_t budget = 0;      // the CPU budget in force (0: automatic)
} ctx;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr,
               "graph_fuzz: FAILED\n  seed %" PRIu64 ", graph %" PRId64 " (rerun: --seed %" PRIu64 " --first %" PRId64
               " --graphs 1 --verbose)\n  graph: %s\n  stage: %s\n  budget: %" PRIu64 " bytes%s\n  %s\n",
               ctx.seed, ctx.graph, ctx.seed, ctx.graph, ctx.description.c_str(), ctx.stage.c_str(), ctx.budget,
               ctx.budget == 0 ? " (automatic)" : "", what.c_str());
  std::exit(1);
}

// A failed call is a failure of the fuzz run: print its status and exit.
// While set (inside measured()), an out-of-memory status is a legal refusal: the budget is
// a hard limit, and a run whose estimate fell short even for one sample is refused.
bool g_refusal_is_legal = false;
struct Refused {};

void ok(koila_status* s, const char* what) {
  if (s == nullptr) return;
  if (g_refusal_is_legal && koila_status_code(s) == KOILA_ERROR_OUT_OF_MEMORY) {
    koila_status_free(s);
    throw Refused{};
  }
  const std::string message = std::string(what) + " failed with KOILA_ERROR_" + code_name(koila_status_code(s)) + ": " +
                              koila_status_message(s);
  koila_status_free(s);
  fail(message);
}

// The code of a status that may legally fail; frees it, keeping its message.
koila_code code_of(koila_status* s, std::string* message) {
  const koila_code c = koila_status_code(s);
  if (message) *message = koila_status_message(s);
  koila_status_free(s);
  return c;
}

// ---- Handles ---------------------------------------------------------------------------------

struct TensorFree {
  void operator()(koila_tensor* t) const { koila_tensor_free(t); }
};
using T = std::unique_ptr<koila_tensor, TensorFree>;

// Calls an op that returns a tensor through its first argument; fails the run on error.
#define K(fn, ...)                   \
  [&] {                              \
    koila_tensor* out_ = nullptr;    \
    ok(fn(&out_, __VA_ARGS__), #fn); \
    return T(out_);                  \
  }()

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s) { return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<int64_t>()); }

// "[4, *17, 3]": * marks the batch dim.
std::string shape_str(const Shape& s, int64_t batch_dim = -1) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    if (static_cast<int64_t>(i) == batch_dim) out += "*";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

Shape shape_of(const koila_tensor* t) {
  size_t ndim = 0;
  ok(koila_tensor_shape(t, nullptr, 0, &ndim), "koila_tensor_shape");
  Shape s(ndim);
  ok(koila_tensor_shape(t, s.data(), s.size(), &ndim), "koila_tensor_shape");
  return s;
}

int64_t batch_dim_of(const koila_tensor* t) {
  int64_t b = -2;
  ok(koila_tensor_batch_dim(t, &b), "koila_tensor_batch_dim");
  return b;
}

// The value of a (possibly lazy) tensor as doubles, evaluated under the budget in force.
std::vector<double> read(const koila_tensor* t, bool through_eval = false) {
  T evaluated;
  if (through_eval) {
    evaluated = K(koila_eval, t);
    t = evaluated.get();
  }
  koila_dtype dtype;
  ok(koila_tensor_dtype(t, &dtype), "koila_tensor_dtype");
  const size_t n = static_cast<size_t>(numel(shape_of(t)));
  std::vector<double> out(n);
  if (dtype == KOILA_FLOAT64) {
    ok(koila_tensor_to_host(t, out.data(), n * sizeof(double)), "koila_tensor_to_host");
  } else if (dtype == KOILA_FLOAT32) {
    std::vector<float> f(n);
    ok(koila_tensor_to_host(t, f.data(), n * sizeof(float)), "koila_tensor_to_host");
    std::copy(f.begin(), f.end(), out.begin());
  } else {
    fail("unexpected dtype " + std::to_string(dtype) + " of a value read");
  }
  return out;
}

double item(const koila_tensor* t) {
  double v = 0;
  ok(koila_tensor_item(t, &v), "koila_tensor_item");
  return v;
}

uint64_t current_cpu() {
  uint64_t c = 0;
  ok(koila_memory_stats("cpu", &c, nullptr), "koila_memory_stats");
  return c;
}

uint64_t peak_cpu() {
  uint64_t p = 0;
  ok(koila_memory_stats("cpu", nullptr, &p), "koila_memory_stats");
  return p;
}

void set_budget(uint64_t bytes) {
  ok(koila_set_memory_budget("cpu", bytes), "koila_set_memory_budget");
  ctx.budget = bytes;
}

// ---- Statistics --------------------------------------------------------------------------

struct Stats {
  int64_t chunked_runs = 0, min_chunks = INT64_MAX, max_chunks = 0;
  int64_t runs = 0;              // runs under a forced budget
  int64_t oom_retries = 0;       // plans refused (not one sample fits) before a budget fit
  int64_t nothing_to_split = 0;  // reads estimated to allocate nothing (views of the input)
  int64_t refused_runs = 0;      // forced runs refused as out of memory when they ran
  double max_rel64 = 0, max_rel32 = 0;
  int64_t comparisons = 0;
  bool verbose = false;
} stats;

// ---- Comparing values -------------------------------------------------------------------------

struct Tolerance {
  double rtol;   // relative to the largest magnitude in the compared vectors
  double floor;  // relative to the scale of the whole graph (see compare)
};

// Compares two vectors relative to the larger magnitude among them (chunks sum in a
// different order than the unsplit run, so results differ by rounding only). Values that
// cancel to about zero (e.g. the gradient of a shift before a softmax, or the mean of a
// layer_norm) carry rounding noise of the size of the terms that cancelled, so differences
// up to tol.floor * scale pass too, where `scale` is the largest magnitude of the graph's
// loss and gradients, and at least 1 (inputs and parameters are generated of order 1, so
// the terms are too, even when everything cancels).
void compare(const std::vector<double>& ref, const std::vector<double>& got, const Tolerance& tol,
             double scale_of_graph, bool f64, const std::string& what) {
  const double atol = tol.floor * scale_of_graph;
  ++stats.comparisons;
  if (ref.size() != got.size())
    fail(what + ": sizes differ (" + std::to_string(ref.size()) + " and " + std::to_string(got.size()) + ")");
  double diff = 0, scale = 0;
  size_t worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool nan_a = std::isnan(ref[i]), nan_b = std::isnan(got[i]);
    if (nan_a || nan_b) {
      if (nan_a && nan_b) continue;
      fail(what + ": element " + std::to_string(i) + " is " + num(ref[i]) + " in the reference and " + num(got[i]) +
           " here");
    }
    const double d = std::fabs(ref[i] - got[i]);
    if (d > diff) {
      diff = d;
      worst = i;
    }
    scale = std::max({scale, std::fabs(ref[i]), std::fabs(got[i])});
  }
  const double rel = scale > 0 ? diff / scale : 0;
  if (diff > tol.rtol * scale + atol) {
    std::string values;
    for (size_t i = 0; i < ref.size() && i < 12; ++i)
      values += "\n    [" + std::to_string(i) + "] " + num(ref[i]) + " vs " + num(got[i]);
    if (ref.size() > 12) values += "\n    ...";
    fail(what + ": differs by " + num(diff) + " at element " + std::to_string(worst) + " (" + num(ref[worst]) + " vs " +
         num(got[worst]) + "), relative " + num(rel) + " to the largest magnitude " + num(scale) + "; tolerance " +
         num(tol.rtol) + " relative + " + num(atol) + values);
  }
  // The reported relative difference ignores values at the absolute floor (cancellation).
  const double reported = scale * tol.rtol > atol ? rel : 0;
  double& max_rel = f64 ? stats.max_rel64 : stats.max_rel32;
  max_rel = std::max(max_rel, reported);
}

// ---- The generated graph -------------------------------------------------------------------

// The data a step reads that is lazy in the graph under test and concrete in the eager
// reference: the input, targets, a second input. Parameters and constant indices are
// shared by both builds (captured by the steps directly).
struct Env {
  std::vector<koila_tensor*> data;
  bool lazy = true;                     // the graph under test (else the eager reference)
  bool eager_param_expressions = true;  // expressions of parameters alone computed at once
};

// One op (or a few fused calls, e.g. a residual h + tanh(h)) applied to the current value.
using StepFn = std::function<T(koila_tensor* h, const Env& env)>;

struct Step {
  StepFn fn;
  std::string text;  // e.g. "linear(p0[5, 3], p1[5])"
};

// The shape the generator tracks (and checks against koila's metadata after every step).
struct Cur {
  Shape shape;
  int64_t b = -1;  // batch dim; -1 once a reduction over the batch ended it
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

// Largest number of elements a sample may have (keeps the fuzzer fast).
constexpr int64_t kMaxPerSample = 256;

struct Graph {
  koila_dtype dtype = KOILA_FLOAT64;
  Tolerance tol{1e-9, 1e-11};
  int64_t batch = 0;
  std::vector<T> params;  // concrete leaves that require grad
  std::vector<Shape> param_shapes;
  std::vector<T> consts;  // concrete tensors without grad (indices)
  struct Data {
    T concrete;  // what the eager reference reads
    T lazy;      // the same, wrapped with koila_lazy
  };
  std::vector<Data> data;
  bool input_requires_grad = false;     // data[0] is a leaf whose gradient is checked too
  bool eager_param_expressions = true;  // in the graph under test (else deferred, unbatched)
  std::vector<Step> steps;
  std::string description;

  Env env(bool lazy) const {
    Env e;
    e.lazy = lazy;
    e.eager_param_expressions = eager_param_expressions;
    for (const Data& d : data) e.data.push_back(lazy ? d.lazy.get() : d.concrete.get());
    return e;
  }
  // Every leaf whose gradient is compared.
  std::vector<koila_tensor*> grad_leaves() const {
    std::vector<koila_tensor*> out;
    for (const T& p : params) out.push_back(p.get());
    if (input_requires_grad) out.push_back(data[0].concrete.get());
    return out;
  }
};

T tensor_from(const std::vector<double>& values, const Shape& shape, koila_dtype dtype) {
  if (dtype == KOILA_FLOAT64)
    return K(koila_tensor_from_data, values.data(), values.size() * sizeof(double), KOILA_FLOAT64, shape.data(),
             shape.size(), "cpu");
  std::vector<float> f(values.begin(), values.end());
  return K(koila_tensor_from_data, f.data(), f.size() * sizeof(float), KOILA_FLOAT32, shape.data(), shape.size(),
           "cpu");
}

T int_tensor(const std::vector<int64_t>& values, const Shape& shape) {
  return K(koila_tensor_from_data, values.data(), values.size() * sizeof(int64_t), KOILA_INT64, shape.data(),
           shape.size(), "cpu");
}

// A new handle to the same value: the same recipe when lazy, the tensor itself (shared)
// when concrete.
T same(koila_tensor* t, int64_t batch_dim) {
  int lazy = 0;
  ok(koila_tensor_is_lazy(t, &lazy), "koila_tensor_is_lazy");
  return lazy ? K(koila_lazy, t, batch_dim) : K(koila_eval, t);
}

// A parameter as an operand of an expression of parameters alone: the parameter itself,
// so that the expression is computed at once (always in the eager reference), or deferred
// with koila_lazy(p, KOILA_NO_BATCH) in some graphs under test.
T param_operand(koila_tensor* p, const Env& e) {
  if (e.eager_param_expressions || !e.lazy) return K(koila_eval, p);
  return K(koila_lazy, p, KOILA_NO_BATCH);
}

using UnaryFn = koila_status* (*)(koila_tensor**, const koila_tensor*);
using BinaryFn = koila_status* (*)(koila_tensor**, const koila_tensor*, const koila_tensor*);
using ScalarFn = koila_status* (*)(koila_tensor**, const koila_tensor*, double);
using ReduceFn = koila_status* (*)(koila_tensor**, const koila_tensor*, const int64_t*, size_t, int);

struct NamedUnary {
  const char* name;
  UnaryFn fn;
};
// Smooth and bounded (or slowly growing) ops: no kinks whose side could flip.
#define ROW(NAME) {#NAME, koila_##NAME},
const NamedUnary kUnary[] = {KOILA_SMOOTH_UNARY_OPS(ROW)};
#undef ROW

// Builds a random splittable graph, step by step: each step is applied to the lazy value at
// once (its shape and batch dim checked against what the generator tracks) and recorded,
// so that it can be replayed on the concrete data for the eager reference.
class Generator {
 public:
  Generator(Graph& g, Rng& rng) : g_(g), rng_(rng) {}

  // Returns the lazy loss; `probe` gets a lazy value to read in chunks too.
  T build(T* probe, std::string* probe_text) {
    g_.dtype = rng_.chance(0.2) ? KOILA_FLOAT32 : KOILA_FLOAT64;
    if (g_.dtype == KOILA_FLOAT32) g_.tol = {1e-4, 1e-5};
    g_.batch = rng_.range(3, 40);
    g_.description =
        std::string(g_.dtype == KOILA_FLOAT64 ? "float64" : "float32") + ", batch " + std::to_string(g_.batch) + ":";
    start();

    const int64_t ops = rng_.range(2, 8);
    std::vector<T> chain;  // a handle to each per-sample intermediate (probe candidates)
    for (int64_t i = 0; i < ops; ++i) {
      bool applied = false;
      for (int attempt = 0; attempt < 200 && !applied; ++attempt) applied = random_op();
      if (!applied) fail("no op applies to " + shape_str(cur_.shape, cur_.b));
      chain.push_back(same(h_.get(), cur_.b));
    }
    if (g_.params.empty() && !g_.input_requires_grad) {  // something must receive a gradient
      op_binary_param();
      chain.push_back(same(h_.get(), cur_.b));
    }

    T& picked = rng_.pick(chain);
    const Shape s = shape_of(picked.get());
    const int64_t b = batch_dim_of(picked.get());
    *probe_text = "intermediate " + shape_str(s, b);
    if (rng_.chance(0.25)) {  // a max or min over the batch (combined across chunks; forward only)
      std::vector<int64_t> dims{b};
      for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
        if (d != b && rng_.chance(0.3)) dims.push_back(d);
      const bool max = rng_.chance(0.5);
      const int keep = rng_.chance(0.5);
      *probe = max ? K(koila_amax, picked.get(), dims.data(), dims.size(), keep)
                   : K(koila_amin, picked.get(), dims.data(), dims.size(), keep);
      *probe_text = std::string(max ? "amax" : "amin") + " over dims " + shape_str(dims) + (keep ? " (keepdim)" : "") +
                    " of " + *probe_text;
    } else {
      *probe = std::move(picked);
    }
    loss();
    if (numel(shape_of(h_.get())) != 1) fail("the loss is not a scalar: " + shape_str(shape_of(h_.get())));
    return std::move(h_);
  }

  // The same steps on the concrete data: LibTorch computes them eagerly.
  static T replay(const Graph& g) {
    const Env env = g.env(false);
    T h;
    for (const Step& s : g.steps) h = s.fn(h.get(), env);
    return h;
  }

 private:
  Graph& g_;
  Rng& rng_;
  Cur cur_;
  T h_;  // the current lazy value

  int64_t per_sample(const Cur& c) const { return numel(c.shape) / (c.b >= 0 ? g_.batch : 1); }
  // A dim, sometimes written from the end (negative), as callers may.
  int64_t spell(int64_t d, int64_t rank) { return rng_.chance(0.3) ? d - rank : d; }
  std::vector<int64_t> non_batch_dims() const {
    std::vector<int64_t> out;
    for (int64_t d = 0; d < cur_.rank(); ++d)
      if (d != cur_.b) out.push_back(d);
    return out;
  }

  // Applies a step to the lazy value, checks koila's metadata against `next`, records it.
  void add(const std::string& text, StepFn fn, const Cur& next) {
    ctx.stage = "building " + text;
    T value = fn(h_.get(), g_.env(true));
    const Shape s = shape_of(value.get());
    const int64_t b = batch_dim_of(value.get());
    if (s != next.shape || b != next.b)
      fail("after " + text + " koila reports " + shape_str(s, b) + " where the fuzzer expected " +
           shape_str(next.shape, next.b));
    g_.steps.push_back({std::move(fn), text});
    g_.description += (g_.steps.size() == 1 ? " " : " -> ") + text + " " + shape_str(next.shape, next.b);
    ctx.description = g_.description;
    h_ = std::move(value);
    cur_ = next;
  }

  // A parameter of `shape` with values in offset +- scale; sometimes an existing one of the
  // same shape is used again (its gradient then sums over both uses).
  koila_tensor* param(const Shape& shape, double scale, double offset, std::string* name) {
    size_t index = g_.params.size();
    for (size_t i = 0; i < g_.params.size(); ++i)
      if (g_.param_shapes[i] == shape && offset == 0 && rng_.chance(0.3)) {
        index = i;
        break;
      }
    if (index == g_.params.size()) {
      std::vector<double> v(static_cast<size_t>(numel(shape)));
      for (double& x : v) x = offset + rng_.uniform(-scale, scale);
      T t = tensor_from(v, shape, g_.dtype);
      ok(koila_tensor_set_requires_grad(t.get(), 1), "koila_tensor_set_requires_grad");
      g_.params.push_back(std::move(t));
      g_.param_shapes.push_back(shape);
    }
    *name = "p" + std::to_string(index) + shape_str(shape);
    return g_.params[index].get();
  }

  // A data tensor: lazy with `batch_dim` in the graph under test, concrete in the reference.
  size_t data(T concrete, int64_t batch_dim) {
    Graph::Data d;
    d.lazy = K(koila_lazy, concrete.get(), batch_dim);
    d.concrete = std::move(concrete);
    g_.data.push_back(std::move(d));
    return g_.data.size() - 1;
  }
  size_t uniform_data(const Shape& shape, int64_t batch_dim, double lo, double hi) {
    std::vector<double> v(static_cast<size_t>(numel(shape)));
    for (double& x : v) x = rng_.uniform(lo, hi);
    return data(tensor_from(v, shape, g_.dtype), batch_dim);
  }

  // ---- The input ---------------------------------------------------------------------------

  void start() {
    Cur c;
    if (rng_.chance(0.15)) {  // token ids [B, L] or [L, B] through an embedding -> [..., E]
      const int64_t len = rng_.range(1, 5), vocab = rng_.range(2, 9), dim = rng_.range(1, 8);
      const bool batch_first = rng_.chance(0.5);
      const Shape ids_shape = batch_first ? Shape{g_.batch, len} : Shape{len, g_.batch};
      c.b = batch_first ? 0 : 1;
      std::vector<int64_t> ids(static_cast<size_t>(numel(ids_shape)));
      for (int64_t& id : ids) id = rng_.range(0, vocab - 1);
      const size_t idx = data(int_tensor(ids, ids_shape), c.b);
      std::string name;
      koila_tensor* w = param({vocab, dim}, 1.0, 0, &name);
      c.shape = ids_shape;
      c.shape.push_back(dim);
      add(
          "embedding(" + name + ", ids " + shape_str(ids_shape, c.b) + ")",
          [w, idx](koila_tensor*, const Env& e) { return K(koila_embedding, w, e.data[idx]); }, c);
      return;
    }
    const int64_t extra = rng_.chance(0.1) ? 0 : rng_.range(1, 3);
    for (int64_t i = 0; i < extra; ++i) c.shape.push_back(rng_.range(1, 6));
    c.b = rng_.range(0, extra);
    c.shape.insert(c.shape.begin() + c.b, g_.batch);
    const size_t idx = uniform_data(c.shape, c.b, -1.5, 1.5);
    g_.input_requires_grad = rng_.chance(0.3);
    g_.eager_param_expressions = rng_.chance(0.5);
    if (g_.input_requires_grad)
      ok(koila_tensor_set_requires_grad(g_.data[idx].concrete.get(), 1), "koila_tensor_set_requires_grad");
    add(
        g_.input_requires_grad ? "x (requires grad)" : "x",
        [idx, b = c.b](koila_tensor*, const Env& e) { return same(e.data[idx], b); }, c);
  }

  // ---- Per-sample ops (each returns false when it does not apply to the current shape) -------

  bool random_op() {
    using Op = bool (Generator::*)();
    static const Op ops[] = {
        &Generator::op_linear,     &Generator::op_linear,       &Generator::op_unary,        &Generator::op_exp_tanh,
        &Generator::op_scalar,     &Generator::op_binary_param, &Generator::op_binary_param, &Generator::op_softmax,
        &Generator::op_layer_norm, &Generator::op_matmul,       &Generator::op_transpose,    &Generator::op_permute,
        &Generator::op_unsqueeze,  &Generator::op_squeeze,      &Generator::op_reshape,      &Generator::op_flatten,
        &Generator::op_reduce,     &Generator::op_conv1d,       &Generator::op_residual,     &Generator::op_cat,
        &Generator::op_stack,      &Generator::op_narrow,       &Generator::op_index_select, &Generator::op_attention,
        &Generator::op_dropout,    &Generator::op_second_input};
    return (this->*rng_.pick(ops))();
  }

  bool op_linear() {
    if (cur_.b == cur_.rank() - 1) return false;  // would contract the batch
    const int64_t in = cur_.shape.back(), out = rng_.range(1, 8);
    Cur next = cur_;
    next.shape.back() = out;
    if (per_sample(next) > kMaxPerSample) return false;
    std::string wn, bn;
    koila_tensor* w = param({out, in}, 1.0 / std::sqrt(static_cast<double>(in)), 0, &wn);
    koila_tensor* bias = rng_.chance(0.7) ? param({out}, 0.5, 0, &bn) : nullptr;
    add(
        "linear(" + wn + (bias ? ", " + bn : "") + ")",
        [w, bias](koila_tensor* h, const Env&) { return K(koila_linear, h, w, bias); }, next);
    return true;
  }

  // A smooth unary op.
  NamedUnary unary() { return rng_.pick(kUnary); }

  bool op_unary() {
    const NamedUnary u = unary();
    add(
        u.name, [fn = u.fn](koila_tensor* h, const Env&) { return K(fn, h); }, cur_);
    return true;
  }

  bool op_exp_tanh() {  // exp stays bounded on tanh'd values
    add(
        "exp(tanh)",
        [](koila_tensor* h, const Env&) {
          T t = K(koila_tanh, h);
          return K(koila_exp, t.get());
        },
        cur_);
    return true;
  }

  bool op_scalar() {
    struct Named {
      const char* name;
      ScalarFn fn;
      double s;
    };
    const double sign = rng_.chance(0.5) ? 1 : -1;
    const Named ops[] = {{"mul_scalar", koila_mul_scalar, rng_.uniform(-2, 2)},
                         {"add_scalar", koila_add_scalar, rng_.uniform(-2, 2)},
                         {"sub_scalar", koila_sub_scalar, rng_.uniform(-2, 2)},
                         {"div_scalar", koila_div_scalar, sign * rng_.uniform(0.5, 2)},
                         {"pow_scalar", koila_pow_scalar, 2.0}};
    const Named op = rng_.pick(ops);
    add(
        std::string(op.name) + "(" + num(op.s) + ")",
        [fn = op.fn, s = op.s](koila_tensor* h, const Env&) { return K(fn, h, s); }, cur_);
    return true;
  }

  // add/sub/mul/div with a parameter that broadcasts: its trailing dims are h's or 1, and 1
  // at the batch dim; sometimes one more (leading) dim than h, which moves the batch.
  bool op_binary_param() {
    struct Named {
      const char* name;
      BinaryFn fn;
    };
    const Named ops[] = {{"add", koila_add}, {"sub", koila_sub}, {"mul", koila_mul}, {"div", koila_div}};
    Named op = rng_.pick(ops);
    const bool div = op.fn == koila_div;
    const int64_t rank = cur_.rank(), k = rng_.range(1, rank);
    Shape ps(cur_.shape.end() - k, cur_.shape.end());
    for (int64_t i = 0; i < k; ++i)
      if (rank - k + i == cur_.b || rng_.chance(0.4)) ps[i] = 1;
    Cur next = cur_;
    if (k == rank && rank < 5 && rng_.chance(0.2)) {
      ps.insert(ps.begin(), 1);
      next.shape.insert(next.shape.begin(), 1);
      next.b += 1;
    }
    std::string name;
    koila_tensor* p = div ? param(ps, 0.5, 1.0, &name) : param(ps, 1.0, 0, &name);
    const bool left = !div && rng_.chance(0.4);
    const bool squashed = !div && rng_.chance(0.2);  // tanh(p): an expression of parameters alone
    if (squashed) name = "tanh(" + name + ")";
    add(
        std::string(op.name) + (left ? "(" + name + ", h)" : "(h, " + name + ")"),
        [fn = op.fn, p, left, squashed](koila_tensor* h, const Env& e) {
          T operand;
          if (squashed) {
            T q = param_operand(p, e);
            operand = K(koila_tanh, q.get());
          } else {
            operand = K(koila_eval, p);
          }
          return left ? K(fn, operand.get(), h) : K(fn, h, operand.get());
        },
        next);
    return true;
  }

  bool op_softmax() {
    const std::vector<int64_t> dims = non_batch_dims();
    if (dims.empty()) return false;
    const int64_t d = spell(rng_.pick(dims), cur_.rank());
    const bool log = rng_.chance(0.5);
    add(
        std::string(log ? "log_softmax" : "softmax") + "(dim " + std::to_string(d) + ")",
        [d, log](koila_tensor* h, const Env&) { return log ? K(koila_log_softmax, h, d) : K(koila_softmax, h, d); },
        cur_);
    return true;
  }

  bool op_layer_norm() {
    const int64_t max_k = std::min<int64_t>(cur_.rank() - 1 - cur_.b, 3);
    if (max_k < 1) return false;
    const int64_t k = rng_.range(1, max_k);
    const Shape normalized(cur_.shape.end() - k, cur_.shape.end());
    std::string wn, bn;
    koila_tensor* w = rng_.chance(0.6) ? param(normalized, 0.3, 1.0, &wn) : nullptr;
    koila_tensor* bias = rng_.chance(0.6) ? param(normalized, 0.3, 0, &bn) : nullptr;
    // Over nearly equal values (one element, or h next to sin(h) for small h) layer_norm
    // multiplies rounding differences by up to 1 / sqrt(eps); float32 keeps that under its
    // tolerance with a larger eps.
    const double eps = g_.dtype == KOILA_FLOAT32 ? 0.1 : 1e-5;
    add(
        "layer_norm(" + shape_str(normalized) + (w ? ", " + wn : "") + (bias ? ", " + bn : "") + ", eps " + num(eps) +
            ")",
        [normalized, w, bias, eps](koila_tensor* h, const Env&) {
          return K(koila_layer_norm, h, normalized.data(), normalized.size(), w, bias, eps);
        },
        cur_);
    return true;
  }

  bool op_matmul() {
    const int64_t rank = cur_.rank(), b = cur_.b;
    if (rank < 2) return false;
    const int kind = static_cast<int>(rng_.range(0, 3));
    std::string name;
    Cur next = cur_;
    if (kind == 0 || kind == 3) {  // h @ W, W [K, M] (kind 3: W [1, K, M], a broadcast leading dim)
      if (b == rank - 1) return false;
      const int64_t in = cur_.shape.back(), m = rng_.range(1, 8);
      next.shape.back() = m;
      Shape ws{in, m};
      if (kind == 3) {
        if (rank > 4) return false;
        ws.insert(ws.begin(), 1);
        if (rank == 2) {  // [N, K] @ [1, K, M] -> [1, N, M]
          next.shape.insert(next.shape.begin(), 1);
          next.b += 1;
        }
      }
      if (per_sample(next) > kMaxPerSample) return false;
      koila_tensor* w = param(ws, 1.0 / std::sqrt(static_cast<double>(in)), 0, &name);
      add(
          "matmul(h, " + name + ")", [w](koila_tensor* h, const Env&) { return K(koila_matmul, h, w); }, next);
    } else if (kind == 1) {  // W @ h, W [M, N]
      if (b == rank - 2) return false;
      const int64_t in = cur_.shape[rank - 2], m = rng_.range(1, 8);
      next.shape[rank - 2] = m;
      if (per_sample(next) > kMaxPerSample) return false;
      koila_tensor* w = param({m, in}, 1.0 / std::sqrt(static_cast<double>(in)), 0, &name);
      add(
          "matmul(" + name + ", h)", [w](koila_tensor* h, const Env&) { return K(koila_matmul, w, h); }, next);
    } else {  // h @ v, v [K]: drops the last dim
      if (b == rank - 1) return false;
      const int64_t in = cur_.shape.back();
      next.shape.pop_back();
      koila_tensor* v = param({in}, 1.0 / std::sqrt(static_cast<double>(in)), 0, &name);
      add(
          "matmul(h, " + name + ")", [v](koila_tensor* h, const Env&) { return K(koila_matmul, h, v); }, next);
    }
    return true;
  }

  bool op_transpose() {
    const int64_t rank = cur_.rank();
    if (rank < 2) return false;
    const int64_t d0 = rng_.range(0, rank - 1);
    int64_t d1 = rng_.range(0, rank - 2);
    if (d1 >= d0) ++d1;
    Cur next = cur_;
    std::swap(next.shape[d0], next.shape[d1]);
    next.b = cur_.b == d0 ? d1 : cur_.b == d1 ? d0 : cur_.b;
    const int64_t a = spell(d0, rank), c = spell(d1, rank);
    add(
        "transpose(" + std::to_string(a) + ", " + std::to_string(c) + ")",
        [a, c](koila_tensor* h, const Env&) { return K(koila_transpose, h, a, c); }, next);
    return true;
  }

  bool op_permute() {
    const int64_t rank = cur_.rank();
    if (rank < 2) return false;
    std::vector<int64_t> order(static_cast<size_t>(rank));
    std::iota(order.begin(), order.end(), 0);
    for (int64_t i = rank - 1; i > 0; --i) std::swap(order[i], order[rng_.range(0, i)]);
    Cur next = cur_;
    for (int64_t i = 0; i < rank; ++i) {
      next.shape[i] = cur_.shape[order[i]];
      if (order[i] == cur_.b) next.b = i;
    }
    std::vector<int64_t> spelled;
    for (int64_t d : order) spelled.push_back(spell(d, rank));
    add(
        "permute" + shape_str(spelled),
        [spelled](koila_tensor* h, const Env&) { return K(koila_permute, h, spelled.data(), spelled.size()); }, next);
    return true;
  }

  bool op_unsqueeze() {
    const int64_t rank = cur_.rank();
    if (rank >= 5) return false;
    const int64_t d = rng_.range(0, rank);
    Cur next = cur_;
    next.shape.insert(next.shape.begin() + d, 1);
    if (cur_.b >= d) next.b += 1;
    const int64_t spelled = spell(d, rank + 1);
    add(
        "unsqueeze(" + std::to_string(spelled) + ")",
        [spelled](koila_tensor* h, const Env&) { return K(koila_unsqueeze, h, spelled); }, next);
    return true;
  }

  // Squeezing a dim of size 1 removes it (moving the batch when it comes first); other dims
  // are left as they are, the batch dim too (it has the batch size, at least 3).
  bool op_squeeze() {
    const int64_t rank = cur_.rank();
    std::vector<int64_t> dims = non_batch_dims();
    dims.push_back(cur_.b);
    if (dims.empty()) return false;
    const int64_t d = rng_.pick(dims);
    Cur next = cur_;
    if (d != cur_.b && cur_.shape[d] == 1) {
      next.shape.erase(next.shape.begin() + d);
      if (cur_.b > d) next.b -= 1;
    }
    const int64_t spelled = spell(d, rank);
    add(
        "squeeze(" + std::to_string(spelled) + ")",
        [spelled](koila_tensor* h, const Env&) { return K(koila_squeeze, h, spelled); }, next);
    return true;
  }

  // Splits a non-batch dim in two, merges two adjacent non-batch dims, or adds or removes a
  // dim of size 1; the shape is written out with the literal batch size (sometimes with -1
  // for one other dim), as callers do.
  bool op_reshape() {
    const int64_t rank = cur_.rank(), b = cur_.b;
    Cur next = cur_;
    std::string how;
    switch (rng_.range(0, 3)) {
      case 0: {  // split
        std::vector<int64_t> composite;
        for (int64_t d : non_batch_dims())
          if (cur_.shape[d] == 4 || cur_.shape[d] == 6 || cur_.shape[d] == 8) composite.push_back(d);
        if (composite.empty() || rank >= 5) return false;
        const int64_t d = rng_.pick(composite), size = cur_.shape[d];
        const int64_t f = size == 6 ? (rng_.chance(0.5) ? 2 : 3) : 2;
        next.shape[d] = f;
        next.shape.insert(next.shape.begin() + d + 1, size / f);
        if (b > d) next.b += 1;
        how = "split";
        break;
      }
      case 1: {  // merge
        std::vector<int64_t> starts;
        for (int64_t d = 0; d + 1 < rank; ++d)
          if (d != b && d + 1 != b) starts.push_back(d);
        if (starts.empty()) return false;
        const int64_t d = rng_.pick(starts);
        next.shape[d] *= next.shape[d + 1];
        next.shape.erase(next.shape.begin() + d + 1);
        if (b > d + 1) next.b -= 1;
        how = "merge";
        break;
      }
      case 2: {  // insert a 1
        if (rank >= 5) return false;
        const int64_t d = rng_.range(0, rank);
        next.shape.insert(next.shape.begin() + d, 1);
        if (b >= d) next.b += 1;
        how = "insert 1";
        break;
      }
      default: {  // remove a 1
        std::vector<int64_t> ones;
        for (int64_t d : non_batch_dims())
          if (cur_.shape[d] == 1) ones.push_back(d);
        if (ones.empty()) return false;
        const int64_t d = rng_.pick(ones);
        next.shape.erase(next.shape.begin() + d);
        if (b > d) next.b -= 1;
        how = "remove 1";
        break;
      }
    }
    Shape target = next.shape;
    if (rng_.chance(0.3)) {
      std::vector<int64_t> others;
      for (int64_t d = 0; d < next.rank(); ++d)
        if (d != next.b) others.push_back(d);
      if (!others.empty()) target[rng_.pick(others)] = -1;
    }
    add(
        "reshape" + shape_str(target) + " (" + how + ")",
        [target](koila_tensor* h, const Env&) { return K(koila_reshape, h, target.data(), target.size()); }, next);
    return true;
  }

  // Flattens a range of dims that leaves the batch whole: a range without the batch dim, or
  // one with it whose other dims have size 1.
  bool op_flatten() {
    const int64_t rank = cur_.rank(), b = cur_.b;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int64_t s = 0; s < rank; ++s)
      for (int64_t e = s + 1; e < rank; ++e) {
        bool ok_range = true;
        if (b >= s && b <= e)
          for (int64_t d = s; d <= e; ++d) ok_range &= d == b || cur_.shape[d] == 1;
        if (ok_range) ranges.emplace_back(s, e);
      }
    if (ranges.empty()) return false;
    const auto [s, e] = rng_.pick(ranges);
    Cur next = cur_;
    int64_t merged = 1;
    for (int64_t d = s; d <= e; ++d) merged *= cur_.shape[d];
    next.shape.erase(next.shape.begin() + s + 1, next.shape.begin() + e + 1);
    next.shape[s] = merged;
    if (b > e)
      next.b -= e - s;
    else if (b >= s)
      next.b = s;
    const int64_t a = spell(s, rank), c = spell(e, rank);
    add(
        "flatten(" + std::to_string(a) + ", " + std::to_string(c) + ")",
        [a, c](koila_tensor* h, const Env&) { return K(koila_flatten, h, a, c); }, next);
    return true;
  }

  bool op_reduce() {  // sum or mean over some non-batch dims
    std::vector<int64_t> dims;
    for (int64_t d : non_batch_dims())
      if (rng_.chance(0.5)) dims.push_back(d);
    if (dims.empty()) return false;
    const bool mean = rng_.chance(0.5);
    const int keep = rng_.chance(0.4);
    Cur next = cur_;
    if (!keep) {
      for (auto it = dims.rbegin(); it != dims.rend(); ++it) next.shape.erase(next.shape.begin() + *it);
      next.b -= std::count_if(dims.begin(), dims.end(), [&](int64_t d) { return d < cur_.b; });
    } else {
      for (int64_t d : dims) next.shape[d] = 1;
    }
    std::vector<int64_t> spelled;
    for (int64_t d : dims) spelled.push_back(spell(d, cur_.rank()));
    add(
        std::string(mean ? "mean" : "sum") + shape_str(spelled) + (keep ? " (keepdim)" : ""),
        [spelled, mean, keep](koila_tensor* h, const Env&) {
          return mean ? K(koila_mean, h, spelled.data(), spelled.size(), keep)
                      : K(koila_sum, h, spelled.data(), spelled.size(), keep);
        },
        next);
    return true;
  }

  // conv1d on [B, C, L] (or [B, L] seen as one channel).
  bool op_conv1d() {
    const int64_t rank = cur_.rank();
    if (cur_.b != 0 || (rank != 3 && rank != 2)) return false;
    const bool unsqueeze = rank == 2;
    const int64_t c = unsqueeze ? 1 : cur_.shape[1], len = cur_.shape[rank - 1];
    const int64_t pad = rng_.range(0, 1), stride = rng_.range(1, 2), dilation = rng_.range(1, 2);
    const int64_t span = len + 2 * pad;
    const int64_t k = rng_.range(1, 3);
    if (dilation * (k - 1) + 1 > span) return false;
    const int64_t groups = c % 2 == 0 && rng_.chance(0.3) ? 2 : 1;
    const int64_t out_c = groups * rng_.range(1, 3);
    const int64_t out_len = (span - dilation * (k - 1) - 1) / stride + 1;
    Cur next;
    next.shape = {g_.batch, out_c, out_len};
    next.b = 0;
    if (per_sample(next) > kMaxPerSample) return false;
    std::string wn, bn;
    koila_tensor* w = param({out_c, c / groups, k}, 1.0 / std::sqrt(static_cast<double>(c / groups * k)), 0, &wn);
    koila_tensor* bias = rng_.chance(0.5) ? param({out_c}, 0.3, 0, &bn) : nullptr;
    add(
        std::string(unsqueeze ? "unsqueeze(1), " : "") + "conv1d(" + wn + (bias ? ", " + bn : "") + ", stride " +
            std::to_string(stride) + ", padding " + std::to_string(pad) + ", dilation " + std::to_string(dilation) +
            ", groups " + std::to_string(groups) + ")",
        [=](koila_tensor* h, const Env&) {
          T in = unsqueeze ? K(koila_unsqueeze, h, 1) : same(h, 0);
          return K(koila_conv1d, in.get(), w, bias, &stride, &pad, &dilation, groups);
        },
        next);
    return true;
  }

  // A value used twice: h + f(h) or h * sigmoid(h).
  bool op_residual() {
    const bool gate = rng_.chance(0.3);
    const NamedUnary u = unary();
    if (gate) {
      add(
          "h * sigmoid(h)",
          [](koila_tensor* h, const Env&) {
            T s = K(koila_sigmoid, h);
            return K(koila_mul, h, s.get());
          },
          cur_);
    } else {
      add(
          std::string("h + ") + u.name + "(h)",
          [fn = u.fn](koila_tensor* h, const Env&) {
            T f = K(fn, h);
            return K(koila_add, h, f.get());
          },
          cur_);
    }
    return true;
  }

  bool op_cat() {  // cat([h, tanh(h)]) along a non-batch dim
    std::vector<int64_t> dims;
    for (int64_t d : non_batch_dims())
      if (cur_.shape[d] <= 4) dims.push_back(d);
    if (dims.empty()) return false;
    const int64_t d = rng_.pick(dims);
    Cur next = cur_;
    next.shape[d] *= 2;
    if (per_sample(next) > kMaxPerSample) return false;
    const int64_t spelled = spell(d, cur_.rank());
    const bool first = rng_.chance(0.5);
    add(
        std::string(first ? "cat([h, tanh(h)], " : "cat([tanh(h), h], ") + std::to_string(spelled) + ")",
        [spelled, first](koila_tensor* h, const Env&) {
          T t = K(koila_tanh, h);
          koila_tensor* parts[2] = {first ? h : t.get(), first ? t.get() : h};
          return K(koila_cat, parts, 2, spelled);
        },
        next);
    return true;
  }

  bool op_stack() {  // stack([h, sin(h)]) at a new dim
    const int64_t rank = cur_.rank();
    if (rank >= 5) return false;
    const int64_t d = rng_.range(0, rank);
    Cur next = cur_;
    next.shape.insert(next.shape.begin() + d, 2);
    if (cur_.b >= d) next.b += 1;
    if (per_sample(next) > kMaxPerSample) return false;
    const int64_t spelled = spell(d, rank + 1);
    add(
        "stack([h, sin(h)], " + std::to_string(spelled) + ")",
        [spelled](koila_tensor* h, const Env&) {
          T s = K(koila_sin, h);
          koila_tensor* parts[2] = {h, s.get()};
          return K(koila_stack, parts, 2, spelled);
        },
        next);
    return true;
  }

  bool op_narrow() {
    std::vector<int64_t> dims;
    for (int64_t d : non_batch_dims())
      if (cur_.shape[d] >= 2) dims.push_back(d);
    if (dims.empty()) return false;
    const int64_t d = rng_.pick(dims), size = cur_.shape[d];
    const int64_t length = rng_.range(1, size - 1), start = rng_.range(0, size - length);
    Cur next = cur_;
    next.shape[d] = length;
    const int64_t spelled = spell(d, cur_.rank());
    add(
        "narrow(" + std::to_string(spelled) + ", " + std::to_string(start) + ", " + std::to_string(length) + ")",
        [spelled, start, length](koila_tensor* h, const Env&) { return K(koila_narrow, h, spelled, start, length); },
        next);
    return true;
  }

  bool op_index_select() {  // along a non-batch dim, indices may repeat
    const std::vector<int64_t> dims = non_batch_dims();
    if (dims.empty()) return false;
    const int64_t d = rng_.pick(dims), size = cur_.shape[d];
    const int64_t n = rng_.range(1, std::min<int64_t>(size + 2, 8));
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t& i : idx) i = rng_.range(0, size - 1);
    Cur next = cur_;
    next.shape[d] = n;
    if (per_sample(next) > kMaxPerSample) return false;
    g_.consts.push_back(int_tensor(idx, {n}));
    koila_tensor* index = g_.consts.back().get();
    const int64_t spelled = spell(d, cur_.rank());
    add(
        "index_select(" + std::to_string(spelled) + ", " + shape_str(idx) + ")",
        [spelled, index](koila_tensor* h, const Env&) { return K(koila_index_select, h, spelled, index); }, next);
    return true;
  }

  // Self-attention over the last two dims (sequence, features), batch among the leading dims.
  bool op_attention() {
    const int64_t rank = cur_.rank();
    if (rank < 3 || cur_.b >= rank - 2) return false;
    const int causal = rng_.chance(0.4);
    const int64_t len = cur_.shape[rank - 2];
    std::string name;
    koila_tensor* mask = rng_.chance(0.3) ? param({len, len}, 0.5, 0, &name) : nullptr;
    add(
        std::string("attention(h, h, h") + (mask ? ", mask " + name : "") + (causal ? ", causal" : "") + ")",
        [mask, causal](koila_tensor* h, const Env&) {
          return K(koila_scaled_dot_product_attention, h, h, h, mask, causal);
        },
        cur_);
    return true;
  }

  bool op_dropout() {  // not training: passes the input through
    add(
        "dropout(0.3, eval)", [](koila_tensor* h, const Env&) { return K(koila_dropout, h, 0.3, 0); }, cur_);
    return true;
  }

  // A second lazy input, combined elementwise. It carries the batch at the same dim as h,
  // or is stored with the batch at dim 0 and transposed into place (so that chunks narrow
  // the two inputs along different dims of their storage).
  bool op_second_input() {
    struct Named {
      const char* name;
      BinaryFn fn;
    };
    const Named ops[] = {{"add", koila_add}, {"sub", koila_sub}, {"mul", koila_mul}};
    const Named op = rng_.pick(ops);
    const int64_t b = cur_.b;
    const bool transposed = b != 0 && rng_.chance(0.4);
    Shape stored = cur_.shape;
    if (transposed) std::swap(stored[0], stored[b]);
    const size_t idx = uniform_data(stored, transposed ? 0 : b, -1, 1);
    const bool left = rng_.chance(0.5);
    const std::string z = transposed ? "transpose(z, 0, " + std::to_string(b) + ")" : "z";
    add(
        std::string(op.name) + (left ? "(" + z + ", h)" : "(h, " + z + ")") + " with a second lazy input z " +
            shape_str(stored, transposed ? 0 : b),
        [fn = op.fn, idx, left, transposed, b](koila_tensor* h, const Env& e) {
          T zt = transposed ? K(koila_transpose, e.data[idx], 0, b) : same(e.data[idx], b);
          return left ? K(fn, zt.get(), h) : K(fn, h, zt.get());
        },
        cur_);
    return true;
  }

  // ---- The loss ----------------------------------------------------------------------------

  void loss() {
    const double r = rng_.uniform();
    if (r < 0.22) {
      reduce_all();
    } else if (r < 0.42) {
      two_stage();
    } else if (r < 0.62) {
      elementwise_loss(false);
    } else if (r < 0.87) {
      if (!class_loss()) elementwise_loss(false);
    } else {
      elementwise_loss(true);
    }
    if (rng_.chance(0.25)) tail();
  }

  void reduce_all() {
    const bool mean = rng_.chance(0.5), explicit_dims = rng_.chance(0.3);
    const int keep = rng_.chance(0.3);
    std::vector<int64_t> dims;
    if (explicit_dims)
      for (int64_t d = 0; d < cur_.rank(); ++d) dims.push_back(d);
    Cur next;
    next.shape = keep ? Shape(cur_.shape.size(), 1) : Shape{};
    add(
        std::string(mean ? "mean" : "sum") + (explicit_dims ? shape_str(dims) : " over all") +
            (keep ? " (keepdim)" : ""),
        [dims, mean, keep](koila_tensor* h, const Env&) {
          const int64_t* d = dims.empty() ? nullptr : dims.data();
          return mean ? K(koila_mean, h, d, dims.size(), keep) : K(koila_sum, h, d, dims.size(), keep);
        },
        next);
  }

  // A reduction over the batch dim and some others, then a tail on the unbatched result
  // (tanh, scaling, squaring, a parameter), reduced to a scalar; sometimes plus a second
  // reduction over the batch of the same per-sample value.
  void two_stage() {
    std::vector<int64_t> dims{cur_.b};
    for (int64_t d : non_batch_dims())
      if (rng_.chance(0.4)) dims.push_back(d);
    std::sort(dims.begin(), dims.end());
    const bool mean = rng_.chance(0.5);
    const int keep = rng_.chance(0.4);
    Shape reduced;
    for (int64_t d = 0; d < cur_.rank(); ++d) {
      const bool gone = std::find(dims.begin(), dims.end(), d) != dims.end();
      if (!gone)
        reduced.push_back(cur_.shape[d]);
      else if (keep)
        reduced.push_back(1);
    }
    // The tail: 0..2 of tanh, mul_scalar, square, mul by a parameter.
    std::vector<int> tail_ops;
    std::string tail_text;
    koila_tensor* tp = nullptr;
    const int64_t n_tail = rng_.range(0, 2);
    for (int64_t i = 0; i < n_tail; ++i) {
      const int op = static_cast<int>(rng_.range(0, 3));
      if (op == 3 && (tp != nullptr || reduced.empty())) continue;
      tail_ops.push_back(op);
      if (op == 3) {
        Shape ps = reduced;
        for (int64_t& s : ps)
          if (rng_.chance(0.4)) s = 1;
        std::string name;
        tp = param(ps, 1.0, 0, &name);
        tail_text += " -> mul(r, " + name + ")";
      } else {
        tail_text += op == 0 ? " -> tanh" : op == 1 ? " -> mul_scalar(0.7)" : " -> square";
      }
    }
    const bool final_mean = rng_.chance(0.5);
    const bool second = rng_.chance(0.4);
    Cur next;
    add(
        std::string(mean ? "r = mean" : "r = sum") + shape_str(dims) + (keep ? " (keepdim)" : "") + tail_text +
            (final_mean ? " -> mean over all" : " -> sum over all") +
            (second ? " -> + 0.1 * sum over all of tanh(h)" : ""),
        [dims, mean, keep, tail_ops, tp, final_mean, second](koila_tensor* h, const Env&) {
          T r =
              mean ? K(koila_mean, h, dims.data(), dims.size(), keep) : K(koila_sum, h, dims.data(), dims.size(), keep);
          for (int op : tail_ops) {
            if (op == 0)
              r = K(koila_tanh, r.get());
            else if (op == 1)
              r = K(koila_mul_scalar, r.get(), 0.7);
            else if (op == 2)
              r = K(koila_mul, r.get(), r.get());
            else
              r = K(koila_mul, r.get(), tp);
          }
          T out = final_mean ? K(koila_mean, r.get(), nullptr, 0, 0) : K(koila_sum, r.get(), nullptr, 0, 0);
          if (!second) return out;
          T t = K(koila_tanh, h);
          T s = K(koila_sum, t.get(), nullptr, 0, 0);
          T scaled = K(koila_mul_scalar, s.get(), 0.1);
          return K(koila_add, out.get(), scaled.get());
        },
        next);
  }

  // mse_loss (or binary_cross_entropy_with_logits) against a lazy target batched like h.
  void elementwise_loss(bool bce) {
    const size_t t = bce ? uniform_data(cur_.shape, cur_.b, 0, 1) : uniform_data(cur_.shape, cur_.b, -1, 1);
    const koila_reduction r = rng_.chance(0.5) ? KOILA_REDUCTION_MEAN : KOILA_REDUCTION_SUM;
    const bool swapped = !bce && rng_.chance(0.3);
    Cur next;
    add(
        std::string(bce ? "bce_with_logits" : "mse_loss") + (swapped ? "(target, h, " : "(h, target, ") +
            (r == KOILA_REDUCTION_MEAN ? "mean)" : "sum)"),
        [t, r, bce, swapped](koila_tensor* h, const Env& e) {
          if (bce) return K(koila_binary_cross_entropy_with_logits, h, e.data[t], r);
          return swapped ? K(koila_mse_loss, e.data[t], h, r) : K(koila_mse_loss, h, e.data[t], r);
        },
        next);
  }

  // cross_entropy (class indices, some ignored, or class probabilities) or nll_loss of
  // log_softmax over the class dim 1; the batch is dim 0 or a dim after the classes.
  bool class_loss() {
    const int64_t rank = cur_.rank(), b = cur_.b;
    if (rank < 2 || b == 1) return false;
    const int64_t classes = cur_.shape[1];
    const koila_reduction r = rng_.chance(0.5) ? KOILA_REDUCTION_MEAN : KOILA_REDUCTION_SUM;
    const bool nll = rng_.chance(0.3), probabilities = !nll && rng_.chance(0.25);
    size_t t;
    std::string what;
    if (probabilities) {  // positive, summing to 1 over dim 1
      std::vector<double> v(static_cast<size_t>(numel(cur_.shape)));
      for (double& x : v) x = rng_.uniform(0.05, 1);
      int64_t inner = 1;
      for (int64_t d = 2; d < rank; ++d) inner *= cur_.shape[d];
      for (int64_t o = 0; o < cur_.shape[0]; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          double sum = 0;
          for (int64_t c = 0; c < classes; ++c) sum += v[static_cast<size_t>((o * classes + c) * inner + i)];
          for (int64_t c = 0; c < classes; ++c) v[static_cast<size_t>((o * classes + c) * inner + i)] /= sum;
        }
      t = data(tensor_from(v, cur_.shape, g_.dtype), b);
      what = "class probabilities " + shape_str(cur_.shape, b);
    } else {
      Shape ts = cur_.shape;
      ts.erase(ts.begin() + 1);
      const int64_t tb = b == 0 ? 0 : b - 1;
      const bool ignore = rng_.chance(0.3);
      std::vector<int64_t> v(static_cast<size_t>(numel(ts)));
      for (int64_t& x : v) x = ignore && rng_.chance(0.3) ? -100 : rng_.range(0, classes - 1);
      if (std::all_of(v.begin(), v.end(), [](int64_t x) { return x == -100; })) v[0] = 0;
      t = data(int_tensor(v, ts), tb);
      what = "class indices " + shape_str(ts, tb) + (ignore ? " (some ignored)" : "");
    }
    Cur next;
    add(
        std::string(nll ? "nll_loss(log_softmax(h, 1), " : "cross_entropy(h, ") + what +
            (r == KOILA_REDUCTION_MEAN ? ", mean)" : ", sum)"),
        [t, r, nll](koila_tensor* h, const Env& e) {
          if (!nll) return K(koila_cross_entropy, h, e.data[t], r);
          T ls = K(koila_log_softmax, h, 1);
          return K(koila_nll_loss, ls.get(), e.data[t], r);
        },
        next);
    return true;
  }

  // After the loss: its gradient depends on the value of the reductions.
  void tail() {
    const int kind = static_cast<int>(rng_.range(0, 2));
    if (kind == 0) {
      std::string name;
      koila_tensor* p = param({rng_.range(1, 4)}, 1.0, 0, &name);
      add(
          "0.5 * loss + sum(" + name + "^2)",
          [p](koila_tensor* h, const Env& e) {
            T half = K(koila_mul_scalar, h, 0.5);
            T q = param_operand(p, e);
            T sq = K(koila_mul, q.get(), q.get());
            T reg = K(koila_sum, sq.get(), nullptr, 0, 0);
            return K(koila_add, half.get(), reg.get());
          },
          cur_);
    } else if (kind == 1) {
      add(
          "loss * loss", [](koila_tensor* h, const Env&) { return K(koila_mul, h, h); }, cur_);
    } else {
      add(
          "tanh(loss)", [](koila_tensor* h, const Env&) { return K(koila_tanh, h); }, cur_);
    }
  }
};

// ---- Running a graph ---------------------------------------------------------------------------

using Grads = std::vector<std::vector<double>>;

Grads grads_of(const std::vector<koila_tensor*>& leaves) {
  Grads out;
  for (koila_tensor* leaf : leaves) {
    koila_tensor* g = nullptr;
    ok(koila_tensor_grad(&g, leaf), "koila_tensor_grad");
    T grad(g);
    out.push_back(grad ? read(grad.get()) : std::vector<double>());
  }
  return out;
}

void zero_grads(const std::vector<koila_tensor*>& leaves) {
  for (koila_tensor* leaf : leaves) ok(koila_tensor_zero_grad(leaf), "koila_tensor_zero_grad");
}

void compare_grads(const Grads& ref, const Grads& got, const Tolerance& tol, double scale, bool f64,
                   const std::string& what) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const std::string name = what + ", gradient of leaf " + std::to_string(i);
    if (ref[i].empty() || got[i].empty()) fail(name + ": missing");
    compare(ref[i], got[i], tol, scale, f64, name);
  }
}

double largest_magnitude(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

std::string describe_plan(const koila_plan* p) {
  size_t needed = 0;
  ok(koila_plan_describe(p, nullptr, 0, &needed), "koila_plan_describe");
  std::string text(needed, '\0');
  ok(koila_plan_describe(p, text.data(), needed, &needed), "koila_plan_describe");
  text.resize(needed - 1);
  return text;
}

struct Forced {
  int64_t chunks = 1;
  uint64_t budget = 0, current = 0;
};

// Sets a CPU budget below the estimated peak of the unsplit run, so that the planner must
// split the batch: at random (log-uniform) between what is in use plus 2% of the unsplit
// run's extra bytes and just below its peak. When not even one sample fits (a legal
// refusal), the budget is raised and planned again. Checks the plan against the contract.
Forced force_chunks(const koila_tensor* t, koila_mode mode, Rng& rng, const std::string& what) {
  ctx.stage = what + ": planning";
  set_budget(0);
  koila_plan* p = nullptr;
  ok(koila_plan_new(&p, t, mode), "koila_plan_new under the automatic budget");
  const uint64_t full = koila_plan_full_peak_bytes(p);
  const int64_t batch = koila_plan_batch_size(p);
  const int64_t unsplit_chunks = koila_plan_num_chunks(p);
  const std::string unsplit_text = describe_plan(p);
  koila_plan_free(p);
  if (unsplit_chunks != 1) fail(what + ": split under the automatic budget: " + unsplit_text);
  Forced f;
  f.current = current_cpu();
  if (full <= f.current) {  // e.g. a view of an input: nothing to allocate, nothing to split
    ++stats.nothing_to_split;
    ctx.stage = what + " (nothing to split: " + unsplit_text + ")";
    return f;
  }
  const double span = static_cast<double>(full - f.current);
  const double u = std::exp(rng.uniform(std::log(0.02), std::log(0.999)));
  f.budget = f.current + std::max<uint64_t>(1, static_cast<uint64_t>(u * span));
  for (int attempt = 0;; ++attempt) {
    set_budget(f.budget);
    koila_status* s = koila_plan_new(&p, t, mode);
    if (s == nullptr) break;
    std::string message;
    const koila_code code = code_of(s, &message);
    if (code != KOILA_ERROR_OUT_OF_MEMORY)
      fail(what + ": koila_plan_new refused with KOILA_ERROR_" + code_name(code) + ": " + message);
    if (p != nullptr) fail(what + ": a refused koila_plan_new left a plan in *out");
    ++stats.oom_retries;
    if (attempt > 80) fail(what + ": no budget up to the unsplit peak fits: " + message);
    f.budget = f.current + static_cast<uint64_t>(static_cast<double>(f.budget - f.current) * 1.3) + 64;
  }
  const std::string text = describe_plan(p);
  f.chunks = koila_plan_num_chunks(p);
  const int64_t chunk = koila_plan_chunk_size(p);
  const uint64_t peak = koila_plan_peak_bytes(p), plan_budget = koila_plan_budget_bytes(p);
  const int64_t plan_batch = koila_plan_batch_size(p);
  const uint64_t plan_full = koila_plan_full_peak_bytes(p);
  koila_plan_free(p);
  // The contract: chunks of the largest power of two that fits, the last one shorter.
  auto bad = [&](const std::string& why) { fail(what + ": inconsistent plan (" + why + "): " + text); };
  if (plan_batch != batch) bad("batch size changed");
  if (plan_budget != f.budget) bad("budget is not the one set");
  if (plan_full != full) bad("unsplit peak changed with the budget");
  if (f.chunks > 1) {
    if (chunk <= 0 || (chunk & (chunk - 1)) != 0 || chunk >= batch) bad("chunk is not a power of two below the batch");
    if (f.chunks != (batch + chunk - 1) / chunk) bad("number of chunks");
    if (peak > f.budget) bad("estimated peak above the budget");
    if (peak > full) bad("estimated peak above the unsplit one");
  } else if (chunk != batch) {
    bad("one chunk that is not the batch");
  }
  ++stats.runs;
  if (f.chunks > 1) {
    ++stats.chunked_runs;
    stats.min_chunks = std::min(stats.min_chunks, f.chunks);
    stats.max_chunks = std::max(stats.max_chunks, f.chunks);
  }
  ctx.stage = what + " under the plan: " + text;
  return f;
}

// Runs `body` (the call planned by force_chunks) under its budget, which is a hard limit:
// the measured peak must stay within it. The run may be refused with an out-of-memory
// error (when the estimate fell short even for chunks of one sample); returns whether it ran.
template <class F>
bool measured(const Forced& f, F&& body) {
  ok(koila_memory_reset_peak("cpu"), "koila_memory_reset_peak");
  bool ran = true;
  g_refusal_is_legal = true;
  try {
    body();
  } catch (const Refused&) {
    ran = false;
    ++stats.refused_runs;
  }
  g_refusal_is_legal = false;
  const uint64_t peak = peak_cpu();
  if (f.budget != 0 && peak > f.budget)  // 0: the automatic budget (nothing to split)
    fail("the measured peak, " + std::to_string(peak) + " bytes, exceeded the budget of " + std::to_string(f.budget) +
         " bytes (" + std::to_string(f.current) + " in use before)");
  return ran;
}

// A refused backward leaves every gradient exactly as it was.
void expect_unchanged(const Grads& before, const Grads& after, const std::string& what) {
  for (size_t i = 0; i < before.size(); ++i)
    if (before[i] != after[i]) fail(what + ": a refused backward changed the gradient of leaf " + std::to_string(i));
}

// Generates, runs and checks one graph; returns whether any run of it was chunked.
bool run_graph(uint64_t seed, int64_t index, bool verbose) {
  ctx.graph = index;
  ctx.description.clear();
  ctx.stage = "generating";
  Rng rng(graph_seed(seed, index));
  set_budget(0);
  const uint64_t baseline = current_cpu();
  bool chunked = false;
  std::string report;
  {
    Graph g;
    T probe;
    std::string probe_text;
    T loss = Generator(g, rng).build(&probe, &probe_text);
    const bool f64 = g.dtype == KOILA_FLOAT64;
    const std::vector<koila_tensor*> leaves = g.grad_leaves();

    // The eager reference: the same ops on concrete tensors.
    ctx.stage = "eager reference";
    double eager_loss = 0;
    Grads eager_grads;
    {
      T e = Generator::replay(g);
      int lazy = 1;
      ok(koila_tensor_is_lazy(e.get(), &lazy), "koila_tensor_is_lazy");
      if (lazy) fail("the replay on concrete tensors is lazy");
      eager_loss = item(e.get());
      ok(koila_backward(e.get()), "koila_backward (eager)");
      eager_grads = grads_of(leaves);
    }
    zero_grads(leaves);
    double scale = std::max(1.0, std::fabs(eager_loss));  // of the graph: loss and gradients
    for (const auto& grad : eager_grads) scale = std::max(scale, largest_magnitude(grad));

    // Unsplit, under the automatic budget.
    ctx.stage = "unsplit evaluation";
    const double l0 = item(loss.get());
    compare({eager_loss}, {l0}, g.tol, scale, f64, "loss, eager vs lazy unsplit");
    const std::vector<double> probe0 = read(probe.get());
    ctx.stage = "unsplit backward";
    ok(koila_backward(loss.get()), "koila_backward (unsplit)");
    const Grads g0 = grads_of(leaves);
    compare_grads(eager_grads, g0, g.tol, scale, f64, "eager vs lazy unsplit");

    // The loss in chunks.
    Forced f = force_chunks(loss.get(), KOILA_MODE_FORWARD, rng, "chunked evaluation of the loss");
    chunked |= f.chunks > 1;
    report += " loss " + std::to_string(f.chunks);
    double l1 = 0;
    if (measured(f, [&] { l1 = item(loss.get()); })) compare({l0}, {l1}, g.tol, scale, f64, "loss, unsplit vs chunked");

    // Backward in chunks.
    zero_grads(leaves);
    const Grads zeros = grads_of(leaves);
    f = force_chunks(loss.get(), KOILA_MODE_TRAINING, rng, "chunked backward");
    chunked |= f.chunks > 1;
    report += ", backward " + std::to_string(f.chunks);
    const bool backward_ran = measured(f, [&] { ok(koila_backward(loss.get()), "koila_backward (chunked)"); });
    const Grads g1 = grads_of(leaves);
    if (backward_ran)
      compare_grads(g0, g1, g.tol, scale, f64, "unsplit vs chunked");
    else
      expect_unchanged(zeros, g1, "chunked backward");

    // Gradients add into existing ones, as in PyTorch (under another budget).
    if (backward_ran && rng.chance(0.3)) {
      f = force_chunks(loss.get(), KOILA_MODE_TRAINING, rng, "second chunked backward (accumulating)");
      chunked |= f.chunks > 1;
      report += ", again " + std::to_string(f.chunks);
      if (measured(f, [&] { ok(koila_backward(loss.get()), "koila_backward (chunked, accumulating)"); })) {
        Grads doubled = g0;
        for (auto& v : doubled)
          for (double& x : v) x *= 2;
        compare_grads(doubled, grads_of(leaves), g.tol, 2 * scale, f64, "2 x unsplit vs two chunked backwards");
      } else {
        expect_unchanged(g1, grads_of(leaves), "second chunked backward");
      }
    }

    // A per-sample intermediate (or a max/min over the batch) read in chunks.
    if (rng.chance(0.6)) {
      const bool through_eval = rng.chance(0.4);
      f = force_chunks(probe.get(), KOILA_MODE_FORWARD, rng, "chunked read of " + probe_text);
      chunked |= f.chunks > 1;
      report += ", read " + std::to_string(f.chunks);
      std::vector<double> p1;
      if (measured(f, [&] { p1 = read(probe.get(), through_eval); }))
        compare(probe0, p1, g.tol, std::max(1.0, largest_magnitude(probe0)), f64,
                "read of " + probe_text + (through_eval ? " (koila_eval)" : "") + ", unsplit vs chunked");
    }
    set_budget(0);
    if (verbose)
      std::printf("graph %" PRId64 ": %s\n  probe: %s\n  chunks:%s\n", index, g.description.c_str(), probe_text.c_str(),
                  report.c_str());
  }
  ctx.stage = "freeing the graph";
  const uint64_t after = current_cpu();
  if (after != baseline)
    fail("tensor memory in use went from " + std::to_string(baseline) + " to " + std::to_string(after) +
         " bytes after freeing every handle of the graph");
  return chunked;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  int64_t graphs = 100, first = 0;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--seed" && has_value) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--graphs" && has_value) {
      graphs = std::strtoll(argv[++i], nullptr, 10);
    } else if (arg == "--first" && has_value) {
      first = std::strtoll(argv[++i], nullptr, 10);
    } else if (arg == "--verbose") {
      verbose = true;
    } else {
      std::fprintf(stderr, "usage: %s --seed S --graphs N [--first I] [--verbose]\n", argv[0]);
      return 2;
    }
  }
  ctx.seed = seed;
  stats.verbose = verbose;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t graphs_chunked = 0;
  for (int64_t i = first; i < first + graphs; ++i) graphs_chunked += run_graph(seed, i, verbose);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ok(koila_set_memory_budget("cpu", 0), "koila_set_memory_budget");

  std::printf("graph_fuzz: seed %" PRIu64 ", %" PRId64 " graphs, %" PRId64 " chunked runs (min chunks %" PRId64
              ", max chunks %" PRId64 "), largest relative difference %.3g (float32 graphs: %.3g)\n",
              seed, graphs, stats.chunked_runs, stats.chunked_runs ? stats.min_chunks : 0, stats.max_chunks,
              stats.max_rel64, stats.max_rel32);
  std::printf("graph_fuzz: %" PRId64 " of %" PRId64 " graphs chunked, %" PRId64 " forced runs, %" PRId64
              " budgets refused as too small when planned (retried), %" PRId64
              " runs refused when they ran (estimate short even for one sample), every peak within its budget, %" PRId64
              " comparisons, %.1f s (%.0f graphs/s)\n",
              graphs_chunked, graphs, stats.runs, stats.oom_retries, stats.refused_runs, stats.comparisons, seconds,
              seconds > 0 ? static_cast<double>(graphs) / seconds : 0.0);
  if (graphs > 0 && graphs_chunked * 5 < graphs * 4) {
    std::fprintf(stderr, "graph_fuzz: FAILED: only %" PRId64 " of %" PRId64 " graphs ran in chunks (80%% needed)\n",
                 graphs_chunked, graphs);
    return 1;
  }
  return 0;
}
