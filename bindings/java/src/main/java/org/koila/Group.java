package org.koila;

import java.lang.ref.Reference;
import java.time.Duration;
import java.util.List;
import org.koila.raw.KoilaNative;

/**
 * A process group for data-parallel training, on LibTorch's c10d: Gloo for CPU tensors, NCCL
 * for CUDA tensors when LibTorch was built with it. Every process holds the model and trains
 * on its own shard of the batch; {@link #backward} leaves every rank with the gradient of the
 * loss over the union of the shards.
 *
 * <pre>{@code
 * try (Group group = Group.join("gloo", "tcp://127.0.0.1:29500", rank, 2, Duration.ofSeconds(30))) {
 *   group.broadcast(model.parameters(), 0);     // every rank starts from rank 0's weights
 *   for (int step = 0; step < 100; ++step) {
 *     opt.zeroGrad();
 *     group.backward(loss, model.parameters()); // chunked locally, then all-reduced
 *     opt.step();
 *   }
 * }
 * }</pre>
 *
 * <p>Collectives are matched by order: every rank makes the same calls in the same order. A
 * failure on any rank fails the call on every rank, naming the failing rank, with no gradient
 * changed. A rank that dies or does not arrive makes the others throw {@link Code#IO} within
 * the timeout; the group is then unusable: close it.
 */
public final class Group extends NativeHandle {
  private Group(long address) {
    super(address, KoilaNative::koila_group_free);
  }

  @Override
  String kind() {
    return "group";
  }

  /**
   * Joins a group of {@code worldSize} processes as {@code rank}.
   *
   * @param backend "gloo" or "nccl"
   * @param init "tcp://HOST:PORT" (rank 0 listens there) or "file:///PATH"
   * @param rank 0 &lt;= rank &lt; worldSize
   * @param worldSize the number of processes
   * @param timeout bounds the rendezvous and every later collective (positive)
   * @throws KoilaException {@link Code#IO} when the others do not join in time;
   *     {@link Code#INVALID_ARGUMENT} for an unknown backend, a malformed init or a rank out
   *     of range; {@link Code#UNSUPPORTED} for "nccl" without NCCL
   */
  public static Group join(String backend, String init, int rank, int worldSize, Duration timeout) {
    if (timeout == null) throw KoilaException.invalid("argument 'timeout' is null");
    long[] out = new long[1];
    KoilaException.check(KoilaNative.koila_group_new(out, backend, init, rank, worldSize, timeout.toMillis()));
    return new Group(out[0]);
  }

  /**
   * Joins the group a launcher describes in the environment, as torchrun ({@code torchrun
   * --nproc-per-node N --no-python java ...}) sets it for each worker: RANK, WORLD_SIZE,
   * LOCAL_RANK, MASTER_ADDR, MASTER_PORT, and the launcher's own store where
   * TORCHELASTIC_USE_AGENT_STORE is "True". c10d's store has no authentication: keep
   * MASTER_ADDR on a private network.
   *
   * @param backend "gloo" or "nccl" (on cuda:LOCAL_RANK)
   * @param timeout bounds the rendezvous and every later collective (positive)
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} naming a variable that is missing or
   *     malformed; otherwise as {@link #join}
   */
  public static Group fromEnvironment(String backend, Duration timeout) {
    if (timeout == null) throw KoilaException.invalid("argument 'timeout' is null");
    long[] out = new long[1];
    KoilaException.check(KoilaNative.koila_group_new_from_env(out, backend, timeout.toMillis()));
    return new Group(out[0]);
  }

  /** LOCAL_RANK for a group joined from the environment; the rank for one made by {@link #join}. */
  public int localRank() {
    try {
      return KoilaNative.koila_group_local_rank(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** This process's rank, 0 .. size() - 1. */
  public int rank() {
    try {
      return KoilaNative.koila_group_rank(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** The number of processes in the group. */
  public int size() {
    try {
      return KoilaNative.koila_group_size(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** Every rank ends with {@code root}'s values of the tensors (concrete, same shapes everywhere). */
  public void broadcast(List<? extends Tensor> tensors, int root) {
    Tensor[] array = toArray(tensors, "tensors");
    long[] handles = Tensor.addresses(array, "tensors");
    try {
      KoilaException.check(KoilaNative.koila_group_broadcast(address(), handles, root));
    } finally {
      Reference.reachabilityFence(array);
      Reference.reachabilityFence(this);
    }
  }

  /**
   * Backward from this rank's loss over its own shard (chunked under the local budget), then
   * the gradient of the loss over the union of the shards is added into the gradients of
   * {@code params} on every rank: a MEAN loss weighs each rank by the count it averaged over.
   *
   * @param loss this rank's loss
   * @param params every tensor the gradients reach, in the same order on every rank
   */
  public void backward(Tensor loss, List<? extends Tensor> params) {
    Tensor[] array = toArray(params, "params");
    long[] handles = Tensor.addresses(array, "params");
    try {
      KoilaException.check(KoilaNative.koila_group_backward(address(), required(loss, "loss"), handles));
    } finally {
      Reference.reachabilityFence(array);
      Reference.reachabilityFence(loss);
      Reference.reachabilityFence(this);
    }
  }

  private static Tensor[] toArray(List<? extends Tensor> tensors, String name) {
    if (tensors == null) throw KoilaException.invalid("argument '" + name + "' is null");
    return tensors.toArray(new Tensor[0]);
  }
}
