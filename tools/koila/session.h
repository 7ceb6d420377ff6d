// The model under study: the module loaded once on the device under the budget, and for
// any batch size a lazy graph of it (inputs wrapped with koila_lazy, batch dim 0: random
// normal floats, integers 0 and 1 (class indices below C for cross entropy's targets); the
// module call; the loss) with koila's plan of it. Optimizer state is held as real
// tensors (zeros shaped like the parameters), as after the optimizer's first step, so
// that plans count it as memory in use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "capi.h"
#include "options.h"

namespace koila_cli {

// One batch's graph and plan. Holds its inputs (real, on the device) while it lives.
struct BatchPlan {
  int64_t batch = 0;
  std::vector<Tensor> keep;  // inputs, targets, intermediate handles
  Tensor target;             // what is planned: the loss, or the model's output
  Plan plan;                 // null when planning failed
  koila_code code = KOILA_OK;
  std::string message;       // why planning failed
  uint64_t input_bytes = 0;  // inputs and targets
  std::vector<int64_t> output_shape;

  // Unsplit, recomputing nothing (KOILA_RECOMPUTE_PREFERRED's plans may recompute).
  bool fits_unsplit() const {
    return plan && koila_plan_num_chunks(plan.get()) == 1 && koila_plan_recomputed_bytes(plan.get()) == 0;
  }
  bool fits_unsplit_recomputing() const { return plan && koila_plan_num_chunks(plan.get()) == 1; }
};

class Session {
 public:
  explicit Session(const Options& options);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The graph of a batch of `n` and its plan. Failures of the model or the loss are
  // CliErrors; a plan that does not fit is not (code and message say why).
  // `recompute`: the policy the plan is made under (default: --recompute's).
  BatchPlan plan_batch(int64_t n);
  BatchPlan plan_batch(int64_t n, koila_recompute recompute);
  // Bytes of inputs and targets for a batch of n, without making them.
  uint64_t input_bytes(int64_t n) const;

  // The budget in force now (auto resolves to the device's free memory now).
  uint64_t budget() const;
  const Options& options() const { return o_; }
  size_t num_parameters() const { return num_params_; }
  uint64_t parameter_bytes() const { return param_bytes_; }
  uint64_t module_bytes() const { return module_bytes_; }  // measured: parameters and buffers
  uint64_t optimizer_bytes() const { return optimizer_bytes_; }
  uint64_t in_use() const;  // bytes held on the device now (koila_memory_stats)
  koila_module* module() { return module_.get(); }
  // An exported program (.pt2) keeps the mode it was exported in, whatever --mode says;
  // a TorchScript module trains for --mode training and evaluates for forward.
  bool exported() const { return exported_; }
  bool module_training() const { return module_training_; }

 private:
  Tensor make_loss(koila_tensor* output, BatchPlan& b);

  Options o_;
  Module module_;
  size_t num_params_ = 0;
  uint64_t param_bytes_ = 0, module_bytes_ = 0, optimizer_bytes_ = 0;
  bool exported_ = false, module_training_ = false;
  std::vector<Tensor> optimizer_state_;
};

}  // namespace koila_cli
