#include "module/call_errors.h"

#include "base/error.h"
#include "base/text.h"
#include "module/results.h"

namespace koila::module_detail {

namespace {

// An exported program's inputs: as many as it has, of its dtypes and its static sizes.
void check_exported_inputs(const ExportedProgram& p, const Call& call, const std::vector<NodePtr>& inputs) {
  if (inputs.size() != p.inputs.size())
    fail(Code::InvalidArgument, "module " + call.name + " (exported) takes " + std::to_string(p.inputs.size()) +
                                    " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ExportedProgram::Input& want = p.inputs[i];
    const Meta& got = inputs[i]->meta;
    const std::string which =
        "module " + call.name + " (exported): input " + std::to_string(i) + " (" + want.name + ")";
    if (got.dtype != want.dtype)
      fail(Code::Dtype, which + " was exported as " + dtype_name(want.dtype) + ", got " + dtype_name(got.dtype));
    bool ok = got.shape.size() == want.sizes.size();
    for (size_t d = 0; ok && d < got.shape.size(); ++d) ok = want.sizes[d] < 0 || want.sizes[d] == got.shape[d];
    if (!ok) {
      std::string exported = "[";
      for (size_t d = 0; d < want.sizes.size(); ++d)
        exported += (d ? ", " : "") + (want.sizes[d] < 0 ? std::string("*") : std::to_string(want.sizes[d]));
      fail(Code::Shape,
           which + " was exported with shape " + exported + "]" + " (* a dynamic dim), got " + shape_string(got.shape));
    }
  }
}

}  // namespace

void check_call(const LoadedModule& m, const Call& call, const std::vector<NodePtr>& inputs, bool all) {
  if (m.exported) check_exported_inputs(*m.exported, call, inputs);
  const auto method = m.module.find_method("forward");
  if (!method) fail(Code::Unsupported, "module " + call.name + " has no forward method");
  const c10::FunctionSchema& schema = method->function().getSchema();
  std::string why;
  const bool tensors = schema.returns().size() == 1 && returns_tensors(schema.returns()[0].type(), &why);
  if (all && !tensors)
    fail(Code::Unsupported, "module " + call.name + " has forward " + c10::toString(schema) +
                                "; koila_module_forward_all needs a forward that returns tensors, None, and "
                                "tuples, lists and dicts of them" +
                                (why.empty() ? std::string() : " (not " + why + ")"));
  if (!all && (schema.returns().size() != 1 || !schema.returns()[0].type()->isSubtypeOf(*c10::TensorType::get())))
    fail(Code::Unsupported, "module " + call.name + " has forward " + c10::toString(schema) +
                                "; koila_module_forward needs a forward that returns one tensor" +
                                (tensors ? " (koila_module_forward_all gives each of several)" : ""));
  std::vector<c10::IValue> stack{m.module._ivalue()};
  for (const NodePtr& in : inputs) stack.emplace_back(meta_tensor(in->meta));
  try {
    schema.checkAndNormalizeInputs(stack, {});
  } catch (const std::exception& e) {
    fail(Code::InvalidArgument, "module " + call.name + ": " + torch_complaint(e));
  }
  for (const NodePtr& in : inputs)
    if (in->meta.device != m.device)
      fail(Code::Device,
           "module " + call.name + " is on " + m.device.str() + " but an input is on " + in->meta.device.str());
}

void fail_clone(const Call& call, const std::exception& e) {
  fail(Code::Unsupported, "module " + call.name + " cannot be cloned: " + torch_complaint(e));
}

void fail_nothing_to_run(const Call& call) {
  fail(Code::InvalidArgument, "module " + call.name + " holds no tensor and got no input");
}

void fail_forward(const Call& call, const std::exception& e, Code fallback) {
  const std::string text = torch_complaint(e);
  fail(is_out_of_memory(e, text) ? Code::OutOfMemory : fallback,
       "module " + call.name + " (inputs " + input_text(call) + "): " + text);
}

void fail_result(const Call& call, const c10::IValue& result) {
  fail(Code::Unsupported, "module " + call.name + " returned " + result.tagKind() +
                              "; koila_module_forward needs a module whose forward returns one tensor "
                              "(koila_module_forward_all gives each of several)");
}

void fail_result_changed(const Call& call, const Tensors& all) {
  std::string got;
  for (size_t i = 0; i < all.size(); ++i)
    got += (i ? ", " : "") + (all[i].defined() ? shape_string(all[i].sizes()) : std::string("None"));
  const std::string inferred =
      call.result >= 0 ? "with a tensor as result " + std::to_string(call.result) : "with another number of results";
  fail(Code::Unsupported, "module " + call.name + " (inputs " + input_text(call) + ") returned (" + got +
                              ") where its call was inferred " + inferred +
                              ": koila needs a forward whose results keep their structure from call to call");
}

void fail_uninferable(const Call& call, const std::string& meta_failure, const std::string& why, int64_t batch) {
  fail(Code::Unsupported, "module " + call.name + " cannot run on meta tensors (" + meta_failure + ") and " + why +
                              ", so koila cannot infer its result for a batch of " + std::to_string(batch));
}

}  // namespace koila::module_detail
