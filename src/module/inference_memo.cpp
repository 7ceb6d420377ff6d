#include "module/inference_memo.h"

#include <algorithm>
#include <atomic>
#include <optional>

#include "base/error.h"
#include "module/module.h"
#include "module/probe.h"

namespace koila::module_detail {

namespace {

std::atomic<uint64_t> inferences{0};

void add_shape(std::string& key, const Meta& m) {
  key += '[';
  for (size_t d = 0; d < m.shape.size(); ++d) {
    if (d) key += ',';
    key += static_cast<int64_t>(d) == m.batch_dim ? std::string("B") : std::to_string(m.shape[d]);
  }
  key += ']';
}

}  // namespace

std::string InferenceMemo::structure(const Call& call, const std::string& flags, const std::vector<NodePtr>& inputs) {
  // The module koila runs: its type (the clone's, made once per loaded module) and forward.
  const auto forward = call.module.find_method("forward");
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(call.module.type().get())) + "/" +
                    std::to_string(forward ? reinterpret_cast<uintptr_t>(&forward->function()) : 0) + "/" + flags;
  int64_t batch = -1;
  for (const NodePtr& in : inputs) {
    const Meta& m = in->meta;
    const int64_t size = m.batch_size();
    if (size >= 0) {
      if (batch >= 0 && size != batch) return {};  // inferred as coupled at every call
      batch = size;
    }
    key += '|';
    key += in->lazy() ? 'L' : 'C';
    key += m.from_batch ? 'b' : '-';
    key += std::to_string(static_cast<int>(m.dtype)) + '@' + m.device.str() + '#' + std::to_string(m.batch_dim);
    add_shape(key, m);
  }
  // The probe takes min(batch, kProbeSamples) samples, and a batch of one is not probed.
  key += batch < 0 ? std::string("|unbatched") : "|probe" + std::to_string(std::min(batch, kProbeSamples));
  return key;
}

Meta InferenceMemo::Entry::at(int64_t batch) const {
  Meta m = out;
  if (follows >= 0 && batch >= 0) m.shape[follows] = batch;
  return m;
}

void InferenceMemo::fill(const Entry& e, int64_t batch, Inference& inference) {
  inference.batch = e.batch;
  inference.from_meta = true;
  inference.batch_size = e.batch_size < 0 ? -1 : batch;
  inference.follows = e.follows;
}

void InferenceMemo::remember(const std::string& structure, const Meta& out, const Inference& inference) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!entries_.count(structure) && entries_.size() >= kMaxStructures) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
    entries_.erase(oldest);
  }
  Entry& e = entries_[structure];
  e.out = out;
  e.out.batch_dim = -1;
  e.out.from_batch = false;
  e.batch = inference.batch;
  e.batch_size = inference.batch_size;
  e.follows = inference.batch_size < 0 ? -1 : inference.follows;
  e.seen = {inference.batch_size};
  e.used = ++clock_;
}

std::vector<bool> InferenceMemo::result_tensors(const std::string& structure, const Call& call,
                                                const std::vector<const Meta*>& in, const Node& self) {
  if (!structure.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = results_.find(structure);
    if (found != results_.end()) return found->second;
  }
  bool from_meta = false;
  std::vector<bool> tensors = module_detail::result_tensors(call, in, self, &from_meta);
  if (!structure.empty() && from_meta) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (results_.size() >= kMaxStructures) results_.clear();
    results_[structure] = tensors;
  }
  return tensors;
}

Meta InferenceMemo::infer(const std::string& structure, const Call& call, Inference& inference,
                          const std::vector<const Meta*>& in, const Node& self) {
  int64_t batch = -1;
  for (size_t i = 0; i < call.n_inputs; ++i) batch = std::max(batch, in[i]->batch_size());
  std::optional<Entry> known;
  if (!structure.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = entries_.find(structure);
    if (found != entries_.end()) {
      Entry& e = found->second;
      e.used = ++clock_;
      if (e.batch_size < 0 || e.seen.count(batch)) {
        fill(e, batch, inference);
        return e.at(batch);
      }
      known = e;
    }
  }
  if (known) {
    // A batch size this structure was not called with yet: one meta run confirms that the
    // result follows the batch size as the rule says; where it does not, or the run fails,
    // the call is inferred anew (which says why).
    std::optional<Meta> result;
    try {
      result = meta_result(call, in, -1);
    } catch (const Error& e) {
      if (e.code() == Code::Unsupported || e.code() == Code::OutOfMemory) throw;
    }
    const Meta expected = known->at(batch);
    if (result && result->shape == expected.shape && result->dtype == expected.dtype) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = entries_.find(structure);
      if (found != entries_.end() && found->second.seen.size() < kMaxBatchSizes) found->second.seen.insert(batch);
      fill(*known, batch, inference);
      return expected;
    }
  }
  inferences.fetch_add(1);
  Meta out = infer_call(call, inference, in, self);
  if (structure.empty()) return out;
  if (inference.from_meta && (inference.batch_size < 0 || inference.follows >= 0)) {
    remember(structure, out, inference);
  } else {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.erase(structure);
  }
  return out;
}

}  // namespace koila::module_detail

namespace koila::testing {
uint64_t module_inferences() { return module_detail::inferences.load(); }
}  // namespace koila::testing
