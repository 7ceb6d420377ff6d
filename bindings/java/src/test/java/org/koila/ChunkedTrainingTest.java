package org.koila;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The point of koila: a backward pass split into chunks of the batch, because the budget
 * does not fit the whole batch, gives the gradients of the unsplit run.
 *
 * <p>Chunking has a fixed cost (a gradient accumulator per parameter, 0.8 MB for mlp.pt), so
 * the batch is large enough (thousands of samples) for the activations to dominate and a
 * budget a quarter of the way to the unsplit peak to leave room for chunks.
 */
class ChunkedTrainingTest {
  @AfterEach
  void restoreBudget() {
    Koila.setMemoryBudget("cpu", 0);
    Koila.setProgress(null);
  }

  /** The listener sees each chunk of a chunked backward, in order, on the running thread. */
  @Test
  void progressReportsEachChunk() {
    try (MlpBatch mlp = new MlpBatch(4096, 22)) {
      Tensor loss = mlp.loss;
      Thread me = Thread.currentThread();
      List<String> seen = new ArrayList<>();
      Koila.setProgress((what, done, total) -> {
        assertTrue(Thread.currentThread() == me, "called on the running thread");
        synchronized (seen) {
          seen.add(what + " " + done + "/" + total);
        }
      });
      loss.backward();  // unsplit under the automatic budget: one chunk
      assertEquals(List.of("backward 1/1"), seen);
      seen.clear();

      TestSupport.budgetAQuarterToUnsplit(loss, Mode.TRAINING);
      long chunks;
      try (Plan plan = loss.plan(Mode.TRAINING)) {
        chunks = plan.numChunks();
        assertTrue(chunks > 1, plan.describe());
      }
      assertEquals(List.of(), seen, "planning reports nothing");
      loss.backward();
      List<String> expected = new ArrayList<>();
      for (long d = 1; d <= chunks; ++d) expected.add("backward " + d + "/" + chunks);
      assertEquals(expected, seen);

      // An exception in the listener is dropped, not thrown through C; null turns it off.
      Koila.setProgress((what, done, total) -> {
        if (done == 1) throw new IllegalStateException("from the progress listener (expected in this test)");
      });
      loss.backward();
      seen.clear();
      Koila.setProgress(null);
      loss.backward();
      assertEquals(List.of(), seen);
    }
  }

  /** mlp.pt over a lazy batch of random images, with its mean cross-entropy loss. */
  private static final class MlpBatch implements AutoCloseable {
    final Module model;
    final Tensor data, target, x, y, logits, loss;
    final List<Tensor> params;

    MlpBatch(int batch, long seed) {
      Koila.manualSeed(seed);
      long[] labels = new long[batch];
      for (int i = 0; i < batch; ++i) labels[i] = (i * 7) % 10;
      model = Module.load(TestSupport.mlp());
      data = Tensor.randn(batch, 784);
      target = Tensor.fromLongs(labels, batch);
      x = data.lazy(0);
      y = target.lazy(0);
      logits = model.forward(x);
      loss = logits.crossEntropy(y, Reduction.MEAN);
      params = model.parameters();
    }

    @Override
    public void close() {
      params.forEach(Tensor::close);
      for (Tensor t : List.of(loss, logits, y, x, target, data)) t.close();
      model.close();
    }
  }

  @Test
  void chunkedGradientsEqualUnsplitGradients() {
    run(4096);
  }

  /** 3000 samples do not split into equal power-of-two chunks: the mean must still be exact. */
  @Test
  void unevenChunksScaleTheMeanExactly() {
    run(3000);
  }

  private static List<float[]> gradients(List<Tensor> params) {
    List<float[]> grads = new ArrayList<>();
    for (Tensor p : params) {
      try (Tensor g = p.grad()) {
        assertNotNull(g, "every parameter has a gradient");
        grads.add(g.toFloatArray());
      }
    }
    return grads;
  }

  private static void run(int batch) {
    try (MlpBatch mlp = new MlpBatch(batch, 21)) {
      Tensor loss = mlp.loss;
      List<Tensor> params = mlp.params;
      // Unsplit, under the automatic budget.
      Koila.setMemoryBudget("cpu", 0);
      try (Plan plan = loss.plan(Mode.TRAINING)) {
        assertEquals(batch, plan.batchSize());
        assertEquals(1, plan.numChunks(), plan.describe());
      }
      double unsplitLoss = loss.item();
      params.forEach(Tensor::zeroGrad);
      loss.backward();
      List<float[]> unsplit = gradients(params);

      // The gradients exist now, as they will in the chunked run: measure from here. A
      // budget a quarter of the way from what is in use to the unsplit peak.
      TestSupport.settleMemory();
      long current = Koila.memoryStats("cpu").currentBytes();
      long full;
      try (Plan plan = loss.plan(Mode.TRAINING)) {
        assertEquals(1, plan.numChunks(), plan.describe());
        full = plan.fullPeakBytes();
      }
      assertTrue(full > current, "the unsplit run needs more than what is in use");
      Koila.setMemoryBudget("cpu", current + (full - current) / 4);
      try (Plan plan = loss.plan(Mode.TRAINING)) {
        assertTrue(plan.numChunks() > 1, plan.describe());
        assertTrue(plan.chunkSize() < batch, plan.describe());
        assertTrue(plan.chunkSize() * plan.numChunks() >= batch, plan.describe());
        assertTrue(plan.peakBytes() <= plan.budgetBytes(), plan.describe());
        assertEquals(full, plan.fullPeakBytes());
      }
      assertEquals(unsplitLoss, loss.item(), 1e-5 * Math.abs(unsplitLoss), "the chunked loss");

      for (Tensor p : params) p.zeroGrad();
      loss.backward();
      List<float[]> chunked = gradients(params);

      for (int k = 0; k < params.size(); ++k) {
        float[] a = unsplit.get(k);
        float[] b = chunked.get(k);
        assertEquals(a.length, b.length);
        double scale = 0;
        boolean nonzero = false;
        for (float v : a) {
          scale = Math.max(scale, Math.abs(v));
          nonzero |= v != 0;
        }
        assertTrue(nonzero, "parameter " + k + " has a non-zero gradient");
        for (int i = 0; i < a.length; ++i) {
          if (Math.abs(a[i] - b[i]) > 1e-5 * scale) {
            fail("parameter " + k + " element " + i + ": unsplit " + a[i] + ", chunked " + b[i]
                + " (largest gradient " + scale + ")");
          }
        }
      }
    }
  }
}
