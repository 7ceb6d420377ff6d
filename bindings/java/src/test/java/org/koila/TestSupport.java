package org.koila;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import org.junit.jupiter.api.function.Executable;

/** Helpers shared by the suites: test data locations and numeric comparisons. */
final class TestSupport {
  private TestSupport() {}

  /** A system property the ctest command line sets. */
  static String property(String name) {
    String value = System.getProperty(name);
    if (value == null || value.isEmpty()) fail("system property " + name + " is not set (run through ctest)");
    return value;
  }

  /** The directory holding mlp.pt and cnn.pt (written by the koila_test_models target). */
  static Path models() {
    Path dir = Paths.get(property("koila.test.models"));
    assertTrue(Files.isRegularFile(dir.resolve("mlp.pt")), "missing " + dir.resolve("mlp.pt"));
    return dir;
  }

  static Path mlp() {
    return models().resolve("mlp.pt");
  }

  /**
   * Lets the garbage collector and the cleaner free forgotten handles, so that CPU memory
   * figures do not change under a test: returns once two readings in a row agree.
   */
  static void settleMemory() {
    long last = -1;
    for (int i = 0; i < 100; ++i) {
      System.gc();
      try {
        Thread.sleep(20);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
      long now = Koila.memoryStats("cpu").currentBytes();
      if (now == last) return;
      last = now;
    }
  }

  /**
   * Sets the CPU budget a quarter of the way from what is in use (once settled) to the
   * unsplit peak of running {@code t} in {@code mode}, so that a splittable run splits.
   */
  static void budgetAQuarterToUnsplit(Tensor t, Mode mode) {
    settleMemory();
    long current = Koila.memoryStats("cpu").currentBytes();
    long full;
    try (Plan plan = t.plan(mode)) {
      full = plan.fullPeakBytes();
    }
    assertTrue(full > current, "the unsplit run needs more than what is in use");
    Koila.setMemoryBudget("cpu", current + (full - current) / 4);
  }

  /** Asserts that {@code run} throws a KoilaException with {@code code}; returns it. */
  static KoilaException assertKoila(Code code, Executable run) {
    KoilaException e = assertThrows(KoilaException.class, run);
    assertEquals(code, e.code(), () -> "unexpected code for: " + e.getMessage());
    return e;
  }

  static void assertMessageContains(KoilaException e, String... parts) {
    for (String part : parts) {
      assertTrue(e.getMessage().contains(part), () -> "message '" + e.getMessage() + "' lacks '" + part + "'");
    }
  }

  static void assertClose(double[] expected, double[] actual, double tolerance) {
    assertEquals(expected.length, actual.length, "length");
    for (int i = 0; i < expected.length; ++i) {
      double scale = Math.max(1.0, Math.abs(expected[i]));
      if (!(Math.abs(expected[i] - actual[i]) <= tolerance * scale)) {
        fail("element " + i + ": expected " + expected[i] + " but got " + actual[i]);
      }
    }
  }

  static void assertClose(double[] expected, Tensor actual) {
    assertClose(expected, actual.toDoubleArray(), 1e-5);
  }

  static void assertClose(double expected, double actual) {
    assertClose(new double[] {expected}, new double[] {actual}, 1e-5);
  }

  static void assertShape(Tensor t, long... shape) {
    org.junit.jupiter.api.Assertions.assertArrayEquals(shape, t.shape());
  }

  static double[] toDoubles(float[] values) {
    double[] out = new double[values.length];
    for (int i = 0; i < values.length; ++i) out[i] = values[i];
    return out;
  }

  /** A FLOAT32 tensor from doubles. */
  static Tensor floats(double[] values, long... shape) {
    float[] f = new float[values.length];
    for (int i = 0; i < values.length; ++i) f[i] = (float) values[i];
    return Tensor.fromFloats(f, shape);
  }
}
