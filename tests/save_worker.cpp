// The saving process of the atomic-save tests (test_atomic_save.cpp), through the C API alone,
// as a user's program saves its checkpoints:
//
//   koila_save_worker loop TARGET MODULE...
//     loads every MODULE, prints "ready", then saves them to TARGET in turn until killed;
//   koila_save_worker limited TARGET MODULE BYTES
//     loads MODULE, then under a file size limit of BYTES (RLIMIT_FSIZE, with SIGXFSZ
//     ignored so that the write fails with EFBIG instead of killing the process) saves it to
//     TARGET once, and prints the status's code and message.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "koila.h"

namespace {

koila_module* load(const char* path) {
  koila_module* m = nullptr;
  if (koila_status* s = koila_module_load(&m, path, "cpu")) {
    std::fprintf(stderr, "save_worker: cannot load %s: %s\n", path, koila_status_message(s));
    std::exit(2);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "loop" && argc >= 4) {
    std::vector<koila_module*> modules;
    for (int i = 3; i < argc; ++i) modules.push_back(load(argv[i]));
    std::printf("ready\n");
    std::fflush(stdout);
    for (size_t i = 0;; i = (i + 1) % modules.size())
      if (koila_status* s = koila_module_save(modules[i], argv[2])) {
        std::fprintf(stderr, "save_worker: save failed: %s\n", koila_status_message(s));
        return 3;
      }
  }
  if (mode == "limited" && argc == 5) {
    koila_module* m = load(argv[3]);
    const rlimit limit{static_cast<rlim_t>(std::strtoull(argv[4], nullptr, 10)),
                       static_cast<rlim_t>(std::strtoull(argv[4], nullptr, 10))};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0 || ::signal(SIGXFSZ, SIG_IGN) == SIG_ERR) {
      std::perror("save_worker: setrlimit");
      return 2;
    }
    koila_status* s = koila_module_save(m, argv[2]);
    std::printf("%d %s\n", static_cast<int>(koila_status_code(s)), koila_status_message(s));
    koila_status_free(s);
    koila_module_free(m);
    return 0;
  }
  std::fprintf(stderr, "usage: %s loop TARGET MODULE... | limited TARGET MODULE BYTES\n", argv[0]);
  return 2;
}
