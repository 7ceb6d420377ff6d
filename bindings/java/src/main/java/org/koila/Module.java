package org.koila;

import java.lang.ref.Reference;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.koila.raw.KoilaNative;

/**
 * A TorchScript module (saved from Python with torch.jit.script or torch.jit.trace, or from
 * C++) or a torch.export program ({@code .pt2}, saved with torch.export.save), whose calls
 * are part of the lazy graph.
 *
 * <pre>{@code
 * try (Module model = Module.load("mlp.pt", "cpu")) {
 *   Tensor logits = model.forward(batch);   // lazy when batch is lazy
 * }
 * }</pre>
 *
 * <p>Closing the module is safe while results built from it or its parameters are still in
 * use: they keep alive what they need. A closed module throws on use. A module may move
 * between threads but must not be used from two threads at once.
 */
public final class Module extends NativeHandle {
  private Module(long address) {
    super(address, KoilaNative::koila_module_free);
  }

  @Override
  String kind() {
    return "module";
  }

  /**
   * Loads a module onto a device.
   *
   * @param path the .pt (TorchScript) or .pt2 (torch.export) file; the content decides
   * @param device "cpu", "cuda" or "cuda:N"
   * @throws KoilaException {@link Code#IO} (with the path) for a missing, unreadable or corrupt
   *     file, {@link Code#DEVICE} for an unknown device
   */
  public static Module load(String path, String device) {
    if (path == null) throw KoilaException.invalid("argument 'path' is null");
    long[] out = new long[1];
    KoilaException.check(KoilaNative.koila_module_load(out, path, device));
    return new Module(out[0]);
  }

  /** Loads a module onto the CPU. */
  public static Module load(String path) {
    return load(path, Tensor.DEFAULT_DEVICE);
  }

  /** Loads a module onto the CPU. */
  public static Module load(Path path) {
    return load(path, Tensor.DEFAULT_DEVICE);
  }

  /** Loads a module onto a device. */
  public static Module load(Path path, String device) {
    if (path == null) throw KoilaException.invalid("argument 'path' is null");
    return load(path.toString(), device);
  }

  /**
   * Saves the module with its current parameters. Atomic: the file at {@code path} is
   * afterwards the complete old file or the complete new one, whatever happens to the process
   * during the call.
   *
   * @throws KoilaException {@link Code#IO} when the file cannot be written
   */
  public void save(String path) {
    if (path == null) throw KoilaException.invalid("argument 'path' is null");
    try {
      KoilaException.check(KoilaNative.koila_module_save(address(), path));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** Saves the module with its current parameters. */
  public void save(Path path) {
    if (path == null) throw KoilaException.invalid("argument 'path' is null");
    save(path.toString());
  }

  /**
   * The result of {@code forward(inputs...)}: lazy if any input is, else computed at once
   * (recording gradients). It runs the module as it is now (training flag included);
   * parameters are shared, so later updates are seen by later evaluations.
   *
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for the wrong number or kind of
   *     inputs, {@link Code#SHAPE} for shapes the module rejects (with its complaint),
   *     {@link Code#UNSUPPORTED} when the module does not return one tensor
   */
  public Tensor forward(Tensor... inputs) {
    long m = address();
    long[] handles = Tensor.addresses(inputs, "inputs");
    return Tensor.produce(out -> KoilaNative.koila_module_forward(out, m, handles), this, inputs);
  }

  /**
   * Every result of {@code forward(inputs...)} when it returns several tensors: a tuple, a
   * list or a dict, nested ones flattened depth-first (dict entries in the order the module
   * returns them). Each is lazy when any input is, with its own batch dim or none; one call
   * runs the module once for all of them. A module that returns one tensor gives one.
   *
   * @return one tensor per result, null for a None entry
   * @throws KoilaException as {@link #forward}, and {@link Code#UNSUPPORTED} for a result
   *     that is not a tensor, None, or a tuple, list or dict of those
   */
  public Tensor[] forwardAll(Tensor... inputs) {
    long m = address();
    long[] handles = Tensor.addresses(inputs, "inputs");
    long[] count = new long[1];
    try {
      // The count first: with no room koila writes it and answers INVALID_ARGUMENT.
      long status = KoilaNative.koila_module_forward_all(null, count, m, handles);
      if (status != 0 && count[0] == 0) KoilaException.check(status);
      if (status != 0) KoilaNative.koila_status_free(status);
      long[] out = new long[Math.toIntExact(count[0])];
      KoilaException.check(KoilaNative.koila_module_forward_all(out, count, m, handles));
      Tensor[] results = new Tensor[out.length];
      for (int i = 0; i < out.length; ++i) results[i] = Tensor.adopt(out[i]);
      return results;
    } finally {
      Reference.reachabilityFence(this);
      Reference.reachabilityFence(inputs);
    }
  }

  /**
   * Sets the training flag of the module and its submodules, for calls built afterwards.
   *
   * @return this module
   */
  public Module train(boolean on) {
    try {
      KoilaException.check(KoilaNative.koila_module_train(address(), on ? 1 : 0));
    } finally {
      Reference.reachabilityFence(this);
    }
    return this;
  }

  /** True when the module is in training mode. */
  public boolean isTraining() {
    int[] out = new int[1];
    try {
      KoilaException.check(KoilaNative.koila_module_is_training(address(), out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return out[0] != 0;
  }

  /** The number of parameters of the module and its submodules. */
  public int numParameters() {
    long[] out = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_module_num_parameters(address(), out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return Math.toIntExact(out[0]);
  }

  private long index(int i) {
    if (i < 0) throw KoilaException.invalid("index " + i + " is negative");
    return i;
  }

  /**
   * The i-th parameter, in the order of named_parameters(). It aliases the module's
   * parameter: gradients and optimizer updates are seen by the module. A new handle owned by
   * the caller.
   *
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for an index out of range
   */
  public Tensor parameter(int i) {
    long n = index(i);
    return Tensor.produce(out -> KoilaNative.koila_module_parameter(out, address(), n), this);
  }

  /** The dotted name of the i-th parameter, for example {@code "fc1.weight"}. */
  public String parameterName(int i) {
    long n = index(i);
    long m = address();
    try {
      return Text.read((buf, needed) -> KoilaNative.koila_module_parameter_name(m, n, buf, needed));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** All parameters, in order (new handles owned by the caller; see {@link #parameter}). */
  public List<Tensor> parameters() {
    int n = numParameters();
    List<Tensor> params = new ArrayList<>(n);
    try {
      for (int i = 0; i < n; ++i) params.add(parameter(i));
    } catch (RuntimeException e) {
      params.forEach(Tensor::close);
      throw e;
    }
    return Collections.unmodifiableList(params);
  }

  /** The names of all parameters, in order. */
  public List<String> parameterNames() {
    int n = numParameters();
    List<String> names = new ArrayList<>(n);
    for (int i = 0; i < n; ++i) names.add(parameterName(i));
    return Collections.unmodifiableList(names);
  }

  /** All parameters by name, in order (new handles owned by the caller). */
  public Map<String, Tensor> namedParameters() {
    List<String> names = parameterNames();
    List<Tensor> params = parameters();
    Map<String, Tensor> map = new LinkedHashMap<>();
    for (int i = 0; i < names.size(); ++i) map.put(names.get(i), params.get(i));
    return Collections.unmodifiableMap(map);
  }

  /** What the module was loaded from: a TorchScript file or a torch.export program. */
  public ModuleKind moduleKind() {
    int[] out = new int[1];
    try {
      KoilaException.check(KoilaNative.koila_module_kind_of(address(), out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return ModuleKind.of(out[0]);
  }

  /** The number of buffers (batch norm's running statistics, ...) of the module and its submodules. */
  public int numBuffers() {
    long[] out = new long[1];
    try {
      KoilaException.check(KoilaNative.koila_module_num_buffers(address(), out));
    } finally {
      Reference.reachabilityFence(this);
    }
    return Math.toIntExact(out[0]);
  }

  /**
   * The i-th buffer, in the order of named_buffers(). It aliases the module's buffer: updates
   * koila makes (running statistics after a training step) are seen through it. A new handle
   * owned by the caller.
   *
   * @throws KoilaException {@link Code#INVALID_ARGUMENT} for an index out of range
   */
  public Tensor buffer(int i) {
    long n = index(i);
    return Tensor.produce(out -> KoilaNative.koila_module_buffer(out, address(), n), this);
  }

  /** The dotted name of the i-th buffer, for example {@code "bn1.running_mean"}. */
  public String bufferName(int i) {
    long n = index(i);
    long m = address();
    try {
      return Text.read((buf, needed) -> KoilaNative.koila_module_buffer_name(m, n, buf, needed));
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** All buffers by name, in order (new handles owned by the caller). */
  public Map<String, Tensor> namedBuffers() {
    int n = numBuffers();
    Map<String, Tensor> map = new LinkedHashMap<>();
    try {
      for (int i = 0; i < n; ++i) map.put(bufferName(i), buffer(i));
    } catch (RuntimeException e) {
      map.values().forEach(Tensor::close);
      throw e;
    }
    return Collections.unmodifiableMap(map);
  }
}
