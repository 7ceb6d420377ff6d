package org.koila;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.koila.TestSupport.assertKoila;

import java.util.Arrays;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The memory budget, measurements and plans. */
class MemoryTest {
  @AfterEach
  void restoreBudget() {
    Koila.setMemoryBudget("cpu", 0);
  }

  @Test
  void budgetRoundTrip() {
    long huge = 1L << 40;
    Koila.setMemoryBudget("cpu", huge);
    assertEquals(huge, Koila.memoryBudget("cpu"));
    Koila.setMemoryBudget("cpu", 0);
    long automatic = Koila.memoryBudget("cpu");
    assertTrue(automatic > Koila.memoryStats("cpu").currentBytes(), "the automatic budget exceeds what is in use");
  }

  @Test
  void stats() {
    TestSupport.settleMemory();
    Koila.memoryResetPeak("cpu");
    MemoryStats before = Koila.memoryStats("cpu");
    assertEquals(before.currentBytes(), before.peakBytes(), "a reset peak is the current usage");
    try (Tensor t = Tensor.zeros(1024, 16)) {
      assertEquals(1024 * 16, t.numel());
      MemoryStats during = Koila.memoryStats("cpu");
      assertTrue(during.currentBytes() >= before.currentBytes() + 1024 * 16 * 4, during.toString());
      assertTrue(during.peakBytes() >= during.currentBytes());
    }
    MemoryStats after = Koila.memoryStats("cpu");
    assertTrue(after.currentBytes() < after.peakBytes(), "the peak remembers the freed tensor");
    assertEquals(new MemoryStats(1, 2), new MemoryStats(1, 2));
  }

  @Test
  void aTimelineAccountsForItsPlansPeak() {
    float[] data = new float[64 * 16];
    Arrays.fill(data, 0.5f);
    try (Tensor b = Tensor.fromFloats(data, 64, 16); Tensor total = b.lazy(0).exp().sum();
        Plan plan = total.plan(Mode.FORWARD); Timeline t = plan.timeline(true)) {
      java.util.List<Timeline.Event> events = t.events();
      assertEquals(t.length(), events.size());
      long top = 0;
      for (Timeline.Event e : events) {
        assertEquals(Timeline.Phase.FORWARD, e.phase, e.toString());
        assertTrue(e.liveBytes <= e.peakBytes, e.toString());
        top = Math.max(top, e.peakBytes);
      }
      assertEquals(top, events.get((int) t.peakIndex()).peakBytes);
      long sum = 0;
      for (Timeline.Part part : Timeline.Part.values()) sum += t.part(part);
      assertEquals(plan.fullPeakBytes(), sum);
      assertTrue(events.stream().anyMatch(e -> e.op.equals("aten::exp")), events.toString());
      KoilaException past = assertThrows(KoilaException.class, () -> t.event(events.size()));
      assertEquals(Code.INVALID_ARGUMENT, past.code());
    }
  }

  @Test
  void forwardPlanUnderTheAutomaticBudget() {
    float[] ones = new float[64 * 16];
    Arrays.fill(ones, 1f);
    try (Tensor b = Tensor.fromFloats(ones, 64, 16); Tensor total = b.lazy(0).exp().sum();
        Plan plan = total.plan(Mode.FORWARD)) {
      long current = Koila.memoryStats("cpu").currentBytes();
      assertEquals(64, plan.batchSize());
      assertEquals(64, plan.chunkSize());
      assertEquals(1, plan.numChunks());
      assertTrue(plan.peakBytes() >= current);
      assertEquals(plan.fullPeakBytes(), plan.peakBytes());
      assertTrue(plan.budgetBytes() > current);
      String text = plan.describe();
      assertTrue(text.contains("batch 64"), text);
      assertEquals(text, plan.toString());
      // The need: the estimate with koila's margin, within the budget since it runs unsplit.
      assertTrue(plan.neededBytes() > plan.peakBytes() && plan.neededBytes() <= plan.budgetBytes(), text);
      assertEquals(plan.neededBytes(), plan.fullNeededBytes());
      assertTrue(text.contains("koila's margin of 10%"), text);
      assertEquals(64 * 16 * Math.E, total.item(), 1e-2);
    }
  }

  @Test
  void concreteTensorsHaveNoBatch() {
    try (Tensor t = Tensor.ones(8, 2); Plan plan = Plan.of(t.sum(), Mode.FORWARD)) {
      assertEquals(-1, plan.batchSize());
      assertEquals(-1, plan.chunkSize());
      assertEquals(1, plan.numChunks());
    }
  }

  @Test
  void smallBudgetsSplitTheBatch() {
    Koila.manualSeed(3);
    try (Tensor x = Tensor.randn(2048, 256); Tensor w = Tensor.randn(256, 256);
        // Per-sample results: the output is small, the activations are not.
        Tensor y = x.lazy(0).matmul(w).tanh().matmul(w).relu().sum(new long[] {1}, false)) {
      float[] unsplit = y.toFloatArray();
      TestSupport.settleMemory();
      long current = Koila.memoryStats("cpu").currentBytes();
      long full;
      try (Plan plan = y.plan(Mode.FORWARD)) {
        assertEquals(1, plan.numChunks());
        full = plan.fullPeakBytes();
      }
      assertTrue(full > current);
      Koila.setMemoryBudget("cpu", current + (full - current) / 4);
      try (Plan plan = y.plan(Mode.FORWARD)) {
        assertTrue(plan.numChunks() > 1, plan.describe());
        long chunk = plan.chunkSize();
        assertEquals(0, chunk & (chunk - 1), "chunks are a power of two: " + chunk);
        assertTrue(chunk * plan.numChunks() >= 2048);
        assertTrue(plan.peakBytes() <= plan.budgetBytes(), plan.describe());
        assertEquals(full, plan.fullPeakBytes());
      }
      float[] split = y.toFloatArray();
      assertEquals(unsplit.length, split.length);
      for (int i = 0; i < split.length; ++i) {
        assertEquals(unsplit[i], split[i], 1e-4 * Math.max(1, Math.abs(unsplit[i])), "element " + i);
      }
    }
  }

  @Test
  void budgetsTooSmallForOneSample() {
    try (Tensor b = Tensor.ones(64, 16); Tensor total = b.lazy(0).exp().sum()) {
      Koila.setMemoryBudget("cpu", 1);
      assertKoila(Code.OUT_OF_MEMORY, total::item);
      assertKoila(Code.OUT_OF_MEMORY, () -> total.plan(Mode.FORWARD));
      assertKoila(Code.OUT_OF_MEMORY, total::toFloatArray);
      Koila.setMemoryBudget("cpu", 0);
      assertEquals(64 * 16 * Math.E, total.item(), 1e-2);
    }
  }

  @Test
  void graphsThatMixTheBatchDoNotSplit() {
    Koila.manualSeed(4);
    try (Tensor x = Tensor.randn(2048, 256); Tensor w = Tensor.randn(256, 256);
        // softmax over the batch dim couples every sample.
        Tensor y = x.lazy(0).matmul(w).softmax(0).matmul(w).sum()) {
      TestSupport.budgetAQuarterToUnsplit(y, Mode.FORWARD);
      KoilaException e = assertKoila(Code.NOT_SPLITTABLE, () -> y.plan(Mode.FORWARD));
      assertTrue(e.getMessage().contains("softmax"), e.getMessage());
      assertKoila(Code.NOT_SPLITTABLE, y::item);
      assertArrayEquals(new long[0], y.shape(), "metadata still answers");
    }
  }
}
