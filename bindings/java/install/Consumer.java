import org.koila.Koila;
import org.koila.Tensor;

/** Built and run against an installed prefix (ctest java.install_prefix). */
public final class Consumer {
  public static void main(String[] args) {
    try (Tensor x = Tensor.fromFloats(new float[] {1, 2, 3, 4, 5, 6}, 3, 2);
        Tensor lazy = x.lazy(0);
        Tensor sum = lazy.sum()) {
      double value = sum.item();
      if (value != 21.0) throw new AssertionError("sum is " + value);
      System.out.println("koila " + Koila.version() + " from Java: sum = " + value);
    }
  }
}
