// Internal to module/ (only src/module/*.cpp include it; not part of koila's interface):
// what a module call's node knows of its result without running it for real: its shape and
// dtype from a run on meta tensors, and where the batch goes from a second run on meta
// tensors of another batch size (the one output dim that follows the batch size carries
// it). Where meta tensors cannot tell, and to check that the module keeps samples apart, a
// probe runs it on a few real samples (probe.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "module/call.h"

namespace koila::module_detail {

// Where the batch goes through the call, and whether the module keeps samples apart: found
// by infer_call, read by the node's batch rule.
struct Inference {
  BatchResult batch;
  // What the inference memo (inference_memo.h) needs to use the result again for calls of
  // the same structure: whether the result's shape came from runs on meta tensors (whose
  // ops cannot have branched on tensor values), the batch size inferred at (-1: no batched
  // input), and the result's dim that follows the batch size (-1: none; the inference is
  // then not reused, as the shape may depend on the batch size some other way).
  bool from_meta = false;
  int64_t batch_size = -1;
  int64_t follows = -1;
};

// The call's result for the arguments `in` of its node `self` (the node's OpSpec::infer);
// fills in `inference`.
Meta infer_call(const Call& call, Inference& inference, const std::vector<const Meta*>& in, const Node& self);

// The call's result on meta tensors, its inputs' batch dims resized to `batch`.
Meta meta_result(const Call& call, const std::vector<const Meta*>& in, int64_t batch);

// Which of the forward's results (flattened, results.h) are tensors and which None, from a
// run on meta tensors (`*from_meta` set), or on a probe of a few real samples where that
// run fails.
std::vector<bool> result_tensors(const Call& call, const std::vector<const Meta*>& in, const Node& self,
                                 bool* from_meta);

// The one dim of `a` (batch `na`) and `b` (batch `nb`) that follows the batch size, or -1
// with `*why` saying why there is none.
int64_t batch_dim_between(const std::vector<int64_t>& a, int64_t na, const std::vector<int64_t>& b, int64_t nb,
                          std::string* why);

}  // namespace koila::module_detail
