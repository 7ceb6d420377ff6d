package org.koila;

import org.koila.raw.koila_batch_stats;

/**
 * How batch norm in training ({@link Tensor#batchNorm} with {@code training}, and BatchNorm
 * layers of modules in training) is chunked, as {@code koila_batch_stats} in koila.h; set
 * with {@link Koila#setBatchStats}.
 */
public enum BatchStats {
  /**
   * The default: batch norm normalizes with the statistics of the whole batch, so it couples
   * the batch. The run is unsplit or fails with {@link Code#NOT_SPLITTABLE}, whose message
   * names this option.
   */
  EXACT(koila_batch_stats.KOILA_BATCH_STATS_EXACT),
  /**
   * When the batch is split, each chunk normalizes with its own mean and variance, as
   * gradient accumulation does; results and gradients differ from the unsplit ones. The
   * running statistics get one update with the whole batch's statistics per evaluation or
   * backward. An unsplit run is unchanged.
   */
  PER_CHUNK(koila_batch_stats.KOILA_BATCH_STATS_PER_CHUNK);

  private final int value;

  BatchStats(int value) {
    this.value = value;
  }

  /** The numeric value in koila.h. */
  public int value() {
    return value;
  }
}
