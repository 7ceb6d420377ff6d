package org.koila;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.koila.TestSupport.assertKoila;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Process groups: two ranks as two threads of this JVM (each its own Gloo process group over
 * a file store), uneven shards, against the single-process full batch; bad arguments.
 */
class GroupTest {
  private static final int BATCH = 7;

  private static double[] inputs(int start, int end) {
    double[] x = new double[(end - start) * 4];
    for (int i = start * 4; i < end * 4; ++i) x[i - start * 4] = ((i * 37 % 11) - 5.0) / 3.0;
    return x;
  }

  private static long[] targets(int start, int end) {
    long[] y = new long[end - start];
    for (int i = start; i < end; ++i) y[i - start] = i == 3 ? -100 : i % 3; // sample 3 is ignored
    return y;
  }

  private static Tensor weights(double offset) {
    double[] w = new double[12];
    for (int i = 0; i < 12; ++i) w[i] = i * 0.1 - 0.5 + offset;
    return Tensor.fromDoubles(w, 3, 4).setRequiresGrad(true);
  }

  private static Tensor loss(Tensor w, int start, int end) {
    try (Tensor x = Tensor.fromDoubles(inputs(start, end), end - start, 4);
        Tensor y = Tensor.fromLongs(targets(start, end), end - start);
        Tensor lx = x.lazy(0);
        Tensor ly = y.lazy(0);
        Tensor logits = lx.linear(w, null)) {
      return logits.crossEntropy(ly, Reduction.MEAN);
    }
  }

  @Test
  void twoRanksWithUnevenShardsGetTheFullBatchGradient() throws Exception {
    Path dir = Files.createTempDirectory("koila_java_group");
    String init = "file://" + dir.resolve("store");
    int[][] shards = {{0, 2}, {2, BATCH}};
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try {
      List<Future<double[][]>> ranks = new java.util.ArrayList<>();
      for (int r = 0; r < 2; ++r) {
        final int rank = r;
        ranks.add(pool.submit(() -> {
          try (Group group = Group.join("gloo", init, rank, 2, Duration.ofSeconds(20));
              Tensor w = weights(rank)) {
            assertEquals(rank, group.rank());
            assertEquals(2, group.size());
            assertEquals(rank, group.localRank()); // (its rank, for a group made by join)
            group.broadcast(List.of(w), 0);
            try (Tensor l = loss(w, shards[rank][0], shards[rank][1])) {
              group.backward(l, List.of(w));
            }
            try (Tensor g = w.grad()) {
              return new double[][] {w.toDoubleArray(), g.toDoubleArray()};
            }
          }
        }));
      }
      try (Tensor w = weights(0); Tensor l = loss(w, 0, BATCH)) {
        l.backward();
        try (Tensor g = w.grad()) {
          double[] expected = g.toDoubleArray();
          for (Future<double[][]> f : ranks) {
            double[][] got = f.get(60, TimeUnit.SECONDS);
            assertArrayEquals(w.toDoubleArray(), got[0], "the broadcast gives every rank rank 0's weights");
            assertArrayEquals(expected, got[1], 1e-12, "gradients differ from the full batch's");
          }
        }
      }
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void badArgumentsGiveCleanCodes() {
    Duration second = Duration.ofSeconds(1);
    assertKoila(Code.INVALID_ARGUMENT, () -> Group.join("semaphore", "file:///tmp/x", 0, 1, second));
    assertKoila(Code.INVALID_ARGUMENT, () -> Group.join("gloo", "file:///tmp/x", 2, 2, second));
    assertKoila(Code.INVALID_ARGUMENT, () -> Group.join("gloo", "tcp://127.0.0.1", 0, 2, second));
    assertKoila(Code.INVALID_ARGUMENT, () -> Group.join("gloo", "file:///tmp/x", 0, 1, Duration.ZERO));
    assertKoila(Code.INVALID_ARGUMENT, () -> Group.join(null, "file:///tmp/x", 0, 1, second));
    assertKoila(Code.INVALID_ARGUMENT, () -> Group.join("gloo", "file:///tmp/x", 0, 1, null));
    assertKoila(Code.IO, () -> Group.join("gloo", "tcp://127.0.0.1:9", 1, 2, Duration.ofMillis(300)));
  }

  /** Outside a launcher (the test's environment has no RANK): the missing variable, named. */
  @Test
  void fromTheEnvironmentWithoutALauncherNamesWhatIsMissing() {
    org.junit.jupiter.api.Assumptions.assumeTrue(
        System.getenv("WORLD_SIZE") == null, "the test runs outside a launcher");
    KoilaException e =
        org.junit.jupiter.api.Assertions.assertThrows(
            KoilaException.class, () -> Group.fromEnvironment("gloo", Duration.ofSeconds(1)));
    assertEquals(Code.INVALID_ARGUMENT, e.code());
    org.junit.jupiter.api.Assertions.assertTrue(e.getMessage().contains("WORLD_SIZE"), e.getMessage());
    assertKoila(Code.INVALID_ARGUMENT, () -> Group.fromEnvironment("gloo", null));
  }
}
