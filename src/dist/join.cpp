#include "dist/join.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#ifdef KOILA_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
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
#include <stdexcept>
#include <vector>

#include "base/error.h"
#include "dist/agreement.h"

namespace koila::dist {

namespace {

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

[[maybe_unused]] bool is_loopback(const std::string& host) {  // (used by gloo_device only)
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
    throw std::runtime_error("the store's folder " + folder + " is not there or not writable: " + std::strerror(errno));
  auto store = c10::make_intrusive<c10d::FileStore>(init.path, size);
  store->setTimeout(timeout);
  return store;
}

// Gloo writes to its sockets with writev, which raises SIGPIPE when the peer has gone (a
// rank that died). Left at its default, SIGPIPE kills this process, where the contract is
// KOILA_ERROR_IO on the ranks that remain (Python ignores SIGPIPE at startup, which is why
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

std::unique_ptr<Group::Comm> join(const std::string& backend, const std::string& init, int rank, int size,
                                  std::chrono::milliseconds timeout) {
  auto comm = std::make_unique<Group::Comm>();
  const bool nccl = backend == "nccl";
  if (backend != "gloo" && !nccl)
    fail(KOILA_ERROR_INVALID_ARGUMENT, "unknown backend \"" + backend + "\" (\"gloo\" or \"nccl\")");
  // Arguments first: a malformed init is the caller's mistake whatever this build supports.
  const Init parsed = parse_init(init);
#ifndef KOILA_WITH_GLOO
  fail(KOILA_ERROR_UNSUPPORTED,
       "process groups are not available: koila was built without gloo's headers "
       "(Debian: libgloo-dev)");
#endif
#ifndef KOILA_WITH_NCCL
  if (nccl)
    fail(KOILA_ERROR_UNSUPPORTED,
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
    fail(KOILA_ERROR_IO, "could not join the group as rank " + std::to_string(rank) + " of " + std::to_string(size) +
                             " at " + init + " within " + std::to_string(timeout.count()) + " ms: " + e.what());
  } catch (...) {
    fail(KOILA_ERROR_IO, "could not join the group as rank " + std::to_string(rank) + " of " + std::to_string(size) +
                             " at " + init + " within " + std::to_string(timeout.count()) +
                             " ms: " + current_error_text());
  }
  return comm;
}

}  // namespace koila::dist
