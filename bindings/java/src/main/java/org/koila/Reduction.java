package org.koila;

import org.koila.raw.koila_reduction;

/** How a loss reduces over its elements, as {@code koila_reduction} in koila.h. */
public enum Reduction {
  /** One loss per element. */
  NONE(koila_reduction.KOILA_REDUCTION_NONE),
  /** The mean of the losses (scaled exactly when a lazy batch runs in chunks). */
  MEAN(koila_reduction.KOILA_REDUCTION_MEAN),
  /** The sum of the losses. */
  SUM(koila_reduction.KOILA_REDUCTION_SUM);

  private final int value;

  Reduction(int value) {
    this.value = value;
  }

  /** The numeric value in koila.h. */
  public int value() {
    return value;
  }
}
