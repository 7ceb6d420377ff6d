package org.koila;

import org.koila.raw.KoilaNative;

/**
 * Library-wide functions: version, random seed, the memory budget and measurements of a
 * device, and chunking options.
 *
 * <p>Devices are strings: {@code "cpu"}, {@code "cuda"}, {@code "cuda:N"}. Byte counts are
 * {@code long}s (the C side uses unsigned 64-bit integers; no real count reaches 2^63).
 */
public final class Koila {
  /** Major version of the C API this binding was built against. */
  public static final int VERSION_MAJOR = KoilaNative.KOILA_VERSION_MAJOR;
  /** Minor version of the C API this binding was built against. */
  public static final int VERSION_MINOR = KoilaNative.KOILA_VERSION_MINOR;
  /** Patch version of the C API this binding was built against. */
  public static final int VERSION_PATCH = KoilaNative.KOILA_VERSION_PATCH;

  private Koila() {}

  /** The version of the loaded native library, for example {@code "0.1.0"}. */
  public static String version() {
    return KoilaNative.koila_version();
  }

  /** Seeds every random generator koila uses (randn, dropout) on every device. */
  public static void manualSeed(long seed) {
    KoilaException.check(KoilaNative.koila_manual_seed(seed));
  }

  /**
   * Saves the state of every random generator koila uses (the CPU's, and each CUDA device's),
   * which {@link #manualSeed} seeds. Atomic, as {@link Optimizer#save(String)}: the file is
   * afterwards the complete old one or the complete new one. With the module and optimizer
   * files, a run restarted from them continues bit for bit, dropout included. Planning never
   * draws from these generators: a seeded step gives the same result whether or not its
   * structure was planned before.
   *
   * @throws KoilaException {@link Code#IO} when the file cannot be written
   */
  public static void rngSave(String path) {
    if (path == null) throw KoilaException.invalid("argument 'path' is null");
    KoilaException.check(KoilaNative.koila_rng_save(path));
  }

  /**
   * Loads what {@link #rngSave} wrote: every generator the file holds takes its saved state.
   *
   * @throws KoilaException {@link Code#IO} for a missing, truncated, corrupt or newer file,
   *     {@link Code#INVALID_ARGUMENT} for a file holding a CUDA device this process lacks;
   *     either way no generator changes
   */
  public static void rngLoad(String path) {
    if (path == null) throw KoilaException.invalid("argument 'path' is null");
    KoilaException.check(KoilaNative.koila_rng_load(path));
  }

  /**
   * Sets the bytes koila may use on a device. Reads and backward passes of lazy batches run
   * in chunks to stay within it. Thread-safe.
   *
   * @param device "cpu", "cuda" or "cuda:N"
   * @param bytes the budget, or 0 for the automatic one (what is in use plus the device's free
   *     memory, less a tenth of that free memory)
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for a negative budget,
   *     {@link Code#DEVICE} for an unknown or unavailable device
   */
  public static void setMemoryBudget(String device, long bytes) {
    if (bytes < 0) throw KoilaException.invalid("a memory budget is >= 0 bytes (0: automatic), not " + bytes);
    KoilaException.check(KoilaNative.koila_set_memory_budget(device, bytes));
  }

  /** The budget in force on a device, in bytes (the automatic one resolved now). */
  public static long memoryBudget(String device) {
    long[] out = new long[1];
    KoilaException.check(KoilaNative.koila_memory_budget(device, out));
    return out[0];
  }

  /** Bytes held by tensors on a device now, and the most held at once since the last reset. */
  public static MemoryStats memoryStats(String device) {
    long[] current = new long[1];
    long[] peak = new long[1];
    KoilaException.check(KoilaNative.koila_memory_stats(device, current, peak));
    return new MemoryStats(current[0], peak[0]);
  }

  /** Starts a new peak measurement on a device: the peak becomes the current usage. */
  public static void memoryResetPeak(String device) {
    KoilaException.check(KoilaNative.koila_memory_reset_peak(device));
  }

  /**
   * Sets how batch norm in training is chunked, for plans made from now on (every read and
   * backward plans). One setting for the process; thread-safe. {@link Plan#describe()} says
   * when statistics per chunk applied.
   */
  public static void setBatchStats(BatchStats policy) {
    if (policy == null) throw KoilaException.invalid("argument 'policy' is null");
    KoilaException.check(KoilaNative.koila_set_batch_stats(policy.value()));
  }

  /**
   * Sets which chunk size plans pick among those that fit the budget, for plans made from
   * now on. One setting for the process; thread-safe.
   */
  public static void setChunking(Chunking policy) {
    if (policy == null) throw KoilaException.invalid("argument 'policy' is null");
    KoilaException.check(KoilaNative.koila_set_chunking(policy.value()));
  }

  /**
   * Sets whether plans made from now on may free activations in the forward and recompute them
   * in the backward, where no chunk fits without it. One setting for the process; thread-safe.
   */
  public static void setRecompute(Recompute policy) {
    if (policy == null) throw KoilaException.invalid("argument 'policy' is null");
    KoilaException.check(KoilaNative.koila_set_recompute(policy.value()));
  }

  /**
   * Reports each chunk of planned runs to {@code listener}, or turns reports off ({@code
   * null}). One listener for the process; thread-safe. After each chunk of an evaluation
   * (a read of a lazy tensor) it is called with {@code "forward"}, after each chunk of a
   * backward with {@code "backward"}, counting 1 to the number of chunks of that run (1
   * when it runs unsplit). A backward whose loss is computed from values combined over the
   * batch reports the combining pass as {@code "forward"} first; a retry after running out
   * of memory counts again from 1. Planning ({@link Plan}) reports nothing.
   *
   * <p>The listener runs on the thread running the chunk, possibly on several threads at
   * once. It must not read lazy tensors, plan or call backward: those fail there with
   * {@link Code#UNSUPPORTED}. An exception it throws cannot cross koila's C code: it is
   * printed to standard error and dropped.
   */
  public static void setProgress(ProgressListener listener) {
    KoilaException.check(KoilaNative.koila_set_progress(listener));
  }
}
