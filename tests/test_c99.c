/* A pure C99 program against koila.h alone: builds a small lazy graph, checks values
   computed by hand, metadata, and error statuses; trains a TorchScript MLP loaded from
   MODELS_DIR/mlp.pt (written by koila_make_models). Compiled with -std=c99 -pedantic -Werror.

   usage: koila_c99_test MODELS_DIR */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "koila.h"

static int failures = 0;

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                    \
    }                                                                \
  } while (0)

static int ok(koila_status *s) {
  if (s == NULL) return 1;
  fprintf(stderr, "unexpected error %d: %s\n", (int)koila_status_code(s), koila_status_message(s));
  koila_status_free(s);
  ++failures;
  return 0;
}

/* Progress reports: how many, and the last one. */
struct progress_log {
  int calls;
  char what[16];
  int64_t done, total;
};

static void log_progress(void *user, const char *what, int64_t done, int64_t total) {
  struct progress_log *log = (struct progress_log *)user;
  ++log->calls;
  strncpy(log->what, what, sizeof log->what - 1);
  log->what[sizeof log->what - 1] = '\0';
  log->done = done;
  log->total = total;
}

/* Loads mlp.pt, trains it a few steps with a graph built once, saves and reloads it. */
static void module_checks(const char *dir) {
  char path[1024], name[64], saved[1100];
  koila_module *m = NULL, *again = NULL;
  koila_tensor *params[4] = {NULL, NULL, NULL, NULL};
  koila_tensor *data = NULL, *labels = NULL, *x = NULL, *y = NULL, *logits = NULL, *loss = NULL, *g = NULL;
  koila_optimizer *opt = NULL;
  koila_status *s;
  const int64_t xshape[2] = {48, 784}, yshape[1] = {48};
  int64_t ys[48], dims[2], bd = -2;
  size_t n = 0, ndim = 0, needed = 0, i;
  double first = 0, last = 0;
  int step, training = -1;

  snprintf(path, sizeof path, "%s/no-such-model.pt", dir);
  s = koila_module_load(&m, path, "cpu");
  CHECK(koila_status_code(s) == KOILA_ERROR_IO);
  CHECK(strstr(koila_status_message(s), path) != NULL);
  CHECK(m == NULL);
  koila_status_free(s);

  snprintf(path, sizeof path, "%s/mlp.pt", dir);
  if (!ok(koila_module_load(&m, path, "cpu"))) return;
  ok(koila_module_num_parameters(m, &n));
  CHECK(n == 4);
  ok(koila_module_parameter_name(m, 0, name, sizeof name, &needed));
  CHECK(strcmp(name, "fc1.weight") == 0 && needed == strlen("fc1.weight") + 1);
  for (i = 0; i < 4 && i < n; ++i) ok(koila_module_parameter(&params[i], m, i));
  ok(koila_module_is_training(m, &training));
  CHECK(training == 1);

  for (i = 0; i < 48; ++i) ys[i] = (int64_t)(i % 10);
  ok(koila_tensor_randn(&data, xshape, 2, KOILA_FLOAT32, "cpu"));
  ok(koila_tensor_from_data(&labels, ys, sizeof ys, KOILA_INT64, yshape, 1, "cpu"));
  ok(koila_lazy(&x, data, 0));
  ok(koila_lazy(&y, labels, 0));
  ok(koila_module_forward(&logits, m, &x, 1));
  ok(koila_tensor_shape(logits, dims, 2, &ndim));
  CHECK(ndim == 2 && dims[0] == 48 && dims[1] == 10);
  ok(koila_tensor_batch_dim(logits, &bd));
  CHECK(bd == 0);
  ok(koila_cross_entropy(&loss, logits, y, KOILA_REDUCTION_MEAN));
  ok(koila_optimizer_adam(&opt, params, 4, 1e-3, 0.9, 0.999, 1e-8, 0.0));
  for (step = 0; step < 5; ++step) {
    double value = 0;
    ok(koila_optimizer_zero_grad(opt));
    ok(koila_tensor_item(loss, &value));
    ok(koila_backward(loss));
    ok(koila_optimizer_step(opt));
    if (step == 0) first = value;
    last = value;
  }
  CHECK(last < first);
  ok(koila_tensor_grad(&g, params[0]));
  CHECK(g != NULL);

  /* Clipping, the learning rate, and the optimizer's state in a file: an Adam state does not
     load into AdamW, and does into another Adam, learning rate included. */
  {
    koila_optimizer *adamw = NULL, *adam = NULL;
    koila_status *s;
    double norm = -1, lr = 0;
    ok(koila_clip_grad_norm(&norm, params, 4, 1e9));
    CHECK(norm > 0 && norm < 1e9);
    ok(koila_optimizer_set_lr(opt, 5e-4));
    snprintf(saved, sizeof saved, "%s/c99-adam.state", dir);
    ok(koila_optimizer_save(opt, saved));
    ok(koila_optimizer_adamw(&adamw, params, 4, 1e-3, 0.9, 0.999, 1e-8, 0.01));
    s = koila_optimizer_load(adamw, saved);
    CHECK(koila_status_code(s) == KOILA_ERROR_INVALID_ARGUMENT);
    koila_status_free(s);
    ok(koila_optimizer_adam(&adam, params, 4, 1e-2, 0.9, 0.999, 1e-8, 0.0));
    ok(koila_optimizer_load(adam, saved));
    ok(koila_optimizer_lr(adam, &lr));
    CHECK(lr == 5e-4);
    remove(saved);
    s = koila_optimizer_load(adam, saved);
    CHECK(koila_status_code(s) == KOILA_ERROR_IO);
    koila_status_free(s);
    koila_optimizer_free(adamw);
    koila_optimizer_free(adam);
  }

  /* Saved with the trained parameters. */
  snprintf(saved, sizeof saved, "%s/c99-trained.pt", dir);
  ok(koila_module_save(m, saved));
  if (ok(koila_module_load(&again, saved, "cpu"))) {
    koila_tensor *logits2 = NULL, *diff = NULL, *err = NULL;
    double e = 1;
    ok(koila_module_forward(&logits2, again, &x, 1));
    ok(koila_sub(&diff, logits2, logits));
    ok(koila_abs(&err, diff));
    koila_tensor_free(diff);
    ok(koila_amax(&diff, err, NULL, 0, 0));
    ok(koila_tensor_item(diff, &e));
    CHECK(e == 0.0);
    koila_tensor_free(diff);
    koila_tensor_free(err);
    koila_tensor_free(logits2);
  }
  remove(saved);
  ok(koila_module_train(m, 0));
  ok(koila_module_is_training(m, &training));
  CHECK(training == 0);

  /* Any order. */
  koila_module_free(m);
  koila_module_free(again);
  koila_module_free(NULL);
  koila_optimizer_free(opt);
  koila_optimizer_free(NULL);
  for (i = 0; i < 4; ++i) koila_tensor_free(params[i]);
  koila_tensor_free(g);
  koila_tensor_free(loss);
  koila_tensor_free(logits);
  koila_tensor_free(x);
  koila_tensor_free(y);
  koila_tensor_free(data);
  koila_tensor_free(labels);
}

/* DLPack from C: a plain DLManagedTensor over a C array, declared here as dlpack.h does. */
typedef struct {
  void *data;
  struct {
    int32_t device_type, device_id;
  } device;
  int32_t ndim;
  struct {
    uint8_t code, bits;
    uint16_t lanes;
  } dtype;
  int64_t *shape, *strides;
  uint64_t byte_offset;
} c_dltensor;
typedef struct c_dlmanaged {
  c_dltensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct c_dlmanaged *self);
} c_dlmanaged;

static void count_deletion(c_dlmanaged *self) { ++*(int *)self->manager_ctx; }

static void dlpack_checks(void) {
  float values[6] = {0, 1, 2, 3, 4, 5};
  int64_t shape[2] = {2, 3};
  int deleted = 0;
  c_dlmanaged m;
  koila_tensor *t = NULL, *back = NULL;
  void *out = NULL;
  float read[6];
  memset(&m, 0, sizeof m);
  m.dl_tensor.data = values;
  m.dl_tensor.device.device_type = 1; /* kDLCPU */
  m.dl_tensor.ndim = 2;
  m.dl_tensor.dtype.code = 2; /* kDLFloat */
  m.dl_tensor.dtype.bits = 32;
  m.dl_tensor.dtype.lanes = 1;
  m.dl_tensor.shape = shape;
  m.manager_ctx = &deleted;
  m.deleter = count_deletion;
  if (ok(koila_tensor_from_dlpack(&t, &m, 0))) {
    values[4] = 40; /* shared, not copied */
    ok(koila_tensor_to_host(t, read, sizeof read));
    CHECK(read[4] == 40 && read[5] == 5);
    ok(koila_tensor_to_dlpack(&out, t, 1));
    ok(koila_tensor_from_dlpack(&back, out, 1));
    koila_tensor_free(t);
    CHECK(deleted == 0); /* back still shares the array */
    koila_tensor_free(back);
  }
  CHECK(deleted == 1);
  /* Refused (lanes = 2): the deleter still runs, once. */
  m.dl_tensor.dtype.lanes = 2;
  {
    koila_status *s = koila_tensor_from_dlpack(&t, &m, 0);
    CHECK(koila_status_code(s) == KOILA_ERROR_UNSUPPORTED);
    koila_status_free(s);
  }
  CHECK(deleted == 2);
}

int main(int argc, char **argv) {
  const float xs[6] = {1, -2, 3, -4, 5, -6};
  const float ws[3] = {0.5f, 1, 2};
  const int64_t xshape[2] = {2, 3}, wshape[2] = {1, 3};
  koila_tensor *x = NULL, *w = NULL, *lx = NULL, *h = NULL, *r = NULL, *loss = NULL, *grad = NULL;
  koila_status *s;
  float out[2];
  int64_t dims[4];
  size_t ndim = 0, needed = 0;
  int64_t batch = 0;
  int lazy = 0;
  double value = 0;
  koila_dtype dtype;
  char text[256];

  CHECK(strcmp(koila_version(), "0.1.0") == 0);
  ok(koila_tensor_from_data(&x, xs, sizeof xs, KOILA_FLOAT32, xshape, 2, "cpu"));
  ok(koila_tensor_from_data(&w, ws, sizeof ws, KOILA_FLOAT32, wshape, 2, "cpu"));
  ok(koila_tensor_set_requires_grad(w, 1));
  ok(koila_lazy(&lx, x, 0));
  ok(koila_linear(&h, lx, w, NULL)); /* [2, 1]: 1*.5-2*1+3*2 = 4.5, -4*.5+5-12 = -9 */
  ok(koila_relu(&r, h));

  ok(koila_tensor_shape(r, dims, 4, &ndim));
  CHECK(ndim == 2 && dims[0] == 2 && dims[1] == 1);
  ok(koila_tensor_batch_dim(r, &batch));
  CHECK(batch == 0);
  ok(koila_tensor_is_lazy(r, &lazy));
  CHECK(lazy == 1);
  ok(koila_tensor_dtype(r, &dtype));
  CHECK(dtype == KOILA_FLOAT32);

  ok(koila_tensor_to_host(r, out, sizeof out));
  CHECK(fabsf(out[0] - 4.5f) < 1e-6f && out[1] == 0.0f);

  ok(koila_sum(&loss, r, NULL, 0, 0));
  {
    struct progress_log log;
    memset(&log, 0, sizeof log);
    ok(koila_set_progress(log_progress, &log));
    ok(koila_tensor_item(loss, &value)); /* unsplit: one chunk */
    CHECK(log.calls == 1 && strcmp(log.what, "forward") == 0 && log.done == 1 && log.total == 1);
    ok(koila_backward(loss));
    CHECK(log.calls == 2 && strcmp(log.what, "backward") == 0 && log.done == 1 && log.total == 1);
    ok(koila_set_progress(NULL, NULL));
  }
  CHECK(fabs(value - 4.5) < 1e-6);
  ok(koila_tensor_grad(&grad, w));
  CHECK(grad != NULL);
  if (grad) {
    float g[3];
    ok(koila_tensor_to_host(grad, g, sizeof g)); /* only sample 0 passes the relu */
    CHECK(g[0] == 1.0f && g[1] == -2.0f && g[2] == 3.0f);
  }

  ok(koila_tensor_to_string(loss, NULL, 0, &needed));
  CHECK(needed > 1 && needed < sizeof text);
  ok(koila_tensor_to_string(loss, text, sizeof text, &needed));
  CHECK(strstr(text, "4.5") != NULL);

  s = koila_tensor_item(r, &value);
  CHECK(koila_status_code(s) == KOILA_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(koila_status_message(s), "exactly one element") != NULL);
  koila_status_free(s);

  { /* A failed call sets its out to NULL: never pass a live handle's variable. */
    koila_tensor *none = x;
    s = koila_tensor_zeros(&none, xshape, 2, KOILA_FLOAT32, "cuda:99"); /* with or without CUDA */
    CHECK(koila_status_code(s) == KOILA_ERROR_DEVICE && none == NULL);
    koila_status_free(s);
  }

  s = koila_add(NULL, x, x);
  CHECK(koila_status_code(s) == KOILA_ERROR_INVALID_ARGUMENT);
  koila_status_free(s);

  /* Memory and plans: a lazy batch of 64 rows, summed; its plan under the automatic budget
     runs unsplit, under a budget below what is in use it is refused before running. */
  {
    float big[64 * 16];
    const int64_t bshape[2] = {64, 16};
    koila_tensor *b = NULL, *lb = NULL, *e = NULL, *total = NULL;
    koila_plan *plan = NULL;
    uint64_t current = 0, peak = 0, budget = 0;
    int i;
    for (i = 0; i < 64 * 16; ++i) big[i] = 1.0f;
    ok(koila_memory_reset_peak("cpu"));
    ok(koila_memory_stats("cpu", &current, &peak));
    CHECK(peak == current);
    ok(koila_tensor_from_data(&b, big, sizeof big, KOILA_FLOAT32, bshape, 2, "cpu"));
    ok(koila_memory_stats("cpu", &current, NULL));
    CHECK(current >= sizeof big);
    ok(koila_lazy(&lb, b, 0));
    ok(koila_exp(&e, lb));
    ok(koila_sum(&total, e, NULL, 0, 0));
    ok(koila_memory_budget("cpu", &budget));
    CHECK(budget > current);
    if (ok(koila_plan_new(&plan, total, KOILA_MODE_FORWARD))) {
      CHECK(koila_plan_batch_size(plan) == 64);
      CHECK(koila_plan_chunk_size(plan) == 64);
      CHECK(koila_plan_num_chunks(plan) == 1);
      CHECK(koila_plan_peak_bytes(plan) >= current);
      CHECK(koila_plan_peak_bytes(plan) == koila_plan_full_peak_bytes(plan));
      CHECK(koila_plan_budget_bytes(plan) == budget || koila_plan_budget_bytes(plan) > current);
      ok(koila_plan_describe(plan, text, sizeof text, &needed));
      CHECK(strstr(text, "batch 64") != NULL);
      koila_plan_free(plan);
    }
    ok(koila_tensor_item(total, &value));
    CHECK(fabs(value - 64 * 16 * exp(1.0)) < 1e-2);
    ok(koila_set_memory_budget("cpu", 1));
    s = koila_tensor_item(total, &value);
    CHECK(koila_status_code(s) == KOILA_ERROR_OUT_OF_MEMORY);
    koila_status_free(s);
    s = koila_plan_new(&plan, total, KOILA_MODE_FORWARD);
    CHECK(koila_status_code(s) == KOILA_ERROR_OUT_OF_MEMORY && plan == NULL);
    koila_status_free(s);
    ok(koila_set_memory_budget("cpu", 0));
    s = koila_memory_stats("cuda:7", &current, &peak);
    CHECK(koila_status_code(s) == KOILA_ERROR_DEVICE);
    koila_status_free(s);
    koila_plan_free(NULL);
    koila_tensor_free(total);
    koila_tensor_free(e);
    koila_tensor_free(lb);
    koila_tensor_free(b);
  }

  /* Chunking options: every known value is taken, any other refused. */
  ok(koila_set_batch_stats(KOILA_BATCH_STATS_PER_CHUNK));
  ok(koila_set_batch_stats(KOILA_BATCH_STATS_EXACT));
  ok(koila_set_chunking(KOILA_CHUNK_FASTEST));
  ok(koila_set_chunking(KOILA_CHUNK_LARGEST));
  s = koila_set_batch_stats((koila_batch_stats)2);
  CHECK(koila_status_code(s) == KOILA_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(koila_status_message(s), "koila_set_batch_stats") != NULL);
  koila_status_free(s);
  s = koila_set_chunking((koila_chunking)-1);
  CHECK(koila_status_code(s) == KOILA_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(koila_status_message(s), "koila_set_chunking") != NULL);
  koila_status_free(s);

  /* Process groups: what fails before joining anything (tests/test_groups.cpp joins). */
  {
    koila_group *g = NULL;
    s = koila_group_new(&g, "gloo", "tcp://127.0.0.1", 0, 2, 1000);
    CHECK(koila_status_code(s) == KOILA_ERROR_INVALID_ARGUMENT && g == NULL);
    koila_status_free(s);
    s = koila_group_new(&g, "smoke-signals", "file:///tmp/x", 0, 1, 1000);
    CHECK(koila_status_code(s) == KOILA_ERROR_INVALID_ARGUMENT && g == NULL);
    CHECK(strstr(koila_status_message(s), "koila_group_new") != NULL);
    koila_status_free(s);
    s = koila_group_new(&g, "gloo", "file:///tmp/x", 3, 2, 1000);
    CHECK(koila_status_code(s) == KOILA_ERROR_INVALID_ARGUMENT && g == NULL);
    koila_status_free(s);
    CHECK(koila_group_rank(NULL) == -1 && koila_group_size(NULL) == -1);
    s = koila_group_broadcast(NULL, &w, 1, 0);
    CHECK(koila_status_code(s) == KOILA_ERROR_INVALID_ARGUMENT);
    koila_status_free(s);
    s = koila_group_backward(NULL, loss, &w, 1);
    CHECK(koila_status_code(s) == KOILA_ERROR_INVALID_ARGUMENT);
    koila_status_free(s);
    koila_group_free(NULL);
  }

  if (argc > 1)
    module_checks(argv[1]);
  else {
    fprintf(stderr, "usage: %s MODELS_DIR\n", argv[0]);
    ++failures;
  }
  dlpack_checks();

  /* Any free order; every _free takes NULL. */
  koila_tensor_free(x);
  koila_tensor_free(lx);
  koila_tensor_free(w);
  koila_tensor_free(h);
  koila_tensor_free(r);
  koila_tensor_free(grad);
  koila_tensor_free(loss);
  koila_tensor_free(NULL);
  koila_status_free(NULL);

  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("c99 api test: 1 passed, 0 failed\n");
  return 0;
}
