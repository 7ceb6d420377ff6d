/* Data-parallel training started by a launcher: torchrun (PyTorch's torch.distributed.run)
   starts the workers on one machine or several, and each joins the group from the
   environment torchrun gives it (koila_group_new_from_env). Every worker holds the TorchScript
   CNN and trains on its own shard of each batch (shards of uneven size where the batch does not
   divide), in chunks under its own memory budget; koila_group_backward leaves every worker with
   the gradients of the whole batch, so all take the same optimizer step. Rank 0 checkpoints the
   module and the optimizer every SAVE_EVERY steps, and every worker its random generators
   (checkpoint.h: a model with dropout draws each worker's masks from its own); when a worker
   dies, torchrun --max-restarts restarts them all and they resume from the last checkpoint,
   ending with the parameters of a run that never stopped.

   On one machine, 4 workers:
     torchrun --nproc-per-node 4 --no-python ./koila_example_train_ddp cnn.pt /tmp/ddp
   On two machines (2 workers each), the first at 10.0.0.1:
     machine 0: torchrun --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 10.0.0.1 \
                  --master-port 29500 --no-python ./koila_example_train_ddp cnn.pt /shared/ddp
     machine 1: the same with --node-rank 1
   DIR must be the same folder for every worker (a shared one across machines).

   On GPUs, with NCCL (each worker on cuda:LOCAL_RANK; a koila built with NCCL):
     KOILA_EXAMPLE_BACKEND=nccl torchrun --nproc-per-node 4 --no-python ./koila_example_train_ddp ...

   usage: koila_example_train_ddp CNN.pt DIR [steps] [save_every] [batch] [sgd|adam]
   (KOILA_EXAMPLE_TIMEOUT_MS: the group's timeout, default 60000; KOILA_EXAMPLE_BACKEND: gloo,
   the default, on the CPU, or nccl on the worker's GPU; KOILA_EXAMPLE_SKIP_RNG_LOAD=1: resume
   without loading the generators, which with dropout ends elsewhere, as tests/launcher/restart.sh
   shows) */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cnn_graph.h"
#include "koila.h"
#include "synthetic_images.h"

static int rank = -1;

static void check(koila_status *s, const char *what) {
  if (s == NULL) return;
  fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, koila_status_message(s));
  koila_status_free(s);
  exit(1);
}

/* The bytes of the (float32) parameters. */
static uint64_t parameter_bytes(koila_tensor *const *params, size_t n) {
  uint64_t total = 0;
  size_t i, k;
  for (i = 0; i < n; ++i) {
    int64_t dims[8];
    size_t ndim = 0;
    uint64_t count = 1;
    check(koila_tensor_shape(params[i], dims, 8, &ndim), "koila_tensor_shape");
    for (k = 0; k < ndim; ++k) count *= (uint64_t)dims[k];
    total += count * sizeof(float);
  }
  return total;
}

int main(int argc, char **argv) {
  const char *cnn = argc > 1 ? argv[1] : NULL, *dir = argc > 2 ? argv[2] : NULL;
  const long steps = argc > 3 ? atol(argv[3]) : 12, save_every = argc > 4 ? atol(argv[4]) : 3;
  const int64_t batch = argc > 5 ? atoll(argv[5]) : 30, pool = 4 * batch;
  const char *optimizer = argc > 6 ? argv[6] : "sgd";
  const char *backend = getenv("KOILA_EXAMPLE_BACKEND") ? getenv("KOILA_EXAMPLE_BACKEND") : "gloo";
  char device[32] = "cpu";
  int world, local;
  int64_t start, length;
  float *images;
  int64_t *labels;
  koila_group *group = NULL;
  koila_module *net = NULL;
  koila_tensor **params;
  koila_optimizer *opt = NULL;
  size_t n_params = 0, i;
  long done, step, saved = 0;
  char model_path[4096], state_path[4096], rng_file[4096];
  uint64_t current = 0, budget = 0;

  if (cnn == NULL || dir == NULL || steps < 1 || save_every < 1 || batch < 1 ||
      (strcmp(optimizer, "sgd") != 0 && strcmp(optimizer, "adam") != 0) ||
      (strcmp(backend, "gloo") != 0 && strcmp(backend, "nccl") != 0)) {
    fprintf(stderr,
            "usage: %s CNN.pt DIR [steps >= 1] [save_every >= 1] [batch >= 1] [sgd|adam]\n"
            "  (KOILA_EXAMPLE_BACKEND: gloo or nccl)\n",
            argv[0]);
    return 2;
  }
  /* RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, from torchrun; a minute for the
     others to come and for every collective (KOILA_EXAMPLE_TIMEOUT_MS sets another). */
  {
    const char *timeout = getenv("KOILA_EXAMPLE_TIMEOUT_MS");
    check(koila_group_new_from_env(&group, backend, timeout ? atoll(timeout) : 60000), "koila_group_new_from_env");
  }
  rank = koila_group_rank(group);
  world = koila_group_size(group);
  local = koila_group_local_rank(group);
  if (strcmp(backend, "nccl") == 0) snprintf(device, sizeof device, "cuda:%d", local); /* NCCL: this worker's GPU */
  if (batch < world) {
    fprintf(stderr, "rank %d: a batch of %lld is less than a sample per worker (%d)\n", rank, (long long)batch, world);
    return 2;
  }
  /* A pool of 4 batches, made the same by every worker: step s trains on batch s mod 4, of
     which this worker takes its contiguous shard. */
  images = malloc((size_t)(pool * SYNTHETIC_PIXELS) * sizeof *images);
  labels = malloc((size_t)pool * sizeof *labels);
  if (images == NULL || labels == NULL) return 1;
  synthetic_images(images, labels, pool);
  start = batch * rank / world;
  length = batch * (rank + 1) / world - start;

  done = read_latest(dir);
  if (done >= 0) checkpoint_paths(dir, done, model_path, state_path, sizeof model_path);
  check(koila_module_load(&net, done >= 0 ? model_path : cnn, device), "koila_module_load");
  check(koila_module_num_parameters(net, &n_params), "num_parameters");
  params = malloc(n_params * sizeof *params);
  for (i = 0; i < n_params; ++i) check(koila_module_parameter(&params[i], net, i), "koila_module_parameter");
  /* Every worker starts from rank 0's weights (the same file here; a model initialized at
     random would need it). */
  check(koila_group_broadcast(group, params, n_params, 0), "koila_group_broadcast");
  if (strcmp(optimizer, "adam") == 0)
    check(koila_optimizer_adam(&opt, params, n_params, 1e-3, 0.9, 0.999, 1e-8, 0.0), "koila_optimizer_adam");
  else
    check(koila_optimizer_sgd(&opt, params, n_params, 0.05, 0.9, 0.0), "koila_optimizer_sgd");

  /* Each worker's budget: what it holds, room for the gradients and the optimizer's state
     (three times the parameters, for Adam), and half of what its shard's unsplit step needs
     beyond that (the same whether the run starts or resumes). */
  {
    struct cnn_graph g;
    koila_plan *plan = NULL;
    build_cnn_graph(&g, net, images, labels, start, length, device);
    check(koila_plan_new(&plan, g.loss, KOILA_MODE_TRAINING), "koila_plan_new");
    check(koila_memory_stats(device, &current, NULL), "koila_memory_stats");
    budget = current + 3 * parameter_bytes(params, n_params) + (koila_plan_full_peak_bytes(plan) - current) / 2;
    koila_plan_free(plan);
    free_cnn_graph(&g);
    check(koila_set_memory_budget(device, budget), "koila_set_memory_budget");
  }
  if (done >= 0) {
    check(koila_optimizer_load(opt, state_path), "koila_optimizer_load");
    rng_path(dir, done, rank, rng_file, sizeof rng_file);
    if (!skip_rng_load())
      check(koila_rng_load(rng_file), "koila_rng_load");
    else
      printf("rank %d: not loading %s (KOILA_EXAMPLE_SKIP_RNG_LOAD)\n", rank, rng_file);
  } else {
    done = 0;
    check(koila_manual_seed(29 + (uint64_t)rank), "koila_manual_seed"); /* each shard its own masks */
  }
  printf("rank %d of %d (local rank %d, %s on %s): samples %lld..%lld of each batch of %lld; %s after step %ld\n",
         rank, world, local, backend, device, (long long)start, (long long)(start + length - 1), (long long)batch,
         done > 0 ? "resumed" : "started", done);
  fflush(stdout);

  for (step = done + 1; step <= steps; ++step) {
    struct cnn_graph g;
    double value = 0;
    build_cnn_graph(&g, net, images, labels, ((step - 1) % 4) * batch + start, length, device);
    check(koila_optimizer_zero_grad(opt), "koila_optimizer_zero_grad");
    check(koila_group_backward(group, g.loss, params, n_params), "koila_group_backward");
    /* The checkpoint saved after the step before is complete on every worker: none could join
       this step's reduction before saving its files. Rank 0 makes it the latest. */
    if (saved > 0 && rank == 0) commit_checkpoint(dir, saved, world);
    saved = 0;
    check(koila_tensor_item(g.loss, &value), "koila_tensor_item"); /* this shard's loss */
    check(koila_optimizer_step(opt), "koila_optimizer_step");
    if (rank == 0) {
      printf("step %3ld  loss of rank 0's shard %.4f\n", step, value);
      fflush(stdout);
    }
    if (step % save_every == 0 && step < steps) {
      check(save_checkpoint_files(dir, step, rank, rank == 0 ? net : NULL, rank == 0 ? opt : NULL),
            "saving a checkpoint");
      saved = step;
    }
    free_cnn_graph(&g);
  }

  if (rank == 0) {
    snprintf(model_path, sizeof model_path, "%s/final.pt", dir);
    check(koila_module_save(net, model_path), "koila_module_save");
  }
  printf("rank %d finished %ld steps; parameters fnv1a %016llx\n", rank, steps, parameters_fnv1a(params, n_params));

  koila_optimizer_free(opt);
  for (i = 0; i < n_params; ++i) koila_tensor_free(params[i]);
  free(params);
  koila_module_free(net);
  koila_group_free(group);
  free(images);
  free(labels);
  return 0;
}
