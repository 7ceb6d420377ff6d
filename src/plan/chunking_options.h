// The chunking options of koila.h (koila_set_batch_stats, koila_set_chunking): global
// settings, read when a plan is made.
#pragma once

#include "base/policies.h"

namespace koila {

void set_batch_stats(BatchStats policy);
BatchStats batch_stats();

void set_chunking(Chunking policy);
Chunking chunking();

void set_recompute(Recompute policy);
Recompute recompute();

const char* batch_stats_name(BatchStats policy);
const char* chunking_name(Chunking policy);

}  // namespace koila
