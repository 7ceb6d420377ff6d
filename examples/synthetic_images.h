/* Synthetic data a CNN can learn, shared by the CNN examples: batch images [batch, 3, 32, 32]
   whose class (sample index mod 10) brightens its own 8x8 patch, over uniform noise from a
   fixed seed, so every process that makes them gets the same batch. */
#ifndef KOILA_EXAMPLES_SYNTHETIC_IMAGES_H
#define KOILA_EXAMPLES_SYNTHETIC_IMAGES_H

#include <stdint.h>

#define SYNTHETIC_PIXELS ((int64_t)3 * 32 * 32)

static void synthetic_images(float* images, int64_t* labels, int64_t batch) {
  unsigned long long seed = 42;
  int64_t s, p;
  for (s = 0; s < batch; ++s) {
    const int64_t label = s % 10;
    labels[s] = label;
    for (p = 0; p < SYNTHETIC_PIXELS; ++p) {
      const int64_t row = (p / 32) % 32, col = p % 32;
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      images[s * SYNTHETIC_PIXELS + p] =
          (float)((double)(seed >> 40) / (double)(1 << 24) - 0.5) + ((row / 8) * 4 + col / 8 == label ? 1.0f : 0.0f);
    }
  }
}

#endif
