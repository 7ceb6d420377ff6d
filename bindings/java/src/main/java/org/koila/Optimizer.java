package org.koila;

import java.lang.ref.Reference;
import java.nio.file.Path;
import java.util.List;
import org.koila.raw.KoilaNative;

/**
 * An optimizer over concrete floating-point leaves that require grad (each at most once), as
 * torch::optim: SGD with momentum and weight decay (L2, added to the gradient), Adam with
 * weight decay (L2), and AdamW (decoupled weight decay). Parameters without a gradient are
 * skipped by a step.
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
 * <p><b>Checkpoints.</b> {@link #save} writes the optimizer's state (kind, hyperparameters,
 * step counts and moment or momentum buffers); with {@link Module#save} between two steps, a
 * run that stops and restarts from both files ({@link Module#load}, a new optimizer over the
 * module's parameters, {@link #load}) continues bit for bit as if it never stopped.
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
    long[] out = new long[1];
    withParams(params, handles -> KoilaNative.koila_optimizer_sgd(out, handles, lr, momentum, weightDecay));
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
    long[] out = new long[1];
    withParams(params, handles -> KoilaNative.koila_optimizer_adam(out, handles, lr, beta1, beta2, eps, weightDecay));
    return new Optimizer(out[0]);
  }

  /** AdamW with betas (0.9, 0.999), eps 1e-8 and weight decay 1e-2 (PyTorch's defaults). */
  public static Optimizer adamw(List<? extends Tensor> params, double lr) {
    return adamw(params, lr, 0.9, 0.999, 1e-8, 1e-2);
  }

  /**
   * AdamW, as torch.optim.AdamW: each step first shrinks the parameters by
   * {@code lr * weightDecay} (decoupled weight decay), then makes Adam's update; the gradient
   * is not changed.
   *
   * @param params the parameters
   * @param lr learning rate, &gt;= 0
   * @param beta1 0 &lt;= beta1 &lt; 1
   * @param beta2 0 &lt;= beta2 &lt; 1
   * @param eps &gt;= 0
   * @param weightDecay decoupled weight decay, &gt;= 0
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for settings out of range, a lazy or
   *     repeated parameter; {@link Code#DTYPE} for an integer one
   */
  public static Optimizer adamw(List<? extends Tensor> params, double lr, double beta1, double beta2, double eps,
      double weightDecay) {
    long[] out = new long[1];
    withParams(params, handles -> KoilaNative.koila_optimizer_adamw(out, handles, lr, beta1, beta2, eps, weightDecay));
    return new Optimizer(out[0]);
  }

  /** A raw call taking the parameters' handles and returning a status. */
  @FunctionalInterface
  private interface ParamsCall {
    long call(long[] handles);
  }

  /** Runs {@code call} over the handles of {@code params}, keeping them reachable meanwhile. */
  private static void withParams(List<? extends Tensor> params, ParamsCall call) {
    if (params == null) throw KoilaException.invalid("argument 'params' is null");
    Tensor[] tensors = params.toArray(new Tensor[0]);
    long[] handles = Tensor.addresses(tensors, "params");
    try {
      KoilaException.check(call.call(handles));
    } finally {
      Reference.reachabilityFence(tensors);
    }
  }

  /** Updates the parameters in place from their gradients. */
  public void step() {
    try {
      KoilaException.check(KoilaNative.koila_optimizer_step(address()));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /**
   * Sets the parameters' gradients to zero in place, and gives each parameter without one a
   * zero gradient: every step's backward then starts alike, which a run resumed from a
   * checkpoint needs to continue bit for bit.
   */
  public void zeroGrad() {
    try {
      KoilaException.check(KoilaNative.koila_optimizer_zero_grad(address()));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /**
   * Sets the learning rate of every later step (a schedule is the caller's loop calling this).
   * It is saved and loaded with the optimizer's state.
   *
   * @param lr &gt;= 0 and finite
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for a negative or non-finite rate
   *     (the rate in force stays)
   */
  public void setLr(double lr) {
    try {
      KoilaException.check(KoilaNative.koila_optimizer_set_lr(address(), lr));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** The learning rate in force. */
  public double lr() {
    double[] out = new double[1];
    try {
      KoilaException.check(KoilaNative.koila_optimizer_lr(address(), out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0];
  }

  /**
   * Saves the optimizer's whole state: its kind, hyperparameters (the learning rate in force
   * included) and, for each parameter, its step count and moment or momentum buffers. The file
   * is versioned and checksummed. Atomic, as {@link Module#save}: the file at {@code path} is
   * afterwards the complete old file or the complete new one.
   *
   * @throws KoilaException {@link Code#IO} when the file cannot be written (the old one stays)
   */
  public void save(String path) {
    withPath(path, KoilaNative::koila_optimizer_save);
  }

  /** Saves the optimizer's whole state (see {@link #save(String)}). */
  public void save(Path path) {
    if (path == null) throw KoilaException.invalid("argument 'path' is null");
    save(path.toString());
  }

  /**
   * Loads what {@link #save} wrote into this optimizer, which must be of the same kind over
   * parameters of the same number, dtypes and shapes, in the same order (the parameters'
   * values are the module's: load them with {@link Module#load}). The file's hyperparameters
   * replace this optimizer's. Either way the optimizer is unchanged when this throws.
   *
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for a mismatch (another kind, another
   *     number of parameters, a parameter of another dtype or shape; the message names the
   *     first), {@link Code#IO} for a missing, truncated or corrupt file, or one written by a
   *     newer koila
   */
  public void load(String path) {
    withPath(path, KoilaNative::koila_optimizer_load);
  }

  /** A raw call taking the optimizer and a path, returning a status. */
  @FunctionalInterface
  private interface PathCall {
    long call(long optimizer, String path);
  }

  private void withPath(String path, PathCall call) {
    if (path == null) throw KoilaException.invalid("argument 'path' is null");
    try {
      KoilaException.check(call.call(address(), path));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** Loads what {@link #save} wrote (see {@link #load(String)}). */
  public void load(Path path) {
    if (path == null) throw KoilaException.invalid("argument 'path' is null");
    load(path.toString());
  }

  /**
   * Scales the gradients of {@code params} in place so that their joint 2-norm is at most
   * {@code maxNorm}, as torch.nn.utils.clip_grad_norm_: every gradient is multiplied by
   * {@code min(1, maxNorm / (norm + 1e-6))}. Parameters are concrete leaves, each at most once
   * (as for the optimizers); those without a gradient are skipped. After
   * {@link Tensor#backward()} the gradients are the whole batch's, also when it ran in chunks.
   *
   * @param params the parameters whose gradients are clipped
   * @param maxNorm &gt;= 0 and finite
   * @return the norm before clipping (0 when no parameter has a gradient)
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for a bad maxNorm or parameter list,
   *     and when the norm is not finite (an inf or NaN in a gradient): then no gradient was
   *     changed and the message states the norm (skip that step)
   */
  public static double clipGradNorm(List<? extends Tensor> params, double maxNorm) {
    double[] out = new double[1];
    withParams(params, handles -> KoilaNative.koila_clip_grad_norm(out, handles, maxNorm));
    return out[0];
  }
}
