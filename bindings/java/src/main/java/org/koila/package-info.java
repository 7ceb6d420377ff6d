/**
 * koila for Java: lazy LibTorch tensors that never run out of memory.
 *
 * <p>Wrap the input batch with {@link org.koila.Tensor#lazy(long)}; everything computed from
 * it is deferred, and reads and {@link org.koila.Tensor#backward()} run in chunks of the batch
 * when the whole batch does not fit the device's memory budget, with the same results and
 * gradients.
 *
 * <p>Every handle class ({@link org.koila.Tensor}, {@link org.koila.Module},
 * {@link org.koila.Optimizer}, {@link org.koila.Plan}) is {@link java.lang.AutoCloseable}:
 * {@code close()} frees the native object, is idempotent, and makes any later use throw a
 * {@link org.koila.KoilaException} (never a crash). Handles never closed are freed when they
 * become unreachable. A handle may move between threads but must not be used from two threads
 * at once. Failures throw the unchecked {@link org.koila.KoilaException} with a
 * {@link org.koila.Code}.
 *
 * <p>The native library {@code libkoila_jni.so} is found on {@code java.library.path}, or at
 * the path of the system property {@code koila.jni.library}. The raw SWIG layer,
 * {@link org.koila.raw.KoilaNative}, exposes every function of koila.h one to one.
 */
package org.koila;
