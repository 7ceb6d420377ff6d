package org.koila;

import java.lang.ref.Reference;
import org.koila.raw.KoilaNative;

/**
 * What evaluating a tensor ({@link Mode#FORWARD}) or a backward pass from it
 * ({@link Mode#TRAINING}) would do now, under the memory budget in force, without running it:
 * the batch, the chunk size and count, and the estimated peak memory.
 *
 * <p>A snapshot: it does not follow later changes of the budget. Close it when done
 * ({@link AutoCloseable}); a closed plan throws on use. A plan may move between threads but
 * must not be used from two threads at once.
 */
public final class Plan extends NativeHandle {
  private Plan(long address) {
    super(address, KoilaNative::koila_plan_free);
  }

  @Override
  String kind() {
    return "plan";
  }

  /**
   * Plans the evaluation of {@code tensor} or a backward pass from it.
   *
   * @throws KoilaException as the run would fail: {@link Code#OUT_OF_MEMORY} when not even a
   *     chunk of one sample fits the budget, {@link Code#NOT_SPLITTABLE} (naming the op) when the
   *     graph mixes samples across the batch and does not fit unsplit
   */
  public static Plan of(Tensor tensor, Mode mode) {
    if (mode == null) throw KoilaException.invalid("argument 'mode' is null");
    long t = NativeHandle.required(tensor, "tensor");
    long[] out = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_plan_new(out, t, mode.value()));
    } finally {
      Reference.reachabilityFence(tensor);
    }
    return new Plan(out[0]);
  }

  /** The batch size, or -1 when the tensor has no lazy batch. */
  public long batchSize() {
    try {
      return KoilaNative.koila_plan_batch_size(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** The largest chunk of samples: a power of two, or the whole batch when it fits (-1: no batch). */
  public long chunkSize() {
    try {
      return KoilaNative.koila_plan_chunk_size(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** The number of chunks; 1 when the whole batch runs at once. */
  public long numChunks() {
    try {
      return KoilaNative.koila_plan_num_chunks(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** Estimated peak bytes on the device during the planned run, usage before it included. */
  public long peakBytes() {
    try {
      return KoilaNative.koila_plan_peak_bytes(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** Estimated peak bytes if the batch ran unsplit. */
  public long fullPeakBytes() {
    try {
      return KoilaNative.koila_plan_full_peak_bytes(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /**
   * Bytes of activations a chunk frees in its forward and recomputes in its backward; 0 when
   * nothing is recomputed. {@link #describe} names what and its cost.
   */
  public long recomputedBytes() {
    try {
      return KoilaNative.koila_plan_recomputed_bytes(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /**
   * The budget the planned run needs, in bytes: those in use plus the estimate with koila's
   * margin (a tenth of the estimate) on top. A run fits when this is at most the budget.
   */
  public long neededBytes() {
    try {
      return KoilaNative.koila_plan_needed_bytes(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** The same if the batch ran unsplit: the batch is split exactly when this exceeds the budget. */
  public long fullNeededBytes() {
    try {
      return KoilaNative.koila_plan_full_needed_bytes(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** The budget the plan was made under, in bytes. */
  public long budgetBytes() {
    try {
      return KoilaNative.koila_plan_budget_bytes(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** A human-readable account: batch, chunk, chunks, estimated peak, budget, and why. */
  public String describe() {
    long p = address();
    try {
      return Text.read((buf, needed) -> KoilaNative.koila_plan_describe(p, buf, needed));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /**
   * The plan's memory timeline: its planned chunks ({@code unsplit} false; the first two, as
   * simulated) or the whole batch at once.
   *
   * @throws KoilaException {@link Code#UNSUPPORTED} when the plan's figures were not simulated
   */
  public Timeline timeline(boolean unsplit) {
    return Timeline.of(this, unsplit);
  }

  /** {@link #describe()}, or "Plan(closed)"; never throws. */
  @Override
  public String toString() {
    if (isClosed()) return "Plan(closed)";
    try {
      return describe();
    } catch (KoilaException e) {
      return "Plan(" + e.getMessage() + ")";
    }
  }
}
