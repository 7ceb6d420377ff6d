// Internal to dist/ (only src/dist/*.cpp include it; not part of koila's interface): joining
// a group. The rendezvous (c10d's TCPStore for tcp://HOST:PORT, FileStore for file:///PATH),
// the Gloo or NCCL process group made on it, and a first agreement round that returns only
// once every rank is there.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dist/comm.h"
#include "dist/launcher_env.h"

namespace koila::dist {

// The joined group's communication, as rank `rank` of `size`. Fails with
// Code::InvalidArgument for an unknown backend or a malformed init,
// Code::Unsupported for a backend this build lacks, and Code::Io when the
// others do not come within `timeout`.
std::unique_ptr<Group::Comm> join(const std::string& backend, const std::string& init, int rank, int size,
                                  std::chrono::milliseconds timeout);
// The same for the group a launcher describes (launcher_env.h): its store at MASTER_ADDR:
// MASTER_PORT (the launcher's, or rank 0's), and for "nccl" the CUDA device LOCAL_RANK.
std::unique_ptr<Group::Comm> join(const std::string& backend, const LauncherEnv& env,
                                  std::chrono::milliseconds timeout);

}  // namespace koila::dist
