// Internal to dist/ (only src/dist/*.cpp include it): the group a launcher describes in the
// environment, as torchrun (torch.distributed.run) sets it for each worker, read and checked
// (koila_group_new_from_env).
#pragma once

#include <cstdint>
#include <string>

namespace koila::dist {

struct LauncherEnv {
  int rank = 0, size = 1, local_rank = 0;
  std::string host;   // MASTER_ADDR
  uint16_t port = 0;  // MASTER_PORT
  // TORCHELASTIC_USE_AGENT_STORE is "True": the store at host:port is the launcher's, every
  // worker joins it as a client, under the prefix of its restart attempt
  // ("/worker/attempt_<TORCHELASTIC_RESTART_COUNT>", as torch.distributed's env:// does).
  bool agent_store = false;
  std::string prefix;
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (and, for the launcher's store,
// TORCHELASTIC_RESTART_COUNT). A variable that is missing or malformed fails with
// Code::InvalidArgument naming it and what it held.
LauncherEnv read_launcher_env();

}  // namespace koila::dist
