#include "module/probe.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <vector>

#include "base/text.h"
#include "graph/batch_rules.h"
#include "module/batch_inference.h"
#include "module/call_errors.h"
#include "module/twin.h"
#include "run/executor.h"

namespace koila::module_detail {

namespace {

// The seed every probe run starts from, so that random ops (dropout) draw the same masks
// for the same shapes and only the perturbed sample differs.
constexpr uint64_t kProbeSeed = 0x6b6f696c61ull;

// The largest difference between two results, sample by sample along `dim`.
std::vector<double> differences(const at::Tensor& a, const at::Tensor& b, int64_t dim) {
  std::vector<double> out(static_cast<size_t>(a.size(dim)), 0.0);
  if (a.sizes() != b.sizes()) return std::vector<double>(out.size(), INFINITY);
  for (int64_t i = 0; i < a.size(dim); ++i) {
    const at::Tensor x = a.select(dim, i), y = b.select(dim, i);
    if (at::isFloatingType(x.scalar_type())) {
      const at::Tensor d = (x.to(at::kDouble) - y.to(at::kDouble)).abs();
      // (NaN where both are NaN counts as equal, as allclose with equal_nan)
      const at::Tensor both_nan = at::isnan(x) & at::isnan(y);
      out[static_cast<size_t>(i)] = d.numel() ? d.masked_fill(both_nan.to(d.device()), 0).max().item<double>() : 0;
      if (std::isnan(out[static_cast<size_t>(i)])) out[static_cast<size_t>(i)] = INFINITY;
    } else {
      out[static_cast<size_t>(i)] = at::equal(x, y) ? 0 : INFINITY;
    }
  }
  return out;
}

// Whether sample `i` of `result` is the same as of `base`: within allclose's tolerance
// (relative 1e-4, absolute 1e-6), or within kNoiseFactor times the difference two runs on the
// same samples showed there (`noise`: kernels whose reductions are not deterministic, such as
// some of cuDNN's, on any device). Changing a sample changes a mixing module's other samples by
// about as much as the change, far beyond such noise.
constexpr double kNoiseFactor = 16;
bool same_sample(const at::Tensor& result, const at::Tensor& base, int64_t dim, int64_t i, double noise) {
  const at::Tensor a = result.select(dim, i), b = base.select(dim, i);
  if (a.sizes() != b.sizes()) return false;
  if (!at::isFloatingType(a.scalar_type())) return at::equal(a, b);
  if (at::allclose(a.to(at::kDouble), b.to(at::kDouble), 1e-4, 1e-6, /*equal_nan=*/true)) return true;
  if (noise <= 0 || !std::isfinite(noise)) return false;
  return differences(a.unsqueeze(0), b.unsqueeze(0), 0)[0] <= kNoiseFactor * noise;
}

// Why the probe's module mixes samples across the batch (changing one sample changes
// another's result), or empty when it keeps them apart; `base` is its result on the probe.
// A second run on the same samples measures how far runs differ without any change.
std::string mixing(Probe& probe, const at::Tensor& base, int64_t out_dim) {
  const int64_t samples = probe.samples();
  const std::vector<double> noise = differences(probe.run(), base, out_dim);
  bool shown = false;
  for (int64_t j = 0; j < samples; ++j) {
    const std::optional<Tensors> changed = probe.perturbed(j);
    if (!changed) continue;
    shown = true;
    const at::Tensor result = probe.run(*changed);
    for (int64_t i = 0; i < samples; ++i) {
      if (i == j || same_sample(result, base, out_dim, i, noise[static_cast<size_t>(i)])) continue;
      return "mixes samples across the batch: in a probe on " + std::to_string(samples) + " samples, changing sample " +
             std::to_string(j) + " changed the result for sample " + std::to_string(i) +
             " (as batch norm in training or a reduction over the batch do)";
    }
  }
  if (!shown) return "cannot be shown to keep samples apart: the samples koila probed it with are all the same";
  return {};
}

}  // namespace

Probe::Probe(const Call& call, const Node& self, int64_t samples)
    : call_(call), samples_(samples), random_(self.meta.device), kernels_(self.meta.device) {
  module_state_ = call.state;
  for (at::Tensor& t : module_state_)
    if (!t.requires_grad()) t = t.clone();
  inputs_ = probe_inputs(self);
}

Tensors Probe::args(const Tensors& inputs, int64_t n) {
  Tensors args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t bd = batch_dims_[i];
    args.push_back(n >= 0 && bd >= 0 ? inputs[i].narrow(bd, 0, n) : inputs[i]);
  }
  args.insert(args.end(), module_state_.begin(), module_state_.end());
  random_.reseed(kProbeSeed);
  return args;
}

at::Tensor Probe::run(const Tensors& inputs, int64_t n) {
  c10::NoGradGuard no_grad;
  return run_call(call_, args(inputs, n), Code::Shape, batch_norm_eval_);
}

Tensors Probe::run_all() {
  c10::NoGradGuard no_grad;
  return run_call_all(call_, args(inputs_, -1), Code::Shape, batch_norm_eval_);
}

std::optional<Tensors> Probe::perturbed(int64_t j) const {
  Tensors changed = inputs_;
  bool any = false;
  for (size_t i = 0; i < changed.size(); ++i) {
    const int64_t bd = batch_dims_[i];
    if (bd < 0) continue;
    at::Tensor t = changed[i].clone();
    at::Tensor sample = t.select(bd, j);
    at::Tensor replacement;
    if (at::isFloatingType(t.scalar_type())) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(kProbeSeed + static_cast<uint64_t>(j));
      replacement =
          sample + at::randn(sample.sizes(), generator, at::TensorOptions().dtype(at::kFloat)).to(sample.options());
    } else if (t.scalar_type() == at::kBool) {
      replacement = sample.logical_not();
    } else {
      // Integers (indices, tokens): values the caller's data already holds, so that they
      // stay valid. Another position of the same sample, else another sample.
      replacement = sample.numel() > 1 ? sample.flatten().roll(1).view(sample.sizes()) : sample;
      if (at::equal(replacement, sample)) replacement = t.select(bd, (j + 1) % samples_);
    }
    if (at::equal(replacement, sample)) continue;
    sample.copy_(replacement);
    changed[i] = t;
    any = true;
  }
  if (!any) return std::nullopt;
  return changed;
}

Tensors Probe::probe_inputs(const Node& self) {
  std::vector<const Node*> lazy;
  for (size_t i = 0; i < call_.n_inputs; ++i) {
    const Node* in = self.inputs[i].get();
    batch_dims_.push_back(in->meta.batch_dim);
    if (in->lazy()) lazy.push_back(in);
  }
  Tensors values;
  try {
    EvalOptions options;
    options.chunk_length = samples_;
    values = evaluate(lazy, options);
  } catch (const std::exception&) {
    values.clear();
  }
  Tensors inputs;
  size_t next = 0;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(kProbeSeed);
  for (size_t i = 0; i < call_.n_inputs; ++i) {
    const Node* in = self.inputs[i].get();
    if (!in->lazy()) {
      inputs.push_back(in->value);
      continue;
    }
    if (!values.empty()) {
      inputs.push_back(values[next++]);
      continue;
    }
    std::vector<int64_t> shape = in->meta.shape;
    if (in->meta.batch_dim >= 0) shape[in->meta.batch_dim] = samples_;
    const auto options = at::TensorOptions().dtype(in->meta.dtype).device(in->meta.device);
    inputs.push_back(at::isFloatingType(in->meta.dtype)
                         ? at::randn(shape, generator, at::TensorOptions().dtype(at::kFloat)).to(options)
                         : at::zeros(shape, options));
  }
  return inputs;
}

int64_t probe_batch_dim(const Call& call, Probe& probe, const at::Tensor& full, int64_t batch,
                        const std::string& meta_failure, Meta* out, std::string* why) {
  const int64_t samples = probe.samples();
  *out = meta_of(full);
  if (samples == 1) {
    // A batch of one sample is never split; its result is the probe's.
    *why = "cannot be shown to keep the batch (" + meta_failure + ")";
    return -1;
  }
  const at::Tensor fewer = probe.run(samples - 1);
  const int64_t out_dim = batch_dim_between(full.sizes().vec(), samples, fewer.sizes().vec(), samples - 1, why);
  if (out_dim < 0) {
    if (samples == batch) return -1;
    fail_uninferable(call, meta_failure, *why, batch);
  }
  out->shape[out_dim] = batch;
  return out_dim;
}

BatchResult samples_kept_apart(const Call& call, Probe& probe, const at::Tensor& base, const Meta& out,
                               int64_t out_dim) {
  const int64_t samples = probe.samples();
  std::vector<int64_t> expected = out.shape;
  expected[out_dim] = samples;
  if (base.sizes() != at::IntArrayRef(expected))
    return batch::couple("returned " + shape_string(base.sizes()) + " on a probe of " + std::to_string(samples) +
                         " samples where " + shape_string(expected) + " was inferred");
  const std::string mixed = mixing(probe, base, out_dim);
  if (mixed.empty()) {
    BatchResult kept;
    kept.batch_dim = out_dim;
    return kept;
  }
  if (call.batch_norms > 0) {
    // Batch norm in training mixes samples through its statistics only: when the module
    // keeps samples apart with those layers evaluating, nothing else mixes them.
    probe.set_batch_norm_eval(true);
    const at::Tensor evaluating = probe.run();
    const bool only_batch_norm = mixing(probe, evaluating, out_dim).empty();
    probe.set_batch_norm_eval(false);
    if (only_batch_norm) {
      const std::vector<std::string> layers = training_batch_norm_names(call.module);
      std::string names;
      for (size_t k = 0; k < layers.size() && k < 3; ++k) names += (k ? ", " : "") + layers[k];
      if (layers.size() > 3) names += ", ... (" + std::to_string(layers.size()) + " layers)";
      BatchResult stats;
      stats.batch_dim = out_dim;
      stats.stats_couples =
          "normalizes with statistics over the batch in its BatchNorm layers in training (" + names + ")";
      return stats;
    }
  }
  return batch::couple(mixed);
}

}  // namespace koila::module_detail
