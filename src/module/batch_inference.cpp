#include "module/batch_inference.h"

#include <algorithm>
#include <optional>

#include "base/error.h"
#include "base/text.h"
#include "graph/batch_rules.h"
#include "module/probe.h"

namespace koila::module_detail {

namespace {

// Meta stand-ins for args (same shapes, dtypes and strides), batch dims resized to `batch`.
Tensors meta_args(const Call& call, const std::vector<const Meta*>& in, int64_t batch) {
  Tensors args;
  for (size_t i = 0; i < call.n_inputs; ++i) {
    Meta m = *in[i];
    if (batch >= 0 && m.batch_dim >= 0) m.shape[m.batch_dim] = batch;
    args.push_back(meta_tensor(m));
  }
  for (const at::Tensor& t : call.state)
    args.push_back(at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta)));
  return args;
}

// The dim of the result `out` (for a batch of `batch`) that carries the batch, from a second
// run on meta tensors with another batch size; -1 with `*why` set where there is none.
int64_t meta_batch_dim(const Call& call, const std::vector<const Meta*>& in, const Meta& out, int64_t batch,
                       std::string* why) {
  const int64_t other = batch >= 2 ? batch / 2 : 2;
  try {
    const Meta second = meta_result(call, in, other);
    return batch_dim_between(out.shape, batch, second.shape, other, why);
  } catch (const Error& e) {
    if (e.code() == Code::Unsupported) throw;
    *why =
        "accepts a batch of " + std::to_string(batch) + " but not of " + std::to_string(other) + " (" + e.what() + ")";
    return -1;
  }
}

}  // namespace

Meta meta_result(const Call& call, const std::vector<const Meta*>& in, int64_t batch) {
  return meta_of(run_call(call, meta_args(call, in, batch), Code::Shape));
}

std::vector<bool> result_tensors(const Call& call, const std::vector<const Meta*>& in, const Node& self,
                                 bool* from_meta) {
  Tensors all;
  *from_meta = false;
  try {
    all = run_call_all(call, meta_args(call, in, -1), Code::Shape);
    *from_meta = true;
  } catch (const Error& e) {
    if (e.code() == Code::Unsupported || e.code() == Code::OutOfMemory) throw;
    int64_t batch = -1;
    for (size_t i = 0; i < call.n_inputs; ++i) batch = std::max(batch, in[i]->batch_size());
    Probe probe(call, self, batch < 0 ? -1 : std::min(batch, kProbeSamples));
    all = probe.run_all();
  }
  std::vector<bool> tensors;
  for (const at::Tensor& t : all) tensors.push_back(t.defined());
  return tensors;
}

int64_t batch_dim_between(const std::vector<int64_t>& a, int64_t na, const std::vector<int64_t>& b, int64_t nb,
                          std::string* why) {
  std::vector<int64_t> differ;
  if (a.size() == b.size())
    for (size_t d = 0; d < a.size(); ++d)
      if (a[d] != b[d]) differ.push_back(static_cast<int64_t>(d));
  if (a.size() == b.size() && differ.empty()) {
    *why = "returns " + shape_string(a) + " whatever the batch size, so its result does not carry the batch";
    return -1;
  }
  if (differ.size() == 1 && a[differ[0]] == na && b[differ[0]] == nb) return differ[0];
  *why = "returns " + shape_string(a) + " for a batch of " + std::to_string(na) + " and " + shape_string(b) +
         " for a batch of " + std::to_string(nb) + ": no single dim of its result carries the batch";
  return -1;
}

Meta infer_call(const Call& call, Inference& inference, const std::vector<const Meta*>& in, const Node& self) {
  // Arguments the module does not accept: its own message.
  Meta out;
  std::string meta_failure;
  try {
    out = meta_result(call, in, -1);
  } catch (const Error& e) {
    if (e.code() == Code::Unsupported || e.code() == Code::OutOfMemory) throw;
    meta_failure = e.what();
  }
  const bool meta_runs = meta_failure.empty();

  int64_t batch = -1;
  for (size_t i = 0; i < call.n_inputs; ++i) {
    const int64_t size = in[i]->batch_size();
    if (size < 0) continue;
    if (batch >= 0 && size != batch) {
      if (!meta_runs) fail(Code::Shape, meta_failure);
      inference.batch = batch::couple("gets inputs with different batch sizes (" + std::to_string(batch) + " and " +
                                      std::to_string(size) + ")");
      return out;
    }
    batch = size;
  }

  if (batch < 0) {  // no batched input: nothing to split; only the result's shape is needed
    inference.from_meta = meta_runs;
    if (meta_runs) return out;
    Probe probe(call, self, -1);
    return meta_of(probe.run());
  }

  // The probe, made (and run on its samples) once, when first needed.
  std::optional<Probe> probe;
  std::optional<at::Tensor> probe_out;
  auto probed = [&]() -> const at::Tensor& {
    if (!probe) {
      probe.emplace(call, self, std::min(batch, kProbeSamples));
      probe_out = probe->run();
    }
    return *probe_out;
  };

  // A program exported with its batch dim fixed computes for that size only.
  if (call.exported)
    for (size_t i = 0; i < call.n_inputs; ++i) {
      const int64_t dim = in[i]->batch_dim;
      if (dim < 0 || call.exported->inputs[i].sizes[static_cast<size_t>(dim)] < 0) continue;
      inference.batch = batch::couple("was exported with a fixed batch: its input " + std::to_string(i) + " (" +
                                      call.exported->inputs[i].name + ") has dim " + std::to_string(dim) +
                                      " of constant size " + std::to_string(in[i]->shape[static_cast<size_t>(dim)]) +
                                      "; export it with dynamic_shapes (torch.export.Dim) on that dim so that koila "
                                      "can split it");
      return out;
    }

  std::string why;
  int64_t out_dim = -1;
  if (meta_runs) {
    out_dim = meta_batch_dim(call, in, out, batch, &why);
  } else {
    // No meta kernel for some op inside: learn the shapes from real samples.
    const at::Tensor& full = probed();
    out_dim = probe_batch_dim(call, *probe, full, batch, meta_failure, &out, &why);
  }
  if (out_dim < 0) {
    inference.batch = batch::couple(why);
    return out;
  }
  inference.from_meta = meta_runs;
  inference.batch_size = batch;
  inference.follows = out_dim;

  // Samples kept apart: changing one sample changes no other sample's output.
  if (batch >= 2) {
    const at::Tensor& base = probed();
    inference.batch = samples_kept_apart(call, *probe, base, out, out_dim);
    return out;
  }
  inference.batch.batch_dim = out_dim;
  return out;
}

}  // namespace koila::module_detail
