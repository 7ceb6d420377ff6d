// The C entry points for chunking options: global settings that apply to every planned run.
#include "error.h"
#include "progress.h"

using namespace koila;

extern "C" {

KOILA_API koila_status* koila_set_progress(koila_progress_fn fn, void* user) {
  return guard(__func__, [&] { set_progress(fn, user); });
}

}  // extern "C"
