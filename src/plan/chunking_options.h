// The chunking options of koila.h (koila_set_batch_stats, koila_set_chunking): global
// settings, read when a plan is made.
#pragma once

#include "koila.h"

namespace koila {

void set_batch_stats(koila_batch_stats policy);
koila_batch_stats batch_stats();

void set_chunking(koila_chunking policy);
koila_chunking chunking();

void set_recompute(koila_recompute policy);
koila_recompute recompute();

const char* batch_stats_name(koila_batch_stats policy);
const char* chunking_name(koila_chunking policy);

}  // namespace koila
