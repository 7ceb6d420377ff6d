package org.koila;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.koila.TestSupport.assertKoila;
import static org.koila.TestSupport.assertMessageContains;

import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Errors: the right code and a clear message for every bad input, never a crash. */
class ErrorTest {
  @Test
  void shapeMismatchNamesBothShapes() {
    try (Tensor a = Tensor.ones(2, 3); Tensor b = Tensor.ones(4)) {
      KoilaException e = assertKoila(Code.SHAPE, () -> a.add(b));
      assertMessageContains(e, "koila_add", "[2, 3]", "[4]");
      assertKoila(Code.SHAPE, () -> a.lazy(0).add(b)); // reported when built, not when read
      assertKoila(Code.SHAPE, () -> a.matmul(a));
      assertKoila(Code.SHAPE, () -> a.reshape(4, 2));
      assertKoila(Code.SHAPE, () -> Tensor.cat(new Tensor[] {a, b}, 0));
    }
  }

  @Test
  void badDtypes() {
    try (Tensor f = Tensor.ones(3); Tensor i = Tensor.ones(new long[] {3}, DType.INT64)) {
      assertKoila(Code.DTYPE, () -> i.setRequiresGrad(true));
      assertKoila(Code.DTYPE, () -> Tensor.randn(new long[] {1}, DType.BOOL));
      // The embedding indices must be integers.
      assertTrue(assertThrows(KoilaException.class, () -> f.reshape(3, 1).embedding(f)).code() != Code.OK);
    }
  }

  @Test
  void nullArguments() {
    try (Tensor a = Tensor.ones(2)) {
      assertMessageContains(assertKoila(Code.INVALID_ARGUMENT, () -> a.add(null)), "other", "null");
      assertKoila(Code.INVALID_ARGUMENT, () -> a.linear(null, null));
      assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.cat((Tensor[]) null, 0));
      assertMessageContains(assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.stack(new Tensor[] {a, null}, 0)),
          "tensors[1]");
      assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.fromFloats(null, 2));
      assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.fromFloats(new float[] {1}, (long[]) null));
      assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.zeros(new long[] {1}, null));
      assertKoila(Code.INVALID_ARGUMENT, () -> a.mseLoss(a, null));
      assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.zeros(new long[] {1}, DType.FLOAT32, null));
      assertKoila(Code.INVALID_ARGUMENT, () -> Plan.of(null, Mode.FORWARD));
      assertKoila(Code.INVALID_ARGUMENT, () -> Plan.of(a, null));
      assertKoila(Code.INVALID_ARGUMENT, () -> Module.load((String) null));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.sgd(null, 0.1));
      assertKoila(Code.INVALID_ARGUMENT, () -> Koila.memoryStats(null));
    }
  }

  @Test
  void badValues() {
    try (Tensor a = Tensor.ones(2, 3); Tensor img = Tensor.ones(1, 1, 4, 4); Tensor w = Tensor.ones(1, 1, 2, 2)) {
      assertMessageContains(assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.fromFloats(new float[] {1, 2, 3}, 2, 2)),
          "3 values", "[2, 2]", "4 elements");
      assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.zeros(2, -1));
      assertMessageContains(assertKoila(Code.INVALID_ARGUMENT, a::item), "exactly one element");
      assertKoila(Code.INVALID_ARGUMENT, () -> a.softmax(2));
      assertKoila(Code.INVALID_ARGUMENT, () -> a.dropout(1.5, true));
      assertKoila(Code.INVALID_ARGUMENT, () -> a.narrow(1, 2, 5));
      assertMessageContains(assertKoila(Code.INVALID_ARGUMENT,
          () -> img.conv2d(w, null, new long[] {1, 1, 1}, null, null, 1)), "stride", "1 or 2 values");
      assertKoila(Code.INVALID_ARGUMENT, () -> img.reshape(1, 4, 4).conv1d(w.reshape(1, 1, 4), null,
          new long[] {1, 1}, null, null, 1));
      assertKoila(Code.INVALID_ARGUMENT, () -> img.maxPool2d(2, 2, 2));
      assertKoila(Code.INVALID_ARGUMENT, () -> img.maxPool2d((long[]) null, null, null, false));
      assertKoila(Code.INVALID_ARGUMENT, () -> Koila.setMemoryBudget("cpu", -1));
      assertKoila(Code.INVALID_ARGUMENT, () -> a.size(2));
    }
  }

  @Test
  void badDevices() {
    assertKoila(Code.DEVICE, () -> Tensor.zeros(new long[] {1}, DType.FLOAT32, "cuda:7"));
    assertKoila(Code.DEVICE, () -> Tensor.zeros(new long[] {1}, DType.FLOAT32, "tpu"));
    assertKoila(Code.DEVICE, () -> Koila.memoryStats("cuda:7"));
    // A device name with a NUL cannot reach C intact: refused before the call.
    assertThrows(IllegalArgumentException.class, () -> Tensor.zeros(new long[] {1}, DType.FLOAT32, "cpu\0x"));
  }

  @Test
  void badFiles(@TempDir Path dir) {
    Path missing = dir.resolve("no-such-model.pt");
    assertMessageContains(assertKoila(Code.IO, () -> Module.load(missing, "cpu")), missing.toString());
    Path garbage = dir.resolve("garbage.pt");
    assertDoesNotThrow(() -> java.nio.file.Files.write(garbage, new byte[] {1, 2, 3, 4}));
    assertMessageContains(assertKoila(Code.IO, () -> Module.load(garbage, "cpu")), garbage.toString());
    try (Module m = Module.load(TestSupport.mlp(), "cpu")) {
      assertKoila(Code.IO, () -> m.save(dir.resolve("no/such/dir/m.pt")));
    }
  }

  @Test
  void useAfterClose() {
    Tensor t = Tensor.ones(2);
    Tensor other = Tensor.ones(2);
    assertFalse(t.isClosed());
    t.close();
    assertTrue(t.isClosed());
    t.close(); // idempotent
    assertMessageContains(assertKoila(Code.INVALID_ARGUMENT, t::sum), "closed");
    assertKoila(Code.INVALID_ARGUMENT, t::shape);
    assertKoila(Code.INVALID_ARGUMENT, t::item);
    assertKoila(Code.INVALID_ARGUMENT, t::toFloatArray);
    assertKoila(Code.INVALID_ARGUMENT, t::backward);
    assertKoila(Code.INVALID_ARGUMENT, () -> t.lazy(0));
    assertMessageContains(assertKoila(Code.INVALID_ARGUMENT, () -> other.add(t)), "other", "closed");
    assertKoila(Code.INVALID_ARGUMENT, () -> other.linear(other.reshape(1, 2), t));
    assertKoila(Code.INVALID_ARGUMENT, () -> Tensor.cat(List.of(other, t), 0));
    assertKoila(Code.INVALID_ARGUMENT, () -> Plan.of(t, Mode.FORWARD));
    assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.sgd(List.of(t), 0.1));
    assertEquals(2.0, other.sum().item(), "other handles stay valid");
    other.close();

    Plan plan;
    try (Tensor x = Tensor.ones(4, 2)) {
      plan = Plan.of(x.lazy(0).sum(), Mode.FORWARD);
    }
    assertEquals(4, plan.batchSize(), "a plan outlives its tensor");
    plan.close();
    assertKoila(Code.INVALID_ARGUMENT, plan::numChunks);
    assertKoila(Code.INVALID_ARGUMENT, plan::describe);
    assertEquals("Plan(closed)", plan.toString());

    Module m = Module.load(TestSupport.mlp());
    m.close();
    m.close();
    assertKoila(Code.INVALID_ARGUMENT, m::numParameters);
    assertKoila(Code.INVALID_ARGUMENT, () -> m.forward(Tensor.ones(1, 784)));

    Tensor p = Tensor.ones(2).setRequiresGrad(true);
    Optimizer opt = Optimizer.sgd(List.of(p), 0.1);
    opt.close();
    assertKoila(Code.INVALID_ARGUMENT, opt::step);
    assertKoila(Code.INVALID_ARGUMENT, opt::zeroGrad);
    p.close();
  }

  @Test
  void moduleErrors() {
    try (Module m = Module.load(TestSupport.mlp()); Tensor bad = Tensor.ones(2, 5); Tensor x = Tensor.ones(2, 784)) {
      assertKoila(Code.SHAPE, () -> m.forward(bad));
      assertKoila(Code.SHAPE, () -> m.forward(bad.lazy(0)));
      assertKoila(Code.INVALID_ARGUMENT, () -> m.forward(x, x));
      assertKoila(Code.INVALID_ARGUMENT, () -> m.forward());
      assertKoila(Code.INVALID_ARGUMENT, () -> m.forward((Tensor) null));
      assertKoila(Code.INVALID_ARGUMENT, () -> m.parameter(4));
      assertKoila(Code.INVALID_ARGUMENT, () -> m.parameter(-1));
      assertKoila(Code.INVALID_ARGUMENT, () -> m.parameterName(99));
    }
  }

  @Test
  void optimizerErrors() {
    try (Tensor p = Tensor.ones(2).setRequiresGrad(true); Tensor q = Tensor.ones(new long[] {2}, DType.INT64)) {
      assertKoila(Code.DTYPE, () -> Optimizer.sgd(List.of(q), 0.1));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.sgd(List.of(p), -0.1));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.sgd(List.of(p), Double.NaN));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.adam(List.of(p), 0.1, 1.0, 0.999, 1e-8, 0));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.sgd(List.of(p, p), 0.1));
      assertKoila(Code.INVALID_ARGUMENT, () -> Optimizer.sgd(List.of(p.lazy(0)), 0.1));
    }
  }

  @Test
  void exceptionsCarryTheirCode() {
    KoilaException e = new KoilaException(Code.SHAPE, "bad");
    assertEquals(Code.SHAPE, e.code());
    assertEquals("bad", e.getMessage());
    assertEquals("org.koila.KoilaException[SHAPE]: bad", e.toString());
    assertTrue(RuntimeException.class.isInstance(e));
    for (Code c : Code.values()) assertEquals(c, Code.of(c.value()));
    assertEquals(Code.INTERNAL, Code.of(1234));
    for (DType d : DType.values()) assertEquals(d, DType.of(d.value()));
    assertKoila(Code.DTYPE, () -> DType.of(99));
  }
}
