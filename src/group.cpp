#include "group.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#ifdef KOILA_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef KOILA_WITH_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <unordered_map>

#include "chunked_run.h"
#include "error.h"
#include "executor.h"
#include "libtorch_compat.h"
#include "planner.h"
#include "types.h"

namespace koila {

using CommBase = compat::CommBackend;

struct Group::Comm {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<CommBase> pg;
  std::chrono::milliseconds timeout{0};
  c10::Device device = c10::Device(c10::kCPU);  // where the collectives' tensors live
  bool broken = false;  // a collective failed: the peers are out of step or gone
};

namespace {

// Bytes of gradients reduced per collective (KOILA_GROUP_BUCKET_BYTES overrides it, for
// benchmarks); larger tensors are reduced alone, in place.
size_t bucket_bytes() {
  if (const char* text = std::getenv("KOILA_GROUP_BUCKET_BYTES")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (end != text && *end == '\0' && v > 0) return static_cast<size_t>(v);
  }
  return size_t(4) << 20;
}

[[noreturn]] void communication_failed(Group::Comm& comm, const std::string& what, const std::string& why) {
  comm.broken = true;
  throw FinalError(KOILA_ERROR_IO, what + " failed (a rank died, left, or did not arrive within " +
                                       std::to_string(comm.timeout.count()) + " ms): " + why +
                                       ". The group cannot be used any more: free it");
}

// The text of the exception in flight.
std::string current_error_text() {
  try {
    throw;
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

// A started collective.
class Pending {
 public:
  Pending(Group::Comm& comm, c10::intrusive_ptr<c10d::Work> work, const char* what)
      : comm_(comm), work_(std::move(work)), what_(what) {}
  void wait() {
    try {
      if (!work_->wait(comm_.timeout)) communication_failed(comm_, what_, "timed out");
    } catch (const FinalError&) {
      throw;
    } catch (...) {
      communication_failed(comm_, what_, current_error_text());
    }
  }

 private:
  Group::Comm& comm_;
  c10::intrusive_ptr<c10d::Work> work_;
  const char* what_;
};

void check_usable(const Group::Comm& comm) {
  if (comm.broken)
    fail(KOILA_ERROR_IO, "an earlier collective of this group failed (a rank died or timed out); free the group and "
                         "join a new one");
}

// Collectives write into their tensors past LibTorch's dispatcher, which would count the
// write in the tensor's version; it is counted here, so that whatever knows a tensor by its
// version (zeroed_grads.h) sees it written.
void count_write(const at::Tensor& t) {
  if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
}

Pending start_all_reduce(Group::Comm& comm, at::Tensor& t) {
  count_write(t);
  std::vector<at::Tensor> ts{t};
  try {
    return Pending(comm, comm.pg->allreduce(ts), "all-reduce");
  } catch (...) {
    communication_failed(comm, "all-reduce", current_error_text());
  }
}

Pending start_broadcast(Group::Comm& comm, at::Tensor& t, int root) {
  count_write(t);
  std::vector<at::Tensor> ts{t};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  try {
    return Pending(comm, comm.pg->broadcast(ts, options), "broadcast");
  } catch (...) {
    communication_failed(comm, "broadcast", current_error_text());
  }
}

// ---- joining ----------------------------------------------------------------------------

struct Init {
  bool tcp = false;
  std::string host;  // tcp
  uint16_t port = 0;
  std::string path;  // file
};

Init parse_init(const std::string& init) {
  Init parsed;
  const std::string tcp = "tcp://", file = "file://";
  if (init.compare(0, tcp.size(), tcp) == 0) {
    const std::string rest = init.substr(tcp.size());
    const size_t colon = rest.rfind(':');
    const std::string port = colon == std::string::npos ? "" : rest.substr(colon + 1);
    char* end = nullptr;
    const long value = port.empty() ? 0 : std::strtol(port.c_str(), &end, 10);
    if (colon == 0 || port.empty() || *end != '\0' || value < 1 || value > 65535)
      fail(KOILA_ERROR_INVALID_ARGUMENT, "init \"" + init + "\" is not tcp://HOST:PORT with a port in 1..65535");
    parsed.tcp = true;
    parsed.host = rest.substr(0, colon);
    if (parsed.host.size() > 2 && parsed.host.front() == '[' && parsed.host.back() == ']')
      parsed.host = parsed.host.substr(1, parsed.host.size() - 2);  // [::1]
    parsed.port = static_cast<uint16_t>(value);
    return parsed;
  }
  if (init.compare(0, file.size(), file) == 0) {
    parsed.path = init.substr(file.size());
    if (parsed.path.empty() || parsed.path.front() != '/')
      fail(KOILA_ERROR_INVALID_ARGUMENT, "init \"" + init + "\" is not file:///ABSOLUTE/PATH");
    return parsed;
  }
  fail(KOILA_ERROR_INVALID_ARGUMENT, "init \"" + init + "\" is neither tcp://HOST:PORT nor file:///PATH");
}

bool is_loopback(const std::string& host) {
  return host.empty() || host == "localhost" || host == "::1" || host.compare(0, 4, "127.") == 0;
}

// The network device Gloo's pairs connect through: the interface GLOO_SOCKET_IFNAME names
// (as PyTorch reads it), else loopback when the rendezvous is on this machine (a file, or
// a loopback address), else the address this machine's hostname resolves to.
#ifdef KOILA_WITH_GLOO
std::shared_ptr<::gloo::transport::Device> gloo_device(const Init& init) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (!init.tcp || is_loopback(init.host)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

c10::intrusive_ptr<c10d::Store> make_store(const Init& init, int rank, int size, std::chrono::milliseconds timeout) {
  if (init.tcp) {
    c10d::TCPStoreOptions options;
    options.port = init.port;
    options.isServer = rank == 0;
    options.numWorkers = static_cast<size_t>(size);
    options.waitWorkers = true;
    options.timeout = timeout;
    return c10::make_intrusive<c10d::TCPStore>(init.host, options);
  }
  // FileStore's constructor opens the file before any timeout of ours applies; in LibTorch
  // 2.x it retries a file it cannot create for its own default timeout (minutes) instead of
  // failing, so a folder that is not there is refused here, at once.
  const std::string folder = init.path.substr(0, init.path.find_last_of('/') + 1);
  if (!folder.empty() && access(folder.c_str(), W_OK | X_OK) != 0)
    throw std::runtime_error("the store's folder " + folder + " is not there or not writable: " +
                             std::strerror(errno));
  auto store = c10::make_intrusive<c10d::FileStore>(init.path, size);
  store->setTimeout(timeout);
  return store;
}

// ---- agreement --------------------------------------------------------------------------

// What a rank reports before anything is committed.
struct Report {
  koila_code code = KOILA_OK;
  std::string message;           // when code is not KOILA_OK
  LossReduction::Kind kind = LossReduction::Kind::Other;
  double weight = 0;             // what its MEAN loss averaged over
  int64_t tensors = 0;           // how many tensors it will reduce, and their elements
  int64_t elements = 0;
  bool staged = true;            // its gradients' staging buffers fit (see Reduction)
};

// One row per rank of an int64 tensor; each rank fills its own and a sum all-reduce hands
// every rank every row. Doubles travel as their bits, the message as bytes.
constexpr int64_t kHeader = 7;
constexpr int64_t kMessageWords = 64;  // up to 511 bytes of the failing rank's message
constexpr int64_t kColumns = kHeader + kMessageWords;

std::vector<Report> agree(Group::Comm& comm, int rank, int size, const Report& mine) {
  at::Tensor rows = at::zeros({size, kColumns}, at::kLong);
  int64_t* row = rows.data_ptr<int64_t>() + rank * kColumns;
  row[0] = mine.code;
  row[1] = static_cast<int64_t>(mine.kind);
  std::memcpy(&row[2], &mine.weight, sizeof(double));
  row[3] = mine.tensors;
  row[4] = mine.elements;
  const size_t length = std::min(mine.message.size(), size_t(kMessageWords * 8 - 1));
  row[5] = static_cast<int64_t>(length);
  row[6] = mine.staged ? 0 : 1;
  std::memcpy(&row[kHeader], mine.message.data(), length);
  at::Tensor shared = comm.device.is_cpu() ? rows : rows.to(comm.device);
  start_all_reduce(comm, shared).wait();
  if (!comm.device.is_cpu()) rows = shared.to(at::kCPU);
  std::vector<Report> reports(size);
  for (int r = 0; r < size; ++r) {
    const int64_t* v = rows.data_ptr<int64_t>() + r * kColumns;
    Report& report = reports[r];
    report.code = static_cast<koila_code>(v[0]);
    report.kind = static_cast<LossReduction::Kind>(v[1]);
    std::memcpy(&report.weight, &v[2], sizeof(double));
    report.tensors = v[3];
    report.elements = v[4];
    report.staged = v[6] == 0;
    const size_t n = static_cast<size_t>(std::clamp<int64_t>(v[5], 0, kMessageWords * 8 - 1));
    report.message.assign(reinterpret_cast<const char*>(&v[kHeader]), n);
  }
  return reports;
}

const char* code_name(koila_code code) {
  switch (code) {
    case KOILA_OK: return "KOILA_OK";
    case KOILA_ERROR_INVALID_ARGUMENT: return "KOILA_ERROR_INVALID_ARGUMENT";
    case KOILA_ERROR_SHAPE: return "KOILA_ERROR_SHAPE";
    case KOILA_ERROR_DTYPE: return "KOILA_ERROR_DTYPE";
    case KOILA_ERROR_DEVICE: return "KOILA_ERROR_DEVICE";
    case KOILA_ERROR_OUT_OF_MEMORY: return "KOILA_ERROR_OUT_OF_MEMORY";
    case KOILA_ERROR_NOT_SPLITTABLE: return "KOILA_ERROR_NOT_SPLITTABLE";
    case KOILA_ERROR_IO: return "KOILA_ERROR_IO";
    case KOILA_ERROR_UNSUPPORTED: return "KOILA_ERROR_UNSUPPORTED";
    case KOILA_ERROR_INTERNAL: return "KOILA_ERROR_INTERNAL";
  }
  return "an unknown code";
}

const char* kind_name(LossReduction::Kind kind) {
  switch (kind) {
    case LossReduction::Kind::Mean: return "a MEAN over its batch";
    case LossReduction::Kind::Sum: return "a SUM over its batch";
    case LossReduction::Kind::Other: return "neither a MEAN nor a SUM over a lazy batch";
  }
  return "?";
}

// Throws (as a FinalError, the same on every rank) unless every rank succeeded and they
// all hand in the same tensors. `what` names the call; `unchanged` what was kept.
void check_verdict(const std::vector<Report>& reports, int rank, const char* unchanged) {
  std::string failed;
  koila_code code = KOILA_OK;
  std::string message;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (reports[r].code == KOILA_OK) continue;
    failed += (failed.empty() ? "" : ", ") + std::to_string(r);
    if (code == KOILA_OK) {
      code = reports[r].code;
      message = "rank " + std::to_string(r) + (static_cast<int>(r) == rank ? " (this process)" : "") + " failed with " +
                code_name(code) + ": " + reports[r].message;
    }
  }
  if (code != KOILA_OK) {
    const std::string ranks = failed.find(',') == std::string::npos ? "rank " + failed : "ranks " + failed;
    throw FinalError(code, message + " [failed: " + ranks + "; " + unchanged + " on any rank]");
  }
  for (size_t r = 1; r < reports.size(); ++r) {
    if (reports[r].tensors != reports[0].tensors || reports[r].elements != reports[0].elements)
      throw FinalError(KOILA_ERROR_INVALID_ARGUMENT,
                       "the ranks pass different tensors: rank 0 " + std::to_string(reports[0].tensors) + " of " +
                           std::to_string(reports[0].elements) + " elements in all, rank " + std::to_string(r) + " " +
                           std::to_string(reports[r].tensors) + " of " + std::to_string(reports[r].elements) +
                           " [" + unchanged + " on any rank]");
    if (reports[r].kind != reports[0].kind)
      throw FinalError(KOILA_ERROR_INVALID_ARGUMENT, std::string("the ranks' losses reduce differently: rank 0's is ") +
                                                         kind_name(reports[0].kind) + ", rank " + std::to_string(r) +
                                                         "'s " + kind_name(reports[r].kind) + " [" + unchanged +
                                                         " on any rank]");
  }
}

// Reports the failure in flight to the group (when it is still usable) and throws it again,
// or, when it was a FinalError (the agreement already ran), just throws it again.
[[noreturn]] void fail_together(Group::Comm& comm, int rank, int size, Report mine, const char* unchanged) {
  try {
    throw;
  } catch (const FinalError&) {
    throw;
  } catch (...) {
    koila_status* status = status_from_current_exception("");
    mine.code = koila_status_code(status);
    std::string text = koila_status_message(status);
    koila_status_free(status);
    if (text.compare(0, 2, ": ") == 0) text = text.substr(2);
    mine.message = text;
    if (comm.broken) throw Error(mine.code, text);
    const std::vector<Report> reports = agree(comm, rank, size, mine);
    check_verdict(reports, rank, unchanged);
  }
  fail(KOILA_ERROR_INTERNAL, "a rank failed but the group agreed on success");
}

int64_t elements_of(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const at::Tensor& t : ts) n += t.numel();
  return n;
}

// ---- the gradients' reduction -----------------------------------------------------------

// Consecutive parameters of one dtype whose gradients are reduced by one collective.
struct Bucket {
  std::vector<size_t> params;
  int64_t elements = 0;
  at::ScalarType dtype = at::kFloat;
  bool in_place = false;  // one contiguous gradient, reduced where it is
};

std::vector<Bucket> make_buckets(const std::vector<at::Tensor>& targets, size_t bytes) {
  std::vector<Bucket> buckets;
  for (size_t p = 0; p < targets.size(); ++p) {
    const at::Tensor& t = targets[p];
    const size_t size = static_cast<size_t>(t.numel()) * t.element_size();
    const bool alone = size >= bytes;
    if (alone || buckets.empty() || buckets.back().in_place || buckets.back().dtype != t.scalar_type() ||
        static_cast<size_t>(buckets.back().elements) * t.element_size() + size > bytes) {
      Bucket b;
      b.dtype = t.scalar_type();
      buckets.push_back(b);
    }
    Bucket& b = buckets.back();
    b.params.push_back(p);
    b.elements += t.numel();
    b.in_place = alone && t.is_contiguous();
  }
  for (Bucket& b : buckets)
    if (b.params.size() == 1 && targets[b.params[0]].is_contiguous()) b.in_place = true;
  return buckets;
}

// Reduces `targets` (the rank's share of each gradient, scaled by `scale`) so that each
// ends holding the sum over the ranks. Small gradients are packed into staging buffers and
// reduced a bucket at a time, larger ones in place; up to two buckets are in flight at once:
// while Gloo reduces one, the next is packed and the one before unpacked. The buffers are
// allocated by the constructor, within the budget and before the group agrees; when they
// do not fit, this rank says so in the agreement and every rank reduces each gradient
// alone, in place, which needs no memory beyond the gradients (collectives are matched by
// order, so the ranks must choose alike).
class Reduction {
 public:
  Reduction(std::vector<at::Tensor> targets, size_t bytes, c10::Device device)
      : targets_(std::move(targets)), device_(device) {
    try {
      allocate(bytes);
      staged_ = true;
    } catch (...) {
      if (!is_out_of_memory(std::current_exception())) throw;
      free_.clear();
      allocate(0);  // buffers only for gradients that are not contiguous (rare)
    }
  }

  bool staged() const { return staged_; }

  // `staged`: whether every rank could allocate its staging buffers.
  void run(Group::Comm& comm, double scale, bool staged) {
    if (staged_ && !staged) buckets_ = make_buckets(targets_, 0);  // the buffers are large enough
    c10::NoGradGuard no_grad;
    std::deque<Flight> flights;
    for (const Bucket& b : buckets_) {
      if (static_cast<int>(flights.size()) == kInFlight) {
        land(flights.front());
        flights.pop_front();
      }
      flights.push_back(launch(comm, b, scale));
    }
    for (Flight& f : flights) land(f);
  }

 private:
  static constexpr int kInFlight = 2;

  void allocate(size_t bytes) {
    buckets_ = make_buckets(targets_, bytes);
    std::map<at::ScalarType, int64_t> largest;
    for (const Bucket& b : buckets_)
      if (!b.in_place) largest[b.dtype] = std::max(largest[b.dtype], b.elements);
    for (const auto& [dtype, elements] : largest)
      for (int i = 0; i < kInFlight; ++i)
        free_[dtype].push_back(at::empty({elements}, at::TensorOptions().dtype(dtype).device(device_)));
  }

  struct Flight {
    const Bucket* bucket;
    at::Tensor buffer;  // the staging buffer (not in place)
    Pending pending;
  };

  Flight launch(Group::Comm& comm, const Bucket& b, double scale) {
    at::Tensor buffer;
    at::Tensor reduced;
    if (b.in_place) {
      reduced = targets_[b.params[0]];
    } else {
      buffer = free_[b.dtype].back();
      free_[b.dtype].pop_back();
      reduced = buffer.narrow(0, 0, b.elements);
      int64_t offset = 0;
      for (size_t p : b.params) {
        const at::Tensor& t = targets_[p];
        reduced.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t);
        offset += t.numel();
      }
    }
    if (scale == 0)
      reduced.zero_();
    else if (scale != 1)
      reduced.mul_(scale);
    return Flight{&b, buffer, start_all_reduce(comm, reduced)};
  }

  void land(Flight& f) {
    f.pending.wait();
    const Bucket& b = *f.bucket;
    if (b.in_place) {
      torch::autograd::impl::bump_version(targets_[b.params[0]]);
      return;
    }
    int64_t offset = 0;
    for (size_t p : b.params) {
      at::Tensor& t = targets_[p];
      t.copy_(f.buffer.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
    free_[b.dtype].push_back(f.buffer);
  }

  std::vector<at::Tensor> targets_;
  const c10::Device device_;  // the collectives' (the gradients are there too)
  bool staged_ = false;
  std::vector<Bucket> buckets_;
  std::map<at::ScalarType, std::vector<at::Tensor>> free_;
};

// This rank's weight in the mean over the ranks, and the scale its gradients get.
double scale_of(const std::vector<Report>& reports, int rank) {
  switch (reports[0].kind) {
    case LossReduction::Kind::Sum: return 1;
    case LossReduction::Kind::Other: return 1.0 / static_cast<double>(reports.size());
    case LossReduction::Kind::Mean: break;
  }
  double total = 0;
  for (const Report& r : reports) total += r.weight;
  // Nothing averaged anywhere (every target ignored): nothing to add, as a single process
  // that averaged over nothing adds nothing.
  return total > 0 ? reports[rank].weight / total : 0;
}

}  // namespace

// ---- Group ------------------------------------------------------------------------------

Group::Group(const std::string& backend, const std::string& init, int rank, int size,
             std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), comm_(std::make_unique<Comm>()) {
  const bool nccl = backend == "nccl";
  if (backend != "gloo" && !nccl)
    fail(KOILA_ERROR_INVALID_ARGUMENT, "unknown backend \"" + backend + "\" (\"gloo\" or \"nccl\")");
#ifndef KOILA_WITH_GLOO
  fail(KOILA_ERROR_UNSUPPORTED, "process groups are not available: koila was built without gloo's headers "
                                "(Debian: libgloo-dev)");
#endif
#ifndef KOILA_WITH_NCCL
  if (nccl)
    fail(KOILA_ERROR_UNSUPPORTED, "backend \"nccl\" is not available: this LibTorch was built without NCCL "
                                  "(c10d's ProcessGroupNCCL); use \"gloo\"");
#endif
  const Init parsed = parse_init(init);
  comm_->timeout = timeout;
  try {
    comm_->store = make_store(parsed, rank, size, timeout);
#ifdef KOILA_WITH_GLOO
    if (!nccl) {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      options->devices.push_back(gloo_device(parsed));
      comm_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(comm_->store, rank, size, options);
    }
#endif
#ifdef KOILA_WITH_NCCL
    else {
      // Without blocking waits, NCCL's Work::wait only orders streams and a dead peer hangs
      // the others; with them, wait(timeout) returns an error instead. (Read when the
      // process group is made; a caller's own setting wins.)
      setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
      setenv("NCCL_BLOCKING_WAIT", "1", 0);
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      comm_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(comm_->store, rank, size, options);
      comm_->device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(at::cuda::current_device()));
    }
#endif
    // Every rank is there: one agreement round (it also makes Gloo connect every pair now,
    // within the timeout, rather than at the first backward).
    Report hello;
    const std::vector<Report> reports = agree(*comm_, rank, size, hello);
    (void)reports;
  } catch (const Error& e) {
    fail(KOILA_ERROR_IO, "could not join the group as rank " + std::to_string(rank) + " of " + std::to_string(size) +
                             " at " + init + " within " + std::to_string(timeout.count()) + " ms: " + e.what());
  } catch (...) {
    fail(KOILA_ERROR_IO, "could not join the group as rank " + std::to_string(rank) + " of " + std::to_string(size) +
                             " at " + init + " within " + std::to_string(timeout.count()) +
                             " ms: " + current_error_text());
  }
}

Group::~Group() = default;

void Group::broadcast(const std::function<std::vector<NodePtr>()>& collect, int root) {
  check_usable(*comm_);
  if (root < 0 || root >= size_)
    fail(KOILA_ERROR_INVALID_ARGUMENT,
         "root " + std::to_string(root) + " is not a rank of this group of " + std::to_string(size_));
  std::vector<at::Tensor> tensors;
  Report mine;
  const char* unchanged = "no tensor changed";
  try {
    for (const NodePtr& node : collect()) {
      if (node->lazy())
        fail(KOILA_ERROR_INVALID_ARGUMENT, "a lazy tensor cannot receive values: broadcast concrete tensors");
      if (node->value.device() != comm_->device)
        fail(KOILA_ERROR_DEVICE, "a tensor on " + node->value.device().str() + " in a group whose collectives run on " +
                                     comm_->device.str());
      tensors.push_back(node->value);
    }
    mine.tensors = static_cast<int64_t>(tensors.size());
    mine.elements = elements_of(tensors);
  } catch (...) {
    fail_together(*comm_, rank_, size_, mine, unchanged);
  }
  check_verdict(agree(*comm_, rank_, size_, mine), rank_, unchanged);
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> staged;
  std::vector<Pending> pending;
  for (at::Tensor& t : tensors) {
    staged.push_back(t.is_contiguous() ? t : t.contiguous());
    pending.push_back(start_broadcast(*comm_, staged.back(), root));
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
  check_usable(*comm_);
  Comm& comm = *comm_;
  Report mine;
  const char* unchanged = "no gradient changed";
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> late;  // params this rank's loss did not reach: added after the commit
  bool agreed = false;
  try {
    auto [loss, nodes] = collect();
    std::unordered_map<const c10::TensorImpl*, size_t> index;
    for (const NodePtr& node : nodes) {
      if (node->lazy() || !node->value.requires_grad() || !node->value.is_leaf())
        fail(KOILA_ERROR_INVALID_ARGUMENT, "params must be concrete leaves that require grad (see "
                                           "koila_tensor_set_requires_grad)");
      if (node->value.device() != comm.device)
        fail(KOILA_ERROR_DEVICE, "a parameter on " + node->value.device().str() +
                                     " in a group whose collectives run on " + comm.device.str());
      if (!index.emplace(node->value.unsafeGetTensorImpl(), params.size()).second)
        fail(KOILA_ERROR_INVALID_ARGUMENT, "a parameter is listed twice in params");
      params.push_back(node->value);
    }
    mine.tensors = static_cast<int64_t>(params.size());
    mine.elements = elements_of(params);
    late.resize(params.size());
    run_backward(loss, nullptr, [&](const Tensors& leaves, const Tensors& grads, const LossReduction& reduction) {
      std::vector<at::Tensor> targets(params.size());
      std::unique_ptr<Reduction> reduce;
      try {
        for (size_t i = 0; i < leaves.size(); ++i) {
          auto found = index.find(leaves[i].unsafeGetTensorImpl());
          if (found == index.end())
            fail(KOILA_ERROR_INVALID_ARGUMENT, "the loss reaches a tensor that requires grad and is not in params "
                                               "(params must list every tensor the gradients reach, in the same "
                                               "order on every rank)");
          targets[found->second] = grads[i];
        }
        for (size_t p = 0; p < params.size(); ++p)
          if (!targets[p].defined()) targets[p] = late[p] = at::zeros(params[p].sizes(), params[p].options());
        mine.kind = reduction.kind;
        mine.weight = reduction.count;
        reduce = std::make_unique<Reduction>(targets, bucket_bytes(), comm.device);
        mine.staged = reduce->staged();
      } catch (...) {
        fail_together(comm, rank_, size_, mine, unchanged);
      }
      const std::vector<Report> reports = agree(comm, rank_, size_, mine);
      agreed = true;
      check_verdict(reports, rank_, unchanged);
      const bool staged = std::all_of(reports.begin(), reports.end(), [](const Report& r) { return r.staged; });
      reduce->run(comm, scale_of(reports, rank_), staged);
    });
  } catch (...) {
    if (agreed) throw;
    fail_together(comm, rank_, size_, mine, unchanged);
  }
  if (!agreed) fail(KOILA_ERROR_INTERNAL, "the backward ended without reaching the group's agreement");
  Tensors reached, extra;
  for (size_t p = 0; p < params.size(); ++p)
    if (late[p].defined()) {
      reached.push_back(params[p]);
      extra.push_back(late[p]);
    }
  commit_gradients(reached, extra);
}

}  // namespace koila
