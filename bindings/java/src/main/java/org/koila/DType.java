package org.koila;

import org.koila.raw.koila_dtype;

/** Element types of tensors, as {@code koila_dtype} in koila.h. */
public enum DType {
  /** 32-bit IEEE float ({@code float}). */
  FLOAT32(koila_dtype.KOILA_FLOAT32, 4, true),
  /** 64-bit IEEE float ({@code double}). */
  FLOAT64(koila_dtype.KOILA_FLOAT64, 8, true),
  /** 16-bit IEEE half precision float. */
  FLOAT16(koila_dtype.KOILA_FLOAT16, 2, true),
  /** 16-bit brain float (the upper half of a float32). */
  BFLOAT16(koila_dtype.KOILA_BFLOAT16, 2, true),
  /** 64-bit signed integer ({@code long}). */
  INT64(koila_dtype.KOILA_INT64, 8, false),
  /** 32-bit signed integer ({@code int}). */
  INT32(koila_dtype.KOILA_INT32, 4, false),
  /** 8-bit signed integer ({@code byte}). */
  INT8(koila_dtype.KOILA_INT8, 1, false),
  /** 8-bit unsigned integer (a {@code byte} read as 0 to 255). */
  UINT8(koila_dtype.KOILA_UINT8, 1, false),
  /** Boolean, one byte per element (0 or 1). */
  BOOL(koila_dtype.KOILA_BOOL, 1, false);

  private final int value;
  private final int elementSize;
  private final boolean floatingPoint;

  DType(int value, int elementSize, boolean floatingPoint) {
    this.value = value;
    this.elementSize = elementSize;
    this.floatingPoint = floatingPoint;
  }

  /** The numeric value of the dtype in koila.h. */
  public int value() {
    return value;
  }

  /** Bytes per element. */
  public int elementSize() {
    return elementSize;
  }

  /** True for FLOAT32, FLOAT64, FLOAT16 and BFLOAT16. */
  public boolean isFloatingPoint() {
    return floatingPoint;
  }

  /**
   * The dtype with the numeric value {@code value}.
   *
   * @throws KoilaException with {@link Code#DTYPE} for a value koila.h does not define
   */
  public static DType of(int value) {
    for (DType dtype : values()) {
      if (dtype.value == value) return dtype;
    }
    throw new KoilaException(Code.DTYPE, "unknown dtype value " + value);
  }
}
