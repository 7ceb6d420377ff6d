package org.koila;

import org.koila.raw.KoilaNative;

/**
 * A failed koila call: the {@link Code} and the message of the C status.
 *
 * <p>Unchecked, like {@link IllegalArgumentException}: nearly every call can fail (shape,
 * dtype and device errors are programming errors reported when the operation is built), and
 * a checked exception would have to be declared on every arithmetic expression and could not
 * cross lambdas. Calls whose failure is an environmental condition rather than a bug
 * ({@link Module#load}, {@link Module#save}: {@link Code#IO}; reads and backward under a
 * memory budget: {@link Code#OUT_OF_MEMORY}) document it in their {@code @throws}. Switch on
 * {@link #code()} to handle one kind of failure.
 *
 * <p>Misuse of the Java API itself (a closed handle, a null array, a value count that does
 * not match a shape) is reported the same way, with {@link Code#INVALID_ARGUMENT}.
 */
public class KoilaException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final Code code;

  /**
   * An exception with a code and a message.
   *
   * @param code what kind of failure (never {@link Code#OK})
   * @param message what went wrong
   */
  public KoilaException(Code code, String message) {
    super(message);
    this.code = code == null ? Code.INTERNAL : code;
  }

  /** What kind of failure. */
  public Code code() {
    return code;
  }

  /** The class name, the code and the message: {@code org.koila.KoilaException[SHAPE]: ...}. */
  @Override
  public String toString() {
    return getClass().getName() + "[" + code + "]: " + getMessage();
  }

  /**
   * Releases a status returned by a raw call and throws it as an exception; does nothing for
   * 0 (success).
   */
  static void check(long status) {
    if (status == 0) return;
    int code;
    String message;
    try {
      code = KoilaNative.koila_status_code(status);
      message = KoilaNative.koila_status_message(status);
    } finally {
      KoilaNative.koila_status_free(status);
    }
    throw new KoilaException(Code.of(code), message);
  }

  static KoilaException invalid(String message) {
    return new KoilaException(Code.INVALID_ARGUMENT, message);
  }
}
