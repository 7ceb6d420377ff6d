package org.koila;

import java.lang.ref.Reference;
import java.util.List;
import org.koila.raw.KoilaNative;

/**
 * An optimizer over concrete floating-point leaves that require grad (each at most once), as
 * torch::optim: SGD with momentum and weight decay (L2, added to the gradient), and Adam with
 * weight decay (L2, not AdamW). Parameters without a gradient are skipped by a step.
 *
 * <pre>{@code
 * try (Optimizer opt = Optimizer.adam(model.parameters(), 1e-3)) {
 *   for (int step = 0; step < 100; ++step) {
 *     opt.zeroGrad();
 *     loss.backward();
 *     opt.step();
 *   }
 * }
 * }</pre>
 *
 * <p>The optimizer keeps its parameters alive: their handles may be closed before it. A
 * closed optimizer throws on use. An optimizer may move between threads but must not be used
 * from two threads at once.
 */
public final class Optimizer extends NativeHandle {
  private Optimizer(long address) {
    super(address, KoilaNative::koila_optimizer_free);
  }

  @Override
  String kind() {
    return "optimizer";
  }

  /** Plain SGD: {@code p -= lr * grad}. */
  public static Optimizer sgd(List<? extends Tensor> params, double lr) {
    return sgd(params, lr, 0, 0);
  }

  /**
   * SGD with momentum and weight decay.
   *
   * @param params the parameters
   * @param lr learning rate, &gt;= 0
   * @param momentum &gt;= 0
   * @param weightDecay L2 penalty added to the gradient, &gt;= 0
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for negative or non-finite settings,
   *     a lazy or repeated parameter; {@link Code#DTYPE} for an integer one
   */
  public static Optimizer sgd(List<? extends Tensor> params, double lr, double momentum, double weightDecay) {
    Tensor[] tensors = toArray(params);
    long[] handles = Tensor.addresses(tensors, "params");
    long[] out = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_optimizer_sgd(out, handles, lr, momentum, weightDecay));
    } finally {
      Reference.reachabilityFence(tensors);
    }
    return new Optimizer(out[0]);
  }

  /** Adam with betas (0.9, 0.999), eps 1e-8 and no weight decay. */
  public static Optimizer adam(List<? extends Tensor> params, double lr) {
    return adam(params, lr, 0.9, 0.999, 1e-8, 0);
  }

  /**
   * Adam.
   *
   * @param params the parameters
   * @param lr learning rate, &gt;= 0
   * @param beta1 0 &lt;= beta1 &lt; 1
   * @param beta2 0 &lt;= beta2 &lt; 1
   * @param eps &gt;= 0
   * @param weightDecay L2 penalty added to the gradient, &gt;= 0
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for settings out of range, a lazy or
   *     repeated parameter; {@link Code#DTYPE} for an integer one
   */
  public static Optimizer adam(List<? extends Tensor> params, double lr, double beta1, double beta2, double eps,
      double weightDecay) {
    Tensor[] tensors = toArray(params);
    long[] handles = Tensor.addresses(tensors, "params");
    long[] out = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_optimizer_adam(out, handles, lr, beta1, beta2, eps, weightDecay));
    } finally {
      Reference.reachabilityFence(tensors);
    }
    return new Optimizer(out[0]);
  }

  private static Tensor[] toArray(List<? extends Tensor> params) {
    if (params == null) throw KoilaException.invalid("argument 'params' is null");
    return params.toArray(new Tensor[0]);
  }

  /** Updates the parameters in place from their gradients. */
  public void step() {
    try {
      KoilaException.check(KoilaNative.koila_optimizer_step(address()));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** Sets the parameters' gradients to zero in place. */
  public void zeroGrad() {
    try {
      KoilaException.check(KoilaNative.koila_optimizer_zero_grad(address()));
    } finally {
      Reference.reachabilityFence(this);
    }
  }
}
