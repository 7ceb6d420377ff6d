package org.koila;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.koila.TestSupport.assertClose;
import static org.koila.TestSupport.assertKoila;
import static org.koila.TestSupport.assertMessageContains;
import static org.koila.TestSupport.floats;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.DoubleBuffer;
import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.koila.raw.KoilaNative;

/**
 * AdamW by hand, the learning rate, optimizer state files that resume a run bit for bit,
 * gradient clipping, and direct buffers shared with koila both ways (DLPack).
 */
class CheckpointTest {
  private static Tensor param(double... values) {
    return floats(values, values.length).setRequiresGrad(true);
  }

  /** sum(p * p): its gradient is 2p. */
  private static void backwardSquare(Tensor p) {
    try (Tensor sq = p.mul(p); Tensor loss = sq.sum()) {
      loss.backward();
    }
  }

  private static double[] grad(Tensor p) {
    try (Tensor g = p.grad()) {
      return g.toDoubleArray();
    }
  }

  @Test
  void adamwFirstStepByHand() {
    // p -= lr * wd * p, then Adam's first update lr * g / (|g| + eps) (m̂ = g, v̂ = g²).
    double lr = 0.01;
    double wd = 0.1;
    double[] start = {1.0, -2.0, 0.5};
    try (Tensor p = param(start); Optimizer adamw = Optimizer.adamw(List.of(p), lr, 0.9, 0.999, 1e-8, wd)) {
      backwardSquare(p);
      adamw.step();
      double[] expected = new double[start.length];
      for (int i = 0; i < start.length; ++i) expected[i] = start[i] * (1 - lr * wd) - lr * Math.signum(start[i]);
      assertClose(expected, p.toDoubleArray(), 1e-6);
      // The decay leaves the gradient alone.
      assertArrayEquals(new double[] {2.0, -4.0, 1.0}, grad(p));
    }
    // Adam with the same decay adds it to the gradient (L2): its first step is lr * sign.
    try (Tensor q = param(start); Optimizer adam = Optimizer.adam(List.of(q), lr, 0.9, 0.999, 1e-8, wd)) {
      backwardSquare(q);
      adam.step();
      assertClose(new double[] {0.99, -1.99, 0.49}, q.toDoubleArray(), 1e-6);
    }
    try (Tensor p = param(1.0); Optimizer defaults = Optimizer.adamw(List.of(p), 1e-3)) {
      assertEquals(1e-3, defaults.lr());
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.adamw(List.of(p), 0.1, 0.9, 1.0, 1e-8, 0));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.adamw(List.of(p), 0.1, 0.9, 0.999, 1e-8, -1));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.adamw(List.of(p, p), 0.1));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.adamw(null, 0.1));
    }
  }

  @Test
  void learningRateRoundTrip() {
    try (Tensor p = param(1.0, 2.0); Optimizer sgd = Optimizer.sgd(List.of(p), 0.1)) {
      assertEquals(0.1, sgd.lr());
      sgd.setLr(0.25);
      assertEquals(0.25, sgd.lr());
      for (double bad : new double[] {-1, Double.NaN, Double.POSITIVE_INFINITY}) {
        assertKoila(Code.INVALID_ARGUMENT, () -> sgd.setLr(bad));
        assertEquals(0.25, sgd.lr());
      }
      // The next step uses it: p - 0.25 * 2p = p / 2.
      backwardSquare(p);
      sgd.step();
      assertArrayEquals(new double[] {0.5, 1.0}, p.toDoubleArray());
    }
    Optimizer closed = Optimizer.sgd(List.of(param(1.0)), 0.1);
    closed.close();
    assertKoila(Code.INVALID_ARGUMENT, closed::lr);
  }

  /** Trains {@code m} for {@code steps} steps on a fixed batch. */
  private static void train(Module m, Optimizer opt, int steps) {
    Koila.manualSeed(11);
    long[] labels = new long[16];
    for (int i = 0; i < labels.length; ++i) labels[i] = (i * 3) % 10;
    try (Tensor x = Tensor.randn(16, 784);
        Tensor y = Tensor.fromLongs(labels, 16);
        Tensor xl = x.lazy(0);
        Tensor yl = y.lazy(0);
        Tensor logits = m.forward(xl);
        Tensor loss = logits.crossEntropy(yl, Reduction.MEAN)) {
      for (int step = 0; step < steps; ++step) {
        opt.zeroGrad();
        loss.backward();
        opt.step();
      }
    }
  }

  /** The parameters' bits. */
  private static List<List<Integer>> bits(Module m) {
    List<List<Integer>> out = new ArrayList<>();
    for (Tensor p : m.parameters()) {
      List<Integer> values = new ArrayList<>();
      for (float v : p.toFloatArray()) values.add(Float.floatToRawIntBits(v));
      out.add(values);
      p.close();
    }
    return out;
  }

  private static Optimizer adamwOver(Module m, double lr) {
    List<Tensor> params = m.parameters();
    try {
      return Optimizer.adamw(params, lr, 0.9, 0.999, 1e-8, 0.01);
    } finally {
      params.forEach(Tensor::close); // the optimizer keeps them
    }
  }

  @Test
  void aRunResumedFromItsCheckpointEqualsTheUninterruptedRun(@TempDir Path dir) {
    Path model = dir.resolve("model.pt");
    Path state = dir.resolve("adamw.state");
    List<List<Integer>> atCheckpoint;
    List<List<Integer>> uninterrupted;
    try (Module m = Module.load(TestSupport.mlp()); Optimizer opt = adamwOver(m, 1e-3)) {
      train(m, opt, 2);
      opt.setLr(5e-4);
      train(m, opt, 1);
      m.save(model);
      opt.save(state);
      atCheckpoint = bits(m);
      train(m, opt, 3);
      uninterrupted = bits(m);
    }
    assertFalse(atCheckpoint.equals(uninterrupted));
    // As a new process would: the module's file, a new optimizer (other hyperparameters: the
    // file's replace them), the optimizer's file.
    try (Module m = Module.load(model); Optimizer opt = adamwOver(m, 0.5)) {
      assertEquals(atCheckpoint, bits(m));
      opt.load(state.toString());
      assertEquals(5e-4, opt.lr());
      train(m, opt, 3);
      assertTrue(uninterrupted.equals(bits(m)), "the resumed run's parameters differ from the uninterrupted run's");
    }
    // Fresh moments instead of the file's: another run.
    try (Module m = Module.load(model); Optimizer opt = adamwOver(m, 5e-4)) {
      train(m, opt, 3);
      assertFalse(uninterrupted.equals(bits(m)));
    }
  }

  @Test
  void loadingABadFileChangesNothing(@TempDir Path dir) throws IOException {
    Path state = dir.resolve("adamw.state");
    try (Tensor p = param(1.0, 2.0, 3.0); Tensor wide = param(1, 1, 1, 1);
        Optimizer adamw = Optimizer.adamw(List.of(p), 0.01)) {
      backwardSquare(p);
      adamw.step();
      adamw.save(state);
      byte[] bytes = Files.readAllBytes(state);
      try (Optimizer other = Optimizer.adamw(List.of(p), 0.2)) {
        Path truncated = dir.resolve("truncated.state");
        Files.write(truncated, Arrays.copyOf(bytes, bytes.length / 2));
        assertKoila(Code.IO, () -> other.load(truncated));
        byte[] flipped = bytes.clone();
        flipped[flipped.length / 2] ^= 0x10;
        Path corrupt = dir.resolve("corrupt.state");
        Files.write(corrupt, flipped);
        assertKoila(Code.IO, () -> other.load(corrupt));
        assertKoila(Code.IO, () -> other.load(dir.resolve("missing.state")));
        assertEquals(0.2, other.lr());
        other.load(state);
        assertEquals(0.01, other.lr());
      }
      // Another kind, another shape, another count: INVALID_ARGUMENT, nothing changed.
      try (Optimizer sgd = Optimizer.sgd(List.of(p), 0.3);
          Optimizer adam = Optimizer.adam(List.of(p), 0.3);
          Optimizer wrongShape = Optimizer.adamw(List.of(wide), 0.3);
          Optimizer two = Optimizer.adamw(List.of(p, wide), 0.3)) {
        for (Optimizer o : List.of(sgd, adam, wrongShape, two)) {
          assertKoila(Code.INVALID_ARGUMENT, () -> o.load(state));
          assertEquals(0.3, o.lr());
        }
      }
      assertKoila(Code.IO, () -> adamw.save(dir.resolve("no/such/folder/x.state")));
      assertKoila(Code.INVALID_ARGUMENT, () -> adamw.save((String) null));
    }
  }

  @Test
  void clipGradNormByHand() {
    // Gradients [3, 4] and [12]: joint norm 13.
    try (Tensor p = param(1, 1); Tensor q = param(1); Tensor noGrad = param(5);
        Tensor c = floats(new double[] {3, 4}, 2); Tensor pc = p.mul(c); Tensor q12 = q.mul(12.0);
        Tensor a = pc.sum(); Tensor b = q12.sum(); Tensor loss = a.add(b)) {
      loss.backward();
      double norm = Optimizer.clipGradNorm(List.of(p, q, noGrad), 6.5);
      assertEquals(13.0, norm, 1e-5);
      double scale = 6.5 / (13.0 + 1e-6);
      assertClose(new double[] {3 * scale, 4 * scale}, grad(p), 1e-6);
      assertClose(new double[] {12 * scale}, grad(q), 1e-6);
      assertNull(noGrad.grad());
      // Under maxNorm nothing changes; the norm is the clipped one.
      double[] before = grad(p);
      assertEquals(6.5, Optimizer.clipGradNorm(List.of(p, q), 100), 1e-4);
      assertArrayEquals(before, grad(p));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.clipGradNorm(List.of(p), -1));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.clipGradNorm(List.of(p, p), 1));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.clipGradNorm(null, 1));
      // A NaN in a gradient: INVALID_ARGUMENT, no gradient changed.
      try (Tensor r = param(1, 2); Tensor nan = r.mul(Double.NaN); Tensor s = nan.sum()) {
        s.backward();
        KoilaException e = assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.clipGradNorm(List.of(p, r), 1));
        assertMessageContains(e, "norm");
        assertArrayEquals(before, grad(p));
      }
      // No gradient at all: 0, and no error.
      assertEquals(0.0, Optimizer.clipGradNorm(List.of(noGrad), 1));
    }
  }

  // ---------------------------------------------------------------------------------------
  // Direct buffers (DLPack)
  // ---------------------------------------------------------------------------------------

  private static FloatBuffer directFloats(float... values) {
    FloatBuffer b = ByteBuffer.allocateDirect(4 * values.length).order(ByteOrder.nativeOrder()).asFloatBuffer();
    b.put(values).flip();
    return b;
  }

  @Test
  void aDirectBufferIsSharedWithoutACopy() {
    long live = KoilaNative.dlpack_shared_buffers();
    FloatBuffer buffer = directFloats(1, -2, 3, -4);
    try (Tensor t = Tensor.fromDirectBuffer(buffer, new long[] {2, 2}, DType.FLOAT32)) {
      assertEquals(live + 1, KoilaNative.dlpack_shared_buffers());
      assertArrayEquals(new long[] {2, 2}, t.shape());
      assertFalse(t.isLazy());
      assertArrayEquals(new float[] {1, -2, 3, -4}, t.toFloatArray());
      // Writes into the buffer are seen by koila...
      buffer.put(0, 10);
      assertArrayEquals(new float[] {10, -2, 3, -4}, t.toFloatArray());
      // ...and an optimizer step is seen in the buffer: p - 0.25 * 2p = p / 2.
      t.setRequiresGrad(true);
      try (Optimizer sgd = Optimizer.sgd(List.of(t), 0.25)) {
        backwardSquare(t);
        sgd.step();
      }
      float[] after = new float[4];
      for (int i = 0; i < 4; ++i) after[i] = buffer.get(i);
      assertArrayEquals(new float[] {5, -1, 1.5f, -2}, after);
    }
    // The last tensor gone, the buffer's reference is released (the deleter ran once).
    assertEquals(live, KoilaNative.dlpack_shared_buffers());

    // A ByteBuffer takes any dtype; its position and limit bound the tensor.
    ByteBuffer bytes = ByteBuffer.allocateDirect(8 + 3 * 8).order(ByteOrder.nativeOrder());
    bytes.putLong(8, 7).putLong(16, -8).putLong(24, 9).position(8);
    try (Tensor t = Tensor.fromDirectBuffer(bytes, new long[] {3}, DType.INT64); Tensor lazy = t.lazy(0);
        Tensor doubled = lazy.mul(t)) {
      assertArrayEquals(new long[] {49, 64, 81}, doubled.toLongArray());
    }
    try (Tensor scalar = Tensor.fromDirectBuffer(directFloats(2.5f), new long[0], DType.FLOAT32)) {
      assertEquals(2.5, scalar.item());
    }
    assertEquals(live, KoilaNative.dlpack_shared_buffers());
  }

  @Test
  void aBufferThatDoesNotFitIsRefused() {
    long live = KoilaNative.dlpack_shared_buffers();
    FloatBuffer four = directFloats(1, 2, 3, 4);
    KoilaException e = assertKoila(Code.INVALID_ARGUMENT,
        () -> Tensor.fromDirectBuffer(four, new long[] {2, 3}, DType.FLOAT32));
    assertMessageContains(e, "[2, 3]", "6 elements", "16 bytes");
    assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.fromDirectBuffer(four, new long[] {3}, DType.FLOAT32));
    e = assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.fromDirectBuffer(four, new long[] {4}, DType.INT32));
    assertMessageContains(e, "a FloatBuffer does not hold INT32");
    e = assertKoila(Code.INVALID_ARGUMENT,
        () -> Tensor.fromDirectBuffer(FloatBuffer.wrap(new float[4]), new long[] {4}, DType.FLOAT32));
    assertMessageContains(e, "not direct");
    ByteOrder other = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN ? ByteOrder.BIG_ENDIAN
                                                                          : ByteOrder.LITTLE_ENDIAN;
    DoubleBuffer swapped = ByteBuffer.allocateDirect(16).order(other).asDoubleBuffer();
    e = assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.fromDirectBuffer(swapped, new long[] {2}, DType.FLOAT64));
    assertMessageContains(e, "byte order");
    assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.fromDirectBuffer(null, new long[] {1}, DType.FLOAT32));
    assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.fromDirectBuffer(four, null, DType.FLOAT32));
    // koila refuses these after taking the struct: the reference is released at once.
    e = assertKoila(Code.UNSUPPORTED,
        () -> Tensor.fromDirectBuffer(four.asReadOnlyBuffer(), new long[] {4}, DType.FLOAT32));
    assertMessageContains(e, "read-only");
    ByteBuffer odd = ByteBuffer.allocateDirect(9);
    odd.position(1);
    assertKoila(Code.UNSUPPORTED, () -> Tensor.fromDirectBuffer(odd, new long[] {2}, DType.FLOAT32));
    assertEquals(live, KoilaNative.dlpack_shared_buffers());
  }

  @Test
  void aTensorExportedAsADirectBuffer() {
    Tensor p = floats(new double[] {1, 2, 3, 4, 5, 6}, 2, 3).setRequiresGrad(true);
    ByteBuffer shared = p.toDirectBuffer();
    assertTrue(shared.isDirect());
    assertEquals(ByteOrder.nativeOrder(), shared.order());
    assertEquals(24, shared.capacity());
    FloatBuffer view = shared.asFloatBuffer();
    assertEquals(3.0f, view.get(2));
    // A step on the tensor is seen in the buffer, a write into the buffer by the tensor.
    try (Optimizer sgd = Optimizer.sgd(List.of(p), 1.0); Tensor loss = p.sum()) {
      loss.backward();
      sgd.step();
    }
    assertEquals(2.0f, view.get(2));
    view.put(0, 42);
    assertEquals(42.0, p.toDoubleArray()[0]);
    // The memory outlives the tensor while the buffer is reachable.
    p.close();
    assertEquals(42.0f, view.get(0));
    assertEquals(5.0f, view.get(5));
    // Round trip: a buffer koila exported, imported again, shares the memory.
    try (Tensor t = Tensor.fromInts(new int[] {1, 2, 3}, 3)) {
      ByteBuffer b = t.toDirectBuffer();
      try (Tensor u = Tensor.fromDirectBuffer(b, new long[] {3}, DType.INT32)) {
        b.putInt(4, 20);
        assertArrayEquals(new int[] {1, 20, 3}, u.toIntArray());
        assertArrayEquals(new int[] {1, 20, 3}, t.toIntArray());
      }
    }
    // Lazy tensors are evaluated; empty ones give an empty buffer.
    try (Tensor x = floats(new double[] {1, 2}, 2); Tensor lazy = x.lazy(0); Tensor y = lazy.mul(3.0)) {
      assertEquals(6.0f, y.toDirectBuffer().asFloatBuffer().get(1));
    }
    try (Tensor empty = Tensor.zeros(0, 3)) {
      assertEquals(0, empty.toDirectBuffer().capacity());
    }
    // A buffer nobody holds any more gives its memory back (the cleaner calls the deleter).
    TestSupport.settleMemory();
    long before = Koila.memoryStats("cpu").currentBytes();
    for (int i = 0; i < 8; ++i) {
      try (Tensor big = Tensor.zeros(1 << 20)) {
        assertEquals(4 << 20, big.toDirectBuffer().capacity());
      }
    }
    TestSupport.settleMemory();
    long after = Koila.memoryStats("cpu").currentBytes();
    assertTrue(after < before + (4 << 20), "exported buffers still hold " + (after - before) + " bytes");
    // A transposed view is not row-major: UNSUPPORTED, saying so.
    try (Tensor m = floats(new double[] {1, 2, 3, 4, 5, 6}, 2, 3); Tensor mt = m.transpose(0, 1)) {
      KoilaException e = assertKoila(Code.UNSUPPORTED, mt::toDirectBuffer);
      assertMessageContains(e, "contiguous", "toBytes");
    }
  }

  private static float[] draw() {
    try (Tensor t = Tensor.randn(16)) {
      return t.toFloatArray();
    }
  }

  /** The draws after a load are those that followed the save; a bad file changes nothing. */
  @Test
  void rngFilePutsTheGeneratorsBack(@TempDir Path dir) throws IOException {
    String path = dir.resolve("rng.bin").toString();
    Koila.manualSeed(3);
    draw();
    Koila.rngSave(path);
    float[] afterSave = draw();
    float[] later = draw();
    assertFalse(Arrays.equals(afterSave, later));
    Koila.rngLoad(path);
    assertArrayEquals(afterSave, draw());
    assertArrayEquals(later, draw());

    Files.write(dir.resolve("garbage.bin"), "not a generator file".getBytes());
    for (String bad : new String[] {dir.resolve("missing.bin").toString(), dir.resolve("garbage.bin").toString()}) {
      Koila.rngLoad(path);
      KoilaException e = assertKoila(Code.IO, () -> Koila.rngLoad(bad));
      assertMessageContains(e, "no generator is changed");
      assertArrayEquals(afterSave, draw(), "a failed load changed a generator");
    }
    assertKoila(Code.INVALID_ARGUMENT, () -> Koila.rngSave(null));
  }
}
