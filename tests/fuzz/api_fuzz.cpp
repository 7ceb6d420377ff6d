// The API fuzzer: random sequences of every function in koila.h, checked call by call.
//
// A program is a stream of bytes; each step reads which function to call and with what
// (handles from the live pools or NULL, random shapes of rank 0-5 with zero-size dims,
// every dtype and invalid ones, devices good and bad, dims in and out of range, flags and
// enums in and out of range, arrays NULL or not, budgets that force chunks or refuse
// everything, modules from a corpus of good, truncated and junk files) and frees handles in
// random order. After every call it checks that
//   - a failing call returns a code in range with a non-empty message naming the function,
//     and never KOILA_ERROR_INTERNAL (that is koila admitting a bug);
//   - `out` is NULL or untouched after a failure, and a real handle after success;
// and the process must not crash, abort or (under LeakSanitizer) leak.
//
// The bytes come from a seeded PRNG (`--seed S --calls N`, what CI runs), from a file
// (`--replay FILE`), or from libFuzzer (built with clang -fsanitize=fuzzer, which defines
// KOILA_LIBFUZZER). The same seed always replays the same calls: a failure prints the seed
// and call index, and `--trace` prints every call.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../op_tables.h"
#include "common.h"
#include "int_enums.h"
#include "koila.h"

namespace {

// ---------------------------------------------------------------- the byte stream

// Random choices, read from a buffer (libFuzzer, replay) or drawn from a seeded PRNG.
class Source {
 public:
  explicit Source(uint64_t seed) : seeded_(true), state_(seed) {}
  Source(const uint8_t* data, size_t size) : seeded_(false), data_(data), size_(size) {}

  bool exhausted() const { return !seeded_ && pos_ >= size_; }
  uint64_t u64() {
    if (seeded_) return splitmix64(state_);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | (pos_ < size_ ? data_[pos_++] : 0);
    return v;
  }
  uint32_t small() {  // one byte from a buffer: keeps libFuzzer inputs short
    if (seeded_) return static_cast<uint32_t>(splitmix64(state_));
    return pos_ < size_ ? data_[pos_++] : 0;
  }
  int below(int n) { return n <= 1 ? 0 : static_cast<int>(small() % static_cast<uint32_t>(n)); }
  int64_t range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(u64() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool chance(int percent) { return below(100) < percent; }
  double real(double lo, double hi) { return lo + (hi - lo) * (static_cast<double>(u64() >> 11) / 9007199254740992.0); }

 private:
  bool seeded_;
  uint64_t state_ = 0;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0, pos_ = 0;
};

// ---------------------------------------------------------------- failures

std::string g_context;  // "seed S" or "input FILE"
long g_call = 0;
std::vector<std::string> g_recent;  // the last calls, printed with a failure
bool g_trace = false;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "api_fuzz: FAILURE at call %ld (%s): %s\nlast calls:\n", g_call, g_context.c_str(),
               what.c_str());
  for (const std::string& line : g_recent) std::fprintf(stderr, "  %s\n", line.c_str());
  std::fprintf(stderr, "replay: koila_api_fuzz %s --calls %ld --trace\n", g_context.c_str(), g_call + 1);
  std::abort();
}

std::string g_picked;  // with --trace: the shapes of the tensors the next call was given

void note(const std::string& text) {
  const std::string line = g_picked.empty() ? text : text + " (" + g_picked + ")";
  g_picked.clear();
  if (g_trace) std::fprintf(stderr, "[%ld] %s\n", g_call, line.c_str());
  g_recent.push_back(line);
  if (g_recent.size() > 24) g_recent.erase(g_recent.begin());
}

std::map<std::string, std::map<int, long>> g_outcomes;  // function -> code -> count
std::set<std::string> g_ran;                            // the actions that ran

// Checks a returned status; true when the call succeeded.
bool check(koila_status* s, const char* fn) {
  const koila_code code = koila_status_code(s);
  g_outcomes[fn][static_cast<int>(code)]++;
  if (s == nullptr) {
    if (code != KOILA_OK) die(std::string(fn) + ": a NULL status has a code");
    return true;
  }
  if (code < KOILA_ERROR_INVALID_ARGUMENT || code > KOILA_ERROR_INTERNAL)
    die(std::string(fn) + ": status code out of range: " + std::to_string(static_cast<int>(code)));
  const char* message = koila_status_message(s);
  if (message == nullptr || *message == '\0') die(std::string(fn) + ": empty status message");
  if (std::strstr(message, fn) == nullptr)
    die(std::string(fn) + ": the message does not name the function: " + message);
  if (code == KOILA_ERROR_INTERNAL) die(std::string(fn) + ": internal error: " + message);
  if (g_trace) std::fprintf(stderr, "     -> %d %s\n", static_cast<int>(code), message);
  koila_status_free(s);
  return false;
}

// An out-parameter preset to this is "untouched" if still equal after a failure.
template <class T>
T* sentinel() {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(0x5a5a5a50));
}

// Checks `out` after a call that returned ok (true) or failed (false); true when it holds
// a new handle.
template <class T>
bool check_out(bool ok, T* out, const char* fn) {
  if (ok) {
    if (out == nullptr || out == sentinel<T>()) die(std::string(fn) + ": succeeded without setting out");
    return true;
  }
  if (out != nullptr && out != sentinel<T>()) die(std::string(fn) + ": failed but left a handle in out");
  return false;
}

// ---------------------------------------------------------------- state

struct TensorInfo {
  koila_tensor* handle;
  int depth;  // longest chain of ops behind it (keeps lazy graphs small)
};

struct State {
  Source& in;
  std::vector<TensorInfo> tensors;
  std::vector<koila_plan*> plans;
  std::vector<koila_timeline*> timelines;
  std::vector<koila_module*> modules;
  std::vector<koila_optimizer*> optimizers;
  std::vector<std::string> module_files;  // the corpus: good, truncated and junk files
  std::string scratch;                    // a directory koila_module_save may write to

  explicit State(Source& source) : in(source) {}
};

constexpr size_t kMaxTensors = 48, kMaxPlans = 8, kMaxModules = 3, kMaxOptimizers = 4, kMaxTimelines = 4;
constexpr int kMaxDepth = 10;

std::vector<int64_t> shape_of(koila_tensor* t) {
  size_t ndim = 0;
  int64_t dims[8];
  koila_status* s = koila_tensor_shape(t, dims, 8, &ndim);
  if (s) die(std::string("koila_tensor_shape of a live handle failed: ") + koila_status_message(s));
  return std::vector<int64_t>(dims, dims + std::min<size_t>(ndim, 8));
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A live tensor, or NULL now and then (and when there is none).
koila_tensor* pick(State& st, int* depth = nullptr, int null_percent = 3) {
  if (st.tensors.empty() || st.in.chance(null_percent)) {
    if (depth) *depth = 0;
    return nullptr;
  }
  const TensorInfo& t = st.tensors[st.in.below(static_cast<int>(st.tensors.size()))];
  if (depth) *depth = std::max(*depth, t.depth);
  if (g_trace) {
    std::ostringstream os;
    os << (g_picked.empty() ? "" : ", ") << '[';
    const std::vector<int64_t> shape = shape_of(t.handle);
    for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
    int64_t b = -1;
    koila_status_free(koila_tensor_batch_dim(t.handle, &b));
    os << ']' << (b >= 0 ? " batch " + std::to_string(b) : "");
    g_picked += os.str();
  }
  return t.handle;
}

// An optional tensor argument (bias, masks): NULL half the time.
koila_tensor* optional(State& st, int* depth) { return st.in.chance(50) ? nullptr : pick(st, depth, 0); }

void free_tensor_at(State& st, size_t i) {
  koila_tensor_free(st.tensors[i].handle);
  st.tensors.erase(st.tensors.begin() + static_cast<long>(i));
}

// Keeps graphs cheap to plan (at most kMaxDepth ops deep) and the pool small.
void keep(State& st, koila_tensor* t, int depth) {
  if (depth > kMaxDepth) return koila_tensor_free(t);
  if (st.tensors.size() >= kMaxTensors)
    free_tensor_at(st, static_cast<size_t>(st.in.below(static_cast<int>(st.tensors.size()))));
  st.tensors.push_back({t, depth});
}

const char* device(State& st) {
  static const char* const devices[] = {
      "cpu", "cpu", "cpu", "cpu", "cpu", "cpu", "cuda", "cuda:1", "gpu", "cpu:0", "", "cuda:x", "cuda:99999999999"};
  if (st.in.chance(2)) return nullptr;
  return devices[st.in.below(sizeof devices / sizeof *devices)];
}

// Any int for an enum: mostly valid values, sometimes not. Passed on as an int through
// int_enums.c, as a C, Java or Julia caller would.
int enum_value(State& st, int count) {
  return st.in.chance(8) ? static_cast<int>(st.in.range(-3, count + 3)) : st.in.below(count);
}

int flag(State& st) { return st.in.chance(6) ? static_cast<int>(st.in.range(-2, 5)) : st.in.below(2); }

int64_t dim(State& st) { return st.in.chance(85) ? st.in.range(-3, 3) : st.in.range(-9, 9); }

// A shape of rank 0-5 with small sizes, zero-size dims now and then.
std::vector<int64_t> random_shape(State& st) {
  std::vector<int64_t> shape(static_cast<size_t>(st.in.below(6)));
  for (int64_t& d : shape) d = st.in.chance(6) ? 0 : st.in.range(1, 4);
  return shape;
}

// Int arrays: eight entries of storage whatever the count, so that functions reading a
// fixed number of entries (stride[2]) never read past them; NULL now and then.
struct Ints {
  int64_t v[8];
  size_t n;
  bool null;
  const int64_t* ptr() const { return null ? nullptr : v; }
};

Ints ints(State& st, size_t max_n, int64_t lo, int64_t hi) {
  Ints a{};
  a.n = static_cast<size_t>(st.in.below(static_cast<int>(max_n) + 1));
  for (int64_t& x : a.v) x = st.in.range(lo, hi);
  a.null = st.in.chance(8);
  return a;
}

size_t element_size(koila_dtype d) {
  switch (d) {
    case KOILA_FLOAT64:
    case KOILA_INT64: return 8;
    case KOILA_FLOAT32:
    case KOILA_INT32: return 4;
    case KOILA_FLOAT16:
    case KOILA_BFLOAT16: return 2;
    default: return 1;
  }
}

// ---------------------------------------------------------------- actions

using Action = std::function<void(State&)>;
struct Entry {
  const char* name;  // the koila.h function this action exercises
  Action run;
  int weight;
};

// Calls an op returning a tensor, with the standard checks, and keeps the result.
void op_result(State& st, const char* fn, int depth, const std::function<koila_status*(koila_tensor**)>& call) {
  koila_tensor* out = sentinel<koila_tensor>();
  const bool ok = check(call(&out), fn);
  if (check_out(ok, out, fn)) keep(st, out, depth + 1);
}

void unary(std::vector<Entry>& table, const char* name, koila_status* (*fn)(koila_tensor**, const koila_tensor*)) {
  table.push_back({name,
                   [name, fn](State& st) {
                     int d = 0;
                     koila_tensor* x = pick(st, &d);
                     note(std::string(name));
                     op_result(st, name, d, [&](koila_tensor** o) { return fn(o, x); });
                   },
                   2});
}

void binary(std::vector<Entry>& table, const char* name,
            koila_status* (*fn)(koila_tensor**, const koila_tensor*, const koila_tensor*)) {
  table.push_back({name,
                   [name, fn](State& st) {
                     int d = 0;
                     koila_tensor* a = pick(st, &d);
                     koila_tensor* b = pick(st, &d);
                     note(std::string(name));
                     op_result(st, name, d, [&](koila_tensor** o) { return fn(o, a, b); });
                   },
                   2});
}

void scalar(std::vector<Entry>& table, const char* name,
            koila_status* (*fn)(koila_tensor**, const koila_tensor*, double)) {
  table.push_back({name,
                   [name, fn](State& st) {
                     int d = 0;
                     koila_tensor* a = pick(st, &d);
                     const double s = st.in.chance(5) ? NAN : st.in.real(-3, 3);
                     note(std::string(name) + " " + std::to_string(s));
                     op_result(st, name, d, [&](koila_tensor** o) { return fn(o, a, s); });
                   },
                   1});
}

using DimFn = koila_status* (*)(koila_tensor**, const koila_tensor*, int64_t);
void with_dim(std::vector<Entry>& table, const char* name, DimFn fn) {
  table.push_back({name,
                   [name, fn](State& st) {
                     int d = 0;
                     koila_tensor* x = pick(st, &d);
                     const int64_t a = dim(st);
                     note(std::string(name) + " " + std::to_string(a));
                     op_result(st, name, d, [&](koila_tensor** o) { return fn(o, x, a); });
                   },
                   2});
}

using TwoDimFn = koila_status* (*)(koila_tensor**, const koila_tensor*, int64_t, int64_t);
void with_two_dims(std::vector<Entry>& table, const char* name, TwoDimFn fn) {
  table.push_back({name,
                   [name, fn](State& st) {
                     int d = 0;
                     koila_tensor* x = pick(st, &d);
                     const int64_t a = dim(st), b = dim(st);
                     note(std::string(name) + " " + std::to_string(a) + " " + std::to_string(b));
                     op_result(st, name, d, [&](koila_tensor** o) { return fn(o, x, a, b); });
                   },
                   2});
}

using ReduceFn = koila_status* (*)(koila_tensor**, const koila_tensor*, const int64_t*, size_t, int);
void reduction(std::vector<Entry>& table, const char* name, ReduceFn fn) {
  table.push_back({name,
                   [name, fn](State& st) {
                     int d = 0;
                     koila_tensor* x = pick(st, &d);
                     const Ints dims = ints(st, 3, -4, 4);
                     const int keepdim = flag(st);
                     note(std::string(name) + " ndims " + std::to_string(dims.n));
                     op_result(st, name, d, [&](koila_tensor** o) { return fn(o, x, dims.ptr(), dims.n, keepdim); });
                   },
                   2});
}

using LossFn = koila_status* (*)(koila_tensor**, const koila_tensor*, const koila_tensor*, int);
void loss(std::vector<Entry>& table, const char* name, LossFn fn) {
  table.push_back({name,
                   [name, fn](State& st) {
                     int d = 0;
                     koila_tensor* a = pick(st, &d);
                     koila_tensor* b = pick(st, &d);
                     const int r = enum_value(st, 3);
                     note(std::string(name));
                     op_result(st, name, d, [&](koila_tensor** o) { return fn(o, a, b, r); });
                   },
                   2});
}

void make_data(State& st, const char* name) {
  const std::vector<int64_t> shape = random_shape(st);
  const int raw = enum_value(st, 9);
  const size_t esize = raw >= 0 && raw < 9 ? element_size(static_cast<koila_dtype>(raw)) : 4;
  size_t nbytes = static_cast<size_t>(numel(shape)) * esize;
  if (st.in.chance(5)) nbytes += static_cast<size_t>(st.in.range(1, 9));
  std::vector<uint8_t> data(nbytes + 8);
  for (size_t i = 0; i < nbytes; ++i)
    data[i] = raw == KOILA_BOOL ? static_cast<uint8_t>(st.in.below(2)) : static_cast<uint8_t>(st.in.u64());
  // Floats from random bytes are often NaN or huge: keep most of them tame.
  if (raw == KOILA_FLOAT32 && st.in.chance(80))
    for (size_t i = 0; i + 4 <= nbytes; i += 4) {
      const float f = static_cast<float>(st.in.real(-2, 2));
      std::memcpy(&data[i], &f, 4);
    }
  if (raw == KOILA_FLOAT64 && st.in.chance(80))
    for (size_t i = 0; i + 8 <= nbytes; i += 8) {
      const double f = st.in.real(-2, 2);
      std::memcpy(&data[i], &f, 8);
    }
  const void* ptr = st.in.chance(3) ? nullptr : data.data();
  const bool null_shape = !shape.empty() && st.in.chance(3);
  const char* dev = device(st);
  note(std::string(name) + " rank " + std::to_string(shape.size()) + " dtype " + std::to_string(raw));
  op_result(st, name, 0, [&](koila_tensor** o) {
    return fuzz_tensor_from_data(o, ptr, nbytes, raw, null_shape ? nullptr : shape.data(), shape.size(), dev);
  });
}

using FactoryFn = koila_status* (*)(koila_tensor**, const int64_t*, size_t, int, const char*);
void factory(std::vector<Entry>& table, const char* name, FactoryFn fn) {
  table.push_back({name,
                   [name, fn](State& st) {
                     const std::vector<int64_t> shape = random_shape(st);
                     const int dtype = enum_value(st, 9);
                     const char* dev = device(st);
                     note(std::string(name) + " rank " + std::to_string(shape.size()));
                     op_result(st, name, 0,
                               [&](koila_tensor** o) { return fn(o, shape.data(), shape.size(), dtype, dev); });
                   },
                   3});
}

// Reads into a buffer of the right size most of the time.
void read_to_host(State& st) {
  koila_tensor* t = pick(st);
  size_t nbytes = 0;
  if (t) {
    koila_dtype d = KOILA_FLOAT32;
    koila_status_free(koila_tensor_dtype(t, &d));
    nbytes = static_cast<size_t>(numel(shape_of(t))) * element_size(d);
  }
  if (st.in.chance(10)) nbytes = static_cast<size_t>(st.in.range(0, 64));
  std::vector<uint8_t> buffer(nbytes + 1);
  note("koila_tensor_to_host " + std::to_string(nbytes));
  check(koila_tensor_to_host(t, st.in.chance(3) ? nullptr : buffer.data(), nbytes), "koila_tensor_to_host");
}

void text_out(State& st, const char* name, const std::function<koila_status*(char*, size_t, size_t*)>& call) {
  const size_t capacity = static_cast<size_t>(st.in.chance(30) ? 0 : st.in.range(1, 400));
  std::vector<char> buf(capacity + 1, 'x');
  size_t needed = 0;
  const bool null_buf = st.in.chance(5);
  const bool ok = check(call(null_buf ? nullptr : buf.data(), capacity, st.in.chance(10) ? nullptr : &needed), name);
  if (ok && capacity > 0 && !null_buf && std::memchr(buf.data(), '\0', capacity) == nullptr)
    die(std::string(name) + ": text not NUL-terminated within capacity");
}

void budget(State& st) {
  uint64_t current = 0;
  koila_status_free(koila_memory_stats("cpu", &current, nullptr));
  uint64_t bytes;
  switch (st.in.below(5)) {
    case 0: bytes = 0; break;                                                      // automatic
    case 1: bytes = current + static_cast<uint64_t>(st.in.range(0, 4096)); break;  // splits or refuses
    case 2: bytes = current + static_cast<uint64_t>(st.in.range(0, 1 << 20)); break;
    case 3: bytes = st.in.chance(50) ? UINT64_MAX : 1; break;
    default: bytes = 0;
  }
  const char* dev = device(st);
  note("koila_set_memory_budget " + std::to_string(bytes));
  check(koila_set_memory_budget(dev, bytes), "koila_set_memory_budget");
}

void load_module(State& st) {
  if (st.modules.size() >= kMaxModules) {
    const size_t i = static_cast<size_t>(st.in.below(static_cast<int>(st.modules.size())));
    koila_module_free(st.modules[i]);
    st.modules.erase(st.modules.begin() + static_cast<long>(i));
  }
  const char* path = st.in.chance(3) || st.module_files.empty()
                         ? nullptr
                         : st.module_files[st.in.below(static_cast<int>(st.module_files.size()))].c_str();
  const char* dev = device(st);
  note(std::string("koila_module_load ") + (path ? path : "NULL"));
  koila_module* out = sentinel<koila_module>();
  const bool ok = check(koila_module_load(&out, path, dev), "koila_module_load");
  if (check_out(ok, out, "koila_module_load")) st.modules.push_back(out);
}

koila_module* pick_module(State& st) {
  if (st.modules.empty() || st.in.chance(4)) return nullptr;
  return st.modules[st.in.below(static_cast<int>(st.modules.size()))];
}

koila_optimizer* pick_optimizer(State& st) {
  if (st.optimizers.empty() || st.in.chance(4)) return nullptr;
  return st.optimizers[st.in.below(static_cast<int>(st.optimizers.size()))];
}

// Whether the description of plan `p` contains `text`.
bool plan_says(const koila_plan* p, const char* text) {
  size_t needed = 0;
  koila_status_free(koila_plan_describe(p, nullptr, 0, &needed));
  std::string description(needed, '\0');
  koila_status* s = koila_plan_describe(p, description.data(), needed, &needed);
  const bool ok = s == nullptr;
  koila_status_free(s);
  return ok && description.find(text) != std::string::npos;
}

koila_plan* pick_plan(State& st) {
  if (st.plans.empty() || st.in.chance(4)) return nullptr;
  return st.plans[st.in.below(static_cast<int>(st.plans.size()))];
}

koila_timeline* pick_timeline(State& st) {
  if (st.timelines.empty() || st.in.chance(4)) return nullptr;
  return st.timelines[st.in.below(static_cast<int>(st.timelines.size()))];
}

// Reads every event of a timeline (and one past the end, or with NULL outs, now and
// then), checking that the event it names as the peak has the largest peak and that no
// event holds more after it than during it.
void read_timeline(State& st, const koila_timeline* t) {
  size_t n = 0, peak = 0;
  const bool has_length = check(koila_timeline_length(t, st.in.chance(5) ? nullptr : &n), "koila_timeline_length");
  const bool has_peak =
      check(koila_timeline_peak_index(t, st.in.chance(5) ? nullptr : &peak), "koila_timeline_peak_index");
  if (!has_length) return;
  uint64_t top = 0, peak_bytes = 0;
  const size_t end = n + (st.in.chance(10) ? 1 : 0);
  for (size_t i = 0; i < end; ++i) {
    uint64_t live = 0, most = 0;
    int64_t chunk = -1;
    koila_phase phase;
    const bool null_chunk = st.in.chance(3), in_range = i < n;
    const bool live_ok = check(koila_timeline_live_bytes(t, i, &live), "koila_timeline_live_bytes");
    const bool most_ok = check(koila_timeline_peak_bytes(t, i, &most), "koila_timeline_peak_bytes");
    const bool phase_ok = check(koila_timeline_phase(t, i, &phase), "koila_timeline_phase");
    const bool chunk_ok = check(koila_timeline_chunk(t, i, null_chunk ? nullptr : &chunk), "koila_timeline_chunk");
    if (live_ok != in_range || most_ok != in_range || phase_ok != in_range || chunk_ok != (in_range && !null_chunk))
      die("timeline event " + std::to_string(i) + " of " + std::to_string(n) +
          ": read past the end, or refused within it");
    if (i < n && live > most) die("a timeline event holds more after it than during it");
    top = std::max(top, i < n ? most : 0);
    if (i == peak) peak_bytes = most;
    if (st.in.chance(5))
      text_out(st, "koila_timeline_op", [&](char* b, size_t c, size_t* m) { return koila_timeline_op(t, i, b, c, m); });
  }
  if (has_peak && n > 0 && peak_bytes != top) die("the timeline's peak index does not name its largest peak");
}

enum class OptKind { Sgd, Adam, AdamW };

// A random parameter list (NULL entries and a NULL list included).
std::vector<koila_tensor*> pick_params(State& st) {
  std::vector<koila_tensor*> params(static_cast<size_t>(st.in.below(4)));
  for (koila_tensor*& p : params) p = pick(st, nullptr, 2);
  return params;
}

void make_optimizer(State& st, OptKind kind) {
  const char* fn = kind == OptKind::Sgd    ? "koila_optimizer_sgd"
                   : kind == OptKind::Adam ? "koila_optimizer_adam"
                                           : "koila_optimizer_adamw";
  std::vector<koila_tensor*> params = pick_params(st);
  auto hyper = [&](double lo, double hi) {
    return st.in.chance(4) ? (st.in.chance(50) ? NAN : -1.0) : st.in.real(lo, hi);
  };
  const double lr = hyper(0, 0.1), a = hyper(0, 0.99), b = hyper(0, 0.999), eps = hyper(1e-9, 1e-6), wd = hyper(0, 0.1);
  note(std::string(fn) + " n " + std::to_string(params.size()));
  if (st.optimizers.size() >= kMaxOptimizers) {
    koila_optimizer_free(st.optimizers.front());
    st.optimizers.erase(st.optimizers.begin());
  }
  koila_optimizer* out = sentinel<koila_optimizer>();
  koila_tensor* const* list = st.in.chance(3) ? nullptr : params.data();
  koila_status* s = kind == OptKind::Sgd    ? koila_optimizer_sgd(&out, list, params.size(), lr, a, wd)
                    : kind == OptKind::Adam ? koila_optimizer_adam(&out, list, params.size(), lr, a, b, eps, wd)
                                            : koila_optimizer_adamw(&out, list, params.size(), lr, a, b, eps, wd);
  if (check_out(check(s, fn), out, fn)) st.optimizers.push_back(out);
}

// A copy of the file at `good` in the scratch folder as `name`, cut short or with a byte
// changed.
std::string spoilt_copy(State& st, const std::string& good, const std::string& name) {
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!bytes.empty()) {
    if (st.in.chance(50))
      bytes.resize(static_cast<size_t>(st.in.below(static_cast<int>(bytes.size()))));
    else
      bytes[static_cast<size_t>(st.in.below(static_cast<int>(bytes.size())))] ^= 0x20;
  }
  const std::string path = st.scratch + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

// Optimizer state files: good ones, one of another optimizer, cut short, junk, a module's,
// missing, a folder.
void save_or_load_optimizer(State& st, bool save) {
  koila_optimizer* o = pick_optimizer(st);
  const std::string good = st.scratch + "/optimizer" + std::to_string(st.in.below(2)) + ".state";
  if (save) {
    const char* p = st.in.chance(5) ? nullptr : st.in.chance(10) ? st.scratch.c_str() : good.c_str();
    note("koila_optimizer_save");
    check(koila_optimizer_save(o, p), "koila_optimizer_save");
    return;
  }
  std::string path = good;
  if (st.in.chance(30)) {  // a copy of a saved state, cut or with a byte changed
    path = spoilt_copy(st, good, "spoilt.state");
  } else if (st.in.chance(20) && !st.module_files.empty()) {
    path = st.module_files[st.in.below(static_cast<int>(st.module_files.size()))];
  }
  note("koila_optimizer_load " + path);
  check(koila_optimizer_load(o, st.in.chance(5) ? nullptr : path.c_str()), "koila_optimizer_load");
}

// Four numbers from the CPU generator, through the C API.
std::vector<float> draws() {
  const int64_t shape[1] = {4};
  koila_tensor* t = nullptr;
  if (koila_tensor_randn(&t, shape, 1, KOILA_FLOAT32, "cpu") != nullptr) die("koila_tensor_randn failed");
  std::vector<float> out(4);
  const bool read = koila_tensor_to_host(t, out.data(), out.size() * sizeof(float)) == nullptr;
  koila_tensor_free(t);
  if (!read) die("koila_tensor_to_host failed");
  return out;
}

// Random generator files: good ones, cut short or altered, an optimizer's or a module's,
// missing, a folder, NULL. A failed load changes no generator.
void save_or_load_rng(State& st, bool save) {
  const std::string good = st.scratch + "/rng" + std::to_string(st.in.below(2)) + ".bin";
  if (save) {
    const char* p = st.in.chance(5) ? nullptr : st.in.chance(10) ? st.scratch.c_str() : good.c_str();
    note("koila_rng_save");
    check(koila_rng_save(p), "koila_rng_save");
    return;
  }
  std::string path = good;
  if (st.in.chance(30))
    path = spoilt_copy(st, good, "spoilt.rng");
  else if (st.in.chance(20))
    path = st.scratch + "/optimizer0.state";
  else if (st.in.chance(20) && !st.module_files.empty())
    path = st.module_files[st.in.below(static_cast<int>(st.module_files.size()))];
  note("koila_rng_load " + path);
  const std::string before = st.scratch + "/before.rng";
  if (koila_rng_save(before.c_str()) != nullptr) die("koila_rng_save of a good path failed");
  koila_status* s = koila_rng_load(st.in.chance(5) ? nullptr : path.c_str());
  if (s != nullptr) {  // the next draws are those that followed the state before the load
    const std::vector<float> after = draws();
    koila_status_free(koila_rng_load(before.c_str()));
    if (after != draws()) die("koila_rng_load failed and changed a generator");
  }
  check(s, "koila_rng_load");
}

// DLPack: a producer that counts its deleter's calls, which must be exactly one per struct
// handed to koila_tensor_from_dlpack, whatever the call returned.
struct FuzzDLTensor {
  void* data;
  int32_t device_type, device_id;
  int32_t ndim;
  uint8_t code, bits;
  uint16_t lanes;
  int64_t *shape, *strides;
  uint64_t byte_offset;
};
struct FuzzManaged {
  FuzzDLTensor t;
  void* ctx;
  void (*deleter)(FuzzManaged*);
};
struct FuzzManagedVersioned {
  uint32_t major, minor;
  void* ctx;
  void (*deleter)(FuzzManagedVersioned*);
  uint64_t flags;
  FuzzDLTensor t;
};
struct FuzzProducer {
  std::vector<float> data;
  int64_t shape[2], strides[2];
  int deleted = 0;
  FuzzManaged plain{};
  FuzzManagedVersioned versioned{};
};

void dlpack_import(State& st) {
  auto prod = std::make_unique<FuzzProducer>();
  const int64_t rows = st.in.range(0, 4), cols = st.in.range(0, 4);
  prod->data.resize(static_cast<size_t>(rows * cols + 8), 1.5f);
  prod->shape[0] = rows;
  prod->shape[1] = cols;
  prod->strides[0] = st.in.chance(10) ? -cols : cols;
  prod->strides[1] = 1;
  FuzzDLTensor t{prod->data.data(), 1, 0, 2, 2, 32, 1, prod->shape, st.in.chance(30) ? nullptr : prod->strides, 0};
  if (st.in.chance(10)) t.device_type = static_cast<int32_t>(st.in.range(2, 16));
  if (st.in.chance(10)) t.code = static_cast<uint8_t>(st.in.below(8));
  if (st.in.chance(10)) t.bits = static_cast<uint8_t>(8 << st.in.below(4));
  if (st.in.chance(5)) t.lanes = 4;
  if (st.in.chance(5)) t.ndim = static_cast<int32_t>(st.in.range(-2, 2));
  if (st.in.chance(5)) t.byte_offset = static_cast<uint64_t>(st.in.below(16));
  if (st.in.chance(5)) t.data = nullptr;
  if (st.in.chance(5)) t.shape = nullptr;
  const int versioned = st.in.chance(5) ? static_cast<int>(st.in.range(-1, 3)) : static_cast<int>(st.in.below(2));
  prod->plain = {t, prod.get(), [](FuzzManaged* m) { ++static_cast<FuzzProducer*>(m->ctx)->deleted; }};
  prod->versioned = {st.in.chance(10) ? static_cast<uint32_t>(st.in.below(3)) : 1u,
                     0,
                     prod.get(),
                     [](FuzzManagedVersioned* m) { ++static_cast<FuzzProducer*>(m->ctx)->deleted; },
                     st.in.chance(10) ? uint64_t{1} : uint64_t{0},
                     t};
  void* managed = versioned == 1 ? static_cast<void*>(&prod->versioned) : static_cast<void*>(&prod->plain);
  koila_tensor* out = sentinel<koila_tensor>();
  note("koila_tensor_from_dlpack versioned " + std::to_string(versioned));
  const bool ok =
      check(koila_tensor_from_dlpack(st.in.chance(5) ? nullptr : &out, managed, versioned), "koila_tensor_from_dlpack");
  if (versioned != 0 && versioned != 1) {
    if (prod->deleted != 0) die("koila_tensor_from_dlpack called the deleter of a struct it was told not to read");
    return;
  }
  if (check_out(ok, out, "koila_tensor_from_dlpack")) {
    if (prod->deleted != 0) die("koila_tensor_from_dlpack: the deleter ran while the tensor lives");
    koila_tensor_free(out);  // the producer's buffer goes with prod: the tensor must not outlive it
  }
  if (prod->deleted != 1)
    die("koila_tensor_from_dlpack: the deleter ran " + std::to_string(prod->deleted) + " times, not once");
}

void dlpack_export(State& st) {
  int d = 0;
  koila_tensor* t = pick(st, &d);
  const int versioned = st.in.chance(5) ? static_cast<int>(st.in.range(-1, 3)) : static_cast<int>(st.in.below(2));
  void* out = nullptr;
  note("koila_tensor_to_dlpack versioned " + std::to_string(versioned));
  if (!check(koila_tensor_to_dlpack(st.in.chance(5) ? nullptr : &out, t, versioned), "koila_tensor_to_dlpack")) return;
  if (out == nullptr) die("koila_tensor_to_dlpack succeeded without a struct");
  if (st.in.chance(50)) {  // back into koila (it owns the struct from then on)
    koila_tensor* back = sentinel<koila_tensor>();
    const bool ok = check(koila_tensor_from_dlpack(&back, out, versioned), "koila_tensor_from_dlpack");
    if (check_out(ok, back, "koila_tensor_from_dlpack")) keep(st, back, d);
  } else if (versioned == 1) {
    auto* m = static_cast<FuzzManagedVersioned*>(out);
    if (m->major != 1) die("koila_tensor_to_dlpack: a versioned struct of DLPack " + std::to_string(m->major));
    m->deleter(m);
  } else {
    auto* m = static_cast<FuzzManaged*>(out);
    m->deleter(m);
  }
}

// A plausible training step assembled from valid calls, so that chunked backward, module
// calls and optimizer steps are reached often, not only by chance.
void training_scenario(State& st) {
  note("scenario: lazy batch, linear, tanh, mse, backward, sgd step");
  const int64_t batch = st.in.range(1, 12), in = st.in.range(1, 5), out_f = st.in.range(1, 4);
  std::vector<float> xs(static_cast<size_t>(batch * in)), ws(static_cast<size_t>(out_f * in)),
      ys(static_cast<size_t>(batch * out_f));
  for (float& v : xs) v = static_cast<float>(st.in.real(-1, 1));
  for (float& v : ws) v = static_cast<float>(st.in.real(-1, 1));
  for (float& v : ys) v = static_cast<float>(st.in.real(-1, 1));
  const int64_t xshape[] = {batch, in}, wshape[] = {out_f, in}, yshape[] = {batch, out_f};
  koila_tensor *x = nullptr, *w = nullptr, *y = nullptr, *lx = nullptr, *ly = nullptr, *h = nullptr, *t = nullptr,
               *l = nullptr;
  koila_optimizer* opt = nullptr;
  bool ok =
      check(koila_tensor_from_data(&x, xs.data(), xs.size() * 4, KOILA_FLOAT32, xshape, 2, "cpu"),
            "koila_tensor_from_data") &&
      check(koila_tensor_from_data(&w, ws.data(), ws.size() * 4, KOILA_FLOAT32, wshape, 2, "cpu"),
            "koila_tensor_from_data") &&
      check(koila_tensor_from_data(&y, ys.data(), ys.size() * 4, KOILA_FLOAT32, yshape, 2, "cpu"),
            "koila_tensor_from_data") &&
      check(koila_tensor_set_requires_grad(w, 1), "koila_tensor_set_requires_grad") &&
      check(koila_lazy(&lx, x, 0), "koila_lazy") && check(koila_lazy(&ly, y, 0), "koila_lazy") &&
      check(koila_linear(&h, lx, w, nullptr), "koila_linear") && check(koila_tanh(&t, h), "koila_tanh") &&
      check(koila_mse_loss(&l, t, ly, st.in.chance(50) ? KOILA_REDUCTION_MEAN : KOILA_REDUCTION_SUM), "koila_mse_loss");
  if (!ok) die("the training scenario failed to build");
  // The budget in force may refuse (OUT_OF_MEMORY) but must never leave a half gradient.
  if (check(koila_backward(l), "koila_backward") &&
      check(koila_optimizer_sgd(&opt, &w, 1, 0.01, 0.0, 0.0), "koila_optimizer_sgd")) {
    check(koila_optimizer_step(opt), "koila_optimizer_step");
    koila_optimizer_free(opt);
  }
  // Hand some of it to the pools: later random calls reuse the graph and the parameter.
  koila_tensor* handles[] = {x, w, y, lx, ly, h, t, l};
  for (koila_tensor* handle : handles) {
    if (st.in.chance(25))
      keep(st, handle, 3);
    else
      koila_tensor_free(handle);
  }
}

std::vector<Entry> make_table() {
  std::vector<Entry> table;
  auto add = [&](const char* name, int weight, Action run) { table.push_back({name, std::move(run), weight}); };

  // Library and status.
  add("koila_version", 1, [](State&) {
    note("koila_version");
    if (std::strcmp(koila_version(), "0.1.0") != 0) die("koila_version changed");
  });
  add("koila_status_code", 1, [](State&) {
    note("koila_status_code/message/free of NULL");
    if (koila_status_code(nullptr) != KOILA_OK || std::strcmp(koila_status_message(nullptr), "") != 0)
      die("a NULL status is not success");
    koila_status_free(nullptr);
  });
  add("koila_status_message", 0, [](State&) {});
  add("koila_status_free", 0, [](State&) {});
  add("koila_manual_seed", 1, [](State& st) {
    note("koila_manual_seed");
    check(koila_manual_seed(st.in.u64()), "koila_manual_seed");
  });

  // Tensors.
  add("koila_tensor_from_data", 6, [](State& st) { make_data(st, "koila_tensor_from_data"); });
  factory(table, "koila_tensor_zeros", fuzz_tensor_zeros);
  factory(table, "koila_tensor_ones", fuzz_tensor_ones);
  factory(table, "koila_tensor_randn", fuzz_tensor_randn);
  add("koila_tensor_free", 4, [](State& st) {
    note("koila_tensor_free");
    if (st.tensors.empty() || st.in.chance(10)) return koila_tensor_free(nullptr);
    free_tensor_at(st, static_cast<size_t>(st.in.below(static_cast<int>(st.tensors.size()))));
  });
  add("koila_lazy", 8, [](State& st) {
    int d = 0;
    koila_tensor* t = pick(st, &d);
    const int64_t batch_dim = st.in.chance(10) ? KOILA_NO_BATCH : dim(st);
    note("koila_lazy " + std::to_string(batch_dim));
    op_result(st, "koila_lazy", d - 1, [&](koila_tensor** o) { return koila_lazy(o, t, batch_dim); });
  });
  add("koila_tensor_shape", 1, [](State& st) {
    koila_tensor* t = pick(st);
    int64_t dims[8];
    size_t ndim = 0;
    const size_t capacity = static_cast<size_t>(st.in.below(9));
    note("koila_tensor_shape");
    check(koila_tensor_shape(t, st.in.chance(5) ? nullptr : dims, capacity, st.in.chance(5) ? nullptr : &ndim),
          "koila_tensor_shape");
  });
  add("koila_tensor_dtype", 1, [](State& st) {
    koila_dtype d;
    koila_tensor* t = pick(st);
    note("koila_tensor_dtype");
    check(koila_tensor_dtype(t, st.in.chance(5) ? nullptr : &d), "koila_tensor_dtype");
  });
  add("koila_tensor_batch_dim", 1, [](State& st) {
    int64_t b;
    koila_tensor* t = pick(st);
    note("koila_tensor_batch_dim");
    check(koila_tensor_batch_dim(t, st.in.chance(5) ? nullptr : &b), "koila_tensor_batch_dim");
  });
  add("koila_tensor_is_lazy", 1, [](State& st) {
    int v;
    koila_tensor* t = pick(st);
    note("koila_tensor_is_lazy");
    check(koila_tensor_is_lazy(t, st.in.chance(5) ? nullptr : &v), "koila_tensor_is_lazy");
  });
  add("koila_tensor_to_host", 4, read_to_host);
  add("koila_tensor_item", 3, [](State& st) {
    double v;
    koila_tensor* t = pick(st);
    note("koila_tensor_item");
    check(koila_tensor_item(t, st.in.chance(5) ? nullptr : &v), "koila_tensor_item");
  });
  add("koila_tensor_to_string", 2, [](State& st) {
    koila_tensor* t = pick(st);
    note("koila_tensor_to_string");
    text_out(st, "koila_tensor_to_string",
             [&](char* b, size_t c, size_t* n) { return koila_tensor_to_string(t, b, c, n); });
  });
  add("koila_eval", 2, [](State& st) {
    koila_tensor* t = pick(st);
    note("koila_eval");
    op_result(st, "koila_eval", -1, [&](koila_tensor** o) { return koila_eval(o, t); });
  });

  // Autograd.
  add("koila_tensor_set_requires_grad", 4, [](State& st) {
    koila_tensor* t = pick(st);
    const int f = flag(st);
    note("koila_tensor_set_requires_grad " + std::to_string(f));
    check(koila_tensor_set_requires_grad(t, f), "koila_tensor_set_requires_grad");
  });
  add("koila_backward", 4, [](State& st) {
    koila_tensor* t = pick(st);
    note("koila_backward");
    check(koila_backward(t), "koila_backward");
  });
  add("koila_tensor_grad", 2, [](State& st) {
    koila_tensor* t = pick(st);
    note("koila_tensor_grad");
    koila_tensor* out = sentinel<koila_tensor>();
    const bool ok = check(koila_tensor_grad(&out, t), "koila_tensor_grad");
    if (ok && out == nullptr) return;  // no gradient: success with *out NULL
    if (check_out(ok, out, "koila_tensor_grad")) keep(st, out, 0);
  });
  add("koila_tensor_zero_grad", 1, [](State& st) {
    koila_tensor* t = pick(st);
    note("koila_tensor_zero_grad");
    check(koila_tensor_zero_grad(t), "koila_tensor_zero_grad");
  });

  // Memory and plans.
  add("koila_set_memory_budget", 3, budget);
  add("koila_memory_budget", 1, [](State& st) {
    uint64_t b;
    const char* dev = device(st);
    note("koila_memory_budget");
    check(koila_memory_budget(dev, st.in.chance(5) ? nullptr : &b), "koila_memory_budget");
  });
  add("koila_memory_stats", 1, [](State& st) {
    uint64_t c, p;
    const char* dev = device(st);
    note("koila_memory_stats");
    check(koila_memory_stats(dev, st.in.chance(30) ? nullptr : &c, st.in.chance(30) ? nullptr : &p),
          "koila_memory_stats");
  });
  add("koila_memory_reset_peak", 1, [](State& st) {
    const char* dev = device(st);
    note("koila_memory_reset_peak");
    check(koila_memory_reset_peak(dev), "koila_memory_reset_peak");
  });
  add("koila_plan_new", 4, [](State& st) {
    koila_tensor* t = pick(st);
    const int mode = enum_value(st, 2);
    note("koila_plan_new");
    koila_plan* out = sentinel<koila_plan>();
    const bool ok = check(fuzz_plan_new(&out, t, mode), "koila_plan_new");
    if (!check_out(ok, out, "koila_plan_new")) return;
    if (st.plans.size() >= kMaxPlans) {
      koila_plan_free(st.plans.front());
      st.plans.erase(st.plans.begin());
    }
    st.plans.push_back(out);
  });
  add("koila_plan_batch_size", 1, [](State& st) {
    koila_plan* p = pick_plan(st);
    note("koila_plan getters");
    const int64_t batch = koila_plan_batch_size(p), chunk = koila_plan_chunk_size(p), chunks = koila_plan_num_chunks(p);
    const uint64_t peak = koila_plan_peak_bytes(p), full = koila_plan_full_peak_bytes(p),
                   budget = koila_plan_budget_bytes(p), need = koila_plan_needed_bytes(p),
                   full_need = koila_plan_full_needed_bytes(p);
    // A batch of 0 samples runs as one chunk of 0 (the whole batch fits).
    const bool chunk_fits = batch == 0 ? chunk == 0 : chunk >= 1 && chunk <= batch;
    if (p && batch >= 0 && (!chunk_fits || chunks < 1))
      die("plan with batch " + std::to_string(batch) + " has chunk " + std::to_string(chunk) + " and " +
          std::to_string(chunks) + " chunks");
    // Under KOILA_LARGEST a batch is split only when the whole does not fit; under FASTEST a
    // smaller chunk that fits may be chosen (or measured) although its estimate is higher.
    if (p && chunks > 1 && peak > full && !plan_says(p, "KOILA_CHUNK_FASTEST"))
      die("a split plan estimates more than the unsplit run");
    // A plan that exists fits: its need (the estimate with koila's margin) is within its
    // budget, and no less than its estimate; a split one was split because the unsplit need
    // is not (under KOILA_CHUNK_LARGEST).
    if (p && (need < peak || full_need < full || (batch >= 0 && need > budget)))
      die("plan needs " + std::to_string(need) + " (unsplit " + std::to_string(full_need) + ") for peaks " +
          std::to_string(peak) + " / " + std::to_string(full) + " under a budget of " + std::to_string(budget));
    if (p && chunks > 1 && full_need <= budget && !plan_says(p, "KOILA_CHUNK_FASTEST"))
      die("a plan was split although its unsplit need is within the budget");
    // What a plan recomputes, it names; a plan that fits unsplit without it recomputes nothing.
    const uint64_t recomputed = koila_plan_recomputed_bytes(p);
    if (p && recomputed > 0 && !plan_says(p, "Recomputed:"))
      die("a plan recomputes " + std::to_string(recomputed) + " bytes without saying what");
    if (p && recomputed > 0 && full_need <= budget) die("a plan recomputes although the unsplit run fits without");
  });
  for (const char* getter : {"koila_plan_chunk_size", "koila_plan_num_chunks", "koila_plan_peak_bytes",
                             "koila_plan_full_peak_bytes", "koila_plan_budget_bytes", "koila_plan_needed_bytes",
                             "koila_plan_full_needed_bytes", "koila_plan_recomputed_bytes"})
    add(getter, 0, [](State&) {});  // exercised together by koila_plan_batch_size's action
  add("koila_set_progress", 1, [](State& st) {
    // Set (counting calls, checking what each reports) or cleared; the counter is static,
    // so the callback stays valid whatever runs after this action.
    static long calls = 0;
    const bool on = !st.in.chance(3);
    note(on ? "koila_set_progress on" : "koila_set_progress off");
    koila_progress_fn fn = [](void* user, const char* what, int64_t done, int64_t total) {
      if (!what || (std::string(what) != "forward" && std::string(what) != "backward") || done < 1 || done > total)
        die("progress callback got what=" + std::string(what ? what : "NULL") + " done=" + std::to_string(done) +
            " total=" + std::to_string(total));
      ++*static_cast<long*>(user);
    };
    check(koila_set_progress(on ? fn : nullptr, &calls), "koila_set_progress");
  });
  // Chunking options, with any int: a known value is taken, any other refused as an invalid
  // argument. Either setting only changes how runs split (statistics per chunk change the
  // results of batch norm in training, which this fuzzer does not compare), so it may stay
  // in force for the rest of the program; free_all restores the defaults.
  auto chunking_option = [](const char* fn, koila_status* (*set)(int), int count) {
    return [fn, set, count](State& st) {
      const int policy = enum_value(st, count);
      note(std::string(fn) + " " + std::to_string(policy));
      koila_status* s = set(policy);
      const koila_code code = koila_status_code(s);
      check(s, fn);
      const koila_code expected = policy >= 0 && policy < count ? KOILA_OK : KOILA_ERROR_INVALID_ARGUMENT;
      if (code != expected)
        die(std::string(fn) + "(" + std::to_string(policy) + ") returned code " +
            std::to_string(static_cast<int>(code)));
    };
  };
  add("koila_set_batch_stats", 1, chunking_option("koila_set_batch_stats", fuzz_set_batch_stats, 2));
  add("koila_set_chunking", 1, chunking_option("koila_set_chunking", fuzz_set_chunking, 2));
  add("koila_set_recompute", 1, chunking_option("koila_set_recompute", fuzz_set_recompute, 3));
  add("koila_plan_describe", 1, [](State& st) {
    koila_plan* p = pick_plan(st);
    note("koila_plan_describe");
    text_out(st, "koila_plan_describe", [&](char* b, size_t c, size_t* n) { return koila_plan_describe(p, b, c, n); });
  });
  add("koila_plan_timeline", 2, [](State& st) {
    koila_plan* p = pick_plan(st);
    const int unsplit = flag(st);
    note("koila_plan_timeline " + std::to_string(unsplit));
    koila_timeline* out = sentinel<koila_timeline>();
    const bool ok = check(koila_plan_timeline(&out, p, unsplit), "koila_plan_timeline");
    if (!check_out(ok, out, "koila_plan_timeline")) return;
    if (st.timelines.size() >= kMaxTimelines) {
      koila_timeline_free(st.timelines.front());
      st.timelines.erase(st.timelines.begin());
    }
    st.timelines.push_back(out);
  });
  add("koila_timeline_length", 1, [](State& st) {
    note("koila_timeline getters");
    read_timeline(st, pick_timeline(st));
  });
  for (const char* getter : {"koila_timeline_op", "koila_timeline_phase", "koila_timeline_chunk",
                             "koila_timeline_live_bytes", "koila_timeline_peak_bytes", "koila_timeline_peak_index"})
    add(getter, 0, [](State&) {});  // exercised together by koila_timeline_length's action
  add("koila_timeline_part", 1, [](State& st) {
    koila_timeline* t = pick_timeline(st);
    const int part = enum_value(st, 5);
    uint64_t bytes = 0;
    note("koila_timeline_part " + std::to_string(part));
    const bool ok = check(fuzz_timeline_part(t, part, st.in.chance(5) ? nullptr : &bytes), "koila_timeline_part");
    if (ok && (part < 0 || part > 4)) die("koila_timeline_part took an unknown part");
  });
  add("koila_timeline_free", 1, [](State& st) {
    note("koila_timeline_free");
    if (st.timelines.empty() || st.in.chance(10)) return koila_timeline_free(nullptr);
    const size_t i = static_cast<size_t>(st.in.below(static_cast<int>(st.timelines.size())));
    koila_timeline_free(st.timelines[i]);
    st.timelines.erase(st.timelines.begin() + static_cast<long>(i));
  });
  add("koila_plan_free", 1, [](State& st) {
    note("koila_plan_free");
    if (st.plans.empty() || st.in.chance(10)) return koila_plan_free(nullptr);
    const size_t i = static_cast<size_t>(st.in.below(static_cast<int>(st.plans.size())));
    koila_plan_free(st.plans[i]);
    st.plans.erase(st.plans.begin() + static_cast<long>(i));
  });

  // Operators.
#define BINARY(NAME) binary(table, "koila_" #NAME, koila_##NAME);
#define SCALAR(NAME) scalar(table, "koila_" #NAME, koila_##NAME);
#define UNARY(NAME) unary(table, "koila_" #NAME, koila_##NAME);
#define WITH_DIM(NAME) with_dim(table, "koila_" #NAME, koila_##NAME);
  KOILA_FUZZ_BINARY_OPS(BINARY)
  KOILA_FUZZ_SCALAR_OPS(SCALAR)
  KOILA_FUZZ_UNARY_OPS(UNARY)
  KOILA_FUZZ_WITH_DIM_OPS(WITH_DIM)
#undef BINARY
#undef SCALAR
#undef UNARY
#undef WITH_DIM
  add("koila_clamp", 1, [](State& st) {
    int d = 0;
    koila_tensor* x = pick(st, &d);
    const double lo = st.in.real(-2, 2), hi = st.in.chance(5) ? NAN : st.in.real(-2, 2);
    note("koila_clamp");
    op_result(st, "koila_clamp", d, [&](koila_tensor** o) { return koila_clamp(o, x, lo, hi); });
  });
  add("koila_dropout", 2, [](State& st) {
    int d = 0;
    koila_tensor* x = pick(st, &d);
    const double p = st.in.chance(10) ? st.in.real(-1, 2) : st.in.real(0, 1);
    const int train = flag(st);
    note("koila_dropout");
    op_result(st, "koila_dropout", d, [&](koila_tensor** o) { return koila_dropout(o, x, p, train); });
  });
  add("koila_linear", 3, [](State& st) {
    int d = 0;
    koila_tensor* x = pick(st, &d);
    koila_tensor* w = pick(st, &d);
    koila_tensor* b = optional(st, &d);
    note("koila_linear");
    op_result(st, "koila_linear", d, [&](koila_tensor** o) { return koila_linear(o, x, w, b); });
  });
  for (int spatial : {1, 2}) {
    const char* name = spatial == 1 ? "koila_conv1d" : "koila_conv2d";
    add(name, 2, [name, spatial](State& st) {
      int d = 0;
      koila_tensor* x = pick(st, &d);
      koila_tensor* w = pick(st, &d);
      koila_tensor* b = optional(st, &d);
      const Ints s = ints(st, 2, 0, 3), p = ints(st, 2, -1, 2), dl = ints(st, 2, 0, 2);
      const int64_t groups = st.in.range(-1, 3);
      auto show = [](const Ints& a, size_t n) {
        if (a.null) return std::string("NULL");
        std::string out;
        for (size_t i = 0; i < n; ++i) out += (i ? "," : "") + std::to_string(a.v[i]);
        return out;
      };
      note(std::string(name) + " stride " + show(s, spatial) + " padding " + show(p, spatial) + " dilation " +
           show(dl, spatial) + " groups " + std::to_string(groups));
      op_result(st, name, d, [&](koila_tensor** o) {
        return spatial == 1 ? koila_conv1d(o, x, w, b, s.ptr(), p.ptr(), dl.ptr(), groups)
                            : koila_conv2d(o, x, w, b, s.ptr(), p.ptr(), dl.ptr(), groups);
      });
    });
  }
  for (int max : {0, 1}) {
    const char* name = max ? "koila_max_pool2d" : "koila_avg_pool2d";
    add(name, 2, [name, max](State& st) {
      int d = 0;
      koila_tensor* x = pick(st, &d);
      const Ints k = ints(st, 2, -1, 3), s = ints(st, 2, -1, 3), p = ints(st, 2, -1, 2);
      const int ceil = flag(st);
      note(name);
      op_result(st, name, d, [&](koila_tensor** o) {
        return max ? koila_max_pool2d(o, x, k.ptr(), s.ptr(), p.ptr(), ceil)
                   : koila_avg_pool2d(o, x, k.ptr(), s.ptr(), p.ptr(), ceil);
      });
    });
  }
  // Ops of an image and one pair of sizes: adaptive pooling's output size, upsampling's factors.
  for (int adaptive : {0, 1}) {
    const char* name = adaptive ? "koila_adaptive_avg_pool2d" : "koila_upsample_nearest2d";
    add(name, 1, [name, adaptive](State& st) {
      int d = 0;
      koila_tensor* x = pick(st, &d);
      const Ints sizes = ints(st, 2, -1, adaptive ? 4 : 3);
      note(name);
      op_result(st, name, d, [&](koila_tensor** o) {
        return adaptive ? koila_adaptive_avg_pool2d(o, x, sizes.ptr()) : koila_upsample_nearest2d(o, x, sizes.ptr());
      });
    });
  }
  add("koila_batch_norm", 2, [](State& st) {
    int d = 0;
    koila_tensor* x = pick(st, &d);
    koila_tensor *w = optional(st, &d), *b = optional(st, &d), *rm = optional(st, &d), *rv = optional(st, &d);
    const int training = flag(st);
    const double momentum = st.in.real(-0.5, 1.5), eps = st.in.chance(10) ? 0.0 : 1e-5;
    note("koila_batch_norm");
    op_result(st, "koila_batch_norm", d,
              [&](koila_tensor** o) { return koila_batch_norm(o, x, w, b, rm, rv, training, momentum, eps); });
  });
  add("koila_layer_norm", 2, [](State& st) {
    int d = 0;
    koila_tensor* x = pick(st, &d);
    const Ints shape = ints(st, 3, -1, 4);
    koila_tensor *w = optional(st, &d), *b = optional(st, &d);
    const double eps = st.in.chance(10) ? -1.0 : 1e-5;
    note("koila_layer_norm");
    op_result(st, "koila_layer_norm", d,
              [&](koila_tensor** o) { return koila_layer_norm(o, x, shape.ptr(), shape.n, w, b, eps); });
  });
  add("koila_embedding", 2, [](State& st) {
    int d = 0;
    koila_tensor* w = pick(st, &d);
    koila_tensor* i = pick(st, &d);
    note("koila_embedding");
    op_result(st, "koila_embedding", d, [&](koila_tensor** o) { return koila_embedding(o, w, i); });
  });
  add("koila_scaled_dot_product_attention", 2, [](State& st) {
    int d = 0;
    koila_tensor *q = pick(st, &d), *k = pick(st, &d), *v = pick(st, &d), *m = optional(st, &d);
    const int causal = flag(st);
    note("koila_scaled_dot_product_attention");
    op_result(st, "koila_scaled_dot_product_attention", d,
              [&](koila_tensor** o) { return koila_scaled_dot_product_attention(o, q, k, v, m, causal); });
  });
  reduction(table, "koila_sum", koila_sum);
  reduction(table, "koila_mean", koila_mean);
  reduction(table, "koila_amax", koila_amax);
  reduction(table, "koila_amin", koila_amin);
  add("koila_argmax", 1, [](State& st) {
    int d = 0;
    koila_tensor* x = pick(st, &d);
    const int64_t dm = dim(st);
    const int keepdim = flag(st);
    note("koila_argmax");
    op_result(st, "koila_argmax", d, [&](koila_tensor** o) { return koila_argmax(o, x, dm, keepdim); });
  });
  add("koila_reshape", 3, [](State& st) {
    int d = 0;
    koila_tensor* x = pick(st, &d);
    Ints shape = ints(st, 5, -2, 6);
    // Often a valid reshape: the same element count, maybe with one -1.
    if (x && st.in.chance(60)) {
      const std::vector<int64_t> s = shape_of(x);
      shape.n = s.size();
      std::copy(s.begin(), s.end(), shape.v);
      if (!s.empty() && st.in.chance(50)) shape.v[st.in.below(static_cast<int>(s.size()))] = -1;
      if (s.size() >= 2 && st.in.chance(40)) {  // merge the last two dims
        shape.v[s.size() - 2] = s[s.size() - 2] * s[s.size() - 1];
        shape.n = s.size() - 1;
      }
      shape.null = false;
    }
    note("koila_reshape n " + std::to_string(shape.n));
    op_result(st, "koila_reshape", d, [&](koila_tensor** o) { return koila_reshape(o, x, shape.ptr(), shape.n); });
  });
  add("koila_permute", 2, [](State& st) {
    int d = 0;
    koila_tensor* x = pick(st, &d);
    Ints dims = ints(st, 5, -5, 5);
    if (x && st.in.chance(60)) {  // a real permutation
      const size_t rank = shape_of(x).size();
      dims.n = rank;
      for (size_t i = 0; i < rank; ++i) dims.v[i] = static_cast<int64_t>(i);
      for (size_t i = rank; i > 1; --i) std::swap(dims.v[i - 1], dims.v[st.in.below(static_cast<int>(i))]);
      dims.null = false;
    }
    note("koila_permute");
    op_result(st, "koila_permute", d, [&](koila_tensor** o) { return koila_permute(o, x, dims.ptr(), dims.n); });
  });
  for (int stack : {0, 1}) {
    const char* name = stack ? "koila_stack" : "koila_cat";
    add(name, 2, [name, stack](State& st) {
      int d = 0;
      std::vector<koila_tensor*> list(static_cast<size_t>(st.in.below(4)));
      koila_tensor* first = pick(st, &d);
      for (koila_tensor*& t : list) t = st.in.chance(60) ? first : pick(st, &d);
      const int64_t dm = dim(st);
      koila_tensor* const* ptr = st.in.chance(4) ? nullptr : list.data();
      note(std::string(name) + " n " + std::to_string(list.size()));
      op_result(st, name, d, [&](koila_tensor** o) {
        return stack ? koila_stack(o, ptr, list.size(), dm) : koila_cat(o, ptr, list.size(), dm);
      });
    });
  }
  with_two_dims(table, "koila_transpose", koila_transpose);
  with_two_dims(table, "koila_flatten", koila_flatten);
  with_dim(table, "koila_squeeze", koila_squeeze);
  with_dim(table, "koila_unsqueeze", koila_unsqueeze);
  add("koila_narrow", 2, [](State& st) {
    int d = 0;
    koila_tensor* x = pick(st, &d);
    const int64_t dm = dim(st), start = st.in.range(-4, 4), length = st.in.range(-1, 4);
    note("koila_narrow");
    op_result(st, "koila_narrow", d, [&](koila_tensor** o) { return koila_narrow(o, x, dm, start, length); });
  });
  add("koila_index_select", 2, [](State& st) {
    int d = 0;
    koila_tensor* x = pick(st, &d);
    const int64_t dm = dim(st);
    koila_tensor* i = pick(st, &d);
    note("koila_index_select");
    op_result(st, "koila_index_select", d, [&](koila_tensor** o) { return koila_index_select(o, x, dm, i); });
  });
  loss(table, "koila_cross_entropy", fuzz_cross_entropy);
  loss(table, "koila_nll_loss", fuzz_nll_loss);
  loss(table, "koila_mse_loss", fuzz_mse_loss);
  loss(table, "koila_l1_loss", fuzz_l1_loss);
  loss(table, "koila_binary_cross_entropy_with_logits", fuzz_bce_with_logits);

  // Modules.
  add("koila_module_load", 2, load_module);
  add("koila_module_save", 1, [](State& st) {
    koila_module* m = pick_module(st);
    const std::string path = st.scratch + "/saved.pt";
    const char* p = st.in.chance(5) ? nullptr : st.in.chance(10) ? "/nonexistent-dir/x.pt" : path.c_str();
    note("koila_module_save");
    check(koila_module_save(m, p), "koila_module_save");
  });
  add("koila_module_forward", 3, [](State& st) {
    koila_module* m = pick_module(st);
    int d = 0;
    std::vector<koila_tensor*> inputs(static_cast<size_t>(st.in.below(3)));
    for (koila_tensor*& t : inputs) t = pick(st, &d);
    koila_tensor* const* ptr = st.in.chance(3) ? nullptr : inputs.data();
    note("koila_module_forward n " + std::to_string(inputs.size()));
    op_result(st, "koila_module_forward", d,
              [&](koila_tensor** o) { return koila_module_forward(o, m, ptr, inputs.size()); });
  });
  add("koila_module_forward_all", 2, [](State& st) {
    koila_module* m = pick_module(st);
    int d = 0;
    std::vector<koila_tensor*> inputs(static_cast<size_t>(st.in.below(3)));
    for (koila_tensor*& t : inputs) t = pick(st, &d);
    koila_tensor* const* ptr = st.in.chance(3) ? nullptr : inputs.data();
    const size_t capacity = static_cast<size_t>(st.in.range(0, 4));
    std::vector<koila_tensor*> out(capacity, sentinel<koila_tensor>());
    size_t count = 99;
    note("koila_module_forward_all n " + std::to_string(inputs.size()) + " capacity " + std::to_string(capacity));
    const bool ok = check(koila_module_forward_all(st.in.chance(8) ? nullptr : out.data(), capacity,
                                                   st.in.chance(8) ? nullptr : &count, m, ptr, inputs.size()),
                          "koila_module_forward_all");
    if (ok && count > capacity) die("koila_module_forward_all: succeeded with more results than room");
    for (size_t k = 0; k < capacity; ++k) {
      const bool written = ok && k < count;
      if (!written && out[k] != sentinel<koila_tensor>()) die("koila_module_forward_all: wrote past its results");
      if (written && out[k] == sentinel<koila_tensor>()) die("koila_module_forward_all: left a result unset");
      if (written && out[k]) keep(st, out[k], d + 1);
    }
  });
  add("koila_module_train", 1, [](State& st) {
    koila_module* m = pick_module(st);
    const int on = flag(st);
    note("koila_module_train");
    check(koila_module_train(m, on), "koila_module_train");
  });
  add("koila_module_is_training", 1, [](State& st) {
    koila_module* m = pick_module(st);
    int v;
    note("koila_module_is_training");
    check(koila_module_is_training(m, st.in.chance(5) ? nullptr : &v), "koila_module_is_training");
  });
  add("koila_module_num_parameters", 1, [](State& st) {
    koila_module* m = pick_module(st);
    size_t n;
    note("koila_module_num_parameters");
    check(koila_module_num_parameters(m, st.in.chance(5) ? nullptr : &n), "koila_module_num_parameters");
  });
  add("koila_module_parameter", 2, [](State& st) {
    koila_module* m = pick_module(st);
    const size_t i = static_cast<size_t>(st.in.chance(10) ? st.in.range(0, 1000) : st.in.range(0, 5));
    note("koila_module_parameter " + std::to_string(i));
    op_result(st, "koila_module_parameter", -1, [&](koila_tensor** o) { return koila_module_parameter(o, m, i); });
  });
  add("koila_module_parameter_name", 1, [](State& st) {
    koila_module* m = pick_module(st);
    const size_t i = static_cast<size_t>(st.in.range(0, 6));
    note("koila_module_parameter_name");
    text_out(st, "koila_module_parameter_name",
             [&](char* b, size_t c, size_t* n) { return koila_module_parameter_name(m, i, b, c, n); });
  });
  add("koila_module_kind_of", 1, [](State& st) {
    koila_module* m = pick_module(st);
    koila_module_kind kind;
    note("koila_module_kind_of");
    check(koila_module_kind_of(m, st.in.chance(5) ? nullptr : &kind), "koila_module_kind_of");
  });
  add("koila_module_num_buffers", 1, [](State& st) {
    koila_module* m = pick_module(st);
    size_t n;
    note("koila_module_num_buffers");
    check(koila_module_num_buffers(m, st.in.chance(5) ? nullptr : &n), "koila_module_num_buffers");
  });
  add("koila_module_buffer", 1, [](State& st) {
    koila_module* m = pick_module(st);
    const size_t i = static_cast<size_t>(st.in.chance(10) ? st.in.range(0, 1000) : st.in.range(0, 3));
    note("koila_module_buffer " + std::to_string(i));
    op_result(st, "koila_module_buffer", -1, [&](koila_tensor** o) { return koila_module_buffer(o, m, i); });
  });
  add("koila_module_buffer_name", 1, [](State& st) {
    koila_module* m = pick_module(st);
    const size_t i = static_cast<size_t>(st.in.range(0, 4));
    note("koila_module_buffer_name");
    text_out(st, "koila_module_buffer_name",
             [&](char* b, size_t c, size_t* n) { return koila_module_buffer_name(m, i, b, c, n); });
  });
  add("koila_module_free", 1, [](State& st) {
    note("koila_module_free");
    if (st.modules.empty() || st.in.chance(10)) return koila_module_free(nullptr);
    const size_t i = static_cast<size_t>(st.in.below(static_cast<int>(st.modules.size())));
    koila_module_free(st.modules[i]);
    st.modules.erase(st.modules.begin() + static_cast<long>(i));
  });

  // Optimizers.
  add("koila_optimizer_sgd", 1, [](State& st) { make_optimizer(st, OptKind::Sgd); });
  add("koila_optimizer_adam", 1, [](State& st) { make_optimizer(st, OptKind::Adam); });
  add("koila_optimizer_adamw", 1, [](State& st) { make_optimizer(st, OptKind::AdamW); });
  add("koila_optimizer_set_lr", 1, [](State& st) {
    koila_optimizer* o = pick_optimizer(st);
    const double lr = st.in.chance(5) ? (st.in.chance(50) ? NAN : -0.5) : st.in.real(0, 0.1);
    note("koila_optimizer_set_lr");
    check(koila_optimizer_set_lr(o, lr), "koila_optimizer_set_lr");
  });
  add("koila_optimizer_lr", 1, [](State& st) {
    koila_optimizer* o = pick_optimizer(st);
    double lr = -1;
    note("koila_optimizer_lr");
    if (check(koila_optimizer_lr(o, st.in.chance(5) ? nullptr : &lr), "koila_optimizer_lr") &&
        !(lr >= 0 && std::isfinite(lr)))
      die("koila_optimizer_lr gave " + std::to_string(lr));
  });
  add("koila_optimizer_save", 1, [](State& st) { save_or_load_optimizer(st, true); });
  add("koila_optimizer_load", 1, [](State& st) { save_or_load_optimizer(st, false); });
  add("koila_rng_save", 1, [](State& st) { save_or_load_rng(st, true); });
  add("koila_rng_load", 1, [](State& st) { save_or_load_rng(st, false); });
  add("koila_clip_grad_norm", 1, [](State& st) {
    std::vector<koila_tensor*> params = pick_params(st);
    koila_tensor* const* list = st.in.chance(3) ? nullptr : params.data();
    const double max_norm = st.in.chance(5) ? (st.in.chance(50) ? NAN : -1.0) : st.in.real(0, 2);
    double norm = -1;
    note("koila_clip_grad_norm n " + std::to_string(params.size()));
    if (check(koila_clip_grad_norm(st.in.chance(5) ? nullptr : &norm, list, params.size(), max_norm),
              "koila_clip_grad_norm") &&
        !(norm >= 0 && std::isfinite(norm)))
      die("koila_clip_grad_norm succeeded with norm " + std::to_string(norm));
  });
  add("koila_tensor_from_dlpack", 1, dlpack_import);
  add("koila_tensor_to_dlpack", 1, dlpack_export);
  add("koila_optimizer_step", 2, [](State& st) {
    koila_optimizer* o = pick_optimizer(st);
    note("koila_optimizer_step");
    check(koila_optimizer_step(o), "koila_optimizer_step");
  });
  add("koila_optimizer_zero_grad", 1, [](State& st) {
    koila_optimizer* o = pick_optimizer(st);
    note("koila_optimizer_zero_grad");
    check(koila_optimizer_zero_grad(o), "koila_optimizer_zero_grad");
  });
  add("koila_optimizer_free", 1, [](State& st) {
    note("koila_optimizer_free");
    if (st.optimizers.empty() || st.in.chance(10)) return koila_optimizer_free(nullptr);
    const size_t i = static_cast<size_t>(st.in.below(static_cast<int>(st.optimizers.size())));
    koila_optimizer_free(st.optimizers[i]);
    st.optimizers.erase(st.optimizers.begin() + static_cast<long>(i));
  });

  // Process groups join other processes (tests/test_groups.cpp runs them); here only the
  // calls that must fail at once without joining anything: NULL handles, bad arguments.
  add("koila_group_new", 1, [](State& st) {
    static const char* const backends[] = {"gloo", "nccl", "mpi", "", nullptr};
    static const char* const inits[] = {"tcp://127.0.0.1", "udp://h:1", "file://relative", "", "tcp://:0", nullptr};
    const char* backend = backends[st.in.below(5)];
    const char* init = inits[st.in.below(6)];
    const int world = st.in.below(4) - 1, rank = st.in.below(5) - 2;
    const int64_t timeout = st.in.below(3) - 1;
    note("koila_group_new with bad arguments");
    koila_group* out = sentinel<koila_group>();
    const bool null_out = st.in.chance(10);
    if (check(koila_group_new(null_out ? nullptr : &out, backend, init, rank, world, timeout), "koila_group_new"))
      die("koila_group_new succeeded with bad arguments");
    if (!null_out) check_out(false, out, "koila_group_new");
  });
  add("koila_group_new_from_env", 1, [](State& st) {
    static const char* const backends[] = {"gloo", "nccl", "mpi", "", nullptr};
    const char* backend = backends[st.in.below(5)];
    int64_t timeout = st.in.below(3) - 1;
    // Outside a launcher (no WORLD_SIZE) it fails at once whatever the arguments; inside one,
    // only arguments that fail before joining are used.
    if (std::getenv("WORLD_SIZE")) timeout = 0;
    note("koila_group_new_from_env outside a launcher or with bad arguments");
    koila_group* out = sentinel<koila_group>();
    const bool null_out = st.in.chance(10);
    if (check(koila_group_new_from_env(null_out ? nullptr : &out, backend, timeout), "koila_group_new_from_env"))
      die("koila_group_new_from_env joined a group outside a launcher");
    if (!null_out) check_out(false, out, "koila_group_new_from_env");
  });
  add("koila_group_rank", 1, [](State&) {
    note("koila_group_rank/size/local_rank of NULL");
    if (koila_group_rank(nullptr) != -1 || koila_group_size(nullptr) != -1 || koila_group_local_rank(nullptr) != -1)
      die("a NULL group has a rank or size");
  });
  add("koila_group_local_rank", 0, [](State&) {});  // exercised by koila_group_rank's action
  add("koila_group_size", 0, [](State&) {});        // exercised by koila_group_rank's action
  add("koila_group_broadcast", 1, [](State& st) {
    koila_tensor* ts[2] = {pick(st), pick(st)};
    note("koila_group_broadcast on a NULL group");
    koila_status* s = koila_group_broadcast(nullptr, ts, static_cast<size_t>(st.in.below(3)), st.in.below(3) - 1);
    const koila_code code = koila_status_code(s);
    check(s, "koila_group_broadcast");
    if (code != KOILA_ERROR_INVALID_ARGUMENT) die("koila_group_broadcast on a NULL group gave " + std::to_string(code));
  });
  add("koila_group_backward", 1, [](State& st) {
    koila_tensor* loss = pick(st);
    koila_tensor* params[2] = {pick(st), pick(st)};
    note("koila_group_backward on a NULL group");
    koila_status* s = koila_group_backward(nullptr, loss, params, static_cast<size_t>(st.in.below(3)));
    const koila_code code = koila_status_code(s);
    check(s, "koila_group_backward");
    if (code != KOILA_ERROR_INVALID_ARGUMENT) die("koila_group_backward on a NULL group gave " + std::to_string(code));
  });
  add("koila_group_free", 1, [](State&) {
    note("koila_group_free(NULL)");
    koila_group_free(nullptr);
  });

  add("training scenario", 3, training_scenario);
  return table;
}

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = make_table();
  return t;
}

// Frees whatever is left, in random order.
void free_all(State& st) {
  while (!st.tensors.empty()) free_tensor_at(st, static_cast<size_t>(st.in.below(static_cast<int>(st.tensors.size()))));
  for (koila_plan* p : st.plans) koila_plan_free(p);
  for (koila_timeline* t : st.timelines) koila_timeline_free(t);
  st.timelines.clear();
  for (koila_optimizer* o : st.optimizers) koila_optimizer_free(o);
  for (koila_module* m : st.modules) koila_module_free(m);
  st.plans.clear();
  st.optimizers.clear();
  st.modules.clear();
  koila_status_free(koila_set_memory_budget("cpu", 0));
  koila_status_free(koila_set_progress(nullptr, nullptr));
  koila_status_free(koila_set_batch_stats(KOILA_BATCH_STATS_EXACT));
  koila_status_free(koila_set_chunking(KOILA_CHUNK_LARGEST));
  koila_status_free(koila_set_recompute(KOILA_RECOMPUTE_AS_NEEDED));
}

// Runs `calls` steps (or until a buffer runs out).
void run(State& st, long calls) {
  const auto& t = table();
  int total = 0;
  for (const Entry& e : t) total += e.weight;
  for (g_call = 0; g_call < calls && !st.in.exhausted(); ++g_call) {
    int r = st.in.below(total);
    for (const Entry& e : t) {
      if (r < e.weight) {
        e.run(st);
        g_ran.insert(e.name);
        break;
      }
      r -= e.weight;
    }
  }
  free_all(st);
}

// The corpus of module files: the good ones in `dir`, and made here from them: truncated
// copies, random bytes, an empty file and a directory, plus a path that does not exist.
std::vector<std::string> make_corpus(const std::string& dir, const std::string& scratch) {
  std::vector<std::string> files;
  for (const char* name : {"mlp.pt", "cnn.pt", "mlp.pt2", "convbn_train.pt2", "lstm_full.pt2"}) {
    const std::string path = dir + "/" + name;
    std::ifstream file(path, std::ios::binary);
    if (!file) continue;
    files.push_back(path);
    const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    for (size_t cut : {bytes.size() / 2, bytes.size() - 1, size_t{100}}) {
      const std::string truncated = scratch + "/truncated-" + std::to_string(cut) + "-" + name;
      std::ofstream(truncated, std::ios::binary)
          .write(bytes.data(), static_cast<std::streamsize>(std::min(cut, bytes.size())));
      files.push_back(truncated);
    }
  }
  uint64_t state = 42;
  std::string junk(4096, '\0');
  for (char& c : junk) c = static_cast<char>(splitmix64(state));
  std::ofstream(scratch + "/junk.pt", std::ios::binary) << junk;
  std::ofstream(scratch + "/empty.pt", std::ios::binary);
  files.push_back(scratch + "/junk.pt");
  files.push_back(scratch + "/empty.pt");
  files.push_back(scratch);
  files.push_back(scratch + "/missing.pt");
  return files;
}

// Every function koila.h declares must have an action: the fuzzer covers the whole API.
void check_covers_header(const std::string& header) {
  std::ifstream file(header);
  if (!file) die("cannot read " + header);
  std::set<std::string> declared, covered;
  std::string line;
  while (std::getline(file, line)) {
    const size_t api = line.find("KOILA_API"), paren = line.find('(');
    if (api != 0 || paren == std::string::npos) continue;  // declarations start the line
    size_t begin = paren;
    while (begin > 0 && (std::isalnum(static_cast<unsigned char>(line[begin - 1])) || line[begin - 1] == '_')) --begin;
    declared.insert(line.substr(begin, paren - begin));
  }
  for (const Entry& e : table()) covered.insert(e.name);
  std::string missing;
  for (const std::string& f : declared)
    if (!covered.count(f)) missing += " " + f;
  if (!missing.empty()) die("the fuzzer has no action for:" + missing);
  std::printf("api_fuzz: covers all %zu functions of koila.h\n", declared.size());
}

std::string make_scratch() {
  char tmpl[] = "/tmp/koila-api-fuzz-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (!dir) die("mkdtemp failed");
  return dir;
}

void remove_scratch(const std::string& dir) {
  const std::string command = "rm -rf '" + dir + "'";
  if (std::system(command.c_str()) != 0) std::fprintf(stderr, "api_fuzz: could not remove %s\n", dir.c_str());
}

}  // namespace

#ifdef KOILA_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string scratch = make_scratch();
  static const std::vector<std::string> corpus =
      make_corpus(std::getenv("KOILA_FUZZ_MODELS") ? std::getenv("KOILA_FUZZ_MODELS") : ".", scratch);
  g_context = "libFuzzer input";
  Source source(data, size);
  State st(source);
  st.module_files = corpus;
  st.scratch = scratch;
  run(st, 2000);
  return 0;
}
#else
int main(int argc, char** argv) {
  uint64_t seed = 1;
  long calls = 10000;
  std::string models = ".", header, replay;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "api_fuzz: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seed")
      seed = std::stoull(value());
    else if (a == "--calls")
      calls = std::stol(value());
    else if (a == "--models")
      models = value();
    else if (a == "--header")
      header = value();
    else if (a == "--replay")
      replay = value();
    else if (a == "--trace")
      g_trace = true;
    else {
      std::fprintf(stderr,
                   "usage: koila_api_fuzz [--seed S] [--calls N] [--models DIR] [--header koila.h] "
                   "[--replay FILE] [--trace]\n");
      return 2;
    }
  }
  if (!header.empty()) check_covers_header(header);
  const std::string scratch = make_scratch();
  std::string bytes;
  if (!replay.empty()) {
    std::ifstream file(replay, std::ios::binary);
    if (!file) die("cannot read " + replay);
    bytes.assign((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  }
  g_context = replay.empty() ? "--seed " + std::to_string(seed) : "--replay " + replay;
  Source source = replay.empty() ? Source(seed) : Source(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  State st(source);
  st.module_files = make_corpus(models, scratch);
  st.scratch = scratch;
  run(st, calls);
  remove_scratch(scratch);

  long ok = 0, refused = 0;
  std::map<int, long> by_code;
  for (const auto& [fn, codes] : g_outcomes)
    for (const auto& [code, n] : codes) {
      (code == 0 ? ok : refused) += n;
      by_code[code] += n;
    }
  std::printf("api_fuzz: %s, %ld steps, %ld checked calls: %ld ok, %ld refused (", g_context.c_str(), g_call,
              ok + refused, ok, refused);
  for (const auto& [code, n] : by_code)
    if (code) std::printf(" code %d: %ld", code, n);
  // Actions of weight 0 (koila_status_message and _free, the plan getters) run inside others.
  const auto runnable = std::count_if(table().begin(), table().end(), [](const Entry& e) { return e.weight > 0; });
  std::printf(" ), %zu functions returned a status, %zu of %ld actions ran\n", g_outcomes.size(), g_ran.size(),
              static_cast<long>(runnable));
  return 0;
}
#endif
