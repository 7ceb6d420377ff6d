/* The README quick start as a program: an MNIST-sized MLP
   (28*28 -> 512 -> 512 -> 10) whose input and label are made lazy with one line each.
   Building the graph runs nothing; shapes are known at once; reading the loss or calling
   backward evaluates. */
#include <stdio.h>
#include <stdlib.h>

#include "koila.h"

/* Stops the program with the status message (examples keep error handling short). */
static void check(koila_status *s, const char *what) {
  if (s == NULL) return;
  fprintf(stderr, "%s failed: %s\n", what, koila_status_message(s));
  koila_status_free(s);
  exit(1);
}

static koila_tensor *parameter(int64_t rows, int64_t cols) {
  const int64_t shape[2] = {rows, cols};
  koila_tensor *p = NULL, *scaled = NULL;
  check(koila_tensor_randn(&p, shape, cols ? 2 : 1, KOILA_FLOAT32, "cpu"), "randn");
  check(koila_mul_scalar(&scaled, p, 0.05), "scale");
  koila_tensor_free(p);
  check(koila_tensor_set_requires_grad(scaled, 1), "requires_grad");
  return scaled;
}

int main(int argc, char **argv) {
  const int64_t batch = argc > 1 ? atoll(argv[1]) : 8;
  const int64_t image[3] = {batch, 28, 28};
  int64_t *labels_data = malloc((size_t)batch * sizeof *labels_data);
  koila_tensor *input = NULL, *label = NULL, *x = NULL, *y = NULL;
  koila_tensor *w1, *b1, *w2, *b2, *w3, *b3, *flat, *h1, *a1, *h2, *a2, *logits, *loss, *grad = NULL;
  int64_t shape[2];
  size_t ndim = 0;
  int64_t i;
  double value = 0.0;

  check(koila_manual_seed(0), "seed");
  /* A batch of MNIST images and their labels. */
  check(koila_tensor_randn(&input, image, 3, KOILA_FLOAT32, "cpu"), "input");
  for (i = 0; i < batch; ++i) labels_data[i] = i % 10;
  check(koila_tensor_from_data(&label, labels_data, (size_t)batch * sizeof *labels_data, KOILA_INT64, &batch, 1, "cpu"),
        "label");

  /* The one line: wrap input and label; dim 0 is the batch. */
  check(koila_lazy(&x, input, 0), "lazy input");
  check(koila_lazy(&y, label, 0), "lazy label");

  w1 = parameter(512, 28 * 28); b1 = parameter(512, 0);
  w2 = parameter(512, 512);     b2 = parameter(512, 0);
  w3 = parameter(10, 512);      b3 = parameter(10, 0);

  /* The model: flatten, Linear-ReLU, Linear-ReLU, Linear; then cross entropy. */
  check(koila_flatten(&flat, x, 1, -1), "flatten");
  check(koila_linear(&h1, flat, w1, b1), "linear 1");
  check(koila_relu(&a1, h1), "relu 1");
  check(koila_linear(&h2, a1, w2, b2), "linear 2");
  check(koila_relu(&a2, h2), "relu 2");
  check(koila_linear(&logits, a2, w3, b3), "linear 3");
  check(koila_cross_entropy(&loss, logits, y, KOILA_REDUCTION_MEAN), "cross entropy");

  /* Metadata is known without running anything. */
  check(koila_tensor_shape(logits, shape, 2, &ndim), "shape");
  printf("logits: [%lld, %lld] (inferred, nothing computed yet)\n", (long long)shape[0], (long long)shape[1]);

  /* Backward evaluates the graph and fills the parameters' gradients. */
  check(koila_backward(loss), "backward");
  check(koila_tensor_item(loss, &value), "item");
  printf("loss: %.6f\n", value);
  check(koila_tensor_grad(&grad, w3), "grad");
  printf("w3 has a gradient: %s\n", grad ? "yes" : "no");

  koila_tensor_free(grad);
  koila_tensor_free(loss); koila_tensor_free(logits); koila_tensor_free(a2); koila_tensor_free(h2);
  koila_tensor_free(a1); koila_tensor_free(h1); koila_tensor_free(flat);
  koila_tensor_free(w1); koila_tensor_free(b1); koila_tensor_free(w2); koila_tensor_free(b2);
  koila_tensor_free(w3); koila_tensor_free(b3);
  koila_tensor_free(x); koila_tensor_free(y); koila_tensor_free(input); koila_tensor_free(label);
  free(labels_data);
  return 0;
}
