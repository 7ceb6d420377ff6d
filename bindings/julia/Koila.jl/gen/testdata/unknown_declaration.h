/* A header the generator must refuse: koila_on_progress takes an unnamed function pointer
   type (gen/generate.py translates only typedef'd ones). ctest's julia.generator_rejects_unknown
   feeds it to the generator and expects a failure naming the line. */
#ifndef UNKNOWN_DECLARATION_H
#define UNKNOWN_DECLARATION_H

#include <stddef.h>

#define KOILA_API

typedef struct koila_status koila_status;

KOILA_API const char *koila_version(void);
KOILA_API koila_status *koila_on_progress(void (*callback)(size_t done, size_t total),
                                          void *user_data);

#endif
