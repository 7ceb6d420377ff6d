package org.koila;

import org.koila.raw.koila_module_kind;

/** What a {@link Module} was loaded from, as {@code koila_module_kind} in koila.h. */
public enum ModuleKind {
  /** A TorchScript file (torch.jit.script or torch.jit.trace, or C++). */
  TORCHSCRIPT(koila_module_kind.KOILA_MODULE_TORCHSCRIPT),
  /**
   * A program saved by torch.export.save (PyTorch 2.x, {@code .pt2}): it keeps the mode and
   * the static shapes it was exported with.
   */
  EXPORTED(koila_module_kind.KOILA_MODULE_EXPORTED);

  private final int value;

  ModuleKind(int value) {
    this.value = value;
  }

  /** The numeric value in koila.h. */
  public int value() {
    return value;
  }

  static ModuleKind of(int value) {
    for (ModuleKind k : values()) if (k.value == value) return k;
    throw new KoilaException(Code.INTERNAL, "unknown module kind " + value);
  }
}
