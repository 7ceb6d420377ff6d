/* Trains a TorchScript CNN from C on a batch whose unsplit training step needs several
   times the memory koila is allowed to use. The module (conv-relu-pool x2, linear; see
   make_models.cpp, or save one from Python with torch.jit.script(model).save("cnn.pt"))
   is one node of the lazy graph; the loss graph is built once and serves every step:
   backward (split into chunks that fit the budget, gradients exactly the full batch's),
   optimizer step, repeat.

   usage: koila_example_train_cnn [cnn.pt] [batch] [steps] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "koila.h"
#include "synthetic_images.h"

static void check(koila_status *s, const char *what) {
  if (s == NULL) return;
  fprintf(stderr, "%s failed: %s\n", what, koila_status_message(s));
  koila_status_free(s);
  exit(1);
}

static double mib(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* A progress line on stderr while a chunked run goes on ("  backward chunk 3/8"),
   rewritten in place and wiped after the last chunk so the table on stdout stays tidy.
   Unsplit runs (one chunk) show nothing. */
static void show_progress(void *user, const char *what, int64_t done, int64_t total) {
  (void)user;
  if (total <= 1) return;
  fprintf(stderr, "\r  %s chunk %lld/%lld", what, (long long)done, (long long)total);
  if (done == total) fprintf(stderr, "\r%40s\r", "");
  fflush(stderr);
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "cnn.pt";
  const int64_t batch = argc > 2 ? atoll(argv[2]) : 1024;
  const int steps = argc > 3 ? atoi(argv[3]) : 5;
  const int64_t image_shape[4] = {batch, 3, 32, 32};
  const int64_t label_shape[1] = {batch};
  const size_t pixels = (size_t)(3 * 32 * 32);
  float *images = malloc((size_t)batch * pixels * sizeof *images);
  int64_t *labels = malloc((size_t)batch * sizeof *labels);
  koila_module *net = NULL;
  koila_tensor *images_t = NULL, *labels_t = NULL, *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
  koila_tensor **params;
  koila_optimizer *sgd = NULL;
  koila_plan *plan = NULL;
  size_t n_params = 0, i;
  uint64_t current = 0, peak = 0, budget = 0, unsplit = 0;
  int step;

  if (images == NULL || labels == NULL || batch < 1 || steps < 1) {
    fprintf(stderr, "usage: %s [cnn.pt] [batch >= 1] [steps >= 1]\n", argv[0]);
    return 2;
  }
  synthetic_images(images, labels, batch);

  check(koila_module_load(&net, path, "cpu"), "koila_module_load");
  check(koila_tensor_from_data(&images_t, images, (size_t)batch * pixels * sizeof *images, KOILA_FLOAT32,
                               image_shape, 4, "cpu"),
        "images");
  check(koila_tensor_from_data(&labels_t, labels, (size_t)batch * sizeof *labels, KOILA_INT64, label_shape, 1,
                               "cpu"),
        "labels");
  free(images);
  free(labels);

  /* The one line per input, then the model: nothing runs yet. */
  check(koila_lazy(&x, images_t, 0), "koila_lazy");
  check(koila_lazy(&y, labels_t, 0), "koila_lazy");
  check(koila_module_forward(&logits, net, &x, 1), "koila_module_forward");
  check(koila_cross_entropy(&loss, logits, y, KOILA_REDUCTION_MEAN), "koila_cross_entropy");

  check(koila_module_num_parameters(net, &n_params), "num_parameters");
  params = malloc(n_params * sizeof *params);
  for (i = 0; i < n_params; ++i) check(koila_module_parameter(&params[i], net, i), "koila_module_parameter");
  check(koila_optimizer_sgd(&sgd, params, n_params, 0.05, 0.9, 0.0), "koila_optimizer_sgd");

  /* A budget a sixth of what the unsplit step would need beyond what is held now. */
  check(koila_plan_new(&plan, loss, KOILA_MODE_TRAINING), "koila_plan_new");
  check(koila_memory_stats("cpu", &current, NULL), "koila_memory_stats");
  unsplit = koila_plan_full_peak_bytes(plan);
  koila_plan_free(plan);
  budget = current + (unsplit - current) / 6;
  check(koila_set_memory_budget("cpu", budget), "koila_set_memory_budget");
  check(koila_set_progress(show_progress, NULL), "koila_set_progress");
  printf("TorchScript CNN, %zu parameters, batch %lld\n", n_params, (long long)batch);
  printf("unsplit training step: estimated peak %.1f MiB; budget %.1f MiB (%.1fx smaller)\n\n", mib(unsplit),
         mib(budget), (double)unsplit / (double)budget);
  printf("%4s  %8s  %-16s  %14s  %14s\n", "step", "loss", "plan", "est. peak MiB", "meas. peak MiB");

  for (step = 1; step <= steps; ++step) {
    double value = 0.0;
    check(koila_optimizer_zero_grad(sgd), "zero_grad");
    check(koila_tensor_item(loss, &value), "koila_tensor_item"); /* evaluates, in chunks too */
    check(koila_plan_new(&plan, loss, KOILA_MODE_TRAINING), "koila_plan_new");
    check(koila_memory_reset_peak("cpu"), "reset_peak");
    check(koila_backward(loss), "koila_backward");
    check(koila_memory_stats("cpu", NULL, &peak), "koila_memory_stats");
    check(koila_optimizer_step(sgd), "koila_optimizer_step");
    {
      char chunks[32];
      snprintf(chunks, sizeof chunks, "%lld x %lld", (long long)koila_plan_num_chunks(plan),
               (long long)koila_plan_chunk_size(plan));
      printf("%4d  %8.4f  %-16s  %14.1f  %14.1f\n", step, value, chunks, mib(koila_plan_peak_bytes(plan)), mib(peak));
    }
    if (peak > budget) {
      fprintf(stderr, "measured peak above the budget\n");
      return 1;
    }
    koila_plan_free(plan);
  }

  check(koila_set_progress(NULL, NULL), "koila_set_progress");
  check(koila_set_memory_budget("cpu", 0), "koila_set_memory_budget");
  koila_optimizer_free(sgd);
  for (i = 0; i < n_params; ++i) koila_tensor_free(params[i]);
  free(params);
  koila_tensor_free(loss);
  koila_tensor_free(logits);
  koila_tensor_free(y);
  koila_tensor_free(x);
  koila_tensor_free(labels_t);
  koila_tensor_free(images_t);
  koila_module_free(net);
  return 0;
}
