#include "dist/group.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "dist/agreement.h"
#include "dist/bucketed_allreduce.h"
#include "dist/comm.h"
#include "dist/join.h"
#include "plan/planner.h"
#include "run/chunked_run.h"
#include "run/executor.h"

namespace koila {

namespace {

int64_t elements_of(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const at::Tensor& t : ts) n += t.numel();
  return n;
}

}  // namespace

Group::Group(const std::string& backend, const std::string& init, int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), local_rank_(rank), comm_(dist::join(backend, init, rank, size, timeout)) {}

Group::Group(int rank, int size, int local_rank, std::unique_ptr<Comm> comm)
    : rank_(rank), size_(size), local_rank_(local_rank), comm_(std::move(comm)) {}

std::unique_ptr<Group> Group::from_env(const std::string& backend, std::chrono::milliseconds timeout) {
  const dist::LauncherEnv env = dist::read_launcher_env();
  std::unique_ptr<Comm> comm = dist::join(backend, env, timeout);
  return std::unique_ptr<Group>(new Group(env.rank, env.size, env.local_rank, std::move(comm)));
}

Group::~Group() = default;

void Group::broadcast(const std::function<std::vector<NodePtr>()>& collect, int root) {
  dist::check_usable(*comm_);
  if (root < 0 || root >= size_)
    fail(Code::InvalidArgument,
         "root " + std::to_string(root) + " is not a rank of this group of " + std::to_string(size_));
  std::vector<at::Tensor> tensors;
  dist::Report mine;
  const char* unchanged = "no tensor changed";
  try {
    for (const NodePtr& node : collect()) {
      if (node->lazy()) fail(Code::InvalidArgument, "a lazy tensor cannot receive values: broadcast concrete tensors");
      if (node->value.device() != comm_->device)
        fail(Code::Device, "a tensor on " + node->value.device().str() + " in a group whose collectives run on " +
                               comm_->device.str());
      tensors.push_back(node->value);
    }
    mine.tensors = static_cast<int64_t>(tensors.size());
    mine.elements = elements_of(tensors);
  } catch (...) {
    dist::fail_together(*comm_, rank_, size_, mine, unchanged);
  }
  dist::check_verdict(dist::agree(*comm_, rank_, size_, mine), rank_, unchanged);
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> staged;
  std::vector<dist::Pending> pending;
  for (at::Tensor& t : tensors) {
    staged.push_back(t.is_contiguous() ? t : t.contiguous());
    pending.push_back(dist::start_broadcast(*comm_, staged.back(), root));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    pending[i].wait();
    if (rank_ == root) continue;
    if (staged[i].unsafeGetTensorImpl() == tensors[i].unsafeGetTensorImpl())
      torch::autograd::impl::bump_version(tensors[i]);  // written by the collective
    else
      tensors[i].copy_(staged[i]);
  }
}

void Group::backward(const std::function<std::pair<NodePtr, std::vector<NodePtr>>()>& collect) {
  dist::check_usable(*comm_);
  Comm& comm = *comm_;
  dist::Report mine;
  const char* unchanged = "no gradient changed";
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> late;  // params this rank's loss did not reach: added after the commit
  bool agreed = false;
  try {
    auto [loss, nodes] = collect();
    std::unordered_map<const c10::TensorImpl*, size_t> index;
    for (const NodePtr& node : nodes) {
      if (node->lazy() || !node->value.requires_grad() || !node->value.is_leaf())
        fail(Code::InvalidArgument,
             "params must be concrete leaves that require grad (see "
             "koila_tensor_set_requires_grad)");
      if (node->value.device() != comm.device)
        fail(Code::Device, "a parameter on " + node->value.device().str() + " in a group whose collectives run on " +
                               comm.device.str());
      if (!index.emplace(node->value.unsafeGetTensorImpl(), params.size()).second)
        fail(Code::InvalidArgument, "a parameter is listed twice in params");
      params.push_back(node->value);
    }
    mine.tensors = static_cast<int64_t>(params.size());
    mine.elements = elements_of(params);
    late.resize(params.size());
    run_backward(loss, nullptr, [&](const Tensors& leaves, const Tensors& grads, const LossReduction& reduction) {
      std::vector<at::Tensor> targets(params.size());
      std::unique_ptr<dist::Reduction> reduce;
      try {
        for (size_t i = 0; i < leaves.size(); ++i) {
          auto found = index.find(leaves[i].unsafeGetTensorImpl());
          if (found == index.end())
            fail(Code::InvalidArgument,
                 "the loss reaches a tensor that requires grad and is not in params "
                 "(params must list every tensor the gradients reach, in the same "
                 "order on every rank)");
          targets[found->second] = grads[i];
        }
        for (size_t p = 0; p < params.size(); ++p)
          if (!targets[p].defined()) targets[p] = late[p] = at::zeros(params[p].sizes(), params[p].options());
        mine.kind = reduction.kind;
        mine.weight = reduction.count;
        reduce = std::make_unique<dist::Reduction>(targets, dist::bucket_bytes(), comm.device);
        mine.staged = reduce->staged();
      } catch (...) {
        dist::fail_together(comm, rank_, size_, mine, unchanged);
      }
      const std::vector<dist::Report> reports = dist::agree(comm, rank_, size_, mine);
      agreed = true;
      dist::check_verdict(reports, rank_, unchanged);
      const bool staged = std::all_of(reports.begin(), reports.end(), [](const dist::Report& r) { return r.staged; });
      reduce->run(comm, dist::scale_of(reports, rank_), staged);
    });
  } catch (...) {
    if (agreed) throw;
    dist::fail_together(comm, rank_, size_, mine, unchanged);
  }
  if (!agreed) fail(Code::Internal, "the backward ended without reaching the group's agreement");
  Tensors reached, extra;
  for (size_t p = 0; p < params.size(); ++p)
    if (late[p].defined()) {
      reached.push_back(params[p]);
      extra.push_back(late[p]);
    }
  commit_gradients(reached, extra);
}

}  // namespace koila
