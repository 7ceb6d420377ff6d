package org.koila;

import java.nio.charset.StandardCharsets;

/** Reads the text outputs of koila.h: {@code (char *buf, size_t capacity, size_t *needed)}. */
final class Text {
  private static final int FIRST_CAPACITY = 512;

  private Text() {}

  /** A raw call that writes text into {@code buf} and the full length plus one to {@code needed[0]}. */
  @FunctionalInterface
  interface Call {
    long call(byte[] buf, long[] needed);
  }

  /** The text of {@code call}, called a second time with a larger buffer when needed. */
  static String read(Call call) {
    byte[] buf = new byte[FIRST_CAPACITY];
    long[] needed = new long[1];
    KoilaException.check(call.call(buf, needed));
    if (needed[0] > buf.length) {
      if (needed[0] > Integer.MAX_VALUE - 8) {
        throw new KoilaException(Code.UNSUPPORTED, "text of " + needed[0] + " bytes is too long for Java");
      }
      buf = new byte[(int) needed[0]];
      KoilaException.check(call.call(buf, needed));
    }
    int length = (int) Math.max(0, Math.min(needed[0] - 1, buf.length - 1));
    return new String(buf, 0, length, StandardCharsets.UTF_8);
  }
}
