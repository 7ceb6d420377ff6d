package org.koila;

/**
 * Receives a report after each chunk of a planned evaluation or backward; see
 * {@link Koila#setProgress}.
 */
@FunctionalInterface
public interface ProgressListener {
  /**
   * Called on the thread running the chunk.
   *
   * @param what {@code "forward"} or {@code "backward"}
   * @param done the chunks done so far in this run, 1 to {@code total}
   * @param total the number of chunks of this run (1 when it runs unsplit)
   */
  void onChunk(String what, long done, long total);
}
