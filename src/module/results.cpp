#include "module/results.h"

#include "base/error.h"

namespace koila::module_detail {

namespace {

void flatten(const c10::IValue& v, Tensors& out, const std::string& who, const std::string& where) {
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isNone()) {
    out.emplace_back();
  } else if (v.isTuple()) {
    const auto& elements = v.toTupleRef().elements();
    for (size_t i = 0; i < elements.size(); ++i) flatten(elements[i], out, who, where + "[" + std::to_string(i) + "]");
  } else if (v.isList()) {
    const c10::List<c10::IValue> list = v.toList();
    for (size_t i = 0; i < list.size(); ++i) flatten(list.get(i), out, who, where + "[" + std::to_string(i) + "]");
  } else if (v.isGenericDict()) {
    for (const auto& entry : v.toGenericDict()) {
      const c10::IValue& key = entry.key();
      const std::string name = key.isString() ? "'" + key.toStringRef() + "'"
                               : key.isInt()  ? std::to_string(key.toInt())
                                              : std::string("<") + key.tagKind() + ">";
      flatten(entry.value(), out, who, where + "[" + name + "]");
    }
  } else {
    fail(Code::Unsupported, who + " returned " + v.tagKind() + (where.empty() ? "" : " as its result" + where) +
                                "; koila takes tensors, None, and tuples, lists and dicts of them");
  }
}

}  // namespace

bool returns_tensors(const c10::TypePtr& type, std::string* why) {
  if (type->isSubtypeOf(*c10::TensorType::get()) || type->kind() == c10::NoneType::Kind) return true;
  if (const auto optional = type->cast<c10::OptionalType>()) return returns_tensors(optional->getElementType(), why);
  if (const auto tuple = type->cast<c10::TupleType>()) {
    for (const c10::TypePtr& element : tuple->elements())
      if (!returns_tensors(element, why)) return false;
    return true;
  }
  if (const auto list = type->cast<c10::ListType>()) return returns_tensors(list->getElementType(), why);
  if (const auto dict = type->cast<c10::DictType>()) return returns_tensors(dict->getValueType(), why);
  *why = type->str();
  return false;
}

void flatten_results(const c10::IValue& result, Tensors& out, const std::string& who) { flatten(result, out, who, ""); }

}  // namespace koila::module_detail
