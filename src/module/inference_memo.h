// Internal to module/ (only src/module/*.cpp include it; not part of koila's interface): what
// the inference of a module call found (its result's shape rule and dtype, where its batch
// goes, whether it keeps samples apart), remembered per structure of call, so that a
// training loop that calls the module on a new batch every step runs the meta runs and the
// real-sample probe of batch_inference.h once per structure, not once per step.
//
// A structure is what the inference depends on (koila.h, koila_module_forward, says why
// nothing else does): the module koila runs (its type and forward method: reloading gives
// another module, and another memo), the training flag of each submodule, and for each input
// whether it is lazy, its dtype, device, batch dim and shape apart from the batch size; and
// how many samples the probe takes (batches of 1, 2 and 3 or more are probed differently).
// Only inferences whose shapes came from meta runs are remembered (their ops cannot branch
// on tensor values), and of those only the ones whose result follows the batch size along
// one dim, or that have no batched input: any other dependence on the batch size is
// inferred again at every call, never guessed. At a batch size the structure was not yet
// called with, one meta run confirms the rule before it is used.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "module/batch_inference.h"
#include "module/call.h"

namespace koila::module_detail {

class InferenceMemo {
 public:
  // The structure of a call of `call.module` with `inputs` and the training flags in
  // `flags`; empty when calls like it are not remembered (batched inputs of different
  // batch sizes).
  static std::string structure(const Call& call, const std::string& flags, const std::vector<NodePtr>& inputs);

  // The node's OpSpec::infer for a call of `structure`: what the memo holds, or
  // infer_call's findings, remembered when they may be.
  Meta infer(const std::string& structure, const Call& call, Inference& inference, const std::vector<const Meta*>& in,
             const Node& self);

  // Which of the forward's results are tensors (result_tensors in batch_inference.h), for a
  // call of `structure` (koila_module_forward_all), remembered when a meta run found it.
  std::vector<bool> result_tensors(const std::string& structure, const Call& call, const std::vector<const Meta*>& in,
                                   const Node& self);

  // Most structures kept per module; the least recently used is forgotten first.
  static constexpr size_t kMaxStructures = 64;
  // Most batch sizes whose result a structure keeps without a meta run to confirm it.
  static constexpr size_t kMaxBatchSizes = 64;

 private:
  struct Entry {
    Meta out;                 // the result at batch size `batch_size` (batch fields unset)
    BatchResult batch;        // where the batch goes, and whether samples mix
    int64_t batch_size = -1;  // -1: no batched input
    int64_t follows = -1;     // the result's dim that follows the batch size
    std::set<int64_t> seen;   // batch sizes whose result is known to follow the rule
    uint64_t used = 0;        // when last used (clock_)
    // The result for a batch of `batch` samples.
    Meta at(int64_t batch) const;
  };
  // What `inference` then says, from an entry used for a batch of `batch`.
  static void fill(const Entry& e, int64_t batch, Inference& inference);
  void remember(const std::string& structure, const Meta& out, const Inference& inference);

  std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  std::unordered_map<std::string, std::vector<bool>> results_;  // result_tensors, per structure
  uint64_t clock_ = 0;
};

}  // namespace koila::module_detail
