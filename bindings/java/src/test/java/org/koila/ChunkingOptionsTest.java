package org.koila;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.koila.TestSupport.assertKoila;
import static org.koila.TestSupport.assertMessageContains;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.koila.raw.KoilaNative;
import org.koila.raw.koila_code;

/**
 * Chunking options: {@link Koila#setBatchStats} (batch norm in training, exact or per chunk)
 * and {@link Koila#setChunking}. They are process-wide; this suite runs in a JVM of its own
 * (ctest java.chunking), one test at a time, and every test restores the defaults.
 */
class ChunkingOptionsTest {
  private static final double MOMENTUM = 0.1;
  private static final int HIDDEN = 1024;

  @AfterEach
  void restoreDefaults() {
    Koila.setBatchStats(BatchStats.EXACT);
    Koila.setChunking(Chunking.LARGEST);
    Koila.setMemoryBudget("cpu", 0);
  }

  @Test
  void settersTakeEveryValueAndTheCFunctionsRejectUnknownOnes() {
    for (BatchStats policy : BatchStats.values()) Koila.setBatchStats(policy);
    for (Chunking policy : Chunking.values()) Koila.setChunking(policy);
    assertKoila(Code.INVALID_ARGUMENT, () -> Koila.setBatchStats(null));
    assertKoila(Code.INVALID_ARGUMENT, () -> Koila.setChunking(null));
    for (int raw : new int[] {-1, 2, 7, Integer.MAX_VALUE}) {
      long status = KoilaNative.koila_set_batch_stats(raw);
      assertTrue(status != 0, "koila_set_batch_stats(" + raw + ") succeeded");
      assertEquals(koila_code.KOILA_ERROR_INVALID_ARGUMENT, KoilaNative.koila_status_code(status));
      KoilaNative.koila_status_free(status);
      status = KoilaNative.koila_set_chunking(raw);
      assertTrue(status != 0, "koila_set_chunking(" + raw + ") succeeded");
      assertEquals(koila_code.KOILA_ERROR_INVALID_ARGUMENT, KoilaNative.koila_status_code(status));
      KoilaNative.koila_status_free(status);
    }
  }

  @Test
  void batchNormInTrainingSplitsOnlyWithStatisticsPerChunk() {
    try (BatchNormNet net = new BatchNormNet(31, 64)) {
      try (Plan plan = net.loss.plan(Mode.TRAINING)) {
        assertEquals(1, plan.numChunks(), plan.describe());
      }
      // A budget under which the batch splits (found with statistics per chunk).
      Koila.setBatchStats(BatchStats.PER_CHUNK);
      setSplittingBudget(net.loss);

      // EXACT: batch norm couples the batch; the error names the option.
      Koila.setBatchStats(BatchStats.EXACT);
      KoilaException e = assertKoila(Code.NOT_SPLITTABLE, () -> net.loss.plan(Mode.TRAINING));
      assertMessageContains(e, "koila_set_batch_stats(KOILA_BATCH_STATS_PER_CHUNK)");
      assertKoila(Code.NOT_SPLITTABLE, net.loss::backward);
      for (Tensor p : net.params) assertNull(p.grad(), "a refused backward left a gradient");
      assertArrayEquals(new float[HIDDEN], net.runningMean.toFloatArray(), "a refused backward moved runningMean");

      // PER_CHUNK: the same graph plans split and says so; the backward runs.
      Koila.setBatchStats(BatchStats.PER_CHUNK);
      try (Plan plan = net.loss.plan(Mode.TRAINING)) {
        String text = plan.describe();
        assertTrue(plan.numChunks() > 1, text);
        assertTrue(text.contains("Batch statistics: per chunk"), text);
      }
      net.loss.backward();
      for (int k = 0; k < net.params.size(); ++k) {
        try (Tensor g = net.params.get(k).grad()) {
          assertNotNull(g, "parameter " + k + " has no gradient");
          boolean nonzero = false;
          for (float v : g.toFloatArray()) {
            assertTrue(Float.isFinite(v), "parameter " + k + ": " + v);
            nonzero |= v != 0;
          }
          assertTrue(nonzero, "parameter " + k + ": all zero");
        }
      }
      // One update of the running statistics, with the whole batch's, as an unsplit run makes.
      float[][] expected = net.expectedRunningStats();
      assertClose(expected[0], net.runningMean.toFloatArray(), 1e-4, "runningMean");
      assertClose(expected[1], net.runningVar.toFloatArray(), 1e-4, "runningVar");
    }
  }

  @Test
  void statisticsPerChunkLeaveAnUnsplitRunUnchanged() {
    try (BatchNormNet exact = new BatchNormNet(32, 64)) {
      double exactLoss = exact.loss.item();
      exact.loss.backward();
      Koila.setBatchStats(BatchStats.PER_CHUNK);
      try (BatchNormNet perChunk = new BatchNormNet(32, 64)) {
        try (Plan plan = perChunk.loss.plan(Mode.TRAINING)) {
          assertEquals(1, plan.numChunks(), plan.describe());
        }
        assertEquals(exactLoss, perChunk.loss.item());
        perChunk.loss.backward();
        for (int k = 0; k < exact.params.size(); ++k) {
          try (Tensor a = exact.params.get(k).grad(); Tensor b = perChunk.params.get(k).grad()) {
            assertArrayEquals(a.toFloatArray(), b.toFloatArray(), "parameter " + k);
          }
        }
        assertArrayEquals(exact.runningMean.toFloatArray(), perChunk.runningMean.toFloatArray());
        assertArrayEquals(exact.runningVar.toFloatArray(), perChunk.runningVar.toFloatArray());
      }
    }
  }

  @Test
  void fastestChunkingGivesTheSameResults() {
    Koila.manualSeed(33);
    int batch = 200;
    long[] labels = new long[batch];
    for (int i = 0; i < batch; ++i) labels[i] = (i * 7) % 10;
    List<Tensor> params = new ArrayList<>();
    try (Tensor data = Tensor.randn(batch, 64);
        Tensor target = Tensor.fromLongs(labels, batch);
        Tensor w1 = param(256, 64);
        Tensor b1 = param(256);
        Tensor w2 = param(10, 256);
        Tensor x = data.lazy(0);
        Tensor y = target.lazy(0);
        Tensor loss = x.linear(w1, b1).tanh().linear(w2, null).crossEntropy(y, Reduction.MEAN)) {
      params.add(w1);
      params.add(b1);
      params.add(w2);
      double expectedLoss = loss.item();
      loss.backward();
      List<float[]> expected = gradients(params);

      Koila.setChunking(Chunking.FASTEST);
      // Unsplit and under a budget that splits; several runs, as the candidates are timed.
      for (boolean split : new boolean[] {false, true}) {
        if (split) setSplittingBudget(loss);
        for (int run = 0; run < 3; ++run) {
          try (Plan plan = loss.plan(Mode.TRAINING)) {
            assertTrue(plan.peakBytes() <= plan.budgetBytes(), plan.describe());
          }
          params.forEach(Tensor::zeroGrad);
          assertEquals(expectedLoss, loss.item(), 1e-5 * Math.abs(expectedLoss), "the loss");
          loss.backward();
          List<float[]> actual = gradients(params);
          for (int k = 0; k < params.size(); ++k) assertClose(expected.get(k), actual.get(k), 1e-5, "parameter " + k);
        }
      }
    }
  }

  private static Tensor param(long... shape) {
    try (Tensor r = Tensor.randn(shape)) {
      return r.mul(0.1).setRequiresGrad(true);
    }
  }

  private static List<float[]> gradients(List<Tensor> params) {
    List<float[]> out = new ArrayList<>();
    for (Tensor p : params) {
      try (Tensor g = p.grad()) {
        assertNotNull(g);
        out.add(g.toFloatArray());
      }
    }
    return out;
  }

  private static void assertClose(float[] expected, float[] actual, double tolerance, String what) {
    assertEquals(expected.length, actual.length, what + ": length");
    for (int i = 0; i < expected.length; ++i) {
      if (!(Math.abs(expected[i] - actual[i]) <= tolerance * (1 + Math.abs(expected[i])))) {
        fail(what + " element " + i + ": expected " + expected[i] + " but got " + actual[i]);
      }
    }
  }

  /**
   * Sets the largest CPU budget, in steps of a twentieth of what the unsplit run adds to
   * what is in use, under which a backward from {@code loss} runs in more than one chunk.
   */
  private static void setSplittingBudget(Tensor loss) {
    Koila.setMemoryBudget("cpu", 0);
    TestSupport.settleMemory();
    long current = Koila.memoryStats("cpu").currentBytes();
    long full;
    try (Plan plan = loss.plan(Mode.TRAINING)) {
      full = plan.fullPeakBytes();
    }
    assertTrue(full > current, "the unsplit run needs more than what is in use");
    for (int twentieths = 19; twentieths >= 1; --twentieths) {
      Koila.setMemoryBudget("cpu", current + (full - current) * twentieths / 20);
      try (Plan plan = loss.plan(Mode.TRAINING)) {
        if (plan.numChunks() > 1) return;
      } catch (KoilaException e) {
        // Too small for any chunk, or not splittable: try the next.
      }
    }
    Koila.setMemoryBudget("cpu", 0);
    fail("no budget between " + current + " and " + full + " bytes splits the batch");
  }

  /**
   * Linear(32, HIDDEN), BatchNorm1d(HIDDEN) in training (running statistics from zeros and
   * ones), ReLU, Linear(HIDDEN, 10), mean cross-entropy, over a lazy batch. Wide and thin, so
   * that activations, not parameters, dominate even for 64 samples.
   */
  private static final class BatchNormNet implements AutoCloseable {
    final Tensor data, target, runningMean, runningVar, loss;
    final List<Tensor> params = new ArrayList<>();
    private final List<Tensor> intermediates = new ArrayList<>();

    BatchNormNet(long seed, int batch) {
      Koila.manualSeed(seed);
      long[] labels = new long[batch];
      for (int i = 0; i < batch; ++i) labels[i] = (i * 3) % 10;
      data = Tensor.randn(batch, 32);
      target = Tensor.fromLongs(labels, batch);
      params.add(param(HIDDEN, 32));
      params.add(param(HIDDEN));
      params.add(param(HIDDEN));
      params.add(param(HIDDEN));
      params.add(param(10, HIDDEN));
      runningMean = Tensor.zeros(HIDDEN);
      runningVar = Tensor.ones(HIDDEN);
      Tensor x = keep(data.lazy(0));
      Tensor h = keep(x.linear(params.get(0), params.get(1)));
      Tensor n = keep(h.batchNorm(params.get(2), params.get(3), runningMean, runningVar, true, MOMENTUM, 1e-5));
      Tensor logits = keep(keep(n.relu()).linear(params.get(4), null));
      loss = logits.crossEntropy(keep(target.lazy(0)), Reduction.MEAN);
    }

    private Tensor keep(Tensor t) {
      intermediates.add(t);
      return t;
    }

    /**
     * What one update with the whole batch leaves in the running statistics, from zeros and
     * ones: momentum times the batch's mean, and 1 - momentum + momentum times its unbiased
     * variance, of the first linear layer's output (computed eagerly).
     */
    float[][] expectedRunningStats() {
      try (Tensor h = data.linear(params.get(0), params.get(1));
          Tensor mean = h.mean(new long[] {0}, true);
          Tensor centered = h.sub(mean);
          Tensor squares = centered.mul(centered);
          Tensor sum = squares.sum(new long[] {0}, false);
          Tensor var = sum.mul(MOMENTUM / (h.shape()[0] - 1));
          Tensor scaledMean = mean.mul(MOMENTUM)) {
        float[] m = scaledMean.toFloatArray();
        float[] v = var.toFloatArray();
        for (int i = 0; i < v.length; ++i) v[i] += (float) (1 - MOMENTUM);
        return new float[][] {m, v};
      }
    }

    @Override
    public void close() {
      loss.close();
      intermediates.forEach(Tensor::close);
      params.forEach(Tensor::close);
      for (Tensor t : List.of(runningVar, runningMean, target, data)) t.close();
    }
  }
}
