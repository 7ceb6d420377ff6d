package org.koila;

import java.lang.ref.Cleaner;
import java.util.function.LongConsumer;

/**
 * The owner of one native handle: frees it once, on {@link #close()} or, as a safety net,
 * when the object becomes unreachable without having been closed.
 *
 * <p>Every use reads the address through {@link #address()}, which throws once the handle is
 * closed, so a closed handle is never passed to C. Methods that pass the address to a native
 * call keep the object reachable until the call returns ({@code Reference.reachabilityFence}),
 * so the cleaner cannot free a handle that a running call uses.
 */
abstract class NativeHandle implements AutoCloseable {
  /** Frees handles, and other native memory Java objects keep (Tensor's direct buffers). */
  static final Cleaner CLEANER = Cleaner.create();

  /** Holds the address apart from the handle object, so that the cleaner can free it. */
  private static final class Owner implements Runnable {
    private volatile long address;
    private final LongConsumer free;

    Owner(long address, LongConsumer free) {
      this.address = address;
      this.free = free;
    }

    @Override
    public void run() {
      long a = address;
      address = 0;
      if (a != 0) free.accept(a);
    }
  }

  private final Owner owner;
  private final Cleaner.Cleanable cleanable;

  /** Takes ownership of {@code address}, released with {@code free}. */
  NativeHandle(long address, LongConsumer free) {
    if (address == 0) {
      throw new KoilaException(Code.INTERNAL, "koila returned no " + kind() + " and no error");
    }
    owner = new Owner(address, free);
    cleanable = CLEANER.register(this, owner);
  }

  /** "tensor", "plan", ...: names the handle in messages. */
  abstract String kind();

  /** The native address; throws when the handle is closed. */
  final long address() {
    long a = owner.address;
    if (a == 0) throw KoilaException.invalid("this " + kind() + " is closed");
    return a;
  }

  /**
   * The native address of an argument: 0 for null (which the C side reports by name);
   * throws when the handle is closed.
   */
  static long addressOf(NativeHandle h, String name) {
    if (h == null) return 0;
    long a = h.owner.address;
    if (a == 0) throw KoilaException.invalid("argument '" + name + "' is a closed " + h.kind());
    return a;
  }

  /** The native address of a required argument: throws for null and for a closed handle. */
  static long required(NativeHandle h, String name) {
    if (h == null) throw KoilaException.invalid("argument '" + name + "' is null");
    return addressOf(h, name);
  }

  /** True once {@link #close()} ran. */
  public final boolean isClosed() {
    return owner.address == 0;
  }

  /**
   * Frees the native handle. Idempotent; any later use of this object throws a
   * {@link KoilaException} with {@link Code#INVALID_ARGUMENT}. Other handles stay valid (a
   * tensor keeps alive what it depends on).
   */
  @Override
  public final void close() {
    cleanable.clean();
  }
}
