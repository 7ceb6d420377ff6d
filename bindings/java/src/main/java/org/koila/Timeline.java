package org.koila;

import java.lang.ref.Reference;
import java.util.ArrayList;
import java.util.List;
import org.koila.raw.KoilaNative;
import org.koila.raw.koila_memory_part;
import org.koila.raw.koila_phase;

/**
 * The memory timeline of a {@link Plan} ({@link Plan#timeline(boolean)}): the bytes on the device
 * operator by operator through the forward and the backward, as koila simulated the run, and
 * where the memory goes at the peak ({@link #part(Part)}; the parts add up to the plan's
 * estimate). Close it when done ({@link AutoCloseable}).
 */
public final class Timeline extends NativeHandle {
  /** Which pass an event belongs to. */
  public enum Phase {
    FORWARD,
    BACKWARD
  }

  /** A part of the peak; the parts add up to the plan's estimated peak of the run. */
  public enum Part {
    /** Held before the run: parameters, inputs, optimizer state, buffers. */
    IN_USE(koila_memory_part.KOILA_PART_IN_USE),
    /** Allocated by the forward and still held at the peak. */
    ACTIVATIONS(koila_memory_part.KOILA_PART_ACTIVATIONS),
    /** {@code .grad} of the leaves held at the peak. */
    GRADIENTS(koila_memory_part.KOILA_PART_GRADIENTS),
    /** The rest of the simulated peak. */
    TEMPORARIES(koila_memory_part.KOILA_PART_TEMPORARIES),
    /** What the estimate adds beyond the simulation (calibration by real probes). */
    BEYOND_SIMULATION(koila_memory_part.KOILA_PART_BEYOND_SIMULATION);

    private final int value;

    Part(int value) {
      this.value = value;
    }
  }

  /** One operator of the timeline. */
  public static final class Event {
    /** "aten::conv2d", "ConvolutionBackward0", ... */
    public final String op;
    public final Phase phase;
    /** Which chunk of the run (0-based; 0 when unsplit). */
    public final long chunk;
    /** Bytes held after the op, usage before the run included. */
    public final long liveBytes;
    /** The most held while it ran. */
    public final long peakBytes;

    Event(String op, Phase phase, long chunk, long liveBytes, long peakBytes) {
      this.op = op;
      this.phase = phase;
      this.chunk = chunk;
      this.liveBytes = liveBytes;
      this.peakBytes = peakBytes;
    }

    @Override
    public String toString() {
      return op + " (" + phase + ", chunk " + chunk + "): " + liveBytes + " B after, " + peakBytes + " B at most";
    }
  }

  private Timeline(long address) {
    super(address, KoilaNative::koila_timeline_free);
  }

  @Override
  String kind() {
    return "timeline";
  }

  static Timeline of(Plan plan, boolean unsplit) {
    long p = NativeHandle.required(plan, "plan");
    long[] out = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_plan_timeline(out, p, unsplit ? 1 : 0));
    } finally {
      Reference.reachabilityFence(plan);
    }
    return new Timeline(out[0]);
  }

  /** The number of events (at least 1). */
  public long length() {
    long[] out = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_timeline_length(address(), out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0];
  }

  /** Event {@code i} (0-based); {@link Code#INVALID_ARGUMENT} past the end. */
  public Event event(long i) {
    long t = address();
    try {
      String op = Text.read((buf, needed) -> KoilaNative.koila_timeline_op(t, i, buf, needed));
      int[] phase = new int[1];
      long[] chunk = new long[1], live = new long[1], peak = new long[1];
      KoilaException.check(KoilaNative.koila_timeline_phase(t, i, phase));
      KoilaException.check(KoilaNative.koila_timeline_chunk(t, i, chunk));
      KoilaException.check(KoilaNative.koila_timeline_live_bytes(t, i, live));
      KoilaException.check(KoilaNative.koila_timeline_peak_bytes(t, i, peak));
      return new Event(op, phase[0] == koila_phase.KOILA_PHASE_BACKWARD ? Phase.BACKWARD : Phase.FORWARD,
          chunk[0], live[0], peak[0]);
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** Every event, in execution order. */
  public List<Event> events() {
    long n = length();
    List<Event> events = new ArrayList<>();
    for (long i = 0; i < n; ++i) events.add(event(i));
    return events;
  }

  /** The index of the event with the largest peak. */
  public long peakIndex() {
    long[] out = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_timeline_peak_index(address(), out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0];
  }

  /** Bytes of one part of the peak. */
  public long part(Part part) {
    if (part == null) throw KoilaException.invalid("argument 'part' is null");
    long[] out = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_timeline_part(address(), part.value, out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0];
  }
}
