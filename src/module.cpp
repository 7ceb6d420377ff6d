#include "module.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "batch.h"
#include "batch_norm_route.h"
#include "error.h"
#include "executor.h"
#include "random_scope.h"
#include "types.h"

namespace koila {

namespace {

using torch::jit::Module;
using ObjectPtr = c10::intrusive_ptr<c10::ivalue::Object>;
using Substitute = std::function<at::Tensor(const at::Tensor&)>;

// Probes use at most this many samples.
constexpr int64_t kProbeSamples = 3;
// The seed every probe run starts from, so that random ops (dropout) draw the same masks
// for the same shapes and only the perturbed sample differs.
constexpr uint64_t kProbeSeed = 0x6b6f696c61ull;

bool is_module(const c10::IValue& v) { return v.isObject() && v.toObjectRef().type()->is_module(); }

c10::List<at::Tensor> substitute_all(const c10::List<at::Tensor>& tensors, const Substitute& substitute) {
  c10::List<at::Tensor> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(t.defined() ? substitute(t) : t);
  return out;
}

// A copy of `runnable`'s objects (the module and its submodules, recursively) holding
// the current values of `original`'s slots, tensors (also in lists) passed through
// `substitute`. Methods are `runnable`'s: they belong to the type. `runnable` is `original` itself, or the clone
// koila runs (same structure, its own methods).
ObjectPtr twin(const ObjectPtr& runnable, const ObjectPtr& original, const Substitute& substitute,
               std::unordered_map<const c10::ivalue::Object*, ObjectPtr>& done) {
  auto found = done.find(runnable.get());
  if (found != done.end()) return found->second;
  if (runnable->slots().size() != original->slots().size())
    fail(KOILA_ERROR_INTERNAL, "the module's structure changed after koila cloned it");
  ObjectPtr copy = runnable->copy();
  done.emplace(runnable.get(), copy);
  for (size_t i = 0; i < copy->slots().size(); ++i) {
    const c10::IValue& v = original->getSlot(i);
    if (is_module(v) && is_module(runnable->getSlot(i)))
      copy->setSlot(i, twin(runnable->getSlot(i).toObject(), v.toObject(), substitute, done));
    else if (v.isTensor() && v.toTensor().defined())
      copy->setSlot(i, substitute(v.toTensor()));
    else if (v.isTensorList())  // e.g. nn.LSTM's _flat_weights: the parameters again
      copy->setSlot(i, substitute_all(v.toTensorList(), substitute));
    else
      copy->setSlot(i, v);
  }
  return copy;
}

Module twin(const Module& runnable, const Module& original, const Substitute& substitute) {
  std::unordered_map<const c10::ivalue::Object*, ObjectPtr> done;
  return Module(twin(runnable._ivalue(), original._ivalue(), substitute, done));
}

void collect_tensors(const ObjectPtr& obj, Tensors& out, std::unordered_map<const c10::TensorImpl*, size_t>& index,
                     std::unordered_set<const c10::ivalue::Object*>& seen) {
  if (!seen.insert(obj.get()).second) return;
  for (const c10::IValue& v : obj->slots()) {
    if (is_module(v)) {
      collect_tensors(v.toObject(), out, index, seen);
    } else if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined() && index.emplace(t.unsafeGetTensorImpl(), out.size()).second) out.push_back(t);
    }
  }
}

void set_training(const ObjectPtr& obj, bool on, std::unordered_set<const c10::ivalue::Object*>& seen) {
  if (!seen.insert(obj.get()).second) return;
  if (auto slot = obj->type()->findAttributeSlot("training")) obj->setSlot(*slot, on);
  for (const c10::IValue& v : obj->slots())
    if (is_module(v)) set_training(v.toObject(), on, seen);
}

// Whether `obj` is a batch norm layer that trains with running statistics: it holds
// tensors running_mean and running_var, and its `training` is true.
bool training_batch_norm(const c10::ivalue::Object& obj) {
  const auto& type = obj.type();
  auto holds_tensor = [&](const char* name) {
    const auto slot = type->findAttributeSlot(name);
    return slot && obj.getSlot(*slot).isTensor() && obj.getSlot(*slot).toTensor().defined();
  };
  const auto training = type->findAttributeSlot("training");
  return training && obj.getSlot(*training).isBool() && obj.getSlot(*training).toBool() &&
         holds_tensor("running_mean") && holds_tensor("running_var");
}

// Switches the training batch norm layers of `obj`'s tree to evaluation (on a twin).
void evaluate_batch_norms(const ObjectPtr& obj, std::unordered_set<const c10::ivalue::Object*>& seen) {
  if (!seen.insert(obj.get()).second) return;
  if (training_batch_norm(*obj)) obj->setSlot(*obj->type()->findAttributeSlot("training"), false);
  for (const c10::IValue& v : obj->slots())
    if (is_module(v)) evaluate_batch_norms(v.toObject(), seen);
}

// Everything one module call needs, shared by its node's functions.
struct Call {
  Module module;   // a twin of the caller's module taken when the call was built (same tensors)
  std::string name;
  size_t n_inputs = 0;
  Tensors state;   // every tensor the module holds, once each
  std::unordered_map<const c10::TensorImpl*, size_t> index;  // state tensor -> position
  std::string input_text;  // the caller's inputs, for messages
  std::vector<std::string> batch_norms;  // names of the batch norm layers that train
  Tensors batch_norm_counters;           // their num_batches_tracked
  Tensors batch_norm_buffers;            // their running_mean and running_var
};

[[noreturn]] void module_error(const Call& call, const std::exception& e, koila_code fallback) {
  const std::string text = torch_complaint(e);
  fail(is_out_of_memory(e, text) ? KOILA_ERROR_OUT_OF_MEMORY : fallback, "module " + call.name + " (inputs " + call.input_text + "): " + text);
}

// Runs the module's forward on args = [inputs..., state...]. When the state given is the
// module's own, the module itself runs; otherwise (meta stand-ins, probe copies) a twin
// holding the given tensors does; `batch_norm_eval` switches its training batch norm
// layers to evaluation.
at::Tensor run_call(const Call& call, const Tensors& args, koila_code fallback = KOILA_ERROR_INVALID_ARGUMENT,
                    bool batch_norm_eval = false) {
  bool own = !batch_norm_eval;
  for (size_t i = 0; i < call.state.size(); ++i)
    own &= args[call.n_inputs + i].unsafeGetTensorImpl() == call.state[i].unsafeGetTensorImpl();
  Module target = own ? call.module : twin(call.module, call.module, [&](const at::Tensor& t) {
    auto found = call.index.find(t.unsafeGetTensorImpl());
    return found == call.index.end() ? t : args[call.n_inputs + found->second];
  });
  if (batch_norm_eval) {
    std::unordered_set<const c10::ivalue::Object*> seen;
    evaluate_batch_norms(target._ivalue(), seen);
  }
  // Operator by operator, as eager LibTorch runs: the same kernels, the same tensors saved
  // for backward, whether the run is real or simulated on meta tensors (an optimized plan
  // would also specialize on the meta device).
  torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
  std::vector<c10::IValue> stack(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(call.n_inputs));
  c10::IValue result;
  try {
    result = target.forward(std::move(stack));
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    module_error(call, e, fallback);
  }
  if (!result.isTensor())
    fail(KOILA_ERROR_UNSUPPORTED, "module " + call.name + " returned " + result.tagKind() +
                                      "; koila_module_forward needs a module whose forward returns one tensor");
  return result.toTensor();
}

// Meta stand-ins for args (same shapes, dtypes and strides), batch dims resized to `batch`.
Tensors meta_args(const Call& call, const std::vector<const Meta*>& in, int64_t batch) {
  Tensors args;
  for (size_t i = 0; i < call.n_inputs; ++i) {
    Meta m = *in[i];
    if (batch >= 0 && m.batch_dim >= 0) m.shape[m.batch_dim] = batch;
    args.push_back(meta_tensor(m));
  }
  for (const at::Tensor& t : call.state) args.push_back(at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta)));
  return args;
}

// Probes: the module run for real on a few samples, without gradients, on a twin whose
// buffers are copies (batch norm's running statistics stay untouched).
class Probe {
 public:
  Probe(const Call& call, const Node& self, int64_t samples)
      : call_(call), samples_(samples), random_(self.meta.device) {
    module_state_ = call.state;
    for (at::Tensor& t : module_state_)
      if (!t.requires_grad()) t = t.clone();
    inputs_ = probe_inputs(self);
  }

  int64_t samples() const { return samples_; }
  const Tensors& inputs() const { return inputs_; }

  // The module's output on `inputs` (default: the probe inputs), narrowed to `n` samples.
  at::Tensor run(const Tensors& inputs, int64_t n = -1) {
    c10::NoGradGuard no_grad;
    Tensors args;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int64_t bd = batch_dims_[i];
      args.push_back(n >= 0 && bd >= 0 ? inputs[i].narrow(bd, 0, n) : inputs[i]);
    }
    args.insert(args.end(), module_state_.begin(), module_state_.end());
    random_.reseed(kProbeSeed);
    return run_call(call_, args, KOILA_ERROR_SHAPE, batch_norm_eval_);
  }

  // Runs from now on with the module's training batch norm layers evaluating.
  void set_batch_norm_eval(bool on) { batch_norm_eval_ = on; }
  at::Tensor run(int64_t n = -1) { return run(inputs_, n); }

  // The probe inputs with sample j changed in every batched input; nullopt when no input
  // could be changed.
  std::optional<Tensors> perturbed(int64_t j) const {
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
        replacement = sample + at::randn(sample.sizes(), generator, at::TensorOptions().dtype(at::kFloat))
                                   .to(sample.options());
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

 private:
  // The first samples of the caller's inputs (whatever is needed of the graph before them
  // is evaluated for those samples only); made-up values when that fails.
  Tensors probe_inputs(const Node& self) {
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

  const Call& call_;
  int64_t samples_;
  RandomScope random_;
  Tensors module_state_;
  Tensors inputs_;
  std::vector<int64_t> batch_dims_;
  bool batch_norm_eval_ = false;
};

// The one dim of `a` (batch `na`) and `b` (batch `nb`) that follows the batch size, or a
// reason why there is none.
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

bool same_values(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  if (at::isFloatingType(a.scalar_type()))
    return at::allclose(a.to(at::kDouble), b.to(at::kDouble), 1e-4, 1e-6, /*equal_nan=*/true);
  return at::equal(a, b);
}

// Why the probe's module mixes samples across the batch (changing one sample changes
// another's result), or empty when it keeps them apart; `base` is its result on the probe.
std::string mixing(Probe& probe, const at::Tensor& base, int64_t out_dim) {
  const int64_t samples = probe.samples();
  bool shown = false;
  for (int64_t j = 0; j < samples; ++j) {
    const std::optional<Tensors> changed = probe.perturbed(j);
    if (!changed) continue;
    shown = true;
    const at::Tensor result = probe.run(*changed);
    for (int64_t i = 0; i < samples; ++i) {
      if (i == j || same_values(result.select(out_dim, i), base.select(out_dim, i))) continue;
      return "mixes samples across the batch: in a probe on " + std::to_string(samples) +
             " samples, changing sample " + std::to_string(j) + " changed the result for sample " +
             std::to_string(i) + " (as batch norm in training or a reduction over the batch do)";
    }
  }
  if (!shown) return "cannot be shown to keep samples apart: the samples koila probed it with are all the same";
  return {};
}

// Where the batch goes through the call, and whether the module keeps samples apart.
struct Inference {
  BatchResult batch;
};

Meta infer(const Call& call, Inference& inference, const std::vector<const Meta*>& in, const Node& self) {
  // Arguments the module does not accept: its own message.
  Meta out;
  std::string meta_failure;
  try {
    out = meta_of(run_call(call, meta_args(call, in, -1), KOILA_ERROR_SHAPE));
  } catch (const Error& e) {
    if (e.code() == KOILA_ERROR_UNSUPPORTED || e.code() == KOILA_ERROR_OUT_OF_MEMORY) throw;
    meta_failure = e.what();
  }
  const bool meta_runs = meta_failure.empty();

  int64_t batch = -1;
  for (size_t i = 0; i < call.n_inputs; ++i) {
    const int64_t size = in[i]->batch_size();
    if (size < 0) continue;
    if (batch >= 0 && size != batch) {
      if (!meta_runs) fail(KOILA_ERROR_SHAPE, meta_failure);
      inference.batch = batch::couple("gets inputs with different batch sizes (" + std::to_string(batch) + " and " +
                                      std::to_string(size) + ")");
      return out;
    }
    batch = size;
  }

  if (batch < 0) {  // no batched input: nothing to split; only the result's shape is needed
    if (meta_runs) return out;
    Probe probe(call, self, -1);
    return meta_of(probe.run());
  }

  const int64_t samples = std::min(batch, kProbeSamples);
  std::optional<Probe> probe;
  std::optional<at::Tensor> probe_out;
  auto probed = [&]() -> const at::Tensor& {
    if (!probe) {
      probe.emplace(call, self, samples);
      probe_out = probe->run();
    }
    return *probe_out;
  };

  std::string why;
  int64_t out_dim = -1;
  if (meta_runs) {
    const int64_t other = batch >= 2 ? batch / 2 : 2;
    try {
      const Meta second = meta_of(run_call(call, meta_args(call, in, other), KOILA_ERROR_SHAPE));
      out_dim = batch_dim_between(out.shape, batch, second.shape, other, &why);
    } catch (const Error& e) {
      if (e.code() == KOILA_ERROR_UNSUPPORTED) throw;
      why = "accepts a batch of " + std::to_string(batch) + " but not of " + std::to_string(other) + " (" + e.what() +
            ")";
    }
  } else {
    // No meta kernel for some op inside: learn the shapes from real samples.
    const at::Tensor& full = probed();
    if (samples == 1) {
      // A batch of one sample is never split; its result is the probe's.
      inference.batch = batch::couple("cannot be shown to keep the batch (" + meta_failure + ")");
      return meta_of(full);
    }
    const at::Tensor fewer = probe->run(samples - 1);
    out_dim = batch_dim_between(full.sizes().vec(), samples, fewer.sizes().vec(), samples - 1, &why);
    if (out_dim < 0) {
      if (samples == batch) {
        inference.batch = batch::couple(why);
        return meta_of(full);
      }
      fail(KOILA_ERROR_UNSUPPORTED, "module " + call.name + " cannot run on meta tensors (" + meta_failure +
                                        ") and " + why + ", so koila cannot infer its result for a batch of " +
                                        std::to_string(batch));
    }
    out = meta_of(full);
    out.shape[out_dim] = batch;
  }
  if (out_dim < 0) {
    inference.batch = batch::couple(why);
    return out;
  }

  // Samples kept apart: changing one sample changes no other sample's output.
  if (batch >= 2) {
    const at::Tensor& base = probed();
    std::vector<int64_t> expected = out.shape;
    expected[out_dim] = samples;
    if (base.sizes() != at::IntArrayRef(expected)) {
      inference.batch = batch::couple("returned " + shape_string(base.sizes()) + " on a probe of " +
                                      std::to_string(samples) + " samples where " + shape_string(expected) +
                                      " was inferred");
      return out;
    }
    std::string mixed = mixing(*probe, base, out_dim);
    if (!mixed.empty() && !call.batch_norms.empty()) {
      // Batch norm in training mixes samples through its statistics only: when the module
      // keeps samples apart with those layers evaluating, nothing else mixes them.
      probe->set_batch_norm_eval(true);
      const at::Tensor evaluating = probe->run();
      const bool only_batch_norm = mixing(*probe, evaluating, out_dim).empty();
      probe->set_batch_norm_eval(false);
      if (only_batch_norm) {
        std::string names;
        for (size_t k = 0; k < call.batch_norms.size() && k < 3; ++k)
          names += (k ? ", " : "") + call.batch_norms[k];
        if (call.batch_norms.size() > 3) names += ", ... (" + std::to_string(call.batch_norms.size()) + " layers)";
        inference.batch.batch_dim = out_dim;
        inference.batch.stats_couples = "normalizes with statistics over the batch in its BatchNorm layers in training (" +
                                        names + ")";
        return out;
      }
    }
    if (!mixed.empty()) {
      inference.batch = batch::couple(mixed);
      return out;
    }
  }
  inference.batch.batch_dim = out_dim;
  return out;
}

}  // namespace

std::string torch_complaint(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  const size_t raised = text.find("\nException raised from");
  if (raised != std::string::npos) text.erase(raised);
  // "Could not run 'aten::roll' with arguments from the 'Meta' backend. This could be
  // because ..." and a list of every dispatch key: the first sentence says it.
  const size_t because = text.find(". This could be because the operator doesn't exist");
  if (because != std::string::npos) text.erase(because + 1);
  const std::string marker = "<--- HERE\n";
  const size_t here = text.rfind(marker);
  if (here != std::string::npos) {
    text.erase(0, here + marker.size());
    // Source lines of the innermost frame may follow the marker; the error is the first
    // line that names one ("RuntimeError: ...").
    size_t line = 0;
    while (line < text.size()) {
      const size_t end = text.find('\n', line);
      const std::string head = text.substr(line, end == std::string::npos ? std::string::npos : end - line);
      const size_t colon = head.find(": ");
      const std::string name = colon == std::string::npos ? std::string() : head.substr(0, colon);
      const bool names_error = !name.empty() && name.find(' ') == std::string::npos &&
                               (name.size() >= 5 && (name.compare(name.size() - 5, 5, "Error") == 0 ||
                                                     name.find("Exception") != std::string::npos));
      if (names_error) {
        text.erase(0, line);
        break;
      }
      if (end == std::string::npos) break;
      line = end + 1;
    }
  }
  const size_t start = text.find_first_not_of(" \n");
  text = start == std::string::npos ? std::string() : text.substr(start);
  for (const char* prefix : {"RuntimeError: ", "Exception: ", "builtins.RuntimeError: "})
    if (text.rfind(prefix, 0) == 0) text.erase(0, std::string(prefix).size());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string module_name(const Module& module) {
  std::string name = module.type()->name() ? module.type()->name()->qualifiedName() : std::string("module");
  const std::string prefix = "__torch__.";
  if (name.rfind(prefix, 0) == 0) name.erase(0, prefix.size());
  return name;
}

void set_training(const Module& module, bool on) {
  std::unordered_set<const c10::ivalue::Object*> seen;
  set_training(module._ivalue(), on, seen);
}

NodePtr module_forward(koila_module& m, const std::vector<NodePtr>& inputs) {
  auto call = std::make_shared<Call>();
  call->name = module_name(m.module);
  call->n_inputs = inputs.size();
  call->input_text = inputs.empty() ? std::string("none") : describe_inputs(inputs);

  const auto method = m.module.find_method("forward");
  if (!method) fail(KOILA_ERROR_UNSUPPORTED, "module " + call->name + " has no forward method");
  const c10::FunctionSchema& schema = method->function().getSchema();
  if (schema.returns().size() != 1 || !schema.returns()[0].type()->isSubtypeOf(*c10::TensorType::get()))
    fail(KOILA_ERROR_UNSUPPORTED, "module " + call->name + " has forward " + c10::toString(schema) +
                                      "; koila_module_forward needs a forward that returns one tensor");
  {
    std::vector<c10::IValue> stack{m.module._ivalue()};
    for (const NodePtr& in : inputs) stack.emplace_back(meta_tensor(in->meta));
    try {
      schema.checkAndNormalizeInputs(stack, {});
    } catch (const std::exception& e) {
      fail(KOILA_ERROR_INVALID_ARGUMENT, "module " + call->name + ": " + torch_complaint(e));
    }
  }
  for (const NodePtr& in : inputs)
    if (in->meta.device != m.device)
      fail(KOILA_ERROR_DEVICE, "module " + call->name + " is on " + m.device.str() + " but an input is on " +
                                   in->meta.device.str());

  // The call runs the module as it is now: a twin shares its tensors but keeps its own
  // flags, so koila_module_train afterwards does not change what this call computes. Its
  // methods are the clone's, whose executors no optimized plan of the caller's reaches.
  if (!m.runnable) {
    try {
      m.runnable = m.module.clone(/*inplace=*/true);
      route_batch_norms(*m.runnable);  // done at koila_module_load already, unless made otherwise
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      fail(KOILA_ERROR_UNSUPPORTED, "module " + call->name + " cannot be cloned: " + torch_complaint(e));
    }
  }
  call->module = twin(*m.runnable, m.module, [](const at::Tensor& t) { return t; });
  {
    std::unordered_set<const c10::ivalue::Object*> seen;
    collect_tensors(call->module._ivalue(), call->state, call->index, seen);
  }
  for (const auto& named : call->module.named_modules()) {
    if (!training_batch_norm(*named.value._ivalue())) continue;
    call->batch_norms.push_back(named.name.empty() ? std::string("the module itself") : named.name);
    for (const char* buffer : {"running_mean", "running_var"})
      call->batch_norm_buffers.push_back(named.value.attr(buffer).toTensor());
    const auto counter = named.value.type()->findAttributeSlot("num_batches_tracked");
    if (!counter) continue;
    const c10::IValue& v = named.value._ivalue()->getSlot(*counter);
    if (v.isTensor() && v.toTensor().defined()) call->batch_norm_counters.push_back(v.toTensor());
  }

  auto inference = std::make_shared<Inference>();
  OpSpec spec;
  spec.name = "koila_module_forward";
  spec.run = [call](const Tensors& args, const Node&) { return run_call(*call, args); };
  spec.infer = [call, inference](const std::vector<const Meta*>& in, const Node& self) {
    return infer(*call, *inference, in, self);
  };
  spec.batch = [inference, name = call->name](const std::vector<const Meta*>&, const Meta&) {
    BatchResult r = inference->batch;
    if (!r.couples.empty()) r.couples = "(module " + name + ") " + r.couples;
    if (!r.stats_couples.empty()) r.stats_couples = "(module " + name + ") " + r.stats_couples;
    return r;
  };
  spec.shown_inputs = inputs.size();
  // Which submodules train (dropout masks, batch statistics) changes the memory a call needs.
  spec.signature = call->name + ":";
  for (const Module& sub : call->module.modules()) spec.signature += sub.is_training() ? '1' : '0';
  spec.mutates_state = true;  // buffers (batch norm's running statistics) may change
  spec.stats_counters = call->batch_norm_counters;
  spec.stats_buffers = call->batch_norm_buffers;

  std::vector<NodePtr> all = inputs;
  for (const at::Tensor& t : call->state) all.push_back(make_constant(t));
  if (all.empty()) fail(KOILA_ERROR_INVALID_ARGUMENT, "module " + call->name + " holds no tensor and got no input");
  NodePtr node = build(std::move(spec), all);
  return node;
}

}  // namespace koila
