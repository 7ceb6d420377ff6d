#include "dist/join.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#ifdef KOILA_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef KOILA_WITH_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/error.h"
#include "dist/agreement.h"
#include "dist/local_address.h"

namespace koila::dist {

namespace {

struct Init {
  bool tcp = false;
  std::string host;  // tcp
  uint16_t port = 0;
  std::string path;          // file
  bool client_only = false;  // tcp: a launcher's store, which no rank serves
  std::string prefix;        // of the keys, in the store (a launcher's restart attempt)
  int cuda_device = -1;      // "nccl": the device (-1: the current one)
  std::string shown;         // in messages
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
      fail(Code::InvalidArgument, "init \"" + init + "\" is not tcp://HOST:PORT with a port in 1..65535");
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
      fail(Code::InvalidArgument, "init \"" + init + "\" is not file:///ABSOLUTE/PATH");
    return parsed;
  }
  fail(Code::InvalidArgument, "init \"" + init + "\" is neither tcp://HOST:PORT nor file:///PATH");
}

[[maybe_unused]] bool is_loopback(const std::string& host) {  // (used by gloo_device only)
  return host.empty() || host == "localhost" || host == "::1" || host.compare(0, 4, "127.") == 0;
}

// The network device Gloo's pairs connect through: the interface GLOO_SOCKET_IFNAME names
// (as PyTorch reads it), else loopback when the rendezvous is on this machine (a file, or
// a loopback address), else this machine's address on the route to the store's (else what its
// hostname resolves to).
#ifdef KOILA_WITH_GLOO
std::shared_ptr<::gloo::transport::Device> gloo_device(const Init& init) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (!init.tcp || is_loopback(init.host)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  // The address on the route to the store's machine (what reaches the store reaches the others).
  if (const std::string local = local_address_towards(init.host, init.port); !local.empty())
    return c10d::ProcessGroupGloo::createDeviceForHostname(local);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

// A TCPStore, made on a thread of its own and waited for no longer than the timeout and a
// second: a store that accepts the connection but never answers (a launcher of another PyTorch,
// whose store expects a handshake LibTorch 1.13 does not send) blocks the client's first read
// without a timeout of its own, and LibTorch 2.x's client retries a refused connection past
// the timeout. The thread is then left to finish or block alone (it owns nothing of the caller's).
c10::intrusive_ptr<c10d::Store> tcp_store(const Init& init, int rank, int size, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = init.port;
  options.isServer = rank == 0 && !init.client_only;
  options.numWorkers = static_cast<size_t>(size);
  options.waitWorkers = true;
  options.timeout = timeout;
  auto made = std::make_shared<std::promise<c10::intrusive_ptr<c10d::Store>>>();
  std::future<c10::intrusive_ptr<c10d::Store>> store = made->get_future();
  std::thread([made, host = init.host, options] {
    try {
      made->set_value(c10::make_intrusive<c10d::TCPStore>(host, options));
    } catch (...) {
      made->set_exception(std::current_exception());
    }
  }).detach();
  if (store.wait_for(timeout + std::chrono::seconds(1)) != std::future_status::ready)
    throw std::runtime_error("the store at " + init.host + ":" + std::to_string(init.port) +
                             " did not answer in time (nothing serves it there, or it is a launcher's of another "
                             "PyTorch version: koila speaks the store protocol of the LibTorch it was built with)");
  return store.get();
}

c10::intrusive_ptr<c10d::Store> make_store(const Init& init, int rank, int size, std::chrono::milliseconds timeout) {
  if (init.tcp) {
    c10::intrusive_ptr<c10d::Store> store = tcp_store(init, rank, size, timeout);
    if (!init.prefix.empty()) store = c10::make_intrusive<c10d::PrefixStore>(init.prefix, store);
    return store;
  }
  // FileStore's constructor opens the file before any timeout of ours applies; in LibTorch
  // 2.x it retries a file it cannot create for its own default timeout (minutes) instead of
  // failing, so a folder that is not there is refused here, at once.
  const std::string folder = init.path.substr(0, init.path.find_last_of('/') + 1);
  if (!folder.empty() && access(folder.c_str(), W_OK | X_OK) != 0)
    throw std::runtime_error("the store's folder " + folder + " is not there or not writable: " + std::strerror(errno));
  auto store = c10::make_intrusive<c10d::FileStore>(init.path, size);
  store->setTimeout(timeout);
  return store;
}

// Gloo writes to its sockets with writev, which raises SIGPIPE when the peer has gone (a
// rank that died). Left at its default, SIGPIPE kills this process, where the contract is
// Code::Io on the ranks that remain (Python ignores SIGPIPE at startup, which is why
// PyTorch's users never meet this). Ignored, the write fails with EPIPE and Gloo reports
// it. A handler or disposition the program chose itself is left alone.
void ignore_broken_pipes_left_at_default() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, nullptr);
}

}  // namespace

namespace {

void check_backend(const std::string& backend) {
  if (backend != "gloo" && backend != "nccl")
    fail(Code::InvalidArgument, "unknown backend \"" + backend + "\" (\"gloo\" or \"nccl\")");
}

std::unique_ptr<Group::Comm> join_at(const std::string& backend, const Init& parsed, int rank, int size,
                                     std::chrono::milliseconds timeout) {
  auto comm = std::make_unique<Group::Comm>();
  const bool nccl = backend == "nccl";
  const std::string& init = parsed.shown;
#ifndef KOILA_WITH_GLOO
  fail(Code::Unsupported,
       "process groups are not available: koila was built without gloo's headers "
       "(Debian: libgloo-dev)");
#endif
#ifndef KOILA_WITH_NCCL
  if (nccl)
    fail(Code::Unsupported,
         "backend \"nccl\" is not available: this LibTorch was built without NCCL "
         "(c10d's ProcessGroupNCCL); use \"gloo\"");
#endif
  comm->timeout = timeout;
  ignore_broken_pipes_left_at_default();
  try {
    comm->store = make_store(parsed, rank, size, timeout);
#ifdef KOILA_WITH_GLOO
    if (!nccl) {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      options->devices.push_back(gloo_device(parsed));
      comm->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(comm->store, rank, size, options);
    }
#endif
#ifdef KOILA_WITH_NCCL
    else {
      // Without blocking waits, NCCL's Work::wait only orders streams and a dead peer hangs
      // the others; with them, wait(timeout) returns an error instead. (Read when the
      // process group is made; a caller's own setting wins.)
      setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
      setenv("NCCL_BLOCKING_WAIT", "1", 0);
      if (parsed.cuda_device >= 0) c10::cuda::set_device(static_cast<c10::DeviceIndex>(parsed.cuda_device));
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      comm->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(comm->store, rank, size, options);
      comm->device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(at::cuda::current_device()));
    }
#endif
    // Every rank is there: one agreement round (it also makes Gloo connect every pair now,
    // within the timeout, rather than at the first backward).
    Report hello;
    const std::vector<Report> reports = agree(*comm, rank, size, hello);
    (void)reports;
  } catch (const Error& e) {
    fail(Code::Io, "could not join the group as rank " + std::to_string(rank) + " of " + std::to_string(size) + " at " +
                       init + " within " + std::to_string(timeout.count()) + " ms: " + e.what());
  } catch (...) {
    fail(Code::Io, "could not join the group as rank " + std::to_string(rank) + " of " + std::to_string(size) + " at " +
                       init + " within " + std::to_string(timeout.count()) + " ms: " + current_error_text());
  }
  return comm;
}

}  // namespace

std::unique_ptr<Group::Comm> join(const std::string& backend, const std::string& init, int rank, int size,
                                  std::chrono::milliseconds timeout) {
  check_backend(backend);
  // Arguments first: a malformed init is the caller's mistake whatever this build supports.
  Init parsed = parse_init(init);
  parsed.shown = init;
  return join_at(backend, parsed, rank, size, timeout);
}

std::unique_ptr<Group::Comm> join(const std::string& backend, const LauncherEnv& env,
                                  std::chrono::milliseconds timeout) {
  check_backend(backend);
  Init parsed;
  parsed.tcp = true;
  parsed.host = env.host;
  parsed.port = env.port;
  parsed.client_only = env.agent_store;
  parsed.prefix = env.prefix;
  parsed.cuda_device = env.local_rank;
  const bool v6 = env.host.find(':') != std::string::npos;
  parsed.shown = "tcp://" + (v6 ? "[" + env.host + "]" : env.host) + ":" + std::to_string(env.port) +
                 (env.agent_store ? " (the launcher's store, " + env.prefix + ")" : "");
  return join_at(backend, parsed, env.rank, env.size, timeout);
}

}  // namespace koila::dist
