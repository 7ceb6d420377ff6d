package org.koila;

import org.koila.raw.koila_chunking;

/**
 * Which chunk size a plan picks among those that fit the budget, as {@code koila_chunking}
 * in koila.h; set with {@link Koila#setChunking}.
 */
public enum Chunking {
  /** The default: the whole batch if it fits, else the largest power of two. */
  LARGEST(koila_chunking.KOILA_CHUNK_LARGEST),
  /**
   * Among the chunk sizes that fit, the one measured fastest: the first runs of a graph
   * structure time the candidates, later runs use the winner. Results stay equal to the
   * unsplit ones up to float rounding.
   */
  FASTEST(koila_chunking.KOILA_CHUNK_FASTEST);

  private final int value;

  Chunking(int value) {
    this.value = value;
  }

  /** The numeric value in koila.h. */
  public int value() {
    return value;
  }
}
