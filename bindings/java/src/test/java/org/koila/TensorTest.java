package org.koila;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.koila.TestSupport.assertKoila;
import static org.koila.TestSupport.assertShape;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** Tensors: round trips for each dtype, metadata, laziness, reads, text and autograd. */
class TensorTest {
  @AfterEach
  void restoreBudget() {
    Koila.setMemoryBudget("cpu", 0);
  }

  @Test
  void versionMatchesTheHeader() {
    assertEquals(Koila.VERSION_MAJOR + "." + Koila.VERSION_MINOR + "." + Koila.VERSION_PATCH, Koila.version());
  }

  @Test
  void float32RoundTrip() {
    float[] data = {1.5f, -2f, 3.25f, Float.MAX_VALUE, -0f, Float.MIN_VALUE};
    try (Tensor t = Tensor.fromFloats(data, 2, 3)) {
      assertArrayEquals(new long[] {2, 3}, t.shape());
      assertEquals(2, t.ndim());
      assertEquals(6, t.numel());
      assertEquals(3, t.size(-1));
      assertEquals(DType.FLOAT32, t.dtype());
      assertFalse(t.isLazy());
      assertEquals(-1, t.batchDim());
      assertArrayEquals(data, t.toFloatArray());
      assertArrayEquals(new double[] {1.5, -2, 3.25, Float.MAX_VALUE, -0.0, Float.MIN_VALUE}, t.toDoubleArray());
    }
  }

  @Test
  void float64RoundTrip() {
    double[] data = {Math.PI, -1e300, 1e-300, 0};
    try (Tensor t = Tensor.fromDoubles(data, 4)) {
      assertEquals(DType.FLOAT64, t.dtype());
      assertArrayEquals(data, t.toDoubleArray());
    }
  }

  @Test
  void integerRoundTrips() {
    long[] longs = {Long.MAX_VALUE, Long.MIN_VALUE, 0, -7};
    try (Tensor t = Tensor.fromLongs(longs, 2, 2)) {
      assertEquals(DType.INT64, t.dtype());
      assertArrayEquals(longs, t.toLongArray());
    }
    int[] ints = {Integer.MAX_VALUE, Integer.MIN_VALUE, 42};
    try (Tensor t = Tensor.fromInts(ints, 3)) {
      assertEquals(DType.INT32, t.dtype());
      assertArrayEquals(ints, t.toIntArray());
      assertArrayEquals(new long[] {Integer.MAX_VALUE, Integer.MIN_VALUE, 42}, t.toLongArray());
    }
    byte[] bytes = {-128, 127, 0, -1};
    try (Tensor t = Tensor.fromBytes(bytes, 4)) {
      assertEquals(DType.INT8, t.dtype());
      assertArrayEquals(bytes, t.toByteArray());
      assertArrayEquals(new int[] {-128, 127, 0, -1}, t.toIntArray());
    }
    try (Tensor t = Tensor.fromUnsignedBytes(bytes, 2, 2)) {
      assertEquals(DType.UINT8, t.dtype());
      assertArrayEquals(new int[] {128, 127, 0, 255}, t.toIntArray());
      assertArrayEquals(new double[] {128, 127, 0, 255}, t.toDoubleArray());
      assertArrayEquals(bytes, t.toByteArray());
    }
  }

  @Test
  void boolRoundTrip() {
    boolean[] data = {true, false, false, true, true, false};
    try (Tensor t = Tensor.fromBooleans(data, 3, 2)) {
      assertEquals(DType.BOOL, t.dtype());
      assertArrayEquals(data, t.toBooleanArray());
      assertArrayEquals(new long[] {1, 0, 0, 1, 1, 0}, t.toLongArray());
    }
  }

  /** The 16-bit patterns of a FLOAT16 or BFLOAT16 tensor. */
  private static int[] halfBits(Tensor t) {
    ByteBuffer b = ByteBuffer.wrap(t.toBytes()).order(ByteOrder.nativeOrder());
    int[] bits = new int[b.capacity() / 2];
    for (int i = 0; i < bits.length; ++i) bits[i] = b.getShort(2 * i) & 0xffff;
    return bits;
  }

  @Test
  void halfPrecisionRoundTrips() {
    // IEEE half patterns worked out by hand: 1 = 0x3c00, -2 = 0xc000, 65504 (largest) = 0x7bff,
    // 0.1 ~ 0x2e66, 1/3 ~ 0x3555, 6e-8 -> the smallest subnormal 0x0001, 70000 -> +inf 0x7c00,
    // 2049 is a tie between 2048 and 2050 -> even 2048 = 0x6800.
    float[] values = {1f, -2f, 65504f, 0.1f, 1f / 3, 6e-8f, 70000f, 2049f};
    try (Tensor t = Tensor.fromFloats(values, new long[] {8}, DType.FLOAT16, "cpu")) {
      assertEquals(DType.FLOAT16, t.dtype());
      assertArrayEquals(new int[] {0x3c00, 0xc000, 0x7bff, 0x2e66, 0x3555, 0x0001, 0x7c00, 0x6800}, halfBits(t));
      float[] back = t.toFloatArray();
      assertEquals(1f, back[0]);
      assertEquals(65504f, back[2]);
      assertEquals(0.0999755859375f, back[3]);
      assertEquals(0x1p-24f, back[5]);
      assertEquals(Float.POSITIVE_INFINITY, back[6]);
      assertEquals(2048f, back[7]);
    }
    // bfloat16: the upper half of the float32 bits, rounded to nearest even: 1 = 0x3f80,
    // 0.1f = 0x3dcccccd -> 0x3dcd, -3 = 0xc040.
    try (Tensor t = Tensor.fromFloats(new float[] {1f, 0.1f, -3f}, new long[] {3}, DType.BFLOAT16, "cpu")) {
      assertEquals(DType.BFLOAT16, t.dtype());
      assertArrayEquals(new int[] {0x3f80, 0x3dcd, 0xc040}, halfBits(t));
      assertArrayEquals(new float[] {1f, 0.10009765625f, -3f}, t.toFloatArray());
    }
    // Raw bytes in, values computed by LibTorch out.
    try (Tensor h = Tensor.fromFloats(new float[] {1.5f, 2.5f}, new long[] {2}, DType.FLOAT16, "cpu");
        Tensor s = h.sum()) {
      assertEquals(DType.FLOAT16, s.dtype());
      assertEquals(4.0, s.item());
    }
    assertKoila(Code.DTYPE, () -> Tensor.fromFloats(new float[] {1}, new long[] {1}, DType.INT32, "cpu"));
  }

  @Test
  void rawBytes() {
    ByteBuffer b = ByteBuffer.allocate(8).order(ByteOrder.nativeOrder());
    b.putInt(7).putInt(-9);
    try (Tensor t = Tensor.fromData(b.array(), DType.INT32, new long[] {2}, "cpu")) {
      assertArrayEquals(new int[] {7, -9}, t.toIntArray());
      assertArrayEquals(b.array(), t.toBytes());
    }
    TestSupport.assertMessageContains(
        assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.fromData(new byte[3], DType.INT32, new long[] {2}, "cpu")),
        "nbytes is 3", "needs 8");
  }

  @Test
  void inputArraysAreCopied() {
    float[] data = {1, 2, 3};
    try (Tensor t = Tensor.fromFloats(data, 3)) {
      data[0] = 100;
      assertArrayEquals(new float[] {1, 2, 3}, t.toFloatArray());
    }
  }

  @Test
  void scalarsAndEmptyTensors() {
    try (Tensor s = Tensor.fromFloats(new float[] {3f})) {
      assertArrayEquals(new long[0], s.shape());
      assertEquals(1, s.numel());
      assertEquals(3.0, s.item());
    }
    try (Tensor e = Tensor.fromFloats(new float[0], 0, 3)) {
      assertArrayEquals(new long[] {0, 3}, e.shape());
      assertEquals(0, e.toFloatArray().length);
    }
    try (Tensor big = Tensor.zeros(new long[] {1, 1, 1, 1, 1, 1, 1, 1, 1, 2}, DType.INT8)) {
      assertEquals(10, big.shape().length); // more dims than the first guess of shape()
    }
  }

  @Test
  void factories() {
    try (Tensor z = Tensor.zeros(2, 3); Tensor o = Tensor.ones(new long[] {4}, DType.INT64)) {
      assertEquals(DType.FLOAT32, z.dtype());
      assertArrayEquals(new float[6], z.toFloatArray());
      assertArrayEquals(new long[] {1, 1, 1, 1}, o.toLongArray());
    }
    Koila.manualSeed(7);
    float[] first;
    try (Tensor r = Tensor.randn(1000)) {
      first = r.toFloatArray();
    }
    double mean = 0;
    for (float f : first) mean += f / 1000.0;
    assertTrue(Math.abs(mean) < 0.2, "mean of 1000 standard normal samples: " + mean);
    Koila.manualSeed(7);
    try (Tensor r = Tensor.randn(new long[] {1000}, DType.FLOAT64)) {
      assertEquals(DType.FLOAT64, r.dtype());
    }
    Koila.manualSeed(7);
    try (Tensor r = Tensor.randn(1000)) {
      assertArrayEquals(first, r.toFloatArray(), "the same seed gives the same samples");
    }
    TestSupport.assertMessageContains(
        assertKoila(Code.DTYPE, () -> Tensor.randn(new long[] {2}, DType.INT64)), "floating");
  }

  /** A lazy graph's metadata is known when it is built, without evaluating anything. */
  @Test
  void lazyMetadataWithoutEvaluation() {
    try (Tensor x = Tensor.randn(5, 3);
        Tensor w = Tensor.randn(3, 2);
        Tensor ints = Tensor.fromLongs(new long[] {1, 2, 3, 4, 5}, 5, 1)) {
      Tensor lx = x.lazy(0);
      Tensor li = ints.lazy(0);
      // A budget of one byte: any evaluation fails, metadata still answers.
      Koila.setMemoryBudget("cpu", 1);
      Tensor h = lx.matmul(w);
      assertTrue(h.isLazy());
      assertShape(h, 5, 2);
      assertEquals(0, h.batchDim());
      assertEquals(DType.FLOAT32, h.dtype());
      Tensor t = h.transpose(0, 1);
      assertShape(t, 2, 5);
      assertEquals(1, t.batchDim());
      Tensor rows = h.sum(new long[] {1}, true);
      assertShape(rows, 5, 1);
      assertEquals(0, rows.batchDim());
      Tensor total = h.sum();
      assertShape(total);
      assertEquals(-1, total.batchDim());
      assertTrue(total.isLazy());
      assertEquals(DType.FLOAT32, li.add(h).dtype(), "int64 + float32 promotes to float32");
      assertEquals(DType.BOOL, li.gt(h).dtype());
      assertEquals(DType.INT64, lx.argmax(1, false).dtype());
      assertEquals(0, Tensor.cat(new Tensor[] {lx, lx}, 1).batchDim());
      assertKoila(Code.OUT_OF_MEMORY, total::item);
      Koila.setMemoryBudget("cpu", 0);
      assertEquals(x.matmul(w).sum().item(), total.item(), 1e-5);
    }
  }

  @Test
  void lazyBatchDims() {
    try (Tensor x = Tensor.ones(4, 3)) {
      assertEquals(1, x.lazy(-1).batchDim());
      Tensor nb = x.lazyWithoutBatch();
      assertTrue(nb.isLazy());
      assertEquals(-1, nb.batchDim());
      assertEquals(Long.MIN_VALUE, Tensor.NO_BATCH);
      assertKoila(Code.INVALID_ARGUMENT, () -> x.lazy(2));
      Tensor l0 = x.lazy(0);
      assertEquals(0, l0.lazy(0).batchDim(), "wrapping again with the same batch dim is allowed");
      assertKoila(Code.INVALID_ARGUMENT, () -> l0.lazy(1));
    }
  }

  @Test
  void lazyReadsCurrentValues() {
    try (Tensor p = Tensor.fromFloats(new float[] {1, 2}, 2).setRequiresGrad(true)) {
      try (Tensor loss = p.mul(p).sum()) {
        loss.backward();
      }
      Tensor g = p.grad();
      Tensor view = g.lazy(0).mul(10.0);
      assertArrayEquals(new float[] {20, 40}, view.toFloatArray());
      p.zeroGrad(); // in place: the lazy view reads the new values
      assertArrayEquals(new float[] {0, 0}, view.toFloatArray());
    }
  }

  @Test
  void evalGivesAConcreteTensor() {
    try (Tensor x = Tensor.fromFloats(new float[] {1, 2, 3}, 3);
        Tensor lazy = x.lazy(0).mul(2.0);
        Tensor value = lazy.eval()) {
      Tensor same = x.eval();
      assertFalse(value.isLazy());
      assertEquals(-1, value.batchDim());
      assertArrayEquals(new float[] {2, 4, 6}, value.toFloatArray());
      assertArrayEquals(new float[] {1, 2, 3}, same.toFloatArray());
      same.close();
      assertArrayEquals(new float[] {1, 2, 3}, x.toFloatArray(), "closing the shared handle leaves x");
    }
  }

  @Test
  void items() {
    try (Tensor i = Tensor.fromLongs(new long[] {-5}, 1, 1); Tensor b = Tensor.fromBooleans(new boolean[] {true})) {
      assertEquals(-5.0, i.item());
      assertEquals(1.0, b.item());
    }
  }

  @Test
  void text() {
    try (Tensor t = Tensor.fromFloats(new float[] {1.5f, -2f}, 2); Tensor lazy = t.lazy(0).mul(2.0)) {
      String s = t.format();
      assertTrue(s.contains("1.5000") && s.contains("-2.0000") && s.contains("CPUFloatType{2}"), s);
      assertEquals(s, t.toString());
      String l = lazy.toString();
      assertTrue(l.contains(" 3\n-4\n") && l.contains("CPUFloatType{2}"), l);
      Koila.setMemoryBudget("cpu", 1);
      assertKoila(Code.OUT_OF_MEMORY, lazy::format);
      String failed = lazy.toString(); // never throws
      assertTrue(failed.contains("cannot evaluate") && failed.contains("[2]"), failed);
      Koila.setMemoryBudget("cpu", 0);
      // Longer than the first buffer the binding tries.
      try (Tensor big = Tensor.randn(20, 20)) {
        assertTrue(big.format().length() > 2000);
        assertTrue(big.format().endsWith("[ CPUFloatType{20,20} ]"));
      }
    }
    Tensor closed = Tensor.ones(1);
    closed.close();
    assertEquals("Tensor(closed)", closed.toString());
  }

  @Test
  void readersRefuseLossyDtypes() {
    try (Tensor f = Tensor.ones(2); Tensor l = Tensor.ones(new long[] {2}, DType.INT64);
        Tensor d = Tensor.ones(new long[] {2}, DType.FLOAT64)) {
      assertKoila(Code.DTYPE, l::toFloatArray);
      assertKoila(Code.DTYPE, l::toIntArray);
      assertKoila(Code.DTYPE, d::toFloatArray);
      assertKoila(Code.DTYPE, f::toLongArray);
      assertKoila(Code.DTYPE, f::toBooleanArray);
      assertKoila(Code.DTYPE, f::toByteArray);
      assertArrayEquals(new double[] {1, 1}, l.toDoubleArray());
    }
  }

  @Test
  void autograd() {
    try (Tensor w = Tensor.fromFloats(new float[] {0.5f, 1, 2}, 1, 3).setRequiresGrad(true);
        Tensor x = Tensor.fromFloats(new float[] {1, -2, 3, -4, 5, -6}, 2, 3)) {
      assertNull(w.grad(), "no gradient before backward");
      // relu(x w^T): 1*.5-2*1+3*2 = 4.5 and -4*.5+5-12 = -9; only sample 0 passes the relu.
      Tensor loss = x.lazy(0).linear(w, null).relu().sum();
      assertEquals(4.5, loss.item(), 1e-6);
      loss.backward();
      Tensor g = w.grad();
      assertNotNull(g);
      assertArrayEquals(new float[] {1, -2, 3}, g.toFloatArray());
      loss.backward(); // gradients add up
      assertArrayEquals(new float[] {2, -4, 6}, g.toFloatArray(), "the grad handle aliases the gradient");
      w.zeroGrad();
      assertArrayEquals(new float[] {0, 0, 0}, g.toFloatArray());
      assertNull(x.grad());
      assertKoila(Code.INVALID_ARGUMENT, () -> x.lazy(0).setRequiresGrad(true));
      try (Tensor ints = Tensor.fromInts(new int[] {1}, 1)) {
        assertKoila(Code.DTYPE, () -> ints.setRequiresGrad(true));
      }
    }
  }

  @Test
  void handlesMoveBetweenThreads() throws Exception {
    Tensor x = Tensor.fromFloats(new float[] {1, 2, 3}, 3);
    double[] result = new double[1];
    Thread t = new Thread(() -> {
      try (Tensor s = x.lazy(0).sum()) {
        result[0] = s.item();
      }
      x.close();
    });
    t.start();
    t.join();
    assertEquals(6.0, result[0]);
    assertTrue(x.isClosed());
  }

  @Test
  void forgottenHandlesAreFreedByTheCleaner() throws Exception {
    long before = Koila.memoryStats("cpu").currentBytes();
    java.util.List<Tensor> forgotten = new java.util.ArrayList<>();
    for (int i = 0; i < 8; ++i) forgotten.add(Tensor.zeros(1 << 20)); // 4 MiB each, never closed
    long held = Koila.memoryStats("cpu").currentBytes();
    assertTrue(held >= before + (30L << 20), "8 tensors of 4 MiB are held: " + before + " -> " + held);
    forgotten.clear();
    long deadline = System.nanoTime() + 20_000_000_000L;
    long now = held;
    while (System.nanoTime() < deadline) {
      System.gc();
      Thread.sleep(50);
      now = Koila.memoryStats("cpu").currentBytes();
      if (now < before + (4L << 20)) break;
    }
    assertTrue(now < before + (4L << 20), "unreachable tensors were freed: " + held + " -> " + now);
  }
}
