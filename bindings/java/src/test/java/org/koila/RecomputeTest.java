package org.koila;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.koila.TestSupport.assertKoila;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.koila.raw.KoilaNative;
import org.koila.raw.koila_code;

/**
 * Recomputation ({@link Koila#setRecompute}, {@link Plan#recomputedBytes}): a backward whose one
 * sample does not fit trains recomputing, within the budget, with the gradients of the run
 * without it; off, it is refused. Process-wide: this suite runs in a JVM of its own (ctest
 * java.recompute), and every test restores the default.
 */
class RecomputeTest {
  @AfterEach
  void restoreDefaults() {
    Koila.setRecompute(Recompute.AS_NEEDED);
    Koila.setMemoryBudget("cpu", 0);
  }

  /** One long sequence [1, 512, 64] through 12 x (linear, gelu), then the mean of squares. */
  private static Tensor deepMlp(List<Tensor> params) {
    Koila.manualSeed(11);
    Tensor h = Tensor.randn(1, 512, 64).lazy(0);
    for (int i = 0; i < 12; i++) {
      Tensor w = Tensor.randn(64, 64).mul(0.125).setRequiresGrad(true);
      Tensor b = Tensor.randn(64).mul(0.1).setRequiresGrad(true);
      params.add(w);
      params.add(b);
      h = h.linear(w, b).gelu();
    }
    return h.mul(h).mean();
  }

  private static List<float[]> grads(List<Tensor> params) {
    List<float[]> out = new ArrayList<>();
    for (Tensor p : params) out.add(p.grad().toFloatArray());
    return out;
  }

  @Test
  void aSampleThatDoesNotFitTrainsRecomputingWithTheSameGradients() {
    Koila.setRecompute(Recompute.OFF);
    List<Tensor> first = new ArrayList<>();
    deepMlp(first).backward();
    List<float[]> plain = grads(first);

    List<Tensor> params = new ArrayList<>();
    Tensor loss = deepMlp(params);
    long current = Koila.memoryStats("cpu").currentBytes();
    long oneSample;
    try (Plan plan = loss.plan(Mode.TRAINING)) {
      oneSample = plan.peakBytes() - current;
    }
    long budget = current + oneSample / 2;
    Koila.setMemoryBudget("cpu", budget);
    assertKoila(Code.OUT_OF_MEMORY, () -> loss.plan(Mode.TRAINING));

    Koila.setRecompute(Recompute.AS_NEEDED);
    try (Plan plan = loss.plan(Mode.TRAINING)) {
      assertTrue(plan.recomputedBytes() > 0, plan.describe());
      assertTrue(plan.describe().contains("Recomputed:"), plan.describe());
    }
    Koila.memoryResetPeak("cpu");
    loss.backward();
    assertTrue(Koila.memoryStats("cpu").peakBytes() <= budget, "the run went over the budget");
    List<float[]> recomputed = grads(params);
    for (int i = 0; i < plain.size(); i++) assertArrayEquals(plain.get(i), recomputed.get(i), 0.0f);
  }

  @Test
  void everyPolicyIsTakenAndUnknownOnesAreRefused() {
    for (Recompute policy : Recompute.values()) Koila.setRecompute(policy);
    assertKoila(Code.INVALID_ARGUMENT, () -> Koila.setRecompute(null));
    for (int raw : new int[] {-1, 3, Integer.MAX_VALUE}) {
      long status = KoilaNative.koila_set_recompute(raw);
      assertTrue(status != 0, "koila_set_recompute(" + raw + ") succeeded");
      assertEquals(koila_code.KOILA_ERROR_INVALID_ARGUMENT, KoilaNative.koila_status_code(status));
      KoilaNative.koila_status_free(status);
    }
    try (Plan plan = deepMlp(new ArrayList<>()).plan(Mode.TRAINING)) {
      assertEquals(0, plan.recomputedBytes(), plan.describe());
    }
  }
}
