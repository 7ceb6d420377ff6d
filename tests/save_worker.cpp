// The saving process of the atomic-save tests (test_atomic_save.cpp), through the C API alone,
// as a user's program saves its checkpoints:
//
//   koila_save_worker loop TARGET MODULE...
//     loads every MODULE, prints "ready", then saves them to TARGET in turn until killed;
//   koila_save_worker optimizers TARGET MODULE
//     loads MODULE (a CNN taking [N, 3, 32, 32]), makes two AdamW optimizers over its
//     parameters, stepped once and three times, saves them to TARGET.a and TARGET.b and the
//     first to TARGET, prints "ready", then saves them to TARGET in turn until killed;
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

void ok(koila_status* s, const char* what) {
  if (s == nullptr) return;
  std::fprintf(stderr, "save_worker: %s failed: %s\n", what, koila_status_message(s));
  std::exit(3);
}

// One training step of `o` over the module on a random batch of 4.
void step(koila_module* m, koila_optimizer* o) {
  const int64_t shape[4] = {4, 3, 32, 32}, label_shape[1] = {4};
  const int64_t labels[4] = {0, 1, 2, 3};
  koila_tensor *x = nullptr, *y = nullptr, *logits = nullptr, *loss = nullptr;
  ok(koila_tensor_randn(&x, shape, 4, KOILA_FLOAT32, "cpu"), "randn");
  ok(koila_tensor_from_data(&y, labels, sizeof labels, KOILA_INT64, label_shape, 1, "cpu"), "labels");
  ok(koila_module_forward(&logits, m, &x, 1), "forward");
  ok(koila_cross_entropy(&loss, logits, y, KOILA_REDUCTION_MEAN), "cross_entropy");
  ok(koila_optimizer_zero_grad(o), "zero_grad");
  ok(koila_backward(loss), "backward");
  ok(koila_optimizer_step(o), "step");
  for (koila_tensor* t : {x, y, logits, loss}) koila_tensor_free(t);
}

int optimizers(const std::string& target, const char* module) {
  koila_module* m = load(module);
  size_t n = 0;
  ok(koila_module_num_parameters(m, &n), "num_parameters");
  std::vector<koila_tensor*> params(n);
  for (size_t i = 0; i < n; ++i) ok(koila_module_parameter(&params[i], m, i), "parameter");
  koila_optimizer *a = nullptr, *b = nullptr;
  ok(koila_optimizer_adamw(&a, params.data(), n, 1e-3, 0.9, 0.999, 1e-8, 0.01), "adamw");
  ok(koila_optimizer_adamw(&b, params.data(), n, 2e-3, 0.8, 0.99, 1e-7, 0.1), "adamw");
  step(m, a);
  for (int k = 0; k < 3; ++k) step(m, b);
  ok(koila_optimizer_save(a, (target + ".a").c_str()), "save");
  ok(koila_optimizer_save(b, (target + ".b").c_str()), "save");
  ok(koila_optimizer_save(a, target.c_str()), "save");
  std::printf("ready\n");
  std::fflush(stdout);
  for (size_t i = 0;; ++i) ok(koila_optimizer_save(i % 2 ? a : b, target.c_str()), "save");
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
  if (mode == "optimizers" && argc == 4) return optimizers(argv[2], argv[3]);
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
  std::fprintf(stderr, "usage: %s loop TARGET MODULE... | optimizers TARGET MODULE | limited TARGET MODULE BYTES\n",
               argv[0]);
  return 2;
}
