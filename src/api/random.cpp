// The C entry points for the random generators' states in a file (train/rng_file.h).
#include "api/args.h"
#include "api/guard.h"
#include "train/rng_file.h"

using namespace koila;

extern "C" {

KOILA_API koila_status* koila_rng_save(const char* path) {
  return guard(__func__, [&] {
    arg::not_null(path, "path");
    save_random_states(path);
  });
}

KOILA_API koila_status* koila_rng_load(const char* path) {
  return guard(__func__, [&] {
    arg::not_null(path, "path");
    load_random_states(path);
  });
}

}  // extern "C"
