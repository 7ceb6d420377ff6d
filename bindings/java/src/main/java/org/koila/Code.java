package org.koila;

import org.koila.raw.koila_code;

/** The kind of a failure, as {@code koila_code} in koila.h. Carried by {@link KoilaException#code()}. */
public enum Code {
  /** Success; never carried by an exception. */
  OK(koila_code.KOILA_OK),
  /** A null or closed handle where one is needed, a bad dim, a bad size or value. */
  INVALID_ARGUMENT(koila_code.KOILA_ERROR_INVALID_ARGUMENT),
  /** Shapes that do not fit the operation; the message names them. */
  SHAPE(koila_code.KOILA_ERROR_SHAPE),
  /** A dtype the operation does not take. */
  DTYPE(koila_code.KOILA_ERROR_DTYPE),
  /** An unknown or unavailable device. */
  DEVICE(koila_code.KOILA_ERROR_DEVICE),
  /** Not even a chunk of one sample fits the memory budget. */
  OUT_OF_MEMORY(koila_code.KOILA_ERROR_OUT_OF_MEMORY),
  /** The graph mixes samples across the batch and does not fit unsplit. */
  NOT_SPLITTABLE(koila_code.KOILA_ERROR_NOT_SPLITTABLE),
  /** A file missing, unreadable, unwritable or corrupt. */
  IO(koila_code.KOILA_ERROR_IO),
  /** Something koila does not do (for example a module that returns no single tensor). */
  UNSUPPORTED(koila_code.KOILA_ERROR_UNSUPPORTED),
  /** A bug in koila or LibTorch. */
  INTERNAL(koila_code.KOILA_ERROR_INTERNAL);

  private final int value;

  Code(int value) {
    this.value = value;
  }

  /** The numeric value of the code in koila.h. */
  public int value() {
    return value;
  }

  /** The code with the numeric value {@code value}; an unknown value gives {@link #INTERNAL}. */
  public static Code of(int value) {
    for (Code code : values()) {
      if (code.value == value) return code;
    }
    return INTERNAL;
  }
}
