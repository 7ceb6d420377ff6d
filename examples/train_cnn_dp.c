/* Data-parallel training of the TorchScript CNN (as train_cnn.c) across processes: every
   process holds the model and trains on its own shard of the batch, each in chunks under
   its own memory budget; koila_group_backward leaves every rank with the gradients of the
   whole batch, so the processes take identical optimizer steps. Over Gloo (CPU), the
   processes meeting at `init` (train_cnn_dp.sh starts them on one machine).

   usage: koila_example_train_cnn_dp cnn.pt RANK WORLD_SIZE INIT [batch] [steps]
          INIT: tcp://HOST:PORT (rank 0 listens) or file:///PATH */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "koila.h"
#include "synthetic_images.h"

static int rank = -1;

static void check(koila_status *s, const char *what) {
  if (s == NULL) return;
  fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, koila_status_message(s));
  koila_status_free(s);
  exit(1);
}

static double mib(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

int main(int argc, char **argv) {
  const char *path, *init;
  int world, step, steps;
  int64_t batch, start, length;
  float *images;
  int64_t *labels;
  koila_group *group = NULL;
  koila_module *net = NULL;
  koila_tensor *images_t = NULL, *labels_t = NULL, *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
  koila_tensor **params;
  koila_optimizer *sgd = NULL;
  koila_plan *plan = NULL;
  size_t n_params = 0, i;
  uint64_t current = 0, unsplit = 0, budget = 0;

  if (argc < 5) {
    fprintf(stderr, "usage: %s cnn.pt RANK WORLD_SIZE INIT [batch] [steps]\n", argv[0]);
    return 2;
  }
  path = argv[1];
  rank = atoi(argv[2]);
  world = atoi(argv[3]);
  init = argv[4];
  batch = argc > 5 ? atoll(argv[5]) : 1024;
  steps = argc > 6 ? atoi(argv[6]) : 5;
  if (batch < world || steps < 1) {
    fprintf(stderr, "batch must be at least the number of processes, steps at least 1\n");
    return 2;
  }

  /* Every process makes the same global batch and keeps its contiguous shard. */
  start = batch * rank / world;
  length = batch * (rank + 1) / world - start;
  images = malloc((size_t)batch * SYNTHETIC_PIXELS * sizeof *images);
  labels = malloc((size_t)batch * sizeof *labels);
  if (images == NULL || labels == NULL) return 2;
  synthetic_images(images, labels, batch);

  check(koila_group_new(&group, "gloo", init, rank, world, 60000), "koila_group_new");
  check(koila_module_load(&net, path, "cpu"), "koila_module_load");
  {
    const int64_t image_shape[4] = {length, 3, 32, 32};
    check(koila_tensor_from_data(&images_t, images + start * SYNTHETIC_PIXELS,
                                 (size_t)length * SYNTHETIC_PIXELS * sizeof *images, KOILA_FLOAT32, image_shape, 4,
                                 "cpu"),
          "images");
    check(koila_tensor_from_data(&labels_t, labels + start, (size_t)length * sizeof *labels, KOILA_INT64, &length, 1,
                                 "cpu"),
          "labels");
  }
  free(images);
  free(labels);

  check(koila_lazy(&x, images_t, 0), "koila_lazy");
  check(koila_lazy(&y, labels_t, 0), "koila_lazy");
  check(koila_module_forward(&logits, net, &x, 1), "koila_module_forward");
  check(koila_cross_entropy(&loss, logits, y, KOILA_REDUCTION_MEAN), "koila_cross_entropy");

  check(koila_module_num_parameters(net, &n_params), "num_parameters");
  params = malloc(n_params * sizeof *params);
  for (i = 0; i < n_params; ++i) check(koila_module_parameter(&params[i], net, i), "koila_module_parameter");
  /* Every rank starts from rank 0's weights. */
  check(koila_group_broadcast(group, params, n_params, 0), "koila_group_broadcast");
  check(koila_optimizer_sgd(&sgd, params, n_params, 0.05, 0.9, 0.0), "koila_optimizer_sgd");

  /* Each rank's budget: a sixth of what its shard's unsplit step needs beyond what is held. */
  check(koila_plan_new(&plan, loss, KOILA_MODE_TRAINING), "koila_plan_new");
  check(koila_memory_stats("cpu", &current, NULL), "koila_memory_stats");
  unsplit = koila_plan_full_peak_bytes(plan);
  koila_plan_free(plan);
  budget = current + (unsplit - current) / 6;
  check(koila_set_memory_budget("cpu", budget), "koila_set_memory_budget");
  printf("rank %d of %d: samples %lld..%lld of %lld; unsplit step %.1f MiB, budget %.1f MiB\n", rank, world,
         (long long)start, (long long)(start + length - 1), (long long)batch, mib(unsplit), mib(budget));
  fflush(stdout);

  for (step = 1; step <= steps; ++step) {
    double value = 0.0, weight = 0.0;
    koila_tensor *first = NULL;
    check(koila_optimizer_zero_grad(sgd), "zero_grad");
    check(koila_tensor_item(loss, &value), "koila_tensor_item"); /* this shard's loss */
    check(koila_plan_new(&plan, loss, KOILA_MODE_TRAINING), "koila_plan_new");
    check(koila_group_backward(group, loss, params, n_params), "koila_group_backward");
    check(koila_optimizer_step(sgd), "koila_optimizer_step");
    /* Identical steps keep the ranks' weights equal: print one of them to compare. */
    check(koila_narrow(&first, params[0], 0, 0, 1), "koila_narrow");
    {
      koila_tensor *total = NULL;
      check(koila_sum(&total, first, NULL, 0, 0), "koila_sum");
      check(koila_tensor_item(total, &weight), "koila_tensor_item");
      koila_tensor_free(total);
    }
    koila_tensor_free(first);
    printf("rank %d step %d: shard loss %.4f, %lld x %lld chunks, sum of the first filter %+.6f\n", rank, step, value,
           (long long)koila_plan_num_chunks(plan), (long long)koila_plan_chunk_size(plan), weight);
    fflush(stdout);
    koila_plan_free(plan);
  }

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
  koila_group_free(group);
  return 0;
}
