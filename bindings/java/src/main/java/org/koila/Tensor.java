package org.koila;

import java.lang.ref.Reference;
import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.DoubleBuffer;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;
import java.nio.ShortBuffer;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;
import org.koila.raw.KoilaNative;

/**
 * A koila tensor: concrete (holding values) or lazy (a recipe evaluated when read).
 *
 * <p>Wrap the input batch with {@link #lazy(long)} and everything computed from it is
 * deferred: shapes, dtypes and batch dims are known at once (and errors are reported when an
 * operation is built), values are computed when read ({@link #item()}, {@link #toFloatArray()},
 * ...) or backpropagated ({@link #backward()}), in chunks of the batch when the whole batch
 * does not fit the device's memory budget.
 *
 * <pre>{@code
 * try (Tensor x = Tensor.fromFloats(data, 64, 784); Tensor batch = x.lazy(0)) {
 *   Tensor loss = model.forward(batch).crossEntropy(labels, Reduction.MEAN);
 *   loss.backward();        // split into chunks if 64 samples do not fit at once
 * }
 * }</pre>
 *
 * <p><b>Ownership.</b> Every tensor this API returns is a new handle owned by the caller;
 * {@link #close()} frees it (try-with-resources). Handles may be closed in any order: a
 * tensor keeps alive the graph it depends on, so closing an input of a lazy result is safe.
 * Using a closed tensor, or passing one as an argument, throws a {@link KoilaException} with
 * {@link Code#INVALID_ARGUMENT}. A tensor that is never closed is freed when the garbage
 * collector finds it unreachable; the collector does not see the native memory, so close
 * large tensors explicitly.
 *
 * <p><b>Threads.</b> A tensor may move between threads but must not be used from two threads
 * at once (including closing it while another thread uses it).
 *
 * <p><b>Errors.</b> Every failure throws a {@link KoilaException} carrying a {@link Code}:
 * {@link Code#SHAPE} and {@link Code#DTYPE} when an operation is built on inputs it does not
 * take, {@link Code#OUT_OF_MEMORY} or {@link Code#NOT_SPLITTABLE} when a read or a backward pass
 * cannot fit the budget, {@link Code#INVALID_ARGUMENT} for null or closed tensors and bad
 * values.
 *
 * <p>Operations broadcast and promote dtypes as PyTorch does; dims may be negative (counting
 * from the end). The result of an operation is lazy when any input is lazy, else computed at
 * once.
 */
public final class Tensor extends NativeHandle {
  /** Passed to {@link #lazy(long)}: defer the tensor but give it no batch dimension. */
  public static final long NO_BATCH = KoilaNative.KOILA_NO_BATCH;

  /** The device factories use when none is given. */
  public static final String DEFAULT_DEVICE = "cpu";

  private static final ByteOrder NATIVE = ByteOrder.nativeOrder();
  private static final long[] SCALAR = new long[0];

  private Tensor(long address) {
    super(address, KoilaNative::koila_tensor_free);
  }

  @Override
  String kind() {
    return "tensor";
  }

  // ---------------------------------------------------------------------------------------
  // Calls into C
  // ---------------------------------------------------------------------------------------

  /** A raw call that writes a new tensor handle to {@code out[0]} and returns a status. */
  @FunctionalInterface
  interface Producer {
    long call(long[] out);
  }

  /**
   * Runs {@code producer} and wraps the tensor it returns, keeping {@code inputs} (the handles
   * whose addresses it passes) reachable until the call has returned.
   */
  static Tensor produce(Producer producer, Object... inputs) {
    long[] out = new long[1];
    try {
      KoilaException.check(producer.call(out));
    } finally {
      Reference.reachabilityFence(inputs);
    }
    return new Tensor(out[0]);
  }

  /** As {@link #produce}, but null when the call returns no tensor. */
  static Tensor produceOptional(Producer producer, Object... inputs) {
    long[] out = new long[1];
    try {
      KoilaException.check(producer.call(out));
    } finally {
      Reference.reachabilityFence(inputs);
    }
    return out[0] == 0 ? null : new Tensor(out[0]);
  }

  /** A tensor for a new handle koila returned, null for 0 (a None result). */
  static Tensor adopt(long address) {
    return address == 0 ? null : new Tensor(address);
  }

  /** The handles of {@code tensors}: throws for a null array, a null or a closed tensor. */
  static long[] addresses(Tensor[] tensors, String name) {
    if (tensors == null) throw KoilaException.invalid("argument '" + name + "' is null");
    long[] out = new long[tensors.length];
    for (int i = 0; i < tensors.length; ++i) out[i] = required(tensors[i], name + "[" + i + "]");
    return out;
  }

  private static long[] shapeArg(long[] shape) {
    if (shape == null) throw KoilaException.invalid("argument 'shape' is null (an empty array is a scalar)");
    return shape;
  }

  private static long[] longsArg(long[] values, String name) {
    if (values == null) throw KoilaException.invalid("argument '" + name + "' is null");
    return values;
  }

  /**
   * Checks a convolution or pooling parameter: null (the default), one value (for every
   * spatial dim, as an int in PyTorch) or {@code n} values.
   */
  private static long[] sizesArg(long[] values, int n, String name) {
    if (values != null && values.length != 1 && values.length != n) {
      throw KoilaException.invalid("argument '" + name + "' takes " + (n == 1 ? "1 value" : "1 or " + n + " values")
          + ", got " + values.length + " " + Arrays.toString(values));
    }
    return values;
  }

  private static DType dtypeArg(DType dtype) {
    if (dtype == null) throw KoilaException.invalid("argument 'dtype' is null");
    return dtype;
  }

  private static long numelOf(long[] shape) {
    long n = 1;
    for (long d : shape) {
      if (d < 0) return -1;
      n = Math.multiplyExact(n, d);
    }
    return n;
  }

  // ---------------------------------------------------------------------------------------
  // Factories
  // ---------------------------------------------------------------------------------------

  /**
   * A concrete tensor holding a copy of raw bytes: row-major elements of {@code dtype} in the
   * platform's byte order ({@link ByteOrder#nativeOrder()}).
   *
   * @param data {@code numel * dtype.elementSize()} bytes
   * @param dtype the element type
   * @param shape the sizes (an empty array for a scalar)
   * @param device "cpu", "cuda" or "cuda:N"
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} when the byte count does not match the
   *     shape, {@link Code#DEVICE} for an unknown device
   */
  public static Tensor fromData(byte[] data, DType dtype, long[] shape, String device) {
    if (data == null) throw KoilaException.invalid("argument 'data' is null");
    int value = dtypeArg(dtype).value();
    long[] dims = shapeArg(shape);
    return produce(out -> KoilaNative.koila_tensor_from_data(out, data, value, dims, device));
  }

  /** Checks that {@code count} values fill {@code shape}. */
  private static void checkCount(String what, int count, long[] shape) {
    long[] dims = shapeArg(shape);
    long numel;
    try {
      numel = numelOf(dims);
    } catch (ArithmeticException e) {
      numel = -1;
    }
    if (numel >= 0 && numel != count) {
      throw KoilaException.invalid(
          what + ": " + count + " values but shape " + Arrays.toString(dims) + " has " + numel + " elements");
    }
  }

  private static ByteBuffer buffer(int count, int size) {
    if (count > (Integer.MAX_VALUE - 8) / size) {
      throw new KoilaException(Code.UNSUPPORTED, count + " values of " + size + " bytes exceed a Java byte array;"
          + " build the tensor from parts with cat");
    }
    return ByteBuffer.allocate(count * size).order(NATIVE);
  }

  /** A FLOAT32 tensor on the CPU holding a copy of {@code data} (row-major) with the given shape. */
  public static Tensor fromFloats(float[] data, long... shape) {
    return fromFloats(data, shape, DType.FLOAT32, DEFAULT_DEVICE);
  }

  /** A FLOAT32 tensor on {@code device} holding a copy of {@code data} (row-major). */
  public static Tensor fromFloats(float[] data, long[] shape, String device) {
    return fromFloats(data, shape, DType.FLOAT32, device);
  }

  /**
   * A floating tensor holding {@code data} (row-major) converted to {@code dtype}: FLOAT32,
   * FLOAT64, FLOAT16 or BFLOAT16 (rounded to nearest even).
   *
   * @throws KoilaException {@link Code#DTYPE} for an integer dtype
   */
  public static Tensor fromFloats(float[] data, long[] shape, DType dtype, String device) {
    if (data == null) throw KoilaException.invalid("argument 'data' is null");
    checkCount("fromFloats", data.length, shape);
    ByteBuffer bytes;
    switch (dtypeArg(dtype)) {
      case FLOAT32:
        bytes = buffer(data.length, 4);
        bytes.asFloatBuffer().put(data);
        break;
      case FLOAT64:
        bytes = buffer(data.length, 8);
        for (int i = 0; i < data.length; ++i) bytes.putDouble(8 * i, data[i]);
        break;
      case FLOAT16:
        bytes = buffer(data.length, 2);
        for (int i = 0; i < data.length; ++i) bytes.putShort(2 * i, Half.fromFloat(data[i]));
        break;
      case BFLOAT16:
        bytes = buffer(data.length, 2);
        for (int i = 0; i < data.length; ++i) bytes.putShort(2 * i, Half.bfloat16FromFloat(data[i]));
        break;
      default:
        throw new KoilaException(Code.DTYPE, "fromFloats makes floating tensors, not " + dtype);
    }
    return fromData(bytes.array(), dtype, shape, device);
  }

  /** A FLOAT64 tensor on the CPU holding a copy of {@code data} (row-major). */
  public static Tensor fromDoubles(double[] data, long... shape) {
    return fromDoubles(data, shape, DEFAULT_DEVICE);
  }

  /** A FLOAT64 tensor on {@code device} holding a copy of {@code data} (row-major). */
  public static Tensor fromDoubles(double[] data, long[] shape, String device) {
    if (data == null) throw KoilaException.invalid("argument 'data' is null");
    checkCount("fromDoubles", data.length, shape);
    ByteBuffer bytes = buffer(data.length, 8);
    bytes.asDoubleBuffer().put(data);
    return fromData(bytes.array(), DType.FLOAT64, shape, device);
  }

  /** An INT64 tensor on the CPU holding a copy of {@code data} (row-major). */
  public static Tensor fromLongs(long[] data, long... shape) {
    return fromLongs(data, shape, DEFAULT_DEVICE);
  }

  /** An INT64 tensor on {@code device} holding a copy of {@code data} (row-major). */
  public static Tensor fromLongs(long[] data, long[] shape, String device) {
    if (data == null) throw KoilaException.invalid("argument 'data' is null");
    checkCount("fromLongs", data.length, shape);
    ByteBuffer bytes = buffer(data.length, 8);
    bytes.asLongBuffer().put(data);
    return fromData(bytes.array(), DType.INT64, shape, device);
  }

  /** An INT32 tensor on the CPU holding a copy of {@code data} (row-major). */
  public static Tensor fromInts(int[] data, long... shape) {
    return fromInts(data, shape, DEFAULT_DEVICE);
  }

  /** An INT32 tensor on {@code device} holding a copy of {@code data} (row-major). */
  public static Tensor fromInts(int[] data, long[] shape, String device) {
    if (data == null) throw KoilaException.invalid("argument 'data' is null");
    checkCount("fromInts", data.length, shape);
    ByteBuffer bytes = buffer(data.length, 4);
    bytes.asIntBuffer().put(data);
    return fromData(bytes.array(), DType.INT32, shape, device);
  }

  /** An INT8 tensor on the CPU holding a copy of {@code data} (row-major). */
  public static Tensor fromBytes(byte[] data, long... shape) {
    return fromBytes(data, shape, DEFAULT_DEVICE);
  }

  /** An INT8 tensor on {@code device} holding a copy of {@code data} (row-major). */
  public static Tensor fromBytes(byte[] data, long[] shape, String device) {
    if (data == null) throw KoilaException.invalid("argument 'data' is null");
    checkCount("fromBytes", data.length, shape);
    return fromData(data, DType.INT8, shape, device);
  }

  /** A UINT8 tensor on the CPU holding a copy of {@code data} (each byte read as 0 to 255). */
  public static Tensor fromUnsignedBytes(byte[] data, long... shape) {
    return fromUnsignedBytes(data, shape, DEFAULT_DEVICE);
  }

  /** A UINT8 tensor on {@code device} holding a copy of {@code data} (each byte read as 0 to 255). */
  public static Tensor fromUnsignedBytes(byte[] data, long[] shape, String device) {
    if (data == null) throw KoilaException.invalid("argument 'data' is null");
    checkCount("fromUnsignedBytes", data.length, shape);
    return fromData(data, DType.UINT8, shape, device);
  }

  /** A BOOL tensor on the CPU holding a copy of {@code data} (row-major). */
  public static Tensor fromBooleans(boolean[] data, long... shape) {
    return fromBooleans(data, shape, DEFAULT_DEVICE);
  }

  /** A BOOL tensor on {@code device} holding a copy of {@code data} (row-major). */
  public static Tensor fromBooleans(boolean[] data, long[] shape, String device) {
    if (data == null) throw KoilaException.invalid("argument 'data' is null");
    checkCount("fromBooleans", data.length, shape);
    byte[] bytes = new byte[data.length];
    for (int i = 0; i < data.length; ++i) bytes[i] = (byte) (data[i] ? 1 : 0);
    return fromData(bytes, DType.BOOL, shape, device);
  }

  /** A FLOAT32 tensor of zeros on the CPU. */
  public static Tensor zeros(long... shape) {
    return zeros(shape, DType.FLOAT32, DEFAULT_DEVICE);
  }

  /** A tensor of zeros on the CPU. */
  public static Tensor zeros(long[] shape, DType dtype) {
    return zeros(shape, dtype, DEFAULT_DEVICE);
  }

  /** A tensor of zeros. */
  public static Tensor zeros(long[] shape, DType dtype, String device) {
    long[] dims = shapeArg(shape);
    int value = dtypeArg(dtype).value();
    return produce(out -> KoilaNative.koila_tensor_zeros(out, dims, value, device));
  }

  /** A FLOAT32 tensor of ones on the CPU. */
  public static Tensor ones(long... shape) {
    return ones(shape, DType.FLOAT32, DEFAULT_DEVICE);
  }

  /** A tensor of ones on the CPU. */
  public static Tensor ones(long[] shape, DType dtype) {
    return ones(shape, dtype, DEFAULT_DEVICE);
  }

  /** A tensor of ones. */
  public static Tensor ones(long[] shape, DType dtype, String device) {
    long[] dims = shapeArg(shape);
    int value = dtypeArg(dtype).value();
    return produce(out -> KoilaNative.koila_tensor_ones(out, dims, value, device));
  }

  /** A FLOAT32 tensor of standard normal samples on the CPU (see {@link Koila#manualSeed}). */
  public static Tensor randn(long... shape) {
    return randn(shape, DType.FLOAT32, DEFAULT_DEVICE);
  }

  /** A tensor of standard normal samples on the CPU; floating dtypes only. */
  public static Tensor randn(long[] shape, DType dtype) {
    return randn(shape, dtype, DEFAULT_DEVICE);
  }

  /**
   * A tensor of standard normal samples.
   *
   * @throws KoilaException {@link Code#DTYPE} for a dtype that is not floating
   */
  public static Tensor randn(long[] shape, DType dtype, String device) {
    long[] dims = shapeArg(shape);
    int value = dtypeArg(dtype).value();
    return produce(out -> KoilaNative.koila_tensor_randn(out, dims, value, device));
  }

  // ---------------------------------------------------------------------------------------
  // Laziness and metadata (never evaluates)
  // ---------------------------------------------------------------------------------------

  /**
   * A lazy tensor reading this one: everything computed from it is deferred, and dimension
   * {@code batchDim} is the batch that may be split into chunks. It reads the current values
   * of this tensor each time it is evaluated (no copy).
   *
   * @param batchDim the batch dimension (negative counts from the end), or {@link #NO_BATCH}
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for a dim out of range, or when this
   *     tensor is lazy with another batch dim
   */
  public Tensor lazy(long batchDim) {
    return produce(out -> KoilaNative.koila_lazy(out, address(), batchDim), this);
  }

  /** A lazy tensor reading this one, with no batch dimension ({@code lazy(NO_BATCH)}). */
  public Tensor lazyWithoutBatch() {
    return lazy(NO_BATCH);
  }

  /** The sizes of the dimensions (empty for a scalar). Never evaluates. */
  public long[] shape() {
    long[] dims = new long[8];
    long[] ndim = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_tensor_shape(address(), dims, ndim));
      if (ndim[0] > dims.length) {
        dims = new long[(int) ndim[0]];
        KoilaException.check(KoilaNative.koila_tensor_shape(address(), dims, ndim));
      }
    } finally {
      Reference.reachabilityFence(this);
    }
    return Arrays.copyOf(dims, (int) ndim[0]);
  }

  /** The number of dimensions. Never evaluates. */
  public int ndim() {
    long[] ndim = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_tensor_shape(address(), null, ndim));
    } finally {
      Reference.reachabilityFence(this);
    }
    return (int) ndim[0];
  }

  /** The size of dimension {@code dim} (negative counts from the end). Never evaluates. */
  public long size(int dim) {
    long[] shape = shape();
    int d = dim < 0 ? dim + shape.length : dim;
    if (d < 0 || d >= shape.length) {
      throw KoilaException.invalid("dim " + dim + " is out of range for a tensor of " + shape.length + " dims");
    }
    return shape[d];
  }

  /** The number of elements. Never evaluates. */
  public long numel() {
    return numelOf(shape());
  }

  /** The element type. Never evaluates. */
  public DType dtype() {
    int[] out = new int[1];
    try {
      KoilaException.check(KoilaNative.koila_tensor_dtype(address(), out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return DType.of(out[0]);
  }

  /** The dimension that carries the batch, or -1 when the tensor has none. Never evaluates. */
  public long batchDim() {
    long[] out = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_tensor_batch_dim(address(), out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0];
  }

  /** True when the tensor is deferred (computed when read). Never evaluates. */
  public boolean isLazy() {
    int[] out = new int[1];
    try {
      KoilaException.check(KoilaNative.koila_tensor_is_lazy(address(), out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0] != 0;
  }

  // ---------------------------------------------------------------------------------------
  // Reading values (evaluates, in chunks when the budget requires it; records no gradients)
  // ---------------------------------------------------------------------------------------

  /**
   * The raw bytes of the values: row-major elements in the platform's byte order.
   *
   * @throws KoilaException {@link Code#UNSUPPORTED} when the values exceed a Java array,
   *     {@link Code#OUT_OF_MEMORY} or {@link Code#NOT_SPLITTABLE} when evaluation cannot fit
   *     the memory budget
   */
  public byte[] toBytes() {
    long[] shape = shape();
    DType dtype = dtype();
    long nbytes;
    try {
      nbytes = Math.multiplyExact(numelOf(shape), (long) dtype.elementSize());
    } catch (ArithmeticException e) {
      nbytes = Long.MAX_VALUE;
    }
    if (nbytes > Integer.MAX_VALUE - 8) {
      throw new KoilaException(Code.UNSUPPORTED, "a tensor of shape " + Arrays.toString(shape) + " " + dtype
          + " does not fit a Java array");
    }
    byte[] data = new byte[(int) nbytes];
    try {
      KoilaException.check(KoilaNative.koila_tensor_to_host(address(), data));
    } finally {
      Reference.reachabilityFence(this);
    }
    return data;
  }

  private ByteBuffer read() {
    return ByteBuffer.wrap(toBytes()).order(NATIVE);
  }

  private KoilaException cannotRead(String as, DType dtype) {
    return new KoilaException(Code.DTYPE, "cannot read a " + dtype + " tensor as " + as
        + " without loss (use toDoubleArray, or the reader of its dtype)");
  }

  /**
   * The values as floats (row-major): for FLOAT32, FLOAT16 and BFLOAT16 tensors.
   *
   * @throws KoilaException {@link Code#DTYPE} for other dtypes
   */
  public float[] toFloatArray() {
    DType dtype = dtype();
    if (dtype != DType.FLOAT32 && dtype != DType.FLOAT16 && dtype != DType.BFLOAT16) {
      throw cannotRead("float[]", dtype);
    }
    ByteBuffer bytes = read();
    float[] values = new float[bytes.capacity() / dtype.elementSize()];
    if (dtype == DType.FLOAT32) {
      bytes.asFloatBuffer().get(values);
    } else {
      for (int i = 0; i < values.length; ++i) {
        short bits = bytes.getShort(2 * i);
        values[i] = dtype == DType.FLOAT16 ? Half.toFloat(bits) : Half.bfloat16ToFloat(bits);
      }
    }
    return values;
  }

  /**
   * The values as doubles (row-major), for every dtype (BOOL as 0 and 1, UINT8 as 0 to 255;
   * INT64 values beyond 2^53 lose precision).
   */
  public double[] toDoubleArray() {
    DType dtype = dtype();
    ByteBuffer bytes = read();
    double[] values = new double[bytes.capacity() / dtype.elementSize()];
    switch (dtype) {
      case FLOAT64:
        bytes.asDoubleBuffer().get(values);
        break;
      case FLOAT32:
        for (int i = 0; i < values.length; ++i) values[i] = bytes.getFloat(4 * i);
        break;
      case FLOAT16:
        for (int i = 0; i < values.length; ++i) values[i] = Half.toFloat(bytes.getShort(2 * i));
        break;
      case BFLOAT16:
        for (int i = 0; i < values.length; ++i) values[i] = Half.bfloat16ToFloat(bytes.getShort(2 * i));
        break;
      case INT64:
        for (int i = 0; i < values.length; ++i) values[i] = bytes.getLong(8 * i);
        break;
      case INT32:
        for (int i = 0; i < values.length; ++i) values[i] = bytes.getInt(4 * i);
        break;
      case INT8:
        for (int i = 0; i < values.length; ++i) values[i] = bytes.get(i);
        break;
      case UINT8:
      case BOOL:
        for (int i = 0; i < values.length; ++i) values[i] = bytes.get(i) & 0xff;
        break;
    }
    return values;
  }

  /**
   * The values as longs (row-major): for INT64, INT32, INT8, UINT8 (0 to 255) and BOOL (0 and
   * 1) tensors.
   *
   * @throws KoilaException {@link Code#DTYPE} for floating dtypes
   */
  public long[] toLongArray() {
    DType dtype = dtype();
    if (dtype.isFloatingPoint()) throw cannotRead("long[]", dtype);
    ByteBuffer bytes = read();
    long[] values = new long[bytes.capacity() / dtype.elementSize()];
    switch (dtype) {
      case INT64:
        bytes.asLongBuffer().get(values);
        break;
      case INT32:
        for (int i = 0; i < values.length; ++i) values[i] = bytes.getInt(4 * i);
        break;
      case INT8:
        for (int i = 0; i < values.length; ++i) values[i] = bytes.get(i);
        break;
      default: // UINT8, BOOL
        for (int i = 0; i < values.length; ++i) values[i] = bytes.get(i) & 0xff;
        break;
    }
    return values;
  }

  /**
   * The values as ints (row-major): for INT32, INT8, UINT8 (0 to 255) and BOOL (0 and 1)
   * tensors.
   *
   * @throws KoilaException {@link Code#DTYPE} for other dtypes (use {@link #toLongArray()} for INT64)
   */
  public int[] toIntArray() {
    DType dtype = dtype();
    if (dtype.isFloatingPoint() || dtype == DType.INT64) throw cannotRead("int[]", dtype);
    ByteBuffer bytes = read();
    int[] values = new int[bytes.capacity() / dtype.elementSize()];
    if (dtype == DType.INT32) {
      bytes.asIntBuffer().get(values);
    } else if (dtype == DType.INT8) {
      for (int i = 0; i < values.length; ++i) values[i] = bytes.get(i);
    } else {
      for (int i = 0; i < values.length; ++i) values[i] = bytes.get(i) & 0xff;
    }
    return values;
  }

  /**
   * The values of an INT8, UINT8 or BOOL tensor as bytes (row-major; UINT8 values above 127
   * come back negative, as Java bytes do).
   *
   * @throws KoilaException {@link Code#DTYPE} for other dtypes
   */
  public byte[] toByteArray() {
    DType dtype = dtype();
    if (dtype != DType.INT8 && dtype != DType.UINT8 && dtype != DType.BOOL) throw cannotRead("byte[]", dtype);
    return toBytes();
  }

  /**
   * The values of a BOOL tensor (row-major).
   *
   * @throws KoilaException {@link Code#DTYPE} for other dtypes
   */
  public boolean[] toBooleanArray() {
    DType dtype = dtype();
    if (dtype != DType.BOOL) throw cannotRead("boolean[]", dtype);
    byte[] bytes = toBytes();
    boolean[] values = new boolean[bytes.length];
    for (int i = 0; i < bytes.length; ++i) values[i] = bytes[i] != 0;
    return values;
  }

  /**
   * The value of a one-element tensor (any dtype) as a double.
   *
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} when the tensor has more or fewer
   *     than one element
   */
  public double item() {
    double[] out = new double[1];
    try {
      KoilaException.check(KoilaNative.koila_tensor_item(address(), out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0];
  }

  /**
   * A concrete tensor with the value of this one: this tensor itself (a new handle sharing
   * it) when it is already concrete. The result of evaluating a lazy tensor does not require
   * grad: train through {@link #backward()} on the lazy loss.
   */
  public Tensor eval() {
    return produce(out -> KoilaNative.koila_eval(out, address()), this);
  }

  /**
   * The values printed as LibTorch prints them. Evaluates a lazy tensor (once).
   *
   * @throws KoilaException when evaluation fails
   */
  public String format() {
    try (Tensor value = eval()) {
      long a = value.address();
      try {
        return Text.read((buf, needed) -> KoilaNative.koila_tensor_to_string(a, buf, needed));
      } finally {
        Reference.reachabilityFence(value);
      }
    }
  }

  /**
   * The values as {@link #format()} prints them (evaluating a lazy tensor), or a description
   * when the tensor is closed or cannot be evaluated; never throws.
   */
  @Override
  public String toString() {
    if (isClosed()) return "Tensor(closed)";
    try {
      return format();
    } catch (KoilaException e) {
      String meta;
      try {
        meta = "shape " + Arrays.toString(shape()) + ", " + dtype() + (isLazy() ? ", lazy" : "");
      } catch (KoilaException again) {
        meta = "unknown";
      }
      return "Tensor(" + meta + ": cannot evaluate: " + e.getMessage() + ")";
    }
  }

  // ---------------------------------------------------------------------------------------
  // Sharing memory with direct buffers (DLPack, no copy)
  // ---------------------------------------------------------------------------------------

  /** The buffers a tensor can share: their element bytes, byte order and the dtypes they hold. */
  private enum BufferKind {
    BYTES(ByteBuffer.class, 1, b -> NATIVE, DType.values()), // any dtype; its order does not matter
    SHORTS(ShortBuffer.class, 2, b -> ((ShortBuffer) b).order(), DType.FLOAT16, DType.BFLOAT16),
    INTS(IntBuffer.class, 4, b -> ((IntBuffer) b).order(), DType.INT32),
    FLOATS(FloatBuffer.class, 4, b -> ((FloatBuffer) b).order(), DType.FLOAT32),
    LONGS(LongBuffer.class, 8, b -> ((LongBuffer) b).order(), DType.INT64),
    DOUBLES(DoubleBuffer.class, 8, b -> ((DoubleBuffer) b).order(), DType.FLOAT64);

    final Class<? extends Buffer> type;
    final int unit;
    final Function<Buffer, ByteOrder> order;
    final List<DType> dtypes;

    BufferKind(Class<? extends Buffer> type, int unit, Function<Buffer, ByteOrder> order, DType... dtypes) {
      this.type = type;
      this.unit = unit;
      this.order = order;
      this.dtypes = List.of(dtypes);
    }

    /** The kind of {@code buffer}; throws for one that cannot hold {@code dtype} as koila reads it. */
    static BufferKind of(Buffer buffer, DType dtype) {
      for (BufferKind kind : values()) {
        if (!kind.type.isInstance(buffer)) continue;
        if (!kind.dtypes.contains(dtype)) {
          throw KoilaException.invalid("fromDirectBuffer: a " + kind.type.getSimpleName() + " does not hold " + dtype);
        }
        ByteOrder order = kind.order.apply(buffer);
        if (order != NATIVE) {
          throw KoilaException.invalid("fromDirectBuffer: the buffer's byte order is " + order + ", but koila reads the"
              + " platform's (" + NATIVE + "): make it from a ByteBuffer with .order(ByteOrder.nativeOrder())");
        }
        return kind;
      }
      String name = buffer.getClass().getSimpleName();
      throw KoilaException.invalid("fromDirectBuffer: a " + name + " holds no koila dtype");
    }
  }

  /**
   * A concrete tensor over the memory of a direct buffer, without a copy: writes through koila
   * (an optimizer step on it, as a parameter) are seen in the buffer, and writes into the
   * buffer are seen by koila. The tensor covers the buffer's remaining elements, from its
   * position to its limit, as row-major elements of {@code dtype} in the platform's byte order
   * ({@link ByteOrder#nativeOrder()}); it has no batch dim (wrap it with {@link #lazy(long)}).
   *
   * <p>The buffer is kept reachable (a JNI global reference) until the last koila tensor
   * sharing its memory is freed, so it is never freed under koila; do not write into it while
   * koila runs on another thread. A ByteBuffer takes any dtype; a typed buffer must hold the
   * dtype (FloatBuffer: FLOAT32, DoubleBuffer: FLOAT64, LongBuffer: INT64, IntBuffer: INT32,
   * ShortBuffer: FLOAT16 or BFLOAT16) in the platform's byte order.
   *
   * <pre>{@code
   * FloatBuffer weights = ByteBuffer.allocateDirect(4 * 10 * 784).order(ByteOrder.nativeOrder()).asFloatBuffer();
   * Tensor w = Tensor.fromDirectBuffer(weights, new long[] {10, 784}, DType.FLOAT32).setRequiresGrad(true);
   * }</pre>
   *
   * @param buffer a direct buffer ({@link ByteBuffer#allocateDirect}, or a view of one)
   * @param shape the sizes (an empty array for a scalar)
   * @param dtype the element type
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for a buffer that is not direct, a
   *     typed buffer of another dtype or byte order, and when the buffer's remaining bytes are
   *     not exactly the shape's element count times {@code dtype.elementSize()} (the message
   *     gives both); {@link Code#UNSUPPORTED} for a read-only buffer (koila's tensors are
   *     writable), or a position not aligned to the element size
   */
  public static Tensor fromDirectBuffer(Buffer buffer, long[] shape, DType dtype) {
    if (buffer == null) throw KoilaException.invalid("argument 'buffer' is null");
    long[] dims = shapeArg(shape);
    dtypeArg(dtype);
    if (!buffer.isDirect()) {
      throw KoilaException.invalid("fromDirectBuffer: the buffer is not direct (make it with ByteBuffer.allocateDirect;"
          + " fromData copies a byte[])");
    }
    int unit = BufferKind.of(buffer, dtype).unit;
    long remaining = (long) buffer.remaining() * unit;
    long numel;
    try {
      numel = numelOf(dims);
    } catch (ArithmeticException e) {
      numel = Long.MAX_VALUE;
    }
    // A negative size is koila's to report; any other count must fill the buffer exactly.
    if (numel >= 0 && (numel > remaining / dtype.elementSize() || numel * dtype.elementSize() != remaining)) {
      throw KoilaException.invalid("fromDirectBuffer: shape " + Arrays.toString(dims) + " has "
          + (numel == Long.MAX_VALUE ? "more than 2^63" : String.valueOf(numel)) + " elements of " + dtype + " ("
          + dtype.elementSize() + " bytes each), but the buffer has " + remaining + " bytes from its position "
          + buffer.position() + " to its limit " + buffer.limit() + " (" + unit + " bytes per buffer element)");
    }
    long managed = KoilaNative.dlpack_wrap_buffer(buffer, (long) buffer.position() * unit, unit, dtype.value(), dims,
        buffer.isReadOnly() ? 1 : 0);
    // koila owns the struct from here on, also when it refuses it (it calls the deleter).
    return produce(out -> KoilaNative.koila_tensor_from_dlpack(out, managed, 1), buffer);
  }

  /** The fixed entries of KoilaNative.dlpack_layout, before the sizes and the strides. */
  private static final int LAYOUT_FIXED = 7;

  /**
   * A direct buffer over this tensor's memory, without a copy (a lazy tensor is evaluated
   * first): its bytes are the row-major elements in the platform's byte order (the buffer is
   * set to {@link ByteOrder#nativeOrder()}; view it with {@code asFloatBuffer()} and the like).
   * Writes into the buffer are seen by this tensor and every tensor sharing its memory, and
   * koila's in-place updates (an optimizer step) are seen in the buffer.
   *
   * <p>The memory stays valid as long as the buffer or any view of it is reachable, also after
   * this tensor is closed: the garbage collector's cleaner releases it (calls the DLPack
   * deleter, once) after the buffer became unreachable. There is no close: a ByteBuffer
   * cannot be invalidated safely.
   *
   * @throws KoilaException {@link Code#UNSUPPORTED} when the values are not contiguous and
   *     row-major (a transposed or narrowed view: read it with {@link #toBytes()}), not in host
   *     memory, or larger than a ByteBuffer (2 GiB)
   */
  public ByteBuffer toDirectBuffer() {
    int ndim = ndim();
    long[] out = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_tensor_to_dlpack(out, address(), 1));
    } finally {
      Reference.reachabilityFence(this);
    }
    long managed = out[0];
    Runnable release = new DlpackRelease(managed);
    try {
      long[] layout = new long[LAYOUT_FIXED + 2 * ndim];
      KoilaNative.dlpack_layout(managed, 1, layout);
      long nbytes = contiguousBytes(layout, ndim);
      if (nbytes == 0) {
        release.run();
        return ByteBuffer.allocateDirect(0).order(NATIVE);
      }
      ByteBuffer buffer = KoilaNative.dlpack_direct_buffer(layout[0], nbytes);
      // Views of the buffer (slices, asFloatBuffer) keep it reachable: the memory outlives them all.
      NativeHandle.CLEANER.register(buffer, release);
      return buffer.order(NATIVE);
    } catch (RuntimeException | Error e) {
      release.run();
      throw e;
    }
  }

  /** The byte count of an exported tensor's memory; throws unless a ByteBuffer can hold it. */
  private static long contiguousBytes(long[] layout, int ndim) {
    long deviceType = layout[1];
    if (deviceType != 1 && deviceType != 3) { // kDLCPU, kDLCUDAHost
      throw new KoilaException(Code.UNSUPPORTED, "toDirectBuffer: the tensor is not in host memory (DLPack device "
          + deviceType + ":" + layout[2] + ")");
    }
    long[] sizes = Arrays.copyOfRange(layout, LAYOUT_FIXED, LAYOUT_FIXED + ndim);
    long[] strides = Arrays.copyOfRange(layout, LAYOUT_FIXED + ndim, LAYOUT_FIXED + 2 * ndim);
    long numel = numelOf(sizes);
    long expected = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (sizes[d] != 1 && strides[d] != expected && numel > 1) {
        throw new KoilaException(Code.UNSUPPORTED, "toDirectBuffer: the tensor's values are not contiguous and"
            + " row-major (sizes " + Arrays.toString(sizes) + ", strides " + Arrays.toString(strides)
            + "); read them with toBytes()");
      }
      expected *= sizes[d];
    }
    long nbytes = numel * (layout[4] / 8);
    if (nbytes > Integer.MAX_VALUE) {
      throw new KoilaException(Code.UNSUPPORTED, "toDirectBuffer: " + nbytes + " bytes exceed a ByteBuffer");
    }
    return nbytes;
  }

  /** Calls the deleter of an exported DLPack struct, once, whoever runs it first. */
  private static final class DlpackRelease implements Runnable {
    private final AtomicLong managed;

    DlpackRelease(long managed) {
      this.managed = new AtomicLong(managed);
    }

    @Override
    public void run() {
      long m = managed.getAndSet(0);
      if (m != 0) KoilaNative.dlpack_delete(m, 1);
    }
  }

  // ---------------------------------------------------------------------------------------
  // Autograd
  // ---------------------------------------------------------------------------------------

  /**
   * Makes this concrete floating-point leaf (a parameter) record gradients, or stop.
   *
   * @return this tensor
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for a lazy tensor or a non-leaf,
   *     {@link Code#DTYPE} for an integer tensor
   */
  public Tensor setRequiresGrad(boolean flag) {
    try {
      KoilaException.check(KoilaNative.koila_tensor_set_requires_grad(address(), flag ? 1 : 0));
    } finally {
      Reference.reachabilityFence(this);
    }
    return this;
  }

  /**
   * Backpropagates from this scalar loss into the concrete leaves it was built from;
   * gradients add into existing ones. With a lazy batch, runs forward and backward chunk by
   * chunk under the memory budget, with gradients equal to the full-batch ones. A failed call
   * leaves every gradient as it was.
   *
   * @throws KoilaException {@link Code#OUT_OF_MEMORY} or {@link Code#NOT_SPLITTABLE} when the
   *     work cannot fit the budget
   */
  public void backward() {
    try {
      KoilaException.check(KoilaNative.koila_backward(address()));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /**
   * The gradient of this concrete leaf (or of the tensor a lazy input wraps), or null when it
   * has none. The result aliases the gradient: it sees later accumulation and zeroing.
   */
  public Tensor grad() {
    return produceOptional(out -> KoilaNative.koila_tensor_grad(out, address()), this);
  }

  /** Sets the gradient (when there is one) to zero in place. */
  public void zeroGrad() {
    try {
      KoilaException.check(KoilaNative.koila_tensor_zero_grad(address()));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** What evaluating this tensor ({@link Mode#FORWARD}) or a backward from it would do now. */
  public Plan plan(Mode mode) {
    return Plan.of(this, mode);
  }

  // ---------------------------------------------------------------------------------------
  // Operators: one method per op, generated from the operator table
  // ---------------------------------------------------------------------------------------

  // Generated from src/ops/ops.toml by scripts/gen_ops.py: edit the table, not this part.

  /** Elementwise sum, broadcasting. */
  public Tensor add(Tensor other) {
    return produce(out -> KoilaNative.koila_add(out, address(), required(other, "other")), this, other);
  }

  /** Elementwise difference, broadcasting. */
  public Tensor sub(Tensor other) {
    return produce(out -> KoilaNative.koila_sub(out, address(), required(other, "other")), this, other);
  }

  /** Elementwise product, broadcasting. */
  public Tensor mul(Tensor other) {
    return produce(out -> KoilaNative.koila_mul(out, address(), required(other, "other")), this, other);
  }

  /** True division (integer inputs give a floating result), broadcasting. */
  public Tensor div(Tensor other) {
    return produce(out -> KoilaNative.koila_div(out, address(), required(other, "other")), this, other);
  }

  /** Elementwise power, broadcasting. */
  public Tensor pow(Tensor other) {
    return produce(out -> KoilaNative.koila_pow(out, address(), required(other, "other")), this, other);
  }

  /** Elementwise maximum, broadcasting. */
  public Tensor maximum(Tensor other) {
    return produce(out -> KoilaNative.koila_maximum(out, address(), required(other, "other")), this, other);
  }

  /** Elementwise minimum, broadcasting. */
  public Tensor minimum(Tensor other) {
    return produce(out -> KoilaNative.koila_minimum(out, address(), required(other, "other")), this, other);
  }

  /** {@code a == b}, elementwise (a Bool tensor). */
  public Tensor eq(Tensor other) {
    return produce(out -> KoilaNative.koila_eq(out, address(), required(other, "other")), this, other);
  }

  /** {@code a != b}, elementwise (a Bool tensor). */
  public Tensor ne(Tensor other) {
    return produce(out -> KoilaNative.koila_ne(out, address(), required(other, "other")), this, other);
  }

  /** {@code a < b}, elementwise (a Bool tensor). */
  public Tensor lt(Tensor other) {
    return produce(out -> KoilaNative.koila_lt(out, address(), required(other, "other")), this, other);
  }

  /** {@code a <= b}, elementwise (a Bool tensor). */
  public Tensor le(Tensor other) {
    return produce(out -> KoilaNative.koila_le(out, address(), required(other, "other")), this, other);
  }

  /** {@code a > b}, elementwise (a Bool tensor). */
  public Tensor gt(Tensor other) {
    return produce(out -> KoilaNative.koila_gt(out, address(), required(other, "other")), this, other);
  }

  /** {@code a >= b}, elementwise (a Bool tensor). */
  public Tensor ge(Tensor other) {
    return produce(out -> KoilaNative.koila_ge(out, address(), required(other, "other")), this, other);
  }

  /** {@code a + s}. */
  public Tensor add(double s) {
    return produce(out -> KoilaNative.koila_add_scalar(out, address(), s), this);
  }

  /** {@code a - s}. */
  public Tensor sub(double s) {
    return produce(out -> KoilaNative.koila_sub_scalar(out, address(), s), this);
  }

  /** {@code a * s}. */
  public Tensor mul(double s) {
    return produce(out -> KoilaNative.koila_mul_scalar(out, address(), s), this);
  }

  /** {@code a / s}. */
  public Tensor div(double s) {
    return produce(out -> KoilaNative.koila_div_scalar(out, address(), s), this);
  }

  /** {@code a ^ s}. */
  public Tensor pow(double s) {
    return produce(out -> KoilaNative.koila_pow_scalar(out, address(), s), this);
  }

  /** {@code -x}, elementwise (also {@code -x} in Julia). */
  public Tensor neg() {
    return produce(out -> KoilaNative.koila_neg(out, address()), this);
  }

  /** {@code |x|}, elementwise. */
  public Tensor abs() {
    return produce(out -> KoilaNative.koila_abs(out, address()), this);
  }

  /** {@code e^x}, elementwise. */
  public Tensor exp() {
    return produce(out -> KoilaNative.koila_exp(out, address()), this);
  }

  /** The natural logarithm, elementwise. */
  public Tensor log() {
    return produce(out -> KoilaNative.koila_log(out, address()), this);
  }

  /** The square root, elementwise. */
  public Tensor sqrt() {
    return produce(out -> KoilaNative.koila_sqrt(out, address()), this);
  }

  /** {@code 1 / sqrt(x)}, elementwise. */
  public Tensor rsqrt() {
    return produce(out -> KoilaNative.koila_rsqrt(out, address()), this);
  }

  /** The sine, elementwise. */
  public Tensor sin() {
    return produce(out -> KoilaNative.koila_sin(out, address()), this);
  }

  /** The cosine, elementwise. */
  public Tensor cos() {
    return produce(out -> KoilaNative.koila_cos(out, address()), this);
  }

  /** The hyperbolic tangent, elementwise. */
  public Tensor tanh() {
    return produce(out -> KoilaNative.koila_tanh(out, address()), this);
  }

  /** The logistic sigmoid, elementwise. */
  public Tensor sigmoid() {
    return produce(out -> KoilaNative.koila_sigmoid(out, address()), this);
  }

  /** {@code max(x, 0)}, elementwise. */
  public Tensor relu() {
    return produce(out -> KoilaNative.koila_relu(out, address()), this);
  }

  /** GELU (exact, erf form), elementwise; x must be floating. */
  public Tensor gelu() {
    return produce(out -> KoilaNative.koila_gelu(out, address()), this);
  }

  /** SiLU ({@code x * sigmoid(x)}), elementwise; x must be floating. */
  public Tensor silu() {
    return produce(out -> KoilaNative.koila_silu(out, address()), this);
  }

  /** The error function, elementwise (integer inputs give a floating result). */
  public Tensor erf() {
    return produce(out -> KoilaNative.koila_erf(out, address()), this);
  }

  /** Hardswish ({@code x * relu6(x + 3) / 6}), elementwise; x must be floating. */
  public Tensor hardswish() {
    return produce(out -> KoilaNative.koila_hardswish(out, address()), this);
  }

  /** {@code max(x, 0) + slope * min(x, 0)}, elementwise. */
  public Tensor leakyRelu(double slope) {
    return produce(out -> KoilaNative.koila_leaky_relu(out, address(), slope), this);
  }

  /** Clamps into [lo, hi] (values end at hi when lo &gt; hi, as in PyTorch); neither may be NaN. */
  public Tensor clamp(double lo, double hi) {
    return produce(out -> KoilaNative.koila_clamp(out, address(), lo, hi), this);
  }

  /** Softmax along {@code dim}. */
  public Tensor softmax(long dim) {
    return produce(out -> KoilaNative.koila_softmax(out, address(), dim), this);
  }

  /** Log-softmax along {@code dim}. */
  public Tensor logSoftmax(long dim) {
    return produce(out -> KoilaNative.koila_log_softmax(out, address(), dim), this);
  }

  /**
   * Dropout with probability {@code p} (0 &lt;= p &lt;= 1); with {@code train} false the input passes through
   * unchanged.
   */
  public Tensor dropout(double p, boolean train) {
    return produce(out -> KoilaNative.koila_dropout(out, address(), p, train ? 1 : 0), this);
  }

  /** The matrix product, as torch.matmul (1-D, 2-D and broadcast batched cases). */
  public Tensor matmul(Tensor other) {
    return produce(out -> KoilaNative.koila_matmul(out, address(), required(other, "other")), this, other);
  }

  /** {@code x @ weight^T + bias} with weight [out, in] and bias [out] (or none). */
  public Tensor linear(Tensor weight, Tensor bias) {
    return produce(out -> KoilaNative.koila_linear(out, address(), required(weight, "weight"),
        addressOf(bias, "bias")), this, weight, bias);
  }

  /**
   * A 1-d convolution of [N, C, L] (or [C, L]) with weight [out, C/groups, k]. A missing stride, padding or dilation
   * is 1, 0, 1.
   */
  public Tensor conv1d(Tensor weight, Tensor bias, long[] stride, long[] padding, long[] dilation, long groups) {
    long[] strideArg = sizesArg(stride, 1, "stride");
    long[] paddingArg = sizesArg(padding, 1, "padding");
    long[] dilationArg = sizesArg(dilation, 1, "dilation");
    return produce(out -> KoilaNative.koila_conv1d(out, address(), required(weight, "weight"), addressOf(bias, "bias"),
        strideArg, paddingArg, dilationArg, groups), this, weight, bias);
  }

  /**
   * A 2-d convolution of [N, C, H, W] (or [C, H, W]) with weight [out, C/groups, kh, kw]. A missing stride, padding
   * or dilation is 1, 0, 1.
   */
  public Tensor conv2d(Tensor weight, Tensor bias, long[] stride, long[] padding, long[] dilation, long groups) {
    long[] strideArg = sizesArg(stride, 2, "stride");
    long[] paddingArg = sizesArg(padding, 2, "padding");
    long[] dilationArg = sizesArg(dilation, 2, "dilation");
    return produce(out -> KoilaNative.koila_conv2d(out, address(), required(weight, "weight"), addressOf(bias, "bias"),
        strideArg, paddingArg, dilationArg, groups), this, weight, bias);
  }

  /** 2-d max pooling; a missing stride is the kernel size, a missing padding 0. */
  public Tensor maxPool2d(long[] kernel, long[] stride, long[] padding, boolean ceilMode) {
    long[] kernelArg = sizesArg(longsArg(kernel, "kernel"), 2, "kernel");
    long[] strideArg = sizesArg(stride, 2, "stride");
    long[] paddingArg = sizesArg(padding, 2, "padding");
    return produce(out -> KoilaNative.koila_max_pool2d(out, address(), kernelArg, strideArg, paddingArg,
        ceilMode ? 1 : 0), this);
  }

  /** 2-d average pooling; a missing stride is the kernel size, a missing padding 0. */
  public Tensor avgPool2d(long[] kernel, long[] stride, long[] padding, boolean ceilMode) {
    long[] kernelArg = sizesArg(longsArg(kernel, "kernel"), 2, "kernel");
    long[] strideArg = sizesArg(stride, 2, "stride");
    long[] paddingArg = sizesArg(padding, 2, "padding");
    return produce(out -> KoilaNative.koila_avg_pool2d(out, address(), kernelArg, strideArg, paddingArg,
        ceilMode ? 1 : 0), this);
  }

  /** Adaptive average pooling to {@code output_size} [h, w]. */
  public Tensor adaptiveAvgPool2d(long... outputSize) {
    long[] outputSizeArg = sizesArg(longsArg(outputSize, "outputSize"), 2, "outputSize");
    return produce(out -> KoilaNative.koila_adaptive_avg_pool2d(out, address(), outputSizeArg), this);
  }

  /**
   * Nearest-neighbour upsampling of the last two dims of [N, C, H, W] (or [C, H, W]) by whole factors {@code scale}
   * [sh, sw] (each 1 or more): every pixel repeated sh x sw times, as PyTorch's F.interpolate(x, scale_factor=(sh,
   * sw), mode="nearest") does. The decoders of U-Nets use it.
   */
  public Tensor upsampleNearest2d(long... scale) {
    long[] scaleArg = sizesArg(longsArg(scale, "scale"), 2, "scale");
    return produce(out -> KoilaNative.koila_upsample_nearest2d(out, address(), scaleArg), this);
  }

  /**
   * Batch normalization over every dim but dim 1. In training it uses the batch's statistics (mixing samples, so
   * koila does not split it unless batch statistics per chunk are allowed) and updates the running statistics, when
   * given, each time it is evaluated.
   */
  public Tensor batchNorm(Tensor weight, Tensor bias, Tensor runningMean, Tensor runningVar, boolean training,
      double momentum, double eps) {
    return produce(out -> KoilaNative.koila_batch_norm(out, address(), addressOf(weight, "weight"),
        addressOf(bias, "bias"), addressOf(runningMean, "runningMean"), addressOf(runningVar, "runningVar"),
        training ? 1 : 0, momentum, eps), this, weight, bias, runningMean, runningVar);
  }

  /**
   * Layer normalization over the trailing dims of sizes {@code normalized_shape}; weight and bias (or none) are
   * shaped like them.
   */
  public Tensor layerNorm(long[] normalizedShape, Tensor weight, Tensor bias, double eps) {
    long[] normalizedShapeArg = longsArg(normalizedShape, "normalizedShape");
    return produce(out -> KoilaNative.koila_layer_norm(out, address(), normalizedShapeArg, addressOf(weight, "weight"),
        addressOf(bias, "bias"), eps), this, weight, bias);
  }

  /**
   * Rows of this weight [num, dim] picked by integer {@code indices} of any shape (0-based): the result is {@code
   * indices.shape + [dim]}.
   */
  public Tensor embedding(Tensor indices) {
    return produce(out -> KoilaNative.koila_embedding(out, address(), required(indices, "indices")), this, indices);
  }

  /** The sum over {@code dims} (all dims when empty). */
  public Tensor sum(long[] dims, boolean keepdim) {
    return produce(out -> KoilaNative.koila_sum(out, address(), dims, keepdim ? 1 : 0), this);
  }

  /** The mean over {@code dims} (all dims when empty). */
  public Tensor mean(long[] dims, boolean keepdim) {
    return produce(out -> KoilaNative.koila_mean(out, address(), dims, keepdim ? 1 : 0), this);
  }

  /** The largest values over {@code dims} (all dims when empty). */
  public Tensor amax(long[] dims, boolean keepdim) {
    return produce(out -> KoilaNative.koila_amax(out, address(), dims, keepdim ? 1 : 0), this);
  }

  /** The smallest values over {@code dims} (all dims when empty). */
  public Tensor amin(long[] dims, boolean keepdim) {
    return produce(out -> KoilaNative.koila_amin(out, address(), dims, keepdim ? 1 : 0), this);
  }

  /** Int64 indices of the largest value along {@code dim}. */
  public Tensor argmax(long dim, boolean keepdim) {
    return produce(out -> KoilaNative.koila_argmax(out, address(), dim, keepdim ? 1 : 0), this);
  }

  /** The same values with a new shape (one -1 allowed). The batch dim follows. */
  public Tensor reshape(long... shape) {
    long[] shapeArg = longsArg(shape, "shape");
    return produce(out -> KoilaNative.koila_reshape(out, address(), shapeArg), this);
  }

  /** The dims reordered: dim i of the result is dim {@code dims[i]}. */
  public Tensor permute(long... dims) {
    long[] dimsArg = longsArg(dims, "dims");
    return produce(out -> KoilaNative.koila_permute(out, address(), dimsArg), this);
  }

  /** Two dims swapped. */
  public Tensor transpose(long d0, long d1) {
    return produce(out -> KoilaNative.koila_transpose(out, address(), d0, d1), this);
  }

  /** Dims {@code start} to {@code end} (inclusive) merged into one. */
  public Tensor flatten(long start, long end) {
    return produce(out -> KoilaNative.koila_flatten(out, address(), start, end), this);
  }

  /** Removes {@code dim} when its size is 1 (else the shape is unchanged, as PyTorch). */
  public Tensor squeeze(long dim) {
    return produce(out -> KoilaNative.koila_squeeze(out, address(), dim), this);
  }

  /** Inserts a dim of size 1 at {@code dim}. */
  public Tensor unsqueeze(long dim) {
    return produce(out -> KoilaNative.koila_unsqueeze(out, address(), dim), this);
  }

  /** The tensors joined along the existing dim {@code dim}. */
  public static Tensor cat(Tensor[] tensors, long dim) {
    long[] handles = addresses(tensors, "tensors");
    return produce(out -> KoilaNative.koila_cat(out, handles, dim), (Object) tensors);
  }

  /** The tensors (of one shape) stacked along a new dim {@code dim}. */
  public static Tensor stack(Tensor[] tensors, long dim) {
    long[] handles = addresses(tensors, "tensors");
    return produce(out -> KoilaNative.koila_stack(out, handles, dim), (Object) tensors);
  }

  /** {@code length} entries of {@code dim} from {@code start}. */
  public Tensor narrow(long dim, long start, long length) {
    return produce(out -> KoilaNative.koila_narrow(out, address(), dim, start, length), this);
  }

  /** The entries of {@code dim} picked by the 1-D integer tensor {@code index} (0-based values). */
  public Tensor indexSelect(long dim, Tensor index) {
    return produce(out -> KoilaNative.koila_index_select(out, address(), dim, required(index, "index")), this, index);
  }

  /**
   * The cross entropy of logits [N, C, ...] against class indices [N, ...] (integer) or class probabilities shaped
   * like the logits. Class index -100 is ignored.
   */
  public Tensor crossEntropy(Tensor target, Reduction reduction) {
    if (reduction == null) throw KoilaException.invalid("argument 'reduction' is null");
    return produce(out -> KoilaNative.koila_cross_entropy(out, address(), required(target, "target"),
        reduction.value()), this, target);
  }

  /** The negative log likelihood of log-probabilities [N, C, ...] for class indices. */
  public Tensor nllLoss(Tensor target, Reduction reduction) {
    if (reduction == null) throw KoilaException.invalid("argument 'reduction' is null");
    return produce(out -> KoilaNative.koila_nll_loss(out, address(), required(target, "target"),
        reduction.value()), this, target);
  }

  /** The squared error against {@code target}. */
  public Tensor mseLoss(Tensor target, Reduction reduction) {
    if (reduction == null) throw KoilaException.invalid("argument 'reduction' is null");
    return produce(out -> KoilaNative.koila_mse_loss(out, address(), required(target, "target"),
        reduction.value()), this, target);
  }

  /** The absolute error against {@code target}. */
  public Tensor l1Loss(Tensor target, Reduction reduction) {
    if (reduction == null) throw KoilaException.invalid("argument 'reduction' is null");
    return produce(out -> KoilaNative.koila_l1_loss(out, address(), required(target, "target"),
        reduction.value()), this, target);
  }

  /** The binary cross entropy of logits against {@code target} probabilities. */
  public Tensor binaryCrossEntropyWithLogits(Tensor target, Reduction reduction) {
    if (reduction == null) throw KoilaException.invalid("argument 'reduction' is null");
    return produce(out -> KoilaNative.koila_binary_cross_entropy_with_logits(out, address(), required(target, "target"),
        reduction.value()), this, target);
  }

  /**
   * {@code softmax(q k^T / sqrt(E) + mask) v} with q [..., L, E], k [..., S, E], v [..., S, Ev]. A Bool {@code
   * attn_mask} keeps the positions that are true, a floating one is added; {@code is_causal} masks j &gt; i and may
   * be combined with a mask.
   */
  public static Tensor scaledDotProductAttention(Tensor q, Tensor k, Tensor v, Tensor attnMask, boolean isCausal) {
    return produce(out -> KoilaNative.koila_scaled_dot_product_attention(out, required(q, "q"), required(k, "k"),
        required(v, "v"), addressOf(attnMask, "attnMask"), isCausal ? 1 : 0), q, k, v, attnMask);
  }

  // End of the generated operators.

  // ---------------------------------------------------------------------------------------
  // Shorter forms of the operators, with PyTorch's defaults
  // ---------------------------------------------------------------------------------------

  /** A 1-d convolution with stride 1, no padding, dilation 1 and one group. */
  public Tensor conv1d(Tensor weight, Tensor bias) {
    return conv1d(weight, bias, null, null, null, 1);
  }

  /** A 2-d convolution with stride 1, no padding, dilation 1 and one group. */
  public Tensor conv2d(Tensor weight, Tensor bias) {
    return conv2d(weight, bias, null, null, null, 1);
  }

  /** 2-d max pooling with stride = kernel and no padding; {@code kernel}: 2 values, or 1 for both. */
  public Tensor maxPool2d(long... kernel) {
    return maxPool2d(kernel, null, null, false);
  }

  /** 2-d average pooling with stride = kernel and no padding; {@code kernel}: 2 values, or 1 for both. */
  public Tensor avgPool2d(long... kernel) {
    return avgPool2d(kernel, null, null, false);
  }

  /** The sum of all elements (a scalar). */
  public Tensor sum() {
    return sum(null, false);
  }

  /** The mean of all elements (a scalar). */
  public Tensor mean() {
    return mean(null, false);
  }

  /** The largest element (a scalar). */
  public Tensor amax() {
    return amax(null, false);
  }

  /** The smallest element (a scalar). */
  public Tensor amin() {
    return amin(null, false);
  }

  /** All dims merged into one. */
  public Tensor flatten() {
    return flatten(0, -1);
  }

  /** The tensors joined along the existing dim {@code dim}. */
  public static Tensor cat(List<? extends Tensor> tensors, long dim) {
    return cat(tensors == null ? null : tensors.toArray(new Tensor[0]), dim);
  }

  /** The tensors (of one shape) stacked along a new dim {@code dim}. */
  public static Tensor stack(List<? extends Tensor> tensors, long dim) {
    return stack(tensors == null ? null : tensors.toArray(new Tensor[0]), dim);
  }

  // ---------------------------------------------------------------------------------------
  // Half precision conversions
  // ---------------------------------------------------------------------------------------

  /** IEEE half and bfloat16 bit conversions (Java 11 has none). */
  static final class Half {
    private Half() {}

    static float toFloat(short half) {
      int bits = half & 0xffff;
      int sign = (bits & 0x8000) << 16;
      int exponent = (bits >>> 10) & 0x1f;
      int mantissa = bits & 0x3ff;
      if (exponent == 0x1f) return Float.intBitsToFloat(sign | 0x7f800000 | (mantissa << 13));
      if (exponent == 0) {
        float value = mantissa * 0x1p-24f; // zero or subnormal
        return sign != 0 ? -value : value;
      }
      return Float.intBitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
    }

    /** Rounds to nearest even; overflow gives infinity. */
    static short fromFloat(float value) {
      int bits = Float.floatToRawIntBits(value);
      int sign = (bits >>> 16) & 0x8000;
      int exponent = (bits >>> 23) & 0xff;
      int mantissa = bits & 0x7fffff;
      if (exponent == 0xff) { // infinity or NaN (kept quiet)
        return (short) (sign | 0x7c00 | (mantissa != 0 ? 0x200 | (mantissa >>> 13) : 0));
      }
      int e = exponent - 127 + 15;
      if (e >= 0x1f) return (short) (sign | 0x7c00);
      if (e <= 0) { // subnormal half, or zero
        if (e < -10) return (short) sign;
        int m = mantissa | 0x800000;
        int shift = 14 - e;
        int half = m >>> shift;
        int rest = m & ((1 << shift) - 1);
        int halfway = 1 << (shift - 1);
        if (rest > halfway || (rest == halfway && (half & 1) != 0)) ++half;
        return (short) (sign | half);
      }
      int half = (e << 10) | (mantissa >>> 13);
      int rest = mantissa & 0x1fff;
      if (rest > 0x1000 || (rest == 0x1000 && (half & 1) != 0)) ++half; // may carry into infinity
      return (short) (sign | half);
    }

    static float bfloat16ToFloat(short value) {
      return Float.intBitsToFloat((value & 0xffff) << 16);
    }

    /** Rounds to nearest even. */
    static short bfloat16FromFloat(float value) {
      int bits = Float.floatToRawIntBits(value);
      if (Float.isNaN(value)) return (short) ((bits >>> 16) | 0x40);
      int rounded = bits + 0x7fff + ((bits >>> 16) & 1);
      return (short) (rounded >>> 16);
    }
  }
}
