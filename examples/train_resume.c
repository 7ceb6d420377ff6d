/* A training run that survives being killed: trains a TorchScript CNN with AdamW, a
   learning-rate schedule and gradient clipping, under a budget that splits every step into
   chunks, and checkpoints the module, the optimizer and the random generators every SAVE_EVERY
   steps. Started again after a kill (or a crash, a preemption), it picks up at the last
   checkpoint, and the run ends with the same parameters, bit for bit, as a run that never
   stopped: with a model that has dropout (cnn_dropout.pt), the generators' file makes the
   restarted run draw the masks the stopped one would have.

   A checkpoint is four files in DIR: model-S.pt, optimizer-S.state and rng-S-0.bin (S steps
   done), each written whole or not at all by koila, then "latest" (the number S), replaced by
   a rename only once all are complete. A kill at any moment leaves "latest" naming a complete
   checkpoint.

   At the end it saves DIR/final.pt and prints a checksum (FNV-1a) of the parameters' bytes.

   usage: koila_example_train_resume CNN.pt DIR [steps] [save_every] [batch]
   (KOILA_EXAMPLE_SKIP_RNG_LOAD=1: resume without loading the generators, as a checkpoint
   without them would: with dropout the run then ends elsewhere; tests/train_resume_kill.sh
   shows that it does) */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cnn_graph.h"
#include "koila.h"
#include "synthetic_images.h"

static void check(koila_status *s, const char *what) {
  if (s == NULL) return;
  fprintf(stderr, "%s failed: %s\n", what, koila_status_message(s));
  koila_status_free(s);
  exit(1);
}

/* The learning rate of step `step` (1-based): halved every 4 steps. */
static double schedule(long step) { return 2e-3 * pow(0.5, (double)((step - 1) / 4)); }

int main(int argc, char **argv) {
  const char *cnn = argc > 1 ? argv[1] : NULL, *dir = argc > 2 ? argv[2] : NULL;
  const long steps = argc > 3 ? atol(argv[3]) : 12, save_every = argc > 4 ? atol(argv[4]) : 3;
  const int64_t batch = argc > 5 ? atoll(argv[5]) : 32, pool = 4 * batch;
  float *images;
  int64_t *labels;
  koila_module *net = NULL;
  koila_tensor **params;
  koila_optimizer *opt = NULL;
  size_t n_params = 0, i;
  long done, step;
  char model_path[4096], state_path[4096], rng_file[4096];
  uint64_t current = 0, budget = 0;
  unsigned long long hash = 0;

  if (cnn == NULL || dir == NULL || steps < 1 || save_every < 1 || batch < 1) {
    fprintf(stderr, "usage: %s CNN.pt DIR [steps >= 1] [save_every >= 1] [batch >= 1]\n", argv[0]);
    return 2;
  }
  /* The data: a pool of 4 batches, step s trains on batch s mod 4 (a data loader whose
     position follows from the step, so that a restart sees what the stopped run would). */
  images = malloc((size_t)(pool * SYNTHETIC_PIXELS) * sizeof *images);
  labels = malloc((size_t)pool * sizeof *labels);
  if (images == NULL || labels == NULL) return 1;
  synthetic_images(images, labels, pool);

  done = read_latest(dir);
  if (done >= 0) checkpoint_paths(dir, done, model_path, state_path, sizeof model_path);
  check(koila_module_load(&net, done >= 0 ? model_path : cnn, "cpu"), "koila_module_load");
  check(koila_module_num_parameters(net, &n_params), "num_parameters");
  params = malloc(n_params * sizeof *params);
  for (i = 0; i < n_params; ++i) check(koila_module_parameter(&params[i], net, i), "koila_module_parameter");
  check(koila_optimizer_adamw(&opt, params, n_params, schedule(1), 0.9, 0.999, 1e-8, 0.05), "koila_optimizer_adamw");

  /* The budget: what the process holds before any optimizer state or gradient, plus a
     sixth of what an unsplit step needs beyond it (the same in every process of the run). */
  {
    struct cnn_graph g;
    koila_plan *plan = NULL;
    build_cnn_graph(&g, net, images, labels, 0, batch, "cpu");
    check(koila_plan_new(&plan, g.loss, KOILA_MODE_TRAINING), "koila_plan_new");
    check(koila_memory_stats("cpu", &current, NULL), "koila_memory_stats");
    budget = current + (koila_plan_full_peak_bytes(plan) - current) / 6;
    koila_plan_free(plan);
    free_cnn_graph(&g);
    check(koila_set_memory_budget("cpu", budget), "koila_set_memory_budget");
  }

  if (done >= 0) {
    check(koila_optimizer_load(opt, state_path), "koila_optimizer_load");
    rng_path(dir, done, 0, rng_file, sizeof rng_file);
    if (!skip_rng_load())
      check(koila_rng_load(rng_file), "koila_rng_load");
    else
      printf("not loading %s (KOILA_EXAMPLE_SKIP_RNG_LOAD)\n", rng_file);
    printf("resumed after step %ld from %s\n", done, state_path);
  } else {
    done = 0;
    check(koila_manual_seed(29), "koila_manual_seed"); /* dropout's masks, from the first step */
    printf("started from %s\n", cnn);
  }
  fflush(stdout);

  for (step = done + 1; step <= steps; ++step) {
    struct cnn_graph g;
    koila_plan *plan = NULL;
    double value = 0, norm = 0;
    build_cnn_graph(&g, net, images, labels, ((step - 1) % 4) * batch, batch, "cpu");
    check(koila_optimizer_set_lr(opt, schedule(step)), "koila_optimizer_set_lr");
    check(koila_optimizer_zero_grad(opt), "koila_optimizer_zero_grad");
    check(koila_plan_new(&plan, g.loss, KOILA_MODE_TRAINING), "koila_plan_new");
    check(koila_backward(g.loss), "koila_backward");
    check(koila_tensor_item(g.loss, &value), "koila_tensor_item");
    check(koila_clip_grad_norm(&norm, params, n_params, 1.0), "koila_clip_grad_norm");
    check(koila_optimizer_step(opt), "koila_optimizer_step");
    printf("step %3ld  loss %.4f  grad norm %.4f  lr %.2e  %lld x %lld\n", step, value, norm, schedule(step),
           (long long)koila_plan_num_chunks(plan), (long long)koila_plan_chunk_size(plan));
    fflush(stdout);
    koila_plan_free(plan);
    free_cnn_graph(&g);

    if (step % save_every == 0 && step < steps) {
      check(save_checkpoint_files(dir, step, 0, net, opt), "saving a checkpoint");
      commit_checkpoint(dir, step, 1);
    }
  }

  snprintf(model_path, sizeof model_path, "%s/final.pt", dir);
  check(koila_module_save(net, model_path), "koila_module_save");
  hash = parameters_fnv1a(params, n_params);
  printf("finished %ld steps; parameters fnv1a %016llx\n", steps, hash);

  koila_optimizer_free(opt);
  for (i = 0; i < n_params; ++i) koila_tensor_free(params[i]);
  free(params);
  koila_module_free(net);
  free(images);
  free(labels);
  return 0;
}
