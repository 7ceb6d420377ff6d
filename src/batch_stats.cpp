#include "batch_stats.h"

#include <c10/core/GradMode.h>

#include <exception>

#include "error.h"

namespace koila {

namespace {

// One batch norm call of a pass: the statistics of the chunks seen so far, combined.
struct Call {
  at::Tensor running_mean, running_var;
  double factor = 0;   // the update factor the call passed (its momentum)
  double count = 0;    // values per channel
  at::Tensor mean;     // [C] double
  at::Tensor m2;       // [C] double: sum of squared deviations from the mean
};

}  // namespace

struct ChunkStats::State {
  bool on = false;
  bool per_chunk = false;  // Mode::PerChunk (else Mode::Restore)
  State* outer = nullptr;
  std::vector<Call> calls;  // in the order the first chunk made them
  size_t next = 0;          // the call expected next in this chunk
  int64_t chunk = 0;
  Tensors counters, counters_before, counters_after_first;
  std::vector<std::pair<at::Tensor, at::Tensor>> saved;  // running statistics and their values before the pass
  std::exception_ptr error;
  bool expects_calls = false;  // the graph names running statistics a batch norm updates
  Tensors updated;  // prepare(): the new values of `saved`, in their dtype
  bool prepared = false;
  bool committed = false;

  void save(const at::Tensor& t) {
    for (const auto& [tensor, value] : saved)
      if (tensor.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return;
    saved.emplace_back(t, t.clone());
  }

  void restore_counters() {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < counters.size(); ++i) counters[i].copy_(counters_before[i]);
  }

  void restore() {
    at::NoGradGuard no_grad;
    for (auto& [tensor, value] : saved) tensor.copy_(value);
    restore_counters();
  }

  // A batch norm call about to run (see observed_batch_norm).
  void record(const at::Tensor& input, const at::Tensor& rm, const at::Tensor& rv, double factor) {
    at::NoGradGuard no_grad;
    save(rm);
    save(rv);
    if (!per_chunk) return;
    const at::Tensor x = input.detach();
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (d != 1) dims.push_back(d);
    const double n = static_cast<double>(x.numel() / std::max<int64_t>(1, x.size(1)));
    const auto [var, mean_] = at::var_mean(x, dims, /*unbiased=*/false, /*keepdim=*/false);
    const at::Tensor mean = mean_.to(at::kDouble);
    const at::Tensor m2 = var.to(at::kDouble).mul_(n);
    if (chunk == 1) {
      calls.push_back({rm, rv, factor, n, mean, m2});
      ++next;
      return;
    }
    if (next >= calls.size() || calls[next].running_mean.unsafeGetTensorImpl() != rm.unsafeGetTensorImpl())
      fail(KOILA_ERROR_UNSUPPORTED, "with KOILA_BATCH_STATS_PER_CHUNK, every chunk must make the same batch norm "
                                    "calls in the same order, but chunk " + std::to_string(chunk) + " differs");
    Call& c = calls[next++];
    // Chan, Golub and LeVeque's pairwise update.
    const double total = c.count + n;
    const at::Tensor delta = mean - c.mean;
    c.mean.add_(delta, n / total);
    c.m2.add_(m2).add_(delta.mul(delta), c.count * n / total);
    c.count = total;
  }
};

namespace {

thread_local ChunkStats::State* active = nullptr;

}  // namespace

at::Tensor observed_batch_norm(const at::Tensor& input, const c10::optional<at::Tensor>& weight,
                               const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& running_mean,
                               const c10::optional<at::Tensor>& running_var, bool training, double momentum,
                               double eps, bool cudnn_enabled) {
  ChunkStats::State* s = active;
  if (s && !s->error && training && running_mean && running_mean->defined() && running_var &&
      running_var->defined()) {
    // Kept for end_chunk(): thrown from inside a TorchScript module, it would reach the
    // caller as the interpreter's error, without its code.
    try {
      s->record(input, *running_mean, *running_var, momentum);
    } catch (...) {
      s->error = std::current_exception();
    }
  }
  return at::batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled);
}

ChunkStats::ChunkStats(Mode mode, const std::vector<const Node*>& nodes) : state_(std::make_unique<State>()) {
  if (mode == Mode::Off) return;
  State& s = *state_;
  s.per_chunk = mode == Mode::PerChunk;
  at::NoGradGuard no_grad;
  for (const Node* node : nodes)
    for (const at::Tensor& t : node->stats_counters) {
      s.counters.push_back(t);
      s.counters_before.push_back(t.clone());
    }
  // The graph names the running statistics its batch norms update: saved up front, so that
  // a failure restores them even where no call was observed.
  for (const Node* node : nodes) {
    for (const at::Tensor& t : node->stats_buffers) s.save(t);
    s.expects_calls |= !node->stats_buffers.empty();
  }
  if (!s.per_chunk) {
    s.on = true;
    return;
  }
  s.outer = active;
  active = &s;
  s.on = true;
}

ChunkStats::~ChunkStats() {
  State& s = *state_;
  if (!s.on) return;
  if (s.per_chunk) active = s.outer;
  if (s.committed) return;
  try {
    s.restore();
  } catch (...) {
    // Copies into existing tensors allocate nothing; nothing to add to the error reported.
  }
}

void ChunkStats::start_chunk() {
  State& s = *state_;
  if (!s.on) return;
  if (++s.chunk > 1 && s.per_chunk) s.restore_counters();
  s.next = 0;
}

void ChunkStats::end_chunk() {
  State& s = *state_;
  if (!s.on) return;
  if (s.error) std::rethrow_exception(s.error);
  if (s.per_chunk && s.chunk > 1 && s.next != s.calls.size())
    fail(KOILA_ERROR_UNSUPPORTED, "with KOILA_BATCH_STATS_PER_CHUNK, every chunk must make the same batch norm "
                                  "calls, but chunk " + std::to_string(s.chunk) + " made " + std::to_string(s.next) +
                                  " of " + std::to_string(s.calls.size()));
  // Every batch norm of a module reaches observed_batch_norm only through the graphs that
  // route_batch_norms rewrote: statistics that no call showed would be combined wrongly.
  if (s.per_chunk && s.chunk == 1 && s.expects_calls && s.calls.empty())
    fail(KOILA_ERROR_INTERNAL, "with KOILA_BATCH_STATS_PER_CHUNK, the chunk's batch norms in training were not "
                               "observed (a module whose batch norm calls were not routed through koila)");
  if (s.chunk == 1) {
    at::NoGradGuard no_grad;
    for (const at::Tensor& t : s.counters) s.counters_after_first.push_back(t.clone());
  }
}

void ChunkStats::prepare() {
  State& s = *state_;
  if (!s.on) return;
  if (!s.per_chunk) {  // the kernels' own updates stand
    s.prepared = true;
    return;
  }
  at::NoGradGuard no_grad;
  // The running statistics as they were before the pass, then each call's update in order
  // (a layer called twice updates twice), in double as LibTorch's kernels accumulate.
  s.updated.clear();
  for (const auto& [tensor, value] : s.saved) s.updated.push_back(value.to(at::kDouble));
  auto current = [&](const at::Tensor& t) -> at::Tensor& {
    for (size_t i = 0; i < s.saved.size(); ++i)
      if (s.saved[i].first.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return s.updated[i];
    fail(KOILA_ERROR_INTERNAL, "a running statistic that was not saved");
  };
  for (const Call& c : s.calls) {
    current(c.running_mean).mul_(1 - c.factor).add_(c.mean, c.factor);
    current(c.running_var).mul_(1 - c.factor).add_(c.m2 / (c.count - 1), c.factor);  // unbiased
  }
  for (size_t i = 0; i < s.updated.size(); ++i) s.updated[i] = s.updated[i].to(s.saved[i].first.scalar_type());
  s.prepared = true;
}

void ChunkStats::commit() noexcept {
  State& s = *state_;
  if (!s.on || !s.prepared) return;
  if (!s.per_chunk) {
    s.committed = true;
    return;
  }
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < s.saved.size(); ++i) s.saved[i].first.copy_(s.updated[i]);
  for (size_t i = 0; i < s.counters.size() && i < s.counters_after_first.size(); ++i)
    s.counters[i].copy_(s.counters_after_first[i]);
  s.committed = true;
}

}  // namespace koila
