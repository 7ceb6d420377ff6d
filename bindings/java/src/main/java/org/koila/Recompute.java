package org.koila;

import org.koila.raw.koila_recompute;

/**
 * Whether a backward that fits no chunk frees activations in its forward and recomputes them in
 * its backward, as {@code koila_recompute} in koila.h; set with {@link Koila#setRecompute}.
 */
public enum Recompute {
  /** Never: a backward that fits no chunk is refused, as before recomputation existed. */
  OFF(koila_recompute.KOILA_RECOMPUTE_OFF),
  /**
   * The default: only where no chunk fits without it, as little as makes the run fit, then the
   * largest chunk that fits with it. Gradients equal those of the same chunks without it.
   */
  AS_NEEDED(koila_recompute.KOILA_RECOMPUTE_AS_NEEDED),
  /**
   * Rather than split: where the unsplit run does not fit, the largest chunk that fits
   * recomputing (the whole batch first).
   */
  PREFERRED(koila_recompute.KOILA_RECOMPUTE_PREFERRED);

  private final int value;

  Recompute(int value) {
    this.value = value;
  }

  /** The numeric value in koila.h. */
  public int value() {
    return value;
  }
}
