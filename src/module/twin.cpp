#include "module/twin.h"

#include <unordered_set>

#include "base/error.h"
#include "module/module.h"

namespace koila {

namespace module_detail {

namespace {

using Objects = std::unordered_set<const c10::ivalue::Object*>;

bool is_module(const c10::IValue& v) { return v.isObject() && v.toObjectRef().type()->is_module(); }

c10::List<at::Tensor> substitute_all(const c10::List<at::Tensor>& tensors, const Substitute& substitute) {
  c10::List<at::Tensor> out;
  out.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {  // (by index: a c10::List hands out proxies, not references)
    const at::Tensor t = tensors.get(i);
    out.push_back(t.defined() ? substitute(t) : t);
  }
  return out;
}

ObjectPtr twin(const ObjectPtr& runnable, const ObjectPtr& original, const Substitute& substitute,
               std::unordered_map<const c10::ivalue::Object*, ObjectPtr>& done) {
  auto found = done.find(runnable.get());
  if (found != done.end()) return found->second;
  if (runnable->slots().size() != original->slots().size())
    fail(Code::Internal, "the module's structure changed after koila cloned it");
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

void collect_tensors(const ObjectPtr& obj, Tensors& out, std::unordered_map<const c10::TensorImpl*, size_t>& index,
                     Objects& seen) {
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

void module_objects(const ObjectPtr& obj, std::vector<ObjectPtr>& out, Objects& seen) {
  if (!seen.insert(obj.get()).second) return;
  out.push_back(obj);
  for (const c10::IValue& v : obj->slots())
    if (is_module(v)) module_objects(v.toObject(), out, seen);
}

}  // namespace

torch::jit::Module twin(const torch::jit::Module& runnable, const torch::jit::Module& original,
                        const Substitute& substitute) {
  std::unordered_map<const c10::ivalue::Object*, ObjectPtr> done;
  return torch::jit::Module(twin(runnable._ivalue(), original._ivalue(), substitute, done));
}

void collect_tensors(const ObjectPtr& obj, Tensors& out, std::unordered_map<const c10::TensorImpl*, size_t>& index) {
  Objects seen;
  collect_tensors(obj, out, index, seen);
}

std::vector<ObjectPtr> module_objects(const ObjectPtr& obj) {
  std::vector<ObjectPtr> out;
  Objects seen;
  module_objects(obj, out, seen);
  return out;
}

std::vector<std::string> training_batch_norm_names(const torch::jit::Module& module) {
  std::vector<std::string> names;
  for (const auto& named : module.named_modules())
    if (training_batch_norm(*named.value._ivalue()))
      names.push_back(named.name.empty() ? std::string("the module itself") : named.name);
  return names;
}

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

void evaluate_batch_norms(const ObjectPtr& obj) {
  for (const ObjectPtr& o : module_objects(obj))
    if (training_batch_norm(*o)) o->setSlot(*o->type()->findAttributeSlot("training"), false);
}

}  // namespace module_detail

void set_training(const torch::jit::Module& module, bool on) {
  for (const module_detail::ObjectPtr& o : module_detail::module_objects(module._ivalue()))
    if (auto slot = o->type()->findAttributeSlot("training")) o->setSlot(*slot, on);
}

}  // namespace koila
