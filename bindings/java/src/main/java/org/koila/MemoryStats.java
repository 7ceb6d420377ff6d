package org.koila;

/** Bytes held by tensors on a device now and at most since the last reset ({@link Koila#memoryStats}). */
public final class MemoryStats {
  private final long currentBytes;
  private final long peakBytes;

  /**
   * @param currentBytes bytes held now
   * @param peakBytes the most bytes held at once since the last reset
   */
  public MemoryStats(long currentBytes, long peakBytes) {
    this.currentBytes = currentBytes;
    this.peakBytes = peakBytes;
  }

  /** Bytes held by tensors on the device now. */
  public long currentBytes() {
    return currentBytes;
  }

  /** The most bytes held at once since the last {@link Koila#memoryResetPeak}. */
  public long peakBytes() {
    return peakBytes;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof MemoryStats)) return false;
    MemoryStats other = (MemoryStats) o;
    return currentBytes == other.currentBytes && peakBytes == other.peakBytes;
  }

  @Override
  public int hashCode() {
    return Long.hashCode(currentBytes) * 31 + Long.hashCode(peakBytes);
  }

  @Override
  public String toString() {
    return "MemoryStats[current=" + currentBytes + ", peak=" + peakBytes + "]";
  }
}
