#include "kernels/batch_stats.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "base/error.h"

namespace koila {

namespace {

// One batch norm call of a pass: what each chunk's kernel computed for it. They are
// combined once, in prepare(), rather than chunk by chunk (a dozen small ops per call and
// chunk otherwise).
struct Call {
  at::Tensor running_mean, running_var;
  double factor = 0;  // the update factor the call passed (its momentum)
  double eps = 0;
  std::vector<double> counts;  // per chunk: values per channel
  Tensors means;               // per chunk: [C], the kernel's saved mean
  Tensors invstds;             // per chunk: [C], the kernel's saved 1 / sqrt(biased variance + eps)
};

// Copies of tensors, one at::cat per device and dtype instead of one clone each: a pass
// of resnet18 in training saves 60 (each batch norm's running mean, variance and counter),
// which on a GPU were 60 kernel launches a step. A copy is shown as its tensor (a view of
// its group's buffer) only when it is read, which a pass that succeeds without splitting,
// the usual one, never does: those views were two or three ATen calls a tensor, each pass.
class Snapshot {
 public:
  Snapshot() = default;
  explicit Snapshot(const Tensors& tensors) : places_(tensors.size()) {
    std::vector<bool> done(tensors.size(), false);
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (done[i]) continue;
      Tensors flat;
      int64_t offset = 0;
      for (size_t j = i; j < tensors.size(); ++j)
        if (!done[j] && tensors[j].device() == tensors[i].device() &&
            tensors[j].scalar_type() == tensors[i].scalar_type()) {
          flat.push_back(tensors[j]);
          places_[j] = Place{buffers_.size(), offset, tensors[j].numel()};
          offset += tensors[j].numel();
          done[j] = true;
        }
      buffers_.push_back(copied(flat, offset));
    }
  }
  size_t size() const { return places_.size(); }
  // The copy of tensor `i`, shaped `sizes` (the tensor's).
  at::Tensor copy(size_t i, at::IntArrayRef sizes) const {
    const Place& p = places_.at(i);
    return buffers_[p.buffer].narrow(0, p.offset, p.numel).view(sizes);
  }

 private:
  struct Place {
    size_t buffer = 0;
    int64_t offset = 0, numel = 0;
  };

  // One buffer of `total` elements holding the tensors of `group` one after the other. On
  // the CPU, tensors that are contiguous are copied with memcpy: at::cat's dispatch and
  // checks were most of a snapshot's cost (the buffers of a small model's batch norms hold
  // a few hundred numbers each).
  static at::Tensor copied(const Tensors& group, int64_t total) {
    const bool plain = group.front().is_cpu() && std::all_of(group.begin(), group.end(), [](const at::Tensor& t) {
                         return t.is_contiguous() && t.layout() == at::kStrided && !t.is_conj() && !t.is_neg();
                       });
    if (!plain) {
      Tensors flat;
      for (const at::Tensor& t : group) flat.push_back(t.dim() == 1 ? t : t.reshape({-1}));
      return at::cat(flat);
    }
    at::Tensor buffer = at::empty({total}, group.front().options());
    char* out = static_cast<char*>(buffer.data_ptr());
    for (const at::Tensor& t : group) {
      const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
      if (bytes > 0) std::memcpy(out, t.data_ptr(), bytes);
      out += bytes;
    }
    return buffer;
  }
  Tensors buffers_;
  std::vector<Place> places_;
};

}  // namespace

struct ChunkStats::State {
  bool on = false;
  bool per_chunk = false;  // Handling::PerChunk (else Handling::Restore)
  State* outer = nullptr;
  std::vector<Call> calls;  // in the order the first chunk made them
  size_t next = 0;          // the call expected next in this chunk
  int64_t chunk = 0;
  Tensors counters;
  // The counters (first) and the running statistics the graph names, as they were before
  // the pass; the counters after the first chunk (statistics per chunk only).
  Snapshot before, counters_after_first;
  // A running statistic and its value before the pass: `copy`, or entry `in_before` of
  // `before` (those the graph names, saved up front).
  struct Saved {
    at::Tensor tensor, copy;
    size_t in_before = SIZE_MAX;
  };
  std::vector<Saved> saved;
  std::exception_ptr error;
  bool expects_calls = false;  // the graph names running statistics a batch norm updates
  Tensors updated;             // prepare(): the new values of `saved`, in their dtype
  bool prepared = false;
  bool committed = false;

  void save(const at::Tensor& t) {
    for (const Saved& e : saved)
      if (e.tensor.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return;
    saved.push_back(Saved{t, t.clone()});
  }

  // The value saved[i] had before the pass.
  at::Tensor value_before(size_t i) const {
    const Saved& e = saved[i];
    return e.copy.defined() ? e.copy : before.copy(e.in_before, e.tensor.sizes());
  }

  void restore_counters() {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < counters.size(); ++i) counters[i].copy_(before.copy(i, counters[i].sizes()));
  }

  void restore() {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < saved.size(); ++i) saved[i].tensor.copy_(value_before(i));
    restore_counters();
  }

  // A batch norm call about to run in a pass that keeps statistics per chunk (the only one
  // observed_batch_norm sees): its running statistics are saved, and its record returned,
  // for record_chunk.
  Call& begin_call(const at::Tensor& rm, const at::Tensor& rv, double factor, double eps) {
    c10::NoGradGuard no_grad;
    save(rm);
    save(rv);
    if (chunk == 1) {
      calls.push_back({rm, rv, factor, eps, {}, {}, {}});
      ++next;
      return calls.back();
    }
    if (next >= calls.size() || calls[next].running_mean.unsafeGetTensorImpl() != rm.unsafeGetTensorImpl())
      fail(Code::Unsupported,
           "with KOILA_BATCH_STATS_PER_CHUNK, every chunk must make the same batch norm "
           "calls in the same order, but chunk " +
               std::to_string(chunk) + " differs");
    return calls[next++];
  }

  // The chunk's statistics of `call`: the mean and inverse standard deviation its kernel
  // computed and saved for the backward (the CPU, cuDNN and MIOpen kernels alike), so that
  // nothing passes over the input a second time.
  static void record_chunk(Call& call, const at::Tensor& input, const at::Tensor& save_mean,
                           const at::Tensor& save_invstd) {
    c10::NoGradGuard no_grad;
    const int64_t channels = input.dim() > 1 ? input.size(1) : 0;
    const int64_t n = channels > 0 ? input.numel() / channels : 0;
    if (n == 0) return;  // an empty chunk adds nothing
    if (save_mean.defined() && save_invstd.defined() && save_mean.numel() == channels &&
        save_invstd.numel() == channels) {
      call.means.push_back(save_mean.detach().reshape({channels}));
      call.invstds.push_back(save_invstd.detach().reshape({channels}));
    } else {  // a kernel that saved nothing usable: computed here
      std::vector<int64_t> dims;
      for (int64_t d = 0; d < input.dim(); ++d)
        if (d != 1) dims.push_back(d);
      const auto [var, mean] = at::var_mean(input.detach(), dims, /*unbiased=*/false, /*keepdim=*/false);
      call.means.push_back(mean);
      call.invstds.push_back(var.to(at::kDouble).add_(call.eps).rsqrt_());
    }
    call.counts.push_back(static_cast<double>(n));
  }
};

namespace {

thread_local ChunkStats::State* observed_pass = nullptr;

// [k, C] in double from k tensors of [C] (of one dtype, unless a kernel saved nothing).
at::Tensor stack_double(const Tensors& ts) {
  bool one_dtype = true;
  for (const at::Tensor& t : ts) one_dtype &= t.scalar_type() == ts.front().scalar_type();
  if (one_dtype) return at::stack(ts).to(at::kDouble);
  Tensors doubles;
  for (const at::Tensor& t : ts) doubles.push_back(t.to(at::kDouble));
  return at::stack(doubles);
}

}  // namespace

UnobservedStats::UnobservedStats() : previous_(observed_pass) { observed_pass = nullptr; }
UnobservedStats::~UnobservedStats() { observed_pass = previous_; }

at::Tensor observed_batch_norm(const at::Tensor& input, const c10::optional<at::Tensor>& weight,
                               const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& running_mean,
                               const c10::optional<at::Tensor>& running_var, bool training, double momentum, double eps,
                               bool cudnn_enabled) {
  ChunkStats::State* s = observed_pass;
  if (!s || s->error || !training || !running_mean || !running_mean->defined() || !running_var ||
      !running_var->defined())
    return at::batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled);
  // Errors are kept for end_chunk(): thrown from inside a TorchScript module, they would
  // reach the caller as the interpreter's error, without their code.
  Call* call = nullptr;
  try {
    call = &s->begin_call(*running_mean, *running_var, momentum, eps);
  } catch (...) {
    s->error = std::current_exception();
    return at::batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled);
  }
  // What at::batch_norm runs, with the statistics it computes (outputs 1 and 2).
  auto result = at::_batch_norm_impl_index(input, weight, bias, running_mean, running_var, training, momentum, eps,
                                           cudnn_enabled);
  try {
    ChunkStats::State::record_chunk(*call, input, std::get<1>(result), std::get<2>(result));
  } catch (...) {
    s->error = std::current_exception();
  }
  return std::get<0>(result);
}

ChunkStats::ChunkStats(Handling handling, const std::vector<const Node*>& nodes) : state_(std::make_unique<State>()) {
  if (handling == Handling::Off) return;
  State& s = *state_;
  s.per_chunk = handling == Handling::PerChunk;
  c10::NoGradGuard no_grad;
  for (const Node* node : nodes)
    for (const at::Tensor& t : node->stats_counters) s.counters.push_back(t);
  // The graph names the running statistics its batch norms update: saved up front, so that
  // a failure restores them even where no call was observed. Saved with the counters in one
  // copy (snapshot).
  Tensors buffers;
  for (const Node* node : nodes) {
    for (const at::Tensor& t : node->stats_buffers) {
      bool seen = false;
      for (const at::Tensor& b : buffers) seen |= b.unsafeGetTensorImpl() == t.unsafeGetTensorImpl();
      if (!seen) buffers.push_back(t);
    }
    s.expects_calls |= !node->stats_buffers.empty();
  }
  Tensors all = s.counters;
  all.insert(all.end(), buffers.begin(), buffers.end());
  if (!all.empty()) {
    s.before = Snapshot(all);
    for (size_t i = 0; i < buffers.size(); ++i) s.saved.push_back(State::Saved{buffers[i], {}, s.counters.size() + i});
  }
  if (!s.per_chunk) {
    s.on = true;
    return;
  }
  s.outer = observed_pass;
  observed_pass = &s;
  s.on = true;
}

ChunkStats::~ChunkStats() {
  State& s = *state_;
  if (!s.on) return;
  if (s.per_chunk) observed_pass = s.outer;
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
    fail(Code::Unsupported,
         "with KOILA_BATCH_STATS_PER_CHUNK, every chunk must make the same batch norm "
         "calls, but chunk " +
             std::to_string(s.chunk) + " made " + std::to_string(s.next) + " of " + std::to_string(s.calls.size()));
  // Every batch norm of a module reaches observed_batch_norm only through the graphs that
  // route_batch_norms rewrote: statistics that no call showed would be combined wrongly.
  if (s.per_chunk && s.chunk == 1 && s.expects_calls && s.calls.empty())
    fail(Code::Internal,
         "with KOILA_BATCH_STATS_PER_CHUNK, the chunk's batch norms in training were not "
         "observed (a module whose batch norm calls were not routed through koila)");
  if (s.per_chunk && s.chunk == 1 && !s.counters.empty()) {  // (read only by commit() of such a pass)
    c10::NoGradGuard no_grad;
    s.counters_after_first = Snapshot(s.counters);
  }
}

void ChunkStats::prepare() {
  State& s = *state_;
  if (!s.on) return;
  if (!s.per_chunk) {  // the kernels' own updates stand
    s.prepared = true;
    return;
  }
  c10::NoGradGuard no_grad;
  // The running statistics as they were before the pass, then each call's update in order
  // (a layer called twice updates twice), in double as LibTorch's kernels accumulate.
  s.updated.clear();
  for (size_t i = 0; i < s.saved.size(); ++i) s.updated.push_back(s.value_before(i).to(at::kDouble));
  auto current = [&](const at::Tensor& t) -> at::Tensor& {
    for (size_t i = 0; i < s.saved.size(); ++i)
      if (s.saved[i].tensor.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return s.updated[i];
    fail(Code::Internal, "a running statistic that was not saved");
  };
  for (const Call& c : s.calls) {
    if (c.counts.empty()) continue;  // only empty chunks: no statistics to update with
    // Each chunk's biased variance from its inverse standard deviation (0 where the kernel
    // saved 0: no variance and no eps), then the chunks combined exactly: the total mean,
    // and the sum of squared deviations as the chunks' own plus their means' spread.
    const auto opts = at::TensorOptions().dtype(at::kDouble).device(c.means.front().device());
    const at::Tensor w = at::tensor(c.counts, at::TensorOptions().dtype(at::kDouble)).to(opts.device()).unsqueeze(1);
    const at::Tensor means = stack_double(c.means);
    const at::Tensor invstds = stack_double(c.invstds);
    const at::Tensor vars = at::where(invstds > 0, invstds.pow(-2).sub_(c.eps).clamp_min_(0), at::zeros({}, opts));
    double total = 0;
    for (double n : c.counts) total += n;
    const at::Tensor mean = (means * w).sum(0).div_(total);
    const at::Tensor m2 = (vars * w).sum(0).add_(((means - mean).pow_(2) * w).sum(0));
    current(c.running_mean).mul_(1 - c.factor).add_(mean, c.factor);
    current(c.running_var).mul_(1 - c.factor).add_(m2 / (total - 1), c.factor);  // unbiased
  }
  for (size_t i = 0; i < s.updated.size(); ++i) s.updated[i] = s.updated[i].to(s.saved[i].tensor.scalar_type());
  s.prepared = true;
}

void ChunkStats::commit() noexcept {
  State& s = *state_;
  if (!s.on || !s.prepared) return;
  if (!s.per_chunk) {
    s.committed = true;
    return;
  }
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < s.saved.size(); ++i) s.saved[i].tensor.copy_(s.updated[i]);
  for (size_t i = 0; i < s.counters.size() && i < s.counters_after_first.size(); ++i)
    s.counters[i].copy_(s.counters_after_first.copy(i, s.counters[i].sizes()));
  s.committed = true;
}

}  // namespace koila
