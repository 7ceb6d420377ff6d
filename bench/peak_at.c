/* koila's estimate of a training step (mean cross entropy over 10 classes, class 0 as
   every target) of a TorchScript model at a given batch, against the measured peak of
   that step run through koila with room (a 100 GiB budget), on a device, at batches larger
   than the corpus's: the figures of docs/BENCHMARKS.md#peak_at. Not part of the build
   (CMake lists bench/'s programs by name); from the repository root:
     gcc -std=c99 -O1 -Iinclude bench/peak_at.c -Lbuild -lkoila -Wl,-rpath,$PWD/build -o peak_at
     ./peak_at cpu build/tests/corpus/models/unet_small.pt 3x32x32 64 [MODEL SHAPE BATCH ...]
   To be replaced by larger batches in bench_corpus. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "koila.h"

static int ok(koila_status* s, const char* what) {
  if (!s) return 1;
  fprintf(stderr, "%s: %s\n", what, koila_status_message(s));
  koila_status_free(s);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  const char* dev = argv[1];
  if (!ok(koila_set_memory_budget(dev, (uint64_t)100 << 30), "budget")) return 1;
  printf("| model | batch | plan | estimated peak MiB | measured peak MiB | in use before MiB | error |\n");
  printf("|---|---:|---|---:|---:|---:|---:|\n");
  for (int a = 2; a + 2 < argc + 0 && a + 2 <= argc - 1; a += 3) {
    const char* path = argv[a];
    int64_t shape[8];
    size_t nd = 1;
    shape[0] = atoll(argv[a + 2]);
    char buf[64];
    strncpy(buf, argv[a + 1], sizeof buf - 1);
    buf[sizeof buf - 1] = 0;
    for (char* tok = strtok(buf, "x"); tok && nd < 8; tok = strtok(NULL, "x")) shape[nd++] = atoll(tok);
    koila_module* m = NULL;
    koila_tensor *x = NULL, *lx = NULL, *t = NULL, *lt = NULL, *out = NULL, *loss = NULL;
    koila_plan* plan = NULL;
    if (!ok(koila_module_load(&m, path, dev), "load") || !ok(koila_module_train(m, 1), "train") ||
        !ok(koila_tensor_randn(&x, shape, nd, KOILA_FLOAT32, dev), "randn") ||
        !ok(koila_tensor_zeros(&t, shape, 1, KOILA_INT64, dev), "zeros") || !ok(koila_lazy(&lx, x, 0), "lazy") ||
        !ok(koila_lazy(&lt, t, 0), "lazy") || !ok(koila_module_forward(&out, m, &lx, 1), "forward") ||
        !ok(koila_cross_entropy(&loss, out, lt, KOILA_REDUCTION_MEAN), "loss") ||
        !ok(koila_plan_new(&plan, loss, KOILA_MODE_TRAINING), "plan"))
      continue;
    uint64_t before = 0, peak = 0;
    ok(koila_memory_stats(dev, &before, NULL), "stats");
    ok(koila_memory_reset_peak(dev), "reset");
    const double est = koila_plan_peak_bytes(plan) / 1048576.0;
    const int64_t chunk = koila_plan_chunk_size(plan);
    if (ok(koila_backward(loss), "backward") && ok(koila_memory_stats(dev, NULL, &peak), "stats")) {
      const double meas = peak / 1048576.0;
      printf("| %s | %s | chunks of %lld | %.1f | %.1f | %.1f | %+.1f%% |\n", strrchr(path, '/') + 1, argv[a + 2],
             (long long)chunk, est, meas, before / 1048576.0, 100.0 * (est - meas) / meas);
    }
    fflush(stdout);
    koila_plan_free(plan);
    koila_tensor_free(loss);
    koila_tensor_free(out);
    koila_tensor_free(lt);
    koila_tensor_free(lx);
    koila_tensor_free(t);
    koila_tensor_free(x);
    koila_module_free(m);
  }
  return 0;
}
