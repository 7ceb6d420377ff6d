package org.koila;

import org.koila.raw.koila_mode;

/** What a {@link Plan} plans, as {@code koila_mode} in koila.h. */
public enum Mode {
  /** Evaluating the tensor (a read such as {@link Tensor#item()}). */
  FORWARD(koila_mode.KOILA_MODE_FORWARD),
  /** A backward pass from the tensor ({@link Tensor#backward()}). */
  TRAINING(koila_mode.KOILA_MODE_TRAINING);

  private final int value;

  Mode(int value) {
    this.value = value;
  }

  /** The numeric value in koila.h. */
  public int value() {
    return value;
  }
}
