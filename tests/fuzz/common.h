// Shared by the reliability programs (tests/fuzz): code names for messages and the one
// PRNG step every seeded run is built on.
#pragma once

#include <cstdint>

#include "koila.h"

// splitmix64: small, fast and identical on every platform (std::random_device and the
// distributions of <random> are not), so a seed replays the same run anywhere.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The name of a koila_code.

inline const char* code_name(koila_code c) {
  switch (c) {
    case KOILA_OK: return "OK";
    case KOILA_ERROR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case KOILA_ERROR_SHAPE: return "SHAPE";
    case KOILA_ERROR_DTYPE: return "DTYPE";
    case KOILA_ERROR_DEVICE: return "DEVICE";
    case KOILA_ERROR_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case KOILA_ERROR_NOT_SPLITTABLE: return "NOT_SPLITTABLE";
    case KOILA_ERROR_IO: return "IO";
    case KOILA_ERROR_UNSUPPORTED: return "UNSUPPORTED";
    case KOILA_ERROR_INTERNAL: return "INTERNAL";
  }
  return "?";
}
