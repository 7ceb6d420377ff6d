package org.koila;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.koila.TestSupport.assertClose;
import static org.koila.TestSupport.assertKoila;
import static org.koila.TestSupport.assertShape;
import static org.koila.TestSupport.floats;

import java.util.List;
import java.util.function.DoubleUnaryOperator;
import org.junit.jupiter.api.Test;

/**
 * Every operator against values computed by hand or with java.lang.Math, each run on concrete
 * inputs and on the same inputs made lazy (the results must agree).
 */
class OpsTest {
  private static final double[] A = {1, 2, 3, 4};
  private static final double[] B = {2, 2, 2, 2};

  /** Checks {@code op} on concrete inputs and on lazy ones against {@code expected}. */
  private static void check(double[] expected, Tensor concrete, Tensor lazy) {
    assertClose(expected, concrete);
    assertTrue(lazy.isLazy());
    assertClose(expected, lazy);
  }

  private interface Op2 {
    Tensor apply(Tensor a, Tensor b);
  }

  private static void binary(double[] expected, Op2 op) {
    try (Tensor a = floats(A, 4); Tensor b = floats(B, 4)) {
      check(expected, op.apply(a, b), op.apply(a.lazy(0), b));
    }
  }

  @Test
  void elementwise() {
    binary(new double[] {3, 4, 5, 6}, Tensor::add);
    binary(new double[] {-1, 0, 1, 2}, Tensor::sub);
    binary(new double[] {2, 4, 6, 8}, Tensor::mul);
    binary(new double[] {0.5, 1, 1.5, 2}, Tensor::div);
    binary(new double[] {1, 4, 9, 16}, Tensor::pow);
    binary(new double[] {2, 2, 3, 4}, Tensor::maximum);
    binary(new double[] {1, 2, 2, 2}, Tensor::minimum);
  }

  @Test
  void comparisons() {
    Object[][] cases = {
      {(Op2) Tensor::eq, new boolean[] {false, true, false, false}},
      {(Op2) Tensor::ne, new boolean[] {true, false, true, true}},
      {(Op2) Tensor::lt, new boolean[] {true, false, false, false}},
      {(Op2) Tensor::le, new boolean[] {true, true, false, false}},
      {(Op2) Tensor::gt, new boolean[] {false, false, true, true}},
      {(Op2) Tensor::ge, new boolean[] {false, true, true, true}},
    };
    try (Tensor a = floats(A, 4); Tensor b = floats(B, 4)) {
      for (Object[] c : cases) {
        Op2 op = (Op2) c[0];
        Tensor r = op.apply(a, b);
        assertEquals(DType.BOOL, r.dtype());
        assertArrayEquals((boolean[]) c[1], r.toBooleanArray());
        assertArrayEquals((boolean[]) c[1], op.apply(a.lazy(0), b).toBooleanArray());
      }
    }
  }

  @Test
  void broadcastingAndPromotion() {
    try (Tensor col = floats(new double[] {10, 20}, 2, 1); Tensor row = floats(new double[] {1, 2, 3}, 3)) {
      Tensor sum = col.add(row);
      assertShape(sum, 2, 3);
      assertClose(new double[] {11, 12, 13, 21, 22, 23}, sum);
    }
    try (Tensor i = Tensor.fromLongs(new long[] {1, 2}, 2); Tensor j = Tensor.fromLongs(new long[] {2, 4}, 2)) {
      Tensor q = i.div(j);
      assertTrue(q.dtype().isFloatingPoint(), "true division of integers is floating");
      assertClose(new double[] {0.5, 0.5}, q);
      assertEquals(DType.INT64, i.add(j).dtype());
    }
  }

  @Test
  void withScalars() {
    try (Tensor a = floats(A, 4)) {
      Tensor l = a.lazy(0);
      check(new double[] {3.5, 4.5, 5.5, 6.5}, a.add(2.5), l.add(2.5));
      check(new double[] {0, 1, 2, 3}, a.sub(1), l.sub(1));
      check(new double[] {-2, -4, -6, -8}, a.mul(-2), l.mul(-2));
      check(new double[] {0.25, 0.5, 0.75, 1}, a.div(4), l.div(4));
      check(new double[] {1, 8, 27, 64}, a.pow(3), l.pow(3));
    }
  }

  private static void unary(DoubleUnaryOperator f, java.util.function.UnaryOperator<Tensor> op, double... xs) {
    double[] expected = new double[xs.length];
    for (int i = 0; i < xs.length; ++i) expected[i] = f.applyAsDouble(xs[i]);
    try (Tensor x = floats(xs, xs.length)) {
      check(expected, op.apply(x), op.apply(x.lazy(0)));
    }
  }

  private static double sigmoid(double x) {
    return 1 / (1 + Math.exp(-x));
  }

  @Test
  void unaryOps() {
    double[] xs = {-2, -0.5, 0, 0.7, 3};
    double[] positive = {0.25, 1, 2, 9};
    unary(x -> -x, Tensor::neg, xs);
    unary(Math::abs, Tensor::abs, xs);
    unary(Math::exp, Tensor::exp, xs);
    unary(Math::log, Tensor::log, positive);
    unary(Math::sqrt, Tensor::sqrt, positive);
    unary(x -> 1 / Math.sqrt(x), Tensor::rsqrt, positive);
    unary(Math::sin, Tensor::sin, xs);
    unary(Math::cos, Tensor::cos, xs);
    unary(Math::tanh, Tensor::tanh, xs);
    unary(OpsTest::sigmoid, Tensor::sigmoid, xs);
    unary(x -> Math.max(x, 0), Tensor::relu, xs);
    unary(x -> x * sigmoid(x), Tensor::silu, xs);
    unary(x -> x > 0 ? x : 0.1 * x, t -> t.leakyRelu(0.1), xs);
    unary(x -> Math.min(Math.max(x, -1), 1), t -> t.clamp(-1, 1), xs);
    unary(x -> 1, t -> t.clamp(2, 1), xs); // lo > hi: everything ends up at hi
    // gelu(x) = x * Phi(x); Phi(1) = 0.8413447460685429, Phi(2) = 0.9772498680518208.
    try (Tensor x = floats(new double[] {-1, 0, 1, 2}, 4)) {
      check(new double[] {-1 + 0.8413447460685429, 0, 0.8413447460685429, 2 * 0.9772498680518208}, x.gelu(),
          x.lazy(0).gelu());
    }
  }

  @Test
  void softmaxes() {
    double[] x = {1, 2, 3, -1, 0, 1};
    double[] expected = new double[6];
    for (int r = 0; r < 2; ++r) {
      double z = 0;
      for (int c = 0; c < 3; ++c) z += Math.exp(x[3 * r + c]);
      for (int c = 0; c < 3; ++c) expected[3 * r + c] = Math.exp(x[3 * r + c]) / z;
    }
    double[] logExpected = new double[6];
    for (int i = 0; i < 6; ++i) logExpected[i] = Math.log(expected[i]);
    try (Tensor t = floats(x, 2, 3)) {
      check(expected, t.softmax(1), t.lazy(0).softmax(-1));
      check(logExpected, t.logSoftmax(1), t.lazy(0).logSoftmax(1));
    }
  }

  @Test
  void dropout() {
    try (Tensor x = Tensor.ones(1000)) {
      assertClose(x.toDoubleArray(), x.dropout(0.5, false));
      assertClose(new double[1000], x.dropout(1.0, true));
      double[] kept = x.lazy(0).dropout(0.5, true).toDoubleArray();
      int zeros = 0;
      for (double v : kept) {
        assertTrue(v == 0 || v == 2, "dropout keeps x / (1 - p): " + v);
        if (v == 0) ++zeros;
      }
      assertTrue(zeros > 350 && zeros < 650, zeros + " of 1000 dropped at p = 0.5");
    }
  }

  @Test
  void linearAlgebra() {
    try (Tensor a = floats(new double[] {1, 2, 3, 4, 5, 6}, 2, 3);
        Tensor b = floats(new double[] {1, 0, 0, 1, 1, 1}, 3, 2);
        Tensor v = floats(new double[] {1, 1, 1}, 3);
        Tensor bias = floats(new double[] {10, 20}, 2)) {
      // [[1+3, 2+3], [4+6, 5+6]]
      check(new double[] {4, 5, 10, 11}, a.matmul(b), a.lazy(0).matmul(b));
      check(new double[] {6, 15}, a.matmul(v), a.lazy(0).matmul(v));
      // linear: a @ w^T + bias with w = b^T, [2, 3]
      Tensor w = b.transpose(0, 1);
      check(new double[] {14, 25, 20, 31}, a.linear(w, bias), a.lazy(0).linear(w, bias));
      assertClose(new double[] {4, 5, 10, 11}, a.linear(w, null));
    }
  }

  @Test
  void convolutions() {
    try (Tensor x = floats(new double[] {1, 2, 3, 4, 5}, 1, 1, 5);
        Tensor w = floats(new double[] {1, -1}, 1, 1, 2);
        Tensor bias = floats(new double[] {0.5}, 1)) {
      check(new double[] {-1, -1, -1, -1}, x.conv1d(w, null), x.lazy(0).conv1d(w, null));
      assertClose(new double[] {-0.5, -0.5, -0.5, -0.5}, x.conv1d(w, bias));
      assertClose(new double[] {-1, -1}, x.conv1d(w, null, new long[] {2}, null, null, 1));
      // padded [0, 1, 2, 3, 4, 5, 0]: x[i] - x[i+1]
      assertClose(new double[] {-1, -1, -1, -1, -1, 5}, x.conv1d(w, null, null, new long[] {1}, null, 1));
      assertClose(new double[] {-2, -2, -2}, x.conv1d(w, null, null, null, new long[] {2}, 1));
      assertShape(x.conv1d(w, null), 1, 1, 4);
    }
    try (Tensor x = floats(new double[] {1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, 1, 3, 3);
        Tensor w = Tensor.ones(1, 1, 2, 2);
        Tensor bias = floats(new double[] {1}, 1)) {
      check(new double[] {12, 16, 24, 28}, x.conv2d(w, null), x.lazy(0).conv2d(w, null));
      assertClose(new double[] {13, 17, 25, 29}, x.conv2d(w, bias));
      // padding 1, stride 2 over the padded 5x5 input
      Tensor strided = x.conv2d(w, null, new long[] {2, 2}, new long[] {1, 1}, null, 1);
      assertShape(strided, 1, 1, 2, 2);
      assertClose(new double[] {1, 5, 11, 28}, strided);
      // unbatched [C, H, W], two groups of one channel each
      try (Tensor x2 = Tensor.cat(new Tensor[] {x.reshape(1, 3, 3), x.reshape(1, 3, 3).mul(-1)}, 0);
          Tensor w2 = Tensor.ones(2, 1, 2, 2)) {
        Tensor grouped = x2.conv2d(w2, null, null, null, null, 2);
        assertShape(grouped, 2, 2, 2);
        assertClose(new double[] {12, 16, 24, 28, -12, -16, -24, -28}, grouped);
      }
    }
  }

  @Test
  void pooling() {
    double[] sixteen = new double[16];
    for (int i = 0; i < 16; ++i) sixteen[i] = i + 1;
    try (Tensor x = floats(sixteen, 1, 1, 4, 4); Tensor nine = floats(new double[] {1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, 3, 3)) {
      check(new double[] {6, 8, 14, 16}, x.maxPool2d(2, 2), x.lazy(0).maxPool2d(2));
      check(new double[] {3.5, 5.5, 11.5, 13.5}, x.avgPool2d(2, 2), x.lazy(0).avgPool2d(2, 2));
      assertClose(new double[] {6, 7, 8, 10, 11, 12, 14, 15, 16}, x.maxPool2d(new long[] {2, 2}, new long[] {1, 1}, null, false));
      // 3x3 with a 2x2 kernel, stride 2: floor gives 1x1, ceil 2x2
      assertShape(nine.maxPool2d(2, 2), 1, 1, 1);
      assertClose(new double[] {5, 6, 8, 9}, nine.maxPool2d(new long[] {2, 2}, null, null, true));
      // padding 1: 3x3 windows of rows/cols {-1, 0}, {1, 2}, {3, 4}; the border never wins
      assertClose(new double[] {1, 3, 4, 9, 11, 12, 13, 15, 16},
          x.maxPool2d(new long[] {2, 2}, new long[] {2, 2}, new long[] {1, 1}, false));
      check(new double[] {8.5}, x.adaptiveAvgPool2d(1, 1), x.lazy(0).adaptiveAvgPool2d(1, 1));
      assertClose(new double[] {3.5, 5.5, 11.5, 13.5}, x.adaptiveAvgPool2d(2));
      // upsampling [1, 3, 3] by 1 x 2 (unbatched): each pixel twice along the rows
      check(new double[] {1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9}, nine.upsampleNearest2d(1, 2),
          nine.lazy(0).upsampleNearest2d(1, 2));
      assertShape(x.upsampleNearest2d(2), 1, 1, 8, 8);
      assertKoila(Code.INVALID_ARGUMENT, () -> x.upsampleNearest2d(0, 2));
    }
  }

  @Test
  void batchNorm() {
    double[] x = {1, 10, 3, 20, 5, 30, 7, 40}; // [4, 2]
    try (Tensor t = floats(x, 4, 2);
        Tensor weight = floats(new double[] {2, 0.5}, 2);
        Tensor bias = floats(new double[] {1, -1}, 2);
        Tensor mean = floats(new double[] {4, 25}, 2);
        Tensor var = floats(new double[] {4, 100}, 2)) {
      double eps = 1e-5;
      double[] eval = new double[8];
      for (int i = 0; i < 8; ++i) {
        int c = i % 2;
        double m = c == 0 ? 4 : 25;
        double v = c == 0 ? 4 : 100;
        eval[i] = (x[i] - m) / Math.sqrt(v + eps) * (c == 0 ? 2 : 0.5) + (c == 0 ? 1 : -1);
      }
      check(eval, t.batchNorm(weight, bias, mean, var, false, 0.1, eps),
          t.lazy(0).batchNorm(weight, bias, mean, var, false, 0.1, eps));
      // Training: batch statistics (biased variance), running stats updated with momentum 0.1
      // (the unbiased variance goes into running_var).
      double[] train = new double[8];
      double[] bm = {4, 25};
      double[] bv = {5, 125}; // channel 0: 1,3,5,7; channel 1: 10,20,30,40
      for (int i = 0; i < 8; ++i) {
        int c = i % 2;
        train[i] = (x[i] - bm[c]) / Math.sqrt(bv[c] + eps);
      }
      assertClose(train, t.batchNorm(null, null, mean, var, true, 0.1, eps));
      assertClose(new double[] {0.9 * 4 + 0.1 * 4, 0.9 * 25 + 0.1 * 25}, mean);
      assertClose(new double[] {0.9 * 4 + 0.1 * 5 * 4 / 3, 0.9 * 100 + 0.1 * 125 * 4 / 3}, var);
      assertClose(train, t.batchNorm(null, null, null, null, true, 0.1, eps));
    }
  }

  @Test
  void layerNormAndEmbedding() {
    double[] x = {1, 2, 3, 4, 2, 2, 2, 6};
    double eps = 1e-5;
    double[] expected = new double[8];
    for (int r = 0; r < 2; ++r) {
      double m = 0;
      double v = 0;
      for (int c = 0; c < 4; ++c) m += x[4 * r + c] / 4;
      for (int c = 0; c < 4; ++c) v += (x[4 * r + c] - m) * (x[4 * r + c] - m) / 4;
      for (int c = 0; c < 4; ++c) expected[4 * r + c] = (x[4 * r + c] - m) / Math.sqrt(v + eps) * 3 + 1;
    }
    try (Tensor t = floats(x, 2, 4); Tensor w = floats(new double[] {3, 3, 3, 3}, 4);
        Tensor b = Tensor.ones(4)) {
      check(expected, t.layerNorm(new long[] {4}, w, b, eps), t.lazy(0).layerNorm(new long[] {4}, w, b, eps));
      assertShape(t.layerNorm(new long[] {2, 4}, null, null, eps), 2, 4);
    }
    try (Tensor weight = floats(new double[] {0, 1, 10, 11, 20, 21}, 3, 2);
        Tensor idx = Tensor.fromLongs(new long[] {2, 0, 1, 2}, 2, 2)) {
      Tensor e = weight.embedding(idx);
      assertShape(e, 2, 2, 2);
      check(new double[] {20, 21, 0, 1, 10, 11, 20, 21}, e, weight.embedding(idx.lazy(0)));
    }
  }

  @Test
  void reductions() {
    try (Tensor t = floats(new double[] {1, 5, 3, 4, 2, 6}, 2, 3)) {
      Tensor l = t.lazy(0);
      check(new double[] {21}, t.sum(), l.sum());
      check(new double[] {9, 12}, t.sum(new long[] {1}, false), l.sum(new long[] {-1}, false));
      assertShape(t.sum(new long[] {1}, true), 2, 1);
      assertShape(t.sum(new long[0], false));
      check(new double[] {3.5}, t.mean(), l.mean());
      check(new double[] {2.5, 3.5, 4.5}, t.mean(new long[] {0}, false), l.mean(new long[] {0}, false));
      check(new double[] {6}, t.amax(), l.amax());
      check(new double[] {5, 6}, t.amax(new long[] {1}, false), l.amax(new long[] {1}, false));
      check(new double[] {1}, t.amin(), l.amin());
      check(new double[] {1, 2, 3}, t.amin(new long[] {0}, true), l.amin(new long[] {0}, true));
      Tensor arg = t.argmax(1, false);
      assertEquals(DType.INT64, arg.dtype());
      assertArrayEquals(new long[] {1, 2}, arg.toLongArray());
      assertArrayEquals(new long[] {1, 2}, l.argmax(1, false).toLongArray());
      assertShape(t.argmax(0, true), 1, 3);
    }
  }

  @Test
  void shapes() {
    double[] six = {0, 1, 2, 3, 4, 5};
    try (Tensor t = floats(six, 2, 3)) {
      Tensor l = t.lazy(0);
      Tensor r = t.reshape(3, -1);
      assertShape(r, 3, 2);
      check(six, r, l.reshape(2, 3, 1));
      Tensor p = t.permute(1, 0);
      assertShape(p, 3, 2);
      check(new double[] {0, 3, 1, 4, 2, 5}, p, l.permute(1, 0));
      check(new double[] {0, 3, 1, 4, 2, 5}, t.transpose(0, 1), l.transpose(-1, -2));
      assertShape(t.reshape(1, 2, 3).flatten(), 6);
      assertShape(t.reshape(1, 2, 3).flatten(1, 2), 1, 6);
      assertShape(t.reshape(1, 2, 3).squeeze(0), 2, 3);
      assertShape(t.squeeze(0), 2, 3);
      assertShape(t.unsqueeze(1), 2, 1, 3);
      assertShape(l.unsqueeze(0), 1, 2, 3);
      assertEquals(1, l.unsqueeze(0).batchDim());
      check(new double[] {1, 2, 4, 5}, t.narrow(1, 1, 2), l.narrow(1, 1, 2));
      try (Tensor index = Tensor.fromLongs(new long[] {2, 0}, 2)) {
        check(new double[] {2, 0, 5, 3}, t.indexSelect(1, index), l.indexSelect(1, index));
      }
      Tensor c = Tensor.cat(List.of(t, t.add(10)), 0);
      assertShape(c, 4, 3);
      assertClose(new double[] {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}, c);
      assertShape(Tensor.cat(new Tensor[] {l, l}, 1), 2, 6);
      Tensor s = Tensor.stack(List.of(t, t), 1);
      assertShape(s, 2, 2, 3);
      assertClose(new double[] {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}, s);
      assertShape(Tensor.stack(new Tensor[] {l, t}, 0), 2, 2, 3);
    }
  }

  @Test
  void losses() {
    double[] logits = {1, 2, 0.5, -1, 0, 3};
    long[] target = {1, 2};
    double[] nll = new double[2];
    double[] logp = new double[6];
    for (int r = 0; r < 2; ++r) {
      double z = 0;
      for (int c = 0; c < 3; ++c) z += Math.exp(logits[3 * r + c]);
      for (int c = 0; c < 3; ++c) logp[3 * r + c] = logits[3 * r + c] - Math.log(z);
      nll[r] = -logp[3 * r + (int) target[r]];
    }
    try (Tensor x = floats(logits, 2, 3); Tensor y = Tensor.fromLongs(target, 2); Tensor lp = floats(logp, 2, 3)) {
      check(nll, x.crossEntropy(y, Reduction.NONE), x.lazy(0).crossEntropy(y.lazy(0), Reduction.NONE));
      check(new double[] {(nll[0] + nll[1]) / 2}, x.crossEntropy(y, Reduction.MEAN),
          x.lazy(0).crossEntropy(y, Reduction.MEAN));
      check(new double[] {nll[0] + nll[1]}, x.crossEntropy(y, Reduction.SUM), x.lazy(0).crossEntropy(y, Reduction.SUM));
      check(nll, lp.nllLoss(y, Reduction.NONE), lp.lazy(0).nllLoss(y, Reduction.NONE));
      try (Tensor ignored = Tensor.fromLongs(new long[] {1, -100}, 2)) {
        assertClose(nll[0], x.crossEntropy(ignored, Reduction.MEAN).item());
      }
      // Class probabilities: a one-hot target equals the index target.
      try (Tensor probs = floats(new double[] {0, 1, 0, 0, 0, 1}, 2, 3)) {
        assertClose(new double[] {(nll[0] + nll[1]) / 2}, x.crossEntropy(probs, Reduction.MEAN));
      }
    }
    double[] a = {1, -2, 3};
    double[] b = {0, 1, 1};
    try (Tensor ta = floats(a, 3); Tensor tb = floats(b, 3)) {
      check(new double[] {1, 9, 4}, ta.mseLoss(tb, Reduction.NONE), ta.lazy(0).mseLoss(tb, Reduction.NONE));
      check(new double[] {14 / 3.0}, ta.mseLoss(tb, Reduction.MEAN), ta.lazy(0).mseLoss(tb, Reduction.MEAN));
      check(new double[] {6}, ta.l1Loss(tb, Reduction.SUM), ta.lazy(0).l1Loss(tb, Reduction.SUM));
      double[] bce = new double[3];
      double mean = 0;
      for (int i = 0; i < 3; ++i) {
        double p = sigmoid(a[i]);
        bce[i] = -(b[i] * Math.log(p) + (1 - b[i]) * Math.log(1 - p));
        mean += bce[i] / 3;
      }
      check(bce, ta.binaryCrossEntropyWithLogits(tb, Reduction.NONE),
          ta.lazy(0).binaryCrossEntropyWithLogits(tb, Reduction.NONE));
      assertClose(mean, ta.binaryCrossEntropyWithLogits(tb, Reduction.MEAN).item());
    }
  }

  /** softmax(q k^T / sqrt(E) + mask) v, computed in plain Java for one head. */
  private static double[] attention(double[] q, double[] k, double[] v, int l, int s, int e, boolean[] keep) {
    double[] out = new double[l * e];
    for (int i = 0; i < l; ++i) {
      double[] w = new double[s];
      double z = 0;
      for (int j = 0; j < s; ++j) {
        if (!keep[i * s + j]) continue;
        double dot = 0;
        for (int d = 0; d < e; ++d) dot += q[i * e + d] * k[j * e + d];
        w[j] = Math.exp(dot / Math.sqrt(e));
        z += w[j];
      }
      for (int j = 0; j < s; ++j) {
        for (int d = 0; d < e; ++d) out[i * e + d] += w[j] / z * v[j * e + d];
      }
    }
    return out;
  }

  @Test
  void attention() {
    double[] q = {1, 0, 0, 1, 1, 1};
    double[] k = {1, 2, -1, 0, 0.5, 0.5};
    double[] v = {1, 2, 3, 4, 5, 6};
    boolean[] all = new boolean[9];
    java.util.Arrays.fill(all, true);
    boolean[] causal = {true, false, false, true, true, false, true, true, true};
    boolean[] mask = {true, false, true, false, true, true, true, true, false};
    try (Tensor tq = floats(q, 1, 3, 2); Tensor tk = floats(k, 1, 3, 2); Tensor tv = floats(v, 1, 3, 2);
        Tensor tmask = Tensor.fromBooleans(mask, 3, 3)) {
      check(attention(q, k, v, 3, 3, 2, all), Tensor.scaledDotProductAttention(tq, tk, tv, null, false),
          Tensor.scaledDotProductAttention(tq.lazy(0), tk.lazy(0), tv.lazy(0), null, false));
      assertClose(attention(q, k, v, 3, 3, 2, causal), Tensor.scaledDotProductAttention(tq, tk, tv, null, true));
      assertClose(attention(q, k, v, 3, 3, 2, mask), Tensor.scaledDotProductAttention(tq, tk, tv, tmask, false));
      // A floating mask is added: -inf where the bool mask is false.
      double[] additive = new double[9];
      for (int i = 0; i < 9; ++i) additive[i] = mask[i] ? 0 : Double.NEGATIVE_INFINITY;
      try (Tensor fmask = floats(additive, 3, 3)) {
        assertClose(attention(q, k, v, 3, 3, 2, mask), Tensor.scaledDotProductAttention(tq, tk, tv, fmask, false));
      }
    }
  }
}
