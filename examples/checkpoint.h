/* Checkpoints that survive a kill, for the examples that resume (train_resume.c, train_ddp.c):
   a checkpoint is model-S.pt, optimizer-S.state and each worker's random generators,
   rng-S-R.bin, in a folder (S steps done), each written whole or not at all by koila, then
   "latest" (the number S), replaced by a rename only once all are complete. A kill at any
   moment leaves "latest" naming a complete checkpoint. */
#ifndef KOILA_EXAMPLE_CHECKPOINT_H
#define KOILA_EXAMPLE_CHECKPOINT_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "koila.h"

/* The number in DIR/latest, or -1 when there is no checkpoint yet. */
static long read_latest(const char* dir) {
  char path[4096];
  long steps = -1;
  FILE* f;
  snprintf(path, sizeof path, "%s/latest", dir);
  f = fopen(path, "r");
  if (f == NULL) return -1;
  if (fscanf(f, "%ld", &steps) != 1) steps = -1;
  fclose(f);
  return steps;
}

/* Replaces DIR/latest with `steps`: a temporary flushed to disk, renamed over it, and the
   folder flushed, as koila saves its own files. */
static void write_latest(const char* dir, long steps) {
  char tmp[4096], path[4096];
  FILE* f;
  int fd;
  snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
  snprintf(path, sizeof path, "%s/latest", dir);
  f = fopen(tmp, "w");
  if (f == NULL || fprintf(f, "%ld\n", steps) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0 ||
      rename(tmp, path) != 0) {
    perror("writing the checkpoint's number");
    exit(1);
  }
  fd = open(dir, O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

static void checkpoint_paths(const char* dir, long steps, char* model, char* state, size_t size) {
  snprintf(model, size, "%s/model-%ld.pt", dir, steps);
  snprintf(state, size, "%s/optimizer-%ld.state", dir, steps);
}

/* The random generators of worker `rank` after `steps` steps (koila_rng_save): dropout's masks
   continue from there. */
static void rng_path(const char* dir, long steps, int rank, char* out, size_t size) {
  snprintf(out, size, "%s/rng-%ld-%d.bin", dir, steps, rank);
}

/* Whether KOILA_EXAMPLE_SKIP_RNG_LOAD is 1: a resume then leaves the generators as the process
   started them, as a checkpoint without its generators' files would. Only to show that they
   matter: with dropout such a run ends with other parameters (the tests check that it does). */
static int skip_rng_load(void) {
  const char* value = getenv("KOILA_EXAMPLE_SKIP_RNG_LOAD");
  return value != NULL && strcmp(value, "1") == 0;
}

/* Saves the files of checkpoint `step`, "latest" unchanged: the module and the optimizer where
   given (one worker saves them), and this worker's generators. Returns NULL or koila's status. */
static koila_status* save_checkpoint_files(const char* dir, long step, int rank, koila_module* net,
                                           koila_optimizer* opt) {
  char model[4096], state[4096], rng[4096];
  koila_status* s;
  checkpoint_paths(dir, step, model, state, sizeof model);
  rng_path(dir, step, rank, rng, sizeof rng);
  if (net != NULL && (s = koila_module_save(net, model)) != NULL) return s;
  if (opt != NULL && (s = koila_optimizer_save(opt, state)) != NULL) return s;
  return koila_rng_save(rng);
}

/* Makes checkpoint `step` the one a restart takes (once every worker's files are complete), and
   removes the one before it (the generators of `workers` workers). */
static void commit_checkpoint(const char* dir, long step, int workers) {
  char old_model[4096], old_state[4096], old_rng[4096];
  const long previous = read_latest(dir);
  int r;
  write_latest(dir, step);
  if (previous < 0 || previous == step) return;
  checkpoint_paths(dir, previous, old_model, old_state, sizeof old_model);
  remove(old_model);
  remove(old_state);
  for (r = 0; r < workers; ++r) {
    rng_path(dir, previous, r, old_rng, sizeof old_rng);
    remove(old_rng);
  }
}

/* FNV-1a of the float32 parameters' bytes, in order (0 when one cannot be read). */
static unsigned long long parameters_fnv1a(koila_tensor* const* params, size_t n) {
  unsigned long long hash = 1469598103934665603ULL;
  size_t i;
  for (i = 0; i < n; ++i) {
    int64_t dims[8];
    size_t ndim = 0, count = 1, k;
    unsigned char* bytes;
    koila_status* s = koila_tensor_shape(params[i], dims, 8, &ndim);
    if (s != NULL) {
      koila_status_free(s);
      return 0;
    }
    for (k = 0; k < ndim; ++k) count *= (size_t)dims[k];
    bytes = malloc(count * sizeof(float));
    if (bytes == NULL || (s = koila_tensor_to_host(params[i], bytes, count * sizeof(float))) != NULL) {
      koila_status_free(s);
      free(bytes);
      return 0;
    }
    for (k = 0; k < count * sizeof(float); ++k) hash = (hash ^ bytes[k]) * 1099511628211ULL;
    free(bytes);
  }
  return hash;
}

#endif
