package org.koila;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.koila.TestSupport.assertClose;
import static org.koila.TestSupport.assertShape;
import static org.koila.TestSupport.toDoubles;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** TorchScript modules (mlp.pt: linear 784->256, relu, linear 256->10) and optimizers. */
class ModuleTest {
  @Test
  void parameters() {
    try (Module m = Module.load(TestSupport.mlp(), "cpu")) {
      assertEquals(4, m.numParameters());
      assertEquals(List.of("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"), m.parameterNames());
      assertEquals("fc1.weight", m.parameterName(0));
      long[][] shapes = {{256, 784}, {256}, {10, 256}, {10}};
      List<Tensor> params = m.parameters();
      for (int i = 0; i < 4; ++i) {
        assertArrayEquals(shapes[i], params.get(i).shape());
        assertEquals(DType.FLOAT32, params.get(i).dtype());
        assertFalse(params.get(i).isLazy());
      }
      Map<String, Tensor> named = m.namedParameters();
      assertArrayEquals(new long[] {10}, named.get("fc2.bias").shape());
      assertArrayEquals(params.get(3).toFloatArray(), named.get("fc2.bias").toFloatArray());
      params.forEach(Tensor::close);
      named.values().forEach(Tensor::close);
      assertTrue(m.isTraining());
      assertEquals(m, m.train(false));
      assertFalse(m.isTraining());
      m.train(true);
      assertTrue(m.isTraining());
    }
  }

  /** The module's forward equals the same computation with koila's ops on its parameters. */
  @Test
  void forwardMatchesTheOps() {
    Koila.manualSeed(11);
    Module m = Module.load(TestSupport.mlp());
    try (Tensor x = Tensor.randn(6, 784)) {
      List<Tensor> p = m.parameters();
      Tensor reference = x.linear(p.get(0), p.get(1)).relu().linear(p.get(2), p.get(3));
      Tensor eager = m.forward(x);
      assertFalse(eager.isLazy());
      assertShape(eager, 6, 10);
      assertClose(reference.toDoubleArray(), eager.toDoubleArray(), 1e-5);
      Tensor lazy = m.forward(x.lazy(0));
      assertTrue(lazy.isLazy());
      assertShape(lazy, 6, 10);
      assertEquals(0, lazy.batchDim());
      assertEquals(DType.FLOAT32, lazy.dtype());
      assertClose(reference.toDoubleArray(), lazy.toDoubleArray(), 1e-5);
      // Results keep what they need: the module and parameter handles may go first.
      p.forEach(Tensor::close);
      m.close();
      assertClose(reference.toDoubleArray(), lazy.toDoubleArray(), 1e-5);
    }
  }

  @Test
  void saveAndReloadUnderAUnicodePath(@TempDir Path dir) {
    Path path = dir.resolve("modèle-训练-🙂.pt");
    Koila.manualSeed(12);
    try (Module m = Module.load(TestSupport.mlp()); Tensor x = Tensor.randn(3, 784)) {
      try (Tensor w = m.parameter(3)) {
        try (Tensor loss = m.forward(x).sum()) {
          loss.backward();
        }
        try (Optimizer opt = Optimizer.sgd(List.of(w), 0.5)) {
          opt.step();
        }
      }
      m.save(path);
      try (Module again = Module.load(path, "cpu")) {
        assertArrayEquals(m.forward(x).toFloatArray(), again.forward(x).toFloatArray(), "saved with the update");
        assertEquals(m.parameterNames(), again.parameterNames());
      }
    }
  }

  /** Two SGD steps with momentum and weight decay against the update worked out in Java. */
  @Test
  void sgdStepMatchesTheHandComputedUpdate() {
    double lr = 0.1;
    double momentum = 0.9;
    double decay = 0.01;
    double[] p = {1, -2, 3};
    double[] buf = new double[3];
    try (Tensor param = TestSupport.floats(p, 3).setRequiresGrad(true);
        Optimizer opt = Optimizer.sgd(List.of(param), lr, momentum, decay)) {
      for (int step = 0; step < 2; ++step) {
        opt.zeroGrad();
        try (Tensor loss = param.mul(param).sum()) { // grad = 2 p
          loss.backward();
        }
        opt.step();
        for (int i = 0; i < 3; ++i) {
          double d = 2 * p[i] + decay * p[i];
          buf[i] = step == 0 ? d : momentum * buf[i] + d;
          p[i] -= lr * buf[i];
        }
        assertClose(p, toDoubles(param.toFloatArray()), 1e-6);
      }
      opt.zeroGrad();
      Tensor g = param.grad();
      assertNotNull(g);
      assertArrayEquals(new float[3], g.toFloatArray());
    }
  }

  @Test
  void plainSgdAndAdam() {
    try (Tensor a = TestSupport.floats(new double[] {1, 2, 3}, 3).setRequiresGrad(true);
        Tensor b = TestSupport.floats(new double[] {1, -2, 3}, 3).setRequiresGrad(true);
        Tensor untouched = Tensor.ones(2).setRequiresGrad(true);
        Optimizer sgd = Optimizer.sgd(List.of(a, untouched), 0.1);
        Optimizer adam = Optimizer.adam(List.of(b), 0.1)) {
      a.mul(a).sum().backward();
      sgd.step(); // a - 0.1 * 2a
      assertValues(new double[] {0.8, 1.6, 2.4}, a, "plain SGD");
      assertValues(new double[] {1, 1}, untouched, "a parameter without a gradient is skipped");
      b.mul(b).sum().backward();
      adam.step(); // first Adam step: m^ = g, v^ = g^2, so b - lr * g / (|g| + eps)
      assertValues(new double[] {0.9, -1.9, 2.9}, b, "one Adam step");
    }
  }

  private static void assertValues(double[] expected, Tensor actual, String message) {
    assertArrayEquals(expected, actual.toDoubleArray(), 1e-6, message);
  }

  /** Trains mlp.pt a few Adam steps on a lazy batch built once; the loss goes down. */
  @Test
  void trainingLoop() {
    Koila.manualSeed(13);
    long[] labels = new long[48];
    for (int i = 0; i < labels.length; ++i) labels[i] = i % 10;
    try (Module m = Module.load(TestSupport.mlp());
        Tensor data = Tensor.randn(48, 784);
        Tensor y = Tensor.fromLongs(labels, 48);
        Tensor loss = m.forward(data.lazy(0)).crossEntropy(y.lazy(0), Reduction.MEAN);
        Optimizer opt = Optimizer.adam(m.parameters(), 1e-3)) {
      assertTrue(loss.isLazy());
      double first = 0;
      double last = 0;
      for (int step = 0; step < 5; ++step) {
        opt.zeroGrad();
        double value = loss.item();
        loss.backward();
        opt.step();
        if (step == 0) first = value;
        last = value;
      }
      assertTrue(last < first, "loss " + first + " -> " + last);
      try (Tensor p0 = m.parameter(0); Tensor g = p0.grad()) {
        assertNotNull(g);
        assertShape(g, 256, 784);
      }
    }
  }

  /**
   * A torch.export program (convbn_train.pt2, PyTorch 2.14.1: conv, batch norm in training
   * mode, linear): its kind, names, fixed mode, and running statistics seen through buffers.
   */
  @Test
  void exportedProgram() {
    try (Module m = Module.load(TestSupport.models().resolve("convbn_train.pt2"));
        Module script = Module.load(TestSupport.mlp())) {
      assertEquals(ModuleKind.EXPORTED, m.moduleKind());
      assertEquals(ModuleKind.TORCHSCRIPT, script.moduleKind());
      assertEquals(0, script.numBuffers());
      assertEquals(
          List.of("conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias"), m.parameterNames());
      assertEquals(3, m.numBuffers());
      assertEquals("bn.num_batches_tracked", m.bufferName(2));
      Map<String, Tensor> buffers = m.namedBuffers();
      assertEquals(List.of("bn.running_mean", "bn.running_var", "bn.num_batches_tracked"), List.copyOf(buffers.keySet()));
      assertEquals(Code.INVALID_ARGUMENT, assertThrows(KoilaException.class, () -> m.buffer(3)).code());
      assertTrue(m.isTraining());
      KoilaException e = assertThrows(KoilaException.class, () -> m.train(false));
      assertEquals(Code.UNSUPPORTED, e.code());
      assertTrue(e.getMessage().contains("exported in training mode"), e.getMessage());

      Tensor tracked = buffers.get("bn.num_batches_tracked");
      long before = tracked.toLongArray()[0];
      Koila.manualSeed(5);
      try (Tensor x = Tensor.randn(8, 3, 6, 6);
          Tensor y = Tensor.fromLongs(new long[] {0, 1, 2, 3, 4, 0, 1, 2}, 8)) {
        Tensor logits = m.forward(x.lazy(0));
        assertShape(logits, 8, 5);
        logits.crossEntropy(y.lazy(0), Reduction.MEAN).backward();
        assertEquals(before + 1, tracked.toLongArray()[0]);
        for (Tensor p : m.parameters()) assertNotNull(p.grad());
      }
      buffers.values().forEach(Tensor::close);
    }
  }

  /**
   * Several results: nn.LSTM's whole return, (output, (h, c)), exported by PyTorch 2.14.1
   * (lstm_full.pt2); h and c carry the batch in dim 1.
   */
  @Test
  void severalResults() {
    try (Module m = Module.load(TestSupport.models().resolve("lstm_full.pt2"));
        Module script = Module.load(TestSupport.mlp())) {
      Koila.manualSeed(6);
      try (Tensor x = Tensor.randn(8, 5, 4)) {
        Tensor[] results = m.forwardAll(x.lazy(0));
        assertEquals(3, results.length);
        assertShape(results[0], 8, 5, 6);
        assertShape(results[1], 2, 8, 6);
        assertShape(results[2], 2, 8, 6);
        assertEquals(0, results[0].batchDim());
        assertEquals(1, results[1].batchDim());
        assertEquals(1, results[2].batchDim());
        Tensor loss = null;
        for (Tensor r : results) {
          Tensor term = r.mul(r).mean();
          loss = loss == null ? term : loss.add(term);
        }
        loss.backward();
        for (Tensor p : m.parameters()) assertNotNull(p.grad());
        // The top layer's h is the output's last step.
        float[] out = results[0].toFloatArray();
        float[] h = results[1].toFloatArray();
        for (int sample = 0; sample < 8; ++sample)
          for (int j = 0; j < 6; ++j)
            assertEquals(out[(sample * 5 + 4) * 6 + j], h[(8 + sample) * 6 + j], 1e-6f);
      }
      try (Tensor x = Tensor.randn(4, 784)) {
        assertEquals(1, script.forwardAll(x).length);
      }
    }
  }
}
