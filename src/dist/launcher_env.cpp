#include "dist/launcher_env.h"

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "base/error.h"

namespace koila::dist {

namespace {

const char* launched_by = " (a launcher sets it for each worker: torchrun --nproc-per-node N --no-python ./program)";

std::string variable(const char* name) {
  const char* value = std::getenv(name);
  if (!value) fail(Code::InvalidArgument, std::string("the environment has no ") + name + launched_by);
  if (!*value) fail(Code::InvalidArgument, std::string("the environment's ") + name + " is empty" + launched_by);
  return value;
}

// A whole number in [low, high], all of the variable's text.
long integer(const char* name, long low, long high) {
  const std::string text = variable(name);
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || value < low || value > high)
    fail(Code::InvalidArgument, std::string("the environment's ") + name + "=\"" + text +
                                    "\" is not a whole number in " + std::to_string(low) + ".." + std::to_string(high));
  return value;
}

}  // namespace

LauncherEnv read_launcher_env() {
  LauncherEnv env;
  env.size = static_cast<int>(integer("WORLD_SIZE", 1, INT_MAX));
  env.rank = static_cast<int>(integer("RANK", 0, env.size - 1));
  env.local_rank = static_cast<int>(integer("LOCAL_RANK", 0, INT_MAX));
  env.host = variable("MASTER_ADDR");
  env.port = static_cast<uint16_t>(integer("MASTER_PORT", 1, 65535));
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent && std::string(agent) == "True";  // (as torch.distributed compares it)
  if (env.agent_store)
    env.prefix = "/worker/attempt_" + std::to_string(integer("TORCHELASTIC_RESTART_COUNT", 0, INT_MAX));
  return env;
}

}  // namespace koila::dist
