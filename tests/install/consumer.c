/* A C99 program built against an installed koila (through pkg-config or find_package),
   not against the source tree: the installed header and library are enough. */
#include <stdio.h>
#include <string.h>

#include <koila.h>

int main(void) {
  const int64_t shape[2] = {4, 3};
  koila_tensor *ones = NULL, *x = NULL, *total = NULL;
  double value = 0;
  koila_status *s = koila_tensor_ones(&ones, shape, 2, KOILA_FLOAT32, "cpu");
  if (s == NULL) s = koila_lazy(&x, ones, 0);
  if (s == NULL) s = koila_sum(&total, x, NULL, 0, 0);
  if (s == NULL) s = koila_tensor_item(total, &value);
  if (s != NULL) {
    fprintf(stderr, "koila call failed: %s\n", koila_status_message(s));
    koila_status_free(s);
    return 1;
  }
  koila_tensor_free(total);
  koila_tensor_free(x);
  koila_tensor_free(ones);
  if (value != 12.0 || strcmp(koila_version(), "0.1.0") != 0) {
    fprintf(stderr, "unexpected result %g (version %s)\n", value, koila_version());
    return 1;
  }
  printf("installed koila %s: sum of a lazy 4x3 tensor of ones = %g\n", koila_version(), value);
  return 0;
}
