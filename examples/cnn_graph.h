/* The loss graph of the examples that train the TorchScript CNN on synthetic images
   (train_resume.c, train_ddp.c): samples first .. first + length of a pool made by
   synthetic_images, lazy along the batch, through the module, into a MEAN cross entropy, on
   `device` (the module's). */
#ifndef KOILA_EXAMPLE_CNN_GRAPH_H
#define KOILA_EXAMPLE_CNN_GRAPH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "koila.h"
#include "synthetic_images.h"

struct cnn_graph {
  koila_tensor *images, *labels, *x, *y, *logits, *loss;
};

static void cnn_graph_check(koila_status* s, const char* what) {
  if (s == NULL) return;
  fprintf(stderr, "%s failed: %s\n", what, koila_status_message(s));
  koila_status_free(s);
  exit(1);
}

static void build_cnn_graph(struct cnn_graph* g, koila_module* net, const float* images, const int64_t* labels,
                            int64_t first, int64_t length, const char* device) {
  const int64_t image_shape[4] = {length, 3, 32, 32}, label_shape[1] = {length};
  memset(g, 0, sizeof *g);
  cnn_graph_check(koila_tensor_from_data(&g->images, images + first * SYNTHETIC_PIXELS,
                                         (size_t)(length * SYNTHETIC_PIXELS) * sizeof *images, KOILA_FLOAT32,
                                         image_shape, 4, device),
                  "images");
  cnn_graph_check(koila_tensor_from_data(&g->labels, labels + first, (size_t)length * sizeof *labels, KOILA_INT64,
                                         label_shape, 1, device),
                  "labels");
  cnn_graph_check(koila_lazy(&g->x, g->images, 0), "koila_lazy");
  cnn_graph_check(koila_lazy(&g->y, g->labels, 0), "koila_lazy");
  cnn_graph_check(koila_module_forward(&g->logits, net, &g->x, 1), "koila_module_forward");
  cnn_graph_check(koila_cross_entropy(&g->loss, g->logits, g->y, KOILA_REDUCTION_MEAN), "koila_cross_entropy");
}

static void free_cnn_graph(struct cnn_graph* g) {
  koila_tensor_free(g->loss);
  koila_tensor_free(g->logits);
  koila_tensor_free(g->y);
  koila_tensor_free(g->x);
  koila_tensor_free(g->labels);
  koila_tensor_free(g->images);
}

#endif
