package org.koila;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.koila.raw.KoilaNative;
import org.koila.raw.koila_code;
import org.koila.raw.koila_dtype;
import org.koila.raw.koila_mode;

/** The SWIG layer used directly, as C would: statuses, out arrays, NULLs and text buffers. */
class RawApiTest {
  private static void ok(long status) {
    if (status != 0) {
      String message = KoilaNative.koila_status_message(status);
      KoilaNative.koila_status_free(status);
      throw new AssertionError("unexpected status: " + message);
    }
  }

  private static byte[] floatBytes(float... values) {
    ByteBuffer b = ByteBuffer.allocate(4 * values.length).order(ByteOrder.nativeOrder());
    b.asFloatBuffer().put(values);
    return b.array();
  }

  @Test
  void tensorsThroughTheCApi() {
    long[] out = new long[1];
    ok(KoilaNative.koila_tensor_from_data(out, floatBytes(1, 2, 3, 4, 5, 6), koila_dtype.KOILA_FLOAT32,
        new long[] {2, 3}, "cpu"));
    long t = out[0];
    assertNotEquals(0, t);
    long[] dims = new long[4];
    long[] ndim = new long[1];
    ok(KoilaNative.koila_tensor_shape(t, dims, ndim));
    assertEquals(2, ndim[0]);
    assertArrayEquals(new long[] {2, 3, 0, 0}, dims);
    ok(KoilaNative.koila_tensor_shape(t, null, ndim)); // dims NULL with capacity 0
    assertEquals(2, ndim[0]);

    ok(KoilaNative.koila_lazy(out, t, KoilaNative.KOILA_NO_BATCH));
    long lazy = out[0];
    int[] flag = new int[1];
    ok(KoilaNative.koila_tensor_is_lazy(lazy, flag));
    assertEquals(1, flag[0]);
    long[] batch = new long[1];
    ok(KoilaNative.koila_tensor_batch_dim(lazy, batch));
    assertEquals(-1, batch[0]);

    ok(KoilaNative.koila_sum(out, lazy, new long[] {1}, 0));
    long sums = out[0];
    byte[] host = new byte[8];
    ok(KoilaNative.koila_tensor_to_host(sums, host));
    assertArrayEquals(floatBytes(6, 15), host);
    int[] dtype = new int[1];
    ok(KoilaNative.koila_tensor_dtype(sums, dtype));
    assertEquals(koila_dtype.KOILA_FLOAT32, dtype[0]);

    // Text: ask for the size with NULL, then read.
    long[] needed = new long[1];
    ok(KoilaNative.koila_tensor_to_string(sums, null, needed));
    assertTrue(needed[0] > 1);
    byte[] buf = new byte[(int) needed[0]];
    ok(KoilaNative.koila_tensor_to_string(sums, buf, needed));
    assertEquals(0, buf[buf.length - 1], "NUL-terminated");
    String text = new String(buf, 0, buf.length - 1, StandardCharsets.UTF_8);
    assertTrue(text.contains("15"), text);
    byte[] small = new byte[4];
    ok(KoilaNative.koila_tensor_to_string(sums, small, needed));
    assertEquals(0, small[3], "truncated but NUL-terminated");

    // Arrays of handles.
    ok(KoilaNative.koila_stack(out, new long[] {sums, sums}, 0));
    long stacked = out[0];
    ok(KoilaNative.koila_tensor_shape(stacked, dims, ndim));
    assertEquals(2, ndim[0]);
    assertEquals(2, dims[0]);

    KoilaNative.koila_tensor_free(stacked);
    KoilaNative.koila_tensor_free(sums);
    KoilaNative.koila_tensor_free(lazy);
    KoilaNative.koila_tensor_free(t);
  }

  @Test
  void statuses() {
    assertEquals(koila_code.KOILA_OK, KoilaNative.koila_status_code(0));
    assertEquals("", KoilaNative.koila_status_message(0));
    KoilaNative.koila_status_free(0);
    long[] out = {12345};
    long s = KoilaNative.koila_tensor_zeros(out, new long[] {1}, koila_dtype.KOILA_FLOAT32, "cuda:9");
    assertNotEquals(0, s);
    assertEquals(koila_code.KOILA_ERROR_DEVICE, KoilaNative.koila_status_code(s));
    assertTrue(KoilaNative.koila_status_message(s).contains("cuda"));
    KoilaNative.koila_status_free(s);
    assertEquals(0, out[0], "out is NULL after a failure");
    s = KoilaNative.koila_add(null, 0, 0); // out NULL
    assertEquals(koila_code.KOILA_ERROR_INVALID_ARGUMENT, KoilaNative.koila_status_code(s));
    KoilaNative.koila_status_free(s);
  }

  @Test
  void nullsWhereTheHeaderAllowsThem() {
    long[] out = new long[1];
    ok(KoilaNative.koila_tensor_from_data(out, null, koila_dtype.KOILA_FLOAT32, new long[] {0}, "cpu"));
    KoilaNative.koila_tensor_free(out[0]);
    ok(KoilaNative.koila_tensor_ones(out, null, koila_dtype.KOILA_FLOAT32, "cpu")); // a scalar
    long scalar = out[0];
    double[] value = new double[1];
    ok(KoilaNative.koila_tensor_item(scalar, value));
    assertEquals(1.0, value[0]);
    ok(KoilaNative.koila_tensor_grad(out, scalar));
    assertEquals(0, out[0], "no gradient: NULL");
    ok(KoilaNative.koila_memory_stats("cpu", null, null));
    long[] current = new long[1];
    ok(KoilaNative.koila_memory_stats("cpu", current, null));
    assertTrue(current[0] > 0);
    ok(KoilaNative.koila_tensor_ones(out, new long[] {1, 1, 3, 3}, koila_dtype.KOILA_FLOAT32, "cpu"));
    long img = out[0];
    ok(KoilaNative.koila_max_pool2d(out, img, new long[] {2, 2}, null, null, 0));
    KoilaNative.koila_tensor_free(out[0]);
    // One value stands for both dims.
    ok(KoilaNative.koila_avg_pool2d(out, img, new long[] {3}, null, null, 0));
    ok(KoilaNative.koila_tensor_item(out[0], value));
    assertEquals(1.0, value[0]);
    KoilaNative.koila_tensor_free(out[0]);
    ok(KoilaNative.koila_plan_new(out, scalar, koila_mode.KOILA_MODE_FORWARD));
    assertEquals(-1, KoilaNative.koila_plan_batch_size(out[0]));
    KoilaNative.koila_plan_free(out[0]);
    KoilaNative.koila_tensor_free(img);
    KoilaNative.koila_tensor_free(scalar);
    // Every _free takes NULL.
    KoilaNative.koila_tensor_free(0);
    KoilaNative.koila_plan_free(0);
    KoilaNative.koila_module_free(0);
    KoilaNative.koila_optimizer_free(0);
  }

  @Test
  void arraysAreChecked() {
    assertThrows(IllegalArgumentException.class,
        () -> KoilaNative.koila_tensor_zeros(new long[0], new long[] {1}, koila_dtype.KOILA_FLOAT32, "cpu"));
    assertThrows(IllegalArgumentException.class, () -> KoilaNative.koila_memory_stats("cpu", new long[0], null));
    assertThrows(IllegalArgumentException.class,
        () -> KoilaNative.koila_max_pool2d(new long[1], 0, new long[] {1, 2, 3}, null, null, 0));
    assertThrows(IllegalArgumentException.class, () -> KoilaNative.koila_memory_budget("cpu\0", new long[1]));
  }

  @Test
  void unsignedValuesKeepTheirBits() {
    long[] budget = new long[1];
    ok(KoilaNative.koila_set_memory_budget("cpu", 3L << 40));
    ok(KoilaNative.koila_memory_budget("cpu", budget));
    assertEquals(3L << 40, budget[0]);
    ok(KoilaNative.koila_set_memory_budget("cpu", 0));
    ok(KoilaNative.koila_manual_seed(-1L)); // 2^64 - 1
  }
}
